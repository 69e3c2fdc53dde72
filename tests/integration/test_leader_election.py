"""Two replicas, one Lease: only the leader reconciles; killing it hands over with no duplicate or lost run."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import anyio
from kubernetes_asyncio import client as k8s_client

from multikueue.kube.addresses import WORKLOADS, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue_testbed import TestBed, kueue, scrape
from multikueue_testbed.client import k8s
from multikueue_testbed.testbed import free_port
from multikueue_testbed.waiting import eventually
from tests.integration.controller import run_argv

CONTROLLER = "multikueue.x-k8s.io/external-dispatcher"
PIPELINERUNS = Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun")


async def _holder(api: ApiClient, namespace: str) -> str | None:
    try:
        lease = await k8s_client.CoordinationV1Api(k8s(api)).read_namespaced_lease("multikueue-dispatcher", namespace)
    except k8s_client.ApiException:
        return None
    return lease.spec.holder_identity if lease.spec else None


async def _reconciled(port: int, token: str) -> float:
    """How many Workload reconciles a replica has started, from its own /metrics."""
    text = await scrape.metrics(port, token)
    for line in text.splitlines():
        if line.startswith('multikueue_workqueue_wait_seconds_count{controller="multikueue_workload"}'):
            return float(line.split()[-1])
    return 0.0


async def test_the_standby_takes_over_when_the_leader_dies(
    testbed: TestBed, namespace: str, manager_api: ApiClient, worker1_api: ApiClient, tmp_path: Path
) -> None:
    names = await kueue.multikueue_setup(
        manager_api,
        namespace=namespace,
        prefix=namespace,
        controller_name=CONTROLLER,
        workers={"worker1": testbed.cluster("worker1").kubeconfig},
    )
    config = (
        "multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}\n"
        f"dispatcher: {{namespace: {namespace}, eventsBatchPeriod: 100ms}}\n"
    )
    ports = {"a": free_port(), "b": free_port()}
    token = await scrape.metrics_reader_token(manager_api, namespace=namespace)
    log = (tmp_path / "replicas.log").open("w")

    def replica(name: str) -> list[str]:
        return run_argv(
            testbed,
            tmp_path,
            config,
            "--metrics-bind-address",
            f"127.0.0.1:{ports[name]}",
            "--leader-elect",
            "--leader-elect-namespace",
            namespace,
            "--leader-elect-identity",
            name,
            "--lease-duration",
            "4",
            "--renew-deadline",
            "3",
            "--retry-period",
            "1",
        )

    processes: dict[str, Any] = {}
    try:
        processes["a"] = await anyio.open_process(replica("a"), stdout=log, stderr=subprocess.STDOUT)
        await eventually(lambda: _holder(manager_api, namespace), until=lambda h: h == "a", what="a leads")
        processes["b"] = await anyio.open_process(replica("b"), stdout=log, stderr=subprocess.STDOUT)
        await eventually(lambda: _reconciled(ports["b"], token), until=lambda n: n == 0, what="b serving as standby")

        first = await kueue.submit_pipelinerun(manager_api, namespace, "first", check=names["check"])
        await eventually(lambda: Objects(worker1_api, WORKLOADS).get(first, namespace), what="first dispatched")
        assert await _reconciled(ports["b"], token) == 0, "the standby must not reconcile"
        assert await _reconciled(ports["a"], token) > 0

        processes["a"].send_signal(signal.SIGKILL)
        with anyio.fail_after(30):
            await processes["a"].wait()
        await eventually(
            lambda: _holder(manager_api, namespace), until=lambda h: h == "b", timeout=60, what="b takes the lease"
        )

        second = await kueue.submit_pipelinerun(manager_api, namespace, "second", check=names["check"])
        await eventually(lambda: Objects(worker1_api, WORKLOADS).get(second, namespace), what="second dispatched")
        assert await _reconciled(ports["b"], token) > 0
        for workload, run in ((first, "first"), (second, "second")):
            await kueue.admit(worker1_api, workload, namespace)
            await eventually(
                lambda r=run: Objects(worker1_api, PIPELINERUNS).get(r, namespace),  # type: ignore[misc]
                what=f"{run} created on worker1",
            )
        listed = await k8s_client.CustomObjectsApi(k8s(worker1_api)).list_namespaced_custom_object(
            "tekton.dev", "v1", namespace, "pipelineruns"
        )
        assert sorted(i["metadata"]["name"] for i in listed["items"]) == ["first", "second"]

        # A pod's termination: SIGTERM ends the leader's reconciles and closes its clients, and it exits 0.
        processes["b"].terminate()
        with anyio.fail_after(30):
            assert await processes["b"].wait() == 0
    finally:
        for process in processes.values():
            if process.returncode is None:
                process.terminate()
                with anyio.fail_after(30):
                    await process.wait()
        log.close()
        await kueue.multikueue_teardown(manager_api, names)
