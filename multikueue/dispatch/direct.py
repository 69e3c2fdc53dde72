"""Direct mode: objects of a kind placed on a worker by this controller, with no Workload and no race.

Per object (level-triggered, keyed by kind and namespace/name):

1. Not placed yet: decide a worker (``placement.decide``), write the decision on the manager object
   (``multikueue.x-k8s.io/worker`` and ``.../phase: Placed`` annotations, resourceVersion-guarded) *before*
   creating anything, so a restart at any point finds it: no duplicate, no lost run. No worker fits: the object
   waits, and its ``MultiKueuePlacement`` condition and an Event say why, worker by worker.
2. Placed: create the copy there (the kind's adapter options apply), carry ``specSync`` fields, mirror its status
   (keeping this controller's condition), and once the kind's ``finished`` predicate holds with the final status
   mirrored, mark the object ``Finished`` (or ``Failed``) and delete the copy.
3. The worker lost past ``workerLostTimeout``: ``AtLeastOnce`` places the object again elsewhere and remembers to
   avoid the lost worker (its stale copy is deleted when it returns); ``AtMostOnce`` marks it ``Failed`` and never
   starts a second copy of a run that may have started. A worker that refuses the copy (400/403/422) is avoided
   the same way.
"""

from __future__ import annotations

import datetime
import json
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import structlog

from multikueue.clusters.signals import WorkerSignals
from multikueue.clusters.worker import Worker
from multikueue.config import Configuration
from multikueue.dispatch import copies
from multikueue.dispatch import workload_state as wl
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.copies import Want
from multikueue.dispatch.mirror import StatusMirror, pruned_message
from multikueue.dispatch.placement import WORKER_SELECTOR_ANNOTATION, Decision, WorkerView, decide
from multikueue.kube import events
from multikueue.kube.addresses import GroupVersionKind, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.conditions import Condition, find, now_rfc3339, same_state, set_condition
from multikueue.kube.errors import describe
from multikueue.kube.resources import Objects
from multikueue.labels import (
    PLACEMENT_AVOID,
    PLACEMENT_FINISHED_AT,
    PLACEMENT_PHASE,
    PLACEMENT_RECORD,
    PLACEMENT_WORKER,
)
from multikueue.metrics import Metrics
from multikueue.runtime.controller import Result
from multikueue.runtime.informer import DELETED, Informer, ObjectKey
from multikueue.runtime.signal import Signal
from multikueue.runtime.watches import KindChange, Watch
from multikueue.selectors import parse as parse_selector

log = structlog.get_logger(__name__)
Object = dict[str, Any]
DirectKey = tuple[GroupVersionKind, ObjectKey]
CONDITION = "MultiKueuePlacement"
PLACED, FINISHED, FAILED = "Placed", "Finished", "Failed"
NO_WORKER_FITS = "NoWorkerFits"
NO_WORKER_CAN_RUN = "NoWorkerCanRun"
UNREACHABLE = "WorkerUnreachable"
STALE_COPY = "StaleCopy"  # the worker holds an earlier same-named run's copy: deleted, waited for
COPY_DELETED = "CopyDeleted"  # the copy was deleted on its worker before its final status came: not run again
STALE_RECHECK = 2.0  # seconds
LOST_THERE = "lost there"  # how a move away from a worker the run may have run on starts its reason
KEPT = frozenset({CONDITION})  # this controller's own condition: kept on the object, never mirrored over


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


def retained_for(finished_at: str | None, retention: float | None) -> float:
    """How much longer a finished run's copy stays on its worker (0 without a retention, or past)."""
    return wl.retention_left(finished_at, retention, datetime.datetime.now(datetime.UTC))


def avoided(obj: Object) -> dict[str, str]:
    try:
        value = json.loads(notes_of(obj).get(PLACEMENT_AVOID) or "{}")
    except ValueError:
        return {}
    return {str(k): str(v) for k, v in value.items()} if isinstance(value, dict) else {}


def waits_for_a_fit(obj: Object) -> bool:
    """Its placement says no worker fits it now."""
    record = placement_record(obj) or {}
    return record.get("status") == "False" and record.get("reason") == NO_WORKER_FITS


class DirectReconciler:
    def __init__(
        self,
        config: Configuration,
        api: ApiClient,
        kinds: dict[GroupVersionKind, tuple[Informer, Resource]],
        clusters: Informer,
        connections: Callable[[], dict[str, Worker]],
        enqueue: Callable[[DirectKey], None],
        metrics: Metrics | None = None,
        lost_since: Callable[[str], float | None] | None = None,
    ) -> None:
        self.config = config
        # Since when a worker not connected has been so (its connection dropped, or never made in this process).
        self.lost_since = lost_since or self._connection_lost_since
        self.api = api
        self.kinds = kinds
        self.clusters = clusters
        self.connections = connections
        self.enqueue = enqueue
        self.metrics = metrics
        self.origin = config.multi_kueue.origin
        # This deployment's shard (docs/scaling.md): the informers hold only the objects it selects.
        self.shard = parse_selector(config.dispatcher.shard.object_selector)
        # Every Direct-mode kind configured, served yet or not: ``kinds`` gains one when its CRD appears later.
        direct = [g for g in config.multi_kueue.gvks if config.adapter(g).mode == "Direct"]
        self.adapters = {g: GenericAdapter(g, config.dispatcher.managed_by, config.adapter(g)) for g in direct}
        self.deleted: dict[DirectKey, Object] = {}
        self.waiting: dict[GroupVersionKind, set[ObjectKey]] = {g: set() for g in direct}
        self.started_at = time.monotonic()
        self.unfit_since: dict[DirectKey, float] = {}  # since when no worker can ever fit it (inadmissibleTimeout)
        # One decision at a time: each sees the loads the previous ones chose. The decision is reserved in memory
        # before the lock is let go, so the writes of placements overlap (one write at a time held the drain to
        # ~95/s at W=3, 0.56 of what the API servers serve: bench/results/README.md).
        self._placing = anyio.Lock()
        self._reserved: dict[GroupVersionKind, dict[ObjectKey, str]] = {g: {} for g in direct}
        # Objects placed and not finished, per worker, kept from the informer's events: a decision reads the counts
        # in O(workers) instead of scanning every object of the kind (O(N): drain fell from 43/s to 25/s at 5,000).
        self._placed: dict[GroupVersionKind, dict[ObjectKey, str]] = {g: {} for g in direct}
        self._load: dict[GroupVersionKind, Counter[str]] = {g: Counter() for g in direct}
        self.mirror = StatusMirror()
        # Kinds whose status schema has no ``conditions`` (the API server drops the placement condition without an
        # error): their placement record is kept in an annotation instead.
        self.no_conditions: set[GroupVersionKind] = set()

    def _connection_lost_since(self, name: str) -> float | None:
        worker = self.connections().get(name)
        return worker.lost_since if worker is not None else self.started_at

    def observe(self, gvk: GroupVersionKind, kind: str, obj: Object) -> None:
        """Every event of the kind's informer (and this process's own writes): the load counts, and deletions."""
        key = ObjectKey.of(obj)
        if kind == DELETED:
            self.deleted[(gvk, key)] = obj
        placed, load = self._placed[gvk], self._load[gvk]
        previous = placed.pop(key, None)
        if previous is not None:
            load[previous] -= 1
        notes = notes_of(obj)
        if kind != DELETED and notes.get(PLACEMENT_PHASE) == PLACED and notes.get(PLACEMENT_WORKER):
            placed[key] = notes[PLACEMENT_WORKER]
            load[notes[PLACEMENT_WORKER]] += 1

    def watches(self, kinds: Signal[KindChange], workers: WorkerSignals) -> list[Watch[DirectKey]]:
        """What brings a Direct-mode object to this controller (``kinds``: the configured kinds' manager objects)."""
        batch = lambda: self.config.dispatcher.events_batch_period  # noqa: E731 - read at each event
        return [
            Watch("Direct-mode objects on the manager", kinds, self._own, record=self._observe),
            Watch("their copies on workers (same namespace/name), batched over eventsBatchPeriod", workers.object,
                  lambda e: [(e[1], e[2])] if e[1] in self.kinds else [], delay=batch),
            Watch("a worker, or a kind on it, coming or going: every object", workers.changed,
                  lambda _: self._every(), low=True),
            Watch("MultiKueueClusters (a worker's labels may now fit a waiting run)", self.clusters,
                  lambda _: [(gvk, key) for gvk, keys in self.waiting.items() for key in keys], low=True),
        ]  # fmt: skip

    def _own(self, event: KindChange) -> list[DirectKey]:
        return [(event.gvk, ObjectKey.of(event.change.obj))] if event.gvk in self.adapters else []

    def _observe(self, event: KindChange) -> None:
        if event.gvk in self.adapters:
            self.observe(event.gvk, event.change.type, event.change.obj)

    def _every(self) -> list[DirectKey]:
        return [(gvk, ObjectKey.of(obj)) for gvk, (informer, _) in self.kinds.items() for obj in informer.items()]

    def wake(self, gvk: GroupVersionKind) -> None:
        """Capacity freed or a worker changed: the objects waiting for a worker get another look."""
        for key in list(self.waiting.get(gvk, ())):
            self.enqueue((gvk, key))

    # ------------------------------------------------------------------------------------------ entry

    async def reconcile(self, key: DirectKey) -> Result:
        gvk, obj_key = key
        informer, _ = self.kinds[gvk]
        adapter = self.adapters[gvk]
        obj = informer.get(obj_key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            last = obj or self.deleted.get(key)
            if obj is None and last is not None and await self._left_the_shard(gvk, obj_key, last):
                last = None  # its copy now belongs to the shard that selects it
            if last is not None:
                await self._remove_copies(gvk, obj_key, last)
            self.deleted.pop(key, None)
            self.unfit_since.pop(key, None)
            self.mirror.forget(gvk, obj_key)
            self.waiting[gvk].discard(obj_key)
            self.wake(gvk)
            return Result()
        if not adapter.is_managed(obj)[0]:
            return Result()  # not handed to this controller
        phase, worker = notes_of(obj).get(PLACEMENT_PHASE), notes_of(obj).get(PLACEMENT_WORKER)
        if phase in (FINISHED, FAILED):
            left = retained_for(notes_of(obj).get(PLACEMENT_FINISHED_AT), adapter.options.retention)
            if left > 0:
                return Result(requeue_after=left)  # the kind's retention: the copy, and its pods, kept meanwhile
            await self._remove_copies(gvk, obj_key, obj)
            return Result()
        if not worker:
            return await self._place(gvk, obj_key, adapter)
        await self._remove_copies(gvk, obj_key, obj, keep=worker)  # stale copies on workers it was moved away from
        placed = self.connections().get(worker)
        if placed is None or not placed.connected:
            return await self._worker_unavailable(gvk, obj, adapter, worker)
        return await self._sync(gvk, obj, adapter, placed)

    # -------------------------------------------------------------------------------------- the steps

    async def _place(self, gvk: GroupVersionKind, obj_key: ObjectKey, adapter: GenericAdapter) -> Result:
        informer, _ = self.kinds[gvk]
        async with self._placing:
            obj = informer.get(obj_key)
            if obj is None or notes_of(obj).get(PLACEMENT_WORKER):
                return Result(requeue_after=0.0)  # deleted or placed meanwhile: look again
            decision = decide(
                adapter.options.placement,
                self._worker_views(gvk),
                object_selector=notes_of(obj).get(WORKER_SELECTOR_ANNOTATION),
                avoid=avoided(obj),
            )
            if decision.worker is not None:
                self._reserved[gvk][obj_key] = decision.worker
        if decision.worker is None:
            return await self._unplaced(gvk, obj, decision)
        self.unfit_since.pop((gvk, obj_key), None)
        try:  # the written decision counts from the informer's view (observe) once it is back
            obj = await self._annotate(gvk, obj, {PLACEMENT_WORKER: decision.worker, PLACEMENT_PHASE: PLACED})
        finally:
            self._reserved[gvk].pop(obj_key, None)
        self.waiting[gvk].discard(obj_key)
        log.info("object placed", kind=gvk.kind, object=str(obj_key), worker=decision.worker)
        await self._tell(gvk, obj, "True", PLACED, decision.message)
        return Result(requeue_after=0.0)  # the next pass creates the copy

    async def _unplaced(self, gvk: GroupVersionKind, obj: Object, decision: Decision) -> Result:
        """No worker fits: the object waits, told why, woken when capacity frees or a worker changes. With
        ``inadmissibleTimeout``, one no worker can ever fit as the fleet stands (labels, kind, lost there) for that
        long is marked Failed with the reasons."""
        key, timeout = (gvk, ObjectKey.of(obj)), self.config.dispatcher.inadmissible_timeout
        if timeout is None or not decision.never:
            self.unfit_since.pop(key, None)
            self.waiting[gvk].add(key[1])
            await self._tell(gvk, obj, "False", NO_WORKER_FITS, decision.message, event_type="Warning")
            return Result()
        waited = time.monotonic() - self.unfit_since.setdefault(key, time.monotonic())
        if waited < timeout:
            self.waiting[gvk].add(key[1])
            await self._tell(gvk, obj, "False", NO_WORKER_FITS, decision.message, event_type="Warning")
            return Result(requeue_after=timeout - waited)
        obj = await self._annotate(gvk, obj, {PLACEMENT_PHASE: FAILED})
        self.unfit_since.pop(key, None)  # after the write: a failed one is retried, the clock still run out
        self.waiting[gvk].discard(key[1])
        message = f"no worker can run it (for {timeout:g}s, inadmissibleTimeout): {decision.message}"
        await self._tell(gvk, obj, "False", NO_WORKER_CAN_RUN, message, event_type="Warning")
        return Result()

    async def _sync(self, gvk: GroupVersionKind, obj: Object, adapter: GenericAdapter, worker: Worker) -> Result:
        obj_key = ObjectKey.of(obj)
        waited = (placement_record(obj) or {}).get("reason")
        cached = worker.copy(gvk, obj_key)
        if waited == UNREACHABLE:
            obj = await self._tell(gvk, obj, "True", PLACED, f"worker {worker.name} is reachable again")
        elif waited == STALE_COPY and (cached is None or copies.Run.of(obj).made(cached)):
            message = f"worker {worker.name} no longer holds an earlier run's copy"
            obj = await self._tell(gvk, obj, "True", PLACED, message)
        _, resource = self.kinds[gvk]
        # Its status came from this worker unless it was moved away from one it may have run on (a lost one; a worker
        # that refused it, or held an earlier run's copy, never ran it): a copy missing there was deleted there.
        ran_elsewhere = any(why.startswith(LOST_THERE) for why in avoided(obj).values())
        ran_there = copies.has_mirrored_status(obj, KEPT) and not ran_elsewhere
        out = await copies.sync(worker, adapter, obj, want=Want.RUN, origin=self.origin,
                                manager=Objects(self.api, resource), mirror=self.mirror, ran_there=ran_there,
                                keep_conditions=KEPT)  # fmt: skip
        if isinstance(out, copies.InSync) and out.pruned:
            await self._event(gvk, out.obj, "Warning", "StatusFieldsPruned",
                              pruned_message(gvk.kind, obj_key, worker.name, list(out.pruned)))  # fmt: skip
        match out:
            case copies.Created():
                if self.metrics is not None:
                    self.metrics.objects_dispatched.labels(gvk.kind, worker.name).inc()
            case copies.Vanished() | copies.Adopted():
                return Result(requeue_after=0.0)  # look again at once (an adopted copy is mirrored next)
            case copies.CreateRefused(error=e):
                # The worker refuses this object (invalid, forbidden, its namespace missing): place it elsewhere.
                log.warning("worker refused the copy", **e.log_fields, message=describe(e.error))
                return await self._move_away(gvk, obj, worker.name, f"refused it: {describe(e.error)}")
            case copies.Foreign(message=message):
                await self._tell(gvk, obj, "False", "Conflict", message, event_type="Warning")
                raise copies.OwnershipConflict(message)
            case copies.Stale(message=message, going_for=going):  # an earlier same-named run's copy: waited for
                timeout = self.config.multi_kueue.worker_lost_timeout
                if going > timeout:  # never let go: this run is certainly not there, so it moves (either policy)
                    why = f"still holds an earlier run's copy of that name after workerLostTimeout ({timeout:g}s)"
                    return await self._move_away(gvk, obj, worker.name, why)
                await self._tell(gvk, obj, "Unknown", STALE_COPY, message, event_type="Warning")
                return Result(requeue_after=STALE_RECHECK)
            case copies.Gone(message=message):  # ran there, deleted there: never created again
                return await self._gone(gvk, obj, adapter, message)
            case copies.Finished():
                return await self._finished(gvk, out, worker)
        return Result()

    async def _gone(self, gvk: GroupVersionKind, obj: Object, adapter: GenericAdapter, message: str) -> Result:
        """The copy ran on its worker and was deleted there: never made again. Its phase is what the mirrored status
        says when the kind's ``finished`` predicate holds on it (the final status came first), else ``Failed``."""
        done = adapter.finished(obj)
        phase = FAILED if done is None or done[0] == "Failed" else FINISHED
        obj = await self._annotate(gvk, obj, {PLACEMENT_PHASE: phase, PLACEMENT_FINISHED_AT: now_rfc3339()})
        if done is None:
            await self._tell(gvk, obj, "False", COPY_DELETED, message, event_type="Warning")
        self.wake(gvk)
        return Result()

    async def _finished(self, gvk: GroupVersionKind, out: copies.Finished, worker: Worker) -> Result:
        """The copy's final status is on the manager object: its placement's phase says so; the copy goes next."""
        phase = FAILED if out.reason == "Failed" else FINISHED
        await self._annotate(gvk, out.obj, {PLACEMENT_PHASE: phase, PLACEMENT_FINISHED_AT: now_rfc3339()})
        log.info("object finished", cluster=worker.name, kind=gvk.kind, object=str(ObjectKey.of(out.obj)),
                 phase=phase)  # fmt: skip
        if self.metrics is not None:
            self.metrics.objects_finished.labels(gvk.kind, worker.name, out.reason).inc()
        self.wake(gvk)
        return Result(requeue_after=0.0)  # the next pass deletes the copy (after the kind's retention)

    async def _worker_unavailable(
        self,
        gvk: GroupVersionKind,
        obj: Object,
        adapter: GenericAdapter,
        worker: str,
    ) -> Result:
        lost_since = self.lost_since(worker)
        elapsed = time.monotonic() - (lost_since if lost_since is not None else time.monotonic())
        timeout = self.config.multi_kueue.worker_lost_timeout
        if elapsed < timeout:
            # The copy may be there (made, or a create whose answer was lost): the run waits for that worker.
            then = "placed again elsewhere" if adapter.options.placement.lost_worker_policy == "AtLeastOnce" else (
                "marked Failed (AtMostOnce)")  # fmt: skip
            message = (f"worker {worker} is unreachable: the run is waited for up to workerLostTimeout "
                       f"({timeout:g}s), then {then}")  # fmt: skip
            await self._tell(gvk, obj, "Unknown", UNREACHABLE, message, event_type="Warning")
            return Result(requeue_after=timeout - elapsed)
        if adapter.options.placement.lost_worker_policy == "AtMostOnce":
            message = (f"worker {worker} unreachable for more than {timeout:g}s; AtMostOnce: the run may have "
                       "started there, so it is not started elsewhere")  # fmt: skip
            obj = await self._annotate(gvk, obj, {PLACEMENT_PHASE: FAILED})
            await self._tell(gvk, obj, "False", "WorkerLost", message, event_type="Warning")
            self.wake(gvk)
            return Result()
        return await self._move_away(gvk, obj, worker, f"{LOST_THERE} (unreachable for more than {timeout:g}s)")

    async def _move_away(self, gvk: GroupVersionKind, obj: Object, worker: str, why: str) -> Result:
        """Forget the placement and never use ``worker`` again for this object; the next pass places it anew."""
        avoid = {**avoided(obj), worker: why}
        obj = await self._annotate(
            gvk, obj, {PLACEMENT_WORKER: None, PLACEMENT_PHASE: None, PLACEMENT_AVOID: json.dumps(avoid)}
        )
        obj_key = ObjectKey.of(obj)
        message = f"worker {worker} {why}; placing {gvk.kind} {obj_key} again elsewhere"
        log.warning("object moved away from worker", cluster=worker, kind=gvk.kind, namespace=obj_key.namespace,
                    name=obj_key.name, why=why)  # fmt: skip
        await self._tell(gvk, obj, "False", "Redispatching", message, event_type="Warning")
        if self.metrics is not None:
            self.metrics.objects_redispatched.labels(gvk.kind, worker).inc()
        self.wake(gvk)
        return Result(requeue_after=0.0)

    async def _remove_copies(
        self, gvk: GroupVersionKind, obj_key: ObjectKey, obj: Object, keep: str | None = None
    ) -> None:
        """Delete this origin's copies on the workers the object was placed on, except ``keep``."""
        named = {notes_of(obj).get(PLACEMENT_WORKER), *avoided(obj)} - {None, keep}
        workers = self.connections()
        for name in sorted(w for w in named if w):
            worker = workers.get(name)
            if worker is not None and worker.connected:  # else the garbage collector does it once it is back
                await copies.delete(worker, gvk, obj_key, copies.Run.of(obj))  # this run's copy, no later one's

    def _retained(self, gvk: GroupVersionKind, obj: Object) -> bool:
        """A finished run's copy within its kind's retention: kept for its pods."""
        return retained_for(notes_of(obj).get(PLACEMENT_FINISHED_AT), self.adapters[gvk].options.retention) > 0

    async def collect_garbage(self) -> None:
        """Copies on workers whose manager object is gone, finished (past its kind's retention), or placed elsewhere
        (another shard's copies, which carry its objects' labels, are left to it)."""
        for name, worker in list(self.connections().items()):
            if not worker.connected:
                continue
            for gvk in self.kinds:
                for worker_obj in worker.copies(gvk):
                    if not self.shard.matches(worker_obj["metadata"].get("labels")):
                        continue
                    obj_key = ObjectKey.of(worker_obj)
                    obj = self.kinds[gvk][0].get(obj_key)
                    if obj is None and await self._outside_the_shard(gvk, obj_key) is not None:
                        continue  # relabelled into another shard since its copy was made
                    wanted = (
                        obj is not None
                        and copies.Run.of(obj).made(worker_obj)  # an earlier same-named run's copy never is
                        and notes_of(obj).get(PLACEMENT_WORKER) == name
                        and (notes_of(obj).get(PLACEMENT_PHASE) not in (FINISHED, FAILED) or self._retained(gvk, obj))
                    )
                    if not wanted and await copies.delete(worker, gvk, obj_key):
                        log.info("orphan copy deleted", cluster=name, kind=gvk.kind, object=str(obj_key))

    async def _left_the_shard(self, gvk: GroupVersionKind, obj_key: ObjectKey, last: Object) -> bool:
        """Missing from the cache, the object may only have been relabelled out of this shard: its copy is then left
        to the shard that selects it (deleting it would lose the run that shard takes over), and an Event says so."""
        obj = await self._outside_the_shard(gvk, obj_key)
        if obj is None:
            return False
        worker = notes_of(obj).get(PLACEMENT_WORKER) or notes_of(last).get(PLACEMENT_WORKER) or "none"
        message = (f"{gvk.kind} {obj_key} left this dispatcher's shard (labels no longer match {self.shard.text!r}); "
                   f"its copy on worker {worker} is left to the shard that selects it")  # fmt: skip
        log.warning("object left the shard", kind=gvk.kind, object=str(obj_key), worker=worker)
        await self._event(gvk, obj, "Normal", "LeftShard", message)
        return True

    async def _outside_the_shard(self, gvk: GroupVersionKind, obj_key: ObjectKey) -> Object | None:
        """The object as the manager has it, if it exists outside this shard's selector (one GET; not sharded:
        never)."""
        if not self.shard.requirements:
            return None
        obj = await Objects(self.api, self.kinds[gvk][1]).get(obj_key.name, obj_key.namespace)
        if obj is None or obj["metadata"].get("deletionTimestamp") or self.shard.matches(obj["metadata"].get("labels")):
            return None
        return obj

    # ------------------------------------------------------------------------------------- helpers

    def _worker_views(self, gvk: GroupVersionKind) -> list[WorkerView]:
        placed = self._placed[gvk]  # a reservation whose write the watch has already shown counts once
        running = self._load[gvk] + Counter(w for k, w in self._reserved[gvk].items() if k not in placed)
        connections = self.connections()
        views = []
        for cluster in self.clusters.items():
            name = cluster["metadata"]["name"]
            worker = connections.get(name)
            views.append(
                WorkerView(
                    name,
                    dict(cluster["metadata"].get("labels") or {}),
                    connected=worker is not None and worker.connected,
                    serves_kind=worker.serves(gvk) if worker is not None else False,
                    running=running.get(name, 0),
                )
            )
        return views

    async def _annotate(self, gvk: GroupVersionKind, obj: Object, changes: dict[str, str | None]) -> Object:
        """A resourceVersion-guarded merge patch of annotations; the cache gets the result at once, so the next
        decision counts it."""
        informer, resource = self.kinds[gvk]
        meta = obj["metadata"]
        patch = {"metadata": {"annotations": changes, "resourceVersion": meta["resourceVersion"]}}
        updated = await Objects(self.api, resource).patch(meta["name"], patch, meta["namespace"])
        informer.remember(updated)
        self.observe(gvk, "MODIFIED", updated)
        return updated

    async def _tell(
        self, gvk: GroupVersionKind, obj: Object, status: str, reason: str, message: str, *, event_type: str = "Normal"
    ) -> Object:
        """The placement record on the manager object (the ``MultiKueuePlacement`` condition, or an annotation where
        the kind cannot hold it) and an Event, only when the decision changed: a waiting object looked at again
        says nothing new. Returns the object as written."""
        condition = {"type": CONDITION, "status": status, "reason": reason, "message": message[:32768]}
        recorded = placement_record(obj)
        if same_state(recorded, condition):
            return obj
        if gvk not in self.no_conditions:
            obj = await self._record_condition(gvk, obj, condition)
        if gvk in self.no_conditions:
            stamped = set_condition([recorded] if recorded else [], condition)[0]
            obj = await self._annotate(gvk, obj, {PLACEMENT_RECORD: json.dumps(stamped, sort_keys=True)})
        await self._event(gvk, obj, event_type, reason, message)
        return obj

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

    async def _event(self, gvk: GroupVersionKind, obj: Object, type_: str, reason: str, message: str) -> None:
        target = {**obj, "apiVersion": gvk.api_version, "kind": gvk.kind}
        await events.record(self.api, target, type_=type_, reason=reason, message=message,
                            component=self.config.dispatcher.controller_name)  # fmt: skip
