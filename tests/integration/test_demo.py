"""The README's main job, as a newcomer runs it: the story completes and everything is removed afterwards."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from multikueue_testbed.testbed import WORKDIR_PREFIX

STORIES = {
    "direct": (
        "MultiKueueClusters worker1 and worker2: Active=True",
        "no Workload, no queue: the dispatcher places it itself",
        "placed on worker1 (condition MultiKueuePlacement=True, and an Event); every worker was weighed:",
        "    worker1: fits (0/20 running, score 0.00, tier 1)",
        "    worker2: rejected: in spill-over tier 2, used only when tier 1 has no room",
        "PipelineRun hello created on worker1 without managedBy",
        "the manager's PipelineRun shows Succeeded=Unknown/Running: the worker's status, mirrored",
        "manager PipelineRun: Succeeded=True (Succeeded); phase Finished",
        "nothing left on the workers",
    ),
    "kueue": (
        "MultiKueueClusters worker1 and worker2: Active=True",
        "the dispatcher nominated both workers and copied the Workload to each",
        'admission check Ready: The workload was admitted on "worker1"; clusterName=worker1',
        "PipelineRun hello created on worker1 without managedBy",
        "the manager's PipelineRun shows Succeeded=Unknown/Running: the worker's status, mirrored",
        "manager PipelineRun: Succeeded=True (Succeeded); manager Workload Finished",
        "nothing left on the workers",
    ),
}


@pytest.mark.parametrize("mode", ["direct", "kueue"])
def test_the_demo_dispatches_mirrors_finishes_and_cleans_up(mode: str) -> None:
    argv = [sys.executable, "-m", "multikueue", "demo", "--once", "--mode", mode]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=300, check=False)
    out = result.stdout
    assert result.returncode == 0, out + result.stderr
    for line in STORIES[mode]:
        assert line in out, f"missing {line!r} in:\n{out}"
    # The demo says which parts it plays: direct mode plays no Kueue part at all, only Tekton's status writes.
    if mode == "direct":
        assert "[standing in for Tekton on worker1]" in out
        assert "playing Kueue" not in out
        assert "playing tekton-kueue" not in out
    else:
        assert "[playing Kueue on worker1]" in out
    # Its own work directory (named in its output) is gone; other beds on this machine are none of its business.
    found = re.search(rf"log: (\S*/{WORKDIR_PREFIX}\w+)/dispatcher.log", out)
    assert found, out
    assert not Path(found.group(1)).exists(), "the demo's clusters and files are removed on exit"
