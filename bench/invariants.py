"""The promise a soak checks, as a pure function of what was observed: every run finished exactly once with the
status its worker decided, never on two workers at once, never created twice, nothing left behind, every placement
recorded.

What is observed comes from the bench's watches (a copy's life on each worker; the manager's final states) and
the API servers' audit logs (successful creates, by name): ``check`` never asks a cluster anything. Where no audit
log is kept (the kind clusters), a run is observed ``audited=False`` and "never created twice" rests on the UIDs
its watches saw: each creation makes a new one.
"""

from __future__ import annotations

from dataclasses import dataclass, field

Final = tuple[str, str]
"""A finished run's ``Succeeded`` condition: (status, reason), e.g. ("True", "Succeeded"), ("False", "Cancelled")."""


@dataclass
class Observed:
    """One run, as the soak saw it."""

    name: str
    decided: Final | None = None  # what the played Tekton wrote on the worker
    worker_decided: str = ""  # on which worker it wrote it
    finals: list[Final] = field(default_factory=list)  # each distinct final state the manager object showed, in order
    lives: dict[str, list[tuple[float, float | None]]] = field(default_factory=dict)  # worker -> (seen, gone|None)
    creates: dict[str, int] = field(default_factory=dict)  # worker -> creates answered 2xx (audit log)
    uncertain_creates: int = 0  # creates answered 5xx or not at all (audit log): carried out or not
    uids: set[str] = field(default_factory=set)  # the UIDs its object had on workers (watches): one per creation
    recorded: str = ""  # the worker the manager's record names (Workload status.clusterName, or the annotation)
    lost_cancel: bool = False  # cancelled on the manager; never seen on the worker's copy (CANCEL_DEADLINE)
    workload_copies_left: tuple[str, ...] = ()  # workers still holding its Workload copy at the end (Kueue mode)
    audited: bool = True  # creates and uncertain_creates were read from audit logs


@dataclass(frozen=True)
class Violation:
    invariant: str
    run: str
    detail: str

    def __str__(self) -> str:
        return f"{self.invariant}: {self.run}: {self.detail}"


INVARIANTS = (
    "finished exactly once as decided",
    "never on two workers at once",
    "never created twice",
    "nothing left behind",
    "placement recorded",
)


def _overlaps(a: tuple[float, float | None], b: tuple[float, float | None]) -> bool:
    end_a = a[1] if a[1] is not None else float("inf")
    end_b = b[1] if b[1] is not None else float("inf")
    return a[0] < end_b and b[0] < end_a


def _finished(run: Observed) -> list[Violation]:
    if run.lost_cancel:
        return [Violation(INVARIANTS[0], run.name, "cancelled on the manager; the cancel never reached the worker")]
    if run.decided is None:
        return [Violation(INVARIANTS[0], run.name, "never decided on a worker (it never ran)")]
    if len(run.finals) != 1:
        return [Violation(INVARIANTS[0], run.name, f"final states on the manager: {run.finals or 'none'}")]
    if run.finals[0] != run.decided:
        detail = f"the manager shows {run.finals[0]}, worker {run.worker_decided} decided {run.decided}"
        return [Violation(INVARIANTS[0], run.name, detail)]
    return []


def _one_worker_at_a_time(run: Observed) -> list[Violation]:
    lives = [(worker, life) for worker, spans in sorted(run.lives.items()) for life in spans]
    return [
        Violation(INVARIANTS[1], run.name, f"on {w1} {l1} and on {w2} {l2}")
        for i, (w1, l1) in enumerate(lives)
        for w2, l2 in lives[i + 1 :]
        if w1 != w2 and _overlaps(l1, l2)
    ]


def _created_once(run: Observed) -> list[Violation]:
    if len(run.uids) > 1:  # each creation makes a new UID, whatever the audit log could say of its answer
        return [Violation(INVARIANTS[2], run.name, f"{len(run.uids)} objects (UIDs) seen on {sorted(run.lives)}")]
    if not run.audited:
        return []
    total = sum(run.creates.values())
    if total > 1:
        return [Violation(INVARIANTS[2], run.name, f"created {run.creates}")]
    if total == 0 and not run.uncertain_creates and run.lives:  # seen, yet never asked for: nothing was checked
        return [Violation(INVARIANTS[2], run.name, f"seen on {sorted(run.lives)}, no create of it audited")]
    return []


def _left(run: Observed) -> list[Violation]:
    still = sorted(w for w, spans in run.lives.items() if any(gone is None for _, gone in spans))
    left = [Violation(INVARIANTS[3], run.name, f"its copy is still on {', '.join(still)}")] if still else []
    if run.workload_copies_left:
        detail = f"its Workload copy is still on {', '.join(sorted(run.workload_copies_left))}"
        left.append(Violation(INVARIANTS[3], run.name, detail))
    return left


def _recorded(run: Observed) -> list[Violation]:
    if run.worker_decided and run.recorded != run.worker_decided:
        detail = f"the record names {run.recorded or 'no worker'}, it ran on {run.worker_decided}"
        return [Violation(INVARIANTS[4], run.name, detail)]
    return []


def check(runs: list[Observed]) -> list[Violation]:
    """Every violation of the soak's invariants, run by run."""
    rules = (_finished, _one_worker_at_a_time, _created_once, _left, _recorded)
    return [v for run in runs for rule in rules for v in rule(run)]


def summary(violations: list[Violation]) -> dict[str, int]:
    """Violations per invariant (every invariant listed, held ones with 0)."""
    return {name: sum(1 for v in violations if v.invariant == name) for name in INVARIANTS}
