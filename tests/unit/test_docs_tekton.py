"""docs/tekton.md against what the tests run: its marked blocks are run verbatim by the kind scenario; every other
command must be what the suite's own set-up (e2e/wiring.py) does on kind, or a valid ``multikueue`` command."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from e2e import tekton_page, wiring
from e2e.providers.kind import KindEnvironment
from multikueue import cli

ROOT = tekton_page.ROOT


def _targets(commands: list[list[str]]) -> set[tuple[str, str]]:
    """What a set of commands applies: ``(how, path relative to the repository)`` for each ``-k``/``-f`` of an
    ``apply``, each ``--from-file`` and each script run."""
    found = set()
    for words in commands:
        if "/" in words[0]:
            found.add(("script", _relative(words[0])))
        for i, word in enumerate(words[1:], start=1):
            if word in ("-k", "-f") and "apply" in words and words[i + 1] != "-":
                found.add((f"apply {word}", _relative(words[i + 1])))
            if word.startswith("--from-file="):
                found.add(("configmap", _relative(word.rsplit("=", 1)[1])))
    return found


def _relative(path: str) -> str:
    return str(Path(path).resolve().relative_to(ROOT)) if Path(path).is_absolute() else path


def _commands(*, marked: bool) -> list[list[str]]:
    return [c for b in tekton_page.blocks() if (b.mark is not None) == marked for c in b.commands()]


def test_the_page_has_one_block_for_each_place_the_kind_scenario_installs_the_integration() -> None:
    assert sorted(b.mark for b in tekton_page.blocks() if b.mark) == ["manager", "workers"]
    assert _targets(_commands(marked=True)) == {
        ("apply -k", "config/worker-integration"),
        ("apply -k", "config/integration"),
        ("configmap", "examples/tekton/integration-config.yaml"),
    }


def test_every_file_the_page_names_exists() -> None:
    every = _targets(_commands(marked=True) + _commands(marked=False))
    every |= {("create -f", w[w.index("-f") + 1]) for w in _commands(marked=False) if "create" in w and "-f" in w}
    missing = [path for _, path in every if not (ROOT / path).exists()]
    assert not missing, missing
    assert len(every) >= 9


def test_the_set_up_on_the_page_is_the_suites_own_on_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    """e2e/wiring.py's set-up, recorded instead of run, with the kind provider's ConfigMap text: the page's other
    ``apply``, ConfigMap and script commands are exactly these."""
    recorded: list[list[str]] = []

    def kubectl(env: Any, cluster: str, *args: str, stdin: str | None = None) -> str:
        recorded.append(["kubectl", "--context", cluster, *args])
        return ""

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        recorded.append(list(argv))
        return subprocess.CompletedProcess(argv, 0, "", "")

    monkeypatch.setattr(wiring, "kubectl", kubectl)
    monkeypatch.setattr(subprocess, "run", run)  # connect_workers runs its script through it
    env: Any = SimpleNamespace(kubectl="kubectl", kubeconfig_path=Path("kubeconfig"),
                               dispatcher_config=KindEnvironment.dispatcher_config,
                               server_seen_by_dispatcher=lambda worker: f"https://{worker}:6443")  # fmt: skip
    wiring.apply_manifests(env)
    wiring.connect_workers(env)
    assert _targets(_commands(marked=False)) == _targets(recorded)


def test_every_multikueue_command_on_the_page_parses() -> None:
    parser = cli._build_parser()
    commands = [w for w in _commands(marked=False) if w[0] == "multikueue"]
    assert {w[1] for w in commands} == {"status", "logs"}
    for words in commands:
        try:
            parser.parse_args(words[1:])
        except SystemExit:
            pytest.fail(f"not a valid command: {' '.join(words)}")


def test_commands_are_read_as_bash_reads_them() -> None:
    page = (
        "<!-- run by the kind scenario: x -->\n```sh\nfor w in a b; do\n"
        "  kubectl --context $w apply \\\n    -k d |\n  cat\ndone\n```\n"
    )
    [block] = tekton_page.blocks(page)
    assert block.mark == "x"
    assert block.commands() == [["kubectl", "--context", "$w", "apply", "-k", "d"], ["cat"]]
