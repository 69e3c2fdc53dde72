"""The soak ends through its clean-up on SIGTERM and on Ctrl-C, also when started in the background by a shell (which
leaves SIGINT ignored): a soak stopped otherwise leaves the API servers a fault had restarted running."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import pytest

# A stand-in for the soak's main: its clean-up runs in ``finally`` around ``anyio.run``, as bench.soak.main's does.
CHILD = textwrap.dedent("""
    import os, signal, sys
    import anyio
    from bench.soak import stop_on_signals

    async def soak() -> None:
        print("running", flush=True)
        await anyio.sleep(60)

    stop_on_signals()
    try:
        anyio.run(soak)
    except KeyboardInterrupt:
        print("interrupted", flush=True)
    finally:
        print("cleaned up", flush=True)
""")


def _ignore_sigint() -> None:  # what `cmd &` in a non-interactive shell does to the child
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("sent", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_soak_through_its_clean_up(sent: signal.Signals) -> None:
    child = subprocess.Popen([sys.executable, "-c", CHILD], stdout=subprocess.PIPE, text=True,
                             preexec_fn=_ignore_sigint)  # fmt: skip
    try:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "running"
        child.send_signal(sent)
        out, _ = child.communicate(timeout=30)
    finally:
        child.kill()
        child.wait(timeout=10)
    assert out.split() == ["interrupted", "cleaned", "up"], out
