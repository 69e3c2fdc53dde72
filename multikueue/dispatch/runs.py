"""A run on its recorded worker, carried out the same way in both modes.

``Runs.drive`` brings the run's copy in line there (``copies.sync``), tells what that found (Events and metrics:
one place for both modes), asks the pure lifecycle what it means (``run_lifecycle``) and carries the step out
through the mode's ``Record``: the Workload's check in Kueue mode (``check_record``), the object's placement in
Direct mode (``placement_record``).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

import structlog

from multikueue.clusters.worker import LiveObjects, Worker
from multikueue.dispatch import copies, run_lifecycle
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.mirror import StatusMirror, StatusRejected, pruned_message
from multikueue.dispatch.run_lifecycle import RunView
from multikueue.dispatch.writes import WorkerWriteFailed
from multikueue.kube.addresses import GroupVersionKind
from multikueue.labels import PLACEMENT_CONDITION
from multikueue.metrics import Metrics
from multikueue.runtime.controller import Result
from multikueue.runtime.informer import ObjectKey

log = structlog.get_logger(__name__)
Object = dict[str, Any]
OWN_CONDITIONS = frozenset({PLACEMENT_CONDITION})  # this dispatcher's own: kept on the object, never mirrored over


class Record(Protocol):
    """Where a mode records a run's lifecycle and tells its user (each names the worker and the object)."""

    def seen(self, obj: Object) -> None:
        """The manager object as the last write left it (a guarded write that follows carries its resourceVersion)."""

    async def tell(self, type_: str, reason: str, message: str) -> None:
        """Events where the run's user looks."""

    async def running(self, worker: str) -> None:
        """The run goes on there: a problem told earlier is over."""

    async def held(self, worker: str, over_there: bool) -> None: ...

    async def finished(self, worker: str, reason: str, message: str) -> None: ...

    async def lost_there(self, worker: str, message: str) -> None:
        """Deleted there before its final status came, no verdict: the run ends Failed."""

    async def leave(self, worker: str, step: run_lifecycle.Leave) -> None: ...

    async def await_worker(self, worker: str, step: run_lifecycle.AwaitWorker) -> None: ...

    async def fail_lost(self, worker: str, step: run_lifecycle.FailLost) -> None: ...

    async def await_stale(self, worker: str, message: str) -> None: ...

    async def blocked(self, worker: str, message: str) -> None:
        """A write there failed, or cannot be made now: told, retried with backoff."""


@dataclass(frozen=True)
class RunOn:
    """One run and its recorded worker, for one pass."""

    adapter: GenericAdapter
    obj: Object  # the manager object
    worker: Worker | None  # None: not known to this process (no connection)
    view: RunView
    workload_name: str = ""  # Kueue mode: its prebuilt Workload (the copy is made for it)
    attempt: str = ""  # Kueue mode: the admission it is in (``workload_state.attempt``), stamped on the copy
    waiting_since: str | None = None  # RFC 3339: when the run began to wait for dispatch (the latency metric)


class Runs:
    def __init__(
        self,
        origin: str,
        manager: Callable[[GroupVersionKind], Awaitable[LiveObjects]],
        mirror: StatusMirror,
        metrics: Metrics | None,
    ) -> None:
        self.origin = origin
        self.manager = manager  # the kind's objects on the manager cluster
        self.mirror = mirror
        self.metrics = metrics

    async def drive(self, run: RunOn, record: Record) -> Result:
        worker = run.worker
        if worker is None or not worker.connected:
            return await self.carry_out(run_lifecycle.unreachable(run.view), run, record)
        try:
            out = await self._sync(run, worker, record)
        except WorkerWriteFailed as e:  # no answer, or not a refusal: the run may be there
            await record.blocked(worker.name, str(e))
            raise
        return await self.carry_out(run_lifecycle.after_copy(run.view, out), run, record)

    async def _sync(self, run: RunOn, worker: Worker, record: Record) -> copies.CopyOutcome:
        try:
            out = await copies.sync(
                worker, run.adapter, run.obj, want=run.view.want, origin=self.origin,
                manager=await self.manager(run.adapter.gvk), mirror=self.mirror, workload_name=run.workload_name,
                attempt=run.attempt, ran_there=run.view.ran_there, keep_conditions=OWN_CONDITIONS,
                earlier_attempts=run.view.earlier_attempts,
            )  # fmt: skip
        except StatusRejected as e:
            await record.tell("Warning", "StatusRejected", str(e))  # never dropped silently; retried with backoff
            raise
        record.seen(out.obj)
        await self._tell(out, run, worker.name, record)
        return out

    async def _tell(self, out: copies.CopyOutcome, run: RunOn, worker: str, record: Record) -> None:
        """What a copy's outcome says to the user and the metrics, the same in both modes."""
        kind, key = run.adapter.gvk.kind, ObjectKey.of(run.obj)
        match out:
            case copies.Created():
                self._dispatched(kind, worker, run.waiting_since)
            case copies.Adopted():
                message = f"{kind} {key} on worker {worker} adopted (it carries this manager's origin and UID)"
                await record.tell("Normal", "Adopted", message)
            case copies.Held(first=True):  # said once per suspension, not per pass
                options = run.adapter.options
                held_by = options.suspended.path if options.suspended is not None else "suspended"
                message = (f"status from worker {worker} is held back while this {kind} is suspended ({held_by}); "
                           "it is mirrored once that no longer holds")  # fmt: skip
                await record.tell("Normal", "StatusHeld", message)
            case copies.InSync(pruned=pruned, written=written):
                if pruned:
                    await record.tell("Warning", "StatusFieldsPruned", pruned_message(kind, key, worker, list(pruned)))
                if written:
                    self._synced(kind, worker, run.worker, key)

    async def carry_out(self, step: run_lifecycle.Step, run: RunOn, record: Record) -> Result:
        worker = run.view.worker
        match step:
            case run_lifecycle.Wait(requeue_after=after):
                return Result(requeue_after=after)
            case run_lifecycle.Running(requeue_after=after):
                await record.running(worker)
                return Result(requeue_after=after)
            case run_lifecycle.LookAgain():
                return Result(requeue_after=0.0)
            case run_lifecycle.Held(over_there=over_there):
                await record.running(worker)  # reachable again, say, while the object is suspended
                await record.held(worker, over_there)
                return Result(requeue_after=run.view.recheck)
            case run_lifecycle.Finish(reason=reason, message=message):
                await self._finish(run, record, reason, message)
            case run_lifecycle.LostThere():
                await self._lost_there(step, run, record)
            case run_lifecycle.Leave():
                log.warning("run leaves its worker", cluster=worker, object=str(ObjectKey.of(run.obj)),
                            cause=step.cause.value, detail=step.detail)  # fmt: skip
                await record.leave(worker, step)
            case run_lifecycle.AwaitWorker(left=left):
                await record.await_worker(worker, step)
                return Result(requeue_after=left)
            case run_lifecycle.FailLost():
                await record.fail_lost(worker, step)
            case run_lifecycle.AwaitStale(message=message, requeue_after=after):
                await record.await_stale(worker, message)
                return Result(requeue_after=after)
            case run_lifecycle.Blocked(message=message):
                await record.blocked(worker, message)
                raise copies.OwnershipConflict(message)
            case _:
                raise AssertionError(f"unhandled step {step!r}")
        return Result()

    async def _lost_there(self, step: run_lifecycle.LostThere, run: RunOn, record: Record) -> None:
        """Ran there, deleted there: never made again. The worker's verdict, else the one the manager object's
        mirrored status gives (read live: its cache may lack what a pass just mirrored), else Failed."""
        worker = run.view.worker
        if step.verdict is not None:
            await self._finish(run, record, step.verdict[0], f"{step.verdict[1]} ({step.message})")
            await record.tell("Warning", "FinalStatusLost", step.message)
            return
        key = ObjectKey.of(run.obj)
        obj = await (await self.manager(run.adapter.gvk)).get(key.name, key.namespace) or run.obj
        done = run.adapter.finished(obj)
        if done is not None:
            await self._finish(run, record, done[0], done[1])
            return
        log.warning("run deleted on its worker before its final status came", cluster=worker, object=str(key))
        await record.lost_there(worker, step.message)
        self._finished(run.adapter.gvk.kind, worker, "Failed")

    async def _finish(self, run: RunOn, record: Record, reason: str, message: str) -> None:
        worker = run.view.worker
        await record.running(worker)  # what the run waited for there is over, whatever it was
        await record.finished(worker, reason, message)
        self._finished(run.adapter.gvk.kind, worker, reason)

    # ------------------------------------------------------------------------------------------- metrics

    def _dispatched(self, kind: str, worker: str, waiting_since: str | None) -> None:
        if self.metrics is None:
            return
        self.metrics.objects_dispatched.labels(kind, worker).inc()
        if since := copies.seconds_since(waiting_since):
            self.metrics.dispatch_latency.labels(kind, worker).observe(since)

    def _synced(self, kind: str, worker: str, connection: Worker | None, key: ObjectKey) -> None:
        seen = connection.last_change(kind, key) if connection is not None else None
        if self.metrics is not None and seen is not None:
            self.metrics.status_sync_lag.labels(kind, worker).observe(time.monotonic() - seen)

    def _finished(self, kind: str, worker: str, reason: str) -> None:
        if self.metrics is not None:
            self.metrics.objects_finished.labels(kind, worker, reason).inc()
