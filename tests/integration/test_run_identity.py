"""A run ends with its own result or none, never another run's, at every edge the correctness review found (#43).

Against the bed's real API servers; the tests play Kueue, the job integration and Tekton. Each test fails on the
code before #43:

1. a same-named run re-created while the earlier one's copy is still on a worker (held by a finalizer, or the worker
   unreachable when the earlier run was deleted), in Kueue and in Direct mode;
2. runs that finish while the dispatcher is down, looked at again while the worker's cache of the kind is listing;
3. a losing worker's copy evicted there while the winner runs;
4. a create whose answer was lost, refused on its retry by what it changed (a ResourceQuota on the kind's count);
5. a worker whose connection is dropped (its MultiKueueCluster deleted, its kubeconfig unusable) after a run went there;
6. a run's copy deleted on its worker by someone else before its final status reached the manager;
7. a worker kubeconfig whose CA data is not a certificate.
"""

from __future__ import annotations

import base64
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from multikueue.kube.addresses import MULTIKUEUE_CLUSTERS, Resource
from multikueue.kube.resources import Objects
from multikueue.labels import MANAGER_UID_ANNOTATION
from multikueue_testbed import TestBed, kueue
from multikueue_testbed.apiproxy import ApiProxy
from multikueue_testbed.objects import pipelinerun, running_status
from multikueue_testbed.waiting import eventually, wait_until
from tests.integration.scenario import Scenario
from tests.integration.test_direct import direct, notes, placed, placement_condition

FINALIZER = "results.tekton.dev/pipelinerun"  # Tekton Results holds a finished run this way until it is stored
SELECTOR = "multikueue.x-k8s.io/worker-selector"
AVOID = "multikueue.x-k8s.io/avoid"
SECRETS = Resource("", "v1", "secrets", "Secret")
QUOTAS = Resource("", "v1", "resourcequotas", "ResourceQuota")
UNUSED_GC = "multiKueue: {gcInterval: 10m, workerLostTimeout: 10s}"  # the collector never runs during the test


def final_status(name: str, message: str) -> dict[str, Any]:
    """The status Tekton writes once a run has succeeded, ``message`` telling runs apart."""
    succeeded = {"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": message,
                 "lastTransitionTime": "2026-08-01T10:00:20Z"}  # fmt: skip
    return {**running_status(name), "completionTime": "2026-08-01T10:00:20Z", "conditions": [succeeded]}


def uid(obj: Any) -> str:
    return str(obj["metadata"]["uid"])


def copy_uid(obj: Any) -> str | None:
    return notes(obj).get(MANAGER_UID_ANNOTATION)


def finished(workload: Any) -> dict[str, Any] | None:
    conditions = ((workload or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "Finished" and c["status"] == "True"), None)


def check(s: Scenario, workload: Any) -> dict[str, Any]:
    states = ((workload or {}).get("status") or {}).get("admissionChecks") or []
    return next((c for c in states if c["name"] == s.names["check"]), {})


async def submit(s: Scenario, name: str, **annotations: str) -> tuple[Any, str]:
    """A PipelineRun on the manager and its Workload, named as Kueue names it (the owner's UID in the hash, so a
    same-named run has another Workload), with quota reserved."""
    body = pipelinerun(name, labels={"kueue.x-k8s.io/queue-name": "user-queue"})
    body["spec"]["managedBy"] = kueue.MANAGED_BY
    if annotations:
        body["metadata"]["annotations"] = annotations
    obj = await s.runs("manager").create(body, s.namespace)
    wl_name = f"pipelinerun-{name}-{uid(obj)[:5]}"
    await s.workloads("manager").create(kueue.workload_for(obj, name=wl_name), s.namespace)
    await kueue.reserve_quota(s.api["manager"], wl_name, s.namespace, checks=[s.names["check"]])
    return obj, wl_name


async def running_on(s: Scenario, name: str, worker: str) -> tuple[Any, str]:
    """A run admitted on ``worker`` only, its copy there running and that status on the manager."""
    obj, wl_name = await submit(s, name)
    await s.copied(wl_name)
    await kueue.admit(s.api[worker], wl_name, s.namespace)
    await s.wait(s.runs(worker), name, lambda r: r is not None, f"{name} on {worker}")
    await s.runs(worker).patch_status(name, {"status": running_status(name)}, s.namespace)
    await s.wait(s.runs("manager"), name, lambda r: bool(r.get("status")), f"{name}'s status mirrored")
    return obj, wl_name


async def forget_on_manager(s: Scenario, name: str, wl_name: str) -> None:
    """The user deletes the run on the manager; its Workload goes with it (the manager's garbage collector)."""
    await s.runs("manager").delete(name, s.namespace)
    await s.workloads("manager").delete(wl_name, s.namespace)


async def lift_finalizer(s: Scenario, worker: str, name: str) -> None:
    if await s.runs(worker).get(name, s.namespace) is not None:
        await s.runs(worker).patch(name, {"metadata": {"finalizers": None}}, s.namespace)


async def told(s: Scenario, name: str, reason: str, *parts: str) -> str:
    """The message of the first Event about ``name`` with ``reason`` that holds every one of ``parts``, once there
    (an Event is recorded after the write it tells of)."""

    async def messages() -> list[str]:
        return [e.message for e in await s.events(name) if e.reason == reason]

    found = await eventually(messages, until=lambda ms: any(all(p in m for p in parts) for m in ms), timeout=30,
                             what=f"a {reason} Event about {name} saying {parts}")  # fmt: skip
    return next(m for m in found if all(p in m for p in parts))


def pinned(name: str) -> dict[str, Any]:
    """A Direct-mode run that selects worker1 alone (labelled ``pool=one`` by ``on_worker1``)."""
    body = pipelinerun(name)
    body["spec"]["managedBy"] = kueue.MANAGED_BY
    body["metadata"]["annotations"] = {SELECTOR: "pool=one"}
    return body


async def on_worker1(s: Scenario, name: str) -> dict[str, Any]:
    """A Direct-mode run placed on worker1 and its copy there; the run as submitted (to submit again)."""
    await s.label("worker1", pool="one")
    body = pinned(name)
    await s.runs("manager").create(body, s.namespace)
    assert await placed(s, name) == s.names["worker1"]
    await s.wait(s.runs("worker1"), name, lambda r: r is not None, f"{name}'s copy on worker1")
    return body


# ------------------------------------------------------------------------------ 1. a same-named run


async def ends_with_its_own_result(s: Scenario, wl_name: str) -> None:
    """The second `build` succeeds on worker1: its Workload finishes with that run's status on the manager."""
    await s.runs("worker1").patch_status("build", {"status": final_status("build", "the second run")}, s.namespace)
    await s.wait(s.runs("manager"), "build", lambda r: bool(r.get("status")), "this run's status mirrored")
    await kueue.finish(s.api["worker1"], wl_name, s.namespace)
    await s.wait(s.workloads("manager"), wl_name, finished, "the manager Workload finished")
    run = await s.get(s.runs("manager"), "build")
    assert run["status"]["conditions"][0]["message"] == "the second run", run["status"]


async def earlier_copy_held(s: Scenario) -> tuple[Any, str]:
    """The earlier `build` ran on worker1, the user deleted it, and Tekton Results' finalizer holds its copy there;
    a new `build` is admitted on worker1 (the new run and its Workload's name)."""
    _, wl1 = await running_on(s, "build", "worker1")
    await s.runs("worker1").patch("build", {"metadata": {"finalizers": [FINALIZER]}}, s.namespace)
    await s.runs("worker1").patch_status("build", {"status": final_status("build", "the first run")}, s.namespace)
    await forget_on_manager(s, "build", wl1)
    await s.wait(s.runs("worker1"), "build", lambda r: bool(r["metadata"].get("deletionTimestamp")),
                 "the earlier copy deleted, held by its finalizer")  # fmt: skip
    second, wl2 = await submit(s, "build")
    await s.copied(wl2)
    await kueue.admit(s.api["worker1"], wl2, s.namespace)
    return second, wl2


LONG_LOST = "multiKueue: {gcInterval: 2s, workerLostTimeout: 5m}"  # a held copy is waited for all through the test


@pytest.mark.parametrize("multikueue_config", [LONG_LOST])
async def test_kueue_a_same_named_run_waits_for_the_earlier_copy_its_finalizer_holds(scenario: Scenario) -> None:
    """The earlier copy, held by a finalizer, is never taken for the new run's: the check says why the run waits,
    the manager object never shows the earlier result, and once the finalizer is lifted the new run is created
    there and ends with its own result."""
    s = scenario
    try:
        second, wl2 = await earlier_copy_held(s)
        await s.check_state(wl2, state="Ready", message="Cannot dispatch: PipelineRun")
        workload = await s.get(s.workloads("manager"), wl2)
        assert "earlier run of that name" in check(s, workload)["message"]
        assert FINALIZER in check(s, workload)["message"], check(s, workload)
        assert not (await s.get(s.runs("manager"), "build")).get("status"), "the earlier run's result is shown"
        assert copy_uid(await s.get(s.runs("worker1"), "build")) != uid(second)
        await told(s, "build", "StaleCopy", "earlier run of that name")
    finally:
        await lift_finalizer(s, "worker1", "build")

    mine = await s.wait(s.runs("worker1"), "build", lambda r: r is not None and copy_uid(r) == uid(second),
                        "this run's copy created once the earlier one is gone", timeout=90)  # fmt: skip
    assert "status" not in mine
    await ends_with_its_own_result(s, wl2)
    await s.check_state(wl2, state="Ready", message='The workload was admitted on "')


async def test_kueue_an_earlier_copy_whose_finalizer_never_lets_go_sends_the_run_elsewhere(scenario: Scenario) -> None:
    """The finalizer is never lifted: past workerLostTimeout (10 s) the check resets for re-admission, saying why;
    the run was certainly never on worker1 (it holds another run's copy), so nothing runs twice."""
    s = scenario
    try:
        _, wl2 = await earlier_copy_held(s)
        workload = await s.check_state(wl2, state="Retry", message="Cannot dispatch: PipelineRun")
        assert "after workerLostTimeout (10s)" in check(s, workload)["message"], check(s, workload)
        assert "earlier run of that name" in check(s, workload)["message"]
    finally:
        await lift_finalizer(s, "worker1", "build")


@pytest.mark.parametrize("multikueue_config", [UNUSED_GC])
async def test_kueue_a_same_named_run_on_a_worker_unreachable_when_the_earlier_was_deleted(
    scenario: Scenario,
) -> None:
    """worker1 was unreachable when the earlier `build` was deleted, so its copy stayed there (no collector runs in
    this test). The new `build` is admitted on worker1 once it is back: the earlier copy is deleted, the new one
    created, and the run ends with its own result."""
    s = scenario
    _, wl1 = await running_on(s, "build", "worker1")
    await s.runs("worker1").patch_status("build", {"status": final_status("build", "the first run")}, s.namespace)
    await s.wait(s.runs("manager"), "build", lambda r: r["status"].get("completionTime"), "the first result mirrored")
    await anyio.to_thread.run_sync(lambda: s.bed.pause_apiserver("worker1"))
    try:
        await s.connected("worker1", False)
        await forget_on_manager(s, "build", wl1)
        second, wl2 = await submit(s, "build")
        await s.copied(wl2, "worker2")
    finally:
        await anyio.to_thread.run_sync(lambda: s.bed.resume_apiserver("worker1", wait=True))
    await s.connected("worker1", True)
    earlier = await s.get(s.runs("worker1"), "build")
    assert copy_uid(earlier) != uid(second), "the earlier copy is still there, as meant"
    await s.copied(wl2, "worker1")
    await kueue.admit(s.api["worker1"], wl2, s.namespace)

    await s.wait(s.runs("worker1"), "build", lambda r: r is not None and copy_uid(r) == uid(second),
                 "this run's copy made in place of the earlier one", timeout=90)  # fmt: skip
    assert not (await s.get(s.runs("manager"), "build")).get("status"), "the earlier run's result is shown"
    await ends_with_its_own_result(s, wl2)


@pytest.mark.parametrize("multikueue_config", [direct()])
async def test_direct_an_earlier_copy_whose_finalizer_never_lets_go_sends_the_run_elsewhere(scenario: Scenario) -> None:
    """Direct mode, workerLostTimeout 5 s: the new run, pinned to worker1, is moved away from it (even under either
    policy: it never ran there) and waits for a worker its selector allows."""
    s = scenario
    body = await on_worker1(s, "build")
    await s.runs("worker1").patch("build", {"metadata": {"finalizers": [FINALIZER]}}, s.namespace)
    try:
        await s.runs("manager").delete("build", s.namespace)
        await s.wait(s.runs("worker1"), "build", lambda r: bool(r["metadata"].get("deletionTimestamp")),
                     "the earlier copy deleted, held by its finalizer")  # fmt: skip
        await s.runs("manager").create(body, s.namespace)
        moved = await s.wait(s.runs("manager"), "build", lambda r: "still holds an earlier" in notes(r).get(AVOID, ""),
                             "moved away from worker1")  # fmt: skip
        assert s.names["worker1"] in notes(moved)[AVOID]
    finally:
        await lift_finalizer(s, "worker1", "build")


@pytest.mark.parametrize("multikueue_config", [direct(lost_timeout="5m")])
async def test_direct_a_same_named_run_waits_for_the_earlier_copy_its_finalizer_holds(scenario: Scenario) -> None:
    """Direct mode: both runs placed on worker1 (their worker selector); the earlier copy, held by a finalizer, is
    neither mirrored nor kept by the collector as the new run's; the placement condition says why the run waits."""
    s = scenario
    body = await on_worker1(s, "build")
    await s.runs("worker1").patch("build", {"metadata": {"finalizers": [FINALIZER]}}, s.namespace)
    try:
        await s.runs("worker1").patch_status("build", {"status": running_status("build")}, s.namespace)
        await s.wait(s.runs("manager"), "build", lambda r: r["status"].get("startTime"), "the first status mirrored")
        await s.runs("manager").delete("build", s.namespace)
        await s.wait(s.runs("worker1"), "build", lambda r: bool(r["metadata"].get("deletionTimestamp")),
                     "the earlier copy deleted, held by its finalizer")  # fmt: skip

        second = await s.runs("manager").create(body, s.namespace)
        waiting = await s.wait(s.runs("manager"), "build",
                               lambda r: (placement_condition(r) or {}).get("reason") == "StaleCopy",
                               "the placement says the run waits for the earlier copy")  # fmt: skip
        assert "earlier run of that name" in placement_condition(waiting)["message"]
        assert not waiting["status"].get("startTime"), "the earlier run's status is shown"
        assert copy_uid(await s.get(s.runs("worker1"), "build")) != uid(second)
    finally:
        await lift_finalizer(s, "worker1", "build")

    await s.wait(s.runs("worker1"), "build", lambda r: r is not None and copy_uid(r) == uid(second),
                 "this run's copy created once the earlier one is gone", timeout=90)  # fmt: skip
    await s.runs("worker1").patch_status("build", {"status": final_status("build", "the second run")}, s.namespace)
    done = await s.wait(s.runs("manager"), "build", lambda r: notes(r).get("multikueue.x-k8s.io/phase") == "Finished",
                        "the run finished")  # fmt: skip
    succeeded = next(c for c in done["status"]["conditions"] if c["type"] == "Succeeded")
    assert succeeded["message"] == "the second run", done["status"]


# ------------------------------------------------------------------- 2. finished while the dispatcher was down


@pytest.fixture
async def proxy(testbed: TestBed) -> AsyncIterator[ApiProxy]:
    async with ApiProxy(testbed.cluster("worker1")) as found:
        yield found


@pytest.fixture
def worker_kubeconfigs(proxy: ApiProxy) -> dict[str, Any]:
    """worker1 reached through the proxy (for the tests that use it; the others never arm it)."""
    return {"worker1": proxy.kubeconfig}


RUNS = 6


async def test_runs_finished_while_the_dispatcher_was_down_keep_their_final_status(
    scenario: Scenario, proxy: ApiProxy
) -> None:
    """Six runs finish on worker1 while the dispatcher is down. When it is back, worker1 counts as connected once
    its Workloads are listed; here its PipelineRuns' list is held back all along, so every run is looked at while
    that cache is empty. None may finish with the status the manager last saw: each is read from the worker first
    and finishes with its worker's final status."""
    s = scenario
    started = [await running_on(s, f"done-{i}", "worker1") for i in range(RUNS)]
    assert s.stop_manager is not None
    s.stop_manager()
    for i, (_, wl_name) in enumerate(started):
        await s.runs("worker1").patch_status(f"done-{i}", {"status": final_status(f"done-{i}", f"run {i}")},
                                             s.namespace)  # fmt: skip
        await kueue.finish(s.api["worker1"], wl_name, s.namespace)

    proxy.hold("GET", "/pipelineruns")
    try:
        await s.start_manager()
        for i, (_, wl_name) in enumerate(started):
            await s.wait(s.workloads("manager"), wl_name, finished, f"{wl_name} finished")
            run = await s.get(s.runs("manager"), f"done-{i}")
            assert run["status"]["conditions"][0]["message"] == f"run {i}", run["status"]
            assert run["status"]["completionTime"] == "2026-08-01T10:00:20Z"
        assert s.manager is not None
        connection = s.manager.generation.cluster_reconciler.connections[s.names["worker1"]]
        listed = [i.synced.is_set() for i in connection.objects.values()]
        assert not all(listed), "worker1's PipelineRuns were listed: the test did not hold the list"
    finally:
        proxy.release()


# ------------------------------------------------------------------------------ 3. a loser's eviction


async def test_a_losing_copy_evicted_on_its_worker_leaves_the_winners_run_alone(scenario: Scenario) -> None:
    """worker2's copy lost the race; a finalizer of another controller there keeps it (deleting) while worker2's
    Kueue preempts it. The run on worker1 goes on and finishes there: the check is never reset."""
    s = scenario
    _, wl_name = await submit(s, "winner")
    await s.copied(wl_name)
    await s.workloads("worker2").patch(wl_name, {"metadata": {"finalizers": ["example.com/audit"]}}, s.namespace)
    try:
        await kueue.admit(s.api["worker1"], wl_name, s.namespace)
        await s.wait(s.runs("worker1"), "winner", lambda r: r is not None, "the run on worker1")
        await s.wait(s.workloads("worker2"), wl_name, lambda w: bool(w["metadata"].get("deletionTimestamp")),
                     "the losing copy being deleted")  # fmt: skip
        await kueue.evict(s.api["worker2"], wl_name, s.namespace, reason="Preempted")
        await s.runs("worker1").patch_status("winner", {"status": running_status("winner")}, s.namespace)
        await s.wait(s.runs("manager"), "winner", lambda r: bool(r.get("status")), "status mirrored")
        await kueue.finish(s.api["worker1"], wl_name, s.namespace)
        workload = await s.wait(s.workloads("manager"), wl_name, finished, "the manager Workload finished")
    finally:
        await s.workloads("worker2").patch(wl_name, {"metadata": {"finalizers": None}}, s.namespace)
    assert check(s, workload)["state"] == "Ready", check(s, workload)
    assert workload["status"]["clusterName"] == s.names["worker1"]
    resets = [e.message for e in await s.events(wl_name) if "resetting for re-admission" in e.message]
    assert not resets, resets


# ------------------------------------------------------------------- 4. a refusal after a lost answer


async def quota_of_one(s: Scenario) -> None:
    """worker1 lets its namespace hold one PipelineRun (the quota's usage as its controller would have counted it:
    the bed runs no controller-manager; admission keeps it from there)."""
    body = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": "runs"},
            "spec": {"hard": {"count/pipelineruns.tekton.dev": "1"}}}  # fmt: skip
    quotas = Objects(s.api["worker1"], QUOTAS)
    await quotas.create(body, s.namespace)
    status = {"hard": {"count/pipelineruns.tekton.dev": "1"}, "used": {"count/pipelineruns.tekton.dev": "0"}}
    await quotas.patch_status("runs", {"status": status}, s.namespace)


async def lose_the_create_answer(s: Scenario, proxy: ApiProxy) -> None:
    """The next PipelineRun create on worker1 is stored but its answer lost; its retry is answered (a refusal:
    the quota is used up by the stored create), while worker1's watches are held so no cache sees the copy."""
    with anyio.fail_after(60):
        await proxy.answered.wait()
    assert proxy.withheld[0].status == 201, proxy.withheld
    proxy.lose_answer()
    await wait_until(lambda: any(w.method == "POST" and w.path.endswith("/pipelineruns") and w.status == 403
                                 for w in proxy.writes), timeout=60, what="the retried create refused")  # fmt: skip


async def test_kueue_a_create_refused_on_its_retry_after_a_lost_answer_goes_on_with_the_copy(
    scenario: Scenario, proxy: ApiProxy
) -> None:
    s = scenario
    await quota_of_one(s)
    _, wl_name = await submit(s, "quota")
    await s.copied(wl_name)
    proxy.withhold("POST", f"/namespaces/{s.namespace}/pipelineruns")
    try:
        await kueue.admit(s.api["worker1"], wl_name, s.namespace)
        await lose_the_create_answer(s, proxy)
        first = await s.get(s.runs("worker1"), "quota")
        await s.runs("worker1").patch_status("quota", {"status": running_status("quota")}, s.namespace)
        await s.wait(s.runs("manager"), "quota", lambda r: bool(r.get("status")), "the stored copy's status mirrored")
    finally:
        proxy.release()
    assert uid(await s.get(s.runs("worker1"), "quota")) == uid(first), "the copy was replaced"
    await kueue.finish(s.api["worker1"], wl_name, s.namespace)
    workload = await s.wait(s.workloads("manager"), wl_name, finished, "the manager Workload finished")
    assert check(s, workload)["state"] == "Ready", check(s, workload)
    assert await s.runs("worker2").get("quota", s.namespace) is None


@pytest.mark.parametrize("multikueue_config", [direct(placement="{lostWorkerPolicy: AtMostOnce}")])
async def test_direct_at_most_once_a_create_refused_on_its_retry_after_a_lost_answer_goes_on_with_the_copy(
    scenario: Scenario, proxy: ApiProxy
) -> None:
    s = scenario
    await s.label("worker1", pool="one")
    await quota_of_one(s)
    proxy.withhold("POST", f"/namespaces/{s.namespace}/pipelineruns")
    try:
        await s.runs("manager").create(pinned("quota"), s.namespace)
        await lose_the_create_answer(s, proxy)
        await s.runs("worker1").patch_status("quota", {"status": final_status("quota", "once")}, s.namespace)
    finally:
        proxy.release()
    done = await s.wait(s.runs("manager"), "quota", lambda r: notes(r).get("multikueue.x-k8s.io/phase") == "Finished",
                        "the run finished on worker1")  # fmt: skip
    assert notes(done)["multikueue.x-k8s.io/worker"] == s.names["worker1"]
    assert AVOID not in notes(done), notes(done)
    assert await s.runs("worker2").get("quota", s.namespace) is None, "a second copy was started"


# ------------------------------------------------------------------- 5. a dropped connection


async def make_unusable(s: Scenario, worker: str, how: str) -> None:
    if how == "MultiKueueCluster deleted":
        await Objects(s.api["manager"], MULTIKUEUE_CLUSTERS).delete(s.names[worker])
    else:
        secrets = Objects(s.api["manager"], SECRETS)
        cluster = await Objects(s.api["manager"], MULTIKUEUE_CLUSTERS).get(s.names[worker])
        assert cluster is not None
        name = cluster["spec"]["clusterSource"]["kubeConfig"]["location"]
        garbage = base64.b64encode(b"apiVersion: v1\nkind: Config\nclusters: [").decode()
        await secrets.patch(name, {"data": {"kubeconfig": garbage}}, s.namespace)


@pytest.mark.parametrize("how", ["MultiKueueCluster deleted", "kubeconfig unusable"])
async def test_kueue_a_worker_whose_connection_is_dropped_is_lost_after_the_timeout(
    scenario: Scenario, how: str
) -> None:
    """The run was created on worker1; then worker1's connection is dropped. The check first says the run waits for
    worker1, then, workerLostTimeout (10 s) later, resets for re-admission, as its message promised."""
    s = scenario
    _, wl_name = await running_on(s, "dropped", "worker1")
    await make_unusable(s, "worker1", how)
    await s.check_state(wl_name, state="Ready", message='The workload was admitted on "')
    waiting = await s.wait(s.workloads("manager"), wl_name, lambda w: "unreachable" in check(s, w).get("message", ""),
                           "the check says the run waits for worker1")  # fmt: skip
    assert "workerLostTimeout (10s)" in check(s, waiting)["message"]
    await s.check_state(wl_name, state="Retry", message="Admitting remote lost")


@pytest.mark.parametrize("multikueue_config", [direct(lost_timeout="10s")])
async def test_direct_a_worker_whose_connection_is_dropped_is_waited_for_the_timeout(scenario: Scenario) -> None:
    """Direct mode: the dispatcher has run longer than workerLostTimeout when worker1's kubeconfig becomes
    unusable; the run is waited for (the placement says so) before it is placed elsewhere, not moved at once."""
    s = scenario
    started = time.monotonic()  # the dispatcher has run at least this long
    await on_worker1(s, "dropped")
    await wait_until(lambda: time.monotonic() - started > 12, timeout=30,
                     what="the dispatcher up for longer than workerLostTimeout")  # fmt: skip
    await make_unusable(s, "worker1", "kubeconfig unusable")
    told = ("WorkerUnreachable", "Redispatching")
    waiting = await s.wait(s.runs("manager"), "dropped", lambda r: (placement_condition(r) or {}).get("reason") in told,
                           "the placement after worker1's connection was dropped")  # fmt: skip
    assert placement_condition(waiting)["reason"] == "WorkerUnreachable", placement_condition(waiting)
    await s.wait(s.runs("manager"), "dropped", lambda r: "worker1" in notes(r).get(AVOID, ""),
                 "placed elsewhere after the timeout")  # fmt: skip


# ------------------------------------------------------------- 6. a copy deleted on its worker by someone else


async def test_kueue_a_running_copy_this_dispatcher_replaces_is_admitted_again_not_failed(scenario: Scenario) -> None:
    """The manager Workload's spec changes while its run is on worker1: the dispatcher replaces the copies there
    itself. That is no deletion by someone else: the check resets for re-admission, and the Workload never
    finishes as lost."""
    s = scenario
    _, wl_name = await running_on(s, "replaced", "worker1")
    await s.workloads("manager").patch(wl_name, {"spec": {"maximumExecutionTimeSeconds": 600}}, s.namespace)
    workload = await s.check_state(wl_name, state="Retry", message="Remote workload spec changed")
    assert finished(workload) is None, finished(workload)
    await s.wait(s.runs("worker1"), "replaced", lambda r: r is None, "the replaced copy gone")
    assert finished(await s.get(s.workloads("manager"), wl_name)) is None


async def test_kueue_a_finished_copy_pruned_while_the_dispatcher_was_down_finishes_once_and_says_so(
    scenario: Scenario,
) -> None:
    """Tekton's pruner deletes the finished PipelineRun on worker1 while the dispatcher is down; its Workload copy
    there is still Finished. The manager Workload finishes with the worker's reason, the run is not made again,
    and the object's Events say its final status was lost."""
    s = scenario
    _, wl_name = await running_on(s, "pruned", "worker1")
    assert s.stop_manager is not None
    s.stop_manager()
    await s.runs("worker1").patch_status("pruned", {"status": final_status("pruned", "unseen")}, s.namespace)
    await kueue.finish(s.api["worker1"], wl_name, s.namespace, reason="Succeeded", message="done there")
    await s.runs("worker1").delete("pruned", s.namespace)
    await s.start_manager()
    workload = await s.wait(s.workloads("manager"), wl_name, finished, "the manager Workload finished")
    assert finished(workload)["reason"] == "Succeeded"  # type: ignore[index]
    assert "deleted there" in finished(workload)["message"]  # type: ignore[index]
    await told(s, "pruned", "FinalStatusLost", "worker", "before its final status reached the manager")
    for worker in ("worker1", "worker2"):
        assert await s.runs(worker).get("pruned", s.namespace) is None, f"made again on {worker}"


async def test_kueue_a_run_whose_copies_were_both_deleted_there_is_not_run_again(scenario: Scenario) -> None:
    """The PipelineRun and its Workload copy (its owner's garbage collector) are both gone from worker1 when the
    dispatcher comes back: the run ran there, so it is not re-admitted: its Workload finishes as Failed, saying
    why, and nothing is made again."""
    s = scenario
    _, wl_name = await running_on(s, "vanished", "worker1")
    assert s.stop_manager is not None
    s.stop_manager()
    await s.runs("worker1").delete("vanished", s.namespace)
    await s.workloads("worker1").delete(wl_name, s.namespace)
    await s.start_manager()
    workload = await s.wait(s.workloads("manager"), wl_name, finished, "the manager Workload finished")
    assert finished(workload)["reason"] == "Failed"  # type: ignore[index]
    assert "not run again" in finished(workload)["message"]  # type: ignore[index]
    assert check(s, workload)["state"] == "Ready", check(s, workload)
    for worker in ("worker1", "worker2"):
        assert await s.runs(worker).get("vanished", s.namespace) is None, f"made again on {worker}"


@pytest.mark.parametrize("multikueue_config", [direct()])
@pytest.mark.parametrize("mirrored", ["running", "final, its phase not written yet"])
async def test_direct_a_copy_deleted_on_its_worker_is_not_made_again(
    scenario: Scenario, proxy: ApiProxy, mirrored: str
) -> None:
    """The copy on worker1 is deleted there while the dispatcher is down (and worker1's list is held when it is
    back). It is never made again: the run is Failed with `CopyDeleted`, or, when its final status had already been
    mirrored (the dispatcher stopped before it wrote the phase), finished as that status says."""
    s = scenario
    await on_worker1(s, "pruned")
    await s.runs("worker1").patch_status("pruned", {"status": running_status("pruned")}, s.namespace)
    await s.wait(s.runs("manager"), "pruned", lambda r: r["status"].get("startTime"), "its status mirrored")
    assert s.stop_manager is not None
    s.stop_manager()
    if mirrored != "running":  # as the mirror wrote it just before the process stopped
        await s.runs("manager").patch_status("pruned", {"status": final_status("pruned", "done")}, s.namespace)
    await s.runs("worker1").delete("pruned", s.namespace)
    proxy.hold("GET", "/pipelineruns")  # worker1's cache of PipelineRuns still listing when the run is looked at
    phase = "Failed" if mirrored == "running" else "Finished"
    try:
        await s.start_manager()
        reason = "CopyDeleted" if phase == "Failed" else "Placed"  # the phase is written first, then the condition

        def ended(run: Any) -> bool:
            return notes(run).get("multikueue.x-k8s.io/phase") == phase and placement_condition(run)["reason"] == reason

        done = await s.wait(s.runs("manager"), "pruned", ended, f"the run {phase}")
    finally:
        proxy.release()
    assert notes(done)["multikueue.x-k8s.io/phase"] == phase, notes(done)
    if phase == "Failed":
        assert placement_condition(done)["reason"] == "CopyDeleted", placement_condition(done)
        assert "not run again" in placement_condition(done)["message"]
    else:
        assert placement_condition(done)["reason"] == "Placed", placement_condition(done)
    for worker in ("worker1", "worker2"):
        assert await s.runs(worker).get("pruned", s.namespace) is None, f"made again on {worker}"


@pytest.mark.parametrize("multikueue_config", [direct()])
async def test_direct_a_copy_replaced_there_by_a_foreign_object_is_not_run_again(scenario: Scenario) -> None:
    """The copy on worker1 ran there (its status mirrored) and, while the dispatcher is down, is deleted and a
    same-named object that is not this manager's takes its place. The run is not placed elsewhere (it would run a
    second time): it is Failed with `CopyDeleted`, the foreign object untouched."""
    s = scenario
    await on_worker1(s, "replaced")
    await s.runs("worker1").patch_status("replaced", {"status": running_status("replaced")}, s.namespace)
    await s.wait(s.runs("manager"), "replaced", lambda r: r["status"].get("startTime"), "its status mirrored")
    assert s.stop_manager is not None
    s.stop_manager()
    await s.runs("worker1").delete("replaced", s.namespace)
    await s.wait(s.runs("worker1"), "replaced", lambda r: r is None, "the copy gone")
    foreign = await s.runs("worker1").create(pipelinerun("replaced"), s.namespace)  # no origin label, no manager UID
    await s.start_manager()

    def ended(run: Any) -> bool:
        return notes(run).get("multikueue.x-k8s.io/phase") == "Failed" and bool(placement_condition(run))

    done = await s.wait(s.runs("manager"), "replaced", ended, "the run Failed")
    assert placement_condition(done)["reason"] == "CopyDeleted", placement_condition(done)
    assert notes(done).get("multikueue.x-k8s.io/worker") == s.names["worker1"], "never placed elsewhere"
    assert await s.runs("worker2").get("replaced", s.namespace) is None, "run a second time on worker2"
    there = await s.get(s.runs("worker1"), "replaced")
    assert uid(there) == uid(foreign), "the foreign object is left untouched"


@pytest.mark.parametrize("multikueue_config", [direct()])
async def test_direct_a_copy_deleted_there_while_a_finalizer_holds_it_still_gives_its_final_status(
    scenario: Scenario,
) -> None:
    """The run succeeds on worker1 while the dispatcher is down, and a pruner deletes its copy there, held by Tekton
    Results' finalizer. The going copy is this run (Direct mode has no earlier attempt): its final status is mirrored
    and the run finishes as it ended; nothing is made again once the finalizer lets go."""
    s = scenario
    await on_worker1(s, "pruned")
    await s.runs("worker1").patch("pruned", {"metadata": {"finalizers": [FINALIZER]}}, s.namespace)
    try:
        assert s.stop_manager is not None
        s.stop_manager()
        await s.runs("worker1").patch_status("pruned", {"status": final_status("pruned", "done")}, s.namespace)
        await s.runs("worker1").delete("pruned", s.namespace)
        await s.wait(s.runs("worker1"), "pruned", lambda r: bool(r["metadata"].get("deletionTimestamp")),
                     "the copy deleted there, held by its finalizer")  # fmt: skip
        await s.start_manager()

        def ended(run: Any) -> bool:
            return notes(run).get("multikueue.x-k8s.io/phase") == "Finished"

        done = await s.wait(s.runs("manager"), "pruned", ended, "the run Finished")
        assert done["status"]["conditions"][0]["message"] == "done", done["status"]
    finally:
        await lift_finalizer(s, "worker1", "pruned")
    await s.wait(s.runs("worker1"), "pruned", lambda r: r is None, "the copy gone once its finalizer lets go")
    for worker in ("worker1", "worker2"):
        assert await s.runs(worker).get("pruned", s.namespace) is None, f"made again on {worker}"


# ------------------------------------------------------------------- 7. CA data that is not a certificate


async def test_a_kubeconfig_whose_ca_is_not_a_certificate_is_said_in_one_line(
    scenario: Scenario, tmp_path: Path
) -> None:
    s = scenario
    cluster = await Objects(s.api["manager"], MULTIKUEUE_CLUSTERS).get(s.names["worker2"])
    assert cluster is not None
    secret_name = cluster["spec"]["clusterSource"]["kubeConfig"]["location"]
    kubeconfig = s.bed.cluster("worker2").kubeconfig
    kubeconfig["clusters"][0]["cluster"]["certificate-authority-data"] = base64.b64encode(b"not a cert").decode()
    data = base64.b64encode(yaml.safe_dump(kubeconfig).encode()).decode()
    await Objects(s.api["manager"], SECRETS).patch(secret_name, {"data": {"kubeconfig": data}}, s.namespace)

    def inactive(c: Any) -> bool:
        conditions = (c.get("status") or {}).get("conditions") or []
        active: dict[str, Any] = next((x for x in conditions if x["type"] == "Active"), {})
        return active.get("status") == "False" and "certificate" in active.get("message", "")

    found = await eventually(lambda: Objects(s.api["manager"], MULTIKUEUE_CLUSTERS).get(s.names["worker2"]),
                             until=inactive, timeout=60, what="worker2 inactive, its CA named")  # fmt: skip
    active = next(x for x in found["status"]["conditions"] if x["type"] == "Active")
    assert "cadata does not contain a certificate" in active["message"], active
    assert "\n" not in active["message"]

    config, manager = tmp_path / "config.yaml", tmp_path / "kubeconfig.yaml"
    manager.write_text(yaml.safe_dump(s.bed.cluster("manager").kubeconfig))
    config.write_text("multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}\n")
    argv = [sys.executable, "-m", "multikueue", "workers", "--kubeconfig", str(manager), "--secrets-namespace",
            s.namespace, "--config-file", str(config)]  # fmt: skip
    with anyio.fail_after(60):
        done = await anyio.run_process(argv, check=False)
    out = done.stdout.decode()
    line = next(x for x in out.splitlines() if "cannot be used" in x)
    assert "cadata does not contain a certificate" in line, out
    assert "None" not in line, out
