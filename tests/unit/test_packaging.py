"""What `pip install multikueue` gets: the controller and its CLI. The test bed and the demo are another distribution,
multikueue-testbed (testbed/), which the controller's wheel and image never carry."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from multikueue import __version__, cli
from multikueue_testbed import binaries

ROOT = Path(__file__).resolve().parents[2]
TESTBED_PACKAGE = ROOT / "testbed" / "multikueue_testbed"


@dataclass(frozen=True)
class Wheel:
    names: list[str]
    metadata: str

    def field(self, name: str) -> list[str]:
        return [line.removeprefix(f"{name}: ") for line in self.metadata.splitlines() if line.startswith(f"{name}: ")]


def _checkout(target: Path) -> Path:
    """A copy of what a clean checkout holds for both builds. Built in the working tree, setuptools would write
    build/ there and package whatever an earlier build left in build/lib (a moved module included)."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build")
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, target / name)
    for name in ("multikueue", "testbed"):
        shutil.copytree(ROOT / name, target / name, ignore=ignore)
    return target


def _read(wheel_dir: Path, distribution: str) -> Wheel:
    [wheel] = wheel_dir.glob(f"{distribution}-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    return Wheel(names, metadata)


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Wheel]:
    """Both distributions built from a copy of the checkout, side by side (`--no-deps`: pip's isolated build
    fetches the build backend only)."""
    source = _checkout(tmp_path_factory.mktemp("checkout"))
    out = tmp_path_factory.mktemp("wheels")
    pip_wheel = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(out)]
    builds = [subprocess.Popen([*pip_wheel, str(project)]) for project in (source, source / "testbed")]
    try:
        assert [build.wait(timeout=600) for build in builds] == [0, 0]
    finally:
        for build in builds:
            build.kill()  # only one still running after a timeout: never left behind
    return {"multikueue": _read(out, "multikueue"), "multikueue-testbed": _read(out, "multikueue_testbed")}


def test_the_runtime_wheel_holds_the_controller_and_no_test_bed(wheels: dict[str, Wheel]) -> None:
    wheel = wheels["multikueue"]
    strays = [n for n in wheel.names if not n.startswith(("multikueue/", f"multikueue-{__version__}.dist-info/"))]
    assert strays == [], "only the package and its metadata (no test bed, tests, bench, e2e)"
    assert [n for n in wheel.names if "testbed" in n or "/testing/" in n or n.endswith("/demo.py")] == []
    assert "multikueue/py.typed" in wheel.names
    assert "multikueue/cli.py" in wheel.names
    requires = wheel.field("Requires-Dist")
    runtime = [r for r in requires if "extra ==" not in r]
    assert not [r for r in runtime if r.lower().startswith(("kubernetes", "pytest", "testcontainers"))], runtime
    assert "testbed" not in wheel.field("Provides-Extra"), "the test bed is its own distribution, not an extra"


def test_the_testbed_wheel_holds_the_test_bed_and_the_demo_and_pins_the_controller(wheels: dict[str, Wheel]) -> None:
    wheel = wheels["multikueue-testbed"]
    modules = {n for n in wheel.names if n.endswith(".py")}
    assert modules == {f"multikueue_testbed/{p.name}" for p in TESTBED_PACKAGE.glob("*.py")}
    assert {"multikueue_testbed/demo.py", "multikueue_testbed/testbed.py", "multikueue_testbed/py.typed"} <= set(
        wheel.names
    )
    strays = [n for n in wheel.names if not n.startswith(("multikueue_testbed/", f"multikueue_testbed-{__version__}."))]
    assert strays == [], "the test bed and its metadata only: the controller comes from its own wheel"
    assert wheel.field("Version") == [__version__], "released together with the controller"
    requires = wheel.field("Requires-Dist")
    assert f"multikueue=={__version__}" in requires, requires
    assert [r for r in requires if r.startswith("kubernetes_asyncio") and "extra ==" not in r], requires


def test_the_cli_lists_the_optional_programs_the_test_bed_builds() -> None:
    assert cli.OPTIONAL_KUBERNETES_COMMANDS == binaries.OPTIONAL_KUBERNETES_COMMANDS


@pytest.mark.parametrize("argv", [["demo"], ["testbed", "up"], ["testbed", "binaries"]])
def test_a_test_bed_command_without_the_test_bed_is_one_line(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "multikueue_testbed" else find_spec(name, *a)
    )
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err == (
        f"multikueue: `multikueue {argv[0]}` needs the local test bed, the multikueue-testbed distribution: "
        "pip install ./testbed (from a checkout of the repository)\n"
    )
