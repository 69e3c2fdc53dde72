"""A kind's ``retention``: a finished run's object (and through it its pods) stays on its worker for that long after
the manager Workload finished, its Workload copy gone at once (no quota held there), then it is removed, also by a
dispatcher restarted meanwhile. On the real bed, with the tests playing Kueue's part."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from multikueue_testbed.waiting import eventually
from tests.integration.scenario import Scenario
from tests.integration.test_direct import PHASE, SUCCEEDED, notes, placed, submit

FINISHED_AT = "multikueue.x-k8s.io/finished-at"

RETAINED = """
multiKueue: {gcInterval: 2s, workerLostTimeout: 10s}
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    retention: 8s
"""


def _finished_at(workload: Any) -> datetime.datetime | None:
    found = next((c for c in (workload.get("status") or {}).get("conditions") or [] if c["type"] == "Finished"), None)
    if found is None or found["status"] != "True":
        return None
    return datetime.datetime.strptime(found["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)


@pytest.mark.parametrize("multikueue_config", [RETAINED])
async def test_a_finished_runs_object_is_kept_for_its_retention_then_removed_across_a_restart(
    scenario: Scenario,
) -> None:
    s = scenario
    wl_name = await s.run_to_the_end("kept", "worker1")
    done = await s.wait(s.workloads("manager"), wl_name, lambda w: _finished_at(w) is not None, "finished")
    finished_at = _finished_at(done)
    assert finished_at is not None
    await s.wait(s.workloads("worker1"), wl_name, lambda w: w is None, "the Workload copy gone at once")
    assert await s.runs("worker1").get("kept", s.namespace) is not None, "the object kept, for its pods"

    s.stop_manager()  # a restart within the retention: the deadline is the Workload's finish time, not memory
    await s.start_manager()
    await eventually(lambda: s.runs("worker1").get("kept", s.namespace), until=lambda r: r is None, timeout=60,
                     what="the object removed once its retention is over")  # fmt: skip
    kept_for = (datetime.datetime.now(datetime.UTC) - finished_at).total_seconds()
    assert kept_for >= 8 - 1, f"removed after {kept_for:.1f}s, before its retention (finish times are whole seconds)"


DIRECT_RETAINED = f"""
multiKueue: {{gcInterval: 2s, workerLostTimeout: 10s}}
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    mode: Direct
    finished: {{path: '{SUCCEEDED}', notIn: [Unknown]}}
    retention: 8s
"""


@pytest.mark.parametrize("multikueue_config", [DIRECT_RETAINED])
async def test_direct_mode_keeps_a_finished_runs_copy_for_its_retention(scenario: Scenario) -> None:
    s = scenario
    await submit(s, "kept")
    chosen = await placed(s, "kept")
    worker = next(w for w in ("worker1", "worker2") if s.names[w] == chosen)
    await s.wait(s.runs(worker), "kept", lambda r: r is not None, "the copy on its worker")
    await s.runs(worker).patch_status("kept", {"status": {"conditions": [
        {"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "done"}]}}, s.namespace)  # fmt: skip
    done = await s.wait(s.runs("manager"), "kept", lambda r: notes(r).get(PHASE) == "Finished", "finished")
    finished_at = datetime.datetime.strptime(notes(done)[FINISHED_AT], "%Y-%m-%dT%H:%M:%SZ").replace(
        tzinfo=datetime.UTC)  # fmt: skip
    assert await s.runs(worker).get("kept", s.namespace) is not None, "kept, for its pods"
    await eventually(lambda: s.runs(worker).get("kept", s.namespace), until=lambda r: r is None, timeout=60,
                     what="the copy removed once its retention is over")  # fmt: skip
    kept_for = (datetime.datetime.now(datetime.UTC) - finished_at).total_seconds()
    assert kept_for >= 8 - 1, f"removed after {kept_for:.1f}s, before its retention"
