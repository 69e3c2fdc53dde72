"""Kueue mode: a run admitted to the same worker again (another attempt) ends with its own attempt's result, never
the earlier attempt's, and an attempt's own result is never taken for an earlier one's.

Against the bed's real API servers; the tests play Kueue, the job integration and Tekton. A copy being deleted on
the worker (a finalizer holds it) is the case: whose attempt it is decides whether its status is this run's.

1. Kueue deletes the manager Workload and makes it again under the same name for the same object (no eviction
   recorded on the new one) while the earlier attempt's copy, cancelled, is held on worker1: that copy is never
   taken as the new attempt's; the run waits for it to go, then runs there and ends with its own result.
2. Evicted, admitted on worker1 again: that attempt's copy finishes there and is deleted there, held by a finalizer,
   before its final status reached the manager: its final status is still mirrored and the run finishes with it,
   never run again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from multikueue.kube.conditions import now_rfc3339, set_condition
from multikueue_testbed import kueue
from multikueue_testbed.objects import running_status
from multikueue_testbed.waiting import eventually
from tests.integration.scenario import Scenario
from tests.integration.test_direct import SUCCEEDED
from tests.integration.test_run_identity import (
    FINALIZER,
    check,
    copy_uid,
    final_status,
    finished,
    lift_finalizer,
    running_on,
    told,
    uid,
)

PREEMPTED = "Preempted by a higher priority workload"


def tekton(lost_timeout: str) -> str:
    """Kueue mode with the shipped Tekton adapter's ``finished``/``failed`` (examples/tekton/adapter-config.yaml):
    a copy's final status, once on the manager object, ends the run (no Kueue integration on the bed's workers)."""
    return f"""
multiKueue: {{gcInterval: 2s, workerLostTimeout: {lost_timeout}}}
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    finished: {{path: '{SUCCEEDED}', notIn: [Unknown]}}
    failed: {{path: '{SUCCEEDED}', equals: 'False'}}
"""


def cancelled_status(name: str, message: str) -> dict[str, Any]:
    """The status Tekton writes once a run is cancelled (``message`` telling attempts apart)."""
    cancelled = {"type": "Succeeded", "status": "False", "reason": "Cancelled", "message": message,
                 "lastTransitionTime": "2026-08-01T10:00:10Z"}  # fmt: skip
    return {**running_status(name), "completionTime": "2026-08-01T10:00:10Z", "conditions": [cancelled]}


def settled(s: Scenario) -> Callable[[Any], bool]:
    """Whether the manager Workload's run has come to a point the test judges: finished, its check reset or
    rejected, or the check saying why the run cannot go on (Pending before that: not yet admitted on worker1)."""

    def judged(workload: Any) -> bool:
        state = check(s, workload)
        message = str(state.get("message") or "")
        return bool(finished(workload)) or state.get("state") in ("Retry", "Rejected") or "Cannot dispatch" in message

    return judged


async def copies_removed(s: Scenario, name: str, wl_name: str) -> None:
    """The dispatcher has removed the run's copies: both Workload copies gone, and the object's on worker1 gone or
    going (held by a finalizer)."""
    for worker in ("worker1", "worker2"):
        await s.wait(s.workloads(worker), wl_name, lambda w: w is None, f"the Workload copy gone from {worker}")
    await s.wait(s.runs("worker1"), name, lambda r: r is None or bool(r["metadata"].get("deletionTimestamp")),
                 "the copy on worker1 deleted")  # fmt: skip


# --------------------------------------------------------------- 1. the Workload made again under the same name


# workerLostTimeout 5m: the held copy is waited for all through the test.
@pytest.mark.parametrize("multikueue_config", [tekton(lost_timeout="5m")], ids=["tekton"])
async def test_kueue_a_workload_made_again_waits_for_the_earlier_attempts_held_copy(scenario: Scenario) -> None:
    """`build` ran on worker1; Tekton Results' finalizer holds its copy there. Kueue deletes its Workload (the copy
    goes, and is cancelled there) and makes it again for the same `build` under the same name; worker1 admits it.
    The going copy is the earlier attempt's: its cancelled status never reaches the manager and never ends the new
    attempt; the check says the run waits for it, and once it is gone this attempt's copy is made there and the run
    ends with its own result."""
    s = scenario
    obj, wl_name = await running_on(s, "build", "worker1")
    earlier = await s.get(s.runs("worker1"), "build")
    await s.runs("worker1").patch("build", {"metadata": {"finalizers": [FINALIZER]}}, s.namespace)
    try:
        await s.workloads("manager").delete(wl_name, s.namespace)  # `kubectl delete workload`, or Kueue's own
        await copies_removed(s, "build", wl_name)
        await s.runs("worker1").patch_status("build", {"status": cancelled_status("build", "the earlier attempt")},
                                             s.namespace)  # fmt: skip
        # The job integration makes the Workload again for the same `build`: the same name, a new UID.
        await s.workloads("manager").create(kueue.workload_for(obj, name=wl_name), s.namespace)
        await kueue.reserve_quota(s.api["manager"], wl_name, s.namespace, checks=[s.names["check"]])
        await s.copied(wl_name)
        await kueue.admit(s.api["worker1"], wl_name, s.namespace)

        workload = await s.wait(s.workloads("manager"), wl_name, settled(s), "the new attempt judged", timeout=30)
        run = await s.get(s.runs("manager"), "build")
        assert finished(workload) is None, (
            f"the earlier attempt's cancelled copy ended the new attempt: {finished(workload)}; "
            f"the manager object's status: {run.get('status')}"
        )
        state = check(s, workload)
        assert state["state"] == "Ready", state
        assert state["message"].startswith("Cannot dispatch: PipelineRun"), state
        assert "earlier" in state["message"], state
        assert FINALIZER in state["message"], state
        shown = [c for c in (run.get("status") or {}).get("conditions") or [] if c.get("status") == "False"]
        assert not shown, f"the earlier attempt's cancelled status is shown: {shown}"
        there = await s.get(s.runs("worker1"), "build")
        assert uid(there) == uid(earlier), "the earlier attempt's copy was replaced while its finalizer held it"
        await told(s, "build", "StaleCopy", FINALIZER)
    finally:
        await lift_finalizer(s, "worker1", "build")

    mine = await s.wait(s.runs("worker1"), "build", lambda r: r is not None and uid(r) != uid(earlier),
                        "this attempt's copy made once the earlier one is gone", timeout=30)  # fmt: skip
    assert copy_uid(mine) == uid(obj), mine["metadata"]
    assert "status" not in mine, mine["status"]
    await s.runs("worker1").patch_status("build", {"status": final_status("build", "the second run")}, s.namespace)
    workload = await s.wait(s.workloads("manager"), wl_name, finished, "the manager Workload finished", timeout=30)
    assert finished(workload)["reason"] == "Succeeded", finished(workload)  # type: ignore[index]
    run = await s.get(s.runs("manager"), "build")
    assert run["status"]["conditions"][0]["message"] == "the second run", run["status"]
    assert check(s, workload)["message"].startswith('The workload was admitted on "'), check(s, workload)


# ------------------------------------------------------------------ 2. an attempt after an eviction, its own copy


async def evict_and_release(s: Scenario, wl_name: str) -> None:
    """Kueue preempts the manager Workload: Evicted, then (once the dispatcher has asked worker1 to stop its copy)
    its quota released, its worker and admission cleared, its check Pending again, and the eviction counted in
    ``schedulingStats`` as Kueue counts it (``kueue.evict`` counted it already: the same count)."""
    await kueue.evict(s.api["manager"], wl_name, s.namespace, reason="Preempted", message=PREEMPTED)

    def deactivated(w: Any) -> bool:
        return any(c["type"] == "DeactivationTarget" and c["status"] == "True" for c in w["status"]["conditions"])

    await s.wait(s.workloads("worker1"), wl_name, deactivated, "worker1's copy asked to stop", timeout=30)

    async def release() -> Any:
        current = await s.get(s.workloads("manager"), wl_name)
        status = current["status"]
        conditions = set_condition(status["conditions"], {"type": "QuotaReserved", "status": "False",
                                                          "reason": "Pending", "message": PREEMPTED})  # fmt: skip
        now = now_rfc3339()
        pending = [{**c, "state": "Pending", "message": "", "lastTransitionTime": now}
                   for c in status.get("admissionChecks") or []]  # fmt: skip
        evictions = [{"reason": "Preempted", "underlyingCause": "", "count": 1}]
        released = {"conditions": conditions, "admission": None, "clusterName": None, "admissionChecks": pending,
                    "schedulingStats": {"evictions": evictions}}  # fmt: skip
        patch = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}, "status": released}
        return await s.workloads("manager").patch_status(wl_name, patch, s.namespace)

    # Guarded by the resourceVersion: a write of the dispatcher's in between is a conflict, retried.
    released = await eventually(release, timeout=30, what="the quota released (a conflict retried)")
    assert released["status"]["schedulingStats"]["evictions"], "the bed's Workload schema dropped the count"


@pytest.mark.parametrize("multikueue_config", [tekton(lost_timeout="10s")], ids=["tekton"])
async def test_kueue_after_an_eviction_a_finished_copy_deleted_there_gives_its_final_status(
    scenario: Scenario,
) -> None:
    """`evicted` ran on worker1 and was preempted; Kueue admits it again and worker1 runs it again. While the
    dispatcher is down that attempt succeeds there and someone deletes its copy, held by Tekton Results' finalizer,
    before its final status reached the manager. The going copy is this attempt's own: its final status is mirrored,
    the manager Workload finishes as it ended, and the run is neither re-admitted nor made again."""
    s = scenario
    _, wl_name = await running_on(s, "evicted", "worker1")
    first = await s.get(s.runs("worker1"), "evicted")
    await evict_and_release(s, wl_name)
    await copies_removed(s, "evicted", wl_name)
    await s.wait(s.runs("worker1"), "evicted", lambda r: r is None, "the first attempt's copy gone from worker1")

    await kueue.reserve_quota(s.api["manager"], wl_name, s.namespace, checks=[s.names["check"]])
    await s.copied(wl_name)
    await kueue.admit(s.api["worker1"], wl_name, s.namespace)
    again = await s.wait(s.runs("worker1"), "evicted", lambda r: r is not None, "the second attempt's copy on worker1")
    assert uid(again) != uid(first)
    assert (await s.get(s.workloads("manager"), wl_name))["status"]["schedulingStats"]["evictions"]

    assert s.stop_manager is not None
    s.stop_manager()
    await s.runs("worker1").patch("evicted", {"metadata": {"finalizers": [FINALIZER]}}, s.namespace)
    try:
        await s.runs("worker1").patch_status("evicted", {"status": final_status("evicted", "the second attempt")},
                                             s.namespace)  # fmt: skip
        await s.runs("worker1").delete("evicted", s.namespace)  # a pruner; Tekton Results has not stored it yet
        await s.wait(s.runs("worker1"), "evicted", lambda r: bool(r["metadata"].get("deletionTimestamp")),
                     "the copy deleted there, held by its finalizer")  # fmt: skip
        await s.start_manager()

        workload = await s.wait(s.workloads("manager"), wl_name, settled(s), "the attempt judged", timeout=30)
        assert finished(workload) is not None, (
            f"this attempt's own finished copy was taken for an earlier attempt's: {check(s, workload)}"
        )
        assert finished(workload)["reason"] == "Succeeded", finished(workload)  # type: ignore[index]
        run = await s.get(s.runs("manager"), "evicted")
        assert run["status"]["conditions"][0]["message"] == "the second attempt", run["status"]
        assert check(s, workload)["state"] == "Ready", check(s, workload)
    finally:
        await lift_finalizer(s, "worker1", "evicted")
    await s.wait(s.runs("worker1"), "evicted", lambda r: r is None, "the copy gone once its finalizer lets go")
    for worker in ("worker1", "worker2"):
        assert await s.runs(worker).get("evicted", s.namespace) is None, f"made again on {worker}"
    resets = [e.message for e in await s.events(wl_name) if "resetting for re-admission" in e.message]
    assert not resets, resets
