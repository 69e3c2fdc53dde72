"""Direct mode's record of a run's lifecycle, on the manager object itself: the placement annotations
(``multikueue.x-k8s.io/worker``, ``.../phase``, ``.../avoid``, ``.../finished-at``), the ``MultiKueuePlacement``
condition (or, where the kind cannot hold conditions, its copy in an annotation), and Events on the object.

``PlacementWriter`` writes (one per reconciler: it remembers the kinds that cannot hold conditions);
``PlacementRecord`` is one pass's ``runs.Record`` for one object.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import structlog

from multikueue.dispatch import run_lifecycle
from multikueue.kube import events
from multikueue.kube.addresses import GroupVersionKind, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.conditions import Condition, find, now_rfc3339, same_state, set_condition
from multikueue.kube.resources import Objects
from multikueue.labels import (
    PLACEMENT_AVOID,
    PLACEMENT_CONDITION,
    PLACEMENT_FINISHED_AT,
    PLACEMENT_PHASE,
    PLACEMENT_RECORD,
    PLACEMENT_WORKER,
)
from multikueue.metrics import Metrics
from multikueue.runtime.informer import Informer, ObjectKey

log = structlog.get_logger(__name__)
Object = dict[str, Any]
CONDITION = PLACEMENT_CONDITION
PLACED, FINISHED, FAILED = "Placed", "Finished", "Failed"
UNREACHABLE = "WorkerUnreachable"
STALE_COPY = "StaleCopy"  # the worker holds an earlier same-named run's copy: deleted, waited for
COPY_DELETED = "CopyDeleted"  # the copy was deleted on its worker before its final status came: not run again
DISPATCH_FAILED = "DispatchFailed"  # a write to the worker failed, or cannot be made now: retried
LOST_THERE = "lost there"  # how a move away from a worker the run may have run on starts its reason
WAITING = {  # what a placed run waits for, and what is said once it no longer does
    UNREACHABLE: "worker {} is reachable again",
    STALE_COPY: "worker {} no longer holds an earlier run's copy",
    DISPATCH_FAILED: "worker {} takes the run's writes again",
}


def notes_of(obj: Object) -> dict[str, str]:
    return dict(obj["metadata"].get("annotations") or {})


def placement_record(obj: Object) -> Condition | None:
    """The ``MultiKueuePlacement`` condition, or where the kind cannot hold conditions, its copy in the
    ``multikueue.x-k8s.io/placement`` annotation."""
    condition = find((obj.get("status") or {}).get("conditions"), CONDITION)
    if condition is not None:
        return condition
    try:
        recorded = json.loads(notes_of(obj).get(PLACEMENT_RECORD) or "null")
    except ValueError:
        return None
    return recorded if isinstance(recorded, dict) else None


def avoided(obj: Object) -> dict[str, str]:
    try:
        value = json.loads(notes_of(obj).get(PLACEMENT_AVOID) or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


class PlacementWriter:
    def __init__(
        self,
        api: ApiClient,
        kinds: dict[GroupVersionKind, tuple[Informer, Resource]],
        controller_name: str,
        observe: Callable[[GroupVersionKind, str, Object], None],
        metrics: Metrics | None = None,
        *,
        routine_records: bool = True,
    ) -> None:
        self.api = api
        self.routine_records = routine_records  # ``dispatcher.routineRecords``: false skips a plain ``Placed``
        self.metrics = metrics
        self.kinds = kinds
        self.controller_name = controller_name
        self.observe = observe  # the reconciler's load counts see each write at once
        # Kinds whose status schema has no ``conditions`` (the API server drops the placement condition without an
        # error): their placement record is kept in an annotation instead.
        self.no_conditions: set[GroupVersionKind] = set()

    async def annotate(self, gvk: GroupVersionKind, obj: Object, changes: dict[str, str | None]) -> Object:
        """A resourceVersion-guarded merge patch of annotations; the cache gets the result at once, so the next
        decision counts it."""
        informer, resource = self.kinds[gvk]
        meta = obj["metadata"]
        patch = {"metadata": {"annotations": changes, "resourceVersion": meta["resourceVersion"]}}
        updated = await Objects(self.api, resource).patch(meta["name"], patch, meta["namespace"])
        informer.remember(updated)
        self.observe(gvk, "MODIFIED", updated)
        return updated

    async def tell(
        self, gvk: GroupVersionKind, obj: Object, status: str, reason: str, message: str, *, event_type: str = "Normal"
    ) -> Object:
        """The placement record on the manager object and an Event, only when the decision changed: a waiting object
        looked at again says nothing new. Returns the object as written."""
        condition = {"type": CONDITION, "status": status, "reason": reason, "message": message[:32768]}
        recorded = placement_record(obj)
        if same_state(recorded, condition) or self._routine(recorded, reason):
            return obj
        if gvk not in self.no_conditions:
            obj = await self._record_condition(gvk, obj, condition)
        if gvk in self.no_conditions:
            stamped = set_condition([recorded] if recorded else [], condition)[0]
            obj = await self.annotate(gvk, obj, {PLACEMENT_RECORD: json.dumps(stamped, sort_keys=True)})
        await self.event(gvk, obj, event_type, reason, message)
        return obj

    def _routine(self, recorded: Condition | None, reason: str) -> bool:
        """A ``Placed`` with nothing else to clear, which ``routineRecords: false`` leaves out."""
        return not self.routine_records and reason == PLACED and (recorded is None or recorded.get("reason") == PLACED)

    async def _record_condition(self, gvk: GroupVersionKind, obj: Object, condition: Condition) -> Object:
        """Write the condition; if the answer lacks it (pruned by the kind's schema), remember the kind."""
        informer, resource = self.kinds[gvk]
        meta = obj["metadata"]
        current = (obj.get("status") or {}).get("conditions") or []
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"]},
                 "status": {"conditions": set_condition(current, condition)}}  # fmt: skip
        updated = await Objects(self.api, resource).patch_status(meta["name"], patch, meta["namespace"])
        informer.remember(updated)
        if not same_state(find((updated.get("status") or {}).get("conditions"), CONDITION), condition):
            self.no_conditions.add(gvk)
            log.warning("kind cannot hold conditions; its placement record is kept in an annotation",
                        kind=str(gvk), annotation=PLACEMENT_RECORD)  # fmt: skip
        return updated

    async def event(self, gvk: GroupVersionKind, obj: Object, type_: str, reason: str, message: str) -> None:
        target = {**obj, "apiVersion": gvk.api_version, "kind": gvk.kind}
        await events.record(self.api, target, type_=type_, reason=reason, message=message,
                            component=self.controller_name)  # fmt: skip

    async def move_away(self, gvk: GroupVersionKind, obj: Object, worker: str, why: str) -> Object:
        """Forget the placement and never use ``worker`` again for this object; the next pass places it anew."""
        avoid = {**avoided(obj), worker: why}
        obj = await self.annotate(
            gvk, obj, {PLACEMENT_WORKER: None, PLACEMENT_PHASE: None, PLACEMENT_AVOID: json.dumps(avoid)}
        )
        key = ObjectKey.of(obj)
        message = f"worker {worker} {why}; placing {gvk.kind} {key} again elsewhere"
        log.warning("object moved away from worker", cluster=worker, kind=gvk.kind, namespace=key.namespace,
                    name=key.name, why=why)  # fmt: skip
        if self.metrics is not None:
            self.metrics.objects_redispatched.labels(gvk.kind, worker).inc()
        return await self.tell(gvk, obj, "False", "Redispatching", message, event_type="Warning")


class PlacementRecord:
    """One pass's record of one Direct-mode object's run (``runs.Record``); ``ended`` is called once the run ends or
    leaves its worker (capacity freed there: the objects waiting for a worker get another look)."""

    def __init__(
        self,
        writer: PlacementWriter,
        gvk: GroupVersionKind,
        obj: Object,
        ended: Callable[[str], None],
        *,
        at_most_once: bool = False,
    ) -> None:
        self.writer = writer
        self.gvk = gvk
        self.obj = obj
        self.ended = ended
        self.at_most_once = at_most_once  # the kind's lostWorkerPolicy is AtMostOnce

    def seen(self, obj: Object) -> None:
        self.obj = obj

    async def tell(self, type_: str, reason: str, message: str) -> None:
        await self.writer.event(self.gvk, self.obj, type_, reason, message)

    async def _say(self, status: str, reason: str, message: str, *, event_type: str = "Warning") -> None:
        self.obj = await self.writer.tell(self.gvk, self.obj, status, reason, message, event_type=event_type)

    async def _phase(self, phase: str) -> None:
        self.obj = await self.writer.annotate(self.gvk, self.obj, {PLACEMENT_PHASE: phase,
                                                                   PLACEMENT_FINISHED_AT: now_rfc3339()})  # fmt: skip

    async def running(self, worker: str) -> None:
        """A waiting condition back to ``Placed``; a record lost (a status written over it by hand) written again."""
        recorded = placement_record(self.obj)
        if recorded is None:
            await self._say("True", PLACED, f"placed on {worker}", event_type="Normal")
        elif recorded.get("reason") in WAITING:
            await self._say("True", PLACED, WAITING[recorded["reason"]].format(worker), event_type="Normal")

    async def held(self, worker: str, over_there: bool) -> None:
        return None  # nothing to record: the hold is said once by ``runs``

    async def finished(self, worker: str, reason: str, message: str) -> None:
        phase = FAILED if reason == "Failed" else FINISHED
        await self._phase(phase)
        log.info("object finished", cluster=worker, kind=self.gvk.kind, object=str(ObjectKey.of(self.obj)),
                 phase=phase)  # fmt: skip
        self.ended(worker)

    async def lost_there(self, worker: str, message: str) -> None:
        # The condition first: a pass retried after the phase write sees the run ended and never tells it again.
        await self._say("False", COPY_DELETED, message)
        await self._phase(FAILED)
        self.ended(worker)

    async def leave(self, worker: str, step: run_lifecycle.Leave) -> None:
        match step.cause:
            case run_lifecycle.Cause.LOST:
                why = f"{LOST_THERE} ({step.why})"  # it may have run there: a copy found there later is not this run
            case run_lifecycle.Cause.REFUSED:
                why = f"refused it: {step.why}"
            case _:
                why = step.why
        self.obj = await self.writer.move_away(self.gvk, self.obj, worker, why)
        self.ended(worker)

    async def await_worker(self, worker: str, step: run_lifecycle.AwaitWorker) -> None:
        message = (f"worker {worker} is unreachable: the run is waited for up to workerLostTimeout "
                   f"({step.lost_timeout:g}s), then {self._then()}")  # fmt: skip
        await self._say("Unknown", UNREACHABLE, message)

    def _then(self) -> str:
        return "marked Failed (AtMostOnce)" if self.at_most_once else "placed again elsewhere"

    async def fail_lost(self, worker: str, step: run_lifecycle.FailLost) -> None:
        message = (f"worker {worker} unreachable for more than {step.lost_timeout:g}s; AtMostOnce: the run may have "
                   "started there, so it is not started elsewhere")  # fmt: skip
        await self._say("False", "WorkerLost", message)  # the condition first, as above
        self.obj = await self.writer.annotate(self.gvk, self.obj, {PLACEMENT_PHASE: FAILED})
        self.ended(worker)

    async def await_stale(self, worker: str, message: str) -> None:
        await self._say("Unknown", STALE_COPY, message)

    async def blocked(self, worker: str, message: str) -> None:
        await self._say("Unknown", DISPATCH_FAILED, message)
