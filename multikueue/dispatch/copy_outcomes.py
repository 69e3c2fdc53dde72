"""What bringing a copy in line finds (``copies.sync``), as values: pure, so the run's lifecycle
(``run_lifecycle``) decides on them without importing any client. ``copies`` re-exports each."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

from multikueue.labels import ATTEMPT_ANNOTATION, MANAGER_UID_ANNOTATION, prebuilt_workload_of

if TYPE_CHECKING:
    from multikueue.dispatch.writes import WorkerWriteFailed

Object = dict[str, Any]


class OwnershipConflict(Exception):
    """A same-named object on a worker that this manager did not create."""


class Want(Enum):
    RUN = "run"  # the copy should exist: created when absent
    OBSERVE = "observe"  # never created: mirrored if it is there (a run being evicted, or not yet recorded)
    # The worker says the run ended: never created, read live when the cache lacks it or may lag (its final status
    # must reach the manager before the run ends there): ``Gone`` when it is not there, ``Behind`` when newer.
    FINAL = "final"


@dataclass(frozen=True)
class Run:
    """Which run a copy must have been made for: the manager object's UID and, in Kueue mode, its prebuilt
    Workload's name (Kueue hashes the owner's UID into it) and the admission (``workload_state.attempt``). A
    same-named copy with this origin made for another run (the object deleted and created again while the worker was
    unreachable, or while a finalizer held the copy), or for an earlier admission of this one (evicted, or its
    Workload made again under the same name), is stale. An empty field matches any copy (an object read before it
    had a UID, a Workload not admitted now, a copy of an older version)."""

    uid: str = ""
    workload: str = ""
    attempt: str = ""

    @classmethod
    def of(cls, obj: Object | None, workload: str = "", attempt: str = "") -> Run:
        return cls(str(((obj or {}).get("metadata") or {}).get("uid") or ""), workload, attempt)

    def made(self, worker_obj: Object) -> bool:
        """Whether ``worker_obj`` is this run's copy. One being deleted must have been made for this admission: an
        earlier admission's, held by a finalizer, has that admission's status. One still running is this run's
        whatever admission it was made for (evicted, or its Workload made again, while this dispatcher did not look:
        nothing removed it): it goes on as this admission's, as in Kueue (``restamp``), never deleted and run again."""
        meta = worker_obj.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        going = bool(meta.get("deletionTimestamp"))
        return (
            _same(self.uid, annotations.get(MANAGER_UID_ANNOTATION))
            and _same(self.workload, prebuilt_workload_of(worker_obj))
            and (not going or _same(self.attempt, annotations.get(ATTEMPT_ANNOTATION)))
        )

    def restamp(self, worker_obj: Object) -> bool:
        """Whether ``worker_obj``, this run's running copy, should be marked as this admission's: it carries another
        (or none), and not a later one of the same Workload (this process's view lags: a replica that took over, a
        cache behind)."""
        found = str(((worker_obj.get("metadata") or {}).get("annotations") or {}).get(ATTEMPT_ANNOTATION) or "")
        if not self.attempt or found == self.attempt:
            return False
        same_workload = found.partition("/")[0] == self.attempt.partition("/")[0]
        return not (same_workload and _evictions_of(found) > _evictions_of(self.attempt))

    __call__ = made


ANY_RUN = Run()


def _same(wanted: str, found: str | None) -> bool:
    """An identity field that matches: either side unknown, or equal."""
    return not (wanted and found and found != wanted)


def _evictions_of(attempt: str) -> int:
    """An admission's eviction count (``uid/reserved/evictions``); 0 where it has none or it cannot be read."""
    count = attempt.rpartition("/")[2]
    return int(count) if count.isdigit() and attempt.count("/") == 2 else 0


def unmarked(worker_obj: Object) -> bool:
    """A copy made before copies carried their admission (an older version of this dispatcher)."""
    return ATTEMPT_ANNOTATION not in ((worker_obj.get("metadata") or {}).get("annotations") or {})


@dataclass(frozen=True, kw_only=True)
class Absent:
    """No copy, and none made (``Want.OBSERVE``): the worker's cache of the kind has listed, and lacks it."""

    obj: Object


@dataclass(frozen=True, kw_only=True)
class Unlisted:
    """No copy cached, and the worker's cache of the kind has not listed yet (a moment after a connect, a failover
    or a reload): whether it is there is not known. Never read as absent (``Want.OBSERVE``)."""

    obj: Object


@dataclass(frozen=True, kw_only=True)
class Stale:
    """A same-named copy with this origin made for an earlier run (``Run``): never held, mirrored or adopted. Its
    deletion was asked (or it is already going, held by finalizers); this run waits until it is gone."""

    obj: Object
    worker_obj: Object
    message: str
    going_for: float = 0.0  # seconds since its deletion began (a finalizer that never lets go: the run moves on)


@dataclass(frozen=True, kw_only=True)
class Gone:
    """The copy ran there (``ran_there``) and is gone, deleted on the worker by someone else (a pruner, a TTL, a
    user) before its final status reached the manager: never created again, so the run is not executed twice."""

    obj: Object
    message: str


@dataclass(frozen=True, kw_only=True)
class Created:
    """Created by this pass: its status comes with the worker's watch event."""

    obj: Object


@dataclass(frozen=True, kw_only=True)
class Vanished:
    """The create met a same-named copy that is gone again: look again at once."""

    obj: Object


@dataclass(frozen=True, kw_only=True)
class Behind:
    """The worker has a newer copy than its cache held: ``Want.FINAL``, read live (now kept there), mirrored by the
    next pass; or changed since the cache saw it (a mark of this admission refused): looked at again."""

    obj: Object


@dataclass(frozen=True, kw_only=True)
class CreateRefused:
    """The worker answered the create with a refusal: the run is certainly not there."""

    obj: Object
    error: WorkerWriteFailed


@dataclass(frozen=True, kw_only=True)
class Foreign:
    """A same-named object that is not this manager's and not adoptable: left untouched."""

    obj: Object
    worker_obj: Object
    message: str
    this_run: bool = False  # it names the manager object's UID: this run's copy, its origin label lost


@dataclass(frozen=True, kw_only=True)
class Adopted:
    """A same-named copy proven to be this manager's (``Adopt``), labelled so by this pass; the next pass, which its
    watch event brings, carries its spec and mirrors its status (said apart, so that telling it never depends on
    the steps after it)."""

    obj: Object
    worker_obj: Object


@dataclass(frozen=True, kw_only=True)
class Held:
    """The manager object is suspended: its status is not written."""

    obj: Object
    worker_obj: Object
    first: bool = False  # with a status to hold back, on the first pass of this suspension: say it once


@dataclass(frozen=True, kw_only=True)
class InSync:
    """The manager object's mapped status equals the copy's (written now if it differed)."""

    obj: Object  # the manager object now (a guarded write that follows must carry its resourceVersion)
    worker_obj: Object
    written: bool = False  # the status was written on the manager object by this pass
    pruned: tuple[str, ...] = ()  # status fields the manager's schema dropped: tell once


@dataclass(frozen=True, kw_only=True)
class Finished(InSync):
    """In sync, and the kind's ``finished`` predicate holds on the copy."""

    reason: str  # Succeeded or Failed
    message: str


CopyOutcome = (
    Absent | Unlisted | Created | Vanished | Behind | CreateRefused | Foreign | Stale | Gone | Adopted | Held | InSync
)  # fmt: skip
