"""How long a stopping process keeps answering: every stop but Ctrl-C, and only when a webhook is served."""

from __future__ import annotations

import signal

import pytest

from multikueue.cli import _build_parser
from multikueue.shutdown import DEFAULT_SHUTDOWN_DELAY, drain_delay


@pytest.mark.parametrize("signum", [signal.SIGTERM, None], ids=["a Pod's termination", "a lost Lease, a failure"])
def test_a_stop_with_a_webhook_waits_the_delay(signum: int | None) -> None:
    assert drain_delay(signum, True, 7.5) == 7.5
    assert drain_delay(signum, True, -1) == 0.0


@pytest.mark.parametrize(
    ("signum", "serves_webhook"),
    [(signal.SIGINT, True), (signal.SIGTERM, False), (None, False)],
    ids=["ctrl-c stops at once", "no webhook to keep answering", "nor after a lost Lease"],
)
def test_no_wait_otherwise(signum: int | None, serves_webhook: bool) -> None:
    assert drain_delay(signum, serves_webhook, 7.5) == 0.0


def test_the_flag_defaults_to_a_few_seconds_and_refuses_nonsense(capsys: pytest.CaptureFixture[str]) -> None:
    parser = _build_parser()
    assert parser.parse_args(["run"]).shutdown_delay == DEFAULT_SHUTDOWN_DELAY > 0
    assert parser.parse_args(["run", "--shutdown-delay", "0"]).shutdown_delay == 0.0
    for bad in ("-1", "soon"):
        with pytest.raises(SystemExit):
            parser.parse_args(["run", "--shutdown-delay", bad])
        assert "--shutdown-delay" in capsys.readouterr().err
