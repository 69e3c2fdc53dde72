"""What `pip install multikueue` gets: the controller and its CLI, the test bed's client only with its extra."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import pytest

from multikueue import cli
from multikueue.testing import binaries

ROOT = Path(__file__).resolve().parents[2]


def test_the_wheel_holds_the_package_only_and_needs_the_test_bed_extra_for_its_client(tmp_path: Path) -> None:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(tmp_path),
                    str(ROOT)], check=True, timeout=600)  # fmt: skip
    [wheel] = tmp_path.glob("multikueue-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    strays = [n for n in names if not n.startswith(("multikueue/", "multikueue-"))]
    assert strays == [], "only the package and its metadata (no tests, bench, e2e)"
    assert "multikueue/py.typed" in names
    requires = [
        line.removeprefix("Requires-Dist: ") for line in metadata.splitlines() if line.startswith("Requires-Dist:")
    ]
    runtime = [r for r in requires if "extra ==" not in r]
    assert not [r for r in runtime if r.lower().startswith(("kubernetes", "pytest", "testcontainers"))], runtime
    assert [r for r in requires if r.startswith("kubernetes_asyncio") and 'extra == "testbed"' in r]


def test_the_cli_lists_the_optional_programs_the_test_bed_builds() -> None:
    assert cli.OPTIONAL_KUBERNETES_COMMANDS == binaries.OPTIONAL_KUBERNETES_COMMANDS


@pytest.mark.parametrize("argv", [["demo"], ["testbed", "up"], ["testbed", "binaries"]])
def test_a_test_bed_command_without_its_extra_is_one_line(
    argv: list[str], monkeypatch: pytest.MonkeyPatch, capsys: Any
) -> None:
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"multikueue: `multikueue {argv[0]}` needs the local test bed: pip install 'multikueue[testbed]'"
