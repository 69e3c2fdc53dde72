"""Placement: which worker runs an object (Direct mode), and which workers a run may go to (both modes), as pure
functions of what is known now.

Filters, in order, each naming its reason when it rejects a worker: connected; serves the kind; not a worker
this object was lost on or failed on; the kind's ``workerSelector`` and the object's
``multikueue.x-k8s.io/worker-selector`` annotation match the MultiKueueCluster's labels; below the per-worker
limit. Among the survivors of the first spill-over tier that has any, the least loaded wins (load / limit when a
limit is set, else the count), ties broken by name. The explanation lists every worker with its verdict.

Kueue mode has no placement of its own (the first worker whose Kueue admits the run wins), but the same two
selectors narrow the workers a run is nominated to: ``selection`` says which workers each leaves out, and why.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from multikueue.config import Placement
from multikueue.selectors import Selector, parse

WORKER_SELECTOR_ANNOTATION = "multikueue.x-k8s.io/worker-selector"


@dataclass(frozen=True)
class WorkerView:
    name: str
    labels: dict[str, str]
    connected: bool
    serves_kind: bool | None  # None: not known yet (discovery pending or failing), never read as absent
    running: int  # objects of this kind placed there and not finished


@dataclass(frozen=True)
class Verdict:
    worker: str
    fits: bool
    reason: str
    score: float | None = None
    tier: int | None = None
    lasting: bool = False  # rejected for a reason that lasts as the fleet stands (labels, kind, lost there)

    def __str__(self) -> str:
        if not self.fits:
            return f"{self.worker}: rejected: {self.reason}"
        tier = f", tier {self.tier + 1}" if self.tier is not None else ""
        return f"{self.worker}: fits ({self.reason}, score {self.score:.2f}{tier})"


@dataclass(frozen=True)
class Decision:
    worker: str | None
    verdicts: tuple[Verdict, ...] = field(default_factory=tuple)
    problem: str | None = None  # an unreadable selector on the object

    @property
    def never(self) -> bool:
        """No worker fits, and none will as the fleet stands: not one is merely busy or unreachable."""
        if self.worker is not None:
            return False
        return self.problem is not None or (bool(self.verdicts) and all(v.lasting for v in self.verdicts))

    @property
    def message(self) -> str:
        head = f"placed on {self.worker}" if self.worker else "no worker fits"
        if self.problem:
            head = f"{head}: {self.problem}"
        return head + "; " + "; ".join(str(v) for v in self.verdicts)


def decide(
    placement: Placement,
    workers: list[WorkerView],
    *,
    object_selector: str | None = None,
    avoid: dict[str, str] | None = None,  # worker -> why (lost there, failed there)
) -> Decision:
    avoid = avoid or {}
    kind_selector = parse(placement.worker_selector)
    try:
        own = parse(object_selector) if object_selector else None
    except ValueError as e:
        return Decision(None, (), f"annotation {WORKER_SELECTOR_ANNOTATION}: {e}")
    tiers = [parse(t) for t in placement.tiers]
    limit = placement.max_per_worker
    verdicts = [_verdict(worker, kind_selector, own, avoid, limit, tiers)
                for worker in sorted(workers, key=lambda w: w.name)]  # fmt: skip
    if not any(v.fits for v in verdicts):
        return Decision(None, tuple(verdicts))
    if tiers:  # every fitting worker has a tier: only the first tier with room is used
        verdicts = _first_tier_only(verdicts)
    chosen = min((v for v in verdicts if v.fits), key=lambda v: (v.score or 0.0, v.worker))
    return Decision(chosen.worker, tuple(verdicts))


def _verdict(worker: WorkerView, kind_selector: Selector, own: Selector | None, avoid: dict[str, str],
             limit: int | None, tiers: list[Selector]) -> Verdict:  # fmt: skip
    reason = _rejection(worker, kind_selector, own, avoid, limit)
    if reason is not None:
        busy = not worker.connected or worker.serves_kind is None or reason.startswith("full (")  # may change soon
        return Verdict(worker.name, False, reason, lasting=not busy)
    tier = next((i for i, t in enumerate(tiers) if t.matches(worker.labels)), None)
    if tiers and tier is None:
        return Verdict(worker.name, False, "in no spill-over tier", lasting=True)
    load = f"{worker.running}/{limit} running" if limit else f"{worker.running} running"
    score = worker.running / limit if limit else float(worker.running)
    return Verdict(worker.name, True, load, score, tier)


def _first_tier_only(verdicts: list[Verdict]) -> list[Verdict]:
    best = min(v.tier for v in verdicts if v.fits and v.tier is not None)
    result = []
    for v in verdicts:
        if v.fits and v.tier != best:
            reason = f"in spill-over tier {(v.tier or 0) + 1}, used only when tier {best + 1} has no room"
            v = Verdict(v.worker, False, reason)
        result.append(v)
    return result


def _rejection(
    worker: WorkerView, kind_selector: Selector, own: Selector | None, avoid: dict[str, str], limit: int | None
) -> str | None:
    if not worker.connected:
        return "not connected"
    if worker.serves_kind is None:
        return "not known yet to serve this kind"
    if not worker.serves_kind:
        return "does not serve this kind"
    if worker.name in avoid:
        return avoid[worker.name]
    unmatched = selector_rejection(worker.labels, kind_selector, own)
    if unmatched is not None:
        return unmatched
    if limit is not None and worker.running >= limit:
        return f"full ({worker.running}/{limit} running)"
    return None


def selector_rejection(labels: dict[str, str], kind_selector: Selector | None, own: Selector | None) -> str | None:
    """Why a worker with these MultiKueueCluster labels is left out by the kind's or the object's selector."""
    for selector, what in ((kind_selector, "the kind's workerSelector"), (own, "the object's worker-selector")):
        if selector is not None and not selector.matches(labels):
            unmet = ", ".join(str(r) for r in selector.unmet(labels))
            return f"labels do not match {what} ({unmet})"
    return None


NO_WORKER_MATCHES = "No worker matches the run's worker selection"
"""How a Pending check's message starts while every worker is left out by the selection (Kueue mode)."""


@dataclass(frozen=True)
class Selection:
    """The workers a run may not be nominated to, each with why (Kueue mode). Required while the run waits to be
    admitted; ignored once a worker is recorded (a label changed later moves nothing that runs)."""

    excluded: dict[str, str] = field(default_factory=dict)  # worker -> why it is left out
    problem: str | None = None  # an unreadable selector on the object: every worker is left out
    selectors: str = ""  # the selectors in force, as the user wrote them

    def allows(self, worker: str) -> bool:
        return self.problem is None and worker not in self.excluded

    def message(self, workers: tuple[str, ...]) -> str | None:
        """The check's message when none of ``workers`` (the run's MultiKueueConfig) is allowed, else None."""
        if self.problem is not None:
            return f"{NO_WORKER_MATCHES}: {self.problem}"
        if not workers or any(self.allows(w) for w in workers):
            return None
        told = "; ".join(f"{w}: {self.excluded[w]}" for w in workers)
        return f"{NO_WORKER_MATCHES} ({self.selectors}): {told}"


def selection(labels: dict[str, dict[str, str]], kind_selector: str, object_selector: str | None) -> Selection:
    """Which of the workers (by name, with their MultiKueueCluster labels) the kind's ``workerSelector`` and the
    object's ``multikueue.x-k8s.io/worker-selector`` annotation leave out."""
    try:
        own = parse(object_selector) if object_selector else None
    except ValueError as e:
        return Selection(problem=f"annotation {WORKER_SELECTOR_ANNOTATION}: {e}")
    kind = parse(kind_selector)
    if not kind.requirements and own is None:
        return Selection()
    excluded = {name: why for name, worker_labels in labels.items()
                if (why := selector_rejection(worker_labels, kind, own)) is not None}  # fmt: skip
    named = (("the kind's workerSelector", kind_selector), ("the object's worker-selector", object_selector))
    written = [f'{what} "{text}"' for what, text in named if text]
    return Selection(excluded, selectors=", ".join(written))
