"""The workload flow end to end on the real bed, with the tests playing Kueue's part (spec §2, §7)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest

from multikueue.config import parse_configuration
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import WORKLOADS, Objects, Resource
from multikueue.manager import Manager
from multikueue.testing import TestBed, kueue
from multikueue.testing.objects import pipelinerun, running_status
from multikueue.testing.waiting import eventually, wait_until

CONTROLLER = "multikueue.x-k8s.io/external-dispatcher"
PIPELINERUNS = Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun")
ORIGIN = "kueue.x-k8s.io/multikueue-origin"


class Scenario:
    def __init__(self, bed: TestBed, namespace: str, manager: ApiClient, worker1: ApiClient, worker2: ApiClient):
        self.bed, self.namespace = bed, namespace
        self.api = {"manager": manager, "worker1": worker1, "worker2": worker2}
        self.names: dict[str, str] = {}
        self.manager: Manager | None = None

    def runs(self, cluster: str) -> Objects:
        return Objects(self.api[cluster], PIPELINERUNS)

    def workloads(self, cluster: str) -> Objects:
        return Objects(self.api[cluster], WORKLOADS)

    async def submit(self, name: str, *, managed_by: str | None = kueue.MANAGED_BY) -> tuple[Any, Any]:
        """A PipelineRun on the manager and the Workload its integration would create, with quota reserved."""
        body = pipelinerun(name, labels={"kueue.x-k8s.io/queue-name": "user-queue"})
        if managed_by:
            body["spec"]["managedBy"] = managed_by
        run = await self.runs("manager").create(body, self.namespace)
        workload = await self.workloads("manager").create(kueue.workload_for(run), self.namespace)
        await kueue.reserve_quota(self.api["manager"], workload["metadata"]["name"], self.namespace,
                                  checks=[self.names["check"]])  # fmt: skip
        return run, workload

    async def get(self, objects: Objects, name: str) -> Any:
        found = await objects.get(name, self.namespace)
        assert found is not None, f"{name} not found"
        return found

    async def wait(self, objects: Objects, name: str, until: Any, what: str, timeout: float = 60) -> Any:
        return await eventually(lambda: objects.get(name, self.namespace), until=until, timeout=timeout, what=what)

    async def check_state(self, workload: str, **expected: Any) -> Any:
        def ok(wl: Any) -> bool:
            state = next((s for s in ((wl or {}).get("status") or {}).get("admissionChecks") or []
                          if s["name"] == self.names["check"]), None)  # fmt: skip
            return state is not None and all(
                str(state.get(k, "")).startswith(v) if k == "message" else state.get(k) == v
                for k, v in expected.items()
            )

        return await self.wait(self.workloads("manager"), workload, ok, f"check {expected}")


@pytest.fixture
async def scenario(
    testbed: TestBed, namespace: str, manager_api: ApiClient, worker1_api: ApiClient, worker2_api: ApiClient,
    tmp_path: Path,
) -> AsyncIterator[Scenario]:  # fmt: skip
    s = Scenario(testbed, namespace, manager_api, worker1_api, worker2_api)
    s.names = await kueue.multikueue_setup(
        manager_api, namespace=namespace, prefix=namespace, controller_name=CONTROLLER,
        workers={w: testbed.cluster(w).kubeconfig for w in ("worker1", "worker2")},
    )  # fmt: skip
    config = parse_configuration(
        "multiKueue: {gcInterval: 2s, workerLostTimeout: 10s,\n"
        "             externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}\n"
        f"dispatcher: {{namespace: {namespace}, eventsBatchPeriod: 100ms, workerClient: {{timeout: 3s}}}}"
    )
    manager = Manager(manager_api, config, temp_dir=tmp_path / "certs")
    async with anyio.create_task_group() as tg:
        tg.start_soon(manager.run)
        with anyio.fail_after(30):
            await manager.started.wait()
        connections = manager.cluster_reconciler.connections if manager.cluster_reconciler else {}
        for worker in ("worker1", "worker2"):
            await wait_until(
                lambda w=worker: bool(connections.get(s.names[w]) and connections[s.names[w]].connected),  # type: ignore[misc]
                what=f"{worker} connected",
            )
        s.manager = manager
        yield s
        tg.cancel_scope.cancel()


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
    final = {**running_status("hello"), "completionTime": "2026-08-01T10:00:20Z", "conditions": [{
        "type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "Tasks Completed: 1 (Failed: 0, "
        "Cancelled 0), Skipped: 0", "lastTransitionTime": "2026-08-01T10:00:20Z"}]}  # fmt: skip
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
