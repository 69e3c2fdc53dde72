"""Direct mode: objects of a kind placed on a worker by this controller, with no Workload and no race.

Per object (level-triggered, keyed by kind and namespace/name):

1. Not placed yet: decide a worker (``placement.decide``), write the decision on the manager object
   (``multikueue.x-k8s.io/worker`` and ``.../phase: Placed`` annotations, resourceVersion-guarded) *before*
   creating anything, so a restart at any point finds it: no duplicate, no lost run. No worker fits: the object
   waits, and its ``MultiKueuePlacement`` condition and an Event say why, worker by worker; with
   ``inadmissibleTimeout``, one no worker can ever fit is marked ``Failed``.
2. Placed: the run's lifecycle on that worker is the one both modes share (``runs`` and ``run_lifecycle``), recorded
   on the object (``placement_record``): created there, its status mirrored, ``Finished`` (or ``Failed``) once the
   kind's ``finished`` predicate holds with the final status mirrored, its copy deleted after the kind's retention.
   A worker lost past ``workerLostTimeout``: ``AtLeastOnce`` places the object again elsewhere and avoids the lost
   worker (its stale copy is deleted when it returns); ``AtMostOnce`` marks it ``Failed``. A worker that refuses the
   copy, or holds an object of that name that is not this run's and never goes, is avoided the same way.
"""

from __future__ import annotations

import datetime
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import anyio
import structlog

from multikueue.clusters.signals import WorkerSignals
from multikueue.clusters.worker import Worker
from multikueue.config import Configuration
from multikueue.dispatch import copies, run_lifecycle
from multikueue.dispatch import workload_state as wl
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.memory import RunMemory
from multikueue.dispatch.mirror import StatusMirror
from multikueue.dispatch.placement import WORKER_SELECTOR_ANNOTATION, Decision, WorkerView, decide
from multikueue.dispatch.placement_record import (
    CONDITION,
    FAILED,
    FINISHED,
    LOST_THERE,
    PLACED,
    PlacementRecord,
    PlacementWriter,
    avoided,
    notes_of,
    placement_record,
)
from multikueue.dispatch.run_lifecycle import RunView
from multikueue.dispatch.runs import OWN_CONDITIONS, RunOn, Runs
from multikueue.kube.addresses import GroupVersionKind, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue.labels import PLACEMENT_FINISHED_AT, PLACEMENT_PHASE, PLACEMENT_WORKER
from multikueue.metrics import Metrics
from multikueue.runtime.again import Again
from multikueue.runtime.controller import Result
from multikueue.runtime.informer import DELETED, Informer, ObjectKey
from multikueue.runtime.signal import Signal
from multikueue.runtime.watches import KindChange, Watch
from multikueue.selectors import parse as parse_selector

log = structlog.get_logger(__name__)
Object = dict[str, Any]
DirectKey = tuple[GroupVersionKind, ObjectKey]
NO_WORKER_FITS = "NoWorkerFits"
NO_WORKER_CAN_RUN = "NoWorkerCanRun"
__all__ = ["CONDITION", "FAILED", "FINISHED", "DirectKey", "DirectReconciler", "avoided", "notes_of",
           "placement_record", "waits_for_a_fit"]  # fmt: skip


def retained_for(finished_at: str | None, retention: float | None) -> float:
    """How much longer a finished run's copy stays on its worker (0 without a retention, or past)."""
    return wl.retention_left(finished_at, retention, datetime.datetime.now(datetime.UTC))


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
        metrics: Metrics | None,
        lost_since: Callable[[str], float | None],
        settled: Callable[[str], bool] = lambda _: True,
    ) -> None:
        self.config = config
        self.settled = settled  # whether a worker's first connection attempt here has ended
        # Since when a worker not connected has been so (its connection dropped, or never made in this process).
        self.lost_since = lost_since
        self.api = api
        self.kinds = kinds
        self.clusters = clusters
        self.connections = connections
        self.again: Again[DirectKey] = Again("capacity freed on a worker: the runs waiting for one")
        self.metrics = metrics
        self.origin = config.multi_kueue.origin
        # This deployment's shard (docs/scaling.md): the informers hold only the objects it selects.
        self.shard = parse_selector(config.dispatcher.shard.object_selector)
        # Every Direct-mode kind configured, served yet or not: ``kinds`` gains one when its CRD appears later.
        direct = [g for g in config.multi_kueue.gvks if config.adapter(g).mode == "Direct"]
        self.adapters = {g: GenericAdapter(g, config.dispatcher.managed_by, config.adapter(g)) for g in direct}
        self.memory: RunMemory[DirectKey] = RunMemory()
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
        self.writer = PlacementWriter(api, kinds, config.dispatcher.controller_name, self.observe, metrics,
                                      routine_records=config.dispatcher.routine_records)  # fmt: skip
        self.runs = Runs(self.origin, self._manager, self.mirror, metrics)

    def observe(self, gvk: GroupVersionKind, kind: str, obj: Object) -> None:
        """Every event of the kind's informer (and this process's own writes): the load counts, and deletions."""
        key = ObjectKey.of(obj)
        if kind == DELETED:
            self.memory.deleted[(gvk, key)] = obj
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
            self.again.watch(),
            Watch("their copies on workers (same namespace/name), batched over eventsBatchPeriod", workers.object,
                  lambda e: [(e[1], e[2])] if e[1] in self.kinds else [], delay=batch),
            Watch("a worker, or a kind on it, coming or going: every object", workers.changed,
                  lambda _: self._every(), low=True),
            Watch("MultiKueueClusters (a worker's labels may now fit a waiting run)", self.clusters,
                  lambda _: list(self.memory.waiting), low=True),
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
        for key in [k for k in self.memory.waiting if k[0] == gvk]:
            self.again.emit(key)

    # ------------------------------------------------------------------------------------------ entry

    async def reconcile(self, key: DirectKey) -> Result:
        gvk, obj_key = key
        adapter = self.adapters[gvk]
        obj = self.kinds[gvk][0].get(obj_key)
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            return await self._deleted(key, obj)
        if not adapter.is_managed(obj)[0]:
            return Result()  # not handed to this controller
        phase, worker = notes_of(obj).get(PLACEMENT_PHASE), notes_of(obj).get(PLACEMENT_WORKER)
        if phase in (FINISHED, FAILED):
            after = run_lifecycle.after_finish(retained_for(notes_of(obj).get(PLACEMENT_FINISHED_AT),
                                                            adapter.options.retention))  # fmt: skip
            if isinstance(after, run_lifecycle.Retain):
                return Result(requeue_after=after.requeue_after)  # the kind's retention: the copy and its pods kept
            await self._remove_copies(gvk, obj_key, obj)
            return Result()
        if not worker:
            return await self._place(gvk, obj_key, adapter)
        await self._remove_copies(gvk, obj_key, obj, keep=worker)  # stale copies on workers it was moved away from
        at_most_once = adapter.options.placement.lost_worker_policy == "AtMostOnce"
        record = PlacementRecord(self.writer, gvk, obj, lambda _: self.wake(gvk), at_most_once=at_most_once)
        return await self.runs.drive(self._run_on(adapter, obj, worker, at_most_once), record)

    def _run_on(self, adapter: GenericAdapter, obj: Object, worker: str, at_most_once: bool) -> RunOn:
        connection = self.connections().get(worker)
        lost_for = None
        if connection is None or not connection.connected:
            since = self.lost_since(worker)
            lost_for = time.monotonic() - since if since is not None else 0.0
        # Its status came from this worker unless it was moved away from one it may have run on (a lost one; a worker
        # that refused it, or held an earlier run's copy, never ran it): a copy missing there was deleted there.
        ran_elsewhere = any(why.startswith(LOST_THERE) for why in avoided(obj).values())
        view = RunView(worker=worker, lost_timeout=self.config.multi_kueue.worker_lost_timeout, lost_for=lost_for,
                       at_most_once=at_most_once, settling=lost_for is not None and not self.settled(worker),
                       ran_there=copies.has_mirrored_status(obj, OWN_CONDITIONS) and not ran_elsewhere)  # fmt: skip
        return RunOn(adapter, obj, connection, view, waiting_since=obj["metadata"].get("creationTimestamp"))

    async def _deleted(self, key: DirectKey, obj: Object | None) -> Result:
        """The object is gone (or going): its copies go, unless it only left this shard; what was kept is forgotten."""
        gvk, obj_key = key
        last = obj or self.memory.deleted.get(key)
        if obj is None and last is not None and await self._left_the_shard(gvk, obj_key, last):
            last = None  # its copy now belongs to the shard that selects it
        if last is not None:
            await self._remove_copies(gvk, obj_key, last)
        self.memory.forget(key)
        self.mirror.forget(gvk, obj_key)
        self.wake(gvk)
        return Result()

    async def _manager(self, gvk: GroupVersionKind) -> Objects:
        return Objects(self.api, self.kinds[gvk][1])

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
        key = (gvk, obj_key)
        self.memory.unfit_since.pop(key, None)
        try:  # the written decision counts from the informer's view (observe) once it is back
            obj = await self.writer.annotate(gvk, obj, {PLACEMENT_WORKER: decision.worker, PLACEMENT_PHASE: PLACED})
        finally:
            self._reserved[gvk].pop(obj_key, None)
        self.memory.waiting.discard(key)
        log.info("object placed", kind=gvk.kind, object=str(obj_key), worker=decision.worker)
        await self.writer.tell(gvk, obj, "True", PLACED, decision.message)
        return Result(requeue_after=0.0)  # the next pass creates the copy

    async def _unplaced(self, gvk: GroupVersionKind, obj: Object, decision: Decision) -> Result:
        """No worker fits: the object waits, told why, woken when capacity frees or a worker changes. With
        ``inadmissibleTimeout``, one no worker can ever fit as the fleet stands (labels, kind, lost there) for that
        long is marked Failed with the reasons."""
        key, timeout = (gvk, ObjectKey.of(obj)), self.config.dispatcher.inadmissible_timeout
        memory = self.memory
        if timeout is None or not decision.never:
            memory.unfit_since.pop(key, None)
            return await self._wait_for_a_fit(key, obj, decision, None)
        waited = time.monotonic() - memory.unfit_since.setdefault(key, time.monotonic())
        if waited < timeout:
            return await self._wait_for_a_fit(key, obj, decision, timeout - waited)
        message = f"no worker can run it (for {timeout:g}s, inadmissibleTimeout): {decision.message}"
        # The condition first: a pass retried after the phase write sees the run ended and never tells it again.
        obj = await self.writer.tell(gvk, obj, "False", NO_WORKER_CAN_RUN, message, event_type="Warning")
        await self.writer.annotate(gvk, obj, {PLACEMENT_PHASE: FAILED})
        memory.forget(key)  # after the write: a failed one is retried, the clock still run out
        return Result()

    async def _wait_for_a_fit(self, key: DirectKey, obj: Object, decision: Decision, left: float | None) -> Result:
        self.memory.waiting.add(key)
        await self.writer.tell(key[0], obj, "False", NO_WORKER_FITS, decision.message, event_type="Warning")
        return Result(requeue_after=left)

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

    # ------------------------------------------------------------------------ the garbage collector's rules

    def dispatches(self, gvk: GroupVersionKind) -> bool:
        return gvk in self.adapters

    async def wants(self, worker: Worker, gvk: GroupVersionKind, worker_obj: Object) -> bool:
        """Its object is placed on ``worker``, made for this very run (an earlier same-named run's copy never is),
        and not finished past its kind's retention. Another shard's copies (they carry its objects' labels) are left
        to it, and so is one whose object was relabelled into another shard since it was made."""
        if not self.shard.matches(worker_obj["metadata"].get("labels")) or gvk not in self.kinds:
            return True
        obj_key = ObjectKey.of(worker_obj)
        obj = self.kinds[gvk][0].get(obj_key)
        if obj is None:
            return await self._outside_the_shard(gvk, obj_key) is not None
        return (
            copies.Run.of(obj).made(worker_obj)
            and notes_of(obj).get(PLACEMENT_WORKER) == worker.name
            and (notes_of(obj).get(PLACEMENT_PHASE) not in (FINISHED, FAILED) or self._retained(gvk, obj))
        )

    async def remove(self, worker: Worker, gvk: GroupVersionKind, worker_obj: Object) -> bool:
        return await copies.delete(worker, gvk, ObjectKey.of(worker_obj))

    async def sweep(self, worker: Worker) -> None:
        return None  # no Workload copies in Direct mode

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
        await self.writer.event(gvk, obj, "Normal", "LeftShard", message)
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

    def holds_runs(self, worker: str) -> bool:
        """Whether a run of some kind is placed on ``worker`` and not finished (the inventory keeps its worker)."""
        return any(load.get(worker, 0) > 0 for load in self._load.values())

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
