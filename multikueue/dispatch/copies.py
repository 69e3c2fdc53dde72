"""A manager object's copy on a worker, brought in line the same way in Kueue and Direct mode (``sync``): created
(the copy already there found on a conflict), adopted when it provably is this manager's, its ``specSync`` fields
carried over, its status mirrored back (``mirror.StatusMirror``); and deleted. What a pass found comes back as a
value (``CopyOutcome``) that each mode acts on; each failure to write names the worker, the object and the API's
answer (``WorkerWriteFailed``)."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any

import structlog

from multikueue.clusters.worker import Worker
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.mirror import StatusMirror
from multikueue.dispatch.writes import WorkerWriteFailed
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.errors import Conflict, KubeError
from multikueue.kube.resources import Objects
from multikueue.labels import ORIGIN_LABEL
from multikueue.runtime.informer import ObjectKey

log = structlog.get_logger(__name__)
Object = dict[str, Any]
WRITE_FAILURES: tuple[type[Exception], ...] = (KubeError,)


class OwnershipConflict(Exception):
    """A same-named object on a worker that this manager did not create."""


class Want(Enum):
    RUN = "run"  # the copy should exist: created when absent
    OBSERVE = "observe"  # never created: mirrored if it is there (a run being evicted, or not yet recorded)


@dataclass(frozen=True, kw_only=True)
class Absent:
    """No copy, and none made (``Want.OBSERVE``)."""

    obj: Object


@dataclass(frozen=True, kw_only=True)
class Created:
    """Created by this pass: its status comes with the worker's watch event."""

    obj: Object


@dataclass(frozen=True, kw_only=True)
class Vanished:
    """The create met a same-named copy that is gone again: look again at once."""

    obj: Object


@dataclass(frozen=True, kw_only=True)
class CreateRefused:
    """The worker answered the create with a refusal: the run is certainly not there."""

    obj: Object
    error: WorkerWriteFailed


@dataclass(frozen=True, kw_only=True)
class Foreign:
    """A same-named object that is not this manager's and not adoptable: left untouched."""

    obj: Object
    worker_obj: Object
    message: str


@dataclass(frozen=True, kw_only=True)
class Adopted:
    """A same-named copy proven to be this manager's (``Adopt``), labelled so by this pass; the next pass, which its
    watch event brings, carries its spec and mirrors its status (said apart, so that telling it never depends on
    the steps after it)."""

    obj: Object
    worker_obj: Object


@dataclass(frozen=True, kw_only=True)
class Held:
    """The manager object is suspended: its status is not written."""

    obj: Object
    worker_obj: Object
    first: bool = False  # with a status to hold back, on the first pass of this suspension: say it once


@dataclass(frozen=True, kw_only=True)
class NoStatus:
    """The copy has no status yet."""

    obj: Object
    worker_obj: Object


@dataclass(frozen=True, kw_only=True)
class InSync:
    """The manager object's mapped status equals the copy's (written now if it differed)."""

    obj: Object  # the manager object now (a guarded write that follows must carry its resourceVersion)
    worker_obj: Object
    written: bool = False  # the status was written on the manager object by this pass
    pruned: tuple[str, ...] = ()  # status fields the manager's schema dropped: tell once


@dataclass(frozen=True, kw_only=True)
class Finished(InSync):
    """In sync, and the kind's ``finished`` predicate holds on the copy."""

    reason: str  # Succeeded or Failed
    message: str


CopyOutcome = Absent | Created | Vanished | CreateRefused | Foreign | Adopted | Held | NoStatus | InSync


async def sync(
    worker: Worker,
    adapter: GenericAdapter,
    obj: Object,
    *,
    want: Want,
    origin: str,
    manager: Objects,
    mirror: StatusMirror,
    workload_name: str = "",
    keep_conditions: frozenset[str] = frozenset(),
    no_status_in_sync: bool = False,
) -> CopyOutcome:
    """Bring ``obj``'s copy on ``worker`` in line, and say what was found.

    Raises only what cannot be an outcome: ``KindNotServed`` (checked first), a write whose outcome is unknown or
    that may be retried (``WorkerWriteFailed`` not a refusal, ``KubeError`` from adopting or carrying the spec), and
    ``StatusRejected``.
    """
    key = ObjectKey.of(obj)
    worker.objects(adapter.gvk)  # KindNotServed, with the reason, before anything else
    worker_obj = worker.copy(adapter.gvk, key)  # the cache holds this origin's copies only
    if worker_obj is None:
        if want is Want.OBSERVE:
            return Absent(obj=obj)
        found = await _create(worker, adapter, obj, origin=origin, workload_name=workload_name)
        if not isinstance(found, dict):
            return found
        worker_obj = found
    if not is_ours(worker_obj, origin):
        mine = await adopt(worker, adapter, worker_obj, obj, origin)
        if mine is None:
            message = not_ours_message(adapter.gvk.kind, key, worker.name, origin)
            return Foreign(obj=obj, worker_obj=worker_obj, message=message)
        return Adopted(obj=obj, worker_obj=mine)
    await carry_spec(worker, adapter, obj, worker_obj)
    mirrored = await mirror.write(
        manager, adapter, obj, worker_obj, worker=worker.name, keep_conditions=keep_conditions,
        no_status_in_sync=no_status_in_sync,
    )  # fmt: skip
    if mirrored.state == "held":
        return Held(obj=mirrored.obj, worker_obj=worker_obj, first=mirrored.first_hold)
    if mirrored.state == "no-status":
        return NoStatus(obj=mirrored.obj, worker_obj=worker_obj)
    synced = InSync(obj=mirrored.obj, worker_obj=worker_obj, written=mirrored.written, pruned=mirrored.pruned)
    done = adapter.finished(worker_obj)
    if done is None:
        return synced
    return Finished(obj=synced.obj, worker_obj=worker_obj, written=synced.written, pruned=synced.pruned,
                    reason=done[0], message=done[1])  # fmt: skip


async def _create(
    worker: Worker, adapter: GenericAdapter, obj: Object, *, origin: str, workload_name: str
) -> Created | Vanished | CreateRefused | Object:
    """Create the copy: the outcome, or the same-named copy already there to go on with."""
    body = adapter.worker_copy(obj, origin=origin, workload_name=workload_name)
    try:
        created, existing = await create(worker, adapter.gvk, body)
    except WorkerWriteFailed as e:
        if not e.refused:
            raise  # no answer, or one that may change: the copy may be there
        return CreateRefused(obj=obj, error=e)
    if created:
        return Created(obj=obj)
    return Vanished(obj=obj) if existing is None else existing


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


async def caught_up(worker: Worker, adapter: GenericAdapter, cached: Object) -> bool:
    """Whether the cached copy is the worker's latest, read live (as Kueue reads the remote job before it finishes
    the local Workload). A worker's Workload copy can finish before its object's watch brings the final status (the
    two caches relist on their own after a reconnect): a run finished on that stale copy would never show its end. A
    newer copy is kept in the cache for the next pass to mirror."""
    key = ObjectKey.of(cached)
    live = await worker.objects(adapter.gvk).get(key.name, key.namespace)
    if live is None or live["metadata"].get("resourceVersion") == cached["metadata"].get("resourceVersion"):
        return True
    return not worker.remember_copy(adapter.gvk, live)


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
