"""Kueue mode before a winner: the nominated workers written on the Workload, its copies made on them (and removed
from the others), the writes that fail there told on the check, a run no worker's selection leaves a worker told
so, and a run no worker's Kueue can ever admit given up (``decision.Nominate``, ``decision.GiveUp``)."""

from __future__ import annotations

import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

from multikueue.clusters.worker import Worker
from multikueue.dispatch import decision, workload_copies
from multikueue.dispatch import workload_state as wl
from multikueue.dispatch.check_record import DISPATCH_PROBLEM, CheckRecord, worker_said
from multikueue.dispatch.check_status import CheckStatus, cluster_queue
from multikueue.dispatch.memory import RunMemory
from multikueue.dispatch.placement import NO_WORKER_MATCHES
from multikueue.dispatch.writes import WorkerWrites, Write, raise_first
from multikueue.metrics import Metrics
from multikueue.runtime.controller import Result
from multikueue.runtime.informer import ObjectKey

log = structlog.get_logger(__name__)
Object = dict[str, Any]
Remove = Callable[[str], Awaitable[None]]  # removes the run's copies from that worker


class Nominations:
    def __init__(
        self, status: CheckStatus, writes: WorkerWrites[ObjectKey], memory: RunMemory[ObjectKey], origin: str,
        metrics: Metrics | None,
    ) -> None:  # fmt: skip
        self.status = status
        self.writes = writes
        self.memory = memory
        self.origin = origin
        self.metrics = metrics

    async def nominate(
        self,
        step: decision.Nominate,
        record: CheckRecord,  # the check, and where its Events go
        connected: dict[str, Worker],
        remove: Remove,
        late: dict[str, BaseException],  # writes of earlier passes that failed in the background
    ) -> Result:
        """Write the nominations, copy the Workload to the nominated workers, remove it from the others."""
        workload = record.workload
        key = ObjectKey.of(workload)
        if step.inadmissible:
            self.memory.unfit_since.setdefault(key, time.monotonic())
        else:
            self.memory.unfit_since.pop(key, None)
        if step.patch:
            await self.status.patch(workload, {"nominatedClusterNames": list(step.nominated) or None})
        if step.round_started is not None:
            self.memory.rounds[key] = step.round_started
        writes: dict[str, Write] = {}
        for cluster, worker in connected.items():
            if cluster in step.copy_to:
                writes[cluster] = functools.partial(self._copy_workload, cluster, worker, workload)
            elif cluster in step.remove_from:
                writes[cluster] = functools.partial(remove, cluster)
        failures = await self.writes.each(key, writes)
        present = {c for c, w in connected.items() if w.workload(key) is not None}
        failures.update((c, e) for c, e in late.items() if c in step.nominated and c not in present)
        if step.unmatched is not None and not failures:
            # No worker of the run's MultiKueueConfig matches its worker selection: said on the check (its state
            # stays Pending, a label may yet be added); a label change on a MultiKueueCluster brings it back.
            reason = "NoWorkerOpen" if step.unmatched.startswith(decision.NONE_OPEN) else "NoWorkerMatches"
            if await record.say(step.unmatched, reason):
                log.info("no worker matches the run's selection", workload=str(key), message=step.unmatched)
            return Result()
        if step.left_out is not None and not failures:
            await record.say(step.left_out, "WorkerLacksKind")
        else:
            await report(record, failures)
        if step.missing:
            raise ConnectionError(f"cluster {step.missing[0]}: no remote client for nominated cluster")
        return Result(requeue_after=step.requeue_after)

    async def _copy_workload(self, cluster: str, worker: Worker, workload: Object) -> None:
        """Create the Workload's copy on a worker (one already there from an earlier pass is fine)."""
        if await workload_copies.copy(worker, workload, self.origin) and self.metrics is not None:
            self.metrics.workloads_dispatched.labels(cluster_queue(workload), cluster).inc()

    async def give_up(self, step: decision.GiveUp, record: CheckRecord) -> None:
        """No worker's Kueue can ever admit the run (``inadmissibleTimeout``): the check is Rejected with each
        worker's reason (Kueue then deactivates the Workload and releases its quota), said in Events too."""
        key = ObjectKey.of(record.workload)
        log.warning("no worker's Kueue can admit the run: rejected", workload=str(key), reasons=dict(step.reasons))
        await self.status.set_check(record.workload, record.check, wl.REJECTED, step.message)
        self.memory.unfit_since.pop(key, None)  # after the write: a failed one is retried, the clock still run out
        await record.tell("Warning", "NoWorkerCanAdmit", step.message)


async def report(record: CheckRecord, failures: dict[str, BaseException]) -> None:
    """Failed writes to workers, where the user looks: the check's message (its state unchanged) and a Warning Event
    on the Workload and on the object, when the message changes; then retried with backoff (raised). With none, a
    message left from an earlier failure is cleared."""
    if not failures:
        told = (DISPATCH_PROBLEM, NO_WORKER_MATCHES, decision.LEFT_OUT, decision.NONE_OPEN)
        if str(record.state.get("message") or "").startswith(told):
            await record.status.set_message(record.workload, record.check, "")
        return
    said = "; ".join(worker_said(c, e) for c, e in sorted(failures.items()))
    await record.say(DISPATCH_PROBLEM + said, "DispatchFailed")
    raise_first(failures)
