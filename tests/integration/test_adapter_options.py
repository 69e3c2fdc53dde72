"""Per-kind adapter options against the real API servers, with Tekton's real PipelineRun CRD (and a kind of this
project's own where the option concerns a shape PipelineRun does not have)."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.kube.addresses import Resource
from multikueue.kube.events import record
from multikueue_testbed import kueue
from multikueue_testbed.objects import pipelinerun, running_status, widget
from multikueue_testbed.waiting import eventually
from tests.integration.scenario import Scenario

SUCCEEDED = '.status.conditions[?type=="Succeeded"].status'
TEKTON = f"""
multiKueue: {{gcInterval: 2s, workerLostTimeout: 10s}}
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    create:
      removeWhen: [{{path: .spec.status, equals: PipelineRunPending}}]
    specSync: [{{path: .spec.status, values: [Cancelled, CancelledRunFinally, StoppedRunFinally]}}]
    suspended: {{path: .spec.status, equals: PipelineRunPending}}
    finished: {{path: '{SUCCEEDED}', notIn: [Unknown]}}
    failed: {{path: '{SUCCEEDED}', equals: 'False'}}
"""
WIDGETS = """
multiKueue:
  gcInterval: 2s
  workerLostTimeout: 10s
  externalFrameworks: [{name: PipelineRun.v1.tekton.dev}, {name: Widget.v1.examples.multikueue.x-k8s.io}]
dispatcher:
  adapters:
  - name: Widget.v1.examples.multikueue.x-k8s.io
    managedByPath: .spec.runPolicy.managedBy
    create: {remove: [.spec.ttlSecondsAfterFinished]}
    finished: {path: .status.phase, equals: Done}
"""


def _condition(obj: Any, kind: str) -> Any:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def _succeeded(status: str, reason: str) -> dict[str, Any]:
    return {
        "startTime": "2026-08-01T10:00:01Z",
        "completionTime": "2026-08-01T10:05:00Z",
        "conditions": [{"type": "Succeeded", "status": status, "reason": reason, "message": "done",
                        "lastTransitionTime": "2026-08-01T10:05:00Z"}],
    }  # fmt: skip


async def _dispatched(s: Scenario, name: str, wl_name: str, worker: str = "worker1") -> Any:
    await s.wait(s.workloads(worker), wl_name, lambda w: w is not None, f"copy on {worker}")
    await kueue.admit(s.api[worker], wl_name, s.namespace)
    return await s.wait(s.runs(worker), name, lambda r: r is not None, f"{name} on {worker}")


# A long worker-lost timeout: the periodic requeue it sets cannot carry the cancel; only the owner's watch can.
@pytest.mark.parametrize("multikueue_config", [TEKTON.replace("workerLostTimeout: 10s", "workerLostTimeout: 10m")])
async def test_cancel_on_the_manager_reaches_the_worker(scenario: Scenario) -> None:
    s = scenario
    _, workload = await s.submit("cancel-me")
    await _dispatched(s, "cancel-me", workload["metadata"]["name"])
    await s.runs("manager").patch("cancel-me", {"spec": {"status": "Cancelled"}}, s.namespace)
    await s.wait(
        s.runs("worker1"),
        "cancel-me",
        lambda r: (r or {}).get("spec", {}).get("status") == "Cancelled",
        "Cancelled carried to worker1",
    )


@pytest.mark.parametrize("multikueue_config", [TEKTON])
async def test_a_pending_manager_object_defers_status_and_syncs_once_unsuspended(scenario: Scenario) -> None:
    s = scenario
    body = pipelinerun("pending", labels={"kueue.x-k8s.io/queue-name": "user-queue"})
    body["spec"].update(managedBy=kueue.MANAGED_BY, status="PipelineRunPending")
    _, workload = await s.submit_object(s.runs("manager").resource, body)
    remote = await _dispatched(s, "pending", workload["metadata"]["name"])
    assert "status" not in remote["spec"], "a Pending copy would never start where no Kueue unsuspends it"

    await s.runs("worker1").patch_status("pending", {"status": running_status("pending")}, s.namespace)
    await eventually(
        lambda: s.events("pending"),
        until=lambda events: any(
            "is held back while this PipelineRun is suspended" in (e.message or "") for e in events
        ),
        what="an Event on the manager PipelineRun saying its status waits",
    )
    held = await s.get(s.runs("manager"), "pending")
    assert "status" not in held or not held["status"].get("conditions"), held.get("status")

    await s.runs("manager").patch("pending", {"spec": {"status": None}}, s.namespace)
    await s.wait(
        s.runs("manager"),
        "pending",
        lambda r: (_condition(r, "Succeeded") or {}).get("reason") == "Running",
        "status mirrored once unsuspended",
    )


@pytest.mark.parametrize("multikueue_config", [TEKTON])
async def test_a_run_finishes_from_its_own_status_with_no_worker_workload_movement(scenario: Scenario) -> None:
    s = scenario
    _, workload = await s.submit("self-finishing")
    wl_name = workload["metadata"]["name"]
    await _dispatched(s, "self-finishing", wl_name)
    await s.runs("worker1").patch_status("self-finishing", {"status": _succeeded("False", "Failed")}, s.namespace)

    finished = await s.wait(
        s.workloads("manager"),
        wl_name,
        lambda w: (_condition(w, "Finished") or {}).get("status") == "True",
        "manager Workload Finished",
    )
    assert _condition(finished, "Finished")["reason"] == "Failed"
    manager_run = await s.get(s.runs("manager"), "self-finishing")
    assert _condition(manager_run, "Succeeded")["status"] == "False", "the final status arrives before the finish"
    remote_wl = await s.workloads("worker1").get(wl_name, s.namespace)
    assert remote_wl is None or _condition(remote_wl, "Finished") is None, "the worker's Workload never finished"
    await s.wait(s.runs("worker1"), "self-finishing", lambda r: r is None, "worker copy removed")
    await s.wait(s.workloads("worker1"), wl_name, lambda w: w is None, "worker Workload removed")


@pytest.mark.parametrize("multikueue_config", [WIDGETS])
async def test_managed_by_elsewhere_and_a_ttl_that_cannot_outrun_the_final_status(
    scenario: Scenario, widgets: Resource
) -> None:
    s = scenario
    body = widget("w-ttl", managed_by=None)
    body["spec"].update(runPolicy={"managedBy": kueue.MANAGED_BY, "backoffLimit": 2}, ttlSecondsAfterFinished=0)
    _, workload = await s.submit_object(widgets, body)
    wl_name = workload["metadata"]["name"]
    await s.wait(s.workloads("worker1"), wl_name, lambda w: w is not None, "copy on worker1")
    await kueue.admit(s.api["worker1"], wl_name, s.namespace)
    remote_widgets = s.objects("worker1", widgets)
    remote = await s.wait(remote_widgets, "w-ttl", lambda r: r is not None, "Widget on worker1")
    assert remote["spec"] == {"size": 3, "runPolicy": {"backoffLimit": 2}}, "managedBy and the TTL stay home"

    await remote_widgets.patch_status("w-ttl", {"status": {"phase": "Done", "message": "all good"}}, s.namespace)
    await s.wait(
        s.workloads("manager"),
        wl_name,
        lambda w: (_condition(w, "Finished") or {}).get("reason") == "Succeeded",
        "finished from the Widget's own phase",
    )
    final = await s.get(s.objects("manager", widgets), "w-ttl")
    assert final["status"] == {"phase": "Done", "message": "all good"}
    await s.wait(remote_widgets, "w-ttl", lambda r: r is None, "worker Widget removed after its status was kept")


ADOPT = TEKTON.replace(
    "  - name: PipelineRun.v1.tekton.dev\n", "  - name: PipelineRun.v1.tekton.dev\n    conflictPolicy: Adopt\n"
)


async def _pre_existing(s: Scenario, name: str, annotations: dict[str, str]) -> tuple[str, Any]:
    """The manager run and, on worker1, a same-named run without the origin label carrying ``annotations``
    (``{uid}`` is replaced by the manager run's UID)."""
    manager_run, workload = await s.submit(name)
    uid = manager_run["metadata"]["uid"]
    stray = pipelinerun(name)
    stray["metadata"]["annotations"] = {k: v.replace("{uid}", uid) for k, v in annotations.items()}
    await s.runs("worker1").create(stray, s.namespace)
    wl_name = workload["metadata"]["name"]
    await s.wait(s.workloads("worker1"), wl_name, lambda w: w is not None, "copy on worker1")
    await kueue.admit(s.api["worker1"], wl_name, s.namespace)
    return wl_name, manager_run


@pytest.mark.parametrize("multikueue_config", [ADOPT])
async def test_adopt_takes_over_a_copy_that_proves_it_is_ours(scenario: Scenario) -> None:
    s = scenario
    wl_name, _ = await _pre_existing(
        s, "ours", {"multikueue.x-k8s.io/origin": "multikueue", "multikueue.x-k8s.io/manager-uid": "{uid}"}
    )
    adopted = await s.wait(
        s.runs("worker1"),
        "ours",
        lambda r: (
            ((r or {}).get("metadata", {}).get("labels") or {}).get("kueue.x-k8s.io/multikueue-origin") == "multikueue"
        ),
        "origin label added by adoption",
    )
    await s.runs("worker1").patch_status("ours", {"status": running_status("ours")}, s.namespace)
    await s.wait(s.runs("manager"), "ours", lambda r: _condition(r, "Succeeded") is not None, "status mirrored")
    await s.check_state(wl_name, state="Ready")
    assert adopted["metadata"]["annotations"]["multikueue.x-k8s.io/origin"] == "multikueue"


@pytest.mark.parametrize("multikueue_config", [ADOPT])
async def test_adopt_refuses_a_copy_made_for_another_object_and_says_so_on_the_manager_object(
    scenario: Scenario,
) -> None:
    s = scenario
    wl_name, _ = await _pre_existing(
        s, "not-ours", {"multikueue.x-k8s.io/origin": "multikueue", "multikueue.x-k8s.io/manager-uid": "another"}
    )
    await eventually(
        lambda: s.events("not-ours"),
        until=lambda events: any(
            e.type == "Warning" and "was not created by this manager" in (e.message or "") for e in events
        ),
        what="a Warning on the manager PipelineRun",
    )
    untouched = await s.get(s.runs("worker1"), "not-ours")
    assert "kueue.x-k8s.io/multikueue-origin" not in (untouched["metadata"].get("labels") or {})
    await s.check_state(wl_name, state="Retry", message="Cannot dispatch: PipelineRun")


async def test_a_workers_pending_reason_and_warnings_appear_on_the_manager_object_once(scenario: Scenario) -> None:
    s = scenario
    _, workload = await s.submit("news")
    wl_name = workload["metadata"]["name"]
    await s.copied(wl_name)
    why = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 1 more needed"
    await kueue.pending(s.api["worker2"], wl_name, s.namespace, why)
    await kueue.admit(s.api["worker1"], wl_name, s.namespace)
    remote = await s.wait(s.runs("worker1"), "news", lambda r: r is not None, "run on worker1")
    for _ in range(2):  # the same warning twice is told once
        await record(s.api["worker1"], remote, type_="Warning", reason="TaskRunImagePullFailed",
                     message="image busybox cannot be pulled", component="tekton")  # fmt: skip

    w1, w2 = s.names["worker1"], s.names["worker2"]
    expected = {
        ("Normal", "WorkerPending", f'worker "{w2}": {why}'),
        ("Warning", "WorkerWarning", f'worker "{w1}": TaskRunImagePullFailed: image busybox cannot be pulled'),
    }

    def told(events: list[Any]) -> set[tuple[str, str, str]]:
        return {(e.type, e.reason, e.message) for e in events if e.reason in ("WorkerPending", "WorkerWarning")}

    events = await eventually(lambda: s.events("news"), until=lambda e: told(e) == expected, what="worker news")
    warnings = [e for e in events if e.reason == "WorkerWarning"]
    assert len(warnings) == 1, [e.message for e in warnings]
