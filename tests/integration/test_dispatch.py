"""The workload flow end to end on the real bed, with the tests playing Kueue's part (quota, admission on workers)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from multikueue import specdigest
from multikueue.kube.addresses import Resource
from multikueue.kube.resources import Objects
from multikueue.labels import PREBUILT_WORKLOAD
from multikueue.runtime.informer import ObjectKey
from multikueue_testbed import kueue
from multikueue_testbed.client import k8s
from multikueue_testbed.objects import pipelinerun, running_status
from multikueue_testbed.waiting import eventually, wait_until
from tests.integration.controller import run_argv
from tests.integration.scenario import Scenario

ORIGIN = "kueue.x-k8s.io/multikueue-origin"


async def test_happy_path_on_two_workers(scenario: Scenario) -> None:
    s = scenario
    _, workload = await s.submit("hello")
    wl_name = workload["metadata"]["name"]

    # Copies of the Workload on both workers, identical spec, with the origin label.
    for worker in ("worker1", "worker2"):
        copy = await s.wait(s.workloads(worker), wl_name, lambda w: w is not None, f"copy on {worker}")
        assert copy["spec"] == workload["spec"]
        assert copy["metadata"]["labels"][ORIGIN] == "multikueue"
        assert "kueue.x-k8s.io/job-uid" not in copy["metadata"]["labels"]
        assert not copy["metadata"].get("ownerReferences")
    manager_wl = await s.get(s.workloads("manager"), wl_name)
    assert sorted(manager_wl["status"]["nominatedClusterNames"]) == sorted([s.names["worker1"], s.names["worker2"]])

    # worker2's Kueue admits first: it wins, worker1's copy goes, the object is created on worker2.
    await kueue.admit(s.api["worker2"], wl_name, s.namespace)
    await s.check_state(wl_name, state="Ready", message=f'The workload was admitted on "{s.names["worker2"]}"')
    manager_wl = await s.get(s.workloads("manager"), wl_name)
    assert manager_wl["status"]["clusterName"] == s.names["worker2"]
    assert "nominatedClusterNames" not in manager_wl["status"]
    await s.wait(s.workloads("worker1"), wl_name, lambda w: w is None, "loser's copy deleted")
    remote = await s.wait(s.runs("worker2"), "hello", lambda r: r is not None, "PipelineRun on worker2")
    assert "managedBy" not in remote["spec"]
    assert remote["metadata"]["labels"][ORIGIN] == "multikueue"
    assert remote["metadata"]["annotations"]["kueue.x-k8s.io/prebuilt-workload-name"] == wl_name
    assert not remote["metadata"].get("ownerReferences")
    assert "status" not in remote
    assert await s.runs("worker1").get("hello", s.namespace) is None

    # The worker's status is mirrored to the manager's PipelineRun.
    await s.runs("worker2").patch_status("hello", {"status": running_status("hello")}, s.namespace)
    mirrored = await s.wait(s.runs("manager"), "hello", lambda r: "status" in r, "status mirrored")
    assert mirrored["status"] == running_status("hello")

    # Finished on the worker: final status copied first, then the manager Workload finishes with the reason.
    final = {
        **running_status("hello"),
        "completionTime": "2026-08-01T10:00:20Z",
        "conditions": [
            {
                "type": "Succeeded",
                "status": "True",
                "reason": "Succeeded",
                "message": "Tasks Completed: 1 (Failed: 0, Cancelled 0), Skipped: 0",
                "lastTransitionTime": "2026-08-01T10:00:20Z",
            }
        ],
    }
    await s.runs("worker2").patch_status("hello", {"status": final}, s.namespace)
    await kueue.finish(s.api["worker2"], wl_name, s.namespace, reason="Succeeded", message="Job finished successfully")

    def finished(w: Any) -> bool:
        return any(c["type"] == "Finished" and c["status"] == "True" for c in w["status"].get("conditions", []))

    manager_wl = await s.wait(s.workloads("manager"), wl_name, finished, "manager Workload finished")
    condition = next(c for c in manager_wl["status"]["conditions"] if c["type"] == "Finished")
    assert (condition["reason"], condition["message"]) == ("Succeeded", "Job finished successfully")
    manager_run = await s.get(s.runs("manager"), "hello")
    assert manager_run["status"]["conditions"][0]["reason"] == "Succeeded"
    assert manager_run["status"]["completionTime"] == "2026-08-01T10:00:20Z"

    # Nothing left on either worker.
    for worker in ("worker1", "worker2"):
        await s.wait(s.workloads(worker), wl_name, lambda w: w is None, f"no Workload left on {worker}")
        await s.wait(s.runs(worker), "hello", lambda r: r is None, f"no PipelineRun left on {worker}")


async def test_an_owner_not_managed_by_multikueue_is_rejected(scenario: Scenario) -> None:
    s = scenario
    _, workload = await s.submit("local-only", managed_by=None)
    wl_name = workload["metadata"]["name"]
    await s.check_state(
        wl_name,
        state="Rejected",
        message='The owner is not managed by Kueue: Expecting .spec.managedBy to be "kueue.x-k8s.io/multikueue" '
        'not "", Previously: "Pending"',
    )
    for worker in ("worker1", "worker2"):
        assert await s.workloads(worker).get(wl_name, s.namespace) is None


async def test_an_owner_of_a_kind_not_configured_is_rejected(scenario: Scenario) -> None:
    s = scenario
    from kubernetes_asyncio import client as k8s_client

    owner = await k8s_client.CoreV1Api(k8s(s.api["manager"])).create_namespaced_config_map(
        s.namespace, {"metadata": {"name": "not-a-job"}}
    )
    body = kueue.workload_for(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "not-a-job", "namespace": s.namespace, "uid": owner.metadata.uid},
        }
    )
    workload = await s.workloads("manager").create(body, s.namespace)
    await kueue.reserve_quota(s.api["manager"], workload["metadata"]["name"], s.namespace, checks=[s.names["check"]])
    await s.check_state(
        workload["metadata"]["name"],
        state="Rejected",
        message='No multikueue adapter found for owner kind "/v1, Kind=ConfigMap", Previously: "Pending"',
    )
    for worker in ("worker1", "worker2"):
        assert await s.workloads(worker).get(workload["metadata"]["name"], s.namespace) is None


async def test_quota_lost_on_the_manager_removes_the_copies(scenario: Scenario) -> None:
    s = scenario
    _, workload = await s.submit("requeued")
    wl_name = workload["metadata"]["name"]
    await s.copied(wl_name)

    current = await s.get(s.workloads("manager"), wl_name)
    conditions = [
        {**c, "status": "False", "reason": "Pending"} if c["type"] == "QuotaReserved" else c
        for c in current["status"]["conditions"]
    ]
    await s.workloads("manager").patch_status(
        wl_name, {"status": {"conditions": conditions, "admission": None}}, s.namespace
    )
    for worker in ("worker1", "worker2"):
        await s.wait(s.workloads(worker), wl_name, lambda w: w is None, f"copy removed from {worker}")


async def _admitted_on_worker2(s: Scenario, name: str) -> str:
    _, workload = await s.submit(name)
    wl_name: str = workload["metadata"]["name"]
    await s.wait(s.workloads("worker2"), wl_name, lambda w: w is not None, "copy on worker2")
    await kueue.admit(s.api["worker2"], wl_name, s.namespace)
    await s.check_state(wl_name, state="Ready")
    await s.wait(s.runs("worker2"), name, lambda r: r is not None, "PipelineRun on worker2")
    return wl_name


async def test_eviction_on_the_worker_resets_the_check_for_readmission(scenario: Scenario) -> None:
    s = scenario
    wl_name = await _admitted_on_worker2(s, "evicted")
    await kueue.evict(s.api["worker2"], wl_name, s.namespace, reason="Preempted")
    await s.check_state(
        wl_name,
        state="Retry",
        message=f'Workload evicted on worker cluster: "{s.names["worker2"]}", resetting for re-admission. '
        'Previously: "Ready"',
    )


async def test_a_remote_finish_out_of_sync_retries_instead_of_finishing(scenario: Scenario) -> None:
    s = scenario
    wl_name = await _admitted_on_worker2(s, "drifted")
    await kueue.finish(s.api["worker2"], wl_name, s.namespace, reason="OutOfSync", message="podsets differ")
    expected = (
        f'Remote workload on worker cluster "{s.names["worker2"]}" is out of sync with its user job, '
        'resetting for re-dispatch, Previously: "Ready"'
    )
    await s.check_state(wl_name, state="Retry", message=expected)
    manager_wl = await s.get(s.workloads("manager"), wl_name)
    assert not any(c["type"] == "Finished" for c in manager_wl["status"]["conditions"])
    # The Event is written after the check's state: wait for it rather than read once.
    events = await eventually(lambda: s.events(wl_name), until=lambda found: any(e.type == "Warning" for e in found),
                              what="the Warning on the Workload")  # fmt: skip
    warnings = [e for e in events if e.type == "Warning"]
    assert [e.message for e in warnings] == [expected]
    assert warnings[0].reason == "MultiKueue"


async def test_a_same_named_object_not_from_this_manager_is_left_untouched_and_reported(scenario: Scenario) -> None:
    s = scenario
    foreign = pipelinerun("taken", labels={"team": "worker-local"})
    await s.runs("worker2").create(foreign, s.namespace)
    _, workload = await s.submit("taken")
    wl_name = workload["metadata"]["name"]
    await s.wait(s.workloads("worker2"), wl_name, lambda w: w is not None, "copy on worker2")
    await kueue.admit(s.api["worker2"], wl_name, s.namespace)

    await eventually(
        lambda: s.events(wl_name),
        until=lambda events: any("was not created by this manager" in (e.message or "") for e in events),
        what="a Warning naming the foreign object",
    )
    untouched = await s.get(s.runs("worker2"), "taken")
    assert untouched["metadata"]["labels"] == {"team": "worker-local"}
    assert "managedBy" not in untouched["spec"]
    # The winner was recorded before the create; a create that certainly did not happen there resets the check for
    # re-admission, with the reason.
    refused = f"Cannot dispatch: PipelineRun {s.namespace}/taken on worker {s.names['worker2']} was not created"
    await s.check_state(wl_name, state="Retry", message=refused)
    manager_wl = await s.get(s.workloads("manager"), wl_name)
    state = next(c for c in manager_wl["status"]["admissionChecks"] if c["name"] == s.names["check"])
    assert state["message"].endswith('; resetting for re-admission, Previously: "Ready"'), state["message"]
    on_run = await eventually(
        lambda: s.events("taken"),
        until=lambda events: any(e.reason == "DispatchFailed" for e in events),
        what="a DispatchFailed Warning on the PipelineRun",
    )
    assert [e.message for e in on_run if e.reason == "DispatchFailed"] == [state["message"].split(", Previously")[0]]


async def test_a_briefly_lost_worker_does_not_evict(scenario: Scenario) -> None:
    s = scenario
    wl_name = await _admitted_on_worker2(s, "brief")
    before = await s.get(s.workloads("manager"), wl_name)
    s.bed.stop_apiserver("worker2", kill=True)
    try:
        await s.connected("worker2", False)
    finally:
        s.bed.start_apiserver("worker2")
    await s.connected("worker2", True)
    after = await s.get(s.workloads("manager"), wl_name)
    state = next(c for c in after["status"]["admissionChecks"] if c["name"] == s.names["check"])
    assert state["state"] == "Ready"
    assert after["status"]["clusterName"] == before["status"]["clusterName"] == s.names["worker2"]


async def test_a_worker_lost_past_the_timeout_is_retried_and_cleaned_when_back(scenario: Scenario) -> None:
    s = scenario
    wl_name = await _admitted_on_worker2(s, "lost")
    s.bed.stop_apiserver("worker2", kill=True)
    try:
        await s.connected("worker2", False)
        await s.check_state(wl_name, state="Retry", message='Admitting remote lost, Previously: "Ready"')
        # Kueue's core answers Retry by evicting: quota released, checks reset to Pending, clusterName cleared.
        current = await s.get(s.workloads("manager"), wl_name)
        conditions = [
            {**c, "status": "False", "reason": "Pending"} if c["type"] == "QuotaReserved" else c
            for c in current["status"]["conditions"]
        ]
        checks = [
            {**c, "state": "Pending", "message": 'Reset to Pending after eviction. Previously: "Retry"'}
            for c in current["status"]["admissionChecks"]
        ]
        await s.workloads("manager").patch_status(
            wl_name,
            {"status": {"conditions": conditions, "admissionChecks": checks, "admission": None, "clusterName": None}},
            s.namespace,
        )
    finally:
        s.bed.start_apiserver("worker2")
    await s.wait(s.workloads("worker2"), wl_name, lambda w: w is None, "stale copy removed from worker2")
    await s.wait(s.runs("worker2"), "lost", lambda r: r is None, "stale PipelineRun removed from worker2")


async def test_a_worker_lost_across_a_controller_restart_is_not_evicted_at_once(scenario: Scenario) -> None:
    s = scenario
    wl_name = await _admitted_on_worker2(s, "restarted")
    s.stop_manager()
    s.bed.stop_apiserver("worker2", kill=True)
    try:
        await s.start_manager(wait_for=("worker1",))
        # The new controller has never seen worker2: the grace period starts at its own start, so its first
        # look at the Workload schedules another look instead of evicting.
        assert s.manager is not None
        controller = s.manager.generation.workload_controller
        await wait_until(lambda: controller.reconciles > 0 and controller.queue.delayed > 0, what="a delayed look")
        await s.check_state(wl_name, state="Ready")
        await s.check_state(wl_name, state="Retry", message='Admitting remote lost, Previously: "Ready"')
    finally:
        s.bed.start_apiserver("worker2")


async def test_manager_objects_deleted_while_a_worker_is_away_are_collected_when_it_returns(
    scenario: Scenario,
) -> None:
    s = scenario
    wl_name = await _admitted_on_worker2(s, "gone")
    s.bed.stop_apiserver("worker2", kill=True)
    try:
        await s.connected("worker2", False)
        await s.workloads("manager").delete(wl_name, s.namespace)
        await s.runs("manager").delete("gone", s.namespace)
        assert await s.workloads("manager").get(wl_name, s.namespace) is None
    finally:
        s.bed.start_apiserver("worker2")
    await s.connected("worker2", True)
    await s.wait(s.workloads("worker2"), wl_name, lambda w: w is None, "worker2 Workload collected")
    await s.wait(s.runs("worker2"), "gone", lambda r: r is None, "worker2 PipelineRun collected")


async def test_an_orphan_worker_object_named_only_by_the_label_is_collected(scenario: Scenario) -> None:
    """Kueue names a copy's Workload in the annotation or the label: garbage collection reads both, as every other
    path does (it used to read only the annotation, and left such an object behind for good)."""
    s = scenario
    wl_name = await _admitted_on_worker2(s, "labelled")
    copy = await s.get(s.runs("worker2"), "labelled")
    assert copy["metadata"]["labels"][PREBUILT_WORKLOAD] == wl_name
    await s.runs("worker2").patch("labelled", {"metadata": {"annotations": {PREBUILT_WORKLOAD: None}}}, s.namespace)
    s.bed.stop_apiserver("worker2", kill=True)
    try:
        await s.connected("worker2", False)
        await s.workloads("manager").delete(wl_name, s.namespace)
        await s.runs("manager").delete("labelled", s.namespace)
    finally:
        s.bed.start_apiserver("worker2")
    await s.connected("worker2", True)
    await s.wait(s.workloads("worker2"), wl_name, lambda w: w is None, "worker2 Workload collected")
    await s.wait(s.runs("worker2"), "labelled", lambda r: r is None, "worker2 PipelineRun collected")


async def test_a_controller_killed_mid_dispatch_neither_duplicates_nor_loses_the_run(
    scenario: Scenario, tmp_path: Path
) -> None:
    import signal
    import subprocess

    s = scenario
    s.stop_manager()  # this test runs the controller as a real process, to kill it for real
    argv = run_argv(
        s.bed,
        tmp_path,
        "multiKueue: {workerLostTimeout: 10s, externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}\n"
        f"dispatcher: {{namespace: {s.namespace}, eventsBatchPeriod: 100ms}}\n",
        "--metrics-bind-address",
        "",
        "--health-probe-bind-address",
        "",
    )
    log = (tmp_path / "controller.log").open("w")
    first = await anyio.open_process(argv, stdout=log, stderr=subprocess.STDOUT)
    second = None
    try:
        _, workload = await s.submit("crash")
        wl_name = workload["metadata"]["name"]
        for worker in ("worker1", "worker2"):
            await s.wait(s.workloads(worker), wl_name, lambda w: w is not None, f"copy on {worker}")
        await kueue.admit(s.api["worker2"], wl_name, s.namespace)
        created = await s.wait(
            s.runs("worker2"), "crash", lambda r: r is not None, "PipelineRun on worker2", timeout=30
        )
        first.send_signal(signal.SIGKILL)  # right after the create, whatever else was in flight
        with anyio.fail_after(30):
            await first.wait()

        second = await anyio.open_process(argv, stdout=log, stderr=subprocess.STDOUT)
        await s.check_state(wl_name, state="Ready", message=f'The workload was admitted on "{s.names["worker2"]}"')
        await s.wait(s.workloads("worker1"), wl_name, lambda w: w is None, "loser's copy removed")
        survivor = await s.get(s.runs("worker2"), "crash")
        assert survivor["metadata"]["uid"] == created["metadata"]["uid"], "the run was recreated"
        assert await s.runs("worker1").get("crash", s.namespace) is None
        await s.runs("worker2").patch_status("crash", {"status": running_status("crash")}, s.namespace)
        await s.wait(s.runs("manager"), "crash", lambda r: "status" in r, "status mirrored by the new process")
    finally:
        for process in (first, second):
            if process is not None and process.returncode is None:
                process.terminate()
                with anyio.fail_after(30):
                    await process.wait()
        log.close()


@pytest.mark.parametrize(
    "multikueue_config",
    ["multiKueue: {gcInterval: 2s, workerLostTimeout: 10s}\ndispatcher: {workerClient: {timeout: 20s}}"],
)
async def test_a_replica_taking_over_waits_for_a_slow_worker_that_may_hold_the_run(scenario: Scenario) -> None:
    """The run's object is created on the winner before the winner is recorded (Kueue's order). A replica that
    takes over in between connects to the workers one by one: while the worker holding the run has not answered
    yet, another worker's admitted copy must not win (that ran the run twice in the kind e2e)."""
    s = scenario
    _, workload = await s.submit("held")
    wl_name = workload["metadata"]["name"]
    await s.copied(wl_name)
    await kueue.admit(s.api["worker1"], wl_name, s.namespace)
    await s.check_state(wl_name, state="Ready", message=f'The workload was admitted on "{s.names["worker1"]}"')
    held = await s.wait(s.runs("worker1"), "held", lambda r: r is not None, "PipelineRun on worker1")
    s.stop_manager()

    # What a replica killed between the create and the record leaves: the run on worker1, nothing recorded, and
    # worker2's copy (not yet removed as the loser's) admitted too.
    worker1_copy = await s.get(s.workloads("worker1"), wl_name)
    meta = worker1_copy["metadata"]
    await s.workloads("worker2").create(
        {
            "apiVersion": worker1_copy["apiVersion"], "kind": worker1_copy["kind"], "spec": worker1_copy["spec"],
            "metadata": {"name": wl_name, "labels": meta.get("labels"), "annotations": meta.get("annotations")},
        },
        s.namespace,
    )  # fmt: skip
    await kueue.admit(s.api["worker2"], wl_name, s.namespace)
    manager_wl = await s.get(s.workloads("manager"), wl_name)
    checks = [
        {**c, "state": "Pending", "message": ""} if c["name"] == s.names["check"] else c
        for c in manager_wl["status"]["admissionChecks"]
    ]
    nominated = [s.names["worker1"], s.names["worker2"]]
    await s.workloads("manager").patch_status(
        wl_name,
        {"status": {"admissionChecks": checks, "clusterName": None, "nominatedClusterNames": nominated}},
        s.namespace,
    )

    s.bed.pause_apiserver("worker1")  # worker1 answers nothing: the new replica's first try to connect hangs
    try:
        await s.start_manager(wait_for=("worker2",))
        assert s.manager is not None
        queue = s.manager.generation.workload_controller.queue
        key = ObjectKey(s.namespace, wl_name)
        await wait_until(lambda: queue.is_delayed(key), what="the Workload looked at, and looked at again later")
    finally:
        s.bed.resume_apiserver("worker1")
    await s.check_state(wl_name, state="Ready", message=f'The workload was admitted on "{s.names["worker1"]}"')
    await s.wait(s.workloads("worker2"), wl_name, lambda w: w is None, "the loser's copy removed from worker2")
    assert (await s.get(s.runs("worker1"), "held"))["metadata"]["uid"] == held["metadata"]["uid"], "run recreated"
    assert await s.runs("worker2").get("held", s.namespace) is None


@pytest.mark.parametrize(
    "multikueue_config",
    [
        "multiKueue: {dispatcherName: kueue.x-k8s.io/multikueue-dispatcher-incremental, "
        "incrementalDispatcherConfig: {stepSize: 1}}"
    ],
)
async def test_incremental_dispatch_nominates_workers_in_config_order_round_by_round(scenario: Scenario) -> None:
    s = scenario
    _, workload = await s.submit("stepwise")
    wl_name = workload["metadata"]["name"]
    first = await s.wait(
        s.workloads("manager"), wl_name, lambda w: (w["status"].get("nominatedClusterNames") or []) != [], "first round"
    )
    assert first["status"]["nominatedClusterNames"] == [s.names["worker1"]]
    await s.wait(s.workloads("worker1"), wl_name, lambda w: w is not None, "copy on worker1")
    assert await s.workloads("worker2").get(wl_name, s.namespace) is None

    second = await s.wait(
        s.workloads("manager"),
        wl_name,
        lambda w: len(w["status"].get("nominatedClusterNames") or []) == 2,
        "second round",
    )
    assert second["status"]["nominatedClusterNames"] == [s.names["worker1"], s.names["worker2"]]
    await s.wait(s.workloads("worker2"), wl_name, lambda w: w is not None, "copy on worker2")

    await kueue.admit(s.api["worker2"], wl_name, s.namespace)
    admitted = await s.check_state(wl_name, state="Ready")
    assert "nominatedClusterNames" not in admitted["status"]
    assert admitted["status"]["clusterName"] == s.names["worker2"]


@pytest.mark.parametrize("multikueue_config", ["multiKueue: {dispatcherName: example.com/my-dispatcher}"])
async def test_an_external_dispatcher_decides_where_copies_go(scenario: Scenario) -> None:
    s = scenario
    _, workload = await s.submit("steered")
    wl_name = workload["metadata"]["name"]
    assert s.manager is not None
    controller = s.manager.generation.workload_controller
    await wait_until(lambda: controller.reconciles > 0 and len(controller.queue) == 0, what="the Workload seen")
    for worker in ("worker1", "worker2"):
        assert await s.workloads(worker).get(wl_name, s.namespace) is None, "no nominations, no copies"

    await s.workloads("manager").patch_status(
        wl_name, {"status": {"nominatedClusterNames": [s.names["worker2"]]}}, s.namespace
    )
    await s.wait(s.workloads("worker2"), wl_name, lambda w: w is not None, "copy on worker2")
    assert await s.workloads("worker1").get(wl_name, s.namespace) is None

    await s.workloads("manager").patch_status(
        wl_name, {"status": {"nominatedClusterNames": [s.names["worker1"]]}}, s.namespace
    )
    await s.wait(s.workloads("worker1"), wl_name, lambda w: w is not None, "copy on worker1")
    await s.wait(s.workloads("worker2"), wl_name, lambda w: w is None, "copy removed from worker2")


WIDGET_KIND = (
    "multiKueue: {gcInterval: 2s, workerLostTimeout: 10s, externalFrameworks: "
    "[{name: PipelineRun.v1.tekton.dev}, {name: Widget.v1.examples.multikueue.x-k8s.io}]}"
)


@pytest.mark.parametrize("multikueue_config", [WIDGET_KIND])
async def test_a_kind_missing_on_a_worker_is_dispatched_only_where_it_exists(
    scenario: Scenario, widgets: Resource
) -> None:
    from multikueue_testbed.objects import widget

    s = scenario
    # The kind was installed after the controller started: its next look at the workers (every 30 s) finds it.
    assert s.manager is not None
    connections = s.manager.generation.cluster_reconciler.connections
    widget_kind = next(g for g in s.manager.config.multi_kueue.gvks if g.kind == "Widget")
    await wait_until(
        lambda: widget_kind in connections[s.names["worker1"]].resources, timeout=60, what="Widget found on worker1"
    )
    _, workload = await s.submit_object(widgets, widget("w"))
    wl_name = workload["metadata"]["name"]
    nominated = await s.wait(
        s.workloads("manager"), wl_name, lambda w: w["status"].get("nominatedClusterNames"), "nominations"
    )
    assert nominated["status"]["nominatedClusterNames"] == [s.names["worker1"]]
    assert await s.workloads("worker2").get(wl_name, s.namespace) is None

    await s.wait(s.workloads("worker1"), wl_name, lambda w: w is not None, "copy on worker1")
    await kueue.admit(s.api["worker1"], wl_name, s.namespace)
    await s.check_state(wl_name, state="Ready", message=f'The workload was admitted on "{s.names["worker1"]}"')
    remote = await s.wait(Objects(s.api["worker1"], widgets), "w", lambda r: r is not None, "Widget on worker1")
    assert remote["spec"] == {"size": 3}


@pytest.mark.parametrize("multikueue_config", [WIDGET_KIND])
async def test_a_status_the_manager_rejects_is_reported_and_retried(scenario: Scenario, widgets: Resource) -> None:
    from multikueue_testbed.objects import widget

    s = scenario
    assert s.manager is not None
    clusters = s.manager.generation.cluster_reconciler
    assert clusters is not None
    # A direct reconcile (rediscovery of the new kind) may meet the loop's own status write: a conflict is retried.
    await eventually(lambda: clusters.reconcile(s.names["worker1"]), until=lambda _: True, what="worker1 rediscovered")
    _, workload = await s.submit_object(widgets, widget("picky"))
    wl_name = workload["metadata"]["name"]
    await s.wait(s.workloads("worker1"), wl_name, lambda w: w is not None, "copy on worker1")
    await kueue.admit(s.api["worker1"], wl_name, s.namespace)
    worker_widgets = Objects(s.api["worker1"], widgets)
    await s.wait(worker_widgets, "picky", lambda r: r is not None, "Widget on worker1")

    await worker_widgets.patch_status("picky", {"status": {"phase": "Exploded"}}, s.namespace)
    events = await eventually(
        lambda: s.events(wl_name),
        until=lambda found: any("rejected by the manager: HTTP 422" in (e.message or "") for e in found),
        what="a Warning about the rejected status",
    )
    rejected = next(e for e in events if "rejected by the manager" in (e.message or ""))
    assert rejected.type == "Warning"
    assert "Exploded" in rejected.message
    manager_widget = await s.get(Objects(s.api["manager"], widgets), "picky")
    assert "status" not in manager_widget

    await worker_widgets.patch_status("picky", {"status": {"phase": "Done"}}, s.namespace)
    mirrored = await s.wait(Objects(s.api["manager"], widgets), "picky", lambda r: "status" in r, "retried sync")
    assert mirrored["status"] == {"phase": "Done"}


async def test_eviction_on_the_manager_deactivates_the_worker_copy(scenario: Scenario) -> None:
    s = scenario
    wl_name = await _admitted_on_worker2(s, "preempted")
    await kueue.evict(s.api["manager"], wl_name, s.namespace, reason="Preempted", message="Preempted by a higher one")

    def deactivated(w: Any) -> bool:
        return any(c["type"] == "DeactivationTarget" and c["status"] == "True" for c in w["status"]["conditions"])

    remote = await s.wait(s.workloads("worker2"), wl_name, deactivated, "DeactivationTarget on worker2")
    condition = next(c for c in remote["status"]["conditions"] if c["type"] == "DeactivationTarget")
    assert (condition["reason"], condition["message"]) == (
        "EvictedOnManagerCluster",
        "Evicted on manager: Preempted by a higher one",
    )


async def test_a_priority_change_reaches_the_copies_and_other_spec_changes_replace_them(scenario: Scenario) -> None:
    s = scenario
    _, workload = await s.submit("drifting")
    wl_name = workload["metadata"]["name"]
    copies = {}
    for worker in ("worker1", "worker2"):
        copies[worker] = await s.wait(s.workloads(worker), wl_name, lambda w: w is not None, f"copy on {worker}")

    await s.workloads("manager").patch(wl_name, {"spec": {"priority": 100}}, s.namespace)
    for worker in ("worker1", "worker2"):
        updated = await s.wait(
            s.workloads(worker), wl_name, lambda w: w["spec"].get("priority") == 100, f"priority on {worker}"
        )
        assert updated["metadata"]["uid"] == copies[worker]["metadata"]["uid"], "updated in place, not replaced"
    # The worker caches keep a copy's spec as a digest and the priority fields: what the comparison reads, no more.
    assert s.manager is not None
    cache = s.manager.generation.cluster_reconciler.connections[s.names["worker1"]].workloads
    assert cache is not None
    key = ObjectKey(s.namespace, wl_name)
    await wait_until(lambda: (cache.get(key) or {}).get("spec", {}).get("priority") == 100, what="worker1's cache")
    assert set((cache.get(key) or {})["spec"]) == {specdigest.DIGEST, "priority"}

    await s.workloads("manager").patch(wl_name, {"spec": {"maximumExecutionTimeSeconds": 600}}, s.namespace)
    for worker in ("worker1", "worker2"):
        replaced = await s.wait(
            s.workloads(worker),
            wl_name,
            lambda w, old=copies[worker]["metadata"]["uid"]: w is not None and w["metadata"]["uid"] != old,
            f"copy on {worker} replaced",
        )
        assert replaced["spec"]["maximumExecutionTimeSeconds"] == 600


async def test_metrics_health_and_readiness_are_served(scenario: Scenario) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    from multikueue_testbed import scrape

    s = scenario
    wl_name = await _admitted_on_worker2(s, "measured")
    await s.runs("worker2").patch_status("measured", {"status": running_status("measured")}, s.namespace)
    await s.wait(s.runs("manager"), "measured", lambda r: "status" in r, "status mirrored")
    await kueue.finish(s.api["worker2"], wl_name, s.namespace, reason="Succeeded")
    await s.wait(s.workloads("worker2"), wl_name, lambda w: w is None, "finished and cleaned")
    assert s.manager is not None
    assert s.manager.endpoints is not None
    served = s.manager.endpoints
    for path in ("/healthz", "/readyz"):
        assert (path, await scrape.get(f"http://127.0.0.1:{served.health_port}{path}")) == (path, (200, "ok"))
    # as Prometheus would: HTTPS (the generated CA trusted), a token allowed by multikueue-metrics-reader
    assert served.metrics_port is not None
    token = await scrape.metrics_reader_token(s.api["manager"], namespace=s.namespace)
    text = await scrape.metrics(served.metrics_port, token, ca_pem=served.ca_pem)

    samples = {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }
    w1, w2 = s.names["worker1"], s.names["worker2"]
    assert samples[("multikueue_workloads_dispatched_total", (("cluster", w1), ("cluster_queue", "cq")))] == 1
    assert samples[("multikueue_workloads_dispatched_total", (("cluster", w2), ("cluster_queue", "cq")))] == 1
    assert samples[("multikueue_workloads_admitted_total", (("cluster", w2), ("cluster_queue", "cq")))] == 1
    assert samples[("multikueue_objects_dispatched_total", (("cluster", w2), ("kind", "PipelineRun")))] == 1
    assert samples[("multikueue_dispatch_latency_seconds_count", (("cluster", w2), ("kind", "PipelineRun")))] == 1
    assert samples[("multikueue_status_sync_lag_seconds_count", (("cluster", w2), ("kind", "PipelineRun")))] >= 1
    assert samples[("multikueue_worker_connected", (("cluster", w1),))] == 1
    assert samples[("multikueue_worker_connected", (("cluster", w2),))] == 1
    # Every request is counted per cluster and method: the copy and the run were created on worker2 (POST).
    assert samples[("multikueue_api_requests_total", (("cluster", w2), ("method", "POST")))] >= 2
    assert samples[("multikueue_api_requests_total", (("cluster", "manager"), ("method", "PATCH")))] >= 1
    assert samples[("multikueue_workqueue_wait_seconds_count", (("controller", "multikueue_workload"),))] >= 1
    finished = (("cluster", w2), ("kind", "PipelineRun"), ("reason", "Succeeded"))
    assert samples[("multikueue_objects_finished_total", finished)] == 1


async def test_a_copy_is_kept_while_it_is_unknown_whether_its_worker_serves_the_kind(scenario: Scenario) -> None:
    """Discovery failing for a reason other than the kind being absent (a timeout, a 503) says nothing about the
    kind: the worker is then not nominated for new runs, but copies already there stay. (A connection also counts
    as connected only after its first discovery: before, a busy start-up deleted copies a new leader found.)"""
    from multikueue.kube.addresses import GroupVersionKind
    from multikueue.runtime.informer import ObjectKey

    s = scenario
    _, workload = await s.submit("kept")
    wl_name = workload["metadata"]["name"]
    await s.copied(wl_name)
    assert s.manager is not None
    assert s.manager is not None
    connection = s.manager.generation.cluster_reconciler.connections[s.names["worker1"]]
    gvk = GroupVersionKind("tekton.dev", "v1", "PipelineRun")
    assert connection.serves(gvk) is True
    resource = connection.resources.pop(gvk)
    connection.kind_errors[gvk] = "discovery: HTTP 503"
    try:
        assert connection.serves(gvk) is None
        # The controller's own loop may write the Workload at the same moment: a conflict is retried.
        reconciler = s.manager.generation.workload_reconciler
        await eventually(
            lambda: reconciler.reconcile(ObjectKey(s.namespace, wl_name)),
            until=lambda _: True,
            what="a reconcile while discovery fails (a conflict retried)",
        )
        assert await s.workloads("worker1").get(wl_name, s.namespace) is not None
    finally:
        connection.resources[gvk] = resource
        connection.kind_errors.pop(gvk, None)


async def test_a_worker_workload_finished_before_its_objects_watch_brings_the_final_status_still_mirrors_it(
    scenario: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker's Workload copy and its object are watched apart; after a reconnect either may catch up first.
    Here the object's watch events are lost to the dispatcher's cache while Tekton writes the final status, and the
    Workload copy finishes after: the run must not finish on the manager with the status the cache still holds (a
    soak found three runs finished with no final state, right after their worker was killed and came back). The
    copy is read live before the Workload finishes, as Kueue reads the remote job."""
    from multikueue.kube.addresses import GroupVersionKind

    s = scenario
    _, workload = await s.submit("late")
    wl_name = workload["metadata"]["name"]
    await s.copied(wl_name)
    await kueue.admit(s.api["worker1"], wl_name, s.namespace)
    await s.check_state(wl_name, state="Ready")
    await s.wait(s.runs("worker1"), "late", lambda r: r is not None, "PipelineRun on worker1")
    await s.runs("worker1").patch_status("late", {"status": running_status("late")}, s.namespace)
    await s.wait(s.runs("manager"), "late", lambda r: "status" in r, "running status mirrored")

    assert s.manager is not None
    connection = s.manager.generation.cluster_reconciler.connections[s.names["worker1"]]
    informer = connection.objects[GroupVersionKind.parse("PipelineRun.v1.tekton.dev")]
    monkeypatch.setattr(informer, "_put", lambda key, obj: None)  # the watch's events no longer reach the cache
    final = {**running_status("late"), "completionTime": "2026-08-01T10:00:20Z",
             "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "Tasks done",
                             "lastTransitionTime": "2026-08-01T10:00:20Z"}]}  # fmt: skip
    written = await s.runs("worker1").patch_status("late", {"status": final}, s.namespace)
    await wait_until(lambda: int(informer.resource_version or 0) >= int(written["metadata"]["resourceVersion"]),
                     what="the final status's watch event passed the cache by")  # fmt: skip
    monkeypatch.undo()
    cached = informer.get(ObjectKey(s.namespace, "late"))
    assert cached is not None
    assert "completionTime" not in cached.get("status", {}), "the cache is stale, as meant"

    await kueue.finish(s.api["worker1"], wl_name, s.namespace, reason="Succeeded", message="Job finished successfully")
    manager_wl = await s.wait(s.workloads("manager"), wl_name, lambda w: any(
        c["type"] == "Finished" and c["status"] == "True" for c in w["status"].get("conditions", [])),
        "manager Workload finished")  # fmt: skip
    assert manager_wl["status"]["clusterName"] == s.names["worker1"]
    manager_run = await s.get(s.runs("manager"), "late")
    assert manager_run["status"]["conditions"][0]["reason"] == "Succeeded", manager_run["status"]
    assert manager_run["status"]["completionTime"] == "2026-08-01T10:00:20Z"
