"""A run's Workload copies on the workers, and its object there, as Kueue mode removes them: the Workload copy
created (one already there is fine), deactivated when the manager evicts, deleted (its Kueue finalizer lifted first)
with the run's object copy; and the garbage collector of both (Kueue's ``runGC``, and beyond it, worker objects whose
Workload copy is already gone, found through their prebuilt-workload annotation).

Every read comes from the worker's caches, label-selected by this manager's origin: a foreign same-named object is
never in them, and one created a moment ago that the cache has not seen yet comes back as a watch event that brings
its Workload here again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from multikueue.clusters.worker import Worker
from multikueue.dispatch import copies
from multikueue.dispatch import workload_state as wl
from multikueue.dispatch.writes import WorkerWriteFailed
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.conditions import set_condition
from multikueue.kube.errors import Conflict
from multikueue.labels import prebuilt_workload_of
from multikueue.runtime.informer import Informer, ObjectKey

log = structlog.get_logger(__name__)
Object = dict[str, Any]


async def copy(worker: Worker, workload: Object, origin: str) -> bool:
    """Create the Workload's copy on ``worker``; whether this call created it (one already there is fine)."""
    key = ObjectKey.of(workload)
    try:
        created = await worker.workload_objects().create(wl.clone_for_create(workload, origin), key.namespace)
    except Conflict:
        log.info("workload copy already on worker", cluster=worker.name, workload=str(key))
        return False  # a previous pass created it
    except copies.WRITE_FAILURES as e:
        raise WorkerWriteFailed(worker.name, "create", "Workload", key.namespace, key.name, e) from None
    worker.remember_created(None, created)
    log.info("workload copied to worker", cluster=worker.name, workload=str(key))
    return True


async def remove(worker: Worker, gvk: GroupVersionKind, obj_key: ObjectKey, key: ObjectKey) -> None:
    """Delete the run's object copy (made for the Workload ``key``: another run's of that name is left alone) and its
    Workload copy on ``worker``."""
    await copies.delete(worker, gvk, obj_key, copies.Run(workload=key.name))
    await remove_workload(worker, key)


async def remove_workload(worker: Worker, key: ObjectKey) -> None:
    """Delete this origin's Workload copy, first lifting the finalizer a worker Kueue would have added."""
    try:
        await _remove_workload(worker, key)
    except copies.WRITE_FAILURES as e:
        raise WorkerWriteFailed(worker.name, "delete", "Workload", key.namespace, key.name, e) from e


async def _remove_workload(worker: Worker, key: ObjectKey) -> None:
    worker_wl = worker.workload(key)
    if worker_wl is None:
        return
    meta = worker_wl["metadata"]
    finalizers = meta.get("finalizers") or []
    workloads = worker.workload_objects()
    if wl.RESOURCE_IN_USE_FINALIZER in finalizers:
        kept = [f for f in finalizers if f != wl.RESOURCE_IN_USE_FINALIZER] or None
        patch = {"metadata": {"finalizers": kept, "resourceVersion": meta["resourceVersion"]}}
        await workloads.patch(key.name, patch, key.namespace)  # a stale cache fails here (409) and retries
    elif meta.get("deletionTimestamp"):
        return  # already going
    await workloads.delete(key.name, key.namespace)
    log.info("workload deleted on worker", cluster=worker.name, workload=str(key))


async def deactivate(worker: Worker, worker_wl: Object, workload: Object) -> None:
    """Ask the worker's Kueue to evict its copy, as Kueue does when the manager evicts."""
    if wl.is_true(worker_wl, "DeactivationTarget"):
        return
    evicted = wl.condition(workload, wl.EVICTED) or {}
    condition = {"type": "DeactivationTarget", "status": "True", "reason": "EvictedOnManagerCluster",
                 "message": f"Evicted on manager: {evicted.get('message', '')}"}  # fmt: skip
    current = (worker_wl.get("status") or {}).get("conditions") or []
    meta = worker_wl["metadata"]
    patch = {"metadata": {"resourceVersion": meta["resourceVersion"]},
             "status": {"conditions": set_condition(current, condition)}}  # fmt: skip
    await worker.workload_objects().patch_status(meta["name"], patch, meta["namespace"])


class KueueGarbage:
    """Kueue mode's rules for the garbage collector (``garbage.Mode``), as Kueue's ``runGC``: a worker object whose
    manager Workload (named by its prebuilt-workload annotation) is gone, and, beyond Kueue, one whose Workload copy
    is already gone too; a Workload copy whose manager Workload is gone or being deleted."""

    def __init__(self, manager_workloads: Informer, kinds: Callable[[GroupVersionKind], bool]) -> None:
        self.manager_workloads = manager_workloads
        self.kinds = kinds  # whether a kind is dispatched in Kueue mode

    def dispatches(self, gvk: GroupVersionKind) -> bool:
        return self.kinds(gvk)

    async def wants(self, worker: Worker, gvk: GroupVersionKind, worker_obj: Object) -> bool:
        """Its manager Workload is there, and either records this worker, records none yet (the race goes on), or
        this worker still holds its Workload copy (a loser's removal removes both). A copy on another worker with no
        Workload copy beside it is an earlier admission's that a removal missed (its object was not in the worker's
        cache yet, a moment after a reconnect): left, it would run beside the recorded one."""
        name = prebuilt_workload_of(worker_obj)
        if not name:
            return True
        key = ObjectKey(worker_obj["metadata"]["namespace"], name)
        workload = self.manager_workloads.get(key)
        if workload is None:
            return False
        recorded = (workload.get("status") or {}).get("clusterName")
        return not recorded or recorded == worker.name or worker.workload(key) is not None

    async def remove(self, worker: Worker, gvk: GroupVersionKind, worker_obj: Object) -> bool:
        key = ObjectKey(worker_obj["metadata"]["namespace"], prebuilt_workload_of(worker_obj) or "")
        sent = await copies.delete(worker, gvk, ObjectKey.of(worker_obj), copies.Run(workload=key.name))
        await remove_workload(worker, key)
        return sent

    async def sweep(self, worker: Worker) -> None:
        for worker_wl in worker.workloads():
            key = ObjectKey.of(worker_wl)
            workload = self.manager_workloads.get(key)
            if workload is None or workload["metadata"].get("deletionTimestamp"):
                await _remove_workload(worker, key)  # its object went above, through its annotation
