"""``Runs.drive`` over an in-memory worker: each arrangement of the worker that makes ``copies.sync`` find each
outcome, and the worker unreachable, driven under each view the modes build (dispatch/reconciler.py ``_run_on``:
Kueue mode ready to create, being reset, told by the worker that the run ended; dispatch/direct.py ``_run_on``:
Direct mode under either lost-worker policy). Each row asserts what the pass records through ``runs.Record`` (a
double that keeps each call, in order), what it returns or raises, the metrics it counts, the copy outcome and the
lifecycle step it went through, and what the worker and the manager hold afterwards.

The branch matrix only: tests/unit/test_run_lifecycle.py tables the pure decision, test_copy_outcomes.py the copy's
outcomes; what each mode's record writes, and all of it against real API servers, is proven in tests/integration/
(test_run_identity.py, test_direct.py, test_dispatch.py, test_failures.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast, get_args, get_type_hints

import pytest

from multikueue.dispatch import copies
from multikueue.dispatch import run_lifecycle as rl
from multikueue.dispatch.copies import Want
from multikueue.dispatch.mirror import StatusMirror, StatusRejected
from multikueue.dispatch.run_lifecycle import RunView
from multikueue.dispatch.runs import Record, RunOn, Runs
from multikueue.dispatch.writes import WorkerWriteFailed
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.errors import KubeError
from multikueue.kube.resources import Objects
from multikueue.labels import ORIGIN_LABEL
from multikueue.metrics import Metrics
from multikueue.runtime.controller import Result
from tests.component.cases import (
    ADOPT,
    FINISHED,
    ORIGIN,
    PIPELINERUN,
    SPEC_SYNC,
    SUSPENDED,
    Case,
    Mode,
    ago,
    mirrored,
    status,
)
from tests.component.memory_worker import NoAnswer
from tests.component.test_copy_outcomes import (
    arrange_adopt_refused,
    arrange_adoptable,
    arrange_behind,
    arrange_failed,
    arrange_foreign,
    arrange_foreign_other_run,
    arrange_in_sync,
    arrange_no_answer,
    arrange_pruning,
    arrange_refused,
    arrange_refused_unread,
    arrange_stale,
    arrange_stale_going,
    arrange_stale_held,
    arrange_status_refused,
    arrange_succeeded,
    arrange_suspended,
    arrange_suspended_without_status,
    arrange_unlisted,
    arrange_vanished,
    arrange_with_status,
    arrange_without_status,
    check_absent,
    check_adopt_refused,
    check_adopted,
    check_behind,
    check_created,
    check_failed,
    check_found_live,
    check_gone,
    check_held,
    check_held_nothing,
    check_no_answer,
    check_no_status,
    check_pruned,
    check_refused,
    check_refused_unread,
    check_stale_deleted,
    check_stale_going,
    check_stale_held,
    check_status_refused,
    check_succeeded,
    check_unlisted,
    check_unwritten,
    check_vanished,
    check_written,
    nothing_written,
)

Object = dict[str, Any]
Arrange = Callable[[Case], None]
Check = Callable[[Case, Any], None]  # (the case, the copy outcome, the error raised, or None: nothing was read)
LOST_TIMEOUT = 60.0  # seconds (workerLostTimeout)
VERDICT = ("Succeeded", "the Workload copy on worker w1 finished")
WAITING_SINCE = 5.0  # seconds the run has waited for dispatch (dispatch_latency is observed on a create)


class RecordingRecord:
    """``runs.Record``: each call in order, as a label (``calls``: ``tell:<type>:<reason>``, ``finished:<reason>``,
    ``leave:<cause>``, ``held:over_there``, ...) and with its arguments (``args``)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        self.args: list[tuple[str, tuple[Any, ...]]] = []

    def _add(self, label: str, *args: Any) -> None:
        self.calls.append(label)
        self.args.append((label, args))

    def workers(self) -> set[str]:
        """The workers the calls that name one named."""
        return {args[0] for label, args in self.args if label != "seen" and not label.startswith("tell:")}

    def seen(self, obj: Object) -> None:
        self._add("seen", obj)

    async def tell(self, type_: str, reason: str, message: str) -> None:
        self._add(f"tell:{type_}:{reason}", message)

    async def running(self, worker: str) -> None:
        self._add("running", worker)

    async def held(self, worker: str, over_there: bool) -> None:
        self._add("held:over_there" if over_there else "held", worker)

    async def finished(self, worker: str, reason: str, message: str) -> None:
        self._add(f"finished:{reason}", worker, message)

    async def lost_there(self, worker: str, message: str) -> None:
        self._add("lost_there", worker, message)

    async def leave(self, worker: str, step: rl.Leave) -> None:
        self._add(f"leave:{step.cause.value}", worker, step)

    async def await_worker(self, worker: str, step: rl.AwaitWorker) -> None:
        self._add("await_worker", worker, step)

    async def fail_lost(self, worker: str, step: rl.FailLost) -> None:
        self._add("fail_lost", worker, step)

    async def await_stale(self, worker: str, message: str) -> None:
        self._add("await_stale", worker, message)

    async def blocked(self, worker: str, message: str) -> None:
        self._add("blocked", worker, message)


# ----------------------------------------------------------------------------------------------- the views

KUEUE, RESET, ENDED, AT_LEAST, AT_MOST, AGAIN = (
    "Kueue", "Kueue reset", "Kueue verdict", "Direct AtLeastOnce", "Direct AtMostOnce", "Kueue admitted again"
)  # fmt: skip
CREATING = (KUEUE, AT_LEAST, AT_MOST)  # the views that create the copy (Want.RUN)
DIRECT = (AT_LEAST, AT_MOST)


@dataclass(frozen=True)
class View:
    """A mode, and the view its reconciler builds of the run on its recorded worker."""

    mode: Mode
    run: RunView


VIEWS = {
    KUEUE: View(Mode("Kueue"), RunView("w1", LOST_TIMEOUT, creates=True, recheck=LOST_TIMEOUT)),
    RESET: View(Mode("Kueue"), RunView("w1", LOST_TIMEOUT, creates=False, recheck=LOST_TIMEOUT)),
    ENDED: View(Mode("Kueue"), RunView("w1", LOST_TIMEOUT, creates=True, verdict=VERDICT, recheck=LOST_TIMEOUT)),
    AT_LEAST: View(Mode("Direct"), RunView("w1", LOST_TIMEOUT)),
    AT_MOST: View(Mode("Direct"), RunView("w1", LOST_TIMEOUT, at_most_once=True)),
    # Evicted before and admitted again: an earlier attempt's copy may still be going there.
    AGAIN: View(Mode("Kueue"), RunView("w1", LOST_TIMEOUT, creates=True, recheck=LOST_TIMEOUT, earlier_attempts=True)),
}


# ----------------------------------------------------------------------------------------------- the rows


def nothing(case: Case) -> None:
    return None


def no_check(case: Case, found: Any) -> None:
    return None


@dataclass(frozen=True)
class There:
    """How the worker (and the run's manager object) stand before the pass."""

    arrange: Arrange = nothing
    options: tuple[str, ...] = ()
    ran_there: bool = False  # the view says the run had its copy there
    connected: bool = True
    known: bool = True  # False: no connection to that worker in this process (``RunOn.worker`` None)
    lost_for: float | None = None
    settling: bool = False


@dataclass(frozen=True)
class Expect:
    """What the pass does."""

    outcome: type | None  # the copy outcome ``sync`` found (None: the worker was not read, or ``sync`` raised)
    step: type | None  # the lifecycle step carried out (None: raised before one)
    calls: str  # the record's calls in order, space-separated
    after: float | None = None  # the Result's requeue_after
    raises: type[BaseException] | tuple[type[BaseException], ...] | None = None
    dispatched: bool = False  # objects_dispatched (and dispatch_latency) counted once
    finished: str | None = None  # objects_finished counted once, with this reason
    synced: bool = False  # status_sync_lag observed once (a status written from the copy)
    check: Check = no_check


def then(*arrangers: Arrange) -> Arrange:
    def arrange(case: Case) -> None:
        for each in arrangers:
            each(case)

    return arrange


def both(*checks: Check) -> Check:
    def check(case: Case, found: Any) -> None:
        for each in checks:
            each(case, found)

    return check


def nothing_created(case: Case, found: Any) -> None:
    assert case.store.sent("create") == []


def not_mirrored(case: Case, found: Any) -> None:
    """The manager object's status as the arrangement left it: nothing from the worker written over it."""
    assert case.manager.sent("patch_status") == []
    assert case.manager_status() == case.obj.get("status")


def nothing_asked(case: Case, found: Any) -> None:
    """The worker was neither read nor written: it is not reachable."""
    assert case.store.requests == []
    nothing_written(case)


def found_by_the_create(case: Case, out: copies.InSync) -> None:
    """The create met the copy the cache had not listed: gone on with (mirrored), not made twice."""
    assert [r.verb for r in case.store.requests] == ["create", "get"]
    assert len(case.store.objects) == 1
    assert out.written
    assert case.manager_status() == mirrored(case, status())


def foreign_untouched(case: Case, found: Any) -> None:
    there = case.there()
    assert there is not None
    assert ORIGIN_LABEL not in there["metadata"]["labels"]
    assert case.store.sent("patch") == case.store.sent("delete") == []
    not_mirrored(case, found)


def not_adopted(case: Case, found: Any) -> None:
    foreign_untouched(case, found)
    nothing_created(case, found)


def stale_left(case: Case, found: Any) -> None:
    """A run being reset: the earlier run's result never mirrored, nothing made."""
    nothing_created(case, found)
    not_mirrored(case, found)


def stale_still_going(case: Case, found: Any) -> None:
    assert case.there() is not None
    assert case.store.sent("delete") == [], "already going: not deleted again"
    nothing_created(case, found)
    not_mirrored(case, found)


def stale_unanswered(case: Case, error: WorkerWriteFailed) -> None:
    assert (error.action, error.refused) == ("delete", False)
    assert case.there() is not None, "no answer: nothing done"
    stale_left(case, error)


def arrange_ran_there(case: Case) -> None:
    """Its status mirrored from the copy (still running), and the copy deleted there since."""
    case.obj = case.manager.put({**case.obj, "status": mirrored(case, status())})


def arrange_ran_there_to_the_end(case: Case) -> None:
    """Its final status mirrored from the copy (a pass that ended before it finished the run), the copy deleted."""
    case.obj = case.manager.put({**case.obj, "status": mirrored(case, status("True", "done"))})


def arrange_dying(case: Case, attempt: str | None = None) -> None:
    """A copy of this run (UID and Workload; this admission's unless ``attempt``), held by a finalizer while it is
    deleted."""
    dying = case.copy_of(state=status("False", "cancelled by its deletion"), attempt=attempt)
    dying["metadata"].update(finalizers=["results.tekton.dev/pipelinerun"], deletionTimestamp=ago(5))
    case.store.put(dying)


def arrange_dying_earlier(case: Case) -> None:
    """A copy of this run made for an earlier admission (evicted, or its Workload made again), held while deleted."""
    arrange_dying(case, case.mode.attempt(reserved_at="2026-08-01T09:00:00Z"))


def arrange_dying_unmarked(case: Case) -> None:
    """A copy of this run an older version made (no admission on it), held by a finalizer while it is deleted."""
    arrange_dying(case, "")


def dying_left(case: Case, out: copies.Stale) -> None:
    assert case.store.sent("delete") == [], "already going"
    assert case.there() is not None
    stale_left(case, out)


def dying_is_the_run(case: Case, out: copies.InSync) -> None:
    assert case.manager_status() == mirrored(case, status("False", "cancelled by its deletion"))
    assert case.store.sent("delete") == [], "already going"
    nothing_created(case, out)


def arrange_ended_dying(case: Case) -> None:
    """The run ended there, and its copy is being deleted there (a TTL, held by a finalizer) before its final status
    was mirrored."""
    dying = case.copy_of(state=status("True", "done"))
    dying["metadata"].update(finalizers=["results.tekton.dev/pipelinerun"], deletionTimestamp=ago(5))
    case.store.put(dying)


def dying_mirrored(case: Case, out: copies.InSync) -> None:
    """The final status its end left, mirrored before the run ends."""
    assert case.manager_status() == mirrored(case, status("True", "done"))
    assert case.store.sent("delete") == []


def arrange_deleted_unseen(case: Case) -> None:
    """The copy cached, then deleted there before its watch event (or its final status) came."""
    arrange_with_status(case)
    case.worker.watching = False
    case.store.objects.clear()


def arrange_unlisted_empty(case: Case) -> None:
    case.worker.unlist(PIPELINERUN)


def arrange_stale_unanswered(case: Case) -> None:
    arrange_stale(case)
    case.store.fail("delete", NoAnswer())


def arrange_cancel_unanswered(case: Case) -> None:
    """The run cancelled on the manager after its copy was made; carrying the cancel there gets no answer."""
    arrange_with_status(case)
    case.obj = case.manager.put({**case.obj, "spec": {**case.obj["spec"], "status": "Cancelled"}})
    case.store.fail("patch", NoAnswer())


def cancel_unanswered(case: Case, error: Exception) -> None:
    there = case.there()
    assert there is not None
    assert there["spec"].get("status") != "Cancelled", "no answer: nothing done"
    not_mirrored(case, error)


def each(views: Iterable[str], expect: Expect) -> dict[str, Expect]:
    return dict.fromkeys(views, expect)


E = Expect
RUNNING_HERE = E(copies.Created, rl.Running, "seen running", dispatched=True, check=check_created)
KEPT_RUNNING = E(copies.InSync, rl.Running, "seen running", synced=True, check=check_written)
ENDS_AS_TOLD = "seen running finished:Succeeded"  # the worker's verdict
LOST_TOLD = "seen running finished:Succeeded tell:Warning:FinalStatusLost"  # the worker's verdict; status lost
STALE_AWAITED = E(copies.Stale, rl.AwaitStale, "seen await_stale", rl.STALE_RECHECK, check=check_stale_deleted)
STUCK = E(copies.Stale, rl.Leave, "seen leave:stuck", check=both(check_stale_going, nothing_created))
HELD = E(copies.Held, rl.Held, "seen tell:Normal:StatusHeld running held", check=check_held)
GONE = E(copies.Gone, rl.LostThere, "seen lost_there", finished="Failed", check=check_gone)
BLOCKED_ON_NO_ANSWER = E(None, None, "blocked", raises=WorkerWriteFailed, check=check_no_answer)
# A worker write that fails is told (``Record.blocked``) and raised, whatever raises it (docs/dispatch.md).
BLOCKED = E(None, None, "blocked", raises=(WorkerWriteFailed, KubeError))
REJECTED = E(None, None, "tell:Warning:StatusRejected", raises=StatusRejected, check=check_status_refused)

TABLE: dict[str, tuple[There, dict[str, Expect]]] = {
    "nothing there": (There(), {
        KUEUE: dataclasses.replace(RUNNING_HERE, after=LOST_TIMEOUT),
        RESET: E(copies.Absent, rl.Wait, "seen", check=check_absent),
        ENDED: E(copies.Gone, rl.LostThere, LOST_TOLD, finished="Succeeded", check=check_gone),
        **each(DIRECT, RUNNING_HERE),
    }),
    "nothing there, the cache not listed yet": (There(arrange_unlisted_empty), {
        RESET: E(copies.Unlisted, rl.Wait, "seen", check=check_absent),
    }),
    "a copy there, the cache not listed yet": (There(arrange_unlisted), {
        KUEUE: E(copies.InSync, rl.Running, "seen running", LOST_TIMEOUT, synced=True, check=found_by_the_create),
        RESET: E(copies.Unlisted, rl.Wait, "seen", check=check_unlisted),
        ENDED: E(copies.InSync, rl.Finish, ENDS_AS_TOLD, finished="Succeeded", synced=True, check=check_found_live),
        **each(DIRECT, E(copies.InSync, rl.Running, "seen running", synced=True, check=found_by_the_create)),
    }),
    "create conflicts, the name gone at the read": (There(arrange_vanished), {
        **each(CREATING, E(copies.Vanished, rl.LookAgain, "seen", 0.0, check=check_vanished)),
    }),
    "create refused": (There(arrange_refused), {
        **each(CREATING, E(copies.CreateRefused, rl.Leave, "seen leave:refused", check=check_refused)),
    }),
    "this run's copy, its origin label lost": (There(arrange_foreign), {
        **each((*CREATING, ENDED), E(copies.Foreign, rl.Blocked, "seen blocked", raises=copies.OwnershipConflict,
                                     check=foreign_untouched)),  # it may be running there: never left
        RESET: E(copies.Absent, rl.Wait, "seen", check=not_adopted),
    }),
    "another run's object of that name, not this manager's": (There(arrange_foreign_other_run), {
        **each((KUEUE, AT_LEAST), E(copies.Foreign, rl.Leave, "seen leave:conflict", check=foreign_untouched)),
        AT_MOST: E(copies.Foreign, rl.Blocked, "seen blocked", raises=copies.OwnershipConflict,
                   check=foreign_untouched),
        RESET: E(copies.Absent, rl.Wait, "seen", check=not_adopted),
        ENDED: E(copies.Foreign, rl.LostThere, LOST_TOLD, finished="Succeeded", check=foreign_untouched),
    }),
    "ran there, another run's object of that name now": (
        There(then(arrange_ran_there, arrange_foreign_other_run), (FINISHED,), ran_there=True), {
            **each(CREATING, E(copies.Foreign, rl.LostThere, "seen lost_there", finished="Failed",
                               check=foreign_untouched)),
        }),
    "an adoptable copy": (There(arrange_adoptable, (ADOPT,)), {
        **each((*CREATING, ENDED), E(copies.Adopted, rl.LookAgain, "seen tell:Normal:Adopted", 0.0,
                                     check=check_adopted)),
        RESET: E(copies.Absent, rl.Wait, "seen", check=not_adopted),
    }),
    "an earlier run's copy": (There(arrange_stale), {
        **each((*CREATING, ENDED), STALE_AWAITED),
        RESET: E(copies.Stale, rl.Wait, "seen", check=both(check_stale_deleted, nothing_created)),  # not waited for
    }),
    "an earlier run's copy, held by a finalizer": (There(arrange_stale_held), {
        **each(CREATING, dataclasses.replace(STALE_AWAITED, check=check_stale_held)),
    }),
    "an earlier run's copy, going past workerLostTimeout": (There(arrange_stale_going), {
        **each(CREATING, STUCK),
        # The worker says the run ended: it is not run again, whatever holds the name there.
        ENDED: E(copies.Stale, rl.LostThere, LOST_TOLD, finished="Succeeded", check=stale_still_going),
        RESET: E(copies.Stale, rl.Wait, "seen", check=stale_left),
    }),
    "ran there, an earlier run's copy going past workerLostTimeout": (
        There(then(arrange_ran_there, arrange_stale_going), (FINISHED,), ran_there=True), {
            **each(CREATING, E(copies.Stale, rl.LostThere, "seen lost_there", finished="Failed",
                               check=stale_still_going)),
            ENDED: E(copies.Stale, rl.LostThere, LOST_TOLD, finished="Succeeded", check=stale_still_going),
        }),
    "this run's copy, being deleted": (There(arrange_dying), {
        # This admission's (it says so), deleted there by someone else: its status is still mirrored, evicted before
        # or not.
        **each((KUEUE, AGAIN), E(copies.InSync, rl.Running, "seen running", LOST_TIMEOUT, synced=True,
                                 check=dying_is_the_run)),
        **each(DIRECT, E(copies.InSync, rl.Running, "seen running", synced=True, check=dying_is_the_run)),
    }),
    "an earlier admission's copy, being deleted": (There(arrange_dying_earlier), {
        # Never taken as this admission's, evicted before or not (a Workload made again has no eviction history).
        **each((KUEUE, AGAIN), E(copies.Stale, rl.AwaitStale, "seen await_stale", rl.STALE_RECHECK,
                                 check=dying_left)),
    }),
    "a copy an older version made, being deleted": (There(arrange_dying_unmarked), {
        # It says nothing of its admission: after an eviction it is taken as the earlier one's, as before.
        AGAIN: E(copies.Stale, rl.AwaitStale, "seen await_stale", rl.STALE_RECHECK, check=dying_left),
        KUEUE: E(copies.InSync, rl.Running, "seen running", LOST_TIMEOUT, synced=True, check=dying_is_the_run),
    }),
    "this run's copy, being deleted after it ended there": (There(arrange_ended_dying), {
        ENDED: E(copies.InSync, rl.Finish, ENDS_AS_TOLD, finished="Succeeded", synced=True, check=dying_mirrored),
    }),
    "the cached copy deleted there before its final status came": (There(arrange_deleted_unseen), {
        ENDED: E(copies.Gone, rl.LostThere, LOST_TOLD, finished="Succeeded", check=check_gone),
    }),
    "ran there, deleted there": (There(arrange_ran_there, (FINISHED,), ran_there=True), {
        **each(CREATING, GONE),
        RESET: E(copies.Absent, rl.Wait, "seen", check=check_absent),
        ENDED: E(copies.Gone, rl.LostThere, LOST_TOLD, finished="Succeeded", check=check_gone),
    }),
    "ran there, deleted there after its final status was mirrored": (
        There(arrange_ran_there_to_the_end, (FINISHED,), ran_there=True), {
            **each(CREATING, E(copies.Gone, rl.LostThere, "seen running finished:Succeeded", finished="Succeeded",
                               check=check_gone)),
        }),
    "suspended, a status to hold back": (There(arrange_suspended, (SUSPENDED,)), {
        **each((KUEUE, RESET), dataclasses.replace(HELD, after=LOST_TIMEOUT)),  # Kueue's recheck
        **each(DIRECT, HELD),
        ENDED: dataclasses.replace(HELD, calls="seen tell:Normal:StatusHeld running held:over_there",
                                   after=LOST_TIMEOUT),
    }),
    "suspended, nothing to hold back": (There(arrange_suspended_without_status, (SUSPENDED,)), {
        KUEUE: E(copies.Held, rl.Held, "seen running held", LOST_TIMEOUT, check=check_held_nothing),
        AT_LEAST: E(copies.Held, rl.Held, "seen running held", check=check_held_nothing),
    }),
    "a copy without status": (There(arrange_without_status), {  # in sync: a finished predicate may read the spec
        KUEUE: E(copies.InSync, rl.Running, "seen running", LOST_TIMEOUT, check=check_no_status),
        RESET: E(copies.InSync, rl.Wait, "seen", check=check_no_status),
        ENDED: E(copies.InSync, rl.Finish, ENDS_AS_TOLD, finished="Succeeded", check=check_no_status),
        **each(DIRECT, E(copies.InSync, rl.Running, "seen running", check=check_no_status)),
    }),
    "a copy with a status to mirror": (There(arrange_with_status), {
        KUEUE: dataclasses.replace(KEPT_RUNNING, after=LOST_TIMEOUT),
        RESET: E(copies.InSync, rl.Wait, "seen", synced=True, check=check_written),
        ENDED: E(copies.InSync, rl.Finish, ENDS_AS_TOLD, finished="Succeeded", synced=True, check=check_written),
        **each(DIRECT, KEPT_RUNNING),
    }),
    "in sync, nothing to write": (There(arrange_in_sync), {
        KUEUE: E(copies.InSync, rl.Running, "seen running", LOST_TIMEOUT, check=check_unwritten),
        RESET: E(copies.InSync, rl.Wait, "seen", check=check_unwritten),
        **each(DIRECT, E(copies.InSync, rl.Running, "seen running", check=check_unwritten)),
    }),
    "status fields the manager drops": (There(arrange_pruning), {
        KUEUE: E(copies.InSync, rl.Running, "seen tell:Warning:StatusFieldsPruned running", LOST_TIMEOUT,
                 synced=True, check=check_pruned),
        RESET: E(copies.InSync, rl.Wait, "seen tell:Warning:StatusFieldsPruned", synced=True, check=check_pruned),
        ENDED: E(copies.InSync, rl.Finish, "seen tell:Warning:StatusFieldsPruned running finished:Succeeded",
                 finished="Succeeded", synced=True, check=check_pruned),
        **each(DIRECT, E(copies.InSync, rl.Running, "seen tell:Warning:StatusFieldsPruned running", synced=True,
                         check=check_pruned)),
    }),
    "finished there, succeeded": (There(arrange_succeeded, (FINISHED,)), {
        **each((*CREATING, ENDED), E(copies.Finished, rl.Finish, "seen running finished:Succeeded",
                                     finished="Succeeded", synced=True, check=check_succeeded)),
        RESET: E(copies.Finished, rl.Wait, "seen", synced=True, check=check_succeeded),  # no verdict while reset
    }),
    "finished there, failed": (There(arrange_failed, (FINISHED,)), {
        **each(CREATING, E(copies.Finished, rl.Finish, "seen running finished:Failed", finished="Failed",
                           synced=True, check=check_failed)),
    }),
    "a newer final status than the cache holds": (There(arrange_behind, (FINISHED,)), {
        ENDED: E(copies.Behind, rl.LookAgain, "seen", 0.0, check=check_behind),
    }),
    "raises: create unanswered": (There(arrange_no_answer), {
        **each(CREATING, BLOCKED_ON_NO_ANSWER),
    }),
    "raises: create refused, the name unread": (There(arrange_refused_unread), {
        **each(CREATING, dataclasses.replace(BLOCKED_ON_NO_ANSWER, check=check_refused_unread)),
    }),
    "raises: an earlier run's copy, its delete unanswered": (There(arrange_stale_unanswered), {
        **each(CREATING, dataclasses.replace(BLOCKED_ON_NO_ANSWER, check=stale_unanswered)),
    }),
    "raises: a cancel carried there, unanswered": (There(arrange_cancel_unanswered, (SPEC_SYNC,)), {
        **each(CREATING, dataclasses.replace(BLOCKED, check=cancel_unanswered)),
    }),
    "raises: adoption refused": (There(arrange_adopt_refused, (ADOPT,)), {
        **each(CREATING, dataclasses.replace(BLOCKED, check=check_adopt_refused)),
    }),
    "raises: the status rejected by the manager": (There(arrange_status_refused), {
        **each(VIEWS, REJECTED),
    }),
    "unreachable a while": (There(connected=False, lost_for=10.0), {
        **each((KUEUE, RESET, *DIRECT), E(None, rl.AwaitWorker, "await_worker", LOST_TIMEOUT - 10.0,
                                          check=nothing_asked)),
    }),
    "unreachable past workerLostTimeout": (There(connected=False, lost_for=LOST_TIMEOUT + 30.0), {
        **each((KUEUE, RESET, AT_LEAST), E(None, rl.Leave, "leave:lost", check=nothing_asked)),
        AT_MOST: E(None, rl.FailLost, "fail_lost", check=nothing_asked),
    }),
    "not tried yet by this process": (There(connected=False, lost_for=10.0, settling=True), {
        **each((KUEUE, RESET, *DIRECT), E(None, rl.Wait, "", LOST_TIMEOUT - 10.0, check=nothing_asked)),
    }),
    "not tried yet, past workerLostTimeout": (There(connected=False, lost_for=LOST_TIMEOUT + 30.0, settling=True), {
        **each(DIRECT, E(None, rl.Wait, "", rl.SETTLING_RECHECK, check=nothing_asked)),
    }),
    "no connection in this process, past workerLostTimeout": (There(known=False, lost_for=LOST_TIMEOUT + 30.0), {
        AT_LEAST: E(None, rl.Leave, "leave:lost", check=nothing_asked),
        AT_MOST: E(None, rl.FailLost, "fail_lost", check=nothing_asked),
    }),
}  # fmt: skip
ROWS = [
    pytest.param(there, view, expect, id=f"{view}: {name}")
    for name, (there, expects) in TABLE.items()
    for view, expect in expects.items()
]


# ------------------------------------------------------------------------------------------------ the test


@dataclass
class Found:
    """What the pass went through: the copy outcome and the lifecycle step."""

    outcome: copies.CopyOutcome | None = None
    step: rl.Step | None = None


def spy(monkeypatch: pytest.MonkeyPatch) -> Found:
    """The lifecycle's decisions, as ``Runs`` asks for them, kept as they are made."""
    found, after_copy, unreachable = Found(), rl.after_copy, rl.unreachable

    def on_copy(view: RunView, out: copies.CopyOutcome) -> rl.Step:
        found.outcome, found.step = out, after_copy(view, out)
        return found.step

    def on_unreachable(view: RunView) -> rl.Unreachable:
        step = unreachable(view)
        found.step = step
        return step

    monkeypatch.setattr(rl, "after_copy", on_copy)
    monkeypatch.setattr(rl, "unreachable", on_unreachable)
    return found


def counted(metrics: Metrics, sample: str) -> dict[str, float]:
    """A metric's samples for the kind on worker w1, by their other labels' values."""
    counts = {}
    for family in metrics.registry.collect():
        for s in family.samples:
            if s.name == sample and s.labels.get("kind") == "PipelineRun" and s.labels.get("cluster") == "w1":
                counts[s.labels.get("reason", "")] = s.value
    return counts


def assert_told_of_this_run(record: RecordingRecord, case: Case, view: View) -> None:
    """Each call names this run's worker and manager object; a run its worker said ended ends as it said."""
    assert record.workers() <= {"w1"}
    for label, args in record.args:
        if label == "seen":
            assert args[0]["metadata"]["uid"] == case.obj["metadata"]["uid"], "this run's manager object"
        if label.startswith("finished:") and view.run.verdict is not None:
            assert view.run.verdict[1] in args[1], "the run ends as its worker says"


def assert_counted(metrics: Metrics, expect: Expect) -> None:
    once = {"": 1.0}
    assert counted(metrics, "multikueue_objects_dispatched_total") == (once if expect.dispatched else {})
    assert counted(metrics, "multikueue_dispatch_latency_seconds_count") == (once if expect.dispatched else {})
    assert counted(metrics, "multikueue_objects_finished_total") == ({expect.finished: 1.0} if expect.finished else {})
    assert counted(metrics, "multikueue_status_sync_lag_seconds_count") == (once if expect.synced else {})


async def drive(case: Case, there: There, view: View, record: Record, metrics: Metrics) -> Result:
    async def manager(gvk: GroupVersionKind) -> Objects:
        assert gvk == PIPELINERUN
        return cast(Objects, case.manager)  # read as ``LiveObjects`` only (``get``, ``copies.sync``'s manager)

    run_view = dataclasses.replace(view.run, ran_there=there.ran_there, lost_for=there.lost_for,
                                   settling=there.settling)  # fmt: skip
    run = RunOn(case.adapter, case.obj, case.worker if there.known else None, run_view,
                workload_name=view.mode.workload_name(case.obj), attempt=case.attempt,
                waiting_since=ago(WAITING_SINCE))  # fmt: skip
    return await Runs(ORIGIN, manager, StatusMirror(), metrics).drive(run, record)


@pytest.mark.parametrize(("there", "view_name", "expect"), ROWS)
async def test_a_pass_over_a_run_on_its_worker(
    there: There, view_name: str, expect: Expect, monkeypatch: pytest.MonkeyPatch
) -> None:
    view = VIEWS[view_name]
    case = Case(view.mode, view.mode.adapter(*there.options))
    there.arrange(case)
    case.worker.is_connected = there.connected
    found, record, metrics = spy(monkeypatch), RecordingRecord(), Metrics()

    after: Any
    if expect.raises is not None:
        with pytest.raises(expect.raises) as raised:
            await drive(case, there, view, record, metrics)
        after = raised.value
    else:
        assert await drive(case, there, view, record, metrics) == Result(requeue_after=expect.after)
        after = found.outcome

    assert record.calls == expect.calls.split()
    assert type(found.outcome) is (expect.outcome or type(None))
    assert type(found.step) is (expect.step or type(None))
    assert_told_of_this_run(record, case, view)
    assert_counted(metrics, expect)
    if view.run.want is not Want.RUN or there.ran_there:
        assert case.store.sent("create") == [], "reset, ended there or ran there: never created (again)"
    expect.check(case, after)


def test_every_step_that_drive_carries_out_has_a_row() -> None:
    """Every step of ``run_lifecycle.Step`` but ``after_finish``'s (each mode's finished run, never driven)."""
    finished_only = set(get_args(get_type_hints(rl.after_finish)["return"]))
    produced = {expect.step for _, expects in TABLE.values() for expect in expects.values()}
    assert set(get_args(rl.Step)) - finished_only <= produced


def test_every_copy_outcome_has_a_row() -> None:
    """Every outcome of ``copies.sync`` (a copy without status is in sync: a kind's ``finished`` predicate may read
    more than the status)."""
    produced = {expect.outcome for _, expects in TABLE.values() for expect in expects.values()}
    assert set(get_args(copies.CopyOutcome)) | {copies.Finished} <= produced


def test_every_view_has_rows() -> None:
    assert {view for _, expects in TABLE.values() for view in expects} == set(VIEWS)
