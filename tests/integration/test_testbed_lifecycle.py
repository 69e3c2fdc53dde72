"""The test bed leaves nothing behind: not on a clean stop, a failed start, or when its owner is killed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from multikueue_testbed import TestBed, TestBedError, processes
from multikueue_testbed.testbed import WORKDIR_PREFIX


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is dead for our purposes: it holds no port and runs no code.
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().split(")")[-1].split()[0] != "Z"


def test_stop_ends_every_server_and_removes_the_work_directory(tmp_path: Path) -> None:
    with TestBed(clusters=("solo",), base_dir=tmp_path) as bed:
        workdir = bed.workdir
        assert workdir is not None
        solo = bed.cluster("solo")
        assert bed.etcd
        assert solo.process
        pids = [bed.etcd.pid, solo.process.pid]
        assert all(_alive(p) for p in pids)
        assert solo.ready()
    assert not any(_alive(p) for p in pids)
    assert not workdir.exists()
    assert list(tmp_path.glob(f"{WORKDIR_PREFIX}*")) == []


def test_failed_start_reports_the_servers_log_and_cleans_up(tmp_path: Path) -> None:
    bed = TestBed(clusters=("broken",), base_dir=tmp_path, apiserver_args=["--no-such-flag=1"])
    with pytest.raises(TestBedError) as failure, bed:
        pytest.fail("a bed with a bad apiserver flag must not start")
    assert "broken's kube-apiserver exited" in str(failure.value)
    assert "no-such-flag" in str(failure.value)
    assert list(tmp_path.glob(f"{WORKDIR_PREFIX}*")) == []
    assert processes._pids_mentioning(str(tmp_path)) == []


def test_servers_die_with_a_killed_owner_and_the_next_bed_sweeps_its_directory(tmp_path: Path) -> None:
    owner_script = textwrap.dedent(
        f"""
        import json, sys, threading
        from pathlib import Path
        from multikueue_testbed import TestBed
        bed = TestBed(clusters=("orphan",), base_dir=Path({str(tmp_path)!r}), progress=lambda m: None)
        bed.start()
        print(json.dumps({{"workdir": str(bed.workdir), "pids": [bed.etcd.pid, bed.cluster("orphan").process.pid]}}),
              flush=True)
        threading.Event().wait()
        """
    )
    owner = subprocess.Popen([sys.executable, "-c", owner_script], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout
        started = json.loads(owner.stdout.readline())
    finally:
        owner.send_signal(signal.SIGKILL)  # no finally block, no atexit: only the kernel can clean up
        owner.wait(timeout=30)
    workdir = Path(started["workdir"])
    for pid in started["pids"]:
        assert processes.wait_until_gone(pid, timeout=15) or not _alive(pid), f"server {pid} outlived its owner"
    assert workdir.exists()  # nobody removed it yet

    removed = processes.sweep_stale_workdirs(tmp_path, WORKDIR_PREFIX)
    assert removed == [workdir]
    assert not workdir.exists()
