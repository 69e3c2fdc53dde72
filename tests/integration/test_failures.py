"""Off the happy path against the real API servers: a worker that refuses a copy, one that hangs, one that comes
back, a manager schema older than the worker's, a run that ends while its manager object is held, and the
metrics the docs promise. Each is what a user sees: the Workload's check, the object's record, Events, metrics."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import anyio
import pytest
import structlog
from kubernetes_asyncio import client as k8s_client

from multikueue.kube import openapi
from multikueue.kube.addresses import Resource
from multikueue_testbed import crds, kueue
from multikueue_testbed.client import k8s
from multikueue_testbed.objects import pipelinerun, running_status
from multikueue_testbed.waiting import eventually
from tests.integration.scenario import Scenario

WORKER, PHASE = "multikueue.x-k8s.io/worker", "multikueue.x-k8s.io/phase"
SUCCEEDED = '.status.conditions[?type=="Succeeded"].status'


async def _namespace_on(s: Scenario, name: str, *clusters: str) -> None:
    for cluster in clusters:
        body = k8s_client.V1Namespace(metadata=k8s_client.V1ObjectMeta(name=name))
        await k8s_client.CoreV1Api(k8s(s.api[cluster])).create_namespace(body)


async def _events(s: Scenario, namespace: str, name: str) -> list[Any]:
    listed = await k8s_client.CoreV1Api(k8s(s.api["manager"])).list_namespaced_event(namespace)
    return [e for e in listed.items if e.involved_object.name == name]


def _check(workload: Any, check: str) -> dict[str, Any]:
    states = ((workload or {}).get("status") or {}).get("admissionChecks") or []
    return next((c for c in states if c["name"] == check), {})


async def test_a_namespace_missing_on_one_worker_is_told_on_the_check_in_events_and_in_the_log(
    scenario: Scenario,
) -> None:
    s = scenario
    namespace = f"{s.namespace}-x"[:63]  # on the manager and worker1 only
    await _namespace_on(s, namespace, "manager", "worker1")
    body = pipelinerun("stray", labels={"kueue.x-k8s.io/queue-name": "user-queue"})
    body["spec"]["managedBy"] = kueue.MANAGED_BY
    run = await s.runs("manager").create(body, namespace)
    workload = await s.workloads("manager").create(kueue.workload_for(run), namespace)
    wl_name, worker2 = workload["metadata"]["name"], s.names["worker2"]
    told = (
        f'Cannot dispatch: worker "{worker2}": cannot create Workload {namespace}/{wl_name}: '
        f'HTTP 404 NotFound: namespaces "{namespace}" not found'
    )
    with structlog.testing.capture_logs() as logs:
        await kueue.reserve_quota(s.api["manager"], wl_name, namespace, checks=[s.names["check"]])
        pending = await eventually(
            lambda: s.workloads("manager").get(wl_name, namespace),
            until=lambda w: _check(w, s.names["check"]).get("message") == told,
            what="the check's message naming worker2, the Workload and the API's reason",
        )
        await eventually(
            lambda: s.workloads("worker1").get(wl_name, namespace), until=bool, what="the copy on worker1 all the same"
        )
    assert _check(pending, s.names["check"])["state"] == "Pending"
    events = await eventually(
        lambda: _events(s, namespace, wl_name),
        until=lambda e: any(x.type == "Warning" and x.message == told for x in e),
        what="a Warning Event on the Workload",
    )
    assert sum(1 for x in events if x.message == told) == 1, "said once, not on every retry"
    on_run = await _events(s, namespace, "stray")
    assert any(x.reason == "DispatchFailed" and x.message == told for x in on_run), on_run
    failed = [r for r in logs if r.get("event") == "reconcile failed, retrying" and r.get("cluster") == worker2]
    assert failed, logs
    assert failed[0]["kind"] == "Workload"
    assert (failed[0]["namespace"], failed[0]["name"], failed[0]["code"]) == (namespace, wl_name, "404")
    assert "HTTP 404 NotFound" in failed[0]["error"]
    assert "header" not in failed[0]["error"].lower()

    # The namespace appears on worker2: the copy follows and the message goes.
    await _namespace_on(s, namespace, "worker2")
    await eventually(lambda: s.workloads("worker2").get(wl_name, namespace), until=bool, timeout=120, what="copy")
    await eventually(
        lambda: s.workloads("manager").get(wl_name, namespace),
        until=lambda w: _check(w, s.names["check"]).get("message") == "",
        what="the message cleared",
    )


DIRECT_ON_WORKER2 = """
multiKueue: {gcInterval: 2s, workerLostTimeout: 10s}
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    mode: Direct
    placement: {workerSelector: pool=two}
"""


@pytest.mark.parametrize("multikueue_config", [DIRECT_ON_WORKER2])
async def test_a_worker_refusing_a_direct_mode_copy_is_named_on_the_object(scenario: Scenario) -> None:
    s = scenario
    await s.label("worker2", pool="two")
    namespace = f"{s.namespace}-x"[:63]
    await _namespace_on(s, namespace, "manager", "worker1")
    body = pipelinerun("stray")
    body["spec"]["managedBy"] = kueue.MANAGED_BY
    await s.runs("manager").create(body, namespace)
    reason = f'refused it: HTTP 404 NotFound: namespaces "{namespace}" not found'
    events = await eventually(
        lambda: _events(s, namespace, "stray"),
        until=lambda e: any(x.reason == "Redispatching" for x in e),
        what="a Redispatching Event",
    )
    moved = next(x for x in events if x.reason == "Redispatching")
    assert moved.type == "Warning"
    assert (
        moved.message == f"worker {s.names['worker2']} {reason}; placing PipelineRun {namespace}/stray again elsewhere"
    )
    waiting = await eventually(
        lambda: s.runs("manager").get("stray", namespace),
        until=lambda r: "NoWorkerFits" in str((r or {}).get("status")),
        what="the run waits, saying why",
    )
    assert waiting is not None
    condition = next(c for c in waiting["status"]["conditions"] if c["type"] == "MultiKueuePlacement")
    assert f"{s.names['worker2']}: rejected: {reason}" in condition["message"], condition["message"]


HUNG = """
multiKueue: {gcInterval: 2s, workerLostTimeout: 1m}
dispatcher: {workerClient: {timeout: 15s}}
"""


@pytest.mark.parametrize("multikueue_config", [HUNG])
async def test_a_hung_worker_does_not_hold_up_a_run_admitted_on_a_healthy_one(scenario: Scenario) -> None:
    """worker2 stops answering (sockets open, as in a partition); a run admitted at once on worker1 is Ready there
    long before worker2's requests time out (15 s): writes to different workers do not wait for each other."""
    s = scenario
    s.bed.pause_apiserver("worker2")
    try:
        _, workload = await s.submit("unhurried")
        wl_name = workload["metadata"]["name"]
        await s.wait(s.workloads("worker1"), wl_name, lambda w: w is not None, "copy on worker1", timeout=10)
        await kueue.admit(s.api["worker1"], wl_name, s.namespace)
        # Well inside worker2's request timeouts (5 s to connect, 15 s in all): without side-by-side writes the pass
        # that copied the Workload still waits for worker2, and the admission is looked at only after.
        await s.wait(s.runs("worker1"), "unhurried", lambda r: r is not None, "the run created on worker1", timeout=4)
        await s.check_state(wl_name, state="Ready")
    finally:
        s.bed.resume_apiserver("worker2")


RETURNING = """
multiKueue: {gcInterval: 1s, workerLostTimeout: 5s}
dispatcher: {workerClient: {timeout: 3s, probeInterval: 1s}}
"""


@pytest.mark.parametrize("multikueue_config", [RETURNING])
async def test_a_worker_back_after_a_long_loss_is_cleaned_up_within_seconds(scenario: Scenario) -> None:
    """While a worker is away its watches fail and back off (up to 30 s); when it answers again (its probe says so)
    they resume at once, and a busy answer (429 while its storage initializes) is retried on its own short
    schedule. So the stale copy of a run deleted meanwhile is gone within seconds of the worker's return."""
    s = scenario
    _, workload = await s.submit("stale")
    wl_name = workload["metadata"]["name"]
    await s.wait(s.workloads("worker2"), wl_name, lambda w: w is not None, "copy on worker2")
    await kueue.admit(s.api["worker2"], wl_name, s.namespace)
    await s.wait(s.runs("worker2"), "stale", lambda r: r is not None, "run on worker2")
    s.bed.stop_apiserver("worker2", kill=True)
    try:
        await s.connected("worker2", False)
        await s.runs("manager").delete("stale", s.namespace)
        await s.workloads("manager").delete(wl_name, s.namespace)
        # The outage itself (a scene, not a synchronisation): long enough for the watches' backoff to reach its
        # 30 s cap, so without the wake-up they would resume some 20 s after the worker is back.
        await anyio.sleep(35)
    finally:
        s.bed.start_apiserver("worker2")
    await s.wait(s.runs("worker2"), "stale", lambda r: r is None, "stale copy removed", timeout=10)
    await s.wait(s.workloads("worker2"), wl_name, lambda w: w is None, "stale Workload copy removed", timeout=5)


SKEWED_GROUP = "skew.jobset.x-k8s.io"


def _jobset_crd(*, manager: bool, group: str = SKEWED_GROUP) -> dict[str, Any]:
    """JobSet's real CRD under a group of its own; on the manager without ``replicatedJobsStatus[].active``: a
    manager CRD older than the worker's controller."""
    crd = crds.foreign_crd("JobSet")
    crd["metadata"]["name"] = f"jobsets.{group}"
    crd["spec"]["group"] = group
    if manager:
        status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
        del status["properties"]["replicatedJobsStatus"]["items"]["properties"]["active"]
        required = status["properties"]["replicatedJobsStatus"]["items"].get("required") or []
        if "active" in required:
            required.remove("active")
    return crd


async def _skewed_jobset_placed(s: Scenario, group: str, name: str) -> tuple[Resource, str]:
    """JobSet under ``group``, older on the manager than on the workers, watched from the dispatcher's start; one
    created on the manager and copied to the worker it is placed on. The resource and that worker."""
    await crds.install_crds(s.api["manager"], [_jobset_crd(manager=True, group=group)])
    for worker in ("worker1", "worker2"):
        await crds.install_crds(s.api[worker], [_jobset_crd(manager=False, group=group)])
    assert s.stop_manager is not None
    s.stop_manager()
    await s.start_manager()  # the kind is watched from start
    jobsets = Resource(group, "v1alpha2", "jobsets", "JobSet")
    body = {"apiVersion": f"{group}/v1alpha2", "kind": "JobSet", "metadata": {"name": name},
            "spec": {"managedBy": kueue.MANAGED_BY, "replicatedJobs": []}}  # fmt: skip
    await s.objects("manager", jobsets).create(body, s.namespace)
    placed = await s.wait(s.objects("manager", jobsets), name, lambda o: WORKER in _notes(o), "placed")
    worker = next(w for w in ("worker1", "worker2") if s.names[w] == _notes(placed)[WORKER])
    await s.wait(s.objects(worker, jobsets), name, lambda o: o is not None, "the copy")
    return jobsets, worker


SKEWED = f"""
multiKueue:
  gcInterval: 2s
  workerLostTimeout: 10s
  externalFrameworks: [{{name: JobSet.v1alpha2.{SKEWED_GROUP}}}]
dispatcher:
  adapters:
  - name: JobSet.v1alpha2.{SKEWED_GROUP}
    mode: Direct
    finished: {{path: .status.terminalState, exists: true}}
"""


@pytest.mark.parametrize("multikueue_config", [SKEWED])
async def test_status_fields_the_manager_schema_drops_are_told_once_and_not_rewritten(scenario: Scenario) -> None:
    s = scenario
    jobsets, worker = await _skewed_jobset_placed(s, SKEWED_GROUP, "skewed")
    for ready in range(1, 4):
        status = {"replicatedJobsStatus": [{"name": "w", "ready": ready, "succeeded": 0, "failed": 0, "active": 2,
                                            "suspended": 0}]}  # fmt: skip
        await s.objects(worker, jobsets).patch_status("skewed", {"status": status}, s.namespace)
        await s.wait(
            s.objects("manager", jobsets),
            "skewed",
            lambda o, r=ready: ((o.get("status") or {}).get("replicatedJobsStatus") or [{}])[0].get("ready") == r,
            f"ready={ready} mirrored",
        )
    mirrored = await s.get(s.objects("manager", jobsets), "skewed")
    assert "active" not in mirrored["status"]["replicatedJobsStatus"][0]
    said = [e for e in await s.events("skewed") if e.reason == "StatusFieldsPruned"]
    assert len(said) == 1, [e.message for e in said]
    assert "status.replicatedJobsStatus[].active" in said[0].message
    assert f"worker {s.names[worker]}" in said[0].message
    # Not a loop: the manager object is written once per change on the worker, not on every pass.
    version = mirrored["metadata"]["resourceVersion"]
    assert s.manager is not None
    before = s.manager.generation.direct_controller.reconciles
    touched = await s.objects("manager", jobsets).patch("skewed", {"metadata": {"labels": {"looked": "again"}}},
                                                         s.namespace)  # fmt: skip
    assert touched["metadata"]["resourceVersion"] != version
    await eventually(lambda: _quiet(s, before), until=bool, what="the object looked at again, nothing left to do")
    again = await s.get(s.objects("manager", jobsets), "skewed")
    assert again["metadata"]["resourceVersion"] == touched["metadata"]["resourceVersion"], "not written again"


HEALED_GROUP = "heal.jobset.x-k8s.io"


@pytest.mark.parametrize("multikueue_config", [SKEWED.replace(SKEWED_GROUP, HEALED_GROUP)])
async def test_status_fields_once_dropped_are_mirrored_once_the_manager_crd_is_upgraded(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The StatusFieldsPruned Event says to install the worker's CRD version on the manager: once done, the fields
    it named reach the manager object without a restart (the kind's published schema changed)."""
    monkeypatch.setattr(openapi, "RECHECK_SECONDS", 1.0)
    s = scenario
    jobsets, worker = await _skewed_jobset_placed(s, HEALED_GROUP, "healed")
    status = {"replicatedJobsStatus": [{"name": "w", "ready": 1, "succeeded": 0, "failed": 0, "active": 2,
                                        "suspended": 0}]}  # fmt: skip
    await s.objects(worker, jobsets).patch_status("healed", {"status": status}, s.namespace)
    await eventually(lambda: s.events("healed"), until=lambda es: any(e.reason == "StatusFieldsPruned" for e in es),
                     what="the pruned fields told")  # fmt: skip

    await crds.install_crds(s.api["manager"], [_jobset_crd(manager=False, group=HEALED_GROUP)])  # as advised

    def healed(o: Any) -> bool:
        return bool(((o.get("status") or {}).get("replicatedJobsStatus") or [{}])[0].get("active") == 2)

    mirrored = await s.wait(s.objects("manager", jobsets), "healed", healed, "active mirrored after the upgrade")
    assert mirrored["status"]["replicatedJobsStatus"][0] == status["replicatedJobsStatus"][0]


async def _quiet(s: Scenario, before: int) -> bool:
    assert s.manager is not None
    controller = s.manager.generation.direct_controller
    return controller.reconciles > before and len(controller.queue) == 0


def _notes(obj: Any) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


HELD = f"""
multiKueue: {{gcInterval: 2s, workerLostTimeout: 10m}}
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    create:
      removeWhen: [{{path: .spec.status, equals: PipelineRunPending}}]
    suspended: {{path: .spec.status, equals: PipelineRunPending}}
    finished: {{path: '{SUCCEEDED}', notIn: [Unknown]}}
"""


@pytest.mark.parametrize("multikueue_config", [HELD])
async def test_a_run_that_ends_on_its_worker_while_held_on_the_manager_keeps_its_final_status(
    scenario: Scenario,
) -> None:
    """The worker finishes the run (its Workload Finished) before the manager's run is released: nothing is
    finished or deleted until the hold ends and the final status is on the manager object."""
    s = scenario
    body = pipelinerun("quick", labels={"kueue.x-k8s.io/queue-name": "user-queue"})
    body["spec"].update(managedBy=kueue.MANAGED_BY, status="PipelineRunPending")
    _, workload = await s.submit_object(s.runs("manager").resource, body)
    wl_name = workload["metadata"]["name"]
    await s.wait(s.workloads("worker1"), wl_name, lambda w: w is not None, "copy on worker1")
    await kueue.admit(s.api["worker1"], wl_name, s.namespace)
    await s.wait(s.runs("worker1"), "quick", lambda r: r is not None, "run on worker1")
    final = {**running_status("quick"), "completionTime": "2026-08-01T10:00:20Z",
             "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "done",
                             "lastTransitionTime": "2026-08-01T10:00:20Z"}]}  # fmt: skip
    await s.runs("worker1").patch_status("quick", {"status": final}, s.namespace)
    await kueue.finish(s.api["worker1"], wl_name, s.namespace, reason="Succeeded", message="Job finished successfully")
    await s.check_state(wl_name, state="Ready")
    await eventually(
        lambda: s.events("quick"),
        until=lambda e: any("is held back while this PipelineRun is suspended" in (x.message or "") for x in e),
        what="the hold said on the run",
    )
    held = await s.get(s.workloads("manager"), wl_name)
    assert not any(c["type"] == "Finished" for c in held["status"].get("conditions") or []), "not finished yet"
    assert await s.runs("worker1").get("quick", s.namespace) is not None, "the copy stays while its status waits"

    # Kueue admits on the manager and the integration releases the run: the status arrives, then the finish.
    await s.runs("manager").patch("quick", {"spec": {"status": None}}, s.namespace)
    done = await s.wait(
        s.workloads("manager"),
        wl_name,
        lambda w: any(c["type"] == "Finished" for c in (w.get("status") or {}).get("conditions") or []),
        "Finished",
    )
    assert next(c for c in done["status"]["conditions"] if c["type"] == "Finished")["reason"] == "Succeeded"
    run = await s.get(s.runs("manager"), "quick")
    assert run["status"]["conditions"][0]["reason"] == "Succeeded"
    assert run["status"]["completionTime"] == "2026-08-01T10:00:20Z"
    await s.wait(s.runs("worker1"), "quick", lambda r: r is None, "the copy removed after")


def _metric_names(exposition: str) -> set[str]:
    """Every metric family exported (declared by its ``# TYPE`` line)."""
    return {m.group(1) for m in re.finditer(r"^# TYPE (\w+) ", exposition, re.MULTILINE)}


def _documented_metrics() -> set[str]:
    """The metric names docs/architecture.md lists; ``_admitted_total`` after ``multikueue_workloads_dispatched_total``
    stands for ``multikueue_workloads_admitted_total``."""
    text = (Path(__file__).parents[2] / "docs" / "architecture.md").read_text()
    section = text.split("## Metrics", 1)[1].split("\n## ", 1)[0]
    names, stem = set(), ""
    for token in re.findall(r"`(multikueue_\w+|_\w+)(?:\{[\w,]*\})?`", section):
        if token.startswith("multikueue_"):
            names.add(token)
            stem = token.rsplit("_", 2)[0]
        else:
            names.add(stem + token)
    return names


async def test_every_documented_metric_is_exported_once_what_it_counts_happens(scenario: Scenario) -> None:
    s = scenario
    assert s.manager is not None
    registry = s.manager.metrics.registry
    # A reconcile that fails (its Workload's owner cannot be found) is counted for its controller.
    body = pipelinerun("orphaned", labels={"kueue.x-k8s.io/queue-name": "user-queue"})
    body["spec"]["managedBy"] = kueue.MANAGED_BY
    run = await s.runs("manager").create(body, s.namespace)
    workload = kueue.workload_for(run)
    workload["metadata"]["ownerReferences"][0]["name"] = "not-there"
    await s.workloads("manager").create(workload, s.namespace)
    await kueue.reserve_quota(s.api["manager"], workload["metadata"]["name"], s.namespace, checks=[s.names["check"]])
    await eventually(
        lambda: _sample(registry, "multikueue_reconcile_errors_total", controller="multikueue_workload"),
        until=lambda v: v >= 1,
        what="reconcile errors counted",
    )
    # A run dispatched, mirrored and finished; another evicted on its worker (sent for re-admission).
    done_name = await s.run_to_the_end("measured", "worker1")
    _, evicted = await s.submit("evicted")
    evicted_name = evicted["metadata"]["name"]
    await s.copied(evicted_name)
    await kueue.admit(s.api["worker2"], evicted_name, s.namespace)
    await s.check_state(evicted_name, state="Ready")
    await kueue.evict(s.api["worker2"], evicted_name, s.namespace)
    await s.check_state(evicted_name, state="Retry")
    await s.wait(
        s.workloads("manager"),
        done_name,
        lambda w: any(c["type"] == "Finished" for c in (w.get("status") or {}).get("conditions") or []),
        "Finished",
    )

    exported = _metric_names(s.manager.metrics.exposition().decode())
    documented = _documented_metrics()
    assert len(documented) >= 15, documented
    assert documented <= exported, sorted(documented - exported)


async def _sample(registry: Any, name: str, **labels: str) -> float:
    return float(registry.get_sample_value(name, labels) or 0)
