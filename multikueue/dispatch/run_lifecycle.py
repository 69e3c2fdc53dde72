"""A run's lifecycle on its recorded worker, the same for both modes, as pure decisions.

Once a worker is recorded for a run (Kueue mode: the winner on the Workload's check; Direct mode: the placement on
the object), what happens next is decided here and nowhere else:

- ``unreachable``: the recorded worker is not connected. It may hold the run (created, or a create whose answer was
  lost), so nothing goes elsewhere before ``workerLostTimeout``; then the run leaves that worker (``Leave``: Kueue
  re-admits it, Direct places it again and avoids that worker) or, under ``AtMostOnce``, fails (``FailLost``).
- ``after_copy``: what the copy's outcome there (``copies.sync``) means for the run: it goes on (``Running``), ends
  (``Finish``, once its final status is on the manager object), cannot be there (``Leave``: refused, a foreign
  object of that name, an earlier run's copy that never goes), waits for an earlier run's copy to go
  (``AwaitStale``), was deleted there by someone else after it ran (``LostThere``: never made again), is held while
  the manager object is suspended (``Held``), or is looked at again (``LookAgain``).
- ``after_finish``: a finished run's copy is kept for the kind's retention, then removed.

The modes differ only in how the winner is chosen (``decision`` / ``placement``) and where these steps are recorded
(``check_record.CheckRecord`` on the Workload's check, ``placement_record.PlacementRecord`` on the object): the
steps themselves, the Events and the metrics (``runs.Runs``) are one.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from multikueue.dispatch import copy_outcomes as copies
from multikueue.dispatch.copy_outcomes import Want
from multikueue.kube.errors import describe

STALE_RECHECK = 2.0  # seconds: an earlier run's copy being deleted is looked for again
SETTLING_RECHECK = 1.0  # seconds: a worker this process has not tried yet is looked at again


class Cause(Enum):
    """Why a run leaves its recorded worker."""

    LOST = "lost"  # unreachable past workerLostTimeout: the run may have started there
    REFUSED = "refused"  # the worker answered the create with a refusal: certainly not there
    CONFLICT = "conflict"  # an object of that name there is not this manager's
    STUCK = "stuck"  # an earlier run's copy of that name a finalizer keeps past workerLostTimeout


@dataclass(frozen=True)
class RunView:
    """What the lifecycle reads of one run on its recorded worker. Times are seconds."""

    worker: str
    lost_timeout: float
    creates: bool = True  # the run may be created there now (Kueue mode: its check is Ready with this worker)
    lost_for: float | None = None  # the worker is not connected: for how long (None: connected)
    settling: bool = False  # not connected, and not tried yet by this process (a replica that just took over)
    at_most_once: bool = False  # a lost worker's run is failed, never started elsewhere
    verdict: tuple[str, str] | None = None  # the worker says the run ended (Kueue: its Workload copy Finished)
    ran_there: bool = False  # the run is known to have had its copy there: missing, it is not made again
    recheck: float | None = None  # a running run is looked at again after this long
    earlier_attempts: bool = False  # Kueue mode, evicted before: a going copy of this run there is an earlier attempt's

    @property
    def want(self) -> Want:
        if self.verdict is not None:
            return Want.FINAL
        return Want.RUN if self.creates else Want.OBSERVE


@dataclass(frozen=True)
class Wait:
    requeue_after: float | None = None


@dataclass(frozen=True)
class Running:
    """The copy is there and in line (or just created): a problem told earlier is over."""

    requeue_after: float | None = None


@dataclass(frozen=True)
class LookAgain:
    """Adopted, met a copy gone again, or the worker has a newer copy than its cache: looked at again at once."""


@dataclass(frozen=True)
class Held:
    """The manager object is suspended: its status is held back (``over_there``: the run already ended there)."""

    over_there: bool


@dataclass(frozen=True)
class Finish:
    """The run's final status is on the manager object: the run ends with this verdict."""

    reason: str
    message: str


@dataclass(frozen=True)
class LostThere:
    """The copy ran on the worker and was deleted there by someone else before its final status came: it is not run
    again. It ends as the worker's verdict says (``verdict``), else as the manager object's mirrored status says
    when the kind's ``finished`` predicate holds on it, else Failed."""

    message: str
    verdict: tuple[str, str] | None = None


@dataclass(frozen=True)
class Leave:
    """The run is certainly not running on the worker, or may not wait for it any longer: it goes elsewhere."""

    cause: Cause
    why: str  # the reason in a few words (Direct mode: "worker <w> <why>; placing ... again elsewhere")
    detail: str = ""  # the reason in one line naming the worker and the object (Kueue mode's check message)


@dataclass(frozen=True)
class AwaitWorker:
    """The worker is unreachable and may hold the run: waited for (``left`` seconds more)."""

    left: float
    lost_timeout: float


@dataclass(frozen=True)
class FailLost:
    """``AtMostOnce``: the worker was lost past ``workerLostTimeout`` and the run may have started there: Failed."""

    lost_timeout: float


@dataclass(frozen=True)
class AwaitStale:
    """An earlier same-named run's copy is in the way, being deleted: told, and looked for again."""

    message: str
    requeue_after: float = STALE_RECHECK


@dataclass(frozen=True)
class Blocked:
    """The copy cannot be brought in line now (a foreign object of that name while the run may not move): told,
    retried with backoff."""

    message: str


@dataclass(frozen=True)
class Retain:
    """A finished run's copy is kept for the kind's retention (its pods, its logs) this much longer."""

    requeue_after: float


@dataclass(frozen=True)
class Remove:
    """A finished run's copy goes."""


Step = (
    Wait | Running | LookAgain | Held | Finish | LostThere | Leave | AwaitWorker | FailLost | AwaitStale | Blocked
    | Retain | Remove
)  # fmt: skip


Unreachable = Wait | AwaitWorker | FailLost | Leave


def unreachable(view: RunView) -> Unreachable:
    """The recorded worker is not connected: waited for up to ``workerLostTimeout``, then left (or failed)."""
    left = view.lost_timeout - (view.lost_for or 0.0)
    if view.settling:  # not tried yet: whether it is reachable is not known, nothing to tell
        return Wait(max(left, SETTLING_RECHECK))
    if left > 0:
        return AwaitWorker(left, view.lost_timeout)
    if view.at_most_once:
        return FailLost(view.lost_timeout)
    why = f"unreachable for more than {view.lost_timeout:g}s"
    return Leave(Cause.LOST, why, why)


def after_copy(view: RunView, out: copies.CopyOutcome) -> Step:
    """What the copy's outcome on the recorded worker means for the run."""
    match out:
        case copies.Created() | copies.Absent() | copies.Unlisted():
            return _going_on(view)
        case copies.InSync():  # Finished is an InSync: the kind's predicate holds on the copy
            return _in_sync(view, out)
        case copies.Vanished() | copies.Adopted() | copies.Behind():
            return LookAgain()
        case copies.Held():
            return Held(over_there=view.verdict is not None)
        case copies.Gone(message=message):
            return LostThere(message, view.verdict)
        case copies.CreateRefused(error=error):
            return Leave(Cause.REFUSED, describe(error.error), str(error))
        case copies.Foreign():
            return _foreign(view, out)
        case copies.Stale(message=message, going_for=going):
            if not view.creates:
                return Wait()  # the run is being reset: nothing is made there
            if going <= view.lost_timeout:
                return AwaitStale(message)
            if view.ran_there or view.verdict is not None:  # it ran (or ended) there: it is not run again
                return LostThere(message, view.verdict)
            after = f"after workerLostTimeout ({view.lost_timeout:g}s)"  # a finalizer that never lets go: it moves
            return Leave(Cause.STUCK, f"still holds an earlier run's copy of that name {after}",
                         f"{message}; still there {after}")  # fmt: skip
    raise AssertionError(f"unhandled copy outcome {out!r}")


def _foreign(view: RunView, out: copies.Foreign) -> Step:
    """An object of that name there that is not this manager's: this run's own copy, relabelled (it may be running:
    never left), or, once the run ran there (or ended there), what replaced its copy (it is not run again); else,
    where the run may be made and may run elsewhere, it leaves that worker."""
    if out.this_run:
        return Blocked(out.message)
    if view.ran_there or view.verdict is not None:
        return LostThere(out.message, view.verdict)
    if view.creates and not view.at_most_once:
        return Leave(Cause.CONFLICT, "holds an object of that name that this manager did not create", out.message)
    return Blocked(out.message)


def _going_on(view: RunView) -> Step:
    if view.verdict is not None:  # nothing more will come from the worker: its verdict, with what is mirrored
        return Finish(*view.verdict)
    return Running(view.recheck) if view.creates else Wait()


def _in_sync(view: RunView, out: copies.InSync) -> Step:
    if view.verdict is not None:
        return Finish(*view.verdict)
    if isinstance(out, copies.Finished) and view.creates:  # only once the final status is on the manager object
        return Finish(out.reason, out.message)
    return Running(view.recheck) if view.creates else Wait()


def after_finish(retained_for: float) -> Retain | Remove:
    """A finished run: its copy kept for the kind's retention, then removed."""
    return Retain(retained_for) if retained_for > 0 else Remove()
