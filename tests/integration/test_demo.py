"""The README's main job, as a newcomer runs it: the story completes and everything is removed afterwards."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from multikueue.testing.testbed import WORKDIR_PREFIX


def test_the_demo_dispatches_mirrors_finishes_and_cleans_up() -> None:
    argv = [sys.executable, "-m", "multikueue", "demo", "--once"]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    for line in (
        "MultiKueueClusters worker1 and worker2: Active=True",
        "the dispatcher nominated both workers and copied the Workload to each",
        'admission check Ready: The workload was admitted on "worker1"; clusterName=worker1',
        "PipelineRun hello created on worker1 without managedBy",
        "the manager's PipelineRun shows Succeeded=Unknown/Running: the worker's status, mirrored",
        "manager PipelineRun: Succeeded=True (Succeeded); manager Workload Finished",
        "nothing left on the workers",
    ):
        assert line in out, f"missing {line!r} in:\n{out}"
    assert "[playing Kueue on worker1]" in out, "the demo must say which parts it plays"
    # Its own work directory (named in its output) is gone; other beds on this machine are none of its business.
    found = re.search(rf"log: (\S*/{WORKDIR_PREFIX}\w+)/dispatcher.log", out)
    assert found, out
    assert not Path(found.group(1)).exists(), "the demo's clusters and files are removed on exit"
