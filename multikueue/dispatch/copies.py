"""A manager object's copy on a worker, brought in line the same way in Kueue and Direct mode (``sync``): created
(the copy already there found on a conflict), adopted when it provably is this manager's, its ``specSync`` fields
carried over, its status mirrored back (``mirror.StatusMirror``); and deleted. What a pass found comes back as a
value (``CopyOutcome``) that each mode acts on; each failure to write names the worker, the object and the API's
answer (``WorkerWriteFailed``)."""

from __future__ import annotations

import datetime
import json
from typing import Any

import structlog

from multikueue.clusters.worker import KindNotServed, LiveObjects, Worker
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.copy_outcomes import (  # re-exported (__all__): what ``sync`` finds
    ANY_RUN,
    Absent,
    Adopted,
    Behind,
    CopyOutcome,
    Created,
    CreateRefused,
    Finished,
    Foreign,
    Gone,
    Held,
    InSync,
    OwnershipConflict,
    Run,
    Stale,
    Unlisted,
    Vanished,
    Want,
    unmarked,
)
from multikueue.dispatch.mirror import StatusMirror
from multikueue.dispatch.writes import WorkerWriteFailed
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.errors import Conflict, KubeError, NotFound
from multikueue.labels import ATTEMPT_ANNOTATION, MANAGER_UID_ANNOTATION, ORIGIN_LABEL
from multikueue.runtime.informer import ObjectKey

log = structlog.get_logger(__name__)
Object = dict[str, Any]
WRITE_FAILURES: tuple[type[Exception], ...] = (KubeError,)
__all__ = [
    "ANY_RUN",
    "WRITE_FAILURES",
    "Absent",
    "Adopted",
    "Behind",
    "CopyOutcome",
    "CreateRefused",
    "Created",
    "Finished",
    "Foreign",
    "Gone",
    "Held",
    "InSync",
    "OwnershipConflict",
    "Run",
    "Stale",
    "Unlisted",
    "Vanished",
    "Want",
    "adopt",
    "carry_spec",
    "create",
    "delete",
    "going_for",
    "gone_message",
    "has_mirrored_status",
    "is_ours",
    "look_up",
    "not_ours_message",
    "seconds_since",
    "sync",
]


async def sync(
    worker: Worker,
    adapter: GenericAdapter,
    obj: Object,
    *,
    want: Want,
    origin: str,
    manager: LiveObjects,
    mirror: StatusMirror,
    workload_name: str = "",
    attempt: str = "",
    ran_there: bool = False,
    keep_conditions: frozenset[str] = frozenset(),
    earlier_attempts: bool = False,
) -> CopyOutcome:
    """Bring ``obj``'s copy on ``worker`` in line, and say what was found. ``ran_there``: the run is known to have
    had its copy there (its status was mirrored from it): a copy missing there is not created again.
    ``attempt``: Kueue mode, the admission the run is in (``workload_state.attempt``): stamped on the copy made, and
    a copy stamped with another is an earlier admission's (``Stale``). ``earlier_attempts``: the run may have had an
    earlier admission on this worker (evicted and admitted again): a going copy that carries no admission (made by
    an older version) is taken as that one's, never this one's.

    A copy with no status yet is in sync (a kind's ``finished`` predicate may read its spec). Raises only what cannot
    be an outcome: ``KindNotServed`` (checked first), a write to the worker whose outcome is unknown or that may be
    retried (``WorkerWriteFailed``, not a refused create), a read that failed (``KubeError``), and
    ``StatusRejected``.
    """
    key = ObjectKey.of(obj)
    run = Run.of(obj, workload_name, attempt)
    try:
        worker.objects(adapter.gvk)  # KindNotServed, with the reason, before anything else
    except KindNotServed as e:
        if worker.serves(adapter.gvk) is not False:
            raise  # not discovered yet, or discovery failed: whether it is served is not known
        return _kind_gone(worker, adapter, obj, want=want, ran_there=ran_there, reason=str(e))
    worker_obj = worker.copy(adapter.gvk, key)  # the cache holds this origin's copies only
    if worker_obj is None:
        listed = worker.listed(adapter.gvk)
        if want is Want.OBSERVE:
            return Absent(obj=obj) if listed else Unlisted(obj=obj)
        # A run that ran there (or ended there) is read live whatever the cache says (it may still be listing, or
        # lag after a failover, a reload or a reconnect): never made twice, its final status never lost.
        found = await (_gone_or_found(worker, adapter, obj, origin) if ran_there or want is Want.FINAL else
                       _create(worker, adapter, obj, origin=origin, run=run))  # fmt: skip
        if not isinstance(found, dict):
            return found
        worker_obj = found
    elif want is Want.FINAL and not adapter.finished(worker_obj):
        # A cached copy the kind's ``finished`` predicate holds on has its final status: no read (a read per run
        # would wait on a hung worker). Else the worker's Workload copy may have finished before the object's
        # watch brought the final status (the two caches relist on their own after a reconnect): read live.
        fresh = await _final(worker, adapter, obj, worker_obj)
        if fresh is not None:
            return fresh
    if not is_ours(worker_obj, origin):
        mine = await adopt(worker, adapter, worker_obj, obj, origin)
        if mine is None:
            message = not_ours_message(adapter.gvk.kind, key, worker.name, origin)
            return Foreign(obj=obj, worker_obj=worker_obj, message=message, this_run=_copied_from(worker_obj, obj))
        return Adopted(obj=obj, worker_obj=mine)
    this_run = await _this_runs(worker, adapter, obj, worker_obj, run, renew=want is Want.RUN,
                                earlier_attempts=earlier_attempts)  # fmt: skip
    if isinstance(this_run, Stale | Behind):
        return this_run
    worker_obj = this_run
    await carry_spec(worker, adapter, obj, worker_obj)
    mirrored = await mirror.write(
        manager, adapter, obj, worker_obj, worker=worker.name, keep_conditions=keep_conditions,
    )  # fmt: skip
    if mirrored.state == "held":
        return Held(obj=mirrored.obj, worker_obj=worker_obj, first=mirrored.first_hold)
    synced = InSync(obj=mirrored.obj, worker_obj=worker_obj, written=mirrored.written, pruned=mirrored.pruned)
    done = adapter.finished(worker_obj)
    if done is None:
        return synced
    return Finished(obj=synced.obj, worker_obj=worker_obj, written=synced.written, pruned=synced.pruned,
                    reason=done[0], message=done[1])  # fmt: skip


def _kind_gone(worker: Worker, adapter: GenericAdapter, obj: Object, *, want: Want, ran_there: bool,
               reason: str) -> Absent | Gone | CreateRefused:  # fmt: skip
    """The worker no longer serves the kind (its CRD removed there, every object of it with it): what a read of
    the copy would have found (404), so the run's lifecycle goes on rather than retrying for ever. Ran there (or
    ended there): gone before its final status came; never there: the create is refused there."""
    key = ObjectKey.of(obj)
    if want is Want.OBSERVE:
        return Absent(obj=obj)
    if ran_there or want is Want.FINAL:
        message = (f"{adapter.gvk.kind} {key} on worker {worker.name} is gone with its kind ({reason}) before its "
                   "final status reached the manager: it is not run again, and the status shown is the last one "
                   "mirrored")  # fmt: skip
        log.warning("kind removed from worker under a run", cluster=worker.name, kind=adapter.gvk.kind, object=str(key))
        return Gone(obj=obj, message=message)
    answer = NotFound(404, "NotFound", json.dumps({"reason": "NotFound", "message": reason}))
    error = WorkerWriteFailed(worker.name, "create", adapter.gvk.kind, key.namespace, key.name, answer)
    return CreateRefused(obj=obj, error=error)


async def _this_runs(worker: Worker, adapter: GenericAdapter, obj: Object, worker_obj: Object, run: Run, *,
                     renew: bool, earlier_attempts: bool) -> Object | Stale | Behind:  # fmt: skip
    """This origin's copy as this run's (marked as this admission's while it goes on: ``renew``), or ``Stale``."""
    if not run.made(worker_obj):
        return await _stale(worker, adapter, obj, worker_obj)
    going = bool(worker_obj["metadata"].get("deletionTimestamp"))
    if renew and earlier_attempts and going and unmarked(worker_obj):
        # A going copy made before copies carried their admission, after an eviction: taken as the earlier
        # admission's (a finalizer holding it), never as this one's. A copy that carries its admission is judged by
        # ``run.made`` above: this admission's own, deleted there by someone else, still has its final status mirrored.
        return await _stale(worker, adapter, obj, worker_obj)
    if renew and not going and run.restamp(worker_obj):
        marked = await _restamp(worker, adapter, worker_obj, run)
        return marked if marked is not None else Behind(obj=obj)
    return worker_obj


async def _restamp(worker: Worker, adapter: GenericAdapter, worker_obj: Object, run: Run) -> Object | None:
    """Mark this run's running copy, made for another admission, as this one's (``Run.made``): deleted there later
    by someone else, it still gives this admission its final status. Exactly the copy the cache holds (its
    resourceVersion the precondition): one changed since (its deletion begun, say) is looked at again (``None``)."""
    meta, key = worker_obj["metadata"], ObjectKey.of(worker_obj)
    patch = {
        "metadata": {"resourceVersion": meta.get("resourceVersion"), "annotations": {ATTEMPT_ANNOTATION: run.attempt}}
    }
    try:
        marked: Object = await worker.objects(adapter.gvk).patch(key.name, patch, key.namespace)
    except Conflict:
        return None
    except WRITE_FAILURES as e:
        raise WorkerWriteFailed(worker.name, "mark the admission of", adapter.gvk.kind, key.namespace, key.name,
                                e) from None  # fmt: skip
    worker.remember_copy(adapter.gvk, marked)
    log.info("copy taken as this admission's", cluster=worker.name, kind=adapter.gvk.kind, object=str(key),
             was=(meta.get("annotations") or {}).get(ATTEMPT_ANNOTATION), attempt=run.attempt)  # fmt: skip
    return marked


async def _create(
    worker: Worker, adapter: GenericAdapter, obj: Object, *, origin: str, run: Run
) -> Created | Vanished | CreateRefused | Object:
    """Create the copy: the outcome, or the same-named copy already there to go on with.

    A refusal is final only once the name is looked up there: admission runs before the "already exists" check, so
    the retry of a create whose answer was lost can be refused by what the first, stored create changed (a
    ResourceQuota on the kind's count at its limit, a stateful policy webhook). A copy found then is gone on with.
    """
    body = adapter.worker_copy(obj, origin=origin, workload_name=run.workload, attempt=run.attempt)
    try:
        created, existing = await create(worker, adapter.gvk, body)
    except WorkerWriteFailed as e:
        if not e.refused:
            raise  # no answer, or one that may change: the copy may be there
        there = await look_up(worker, adapter.gvk, ObjectKey.of(obj), origin, e)
        return CreateRefused(obj=obj, error=e) if there is None else there
    if created:
        return Created(obj=obj)
    return Vanished(obj=obj) if existing is None else existing


async def _gone_or_found(worker: Worker, adapter: GenericAdapter, obj: Object, origin: str) -> Gone | Object:
    """The copy the run had there, not in the listed cache: read live (the cache may lag); gone, it is not made
    again."""
    key = ObjectKey.of(obj)
    there = await look_up(worker, adapter.gvk, key, origin)
    if there is not None:
        return there
    message = gone_message(adapter.gvk.kind, key, worker.name)
    log.warning("copy deleted on worker by someone else", cluster=worker.name, kind=adapter.gvk.kind, object=str(key))
    return Gone(obj=obj, message=message)


def gone_message(kind: str, key: ObjectKey, worker: str) -> str:
    return (f"{kind} {key} on worker {worker} was deleted there (not by this dispatcher) before its final status "
            "reached the manager: it is not run again, and the status shown is the last one mirrored")  # fmt: skip


async def look_up(
    worker: Worker, gvk: GroupVersionKind, key: ObjectKey, origin: str, refusal: WorkerWriteFailed | None = None
) -> Object | None:
    """The object of that name on the worker, read live (kept as cached when it is this origin's, until its watch
    event comes); a failed read raises ``refusal`` (whether the copy is there is then not known) or the error."""
    try:
        there = await worker.objects(gvk).get(key.name, key.namespace)
    except WRITE_FAILURES as e:
        if refusal is not None:  # whether the refused create's copy is there is not known: retried
            raise WorkerWriteFailed(worker.name, "read (after a refused create)", gvk.kind, key.namespace, key.name,
                                    e) from None  # fmt: skip
        raise
    if there is not None and is_ours(there, origin) and worker.copy(gvk, key) is None:
        worker.remember_created(gvk, there)  # a foreign object never is: the cache holds this origin's only
    return there


async def _stale(worker: Worker, adapter: GenericAdapter, obj: Object, worker_obj: Object) -> Stale:
    """A copy of an earlier same-named run, or one being deleted before this run may start there: deleted (exactly
    that one: its UID is the precondition), and said."""
    meta = worker_obj["metadata"]
    key = ObjectKey.of(obj)
    going = bool(meta.get("deletionTimestamp"))
    if not going:
        await _delete(worker, adapter.gvk, worker_obj)
    held = meta.get("finalizers") or []
    then = f", held there by the finalizers {', '.join(held)}" if held else ""
    uid = (meta.get("annotations") or {}).get(MANAGER_UID_ANNOTATION) or "?"
    attempt = (meta.get("annotations") or {}).get(ATTEMPT_ANNOTATION)
    if not _copied_from(worker_obj, obj):
        which = f"is the copy of an earlier run of that name (manager UID {uid}, not {obj['metadata'].get('uid')})"
    elif attempt:
        which = f"is the copy of an earlier admission of this run (evicted, or its Workload made again: {attempt})"
    else:
        which = f"is a copy of this run being deleted there (manager UID {uid})"
    message = (f"{adapter.gvk.kind} {key} on worker {worker.name} {which}: it is being deleted{then}; this run is "
               "created there once it is gone")  # fmt: skip
    log.info("stale copy on worker", cluster=worker.name, kind=adapter.gvk.kind, object=str(key), manager_uid=uid)
    return Stale(obj=obj, worker_obj=worker_obj, message=message, going_for=going_for(worker_obj))


def _copied_from(worker_obj: Object, obj: Object) -> bool:
    """Whether the worker object names the manager object's very UID (this run's copy, whatever its labels)."""
    uid = obj["metadata"].get("uid")
    return bool(uid) and ((worker_obj["metadata"].get("annotations") or {}).get(MANAGER_UID_ANNOTATION) == uid)


async def _final(worker: Worker, adapter: GenericAdapter, obj: Object, cached: Object) -> Behind | Gone | None:
    """``Want.FINAL``: the cached copy read live. Gone there (its final status never came): ``Gone``. Newer there:
    kept in the cache, ``Behind`` (mirrored by the next pass). The same: ``None``."""
    key = ObjectKey.of(cached)
    live = await worker.objects(adapter.gvk).get(key.name, key.namespace)
    if live is None:
        log.warning("copy deleted on worker before its final status came", cluster=worker.name, kind=adapter.gvk.kind,
                    object=str(key))  # fmt: skip
        return Gone(obj=obj, message=gone_message(adapter.gvk.kind, key, worker.name))
    if live["metadata"].get("resourceVersion") == cached["metadata"].get("resourceVersion"):
        return None
    return Behind(obj=obj) if worker.remember_copy(adapter.gvk, live) else None


def going_for(worker_obj: Object) -> float:
    """Seconds since the copy's deletion began, as the worker's clock wrote it (0 when it is not being deleted)."""
    return seconds_since(worker_obj["metadata"].get("deletionTimestamp"))


def seconds_since(timestamp: str | None) -> float:
    """Seconds since an RFC 3339 time the worker wrote (0 when none, or unreadable)."""
    if not timestamp:
        return 0.0
    try:
        then = datetime.datetime.fromisoformat(timestamp.replace("Z", "+00:00"))
    except ValueError:
        return 0.0
    return max(0.0, (datetime.datetime.now(datetime.UTC) - then).total_seconds())


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


def has_mirrored_status(obj: Object, keep_conditions: frozenset[str] = frozenset()) -> bool:
    """Whether the manager object carries a status mirrored from a worker: its copy ran there. Not this
    controller's own conditions (``keep_conditions``), and not the zero values a kind's schema defaults fill in on
    the manager itself (RayJob's ``failed: 0, succeeded: 0``)."""
    for field, value in (obj.get("status") or {}).items():
        if field == "conditions":
            if any(c.get("type") not in keep_conditions for c in value or [] if isinstance(c, dict)):
                return True
        elif _written(value):
            return True
    return False


def _written(value: Any) -> bool:
    """A value someone wrote: not empty, and not made only of zeros, false and empty values."""
    if isinstance(value, dict):
        return any(_written(v) for v in value.values())
    if isinstance(value, list):
        return any(_written(v) for v in value)
    return value not in (None, "", 0, False)


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
    adopted: Object = await _patch(worker, adapter.gvk, key, patch, "adopt")
    log.info("object adopted on worker", cluster=worker.name, kind=adapter.gvk.kind, object=str(key))
    return adopted


async def carry_spec(worker: Worker, adapter: GenericAdapter, manager_object: Object, remote: Object) -> None:
    """Carry the manager object's ``specSync`` fields (a cancel, say) to the copy, when they differ."""
    patch = adapter.spec_patch(manager_object, remote)
    if patch is None:
        return
    key = ObjectKey.of(remote)
    await _patch(worker, adapter.gvk, key, patch, "carry the spec to")
    log.info("spec carried to worker", cluster=worker.name, kind=adapter.gvk.kind, object=str(key), patch=patch)


async def _patch(worker: Worker, gvk: GroupVersionKind, key: ObjectKey, patch: Object, action: str) -> Object:
    """A patch of the copy; a failure names the worker, the object and the answer (``WorkerWriteFailed``)."""
    try:
        patched: Object = await worker.objects(gvk).patch(key.name, patch, key.namespace)
    except WRITE_FAILURES as e:
        raise WorkerWriteFailed(worker.name, action, gvk.kind, key.namespace, key.name, e) from None
    return patched


async def delete(worker: Worker, gvk: GroupVersionKind, key: ObjectKey, run: Run = ANY_RUN) -> bool:
    """Delete this manager's copy made for ``run`` if the worker's cache has it (a foreign same-named object never
    is there; another run's copy of that name is left to that run) and it is not already going; whether a delete
    was sent."""
    remote = worker.copy(gvk, key)
    if remote is None or remote["metadata"].get("deletionTimestamp") or not run.made(remote):
        return False
    return await _delete(worker, gvk, remote)


async def _delete(worker: Worker, gvk: GroupVersionKind, remote: Object) -> bool:
    """Delete exactly ``remote``: its UID is the precondition, so a newer same-named object made since the cache
    last saw it is never the one deleted (a 409 then: the next pass looks again)."""
    key = ObjectKey.of(remote)
    try:
        await worker.objects(gvk).delete(key.name, key.namespace, uid=remote["metadata"].get("uid"))
    except Conflict:
        log.info("copy changed before its deletion; looked at again", cluster=worker.name, kind=gvk.kind,
                 object=str(key))  # fmt: skip
        return False
    except WRITE_FAILURES as e:
        raise WorkerWriteFailed(worker.name, "delete", gvk.kind, key.namespace, key.name, e) from e
    log.info("copy deleted on worker", cluster=worker.name, kind=gvk.kind, object=str(key))
    return True
