"""A manager generation is built whole from one configuration, before any I/O, and routes each informer event to
the controller that owns it (the wiring, without an API server: nothing here is started)."""

from __future__ import annotations

from typing import Any

import anyio

from multikueue.config import parse_configuration
from multikueue.generation import ManagerGeneration
from multikueue.kube.addresses import ADMISSION_CHECKS, MULTIKUEUE_CLUSTERS, WORKLOADS, GroupVersionKind, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.kubeconfig import ClusterAccess
from multikueue.metrics import Metrics
from multikueue.runtime.informer import ADDED, Informer, ObjectKey
from multikueue.runtime.workqueue import WorkQueue

PIPELINERUN = GroupVersionKind("tekton.dev", "v1", "PipelineRun")
JOBSET = GroupVersionKind("jobset.x-k8s.io", "v1alpha2", "JobSet")
CONFIG = """
multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}, {name: JobSet.v1alpha2.jobset.x-k8s.io}]}
dispatcher: {adapters: [{name: JobSet.v1alpha2.jobset.x-k8s.io, mode: Direct}]}
"""
SERVED = {
    PIPELINERUN: Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun"),
    JOBSET: Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
}


def deliver(informer: Informer, kind: str, obj: dict[str, Any]) -> None:
    """What the informer does with a watch event, for its handlers."""
    for handler in informer.handlers:
        handler(kind, obj)


async def drain(queue: WorkQueue[Any]) -> list[Any]:
    keys = []
    while len(queue):
        key = await queue.get()
        queue.done(key)
        keys.append(key)
    return keys


def meta(name: str, namespace: str | None = "ns") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", **({"namespace": namespace} if namespace else {})}}


async def test_a_generation_is_built_whole_and_routes_each_event_to_the_controller_that_owns_it() -> None:
    async with anyio.create_task_group() as tg:
        told: list[str] = []

        async def warn(reason: str, message: str) -> None:
            told.append(reason)

        g = ManagerGeneration(
            ApiClient(ClusterAccess(server="http://127.0.0.1:1")), parse_configuration(CONFIG), SERVED, tg,
            metrics=Metrics(), temp_dir=None, warn=warn,
        )  # fmt: skip
        # One shared informer per manager resource (clusters, checks, configs, Workloads, two kinds): no more.
        assert len(g.informers) == 6
        assert set(g.kinds) == {PIPELINERUN, JOBSET}
        assert set(g.direct_kinds) == {JOBSET}
        assert g.direct_reconciler.kinds is g.direct_kinds  # a kind served later reaches the reconciler as well

        deliver(g.informers.of(WORKLOADS), ADDED, meta("wl-1"))
        assert await drain(g.workload_controller.queue) == [ObjectKey("ns", "wl-1")]

        deliver(g.direct_kinds[JOBSET][0], ADDED, meta("js-1"))
        assert await drain(g.direct_controller.queue) == [(JOBSET, ObjectKey("ns", "js-1"))]

        # A Kueue-mode object concerns the Workloads it owns: none cached, so nothing to look at.
        deliver(g.kinds[PIPELINERUN][0], ADDED, meta("pr-1"))
        assert await drain(g.workload_controller.queue) == []
        assert await drain(g.direct_controller.queue) == []

        deliver(g.informers.of(MULTIKUEUE_CLUSTERS), ADDED, meta("worker1", None))
        assert await drain(g.cluster_controller.queue) == ["worker1"]

        deliver(g.informers.of(ADMISSION_CHECKS), ADDED, meta("check", None))
        assert await drain(g.check_controller.queue) == ["check"]
        assert told == []
        tg.cancel_scope.cancel()
