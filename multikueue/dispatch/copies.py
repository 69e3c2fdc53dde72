"""A manager object's copy on a worker, written the same way in Kueue and Direct mode: created (the copy already
there found on a conflict), adopted when it provably is this manager's, its ``specSync`` fields carried over, and
deleted. Each failure to write names the worker, the object and the API's answer (``WorkerWriteFailed``)."""

from __future__ import annotations

from typing import Any

import structlog

from multikueue.clusters.worker import Worker
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.writes import WorkerWriteFailed
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.errors import Conflict, KubeError
from multikueue.labels import ORIGIN_LABEL
from multikueue.runtime.informer import ObjectKey

log = structlog.get_logger(__name__)
Object = dict[str, Any]
WRITE_FAILURES: tuple[type[Exception], ...] = (KubeError,)


class OwnershipConflict(Exception):
    """A same-named object on a worker that this manager did not create."""


async def create(worker: Worker, gvk: GroupVersionKind, body: Object) -> tuple[bool, Object | None]:
    """Create the copy: ``(True, None)`` once created; ``(False, copy)`` when one of that name is already there
    (made by an earlier pass whose answer was lost, or not this manager's; ``None`` if gone again since)."""
    key = ObjectKey.of(body)
    objects = worker.objects(gvk)
    try:
        worker.remember_created(gvk, await objects.create(body, key.namespace))
    except Conflict:
        return False, await objects.get(key.name, key.namespace)  # not cached yet, or not ours
    except WRITE_FAILURES as e:
        raise WorkerWriteFailed(worker.name, "create", gvk.kind, key.namespace, key.name, e) from None
    log.info("object created on worker", cluster=worker.name, kind=gvk.kind, object=str(key))
    return True, None


def is_ours(remote: Object, origin: str) -> bool:
    return (remote["metadata"].get("labels") or {}).get(ORIGIN_LABEL) == origin


def not_ours_message(kind: str, key: ObjectKey, worker: str, origin: str) -> str:
    return (f"{kind} {key} on worker {worker} was not created by this manager "
            f"(label {ORIGIN_LABEL} is not {origin!r}); it is left untouched")  # fmt: skip


async def adopt(
    worker: Worker, adapter: GenericAdapter, remote: Object, manager_object: Object, origin: str
) -> Object | None:
    """A same-named copy without this origin's label: labelled as this manager's when its annotations prove this
    manager made it for this very object (``Adopt``); ``None`` when they do not (it is then left untouched)."""
    if not adapter.adoptable(remote, manager_object, origin):
        return None
    key = ObjectKey.of(remote)
    patch = {"metadata": {"labels": {ORIGIN_LABEL: origin}, "resourceVersion": remote["metadata"]["resourceVersion"]}}
    adopted: Object = await worker.objects(adapter.gvk).patch(key.name, patch, key.namespace)
    log.info("object adopted on worker", cluster=worker.name, kind=adapter.gvk.kind, object=str(key))
    return adopted


async def carry_spec(worker: Worker, adapter: GenericAdapter, manager_object: Object, remote: Object) -> None:
    """Carry the manager object's ``specSync`` fields (a cancel, say) to the copy, when they differ."""
    patch = adapter.spec_patch(manager_object, remote)
    if patch is None:
        return
    key = ObjectKey.of(remote)
    await worker.objects(adapter.gvk).patch(key.name, patch, key.namespace)
    log.info("spec carried to worker", cluster=worker.name, kind=adapter.gvk.kind, object=str(key), patch=patch)


async def delete(worker: Worker, gvk: GroupVersionKind, key: ObjectKey) -> bool:
    """Delete this manager's copy if the worker's cache has it (a foreign same-named object never is there) and it
    is not already going; whether a delete was sent."""
    remote = worker.copy(gvk, key)
    if remote is None or remote["metadata"].get("deletionTimestamp"):
        return False
    try:
        await worker.objects(gvk).delete(key.name, key.namespace)
    except WRITE_FAILURES as e:
        raise WorkerWriteFailed(worker.name, "delete", gvk.kind, key.namespace, key.name, e) from e
    log.info("copy deleted on worker", cluster=worker.name, kind=gvk.kind, object=str(key))
    return True
