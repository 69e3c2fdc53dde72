"""A manager generation is built whole from one configuration, before any I/O, and routes each informer event to
the controller that owns it (the wiring, without an API server: nothing here is started)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import yaml

from multikueue.config import parse_configuration
from multikueue.generation import ManagerGeneration, Served, WorkerGeneration
from multikueue.kube.addresses import ADMISSION_CHECKS, MULTIKUEUE_CLUSTERS, WORKLOADS, GroupVersionKind, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.kubeconfig import ClusterAccess
from multikueue.metrics import Metrics
from multikueue.runtime.informer import ADDED, DELETED, Informer, ObjectKey
from multikueue.runtime.watches import Change, KindChange
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


async def next_key(queue: WorkQueue[Any]) -> Any:
    key = await queue.get()
    queue.done(key)
    return key


async def drain(queue: WorkQueue[Any]) -> list[Any]:
    """The keys queued now (not the delayed ones)."""
    keys = []
    while len(queue):
        keys.append(await next_key(queue))
    return keys


async def unwarned(reason: str, message: str) -> None:
    raise AssertionError(f"warned {reason}: {message}")


def manager_generation(tg: anyio.abc.TaskGroup, config: str = CONFIG, served: Served = SERVED) -> ManagerGeneration:
    """Built against an address nothing answers on: nothing here is started, so nothing is asked."""
    api = ApiClient(ClusterAccess(server="http://127.0.0.1:1"))
    return ManagerGeneration(api, parse_configuration(config), served, tg, metrics=Metrics(), temp_dir=None,
                             warn=unwarned)  # fmt: skip


def meta(name: str, namespace: str | None = "ns") -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": f"uid-{name}", **({"namespace": namespace} if namespace else {})}}


def controlled_by(gvk: GroupVersionKind, owner: str, workload: str) -> dict[str, Any]:
    """A Workload whose controller is the object ``owner`` of kind ``gvk`` (as Kueue's job integrations make it)."""
    obj = meta(workload)
    ref = {"apiVersion": gvk.api_version, "kind": gvk.kind, "name": owner, "uid": f"uid-{owner}", "controller": True}
    obj["metadata"]["ownerReferences"] = [ref]
    return obj


async def test_a_generation_is_built_whole_and_routes_each_event_to_the_controller_that_owns_it() -> None:
    async with anyio.create_task_group() as tg:
        g = manager_generation(tg)
        # One shared informer per manager resource (clusters, checks, configs, Workloads, two kinds): no more.
        assert len(g.informers) == 6
        assert set(g.kinds.all) == {PIPELINERUN, JOBSET}
        assert set(g.direct_kinds) == {JOBSET}
        assert g.direct_reconciler.kinds is g.direct_kinds  # a kind served later reaches the reconciler as well
        # A Workload's owner is read from the kind's cache, not asked of the API server on every pass.
        assert g.workload_reconciler.owners[PIPELINERUN] is g.kinds.all[PIPELINERUN][0]

        deliver(g.informers.of(WORKLOADS), ADDED, meta("wl-1"))
        assert await drain(g.workload_controller.queue) == [ObjectKey("ns", "wl-1")]

        deliver(g.direct_kinds[JOBSET][0], ADDED, meta("js-1"))
        assert await drain(g.direct_controller.queue) == [(JOBSET, ObjectKey("ns", "js-1"))]

        # A Kueue-mode object concerns the Workloads it owns: none cached, so nothing to look at.
        deliver(g.kinds.all[PIPELINERUN][0], ADDED, meta("pr-1"))
        assert await drain(g.workload_controller.queue) == []
        assert await drain(g.direct_controller.queue) == []

        deliver(g.informers.of(MULTIKUEUE_CLUSTERS), ADDED, meta("worker1", None))
        assert await drain(g.cluster_controller.queue) == ["worker1"]

        deliver(g.informers.of(ADMISSION_CHECKS), ADDED, meta("check", None))
        assert await drain(g.check_controller.queue) == ["check"]
        tg.cancel_scope.cancel()


async def test_worker_signals_and_a_kind_looked_at_again_reach_the_dispatch_controllers() -> None:
    async with anyio.create_task_group() as tg:
        g = manager_generation(tg)
        workload, run = meta("wl-1"), meta("js-1")
        g.informers.of(WORKLOADS).store[ObjectKey.of(workload)] = workload
        g.direct_kinds[JOBSET][0].store[ObjectKey.of(run)] = run
        workers = g.cluster_reconciler.signals

        # A worker coming or going: every Workload and every Direct-mode object looked at again.
        workers.changed.emit("worker1")
        assert await drain(g.workload_controller.queue) == [ObjectKey("ns", "wl-1")]
        assert await drain(g.direct_controller.queue) == [(JOBSET, ObjectKey("ns", "js-1"))]

        # A worker's copies: after the batch period, to the controller of their mode only.
        workers.workload.emit(("worker1", ObjectKey("ns", "wl-1")))
        workers.object.emit(("worker1", JOBSET, ObjectKey("ns", "js-1")))
        workers.object.emit(("worker1", PIPELINERUN, ObjectKey("ns", "pr-1")))  # a Kueue-mode kind: not Direct's
        with anyio.fail_after(5):
            assert await next_key(g.workload_controller.queue) == ObjectKey("ns", "wl-1")
            assert await next_key(g.direct_controller.queue) == (JOBSET, ObjectKey("ns", "js-1"))
            assert await drain(g.direct_controller.queue) == []

        # Every object of a kind looked at again (its schema changed on the manager): a Direct one is its own key.
        g.kinds.changes.emit(KindChange(JOBSET, Change("", run)))
        assert await drain(g.direct_controller.queue) == [(JOBSET, ObjectKey("ns", "js-1"))]
        tg.cancel_scope.cancel()


async def test_a_workers_state_is_told_once_per_change_and_a_deleted_workload_is_remembered() -> None:
    async with anyio.create_task_group() as tg:
        g = manager_generation(tg)
        changed: list[str] = []
        g.cluster_reconciler.signals.changed.subscribe(changed.append)
        for _ in range(2):  # two attempts, the same state (not connected, not settled): one change told
            g.cluster_reconciler._connection_changed("worker1")
        assert changed == ["worker1"]
        assert await drain(g.cluster_controller.queue) == ["worker1"], "each attempt looks at the cluster"

        gone = meta("wl-gone")
        deliver(g.informers.of(WORKLOADS), DELETED, gone)
        kept = g.workload_reconciler.memory.deleted
        assert kept == {ObjectKey("ns", "wl-gone"): gone}, "kept before its key is queued"
        assert await drain(g.workload_controller.queue) == [ObjectKey("ns", "wl-gone")]
        tg.cancel_scope.cancel()


async def test_the_integration_hears_its_kinds_and_the_workloads_they_control() -> None:
    """Both generations wire the integration the same way: the integrated kind's objects, and a Workload event to the
    object that controls it."""
    document = yaml.safe_load((Path(__file__).parents[2] / "examples/tekton/integration-config.yaml").read_text())
    document["multiKueue"]["externalFrameworks"].append({"name": "JobSet.v1alpha2.jobset.x-k8s.io"})  # not integrated
    text = yaml.safe_dump(document)
    async with anyio.create_task_group() as tg:
        manager = manager_generation(tg, text)
        worker = WorkerGeneration(manager.api, manager.config, SERVED, metrics=Metrics())
        for g in (manager, worker):
            assert g.integration.kinds == {PIPELINERUN: g.kinds.all[PIPELINERUN]}, "the integrated kinds only"
            queue = g.integration_controller.queue
            deliver(g.kinds.all[PIPELINERUN][0], ADDED, meta("pr-1"))
            assert await drain(queue) == [(PIPELINERUN, ObjectKey("ns", "pr-1"))]
            deliver(g.informers.of(WORKLOADS), ADDED, controlled_by(PIPELINERUN, "pr-1", "wl-1"))
            assert await drain(queue) == [(PIPELINERUN, ObjectKey("ns", "pr-1"))]
            # A kind that is not integrated, and a Workload it controls: nothing for the integration.
            deliver(g.kinds.all[JOBSET][0], ADDED, meta("js-1"))
            deliver(g.informers.of(WORKLOADS), ADDED, controlled_by(JOBSET, "js-1", "wl-2"))
            assert await drain(queue) == []
        tg.cancel_scope.cancel()


async def test_the_runnables_are_wired_to_the_reconcilers_and_caches_they_serve() -> None:
    async with anyio.create_task_group() as tg:
        g = manager_generation(tg)
        dispatchers = (g.workload_reconciler, g.direct_reconciler)
        assert tuple(g.garbage.collectors) == (g.collector,), "one collector"
        assert list(g.collector.modes) == [g.workload_reconciler.garbage, g.direct_reconciler], "for both modes"
        assert g.garbage.every == 60.0, "Kueue's default gcInterval"
        assert list(g.schemas.mirrors) == [r.mirror for r in dispatchers], "both modes' mirrors forget a kind"
        assert g.schemas.kinds is g.kinds.all, "a kind served later has its schema healed too"
        assert g.waiting.direct_kinds is g.direct_kinds
        assert g.queues_gauge.queues is g.worker_queues
        tg.cancel_scope.cancel()


async def test_no_garbage_collection_with_a_zero_interval() -> None:
    async with anyio.create_task_group() as tg:
        g = manager_generation(tg, CONFIG.replace("multiKueue: {", "multiKueue: {gcInterval: 0s, "))
        with anyio.fail_after(1):
            await g.garbage.run()  # returns at once: nothing to run
        tg.cancel_scope.cancel()


async def test_the_gauges_read_the_generations_caches_while_it_runs_and_nothing_after() -> None:
    async with anyio.create_task_group() as tg:
        g = manager_generation(tg)
        waiting, placed = meta("js-waiting"), meta("js-placed")
        no_fit = {"type": "MultiKueuePlacement", "status": "False", "reason": "NoWorkerFits"}  # as the object says it
        waiting["status"] = {"conditions": [no_fit]}
        for obj in (waiting, placed):
            g.direct_kinds[JOBSET][0].store[ObjectKey.of(obj)] = obj
        registry = g.metrics.registry

        def sample(mode: str) -> float | None:
            value: float | None = registry.get_sample_value("multikueue_runs_waiting_for_a_worker", {"mode": mode})
            return value

        async with anyio.create_task_group() as runnables:
            runnables.start_soon(g.waiting.run)
            runnables.start_soon(g.queues_gauge.run)
            await anyio.wait_all_tasks_blocked()  # both have set their gauge's source and wait
            assert (sample("Direct"), sample("Kueue")) == (1.0, 0.0)
            assert g.metrics.worker_queues.queues == g.worker_queues.current
            runnables.cancel_scope.cancel()
        # Stopped: both modes still exported, at zero; the stopped generation's queues no longer read.
        assert (sample("Direct"), sample("Kueue")) == (0.0, 0.0)
        assert g.metrics.worker_queues.queues != g.worker_queues.current
        tg.cancel_scope.cancel()
