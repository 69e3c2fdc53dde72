"""The one garbage collector (``dispatch/garbage.py``) over in-memory workers: each mode's rules decide, and a mode
that fails on one worker never keeps the other mode, or the next worker, from being collected."""

from __future__ import annotations

from typing import Any

from multikueue.clusters.worker import Worker
from multikueue.dispatch.garbage import GarbageCollector
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.errors import Unreachable
from multikueue.labels import ORIGIN_LABEL
from tests.component.cases import ORIGIN, PIPELINERUN
from tests.component.memory_worker import MemoryWorker

Object = dict[str, Any]
JOBSET = GroupVersionKind("jobset.x-k8s.io", "v1alpha2", "JobSet")


class Orphans:
    """A mode that wants no copy of its kind; its deletes fail on the workers named in ``failing``."""

    def __init__(self, gvk: GroupVersionKind, failing: frozenset[str] = frozenset()) -> None:
        self.gvk = gvk
        self.failing = failing
        self.removed: list[tuple[str, str]] = []
        self.swept: list[str] = []

    def dispatches(self, gvk: GroupVersionKind) -> bool:
        return gvk == self.gvk

    async def wants(self, worker: Worker, gvk: GroupVersionKind, worker_obj: Object) -> bool:
        return False

    async def remove(self, worker: Worker, gvk: GroupVersionKind, worker_obj: Object) -> bool:
        if worker.name in self.failing:
            raise Unreachable(f"worker {worker.name} did not answer", maybe_done=False)
        self.removed.append((worker.name, worker_obj["metadata"]["name"]))
        return True

    async def sweep(self, worker: Worker) -> None:
        self.swept.append(worker.name)


def worker_with_copies(name: str) -> MemoryWorker:
    worker = MemoryWorker(name, origin=ORIGIN, kinds=[PIPELINERUN, JOBSET])
    for gvk in (PIPELINERUN, JOBSET):
        meta = {"name": "left", "namespace": "ns", "labels": {ORIGIN_LABEL: ORIGIN}}
        worker.store(gvk).put({"apiVersion": gvk.api_version, "kind": gvk.kind, "metadata": meta})
    worker.relist()
    return worker


async def test_a_mode_failing_on_one_worker_keeps_neither_the_other_mode_nor_the_next_worker_from_collecting() -> None:
    workers = {"w1": worker_with_copies("w1"), "w2": worker_with_copies("w2")}
    kueue, direct = Orphans(PIPELINERUN, failing=frozenset({"w1"})), Orphans(JOBSET)
    collector = GarbageCollector(lambda: dict(workers), [kueue, direct])

    await collector.collect_garbage()

    assert kueue.removed == [("w2", "left")], "the next worker is collected"
    assert direct.removed == [("w1", "left"), ("w2", "left")], "the other mode is collected on the failing worker"
    assert direct.swept == ["w1", "w2"]
    assert kueue.swept == ["w2"], "a mode that failed on a worker is tried again next time"


async def test_a_kind_is_collected_only_by_the_mode_that_dispatches_it() -> None:
    workers = {"w1": worker_with_copies("w1")}
    kueue = Orphans(PIPELINERUN)
    await GarbageCollector(lambda: dict(workers), [kueue]).collect_garbage()
    assert kueue.removed == [("w1", "left")], "the JobSet copy, dispatched by no mode here, is left alone"
