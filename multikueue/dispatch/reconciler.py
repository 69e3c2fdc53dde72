"""The manager-Workload reconciler: Kueue's MultiKueue state machine for this controller's check.

Level-triggered: each pass reads the manager Workload (or its last state when deleted), the worker copies from
the connections' caches, decides the one step that applies, in Kueue's order (``decision``, pure), and carries it
out. Before a winner: nominations (``nominations``). Once a worker is recorded, the run's lifecycle there is the one
both modes share (``runs``, ``run_lifecycle``), recorded on the Workload's check (``check_record``). Remote objects
without this manager's origin label are never touched.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import structlog

from multikueue.clusters import inventory
from multikueue.clusters.inventory_config import Inventory
from multikueue.clusters.signals import WorkerSignals
from multikueue.clusters.worker import Worker
from multikueue.config import Configuration
from multikueue.dispatch import decision, run_lifecycle, workload_copies
from multikueue.dispatch import workload_state as wl
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.check_record import CheckRecord
from multikueue.dispatch.check_status import CheckStatus
from multikueue.dispatch.memory import RunMemory
from multikueue.dispatch.mirror import StatusMirror
from multikueue.dispatch.news import WorkerNews
from multikueue.dispatch.nominations import Nominations
from multikueue.dispatch.placement import NO_WORKER_MATCHES
from multikueue.dispatch.run_lifecycle import RunView
from multikueue.dispatch.runs import RunOn, Runs
from multikueue.dispatch.snapshot import Snapshots
from multikueue.dispatch.writes import WorkerWrites, Write, raise_first
from multikueue.kube.addresses import GroupVersionKind, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.discovery import KindUnavailable, discover_resource
from multikueue.kube.resources import Objects
from multikueue.labels import ATTEMPT_ANNOTATION, prebuilt_workload_of
from multikueue.metrics import Metrics
from multikueue.owners import BY_OWNER_UID
from multikueue.runtime.again import Again
from multikueue.runtime.controller import Result
from multikueue.runtime.informer import DELETED, Informer, ObjectKey
from multikueue.runtime.signal import Signal
from multikueue.runtime.watches import Change, KindChange, Watch
from multikueue.selectors import Selector

log = structlog.get_logger(__name__)
Object = dict[str, Any]
REPLACED = "Remote workload spec changed, resetting for re-admission"


class _Pass:
    """One pass over one Workload: what carrying out its step needs besides the step itself."""

    def __init__(self, workload: Object, check: str, adapter: GenericAdapter, obj: Object,
                 connected: dict[str, Worker], late: dict[str, BaseException]) -> None:  # fmt: skip
        self.workload = workload
        self.check = check
        self.adapter = adapter
        self.obj = obj
        self.connected = connected
        self.late = late  # writes of earlier passes that failed in the background (told by nominations)
        self.key = ObjectKey.of(workload)
        self.obj_key = ObjectKey.of(obj)

    @property
    def state(self) -> Object:
        return wl.check_state(self.workload, self.check) or {}


def _this_admissions(workload: str, attempt: str, worker_obj: Object) -> bool:
    """Whether a worker object is the run's of its current admission (an earlier one's is the collector's)."""
    made = prebuilt_workload_of(worker_obj) == workload
    return (
        made and bool(attempt) and (worker_obj["metadata"].get("annotations") or {}).get(ATTEMPT_ANNOTATION) == attempt
    )


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
        settled: Callable[[str], bool] = lambda _: True,
        clusters: Informer | None = None,
        lost_since: Callable[[str], float | None] | None = None,
    ) -> None:
        self.config = config
        self.clusters = clusters  # the MultiKueueClusters: their labels are what a run's worker selection reads
        self.api = api
        self.workloads = workloads
        self.checks = checks
        self.configs = configs
        self.connections = connections
        self.manager_resources = manager_resources
        # The manager's objects of each kind, when watched: the caller's dict itself, filled as kinds are served
        # (``owners or {}`` would swap an empty one for a copy that never fills: a GET per pass, not the cache).
        self.owners = owners if owners is not None else {}
        self.adapters = {
            g: GenericAdapter(g, config.dispatcher.managed_by, config.adapter(g)) for g in config.multi_kueue.gvks
        }
        self.memory: RunMemory[ObjectKey] = RunMemory()
        self.status = CheckStatus(api, workloads, config.dispatcher.controller_name, metrics,
                                  routine_records=config.dispatcher.routine_records)  # fmt: skip
        self.news = WorkerNews(self.status)
        # Writes to different workers run side by side; one that outlasts the pass finishes in the background, and
        # its Workload is looked at again.
        self.again: Again[ObjectKey] = Again("a write to a worker that outlived its pass ended: its Workload")
        self.writes = WorkerWrites(self.again.emit)
        self.mirror = StatusMirror()
        self.origin = config.multi_kueue.origin
        self.controller_name = config.dispatcher.controller_name
        # Since when a worker not connected has been so, connection dropped or never made (a MultiKueueCluster
        # deleted, a kubeconfig that cannot be used): the worker-lost clock of the runs recorded there.
        self.snapshots = Snapshots(config, self.memory, clusters, settled, lost_since or self._connection_lost_since)
        self.nominations = Nominations(self.status, self.writes, self.memory, self.origin, metrics)
        self.runs = Runs(self.origin, self._manager_objects, self.mirror, metrics)
        # Its rules for the garbage collector (``garbage``): the kinds it dispatches are those not in Direct mode.
        self.garbage = workload_copies.KueueGarbage(workloads, lambda gvk: config.adapter(gvk).mode != "Direct")
        self._parsed: tuple[Inventory | None, dict[str, Selector]] = (None, {})

    def _connection_lost_since(self, cluster: str) -> float | None:
        worker = self.connections().get(cluster)
        return worker.lost_since if worker is not None else None

    def remember_deleted(self, obj: Object) -> None:
        self.memory.deleted[ObjectKey.of(obj)] = obj

    def watches(self, kinds: Signal[KindChange], workers: WorkerSignals) -> list[Watch[ObjectKey]]:
        """What brings a manager Workload to this controller (``kinds``: the configured kinds' manager objects)."""
        batch = lambda: self.config.dispatcher.events_batch_period  # noqa: E731 - read at each event (a reload)
        return [
            Watch("manager Workloads", self.workloads, lambda c: [ObjectKey.of(c.obj)], record=self._record),
            self.again.watch(),
            Watch("its owner object changing (a cancel to carry over)", kinds, self._owned_workloads),
            Watch("MultiKueueConfigs (their clusters): every Workload", self.configs, lambda _: self._every(),
                  low=True),
            Watch("worker Workload copies and objects, batched over eventsBatchPeriod", workers.workload,
                  lambda e: [e[1]], delay=batch),
            Watch("a worker, or a kind on it, coming or going: every Workload", workers.changed,
                  lambda _: self._every(), low=True),
            *([Watch("MultiKueueClusters (their labels): the waiting Workloads that select workers, and every one "
                     "not yet on a worker while lists are kept by selector", self.clusters, self._selecting,
                     low=True)] if self.clusters is not None else []),
        ]  # fmt: skip

    def _record(self, change: Change) -> None:
        if change.type == DELETED:
            self.remember_deleted(change.obj)

    def _owned_workloads(self, event: KindChange) -> list[ObjectKey]:
        if self.config.adapter(event.gvk).mode == "Direct":
            return []
        return self.workloads.by_index(BY_OWNER_UID, event.change.obj["metadata"].get("uid", ""))

    def _selecting(self, change: Change) -> list[ObjectKey]:
        """The Workloads a MultiKueueCluster's labels may concern: those waiting with a worker selector, and, when
        the cluster is in a list kept by selector, every one not recorded on a worker (a deselected cluster keeps
        none of their copies: ``_open_to``)."""
        name = change.obj["metadata"]["name"]
        lists = (self.configs.get(ObjectKey("", c)) for c in self._selectors())
        if not any(name in (((c or {}).get("spec") or {}).get("clusters") or ()) for c in lists):
            return list(self.memory.waiting)
        unrecorded = (w for w in self.workloads.items() if not (w.get("status") or {}).get("clusterName"))
        return list({*self.memory.waiting, *(ObjectKey.of(w) for w in unrecorded)})

    def _every(self) -> list[ObjectKey]:
        return [ObjectKey.of(workload) for workload in self.workloads.items()]

    # ----------------------------------------------------------------------------------------- entry

    async def reconcile(self, key: ObjectKey) -> Result:
        workload = self.workloads.get(key)
        deleted = workload is None or bool(workload["metadata"].get("deletionTimestamp"))
        workload = workload or self.memory.deleted.get(key)
        found = self._our_check(workload) if workload is not None else None
        if workload is None or found is None or found[1].get("state") == wl.REJECTED:
            if deleted:  # never dispatched here (or given up): only what is kept per Workload key goes
                self._forget(key)
            return Result()
        check_name, _, clusters = found
        found_adapter = await self._adapter_for(workload, check_name, deleted)
        if found_adapter is None:
            return Result()
        adapter, owner_name = found_adapter
        obj_key = ObjectKey(key.namespace, owner_name)
        workers = self.connections()
        holders = tuple(c for c, w in workers.items() if w.connected and w.workload(key) is not None)
        if deleted:  # its copies go everywhere (a worker that left its list included), then what was kept about it
            connected = {c: w for c in (*clusters, *holders) if (w := workers.get(c)) is not None and w.connected}
            await self._remove_everywhere(connected, adapter, obj_key, key)
            self.mirror.forget(adapter.gvk, obj_key)
            self._forget(key, workers.values())
            return Result()
        return await self._live(workload, check_name, adapter, obj_key, clusters, workers, holders)

    async def _live(self, workload: Object, check: str, adapter: GenericAdapter, obj_key: ObjectKey,
                    clusters: list[str], workers: dict[str, Worker], holders: tuple[str, ...]) -> Result:  # fmt: skip
        """A Workload not deleted: its copies outside its workers go, then the pass."""
        key = ObjectKey.of(workload)
        holding = self._holding(workload, adapter, obj_key, holders, workers)
        recorded = str((workload.get("status") or {}).get("clusterName") or "")
        read, gone = decision.reading(tuple(clusters), recorded, holders, holding)
        clusters = list(read)
        strays = await self._remove_strays(key, adapter, obj_key, gone, workers)
        connected = {c: w for c in clusters if (w := workers.get(c)) is not None and w.connected}
        result = await self._pass(workload, check, adapter, obj_key, clusters, connected)
        raise_first(strays)
        return result

    @staticmethod
    def _holding(workload: Object, adapter: GenericAdapter, obj_key: ObjectKey, holders: tuple[str, ...],
                 workers: dict[str, Worker]) -> dict[str, bool | None]:  # fmt: skip
        """Whether each worker (of ``holders``) holds the run's object of its current admission (None: its cache of
        the kind has not listed yet)."""
        made_for = functools.partial(_this_admissions, ObjectKey.of(workload).name, wl.attempt(workload))
        return {c: workers[c].holds(adapter.gvk, obj_key, made_for) for c in holders}

    async def _remove_strays(self, key: ObjectKey, adapter: GenericAdapter, obj_key: ObjectKey, gone: tuple[str, ...],
                             workers: dict[str, Worker]) -> dict[str, BaseException]:  # fmt: skip
        """The run's copies on connected workers outside its workers (``decision.strays``) go, side by side with the
        pass (a slow worker finishes in the background); the failures, raised once the pass is done."""
        if not gone:
            return {}
        log.info("workload copies outside the run's workers removed", workload=str(key), clusters=list(gone))
        return await self.writes.each(
            key, {c: functools.partial(workload_copies.remove, workers[c], adapter.gvk, obj_key, key) for c in gone}
        )

    async def _pass(self, workload: Object, check: str, adapter: GenericAdapter, obj_key: ObjectKey,
                    clusters: list[str], connected: dict[str, Worker]) -> Result:  # fmt: skip
        """Decide (``decision.decide``, pure), then carry the step out."""
        obj = await self._object(workload, check, adapter, obj_key)
        if obj is None:
            return Result()  # not managed by Kueue: rejected
        key = ObjectKey.of(workload)
        present = {c: r for c, w in connected.items() if (r := w.workload(key)) is not None}
        if adapter.options.worker_events and not wl.is_true(workload, wl.FINISHED):
            await self.news.surface(workload, adapter, obj, connected, present)
        group = self.snapshots.group(workload, check, adapter, obj, clusters, connected, present)
        late = self.writes.take_failures(key)  # writes of earlier passes that failed in the background
        return await self._carry_out(decision.decide(group), _Pass(workload, check, adapter, obj, connected, late))

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
            obj = await (await self._manager_objects(adapter.gvk)).get(obj_key.name, obj_key.namespace)
        if obj is None:
            raise LookupError(f"owner {adapter.gvk.kind} {obj_key} not found")
        made_for = wl.owner_uid(workload)
        if made_for and obj["metadata"].get("uid") != made_for:  # deleted and made again: another job's Workload
            raise LookupError(f"owner {adapter.gvk.kind} {obj_key} (UID {made_for}) not found: the one of that name "
                              f"is another ({obj['metadata'].get('uid')})")  # fmt: skip
        managed, reason = adapter.is_managed(obj)
        if not managed:
            await self.status.set_check(
                workload, check_name, wl.REJECTED, f"The owner is not managed by Kueue: {reason}"
            )
            return None
        return obj

    def _forget(self, key: ObjectKey, workers: Any = ()) -> None:
        """A Workload gone (its copies removed, or never dispatched here): drop what was kept about it."""
        self.memory.forget(key)
        self.news.forget(key)
        for worker in workers:
            worker.forget(key)

    # ------------------------------------------------------------------------------------ the steps

    async def _carry_out(self, step: decision.Step, work: _Pass) -> Result:
        match step:
            case run_lifecycle.Wait(requeue_after=after):
                return Result(requeue_after=after)
            case decision.RemoveEverywhere(requeue_after=after, keep_objects=keep):
                self.memory.rounds.pop(work.key, None)
                await self._remove_everywhere(work.connected, work.adapter, work.obj_key, work.key, keep_objects=keep)
                return Result(requeue_after=after)
            case decision.ResetOutOfSync() | decision.ResetEvicted() | decision.RetryAdmission():
                await self._reset(step, work)
            case decision.CarryPriority(cluster=cluster) | decision.ReplaceCopy(cluster=cluster):
                await self._bring_copy_in_line(cluster, work, priority_only=isinstance(step, decision.CarryPriority))
            case decision.RunOnWinner() | decision.FinishedOnWorker() | decision.KeepEvicted():
                return await self._on_winner(step, work)
            case run_lifecycle.AwaitWorker() | run_lifecycle.Leave() | run_lifecycle.LostThere():
                # The recorded worker unreachable, or the run deleted there: the lifecycle both modes share.
                return await self.runs.carry_out(step, self._run_on(work, work.workload, None),
                                                 self._check_record(work))  # fmt: skip
            case decision.Nominate():
                remove = functools.partial(self._remove_from, work)
                return await self.nominations.nominate(step, self._check_record(work), work.connected, remove,
                                                       work.late)  # fmt: skip
            case decision.GiveUp():
                await self.nominations.give_up(step, self._check_record(work))
        return Result()

    async def _reset(self, step: decision.ResetOutOfSync | decision.ResetEvicted | decision.RetryAdmission,
                     work: _Pass) -> None:  # fmt: skip
        """The check back to Retry, in Kueue's words: Kueue evicts the Workload and admits it again."""
        match step:
            case decision.ResetOutOfSync(message=message):
                await self.status.set_check(work.workload, work.check, wl.RETRY, message)
                await self.status.event(work.workload, "Warning", f'{message}, Previously: "{work.state.get("state")}"')
            case decision.ResetEvicted(message=message):
                # Kueue writes this one directly rather than through updateACS, hence ". Previously".
                await self.status.set_check(work.workload, work.check, wl.RETRY, message, separator=". ")
                await self.status.event(work.workload, "Normal", f'{message}. Previously: "Ready"')
            case decision.RetryAdmission(message=message):
                await self.status.set_check(work.workload, work.check, wl.RETRY, message)

    async def _on_winner(self, step: decision.RunOnWinner | decision.FinishedOnWorker | decision.KeepEvicted,
                         work: _Pass) -> Result:  # fmt: skip
        """A worker is recorded (or wins now): the run there, through the lifecycle both modes share."""
        match step:
            case decision.FinishedOnWorker(cluster=cluster, reason=reason, message=message):
                return await self._drive(work, work.workload, cluster, verdict=(reason, message))
            case decision.KeepEvicted(cluster=cluster):  # mirrored only: nothing is started for a run being evicted
                return await self._drive(work, work.workload, cluster, observe_only=True)
            case decision.RunOnWinner():
                return await self._run_on_winner(step, work)

    def _check_record(self, work: _Pass, workload: Object | None = None) -> CheckRecord:
        return CheckRecord(self.status, workload or work.workload, work.check, work.adapter, work.obj)

    def _run_on(self, work: _Pass, workload: Object, winner: str | None, verdict: tuple[str, str] | None = None,
                observe_only: bool = False) -> RunOn:  # fmt: skip
        """The run on its recorded worker (``winner``; None: the one recorded, not connected), as the lifecycle
        reads it."""
        recorded = winner or str((workload.get("status") or {}).get("clusterName") or "")
        state = wl.check_state(workload, work.check) or {}
        # Created only where recorded, and not while the check is reset (Kueue is about to evict).
        ready = state.get("state") == wl.READY and (workload.get("status") or {}).get("clusterName") == recorded
        ready = ready and not observe_only
        worker = work.connected.get(recorded)
        # Proof the object was there, for not making it again: its Workload copy there adopted by it (a status on
        # the manager object may come from an earlier Workload of the same name, re-created after an eviction).
        copy = worker.workload(work.key) if worker is not None else None
        timeout = self.config.multi_kueue.worker_lost_timeout
        view = RunView(worker=recorded, lost_timeout=timeout, creates=ready, verdict=verdict, recheck=timeout,
                       earlier_attempts=wl.evicted_before(workload),
                       ran_there=wl.adopted_by(copy, work.adapter.gvk.kind, work.obj_key.name))  # fmt: skip
        reserved = wl.condition(workload, wl.QUOTA_RESERVED) or {}
        return RunOn(work.adapter, work.obj, worker, view, workload_name=work.key.name, attempt=wl.attempt(workload),
                     waiting_since=reserved.get("lastTransitionTime"))  # fmt: skip

    async def _drive(self, work: _Pass, workload: Object, winner: str, verdict: tuple[str, str] | None = None,
                     observe_only: bool = False) -> Result:  # fmt: skip
        return await self.runs.drive(self._run_on(work, workload, winner, verdict, observe_only),
                                     self._check_record(work, workload))  # fmt: skip

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
                await self._remove_from(work, cluster)
                return
            # The run's own copies, removed by this dispatcher: said on the check first (still Ready, so a delete
            # that fails leaves the run waiting for its worker), then removed, then reset for re-admission (as Kueue
            # does once they are gone). Their absence is never read as a deletion by someone else.
            await self.status.set_message(work.workload, work.check, decision.REPLACING)
            await self._remove_from(work, cluster)
            workload = self.workloads.get(work.key) or work.workload  # as the message write left it
            await self.status.set_check(workload, work.check, wl.RETRY, REPLACED)

    async def _run_on_winner(self, step: decision.RunOnWinner, work: _Pass) -> Result:
        """The losers' copies go; the winner is recorded, then runs the object (the lifecycle both modes share)."""
        winner, workload = step.winner, work.workload
        removals = await self.writes.each(
            work.key, {c: functools.partial(self._remove_from, work, c) for c in step.losers}
        )
        if step.deactivate:
            await workload_copies.deactivate(work.connected[winner], work.connected[winner].workload(work.key) or {},
                                             workload)  # fmt: skip
            raise_first(removals)
            return Result()
        if work.state.get("state") not in (wl.RETRY, wl.REJECTED):
            # Decide, record, create: once the winner is on the Workload, a create whose answer is lost or a replica
            # that takes over finds it there and waits for that worker (workerLostTimeout), never sending the run
            # elsewhere while it may already be there.
            workload = await self.status.set_admitted(workload, work.check, work.state, winner)
        result = await self._drive(work, workload, winner)
        raise_first(removals)
        return result

    async def _remove_everywhere(
        self, connected: dict[str, Worker], adapter: GenericAdapter, obj_key: ObjectKey, key: ObjectKey,
        *, keep_objects: bool = False,
    ) -> None:  # fmt: skip
        """Remove the copies from every connected worker at once; a failure is retried (after all were tried). With
        ``keep_objects`` (a finished run within its retention) only the Workload copies go."""
        writes: dict[str, Write] = {
            c: functools.partial(workload_copies.remove_workload, w, key) if keep_objects
            else functools.partial(workload_copies.remove, w, adapter.gvk, obj_key, key)
            for c, w in connected.items()
        }  # fmt: skip
        raise_first(await self.writes.each(key, writes))

    async def _remove_from(self, work: _Pass, cluster: str) -> None:
        worker = self.connections().get(cluster)
        if worker is not None:
            await workload_copies.remove(worker, work.adapter.gvk, work.obj_key, work.key)

    # ------------------------------------------------------------------------------------- helpers

    async def _manager_objects(self, gvk: GroupVersionKind) -> Objects:
        """The kind's objects on the manager, its resource discovered on first use (its CRD may arrive after
        start-up)."""
        if gvk not in self.manager_resources:
            try:
                self.manager_resources[gvk] = await discover_resource(self.api, gvk)
            except KindUnavailable as e:
                raise LookupError(f"{e} on the manager cluster") from None
        return Objects(self.api, self.manager_resources[gvk])

    def waiting_for_a_fit(self) -> int:
        """How many runs no nominated worker's Kueue can fit now (read from the caches: for the metrics)."""
        workers, count = self.connections(), 0
        for workload in self.workloads.items():
            found = self._our_check(workload)
            nominated = ((workload.get("status") or {}).get("nominatedClusterNames")) or []
            if found is not None and str(found[1].get("message") or "").startswith(
                (NO_WORKER_MATCHES, decision.NONE_OPEN)
            ):
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
            listed = tuple(((config or {}).get("spec") or {}).get("clusters") or ())
            recorded = str((workload.get("status") or {}).get("clusterName") or "")
            open_ = self._open_to(config, listed, recorded)
            return name, state, list(decision.run_workers(listed, open_, recorded))
        return None

    def _open_to(self, config: Object | None, listed: tuple[str, ...], recorded: str) -> tuple[str, ...] | None:
        """A selector-kept list's clusters (``dispatcher.inventory.multiKueueConfigs``) but those it holds only for
        their runs or that its selector no longer matches (``inventory.open_to_new_runs``: a hand-written one keeps
        its last list while its selector matches none, Kueue needing one, and takes no new run meanwhile); None (the
        list as it is) for any other list."""
        matches = self._selectors().get(str(((config or {}).get("metadata") or {}).get("name") or ""))
        if matches is None or self.clusters is None:
            return None
        cached = self.clusters.get
        return tuple(inventory.open_to_new_runs(listed, lambda n: cached(ObjectKey("", n)), matches, recorded))

    def _selectors(self) -> dict[str, Selector]:
        """The selector of each MultiKueueConfig kept by selector, parsed once per configuration (a reload makes a
        new one)."""
        kept = self.config.dispatcher.inventory
        if self._parsed[0] is not kept:
            configs = kept.multi_kueue_configs if kept is not None else ()
            self._parsed = (kept, {c.name: inventory.selector(c.cluster_selector) for c in configs})
        return self._parsed[1]
