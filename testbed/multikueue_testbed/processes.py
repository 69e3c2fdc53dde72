"""Child processes of the test bed: started, signalled and reaped by PID, never leaked.

Two safety nets stop a crashed or killed parent from leaving servers behind:
- every child asks the kernel for SIGKILL when its parent dies (``PR_SET_PDEATHSIG``);
- a work directory records its owner's PID, so the next bed removes directories of owners that are gone.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import os
import shutil
import signal
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path

_PR_SET_PDEATHSIG = 1
OWNER_FILE = "owner.pid"


def _die_with_parent() -> None:  # runs in the child between fork and exec
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


class ManagedProcess:
    """One server process with its own log file, in its own process group."""

    def __init__(self, name: str, argv: Sequence[str], log_path: Path, env: dict[str, str] | None = None):
        self.name = name
        self.argv = list(argv)
        self.log_path = log_path
        self.env = env
        self._popen: subprocess.Popen[bytes] | None = None

    @property
    def pid(self) -> int | None:
        return self._popen.pid if self._popen else None

    def start(self) -> None:
        if self.running:
            raise RuntimeError(f"{self.name} is already running as PID {self.pid}")
        # PDEATHSIG fires when the forking *thread* exits, so only arm it from the main thread.
        preexec = _die_with_parent if threading.current_thread() is threading.main_thread() else None
        with self.log_path.open("ab") as log:
            self._popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
                preexec_fn=preexec,
            )

    @property
    def running(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    @property
    def returncode(self) -> int | None:
        return self._popen.poll() if self._popen else None

    def signal(self, sig: signal.Signals) -> None:
        if self.running and self._popen:
            self._popen.send_signal(sig)

    def stop(self, *, grace: float = 10.0) -> None:
        """SIGTERM, then SIGKILL after ``grace`` seconds; always reaps the process."""
        if not self._popen:
            return
        if self._popen.poll() is None:
            self._popen.send_signal(signal.SIGCONT)  # a paused process cannot act on SIGTERM
            self._popen.terminate()
            try:
                self._popen.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                self._popen.kill()
                self._popen.wait(timeout=30)
        self._popen.wait()

    def kill(self) -> None:
        """SIGKILL, as a crash or a lost machine would."""
        if self._popen and self._popen.poll() is None:
            self._popen.kill()
        if self._popen:
            self._popen.wait(timeout=30)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return "\n".join(text.splitlines()[-lines:])


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim_workdir(path: Path) -> None:
    (path / OWNER_FILE).write_text(str(os.getpid()))


def sweep_stale_workdirs(parent: Path, prefix: str) -> list[Path]:
    """Remove work directories whose owner process is gone, ending any of their servers still alive.

    A server is identified as ours only when its command line names that directory, so an unrelated
    process that reused a PID is never touched.
    """
    removed: list[Path] = []
    for workdir in parent.glob(f"{prefix}*"):
        owner_file = workdir / OWNER_FILE
        try:
            owner = int(owner_file.read_text())
        except (OSError, ValueError):
            continue  # not fully created yet, or not ours
        if _pid_alive(owner):
            continue
        for pid in _pids_mentioning(str(workdir)):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        shutil.rmtree(workdir, ignore_errors=True)
        removed.append(workdir)
    return removed


def _pids_mentioning(text: str) -> list[int]:
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in cmdline:
            pids.append(int(proc.name))
    return pids


def wait_until_gone(pid: int, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not _pid_alive(pid):
            return True
        time.sleep(0.05)
    return not _pid_alive(pid)
