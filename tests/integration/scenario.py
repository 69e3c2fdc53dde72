"""The dispatch scenario harness: the controller in-process against the bed, the tests playing Kueue's part.

``scenario`` (fixture) sets up an AdmissionCheck, MultiKueueConfig and MultiKueueClusters for both workers and
runs the controllers (``process.Process``); a test overrides the configuration by parametrizing ``multikueue_config``
with a YAML document whose ``multiKueue`` section (and optional ``dispatcher`` section) is merged over the defaults.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from kubernetes_asyncio import client as k8s_client

from multikueue.config import parse_configuration
from multikueue.endpoints import Serving
from multikueue.kube.addresses import MULTIKUEUE_CLUSTERS, WORKLOADS, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue.metrics import Metrics
from multikueue.process import Process
from multikueue.runtime.informer import ObjectKey
from multikueue_testbed import TestBed, kueue
from multikueue_testbed.client import k8s
from multikueue_testbed.objects import pipelinerun, running_status
from multikueue_testbed.waiting import eventually, wait_until

CONTROLLER = "multikueue.x-k8s.io/external-dispatcher"
PIPELINERUNS = Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun")


class Scenario:
    def __init__(self, bed: TestBed, namespace: str, manager: ApiClient, worker1: ApiClient, worker2: ApiClient):
        self.bed, self.namespace = bed, namespace
        self.api = {"manager": manager, "worker1": worker1, "worker2": worker2}
        self.names: dict[str, str] = {}
        self.manager: Process | None = None
        self.start_manager: Any = None
        self.stop_manager: Any = None

    async def connected(self, worker: str, expected: bool) -> None:
        assert self.manager is not None
        connections = self.manager.generation.cluster_reconciler.connections
        await wait_until(
            lambda: bool(connections.get(self.names[worker]) and connections[self.names[worker]].connected) == expected,
            timeout=60,
            what=f"{worker} connected={expected}",
        )

    def runs(self, cluster: str) -> Objects:
        return Objects(self.api[cluster], PIPELINERUNS)

    def objects(self, cluster: str, resource: Resource) -> Objects:
        return Objects(self.api[cluster], resource)

    def workloads(self, cluster: str) -> Objects:
        return Objects(self.api[cluster], WORKLOADS)

    async def submit(self, name: str, *, managed_by: str | None = kueue.MANAGED_BY) -> tuple[Any, Any]:
        """A PipelineRun on the manager and the Workload its integration would create, with quota reserved."""
        body = pipelinerun(name, labels={"kueue.x-k8s.io/queue-name": "user-queue"})
        if managed_by:
            body["spec"]["managedBy"] = managed_by
        return await self.submit_object(PIPELINERUNS, body)

    async def submit_object(self, resource: Resource, body: Any) -> tuple[Any, Any]:
        obj = await Objects(self.api["manager"], resource).create(body, self.namespace)
        workload = await self.workloads("manager").create(kueue.workload_for(obj), self.namespace)
        await kueue.reserve_quota(
            self.api["manager"], workload["metadata"]["name"], self.namespace, checks=[self.names["check"]]
        )
        return obj, workload

    async def run_to_the_end(self, name: str, worker: str) -> str:
        """A run dispatched, admitted on ``worker``, its status mirrored, finished there; its Workload's name."""
        _, workload = await self.submit(name)
        wl_name: str = workload["metadata"]["name"]
        await self.copied(wl_name)
        await kueue.admit(self.api[worker], wl_name, self.namespace)
        await self.wait(self.runs(worker), name, lambda r: r is not None, f"the run on {worker}")
        await self.runs(worker).patch_status(name, {"status": running_status(name)}, self.namespace)
        await self.wait(self.runs("manager"), name, lambda r: "status" in r, "status mirrored")
        await kueue.finish(self.api[worker], wl_name, self.namespace)
        return wl_name

    async def get(self, objects: Objects, name: str) -> Any:
        found = await objects.get(name, self.namespace)
        assert found is not None, f"{name} not found"
        return found

    async def wait(self, objects: Objects, name: str, until: Any, what: str, timeout: float = 60) -> Any:
        return await eventually(lambda: objects.get(name, self.namespace), until=until, timeout=timeout, what=what)

    async def label(self, worker: str, **labels: str) -> None:
        """Label a worker's MultiKueueCluster and wait until the controller's cache has it."""
        name = self.names[worker]
        await Objects(self.api["manager"], MULTIKUEUE_CLUSTERS).patch(name, {"metadata": {"labels": labels}})
        assert self.manager is not None
        clusters = self.manager.generation.cluster_reconciler.clusters

        def seen() -> bool:
            cluster = clusters.get(ObjectKey("", name)) or {}
            return labels.items() <= ((cluster.get("metadata") or {}).get("labels") or {}).items()

        await wait_until(seen, what=f"{worker} labelled {labels}")

    async def copied(self, wl_name: str, *workers: str) -> None:
        """Wait until the Workload's copy is on each worker (both by default)."""
        for worker in workers or ("worker1", "worker2"):
            await self.wait(self.workloads(worker), wl_name, lambda w: w is not None, f"copy on {worker}")

    async def events(self, name: str) -> list[Any]:
        """The manager's Events about the object ``name`` in this scenario's namespace."""
        listed = await k8s_client.CoreV1Api(k8s(self.api["manager"])).list_namespaced_event(self.namespace)
        return [e for e in listed.items if e.involved_object.name == name]

    async def check_state(self, workload: str, **expected: Any) -> Any:
        def ok(wl: Any) -> bool:
            state = next(
                (
                    s
                    for s in ((wl or {}).get("status") or {}).get("admissionChecks") or []
                    if s["name"] == self.names["check"]
                ),
                None,
            )
            return state is not None and all(
                str(state.get(k, "")).startswith(v) if k == "message" else state.get(k) == v
                for k, v in expected.items()
            )

        return await self.wait(self.workloads("manager"), workload, ok, f"check {expected}")


LOOPBACK = Serving(metrics=("127.0.0.1", 0), health=("127.0.0.1", 0))  # the endpoints on free ports
DEFAULT_CONFIG = "multiKueue: {gcInterval: 2s, workerLostTimeout: 10s}"


@pytest.fixture
def multikueue_config() -> str:
    """The ``multiKueue`` section for the scenario; a test overrides it by parametrizing this name."""
    return DEFAULT_CONFIG


@pytest.fixture
def worker_kubeconfigs() -> dict[str, Any]:
    """A worker's kubeconfig other than the bed's own (one through ``testing.apiproxy``); a test overrides it."""
    return {}


@pytest.fixture
def worker_sources() -> dict[str, Any]:
    """A worker's ``clusterSource`` other than its kubeconfig Secret; a test overrides it (a ClusterProfile)."""
    return {}


@pytest.fixture
async def scenario(
    multikueue_config: str,
    worker_sources: dict[str, Any],
    worker_kubeconfigs: dict[str, Any],
    testbed: TestBed,
    namespace: str,
    manager_api: ApiClient,
    worker1_api: ApiClient,
    worker2_api: ApiClient,
    tmp_path: Path,
) -> AsyncIterator[Scenario]:
    s = Scenario(testbed, namespace, manager_api, worker1_api, worker2_api)
    s.names = await kueue.multikueue_setup(
        manager_api,
        namespace=namespace,
        prefix=namespace,
        controller_name=CONTROLLER,
        workers={w: worker_kubeconfigs.get(w) or testbed.cluster(w).kubeconfig for w in ("worker1", "worker2")},
        sources=worker_sources,
    )
    document = yaml.safe_load(multikueue_config)
    multikueue = document["multiKueue"]
    multikueue.setdefault("externalFrameworks", [{"name": "PipelineRun.v1.tekton.dev"}])
    dispatcher = {
        "namespace": namespace,
        "eventsBatchPeriod": "100ms",
        "incrementalRoundTimeout": "3s",
        "workerClient": {"timeout": "3s"},
        **(document.get("dispatcher") or {}),
    }
    config = parse_configuration(yaml.safe_dump({"multiKueue": multikueue, "dispatcher": dispatcher}))
    async with anyio.create_task_group() as tg:

        async def start(*, wait_for: tuple[str, ...] = ("worker1", "worker2")) -> None:
            # Its own client, its requests counted into its own metrics (not the test's requests, nor an earlier
            # process's), as `multikueue run` builds it.
            metrics = Metrics()
            on_request, on_error = metrics.requests_to("manager")
            api = ApiClient(manager_api.access, on_request=on_request, on_error=on_error, temp_dir=tmp_path / "certs")
            manager = Process(api, config, temp_dir=tmp_path / "certs", serving=LOOPBACK, metrics=metrics)
            scope = anyio.CancelScope()

            async def run() -> None:
                async with api:
                    with scope:
                        await manager.run()

            tg.start_soon(run)
            with anyio.fail_after(30):
                await manager.started.wait()
            connections = manager.generation.cluster_reconciler.connections
            for worker in wait_for:
                await wait_until(
                    lambda w=worker: bool(connections.get(s.names[w]) and connections[s.names[w]].connected),  # type: ignore[misc]
                    what=f"{worker} connected",
                )
            s.manager, s.stop_manager = manager, scope.cancel

        s.start_manager = start
        await start()
        yield s
        tg.cancel_scope.cancel()
    await kueue.multikueue_teardown(manager_api, s.names)


@pytest.fixture
async def widgets(scenario: Scenario) -> Any:
    """The Widget kind: strict on the manager, loose on worker1, absent from worker2."""
    from multikueue_testbed import crds
    from multikueue_testbed.objects import widget_crd

    await crds.install_crds(scenario.api["manager"], [widget_crd(strict_status=True)])
    await crds.install_crds(scenario.api["worker1"], [widget_crd(strict_status=False)])
    return Resource("examples.multikueue.x-k8s.io", "v1", "widgets", "Widget")
