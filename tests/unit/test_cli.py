from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from multikueue import __version__
from multikueue.cli import main


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["--version"])
    assert e.value.code == 0
    assert capsys.readouterr().out.strip() == f"multikueue {__version__}"


def test_help_lists_the_commands() -> None:
    out = subprocess.run([sys.executable, "-m", "multikueue", "--help"], capture_output=True, text=True, check=True)
    assert "testbed" in out.stdout


def test_an_unknown_command_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["nonsense"])
    assert e.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_run_refuses_a_connection_bound_below_one(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["run", "--max-connections", "0"])
    assert e.value.code == 2
    assert "--max-connections: must be at least 1, got 0" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["status", "PipelineRun.v1.tekton.dev", "no-slash"],
            "multikueue status: give the object as NAMESPACE/NAME, got 'no-slash'",
        ),
        (["status", "PipelineRun", "ns/run"], "multikueue status: must be in 'Kind.version.group' format"),
        (["status", "PipelineRun.v1.tekton.dev", "ns/run"], "multikueue status: kubeconfig "),
        (
            ["status", "PipelineRun.v1.tekton.dev", "ns/run", "--worker-kubeconfig", "worker1"],
            "multikueue status: --worker-kubeconfig: give WORKER=PATH, got 'worker1'",
        ),
        (
            ["status", "PipelineRun.v1.tekton.dev", "ns/run", "--worker-kubeconfig", "worker1=/nonexistent/kc"],
            "multikueue status: --worker-kubeconfig worker1=/nonexistent/kc: [Errno 2] No such file or directory",
        ),
    ],
)
def test_status_refuses_bad_input_in_one_line(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "missing"))  # the same answers whatever this machine has
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(said), err
    assert len(err.strip().splitlines()) == 1, err


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--metrics-bind-address", "8443"], "--metrics-bind-address must be host:port or :port, got '8443'"),
        (["--health-probe-bind-address", "h:99999"],
         "--health-probe-bind-address must be host:port or :port, got 'h:99999'"),
        (["--http-address", "0.0.0.0:8080"], "--http-address is gone: /metrics is served over HTTPS on "
         "--metrics-bind-address (default 127.0.0.1:8443) and the probes on --health-probe-bind-address"),
    ],
)  # fmt: skip
def test_run_refuses_an_address_that_is_not_host_port(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"multikueue: {said}"), err
    assert len(err.splitlines()) == 1, err


@pytest.mark.parametrize(
    ("value", "address"),
    [("127.0.0.1:8443", ("127.0.0.1", 8443)), (":8443", ("0.0.0.0", 8443)), ("[::1]:8081", ("::1", 8081)),
     ("0", None), ("", None)],
)  # fmt: skip
def test_addresses_as_controller_runtime_reads_them(value: str, address: tuple[str, int] | None) -> None:
    from multikueue.cli import _address

    assert _address("--metrics-bind-address", value) == address


def test_metrics_are_secure_unless_told_false_as_go_flags_are_written() -> None:
    from multikueue.cli import _build_parser

    parse = _build_parser().parse_args
    assert parse(["run"]).metrics_secure is True
    assert parse(["run", "--metrics-secure"]).metrics_secure is True
    assert parse(["run", "--metrics-secure=false"]).metrics_secure is False
    assert parse(["run", "--metrics-secure", "0"]).metrics_secure is False
    with pytest.raises(SystemExit):
        parse(["run", "--metrics-secure=maybe"])
