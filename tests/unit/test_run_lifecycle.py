"""The run's lifecycle on its recorded worker (``run_lifecycle``), the same decision for both modes: every copy
outcome against each shape of the run's view (Kueue mode ready to create, being reset, told by the worker that the
run ended, evicted; Direct mode under either lost-worker policy), and the unreachable worker's clock."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.dispatch import copies
from multikueue.dispatch import run_lifecycle as rl
from multikueue.dispatch.copies import Want
from multikueue.dispatch.writes import WorkerWriteFailed
from multikueue.kube.errors import Forbidden

OBJ: dict[str, Any] = {"metadata": {"name": "build", "namespace": "ns", "uid": "u1"}}
COPY: dict[str, Any] = {"metadata": {"name": "build", "namespace": "ns", "uid": "w1"}, "status": {}}
REFUSAL = WorkerWriteFailed("w1", "create", "PipelineRun", "ns", "build", Forbidden(403, "Forbidden", "no"))

# The views each mode builds (dispatch/reconciler.py ``_run_on``, dispatch/direct.py ``_run_on``).
VIEWS = {
    "kueue ready": rl.RunView("w1", 900.0, creates=True, recheck=900.0),
    "kueue reset": rl.RunView("w1", 900.0, creates=False, recheck=900.0),
    "kueue ended there": rl.RunView("w1", 900.0, creates=True, verdict=("Succeeded", "done"), recheck=900.0),
    "direct": rl.RunView("w1", 900.0),
    "direct at most once": rl.RunView("w1", 900.0, at_most_once=True),
    # Its status was mirrored from that worker: a copy missing there was deleted there.
    "direct ran there": rl.RunView("w1", 900.0, ran_there=True),
}
OUTCOMES: dict[str, copies.CopyOutcome] = {
    "absent": copies.Absent(obj=OBJ),
    "unlisted": copies.Unlisted(obj=OBJ),
    "created": copies.Created(obj=OBJ),
    "vanished": copies.Vanished(obj=OBJ),
    "behind": copies.Behind(obj=OBJ),
    "refused": copies.CreateRefused(obj=OBJ, error=REFUSAL),
    "foreign": copies.Foreign(obj=OBJ, worker_obj=COPY, message="not ours"),
    # It names the manager object's UID: this run's copy, its origin label lost (removed there, or a new origin).
    "foreign, this run's": copies.Foreign(obj=OBJ, worker_obj=COPY, message="not ours", this_run=True),
    "stale": copies.Stale(obj=OBJ, worker_obj=COPY, message="earlier run", going_for=5.0),
    "stale stuck": copies.Stale(obj=OBJ, worker_obj=COPY, message="earlier run", going_for=901.0),
    "gone": copies.Gone(obj=OBJ, message="deleted there"),
    "adopted": copies.Adopted(obj=OBJ, worker_obj=COPY),
    "held": copies.Held(obj=OBJ, worker_obj=COPY),
    "in sync": copies.InSync(obj=OBJ, worker_obj=COPY),
    "finished": copies.Finished(obj=OBJ, worker_obj=COPY, reason="Failed", message="step failed"),
}
STUCK = rl.Leave(
    rl.Cause.STUCK,
    "still holds an earlier run's copy of that name after workerLostTimeout (900s)",
    "earlier run; still there after workerLostTimeout (900s)",
)
REFUSED = rl.Leave(rl.Cause.REFUSED, "HTTP 403 Forbidden", str(REFUSAL))
NOT_OURS = "holds an object of that name that this manager did not create"
AGAIN = rl.LookAgain()
GOING = rl.Running(900.0)
ENDED = rl.Finish("Succeeded", "done")
ENDED_THERE = ("Succeeded", "done")

LOST = rl.LostThere("deleted there")
# What each outcome means, per view: one row per (outcome, view) pair, 96 in all.
EXPECTED: dict[str, dict[str, rl.Step]] = {
    "absent": {"kueue ready": GOING, "kueue reset": rl.Wait(), "kueue ended there": ENDED, "direct": rl.Running(),
               "direct at most once": rl.Running(), "direct ran there": rl.Running()},
    "refused": dict.fromkeys(VIEWS, REFUSED),
    "foreign": {"kueue ready": rl.Leave(rl.Cause.CONFLICT, NOT_OURS, "not ours"), "kueue reset": rl.Blocked("not ours"),
                "kueue ended there": rl.LostThere("not ours", ("Succeeded", "done")),
                "direct": rl.Leave(rl.Cause.CONFLICT, NOT_OURS, "not ours"),
                "direct at most once": rl.Blocked("not ours"),  # it may not run elsewhere: told, retried
                "direct ran there": rl.LostThere("not ours")},  # what replaced its copy: it is not run again
    "foreign, this run's": dict.fromkeys(VIEWS, rl.Blocked("not ours")),  # it may be running there: never left
    "stale": {"kueue ready": rl.AwaitStale("earlier run"), "kueue reset": rl.Wait(),
              "kueue ended there": rl.AwaitStale("earlier run"), "direct": rl.AwaitStale("earlier run"),
              "direct at most once": rl.AwaitStale("earlier run"), "direct ran there": rl.AwaitStale("earlier run")},
    "stale stuck": {"kueue ready": STUCK, "kueue reset": rl.Wait(),
                    "kueue ended there": rl.LostThere("earlier run", ENDED_THERE), "direct": STUCK,
                    "direct at most once": STUCK, "direct ran there": rl.LostThere("earlier run")},
    "gone": {"kueue ready": LOST, "kueue reset": LOST, "kueue ended there": rl.LostThere("deleted there", ENDED_THERE),
             "direct": LOST, "direct at most once": LOST, "direct ran there": LOST},
    "held": {"kueue ready": rl.Held(False), "kueue reset": rl.Held(False), "kueue ended there": rl.Held(True),
             "direct": rl.Held(False), "direct at most once": rl.Held(False), "direct ran there": rl.Held(False)},
    "finished": {"kueue ready": rl.Finish("Failed", "step failed"), "kueue reset": rl.Wait(),
                 "kueue ended there": ENDED, "direct": rl.Finish("Failed", "step failed"),
                 "direct at most once": rl.Finish("Failed", "step failed"),
                 "direct ran there": rl.Finish("Failed", "step failed")},
}  # fmt: skip
for _same, _as in (("created", "absent"), ("unlisted", "absent"), ("in sync", "absent")):
    EXPECTED[_same] = EXPECTED[_as]
for _again in ("vanished", "behind", "adopted"):
    EXPECTED[_again] = dict.fromkeys(VIEWS, AGAIN)


@pytest.mark.parametrize(
    ("outcome", "view"), [(o, v) for o in OUTCOMES for v in VIEWS], ids=[f"{o}-{v}" for o in OUTCOMES for v in VIEWS]
)
def test_each_copy_outcome_means_one_step_for_each_view(outcome: str, view: str) -> None:
    assert rl.after_copy(VIEWS[view], OUTCOMES[outcome]) == EXPECTED[outcome][view]


def test_every_outcome_and_view_has_a_row() -> None:
    assert sorted(EXPECTED) == sorted(OUTCOMES)
    assert all(sorted(row) == sorted(VIEWS) for row in EXPECTED.values())


def test_what_a_view_asks_of_the_copy() -> None:
    assert VIEWS["kueue ready"].want is Want.RUN
    assert VIEWS["kueue reset"].want is Want.OBSERVE
    assert VIEWS["kueue ended there"].want is Want.FINAL  # read live: its final status is not lost
    assert VIEWS["direct"].want is Want.RUN


@pytest.mark.parametrize(
    ("view", "expected"),
    [
        (rl.RunView("w1", 900.0, lost_for=0.0), rl.AwaitWorker(900.0, 900.0)),
        (rl.RunView("w1", 900.0, lost_for=100.0), rl.AwaitWorker(800.0, 900.0)),
        (
            rl.RunView("w1", 900.0, lost_for=900.0),
            rl.Leave(rl.Cause.LOST, "unreachable for more than 900s", "unreachable for more than 900s"),
        ),
        (rl.RunView("w1", 900.0, lost_for=901.0, at_most_once=True), rl.FailLost(900.0)),
        (rl.RunView("w1", 900.0, lost_for=100.0, at_most_once=True), rl.AwaitWorker(800.0, 900.0)),
        # Not tried yet by this process (a replica that took over): nothing to tell, looked at again.
        (rl.RunView("w1", 900.0, lost_for=100.0, settling=True), rl.Wait(800.0)),
        (rl.RunView("w1", 900.0, lost_for=1000.0, settling=True), rl.Wait(rl.SETTLING_RECHECK)),
    ],
    ids=[
        "just lost",
        "lost a while",
        "lost past the timeout",
        "at most once: failed",
        "at most once: waited",
        "settling",
        "settling past the timeout",
    ],
)
def test_an_unreachable_worker_is_waited_for_then_left(view: rl.RunView, expected: rl.Step) -> None:
    assert rl.unreachable(view) == expected


def test_a_finished_run_is_kept_for_its_retention_then_removed() -> None:
    assert rl.after_finish(30.0) == rl.Retain(30.0)
    assert rl.after_finish(0.0) == rl.Remove()
