"""Kueue mode's MultiKueue state machine as a decision: what one pass over a manager Workload does, as data.

``decide`` reads a frozen snapshot (``Group``) of everything a pass looks at (the manager Workload and this
controller's check, the copies on the connected workers, which workers are connected, lost and since when, the
dispatcher mode and the clock) and returns one ``Step``; ``WorkloadReconciler`` carries it out. The order is that
of Kueue's ``reconcileGroup``:

1. finished, or without quota: nothing may run anywhere (``RemoveEverywhere``);
2. a worker finished it: out of sync (``ResetOutOfSync``), else its final status is mirrored and the Workload
   finished (``FinishedOnWorker``);
3. a worker evicted it (``KeepEvicted`` while the manager's is evicted too, else ``ResetEvicted``). Once a worker
   is recorded, only its copy can finish or evict the run;
4. a copy whose spec no longer matches (``CarryPriority`` or ``ReplaceCopy``);
5. the first worker to admit it wins (``RunOnWinner``: recorded on the Workload before anything is created there);
   the admitting worker unreachable is the run's lifecycle, shared with Direct mode (``run_lifecycle.unreachable``:
   waited for up to ``workerLostTimeout``, then left); gone there, it resets the check (``RetryAdmission``), unless
   its object ran there and was deleted there by someone else: it is not run again (``run_lifecycle.LostThere``);
6. otherwise workers are nominated (AllAtOnce, Incremental, or an external dispatcher's) and the Workload copied
   to them (``Nominate``). Beyond Kueue, the run's worker selection (the kind's ``workerSelector`` and the
   object's ``multikueue.x-k8s.io/worker-selector``) narrows the nominations; a run it leaves no worker is told so
   on its check (``Nominate.unmatched``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from multikueue import specdigest
from multikueue.config import DISPATCHER_ALL_AT_ONCE, DISPATCHER_INCREMENTAL
from multikueue.dispatch import run_lifecycle
from multikueue.dispatch import workload_state as wl
from multikueue.dispatch.placement import NO_WORKER_MATCHES, Selection
from multikueue.dispatch.run_lifecycle import RunView
from multikueue.dispatch.run_lifecycle import Wait as Wait  # a step of both

Object = dict[str, Any]
UNEXPECTED_READY = "Admission check is Ready but no admitting cluster is recorded; this is unexpected, please report it"
REPLACING = "Remote workload spec changed, replacing it"
"""The check's message (still Ready) while this dispatcher removes the recorded worker's out-of-date copies: their
absence is then its own doing, never read as a deletion by someone else."""


@dataclass(frozen=True)
class Group:
    """What one pass knows about a manager Workload. Times are seconds on one monotonic clock."""

    workload: Object  # the manager Workload
    check: str  # this controller's admission check on it
    clusters: tuple[str, ...]  # the check's workers, in MultiKueueConfig order
    connected: tuple[str, ...]  # those connected now, in the same order
    worker_copies: Mapping[str, Object]  # the copy on each connected worker that has one
    serving: Mapping[str, bool | None] = field(default_factory=dict)  # worker serves the kind (None: unknown yet)
    kind: str = ""  # the run's kind as configured (``Kind.version.group``): named when a worker lacks it
    # Whether each connected worker holds the run's object copy (None: its cache has not listed the kind yet).
    holding: Mapping[str, bool | None] = field(default_factory=dict)
    # The check's workers not connected whose first connection attempt in this process has not ended: they may
    # hold the run (a replica that took over connects to them one by one).
    settling: tuple[str, ...] = ()
    lost_since: Mapping[str, float | None] = field(default_factory=dict)  # when each unconnected worker dropped
    now: float = 0.0
    lost_timeout: float = 900.0
    dispatcher: str = DISPATCHER_ALL_AT_ONCE
    round_started: float | None = None  # Incremental: when this Workload's current round began
    round_length: float = 300.0
    step_size: int = 3
    retained_for: float = 0.0  # finished: how much longer the kind's retention keeps the run's object on its worker
    selection: Selection = field(default_factory=Selection)  # the workers the run may not be nominated to
    inadmissible_timeout: float | None = None  # give up on a run no worker's Kueue can ever admit (None: never)
    inadmissible_since: float | None = None  # since when every worker's Kueue has said so (this process's clock)
    ran_there: bool = False  # the run's object is known to have been on the recorded worker (its status mirrored)

    @property
    def state(self) -> Object:
        return wl.check_state(self.workload, self.check) or {}

    @property
    def status(self) -> Object:
        return self.workload.get("status") or {}

    @property
    def unavailable(self) -> tuple[str, ...]:
        return tuple(c for c in self.clusters if c not in self.connected)


@dataclass(frozen=True)
class RemoveEverywhere:
    requeue_after: float | None = None
    keep_objects: bool = False  # finished, within the kind's retention: only the Workload copies go


@dataclass(frozen=True)
class ResetOutOfSync:
    cluster: str

    @property
    def message(self) -> str:
        return (f'Remote workload on worker cluster "{self.cluster}" is out of sync with its user job, '
                "resetting for re-dispatch")  # fmt: skip


@dataclass(frozen=True)
class FinishedOnWorker:
    cluster: str
    reason: str
    message: str


@dataclass(frozen=True)
class KeepEvicted:
    """Evicted on the manager too: the worker's object is kept in step (its status mirrored)."""

    cluster: str


@dataclass(frozen=True)
class ResetEvicted:
    where: str  # the manager's recorded cluster

    @property
    def message(self) -> str:
        return f'Workload evicted on worker cluster: "{self.where}", resetting for re-admission'


@dataclass(frozen=True)
class CarryPriority:
    cluster: str


@dataclass(frozen=True)
class ReplaceCopy:
    cluster: str


@dataclass(frozen=True)
class RetryAdmission:
    message: str


def lost_on_worker(cluster: str) -> run_lifecycle.LostThere:
    """The run's object ran on the recorded worker, and it and its Workload copy are gone there (deleted by someone
    else: a pruner, a TTL, a user) before the final status reached the manager: it is not run again."""
    return run_lifecycle.LostThere(
        f'The workload\'s object and its Workload copy on "{cluster}" were deleted there (not by this dispatcher) '
        "before the final status reached the manager: it is not run again, and the status shown is the last one "
        "mirrored"
    )


@dataclass(frozen=True)
class RunOnWinner:
    winner: str
    losers: tuple[str, ...]  # connected workers holding a copy that lost the race
    deactivate: bool  # the manager's Workload is evicted: the winner's copy is deactivated, nothing else


@dataclass(frozen=True)
class Nominate:
    nominated: tuple[str, ...]
    patch: bool  # write ``nominated`` to the Workload's status
    copy_to: tuple[str, ...]
    remove_from: tuple[str, ...]
    missing: tuple[str, ...]  # nominated but not connected: retried
    requeue_after: float | None = None
    round_started: float | None = None  # Incremental: a new round began at this time
    unmatched: str | None = None  # the selection leaves the run no worker: the check's message says so
    inadmissible: bool = False  # every worker the run may go to says it can never admit it: the clock runs
    left_out: str | None = None  # connected workers not nominated because they lack the kind: the message says so


@dataclass(frozen=True)
class GiveUp:
    """Every worker the run may go to has said for ``inadmissibleTimeout`` that its Kueue can never admit it: the
    check is Rejected with each worker's reason, so Kueue releases the manager's quota."""

    reasons: Mapping[str, str]  # worker -> its Kueue's reason

    @property
    def message(self) -> str:
        told = "; ".join(f'worker "{w}": {why}' for w, why in sorted(self.reasons.items()))
        return f"No worker's Kueue can admit the workload: {told}"


Step = (
    RemoveEverywhere | ResetOutOfSync | FinishedOnWorker | KeepEvicted | ResetEvicted | CarryPriority | ReplaceCopy
    | RetryAdmission | RunOnWinner | Nominate | GiveUp | run_lifecycle.Unreachable | run_lifecycle.LostThere
)  # fmt: skip


def decide(group: Group) -> Step:
    """The one step this pass takes, in Kueue's order (see the module's docstring)."""
    workload = group.workload
    if wl.is_true(workload, wl.FINISHED) and group.retained_for > 0:
        return RemoveEverywhere(group.retained_for, keep_objects=True)
    if wl.is_true(workload, wl.FINISHED) or not wl.is_true(workload, wl.QUOTA_RESERVED):
        return RemoveEverywhere(group.lost_timeout if group.unavailable else None)
    for rule in (_finished, _evicted, _stale_copy, _winner):
        step = rule(group)
        if step is not None:
            return step
    return _nominate(group)


def run_workers(listed: tuple[str, ...], open_: tuple[str, ...] | None, recorded: str) -> tuple[str, ...]:
    """The workers a pass reads for a run: its check's list (``open_``: those of a selector-kept list still open to
    new runs; None: the list as it is), and always the run's recorded worker, listed or not: its run goes on there to
    its end (dropped, it would read as deleted there, finished Failed while it still ran)."""
    workers = listed if open_ is None else open_
    return workers if not recorded or recorded in workers else (*workers, recorded)


def reading(workers: tuple[str, ...], recorded: str, holders: tuple[str, ...],
            holding: Mapping[str, bool | None]) -> tuple[tuple[str, ...], tuple[str, ...]]:  # fmt: skip
    """(the workers a pass reads, the strays to remove). ``holders``: the connected workers holding the run's
    Workload copy; ``holding``: whether each holds the run's object of its current admission (None: its cache of
    the kind has not listed yet). One that does is read whatever the list says: Kueue's eviction clears
    ``clusterName`` in its own write while the run may still run there, to be stopped there. One not known yet is
    neither read nor removed."""
    read = (*workers, *(c for c in holders if holding.get(c) and c not in workers))
    return read, strays(read, recorded, holders, tuple(c for c in holders if holding.get(c) is None))


def strays(workers: tuple[str, ...], recorded: str, holders: tuple[str, ...],
           holding: tuple[str, ...] = ()) -> tuple[str, ...]:  # fmt: skip
    """The workers (of ``holders``: connected, holding the run's Workload copy) whose copy no pass reads: outside the
    run's workers (``run_workers``: a cluster that left the list, by hand or by its selector) and not its recorded
    worker. Left there, that worker's Kueue admits the copy and holds its quota for a run that can never be recorded
    there; the copies go as a loser's do. Not one ``holding`` the run's object (made only once a worker is recorded:
    a record this pass has not seen yet, a stale cache), which the run's lifecycle and the collector judge."""
    return tuple(c for c in holders if c not in workers and c != recorded and c not in holding)


def _recorded_copies(group: Group) -> dict[str, Object]:
    """The copies whose state can end or evict the run: once a worker is recorded, its copy alone (a loser's copy
    being deleted, preempted or finished there, says nothing of the run on the winner)."""
    recorded = str(group.status.get("clusterName") or "")
    if not recorded:
        return dict(group.worker_copies)
    copy = group.worker_copies.get(recorded)
    return {recorded: copy} if copy is not None else {}


def _finished(group: Group) -> Step | None:
    finished = wl.earliest_true(_recorded_copies(group), wl.FINISHED)
    if finished is None:
        return None
    cluster, condition = finished
    if condition.get("reason") == wl.OUT_OF_SYNC:
        return ResetOutOfSync(cluster) if group.state.get("state") == wl.READY else Wait()
    return FinishedOnWorker(cluster, str(condition.get("reason") or ""), str(condition.get("message") or ""))


def _evicted(group: Group) -> Step | None:
    evicted = wl.earliest_true(_recorded_copies(group), wl.EVICTED)
    if evicted is None:
        return None
    if wl.is_true(group.workload, wl.EVICTED):
        return KeepEvicted(evicted[0])
    if group.state.get("state") == wl.READY:
        return ResetEvicted(str(group.status.get("clusterName") or ""))
    return None  # evicted there while the check waits: the race goes on


def _stale_copy(group: Group) -> Step | None:
    """A copy whose spec no longer matches the manager's (compared as digests: the worker caches keep no spec)."""
    if not group.worker_copies:
        return None
    spec, priority = specdigest.compared(group.workload)
    for cluster, worker_obj in group.worker_copies.items():
        worker_spec, worker_priority = specdigest.compared(worker_obj)
        if worker_spec != spec:
            return ReplaceCopy(cluster)
        if worker_priority != priority:
            return CarryPriority(cluster)
    return None


def _winner(group: Group) -> Step | None:
    if _holder_unknown(group):
        return Wait(HOLDING_UNKNOWN_RECHECK)
    winner = _the_winner(group)
    if winner is not None:
        losers = tuple(c for c in group.connected if c != winner and c in group.worker_copies)
        return RunOnWinner(winner, losers, deactivate=wl.is_true(group.workload, wl.EVICTED))
    if group.state.get("state") != wl.READY:
        return None
    admitting = str(group.status.get("clusterName") or "")
    if admitting in group.unavailable:  # it may hold the run: the shared lifecycle waits for it, then leaves it
        since = group.lost_since.get(admitting)
        return run_lifecycle.unreachable(RunView(
            worker=admitting, lost_timeout=group.lost_timeout, lost_for=group.now - since if since is not None else 0.0,
            settling=admitting in group.settling,
        ))  # fmt: skip
    if not admitting:
        return RetryAdmission(UNEXPECTED_READY)
    holding = group.holding.get(admitting, False)
    if holding is None:
        return Wait(HOLDING_UNKNOWN_RECHECK)  # its cache of the kind has not listed: the object may be there
    if group.ran_there and not holding and not str(group.state.get("message") or "").startswith(REPLACING):
        return lost_on_worker(admitting)
    return RetryAdmission("Admitting remote no longer exists")


def _the_winner(group: Group) -> str | None:
    """The worker the run belongs to. Once a cluster is recorded it is the only one: a replica that takes over
    may at first see another worker's admitted copy without the recorded one (not connected yet), and two
    workers can admit within the same second. Before that, the first worker to admit."""
    recorded = str(group.status.get("clusterName") or "")
    if recorded:
        copy = group.worker_copies.get(recorded)
        return recorded if copy is not None and wl.is_true(copy, wl.ADMITTED) else None
    # The winner is recorded before its object is created, but a replica of an earlier version (which created
    # first, as Kueue does) may have left an object unrecorded: the worker that holds it is the winner.
    admitted = _admitted(group)
    holding = {c: w for c, w in admitted.items() if group.holding.get(c)}
    # A worker the run's selection leaves out (its labels changed during the race) does not win, unless it
    # already holds the run: that copy is removed with the other nominations instead.
    # Nor does one that no longer serves the kind (its CRD removed since it was nominated): nothing can run there.
    allowed = {c: w for c, w in admitted.items() if group.selection.allows(c) and group.serving.get(c) is not False}
    found = wl.earliest_true(holding or allowed, wl.ADMITTED)
    return found[0] if found is not None else None


HOLDING_UNKNOWN_RECHECK = 1.0


def _admitted(group: Group) -> dict[str, Object]:
    return {c: w for c, w in group.worker_copies.items() if wl.is_true(w, wl.ADMITTED)}


def _holder_unknown(group: Group) -> bool:
    """No winner recorded, none of the admitting workers known to hold the run's object, and one of them not
    listed yet (a moment after connecting), or a worker of the check not tried yet (a moment after starting): it
    may hold it, so no winner is chosen until it is known."""
    if group.status.get("clusterName"):
        return False
    admitted = _admitted(group)
    holding = [group.holding.get(c, False) for c in admitted]
    if any(holding):
        return False
    return any(h is None for h in holding) or bool(admitted and group.settling)


def _nominate(group: Group) -> Step:
    if group.state.get("state") != wl.PENDING or group.status.get("clusterName"):
        return Wait()
    others = [s for s in group.status.get("admissionChecks") or [] if s.get("name") != group.check]
    if any(s.get("state") != wl.READY for s in others):
        return Wait()  # Kueue waits for every other check first (#9866)
    nominated, patch, requeue, started = _nominations(group)
    copy_to, remove_from, missing = _copies_for(group, nominated)
    unmatched = group.selection.message(group.clusters) or _selected_none_serving(group) or _none_open(group)
    reasons = _never_admitted(group, nominated)
    if reasons is not None:
        left = _inadmissible_left(group)
        if left <= 0:
            return GiveUp(reasons)
        requeue = min(requeue or math.inf, left)
    return Nominate(nominated, patch, copy_to, remove_from, missing, requeue, started, unmatched, reasons is not None,
                    left_out=_lacking_kind(group, nominated))  # fmt: skip


NONE_OPEN = "No worker takes new runs: "  # the check's message while the run's list has no cluster open to it


def _none_open(group: Group) -> str | None:
    """The run's list holds no cluster open to it (every one kept only for the runs recorded there, its selector
    matching none): said, never a silent wait."""
    if group.clusters:
        return None
    return (
        f"{NONE_OPEN}no cluster of its MultiKueueConfig is open to new runs (each listed one is kept only for "
        "the runs recorded there, or its clusterSelector matches none)"
    )


def _lacking_kind(group: Group, nominated: tuple[str, ...]) -> str | None:
    """The connected workers left out of the nominations because they do not serve the run's kind (its CRD not
    there), named: the run waits on the others, and the user reads why. (An external dispatcher's nominations are
    its own: a worker it names is never said to be left out.)"""
    lacking = [c for c in group.connected
               if group.serving.get(c) is False and group.selection.allows(c) and c not in nominated]  # fmt: skip
    if not lacking:
        return None
    return f"{LEFT_OUT}{', '.join(lacking)}: {'does' if len(lacking) == 1 else 'do'} not serve {group.kind}"


LEFT_OUT = "Not nominated: "  # the check's message while workers lacking the kind are left out


def _copies_for(group: Group, nominated: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """(workers to copy to, to remove the copy from, nominated but not connected)."""
    # Never to a worker lacking the kind (an external dispatcher may name one).
    copy_to = tuple(
        c
        for c in group.connected
        if c in nominated and c not in group.worker_copies and group.serving.get(c) is not False
    )
    # A copy on a worker not known yet to serve the kind is kept, not judged.
    known = [c for c in group.connected if group.serving.get(c) is not None]
    remove_from = tuple(c for c in known if c not in nominated and c in group.worker_copies)
    return copy_to, remove_from, tuple(c for c in nominated if c not in group.connected)


def _inadmissible_left(group: Group) -> float:
    """Seconds until a run no worker's Kueue can admit gives up (its clock starts at this pass when not started)."""
    timeout = group.inadmissible_timeout or 0.0
    waited = group.now - group.inadmissible_since if group.inadmissible_since is not None else 0.0
    return timeout - waited


def _selected_none_serving(group: Group) -> str | None:
    """The run selects workers, and every one it selects lacks the kind's CRD: said, never a silent wait."""
    if not group.selection.selectors:
        return None
    allowed = [c for c in group.clusters if group.selection.allows(c)]
    if not allowed or any(group.serving.get(c) is not False for c in allowed):
        return None
    return (f"{NO_WORKER_MATCHES} ({group.selection.selectors}): the workers it selects do not serve the kind: "
            f"{', '.join(allowed)}")  # fmt: skip


def _never_admitted(group: Group, nominated: tuple[str, ...]) -> dict[str, str] | None:
    """Each worker's reason when every worker the run may still go to (its MultiKueueConfig's, narrowed by its
    selection; none left to nominate later) holds a copy its Kueue says it can never admit; else None. A worker
    not connected, or whose cache has not shown the copy, may yet admit it. None when giving up is off."""
    if group.inadmissible_timeout is None:
        return None
    candidates = [c for c in group.clusters if group.selection.allows(c) and group.serving.get(c) is not False]
    if not candidates or any(c not in nominated for c in candidates):
        return None
    reasons = {c: wl.never_admitted(group.worker_copies.get(c)) for c in candidates}
    return {c: r for c, r in reasons.items() if r is not None} if all(reasons.values()) else None


def _nominations(group: Group) -> tuple[tuple[str, ...], bool, float | None, float | None]:
    """(nominated, whether to write them, when to look again, when a new Incremental round began)."""
    written = tuple(group.status.get("nominatedClusterNames") or ())
    # A worker that left the run's workers (its list, or a selector's) is nominated no longer.
    current = tuple(c for c in written if group.selection.allows(c) and c in group.clusters)
    if group.dispatcher == DISPATCHER_ALL_AT_ONCE:
        # A worker that lacks this kind's CRD cannot run it: it is not nominated for it (Kueue instead marks the
        # whole worker inactive, #3582).
        nominated = tuple(sorted(c for c in group.connected if group.serving.get(c) and group.selection.allows(c)))
        return nominated, tuple(sorted(written)) != nominated, None, None
    if group.dispatcher == DISPATCHER_INCREMENTAL:
        nominated, patch, requeue, started = _next_round(group, current)
        return nominated, patch or nominated != written, requeue, started
    return current, False, None, None  # an external dispatcher writes the nominations: followed, narrowed


def _next_round(group: Group, current: tuple[str, ...]) -> tuple[tuple[str, ...], bool, float | None, float | None]:
    """Kueue's incremental dispatcher: every round, nominate the next ``stepSize`` workers in config order.
    Returns (nominated, whether to write them, when to look again, when a new round began)."""
    started = group.round_started
    # A round whose nominations all left the run's workers ends at once: the run is never nominated nowhere.
    if started is not None and group.now - started <= group.round_length and current:
        return current, False, group.round_length - (group.now - started), None
    remaining = [c for c in group.clusters
                 if c not in current and group.selection.allows(c) and group.serving.get(c) is not False]  # fmt: skip
    if not remaining:
        return current, False, None, None  # Kueue reports "no more workers to nominate"; nothing left to add
    return (*current, *remaining[: group.step_size]), True, group.round_length, group.now
