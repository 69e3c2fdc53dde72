"""The manager-Workload reconciler: Kueue's MultiKueue state machine for this controller's check.

Level-triggered: each pass reads the manager Workload (or its last state when deleted), the worker copies from
the connections' caches, and takes the first step that applies, in Kueue's order. Remote objects without this
manager's origin label are never touched.
"""

from __future__ import annotations

import datetime
import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import structlog

from multikueue.clusters.signals import WorkerSignals
from multikueue.clusters.worker import Worker
from multikueue.config import Configuration
from multikueue.dispatch import copies, decision, workload_copies
from multikueue.dispatch import workload_state as wl
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.check_status import CheckStatus, admitted_message, cluster_queue
from multikueue.dispatch.copies import Want
from multikueue.dispatch.mirror import StatusMirror, StatusRejected, pruned_message
from multikueue.dispatch.news import WorkerNews
from multikueue.dispatch.placement import NO_WORKER_MATCHES, WORKER_SELECTOR_ANNOTATION, Selection, selection
from multikueue.dispatch.writes import WorkerWriteFailed, WorkerWrites, Write
from multikueue.kube.addresses import GroupVersionKind, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.discovery import KindUnavailable, discover_resource
from multikueue.kube.resources import Objects
from multikueue.metrics import Metrics
from multikueue.owners import BY_OWNER_UID
from multikueue.runtime.controller import Result
from multikueue.runtime.informer import DELETED, Informer, ObjectKey
from multikueue.runtime.signal import Signal
from multikueue.runtime.watches import Change, KindChange, Watch

log = structlog.get_logger(__name__)
Object = dict[str, Any]
REPLACED = "Remote workload spec changed, resetting for re-admission"
STALE_RECHECK = 2.0  # seconds: a stale copy's deletion is looked for (its events name the earlier run's Workload)
DISPATCH_PROBLEM = "Cannot dispatch: "
"""How a Pending check's message starts while a worker refuses (or does not answer) a write; cleared once none does."""


@dataclass(frozen=True)
class _Pass:
    """What carrying out one step needs besides the step itself."""

    workload: Object
    check: str
    state: Object
    adapter: GenericAdapter
    obj: Object
    connected: dict[str, Worker]
    present: dict[str, Object]  # the copy on each connected worker that has one
    late: dict[str, BaseException]  # writes of earlier passes that failed in the background

    @property
    def key(self) -> ObjectKey:
        return ObjectKey.of(self.workload)

    @property
    def obj_key(self) -> ObjectKey:
        return ObjectKey.of(self.obj)


class WorkloadReconciler:
    def __init__(
        self,
        config: Configuration,
        api: ApiClient,
        workloads: Informer,
        checks: Informer,
        configs: Informer,
        connections: Callable[[], dict[str, Worker]],
        manager_resources: dict[GroupVersionKind, Resource],
        metrics: Metrics | None = None,
        owners: dict[GroupVersionKind, Informer] | None = None,
        enqueue: Callable[[ObjectKey], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        settled: Callable[[str], bool] = lambda _: True,
        clusters: Informer | None = None,
        lost_since: Callable[[str], float | None] | None = None,
    ) -> None:
        self.config = config
        # Since when a worker not connected has been so, connection dropped or never made (a MultiKueueCluster
        # deleted, a kubeconfig that cannot be used): the worker-lost clock of the runs recorded there.
        self.lost_since = lost_since or self._connection_lost_since
        self.clusters = clusters  # the MultiKueueClusters: their labels are what a run's worker selection reads
        self.settled = settled  # whether a worker's first connection attempt here has ended
        self.clock = clock  # monotonic seconds: worker-lost and incremental-round timing
        self.api = api
        self.workloads = workloads
        self.checks = checks
        self.configs = configs
        self.connections = connections
        self.manager_resources = manager_resources
        # The manager's objects of each kind, when watched: the caller's dict itself, filled as kinds are served
        # (``owners or {}`` would swap an empty one for a copy that never fills: a GET per pass, not the cache).
        self.owners = owners if owners is not None else {}
        self.metrics = metrics
        self.adapters = {
            g: GenericAdapter(g, config.dispatcher.managed_by, config.adapter(g)) for g in config.multi_kueue.gvks
        }
        self.deleted: dict[ObjectKey, Object] = {}
        self.rounds: dict[ObjectKey, float] = {}  # incremental dispatch: when each Workload's round began
        self.selective: set[ObjectKey] = set()  # waiting Workloads whose worker selection a label change may change
        self.inadmissible: dict[ObjectKey, float] = {}  # since when no worker's Kueue can admit it (the timeout)
        self.status = CheckStatus(api, workloads, config.dispatcher.controller_name, metrics)
        self.news = WorkerNews(self.status)
        # Writes to different workers run side by side; one that outlasts the pass finishes in the background.
        self.writes = WorkerWrites(lambda key: enqueue(key) if enqueue is not None else None)  # type: ignore[arg-type]
        self.mirror = StatusMirror()
        self.origin = config.multi_kueue.origin
        self.controller_name = config.dispatcher.controller_name

    def _connection_lost_since(self, cluster: str) -> float | None:
        worker = self.connections().get(cluster)
        return worker.lost_since if worker is not None else None

    def remember_deleted(self, obj: Object) -> None:
        self.deleted[ObjectKey.of(obj)] = obj

    def watches(self, kinds: Signal[KindChange], workers: WorkerSignals) -> list[Watch[ObjectKey]]:
        """What brings a manager Workload to this controller (``kinds``: the configured kinds' manager objects)."""
        batch = lambda: self.config.dispatcher.events_batch_period  # noqa: E731 - read at each event (a reload)
        return [
            Watch("manager Workloads", self.workloads, lambda c: [ObjectKey.of(c.obj)], record=self._record),
            Watch("its owner object changing (a cancel to carry over)", kinds, self._owned_workloads),
            Watch("MultiKueueConfigs (their clusters): every Workload", self.configs, lambda _: self._every(),
                  low=True),
            Watch("worker Workload copies and objects, batched over eventsBatchPeriod", workers.workload,
                  lambda e: [e[1]], delay=batch),
            Watch("a worker, or a kind on it, coming or going: every Workload", workers.changed,
                  lambda _: self._every(), low=True),
            *([Watch("MultiKueueClusters (their labels): the waiting Workloads that select workers", self.clusters,
                     lambda _: list(self.selective), low=True)] if self.clusters is not None else []),
        ]  # fmt: skip

    def _record(self, change: Change) -> None:
        if change.type == DELETED:
            self.remember_deleted(change.obj)

    def _owned_workloads(self, event: KindChange) -> list[ObjectKey]:
        if self.config.adapter(event.gvk).mode == "Direct":
            return []
        return self.workloads.by_index(BY_OWNER_UID, event.change.obj["metadata"].get("uid", ""))

    def _every(self) -> list[ObjectKey]:
        return [ObjectKey.of(workload) for workload in self.workloads.items()]

    # ----------------------------------------------------------------------------------------- entry

    async def reconcile(self, key: ObjectKey) -> Result:
        workload = self.workloads.get(key)
        deleted = workload is None or bool(workload["metadata"].get("deletionTimestamp"))
        if workload is None:
            workload = self.deleted.get(key)
            if workload is None:
                return Result()
        found = self._our_check(workload)
        if found is None or found[1].get("state") == wl.REJECTED:
            self.deleted.pop(key, None)
            if deleted:  # never dispatched here (or given up): only what is kept per Workload key goes
                self._forget_key(key)
            return Result()
        check_name, _, clusters = found
        found_adapter = await self._adapter_for(workload, check_name, deleted)
        if found_adapter is None:
            return Result()
        adapter, owner_name = found_adapter
        obj_key = ObjectKey(key.namespace, owner_name)
        obj = None if deleted else await self._object(workload, check_name, adapter, obj_key)
        workers = self.connections()
        connected = {c: w for c in clusters if (w := workers.get(c)) is not None and w.connected}
        if deleted:
            await self._remove_everywhere(connected, adapter, obj_key, key)
            self._forget(key, adapter.gvk, obj_key)
            return Result()
        if obj is None:
            return Result()  # not managed by Kueue: rejected
        return await self._reconcile_group(workload, check_name, adapter, obj, clusters, connected)

    async def _adapter_for(self, workload: Object, check_name: str, deleted: bool) -> tuple[GenericAdapter, str] | None:
        """The adapter of the Workload's owner kind, and the owner's name; a Workload no adapter here can dispatch
        is Rejected."""
        owner = wl.owner(workload)
        adapter = self.adapters.get(owner[0]) if owner else None
        if owner is None or adapter is None:
            if not deleted:
                what = f' for owner kind "{owner[0]}"' if owner else ""
                await self.status.set_check(workload, check_name, wl.REJECTED, f"No multikueue adapter found{what}")
            return None
        if adapter.options.mode == "Direct" and not deleted:
            message = f"{adapter.gvk.kind} is dispatched in Direct mode by this controller, without a Workload"
            await self.status.set_check(workload, check_name, wl.REJECTED, message)
            return None
        return adapter, owner[1]

    async def _object(
        self, workload: Object, check_name: str, adapter: GenericAdapter, obj_key: ObjectKey
    ) -> Object | None:
        """The manager object owning the Workload (from the kind's cache, else asked); ``None`` when Kueue does not
        manage it (the check is then Rejected)."""
        cached = self.owners.get(adapter.gvk)
        obj = cached.get(obj_key) if cached is not None else None
        if obj is None:  # not watched, or not seen yet (a Workload can arrive before its owner): ask
            resource = await self._manager_resource(adapter.gvk)
            obj = await Objects(self.api, resource).get(obj_key.name, obj_key.namespace)
        if obj is None:
            raise LookupError(f"owner {adapter.gvk.kind} {obj_key} not found")
        managed, reason = adapter.is_managed(obj)
        if not managed:
            await self.status.set_check(
                workload, check_name, wl.REJECTED, f"The owner is not managed by Kueue: {reason}"
            )
            return None
        return obj

    def _forget(self, key: ObjectKey, gvk: GroupVersionKind, obj_key: ObjectKey) -> None:
        """A deleted Workload's copies are gone: drop what was remembered about it."""
        self.deleted.pop(key, None)
        self.mirror.forget(gvk, obj_key)
        self._forget_key(key)
        for worker in self.connections().values():
            worker.forget(key)

    def _forget_key(self, key: ObjectKey) -> None:
        self.news.forget(key)
        for kept in (self.rounds, self.inadmissible):
            kept.pop(key, None)
        self.selective.discard(key)

    # ------------------------------------------------------------------------------------ the steps

    async def _reconcile_group(
        self,
        workload: Object,
        check_name: str,
        adapter: GenericAdapter,
        obj: Object,
        clusters: list[str],
        connected: dict[str, Worker],
    ) -> Result:
        """Decide (``decision.decide``, pure), then carry the step out."""
        key = ObjectKey.of(workload)
        present = {c: r for c, worker in connected.items() if (r := worker.workload(key)) is not None}
        late = self.writes.take_failures(key)  # writes of earlier passes that ended in the background
        if adapter.options.worker_events and not wl.is_true(workload, wl.FINISHED):
            await self.news.surface(workload, adapter, obj, connected, present)
        group = self._group(workload, check_name, adapter, obj, clusters, connected, present)
        work = _Pass(workload, check_name, group.state, adapter, obj, connected, present, late)
        return await self._carry_out(decision.decide(group), work)

    def _group(
        self,
        workload: Object,
        check_name: str,
        adapter: GenericAdapter,
        obj: Object,
        clusters: list[str],
        connected: dict[str, Worker],
        present: dict[str, Object],
    ) -> decision.Group:
        """The snapshot the decision reads: caches and clocks, no API calls."""
        obj_key = ObjectKey.of(obj)
        config = self.config.multi_kueue
        incremental = config.incremental_dispatcher_config
        run = copies.Run.of(obj, workload["metadata"]["name"])
        return decision.Group(
            workload=workload, check=check_name, clusters=tuple(clusters), connected=tuple(connected),
            worker_copies=present,
            serving={c: worker.serves(adapter.gvk) for c, worker in connected.items()},
            holding={c: worker.holds(adapter.gvk, obj_key, run) for c, worker in connected.items()},
            settling=tuple(c for c in clusters if c not in connected and not self.settled(c)),
            lost_since={c: self.lost_since(c) for c in clusters if c not in connected},
            now=self.clock(), lost_timeout=config.worker_lost_timeout, dispatcher=config.dispatcher_name,
            round_started=self.rounds.get(ObjectKey.of(workload)),
            round_length=self.config.dispatcher.incremental_round_timeout,
            step_size=incremental.step_size if incremental else 3,
            retained_for=wl.retained_for(workload, adapter.options.retention, datetime.datetime.now(datetime.UTC)),
            selection=self._selection(workload, adapter, obj, clusters, _stuck(connected, adapter, obj_key, run,
                                                                              config.worker_lost_timeout)),
            inadmissible_timeout=self.config.dispatcher.inadmissible_timeout,
            inadmissible_since=self.inadmissible.get(ObjectKey.of(workload)),
            ran_there=_ran_there(workload, adapter, obj, present),
        )  # fmt: skip

    def _selection(
        self, workload: Object, adapter: GenericAdapter, obj: Object, clusters: list[str], stuck: dict[str, str]
    ) -> Selection:
        """The run's worker selection: the kind's ``workerSelector`` and the object's (else its Workload's)
        ``multikueue.x-k8s.io/worker-selector`` annotation, read against the MultiKueueClusters' labels; and never a
        worker that holds an earlier run's copy of that name a finalizer keeps (``stuck``: it could not run there)."""
        found = self._selected(workload, adapter, obj, clusters)
        if not stuck or (workload.get("status") or {}).get("clusterName"):
            return found
        return replace(found, excluded={**stuck, **found.excluded})

    def _selected(self, workload: Object, adapter: GenericAdapter, obj: Object, clusters: list[str]) -> Selection:
        key = ObjectKey.of(workload)
        own = _annotation(obj, WORKER_SELECTOR_ANNOTATION) or _annotation(workload, WORKER_SELECTOR_ANNOTATION)
        kind = adapter.options.placement.worker_selector
        waiting = not (workload.get("status") or {}).get("clusterName")
        if not (own or kind) or not waiting:
            self.selective.discard(key)
            return Selection()
        self.selective.add(key)
        labels = {}
        for name in clusters:
            cluster = self.clusters.get(ObjectKey("", name)) if self.clusters is not None else None
            labels[name] = dict(((cluster or {}).get("metadata") or {}).get("labels") or {})
        return selection(labels, kind, own)

    async def _carry_out(self, step: decision.Step, work: _Pass) -> Result:
        match step:
            case decision.Wait(requeue_after=after):
                return Result(requeue_after=after)
            case decision.RemoveEverywhere(requeue_after=after, keep_objects=keep):
                self.rounds.pop(work.key, None)
                await self._remove_everywhere(work.connected, work.adapter, work.obj_key, work.key, keep_objects=keep)
                return Result(requeue_after=after)
            case decision.ResetOutOfSync():
                await self.status.set_check(work.workload, work.check, wl.RETRY, step.message)
                await self.status.event(
                    work.workload, "Warning", f'{step.message}, Previously: "{work.state.get("state")}"'
                )
                return Result()
            case decision.FinishedOnWorker():
                return await self._finished_on_worker(step, work)
            case decision.KeepEvicted(cluster=cluster):
                # Mirrored only: nothing is started for a run being evicted.
                out = await self._copy(work.connected[cluster], work.adapter, work.obj, work.workload, Want.OBSERVE)
                if isinstance(out, copies.Foreign):
                    raise copies.OwnershipConflict(out.message)
                return Result()
            case decision.ResetEvicted():
                # Kueue writes this one directly rather than through updateACS, hence ". Previously".
                await self.status.set_check(work.workload, work.check, wl.RETRY, step.message, separator=". ")
                await self.status.event(work.workload, "Normal", f'{step.message}. Previously: "Ready"')
                return Result()
            case decision.CarryPriority(cluster=cluster) | decision.ReplaceCopy(cluster=cluster):
                await self._bring_copy_in_line(cluster, work, priority_only=isinstance(step, decision.CarryPriority))
                return Result()
            case decision.RetryAdmission(message=message):
                await self.status.set_check(work.workload, work.check, wl.RETRY, message)
                return Result()
            case decision.AwaitLostWorker(requeue_after=after):
                if await self.status.set_message(work.workload, work.check, step.message):
                    await self.status.event(work.workload, "Warning", step.message)
                    await self.status.object_event(work.adapter, work.obj, "Warning", step.message, reason="WorkerLost")
                return Result(requeue_after=after)
            case decision.LostOnWorker():
                await self._lost_on_worker(work, step.message)
                return Result()
            case decision.RunOnWinner():
                return await self._run_on_winner(step, work)
            case decision.Nominate():
                return await self._nominate(step, work)
            case decision.GiveUp():
                await self._give_up(step, work)
                return Result()
        raise AssertionError(f"unhandled step {step!r}")

    async def _finished_on_worker(self, step: decision.FinishedOnWorker, work: _Pass) -> Result:
        worker = work.connected[step.cluster]
        match await self._copy(worker, work.adapter, work.obj, work.workload, Want.OBSERVE):
            case copies.Held():
                # Over on the worker while the manager object is still held: its final status can only be mirrored
                # once the hold ends, so nothing is finished or deleted before. Admission is what ends the hold.
                if work.state.get("state") not in (wl.READY, wl.RETRY, wl.REJECTED):
                    await self.status.set_admitted(work.workload, work.check, work.state, step.cluster)
                return Result()  # the owner's release brings this Workload back
            case copies.Foreign(message=message):
                raise copies.OwnershipConflict(message)
            case copies.Stale(message=message):
                await self._tell_problem(work, message)
                return Result(requeue_after=STALE_RECHECK)
            case copies.Absent() | copies.Unlisted():
                # Not cached (its cache may still be listing after a failover, a reload or a reconnect, or its watch
                # lag): read live, as Kueue reads the remote job. Gone there, the final status cannot come.
                if await copies.look_up(worker, work.adapter.gvk, work.obj_key, self.origin) is not None:
                    return Result(requeue_after=0.0)  # kept as cached: mirrored by the next pass, then finished
                message = copies.gone_message(work.adapter.gvk.kind, work.obj_key, step.cluster)
                await self.status.finish(work.workload, step.reason, f"{step.message} ({message})")
                await self._tell_lost(work, message)
                return Result()
            case copies.NoStatus() | copies.InSync() as seen:
                # A cached copy the kind's ``finished`` predicate holds on has its final status: no read needed (a
                # read per run would wait on a hung worker).
                cached = None if isinstance(seen, copies.Finished) else seen.worker_obj
                if cached is not None and not await copies.caught_up(worker, work.adapter, cached):
                    return Result(requeue_after=0.0)  # newer than its cache: mirrored by the next pass, then finished
                await self.status.finish(work.workload, step.reason, step.message)  # the final status is on the manager
                return Result()
        return Result(requeue_after=0.0)  # adopted by this pass: mirrored by the next one, then finished

    async def _lost_on_worker(self, work: _Pass, message: str) -> None:
        """The run's object ran on its worker and was deleted there: never run again. The Workload finishes as the
        manager object's mirrored status says when the kind's ``finished`` predicate holds on it (the final status
        came before the deletion), else as Failed, said on the Workload and the object."""
        obj = await self._object_now(work)
        done = work.adapter.finished(obj)
        if done is not None:
            await self.status.finish(work.workload, done[0], done[1])
            return
        log.warning("run deleted on its worker before its final status came", workload=str(work.key), message=message)
        await self.status.finish(work.workload, "Failed", message)
        await self._tell_lost(work, message)

    async def _object_now(self, work: _Pass) -> Object:
        """The manager object read live (its cache may not have the final status a pass just mirrored)."""
        resource = await self._manager_resource(work.adapter.gvk)
        return await Objects(self.api, resource).get(work.obj_key.name, work.obj_key.namespace) or work.obj

    async def _tell_lost(self, work: _Pass, message: str) -> None:
        await self.status.event(work.workload, "Warning", message)
        await self.status.object_event(work.adapter, work.obj, "Warning", message, reason="FinalStatusLost")

    async def _tell_problem(self, work: _Pass, message: str) -> None:
        """Why the run cannot go on now, on the check's message (its state unchanged) and, when that changes, in
        Events on the Workload and the object."""
        if await self.status.set_message(work.workload, work.check, DISPATCH_PROBLEM + message):
            await self.status.event(work.workload, "Warning", message)
            await self.status.object_event(work.adapter, work.obj, "Warning", message, reason="StaleCopy")

    async def _bring_copy_in_line(self, cluster: str, work: _Pass, *, priority_only: bool) -> None:
        """A priority change is carried over to the copy in place; anything else replaces the copy."""
        if priority_only:
            spec = work.workload.get("spec") or {}
            patch = {"spec": {"priority": spec.get("priority"), "priorityClassRef": spec.get("priorityClassRef")}}
            await work.connected[cluster].workload_objects().patch(work.key.name, patch, work.key.namespace)
            log.info("priority carried to worker", cluster=cluster, workload=str(work.key))
        else:
            log.info("worker copy out of date, replacing it", cluster=cluster, workload=str(work.key))
            recorded = (work.workload.get("status") or {}).get("clusterName")
            if cluster != recorded or work.state.get("state") != wl.READY:
                await self._remove_from_worker(cluster, work.adapter, work.obj_key, work.key)
                return
            # The run's own copies, removed by this dispatcher: said on the check first (still Ready, so a delete
            # that fails leaves the run waiting for its worker), then removed, then reset for re-admission (as Kueue
            # does once they are gone). Their absence is never read as a deletion by someone else.
            await self.status.set_message(work.workload, work.check, decision.REPLACING)
            await self._remove_from_worker(cluster, work.adapter, work.obj_key, work.key)
            workload = self.workloads.get(work.key) or work.workload  # as the message write left it
            await self.status.set_check(workload, work.check, wl.RETRY, REPLACED)

    async def _run_on_winner(self, step: decision.RunOnWinner, work: _Pass) -> Result:
        """The losers' copies go; the winner is recorded, then runs the object (created there, kept in step, its
        status mirrored); the kind's own ``finished`` predicate, when configured, ends the run."""
        winner, workload = step.winner, work.workload
        removals = await self.writes.each(work.key, {
            c: functools.partial(self._remove_from_worker, c, work.adapter, work.obj_key, work.key) for c in step.losers
        })  # fmt: skip
        if step.deactivate:
            await workload_copies.deactivate(work.connected[winner], work.present[winner], workload)
            _raise_first(removals)
            return Result()
        if work.state.get("state") not in (wl.RETRY, wl.REJECTED):
            # Decide, record, create: once the winner is on the Workload, a create whose answer is lost or a replica
            # that takes over finds it there and waits for that worker (workerLostTimeout), never sending the run
            # elsewhere while it may already be there.
            workload = await self.status.set_admitted(workload, work.check, work.state, winner)
        state = wl.check_state(workload, work.check) or {}
        # Created only where recorded, and not while the check is reset (Kueue is about to evict).
        ready = state.get("state") == wl.READY and (workload.get("status") or {}).get("clusterName") == winner
        want = Want.RUN if ready else Want.OBSERVE
        try:
            out = await self._copy(work.connected[winner], work.adapter, work.obj, workload, want)
        except WorkerWriteFailed as e:  # no answer, or not a refusal: the run may be there
            await self._report(workload, work.check, work.adapter, work.obj, {winner: e})
            raise
        moved_on = await self._winner_cannot_run(out, replace(work, workload=workload), winner, ready=ready)
        if moved_on is not None:
            return moved_on
        _raise_first(removals)
        # Only once the final status is on the manager object, so nothing is lost.
        if isinstance(out, copies.Finished) and state.get("state") == wl.READY:
            await self.status.finish(workload, out.reason, out.message)
            return Result()
        if state.get("state") == wl.READY and state.get("message") != admitted_message(winner):
            await self.status.set_message(workload, work.check, admitted_message(winner))  # a problem there is over
        return Result(requeue_after=self.config.multi_kueue.worker_lost_timeout)

    async def _winner_cannot_run(self, out: copies.CopyOutcome, work: _Pass, winner: str, *, ready: bool
                                 ) -> Result | None:  # fmt: skip
        """What the copy's outcome on the recorded winner means when the run cannot go on there now: refused for
        certain (reset for re-admission), an earlier run's copy in the way (waited for, then reset), ran there and
        deleted there (never made again), a foreign object of that name; ``None`` when the run goes on."""
        match out:
            case copies.CreateRefused(error=error):  # answered with a refusal, and not there: certainly not run
                await self._refused_on_winner(work.workload, work, winner, error)
                return Result()
            case copies.Stale(message=message, going_for=going):  # an earlier same-named run's copy: waited for
                timeout = self.config.multi_kueue.worker_lost_timeout
                if not ready:
                    return Result()  # reset already: Kueue is about to evict
                if going > timeout:  # a finalizer that does not let go: this run is certainly not there, so it moves
                    stuck = copies.OwnershipConflict(f"{message}; still there after workerLostTimeout ({timeout:g}s)")
                    await self._refused_on_winner(work.workload, work, winner, stuck)
                    return Result()
                await self._tell_problem(work, message)
                return Result(requeue_after=STALE_RECHECK)
            case copies.Gone(message=message):  # ran there, deleted there: never created again
                await self._lost_on_worker(work, message)
                return Result()
            case copies.Foreign(message=message):
                conflict = copies.OwnershipConflict(message)
                if ready:
                    await self._refused_on_winner(work.workload, work, winner, conflict)
                    return Result()
                await self._report(work.workload, work.check, work.adapter, work.obj, {winner: conflict})
                raise conflict
        return None

    async def _refused_on_winner(self, workload: Object, work: _Pass, winner: str, error: Exception) -> None:
        """The recorded winner refuses the run's object for certain (the create was answered, with a refusal, or a
        same-named object there is not this manager's): the check is reset for re-admission with the reason, told
        on the Workload and on the object."""
        message = f"{DISPATCH_PROBLEM}{error}; resetting for re-admission"  # each names the worker and the object
        log.warning("winner refused the object", cluster=winner, workload=str(work.key), error=str(error))
        await self.status.set_check(workload, work.check, wl.RETRY, message)
        await self.status.event(workload, "Warning", message)
        await self.status.object_event(work.adapter, work.obj, "Warning", message, reason="DispatchFailed")

    async def _give_up(self, step: decision.GiveUp, work: _Pass) -> None:
        """No worker's Kueue can ever admit the run (``inadmissibleTimeout``): the check is Rejected with each
        worker's reason (Kueue then deactivates the Workload and releases its quota), said in Events too."""
        log.warning("no worker's Kueue can admit the run: rejected", workload=str(work.key), reasons=dict(step.reasons))
        await self.status.set_check(work.workload, work.check, wl.REJECTED, step.message)
        self.inadmissible.pop(work.key, None)  # after the write: a failed one is retried, the clock still run out
        await self.status.event(work.workload, "Warning", step.message)
        await self.status.object_event(work.adapter, work.obj, "Warning", step.message, reason="NoWorkerCanAdmit")

    async def _nominate(self, step: decision.Nominate, work: _Pass) -> Result:
        """Write the nominations, copy the Workload to the nominated workers, remove it from the others."""
        if step.inadmissible:
            self.inadmissible.setdefault(work.key, self.clock())
        else:
            self.inadmissible.pop(work.key, None)
        if step.patch:
            await self.status.patch(work.workload, {"nominatedClusterNames": list(step.nominated) or None})
        if step.round_started is not None:
            self.rounds[work.key] = step.round_started
        writes: dict[str, Write] = {}
        for cluster in work.connected:
            if cluster in step.copy_to:
                writes[cluster] = functools.partial(
                    self._copy_workload, cluster, work.connected[cluster], work.workload
                )
            elif cluster in step.remove_from:
                writes[cluster] = functools.partial(self._remove_from_worker, cluster, work.adapter, work.obj_key,
                                                    work.key)  # fmt: skip
        failures = await self.writes.each(work.key, writes)
        failures.update((c, e) for c, e in work.late.items() if c in step.nominated and c not in work.present)
        if step.unmatched is not None and not failures:
            await self._tell_unmatched(work, step.unmatched)
            return Result()  # a label change on a MultiKueueCluster brings the Workload back
        await self._report(work.workload, work.check, work.adapter, work.obj, failures)
        if step.missing:
            raise ConnectionError(f"cluster {step.missing[0]}: no remote client for nominated cluster")
        return Result(requeue_after=step.requeue_after)

    async def _tell_unmatched(self, work: _Pass, message: str) -> None:
        """No worker of the run's MultiKueueConfig matches its worker selection: said on the check (its state stays
        Pending, a label may yet be added) and, when the message changes, in Events on the Workload and the object."""
        if await self.status.set_message(work.workload, work.check, message):
            log.info("no worker matches the run's selection", workload=str(work.key), message=message)
            await self.status.event(work.workload, "Warning", message)
            await self.status.object_event(work.adapter, work.obj, "Warning", message, reason="NoWorkerMatches")

    async def _copy_workload(self, cluster: str, worker: Worker, workload: Object) -> None:
        """Create the Workload's copy on a worker (one already there from an earlier pass is fine)."""
        if await workload_copies.copy(worker, workload, self.origin) and self.metrics is not None:
            self.metrics.workloads_dispatched.labels(cluster_queue(workload), cluster).inc()

    async def _remove_everywhere(
        self, connected: dict[str, Worker], adapter: GenericAdapter, obj_key: ObjectKey, key: ObjectKey,
        *, keep_objects: bool = False,
    ) -> None:  # fmt: skip
        """Remove the copies from every connected worker at once; a failure is retried (after all were tried). With
        ``keep_objects`` (a finished run within its retention) only the Workload copies go."""
        writes: dict[str, Write] = {
            c: functools.partial(self._remove_workload_copy, c, key) if keep_objects
            else functools.partial(self._remove_from_worker, c, adapter, obj_key, key)
            for c in connected
        }  # fmt: skip
        _raise_first(await self.writes.each(key, writes))

    async def _report(
        self,
        workload: Object,
        check_name: str,
        adapter: GenericAdapter,
        obj: Object,
        failures: dict[str, BaseException],
    ) -> None:
        """Failed writes to workers, where the user looks: the check's message (its state unchanged) and a Warning
        Event on the Workload and on the object, when the message changes; then retried with backoff (raised). With
        none, a message left from an earlier failure is cleared."""
        state = wl.check_state(workload, check_name) or {}
        if not failures:
            if str(state.get("message") or "").startswith((DISPATCH_PROBLEM, NO_WORKER_MATCHES)):
                await self.status.set_message(workload, check_name, "")
            return
        told = [
            str(e) if isinstance(e, WorkerWriteFailed) else f'worker "{c}": {e}' for c, e in sorted(failures.items())
        ]
        message = DISPATCH_PROBLEM + "; ".join(told)
        if await self.status.set_message(workload, check_name, message):
            await self.status.event(workload, "Warning", message)
            await self.status.object_event(adapter, obj, "Warning", message, reason="DispatchFailed")
        _raise_first(failures)

    async def collect_garbage(self) -> None:
        """Worker objects and Workload copies of this origin whose manager Workload is gone (``workload_copies``)."""
        await workload_copies.collect_garbage(self.connections(), self.workloads, self.adapters)

    # ------------------------------------------------------------------------------------- helpers

    async def _manager_resource(self, gvk: GroupVersionKind) -> Resource:
        """The kind's resource on the manager, discovered on first use (its CRD may arrive after start-up)."""
        if gvk not in self.manager_resources:
            try:
                self.manager_resources[gvk] = await discover_resource(self.api, gvk)
            except KindUnavailable as e:
                raise LookupError(f"{e} on the manager cluster") from None
        return self.manager_resources[gvk]

    def waiting_for_a_fit(self) -> int:
        """How many runs no nominated worker's Kueue can fit now (read from the caches: for the metrics)."""
        workers, count = self.connections(), 0
        for workload in self.workloads.items():
            found = self._our_check(workload)
            nominated = ((workload.get("status") or {}).get("nominatedClusterNames")) or []
            if found is not None and str(found[1].get("message") or "").startswith(NO_WORKER_MATCHES):
                count += 1  # its selection leaves it no worker
                continue
            if found is None or not nominated:
                continue
            key = ObjectKey.of(workload)
            copies = [w.workload(key) if (w := workers.get(c)) is not None else None for c in nominated]
            count += wl.waits_for_a_fit(workload, found[1], copies)
        return count

    def _our_check(self, workload: Object) -> tuple[str, Object, list[str]] | None:
        """The first admission check on the Workload whose AdmissionCheck names this controller."""
        for name in wl.check_names(workload):
            check = self.checks.get(ObjectKey("", name))
            if check is None or (check.get("spec") or {}).get("controllerName") != self.controller_name:
                continue
            state = wl.check_state(workload, name) or {}
            params = (check.get("spec") or {}).get("parameters") or {}
            config = self.configs.get(ObjectKey("", params.get("name", "")))
            clusters = list(((config or {}).get("spec") or {}).get("clusters") or [])
            return name, state, clusters
        return None

    async def _copy(
        self, worker: Worker, adapter: GenericAdapter, obj: Object, workload: Object, want: Want
    ) -> copies.CopyOutcome:
        """The object's copy on ``worker`` brought in line (``copies.sync``), and what that found told where Kueue's
        users look: the Workload and the object. A status the manager refuses is told on the Workload and raised."""
        manager = Objects(self.api, await self._manager_resource(adapter.gvk))
        # Proof the object was there, for not making it again: its Workload copy there adopted by it (a status on
        # the manager object may come from an earlier Workload of the same name, re-created after an eviction).
        ran_there = wl.adopted_by(worker.workload(ObjectKey.of(workload)), adapter.gvk.kind, obj["metadata"]["name"])
        try:
            out = await copies.sync(worker, adapter, obj, want=want, origin=self.origin, manager=manager,
                                    mirror=self.mirror, workload_name=workload["metadata"]["name"],
                                    ran_there=ran_there, no_status_in_sync=True)  # fmt: skip
        except StatusRejected as e:
            await self.status.event(workload, "Warning", str(e))  # never dropped silently; retried with backoff
            raise
        await self._tell_copy(out, worker, adapter, workload)
        return out

    async def _tell_copy(
        self, out: copies.CopyOutcome, worker: Worker, adapter: GenericAdapter, workload: Object
    ) -> None:
        kind, obj_key = adapter.gvk.kind, ObjectKey.of(out.obj)
        match out:
            case copies.Created():
                self._count_dispatch(kind, worker.name, workload)
            case copies.Foreign(message=message):
                await self.status.event(workload, "Warning", message)
                await self.status.object_event(adapter, out.obj, "Warning", message)
            case copies.Held(first=True):  # said once per suspension, not per pass
                held_by = adapter.options.suspended.path if adapter.options.suspended is not None else "suspended"
                message = (f"status from worker {worker.name} is held back while this {kind} is suspended "
                           f"({held_by}); it is mirrored once that no longer holds")  # fmt: skip
                await self.status.object_event(adapter, out.obj, "Normal", message)
        if isinstance(out, copies.Adopted):
            message = f"{kind} {obj_key} on worker {worker.name} adopted (it carries this manager's origin and UID)"
            await self.status.event(workload, "Normal", message)
        if not isinstance(out, copies.InSync):
            return
        if out.pruned:
            message = pruned_message(kind, obj_key, worker.name, list(out.pruned))
            await self.status.object_event(adapter, out.obj, "Warning", message, reason="StatusFieldsPruned")
        seen = worker.last_change(kind, obj_key)
        if out.written and self.metrics is not None and seen is not None:
            self.metrics.status_sync_lag.labels(kind, worker.name).observe(time.monotonic() - seen)

    def _count_dispatch(self, kind: str, worker: str, workload: Object) -> None:
        if self.metrics is None:
            return
        self.metrics.objects_dispatched.labels(kind, worker).inc()
        reserved = wl.condition(workload, wl.QUOTA_RESERVED) or {}
        if since := copies.seconds_since(reserved.get("lastTransitionTime")):
            self.metrics.dispatch_latency.labels(kind, worker).observe(since)

    async def _remove_from_worker(
        self, cluster: str, adapter: GenericAdapter, obj_key: ObjectKey, key: ObjectKey
    ) -> None:
        worker = self.connections().get(cluster)
        if worker is not None:
            await workload_copies.remove(worker, adapter.gvk, obj_key, key)

    async def _remove_workload_copy(self, cluster: str, key: ObjectKey) -> None:
        worker = self.connections().get(cluster)
        if worker is not None:
            await workload_copies.remove_workload(worker, key)


def _stuck(
    connected: dict[str, Worker], adapter: GenericAdapter, obj_key: ObjectKey, run: copies.Run, timeout: float
) -> dict[str, str]:
    """The workers holding an earlier run's copy of the object's name that a finalizer has kept for longer than
    ``timeout``, each with why: the run cannot be created there."""
    stuck = {}
    for cluster, worker in connected.items():
        cached = worker.copy(adapter.gvk, obj_key)
        if cached is not None and not run.made(cached) and copies.going_for(cached) > timeout:
            stuck[cluster] = f"holds an earlier run's copy of {adapter.gvk.kind} {obj_key} that a finalizer keeps"
    return stuck


def _ran_there(workload: Object, adapter: GenericAdapter, obj: Object, present: dict[str, Object]) -> bool:
    """Whether the run's object is known to have been on its recorded worker: that worker's Workload copy was
    adopted by it, or its status was mirrored to the manager object while the Workload was never evicted (so that
    status came from that worker). Such a run missing there was deleted there: it is never created again."""
    recorded = (workload.get("status") or {}).get("clusterName")
    if not recorded:
        return False
    if wl.adopted_by(present.get(recorded), adapter.gvk.kind, obj["metadata"]["name"]):
        return True
    return copies.has_mirrored_status(obj) and not wl.evicted_before(workload)


def _named(key: ObjectKey) -> tuple[str, str]:
    return key.namespace, key.name


def _raise_first(failures: dict[str, BaseException]) -> None:
    """Retry the pass (with the key's backoff) if a write failed; every write was tried first."""
    for _, error in sorted(failures.items()):
        raise error


def _annotation(obj: Object, name: str) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(name) or None
