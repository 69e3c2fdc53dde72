"""Kueue mode's record of a run's lifecycle: the Workload's admission check (its state and message, as Kueue writes
them), ``Finished`` on the Workload, and Events on the Workload and its object (``runs.Record``)."""

from __future__ import annotations

from typing import Any

import structlog

from multikueue.dispatch import run_lifecycle
from multikueue.dispatch import workload_state as wl
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.check_status import CheckStatus, admitted_message
from multikueue.runtime.informer import ObjectKey

log = structlog.get_logger(__name__)
Object = dict[str, Any]
DISPATCH_PROBLEM = "Cannot dispatch: "
"""How a Pending check's message starts while a worker refuses (or does not answer) a write; cleared once none does."""
ADMITTING_LOST = "Admitting remote lost"  # Kueue's words


def worker_said(worker: str, what: object) -> str:
    """What went wrong on a worker, naming it once (a ``WorkerWriteFailed`` already starts with it)."""
    said = str(what)
    return said if said.startswith(f'worker "{worker}"') else f'worker "{worker}": {said}'


class CheckRecord:
    """One pass's record of one Workload's run (the Workload as the pass read it, kept current with its writes)."""

    def __init__(self, status: CheckStatus, workload: Object, check: str, adapter: GenericAdapter, obj: Object) -> None:
        self.status = status
        self.workload = workload
        self.check = check
        self.adapter = adapter
        self.obj = obj

    @property
    def state(self) -> Object:
        return wl.check_state(self.workload, self.check) or {}

    def _written(self) -> None:
        """Our own write is in the informer at once: the next write carries its resourceVersion."""
        self.workload = self.status.workloads.get(ObjectKey.of(self.workload)) or self.workload

    def seen(self, obj: Object) -> None:
        self.obj = obj

    async def tell(self, type_: str, reason: str, message: str) -> None:
        await self.status.event(self.workload, type_, message)
        await self.status.object_event(self.adapter, self.obj, type_, message, reason=reason)

    async def say(self, message: str, reason: str) -> bool:
        """The check's message (its state unchanged) and, when it changes, Warning Events on the Workload and the
        object; whether it changed."""
        if not await self.status.set_message(self.workload, self.check, message):
            return False
        self._written()
        await self.tell("Warning", reason, message)
        return True

    async def running(self, worker: str) -> None:
        if self.state.get("state") == wl.READY and self.state.get("message") != admitted_message(worker):
            await self.status.set_message(self.workload, self.check, admitted_message(worker))  # a problem is over
            self._written()

    async def held(self, worker: str, over_there: bool) -> None:
        # Over on the worker while the manager object is still held: its final status can only be mirrored once the
        # hold ends, so nothing is finished or deleted before. Admission is what ends the hold.
        if over_there and self.state.get("state") not in (wl.READY, wl.RETRY, wl.REJECTED):
            self.workload = await self.status.set_admitted(self.workload, self.check, self.state, worker)

    async def finished(self, worker: str, reason: str, message: str) -> None:
        await self.status.finish(self.workload, reason, message)
        self._written()

    async def lost_there(self, worker: str, message: str) -> None:
        await self.status.finish(self.workload, "Failed", message)
        self._written()
        await self.tell("Warning", "FinalStatusLost", message)

    async def leave(self, worker: str, step: run_lifecycle.Leave) -> None:
        """Reset for re-admission (Kueue then evicts and admits the run again, elsewhere or there)."""
        if step.cause is run_lifecycle.Cause.LOST:
            await self.status.set_check(self.workload, self.check, wl.RETRY, ADMITTING_LOST)
            return
        message = f"{DISPATCH_PROBLEM}{step.detail}; resetting for re-admission"  # names the worker and the object
        await self.status.set_check(self.workload, self.check, wl.RETRY, message)
        self._written()
        await self.tell("Warning", "DispatchFailed", message)

    async def await_worker(self, worker: str, step: run_lifecycle.AwaitWorker) -> None:
        message = (f'The workload was admitted on "{worker}", which is unreachable: it is waited for up to '
                   f"workerLostTimeout ({step.lost_timeout:g}s) before the workload is re-admitted "
                   "elsewhere")  # fmt: skip
        await self.say(message, "WorkerLost")

    async def fail_lost(self, worker: str, step: run_lifecycle.FailLost) -> None:
        raise AssertionError("Kueue mode has no AtMostOnce: a lost worker's run is re-admitted (Leave)")

    async def await_stale(self, worker: str, message: str) -> None:
        await self.say(DISPATCH_PROBLEM + message, "StaleCopy")

    async def blocked(self, worker: str, message: str) -> None:
        await self.say(DISPATCH_PROBLEM + worker_said(worker, message), "DispatchFailed")
