"""Kueue mode's state machine as a decision (``dispatch/decision.py``): one table row per branch, in the style of
Kueue's ``workload_test.go``. No API server and no waiting: the clock is a number in the snapshot."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.config import DISPATCHER_ALL_AT_ONCE, DISPATCHER_INCREMENTAL
from multikueue.dispatch import decision as d
from multikueue.dispatch import run_lifecycle as rl
from multikueue.dispatch.placement import Selection, selection
from multikueue.specdigest import summarized

Object = dict[str, Any]
CHECK = "ac"
SPEC: Object = {"queueName": "q", "podSets": [{"name": "main", "count": 1}]}


def cond(
    kind: str, status: str = "True", reason: str = "", message: str = "", at: str = "2026-01-01T00:00:00Z"
) -> Object:
    return {"type": kind, "status": status, "reason": reason or kind, "message": message, "lastTransitionTime": at}


def workload(
    *conditions: Object,
    state: str = "Pending",
    cluster: str | None = None,
    nominated: list[str] | None = None,
    others: tuple[str, ...] = (),
    spec: Object | None = None,
) -> Object:
    status: Object = {
        "conditions": list(conditions),
        "admissionChecks": [{"name": CHECK, "state": state}, *({"name": f"other-{s}", "state": s} for s in others)],
    }
    if cluster is not None:
        status["clusterName"] = cluster
    if nominated is not None:
        status["nominatedClusterNames"] = nominated
    return {"metadata": {"name": "wl", "namespace": "ns"}, "spec": dict(spec or SPEC), "status": status}


RESERVED = cond("QuotaReserved")


def replacing(wl: Object) -> Object:
    """The Workload with this controller's check saying it replaces the recorded worker's copies."""
    wl["status"]["admissionChecks"][0]["message"] = d.REPLACING
    return wl


def copy_(*conditions: Object, spec: Object | None = None) -> Object:
    return workload(*conditions, spec=spec)


def group(workload: Object, worker_copies: dict[str, Object] | None = None, **kwargs: Any) -> d.Group:
    options: dict[str, Any] = {
        "clusters": ("w1", "w2"),
        "connected": ("w1", "w2"),
        "serving": {"w1": True, "w2": True},
        "now": 1000.0,
        "lost_timeout": 900.0,
    }
    options.update(kwargs)
    return d.Group(workload=workload, check=CHECK, worker_copies=worker_copies or {}, **options)


CASES: list[tuple[str, d.Group, d.Step]] = [
    # 1. Finished, or without quota: nothing may run anywhere.
    ("finished on the manager", group(workload(RESERVED, cond("Finished"))), d.RemoveEverywhere(None)),
    ("no quota", group(workload(), {"w1": copy_()}), d.RemoveEverywhere(None)),
    (
        "no quota, a worker lost: looked at again after the lost timeout",
        group(workload(), connected=("w1",)),
        d.RemoveEverywhere(900.0),
    ),
    # 2. A worker finished it.
    (
        "finished on a worker",
        group(
            workload(RESERVED, state="Ready", cluster="w2"),
            {"w2": copy_(cond("Finished", reason="Succeeded", message="done"))},
        ),
        d.FinishedOnWorker("w2", "Succeeded", "done"),
    ),
    (
        "the earliest finish wins",
        group(
            workload(RESERVED, state="Ready"),
            {
                "w1": copy_(cond("Finished", reason="Failed", at="2026-01-01T00:00:09Z")),
                "w2": copy_(cond("Finished", reason="Succeeded", at="2026-01-01T00:00:01Z")),
            },
        ),
        d.FinishedOnWorker("w2", "Succeeded", ""),
    ),
    (
        "out of sync while Ready",
        group(workload(RESERVED, state="Ready", cluster="w1"), {"w1": copy_(cond("Finished", reason="OutOfSync"))}),
        d.ResetOutOfSync("w1"),
    ),
    (
        "out of sync while Pending",
        group(workload(RESERVED), {"w1": copy_(cond("Finished", reason="OutOfSync"))}),
        d.Wait(),
    ),
    # 3. A worker evicted it.
    (
        "evicted on both sides",
        group(workload(RESERVED, cond("Evicted"), state="Ready", cluster="w1"), {"w1": copy_(cond("Evicted"))}),
        d.KeepEvicted("w1"),
    ),
    (
        "evicted on the worker while Ready",
        group(workload(RESERVED, state="Ready", cluster="w1"), {"w1": copy_(cond("Evicted"))}),
        d.ResetEvicted("w1"),
    ),
    (
        "evicted on a worker while Pending: the race goes on",
        group(workload(RESERVED, nominated=["w1", "w2"]), {"w1": copy_(cond("Evicted")), "w2": copy_()}),
        d.Nominate(("w1", "w2"), False, (), (), ()),
    ),
    (
        "a loser's copy evicted (preempted there before its deletion went through): the winner's run goes on",
        group(
            workload(RESERVED, state="Ready", cluster="w1"),
            {"w1": copy_(cond("Admitted")), "w2": copy_(cond("Evicted"))},
        ),
        d.RunOnWinner("w1", ("w2",), deactivate=False),
    ),
    (
        "a loser's copy finished: it says nothing of the run on the winner",
        group(
            workload(RESERVED, state="Ready", cluster="w1"),
            {"w1": copy_(cond("Admitted")), "w2": copy_(cond("Finished", reason="Succeeded"))},
        ),
        d.RunOnWinner("w1", ("w2",), deactivate=False),
    ),
    # 4. A copy whose spec no longer matches.
    (
        "a priority change",
        group(workload(RESERVED, spec={**SPEC, "priority": 5}), {"w1": copy_()}),
        d.CarryPriority("w1"),
    ),
    (
        "any other change",
        group(workload(RESERVED, spec={**SPEC, "queueName": "other"}), {"w1": copy_()}),
        d.ReplaceCopy("w1"),
    ),
    (
        "a priority change, the copy as the worker caches keep it",
        group(workload(RESERVED, spec={**SPEC, "priority": 5}), {"w1": summarized(copy_())}),
        d.CarryPriority("w1"),
    ),
    (
        "any other change, the copy as the worker caches keep it",
        group(workload(RESERVED, spec={**SPEC, "queueName": "other"}), {"w1": summarized(copy_())}),
        d.ReplaceCopy("w1"),
    ),
    (
        "a copy as the worker caches keep it, unchanged",
        group(
            workload(RESERVED, spec={**SPEC, "priority": 5}, nominated=["w1", "w2"]),
            {"w1": summarized(copy_(spec={**SPEC, "priority": 5})), "w2": copy_(spec={**SPEC, "priority": 5})},
        ),
        d.Nominate(("w1", "w2"), False, (), (), ()),
    ),
    (
        "preemption gates are the manager's own",
        group(
            workload(RESERVED, spec={**SPEC, "preemptionGates": [{"name": "g"}]}, nominated=["w1", "w2"]),
            {"w1": copy_(), "w2": copy_()},
        ),
        d.Nominate(("w1", "w2"), False, (), (), ()),
    ),
    # 5. The first worker to admit it wins.
    (
        "Ready, its copies gone on its worker after the run ran there: not run again",
        group(workload(RESERVED, state="Ready", cluster="w1"), {}, holding={"w1": False}, ran_there=True),
        d.lost_on_worker("w1"),
    ),
    (
        "Ready, its Workload copy gone, its object's cache not listed yet: it may be there",
        group(workload(RESERVED, state="Ready", cluster="w1"), {}, holding={"w1": None}, ran_there=True),
        d.Wait(d.HOLDING_UNKNOWN_RECHECK),
    ),
    (
        "Ready, its Workload copy gone, its object still there: re-admitted, as Kueue does",
        group(workload(RESERVED, state="Ready", cluster="w1"), {}, holding={"w1": True}, ran_there=True),
        d.RetryAdmission("Admitting remote no longer exists"),
    ),
    (
        "Ready on a worker whose connection was dropped: lost since the drop",
        group(workload(RESERVED, state="Ready", cluster="w1"), {}, connected=("w2",), lost_since={"w1": 90.0}),
        rl.Leave(rl.Cause.LOST, "unreachable for more than 900s", "unreachable for more than 900s"),
    ),
    (
        "admitted on w2: w1's copy goes",
        group(workload(RESERVED), {"w1": copy_(), "w2": copy_(cond("Admitted"))}),
        d.RunOnWinner("w2", ("w1",), deactivate=False),
    ),
    (
        "the earliest admission wins",
        group(
            workload(RESERVED),
            {
                "w1": copy_(cond("Admitted", at="2026-01-01T00:00:05Z")),
                "w2": copy_(cond("Admitted", at="2026-01-01T00:00:02Z")),
            },
        ),
        d.RunOnWinner("w2", ("w1",), deactivate=False),
    ),
    (
        "nothing recorded yet, but the object is already on a worker: that worker wins, not an earlier admission",
        group(
            workload(RESERVED),
            {
                "w1": copy_(cond("Admitted", at="2026-01-01T00:00:05Z")),
                "w2": copy_(cond("Admitted", at="2026-01-01T00:00:02Z")),
            },
            holding={"w1": True, "w2": False},
        ),
        d.RunOnWinner("w1", ("w2",), deactivate=False),
    ),
    (
        "nothing recorded, and a worker's objects not listed yet: no winner chosen until they are",
        group(
            workload(RESERVED),
            {
                "w1": copy_(cond("Admitted", at="2026-01-01T00:00:05Z")),
                "w2": copy_(cond("Admitted", at="2026-01-01T00:00:02Z")),
            },
            holding={"w1": None, "w2": False},
        ),
        d.Wait(d.HOLDING_UNKNOWN_RECHECK),
    ),
    (
        "nothing recorded, and a worker not tried yet (a replica just took over): it may hold the run, no winner yet",
        group(
            workload(RESERVED),
            {"w2": copy_(cond("Admitted", at="2026-01-01T00:00:02Z"))},
            connected=("w2",),
            holding={"w2": False},
            settling=("w1",),
            lost_since={"w1": 990.0},
        ),
        d.Wait(d.HOLDING_UNKNOWN_RECHECK),
    ),
    (
        "nothing recorded, and the other worker tried and lost: the connected worker that admitted wins",
        group(
            workload(RESERVED),
            {"w2": copy_(cond("Admitted", at="2026-01-01T00:00:02Z"))},
            connected=("w2",),
            holding={"w2": False},
            lost_since={"w1": 990.0},
        ),
        d.RunOnWinner("w2", (), deactivate=False),
    ),
    (
        "a worker not tried yet does not hold back one already known to hold the run",
        group(
            workload(RESERVED),
            {"w2": copy_(cond("Admitted", at="2026-01-01T00:00:02Z"))},
            connected=("w2",),
            holding={"w2": True},
            settling=("w1",),
        ),
        d.RunOnWinner("w2", (), deactivate=False),
    ),
    (
        "an object on a worker whose copy is not admitted does not make it the winner",
        group(
            workload(RESERVED),
            {"w1": copy_(), "w2": copy_(cond("Admitted", at="2026-01-01T00:00:02Z"))},
            holding={"w1": True, "w2": False},
        ),
        d.RunOnWinner("w2", ("w1",), deactivate=False),
    ),
    (
        "the recorded worker stays the winner, even if another admitted earlier",
        group(
            workload(RESERVED, state="Ready", cluster="w2"),
            {
                "w1": copy_(cond("Admitted", at="2026-01-01T00:00:01Z")),
                "w2": copy_(cond("Admitted", at="2026-01-01T00:00:05Z")),
            },
        ),
        d.RunOnWinner("w2", ("w1",), deactivate=False),
    ),
    (
        "a replica that took over sees only another worker's admitted copy: no second winner",
        group(workload(RESERVED, state="Ready", cluster="w1"), {"w2": copy_(cond("Admitted"))}, connected=("w2",)),
        rl.AwaitWorker(900.0, 900.0),
    ),
    (
        "admitted, evicted on the manager: deactivated there",
        group(
            workload(RESERVED, cond("Evicted"), state="Ready", cluster="w1"),
            {"w1": copy_(cond("Admitted"))},
        ),
        d.RunOnWinner("w1", (), deactivate=True),
    ),
    (
        "Ready, the admitting worker lost for less than the timeout",
        group(workload(RESERVED, state="Ready", cluster="w2"), connected=("w1",), lost_since={"w2": 900.0}),
        rl.AwaitWorker(800.0, 900.0),
    ),
    (
        "Ready, not tried yet by a replica that took over long after the worker's outage clock began: still waited",
        group(
            workload(RESERVED, state="Ready", cluster="w2"), connected=("w1",), settling=("w2",), lost_since={"w2": 0.0}
        ),
        d.Wait(d.HOLDING_UNKNOWN_RECHECK),
    ),
    (
        "Ready, its copies gone while this dispatcher replaces them: re-admitted, not lost",
        group(replacing(workload(RESERVED, state="Ready", cluster="w1")), {}, holding={"w1": False}, ran_there=True),
        d.RetryAdmission("Admitting remote no longer exists"),
    ),
    (
        "Ready, the admitting worker not tried yet by a replica that took over: waited for, nothing told yet",
        group(workload(RESERVED, state="Ready", cluster="w2"), connected=("w1",), settling=("w2",)),
        d.Wait(900.0),
    ),
    (
        # The run's object may be there (created, or a create whose answer was lost): never nominated elsewhere.
        "Ready, the admitting worker lost, another worker admitted a copy left from the race: nothing moves",
        group(
            workload(RESERVED, state="Ready", cluster="w1"),
            {"w2": copy_(cond("Admitted"))},
            connected=("w2",),
            lost_since={"w1": 990.0},
        ),
        rl.AwaitWorker(890.0, 900.0),
    ),
    (
        "Ready, the admitting worker lost for longer",
        group(workload(RESERVED, state="Ready", cluster="w2"), connected=("w1",), lost_since={"w2": 50.0}),
        rl.Leave(rl.Cause.LOST, "unreachable for more than 900s", "unreachable for more than 900s"),
    ),
    (
        "Ready, the admitting worker never seen since start: the full timeout",
        group(workload(RESERVED, state="Ready", cluster="w2"), connected=("w1",)),
        rl.AwaitWorker(900.0, 900.0),
    ),
    (
        "Ready, the admitting copy gone",
        group(workload(RESERVED, state="Ready", cluster="w1")),
        d.RetryAdmission("Admitting remote no longer exists"),
    ),
    ("Ready with no admitting cluster", group(workload(RESERVED, state="Ready")), d.RetryAdmission(d.UNEXPECTED_READY)),
    # 6. Nominate and copy.
    (
        "AllAtOnce: every connected worker",
        group(workload(RESERVED)),
        d.Nominate(("w1", "w2"), True, ("w1", "w2"), (), ()),
    ),
    (
        "AllAtOnce: already nominated and copied",
        group(workload(RESERVED, nominated=["w2", "w1"]), {"w1": copy_(), "w2": copy_()}),
        d.Nominate(("w1", "w2"), False, (), (), ()),
    ),
    (
        "AllAtOnce: a worker without the kind is not nominated, its copy removed",
        group(
            workload(RESERVED, nominated=["w1", "w2"]),
            {"w1": copy_(), "w2": copy_()},
            serving={"w1": True, "w2": False},
            kind="PipelineRun.v1.tekton.dev",
        ),
        d.Nominate(
            ("w1",), True, (), ("w2",), (), left_out="Not nominated: w2: does not serve PipelineRun.v1.tekton.dev"
        ),
    ),
    (
        "AllAtOnce: a worker not known yet to serve the kind keeps its copy",
        group(workload(RESERVED, nominated=["w1"]), {"w1": copy_(), "w2": copy_()}, serving={"w1": True, "w2": None}),
        d.Nominate(("w1",), False, (), (), ()),
    ),
    (
        "AllAtOnce: a lost worker is not nominated",
        group(workload(RESERVED), connected=("w1",)),
        d.Nominate(("w1",), True, ("w1",), (), ()),
    ),
    ("another check not Ready yet", group(workload(RESERVED, others=("Pending",))), d.Wait()),
    (
        "another check Ready",
        group(workload(RESERVED, others=("Ready",))),
        d.Nominate(("w1", "w2"), True, ("w1", "w2"), (), ()),
    ),
    ("Pending with a cluster recorded", group(workload(RESERVED, cluster="w1")), d.Wait()),
    ("Retry: nothing until Kueue resets it", group(workload(RESERVED, state="Retry")), d.Wait()),
    (
        "external dispatcher: its nominations, a missing worker retried",
        group(workload(RESERVED, nominated=["w2", "w3"]), dispatcher="example.com/mine", clusters=("w1", "w2", "w3")),
        d.Nominate(("w2", "w3"), False, ("w2",), (), ("w3",)),
    ),
]


@pytest.mark.parametrize(("name", "given", "expected"), CASES, ids=[c[0] for c in CASES])
def test_decide(name: str, given: d.Group, expected: d.Step) -> None:
    assert d.decide(given) == expected


INCREMENTAL: dict[str, Any] = {
    "dispatcher": DISPATCHER_INCREMENTAL,
    "clusters": ("w1", "w2", "w3"),
    "connected": ("w1", "w2", "w3"),
    "step_size": 1,
    "round_length": 300.0,
    "now": 1000.0,
}


@pytest.mark.parametrize(
    ("name", "nominated", "round_started", "expected"),
    [
        ("the first round", None, None, d.Nominate(("w1",), True, ("w1",), (), (), 300.0, 1000.0)),
        ("within a round: wait for its end", ["w1"], 900.0, d.Nominate(("w1",), False, ("w1",), (), (), 200.0)),
        (
            "the round is over: one more",
            ["w1"],
            600.0,
            d.Nominate(("w1", "w2"), True, ("w1", "w2"), (), (), 300.0, 1000.0),
        ),
        (
            "every worker nominated",
            ["w1", "w2", "w3"],
            600.0,
            d.Nominate(("w1", "w2", "w3"), False, ("w1", "w2", "w3"), (), ()),
        ),
    ],
)
def test_the_incremental_dispatcher_adds_step_size_workers_each_round(
    name: str, nominated: list[str] | None, round_started: float | None, expected: d.Nominate
) -> None:
    given = group(workload(RESERVED, nominated=nominated), round_started=round_started, **INCREMENTAL)
    assert d.decide(given) == expected


def test_all_at_once_is_the_default() -> None:
    assert group(workload(RESERVED)).dispatcher == DISPATCHER_ALL_AT_ONCE


def test_a_lost_admitting_worker_is_told_on_the_check() -> None:
    step = d.decide(group(workload(RESERVED, state="Ready", cluster="w2"), connected=("w1",), lost_since={"w2": 990.0}))
    assert step == rl.AwaitWorker(890.0, 900.0)  # the check's message: tests/unit/test_run_lifecycle.py


# The run's worker selection (beyond Kueue): w1 is in the EU, w2 in the US.
LABELS = {"w1": {"region": "eu"}, "w2": {"region": "us"}}


def selected(own: str | None, kind: str = "") -> Selection:
    return selection(LABELS, kind, own)


NO_MATCH = (
    "No worker matches the run's worker selection (the object's worker-selector \"region=asia\"): "
    "w1: labels do not match the object's worker-selector (region in (asia)); "
    "w2: labels do not match the object's worker-selector (region in (asia))"
)

SELECTION_CASES: list[tuple[str, d.Group, d.Step]] = [
    (
        "AllAtOnce: only the workers the run selects are nominated",
        group(workload(RESERVED), selection=selected("region=eu")),
        d.Nominate(("w1",), True, ("w1",), (), ()),
    ),
    (
        "AllAtOnce: the kind's selector and the object's together",
        group(workload(RESERVED), selection=selected("region notin (eu)", kind="region")),
        d.Nominate(("w2",), True, ("w2",), (), ()),
    ),
    (
        "AllAtOnce: a worker left out since (its labels changed) loses its nomination and its copy",
        group(
            workload(RESERVED, nominated=["w1", "w2"]), {"w1": copy_(), "w2": copy_()}, selection=selected("region=us")
        ),
        d.Nominate(("w2",), True, (), ("w1",), ()),
    ),
    (
        "no worker matches: nominated nowhere, told why, naming the selector",
        group(workload(RESERVED, nominated=["w1"]), {"w1": copy_()}, selection=selected("region=asia")),
        d.Nominate((), True, (), ("w1",), (), unmatched=NO_MATCH),
    ),
    (
        "an unreadable selector on the object: nominated nowhere, the annotation named",
        group(workload(RESERVED), selection=selected("region in eu")),
        d.Nominate(
            (),
            False,
            (),
            (),
            (),
            unmatched=(
                "No worker matches the run's worker selection: annotation multikueue.x-k8s.io/worker-selector: "
                "label selector 'region in eu': cannot read 'region in eu'"
            ),
        ),
    ),
    (
        "Incremental: the rounds skip the workers left out",
        group(workload(RESERVED), selection=selected("region=us"), **INCREMENTAL),
        d.Nominate(("w2",), True, ("w2",), (), (), 300.0, 1000.0),
    ),
    (
        "external dispatcher: its nominations narrowed to the selection",
        group(
            workload(RESERVED, nominated=["w1", "w2"]), dispatcher="example.com/mine", selection=selected("region=us")
        ),
        d.Nominate(("w2",), False, ("w2",), (), ()),
    ),
    (
        "the race: a copy admitted on a worker left out does not win",
        group(
            workload(RESERVED, nominated=["w1", "w2"]),
            {"w1": copy_(RESERVED, cond("Admitted")), "w2": copy_()},
            selection=selected("region=us"),
            holding={"w1": False, "w2": False},
        ),
        d.Nominate(("w2",), True, (), ("w1",), ()),
    ),
    (
        "the race: ... unless it already holds the run",
        group(
            workload(RESERVED, nominated=["w1", "w2"]),
            {"w1": copy_(RESERVED, cond("Admitted")), "w2": copy_()},
            selection=selected("region=us"),
            holding={"w1": True, "w2": False},
        ),
        d.RunOnWinner("w1", ("w2",), deactivate=False),
    ),
    (
        "a recorded worker runs on whatever its labels say now (required while waiting only)",
        group(
            workload(RESERVED, state="Ready", cluster="w1"),
            {"w1": copy_(RESERVED, cond("Admitted"))},
            selection=selected("region=us"),
        ),
        d.RunOnWinner("w1", (), deactivate=False),
    ),
]


@pytest.mark.parametrize(("name", "given", "expected"), SELECTION_CASES, ids=[c[0] for c in SELECTION_CASES])
def test_the_runs_worker_selection_narrows_its_nominations(name: str, given: d.Group, expected: d.Step) -> None:
    assert d.decide(given) == expected


EXCEEDS = ("couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default, previously "
           "considered podsets requests (0) + current podset request (10) > maximum capacity (8)")  # fmt: skip
BUSY = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 2 more needed"


def pending_copy(message: str, reason: str = "Pending") -> Object:
    return copy_(cond("QuotaReserved", "False", reason, message))


NEVER = {"w1": pending_copy(EXCEEDS), "w2": pending_copy("LocalQueue q doesn't exist", "Misconfigured")}
GIVE_UP: dict[str, Any] = {"inadmissible_timeout": 60.0}

INADMISSIBLE_CASES: list[tuple[str, d.Group, d.Step]] = [
    (
        "every worker says never: the clock starts, looked at again when it would run out",
        group(workload(RESERVED, nominated=["w1", "w2"]), NEVER, **GIVE_UP),
        d.Nominate(("w1", "w2"), False, (), (), (), requeue_after=60.0, inadmissible=True),
    ),
    (
        "... and still after the timeout: the check is Rejected with each worker's reason",
        group(workload(RESERVED, nominated=["w1", "w2"]), NEVER, inadmissible_since=900.0, **GIVE_UP),
        d.GiveUp({"w1": f"Pending: {EXCEEDS}", "w2": "Misconfigured: LocalQueue q doesn't exist"}),
    ),
    (
        "off by default: it waits for ever, as in Kueue",
        group(workload(RESERVED, nominated=["w1", "w2"]), NEVER, inadmissible_since=0.0),
        d.Nominate(("w1", "w2"), False, (), (), ()),
    ),
    (
        "one worker only busy: it may admit the run later",
        group(
            workload(RESERVED, nominated=["w1", "w2"]),
            {**NEVER, "w2": pending_copy(BUSY)},
            inadmissible_since=0.0,
            **GIVE_UP,
        ),
        d.Nominate(("w1", "w2"), False, (), (), ()),
    ),
    (
        "a worker of its MultiKueueConfig lost: it may admit the run once back",
        group(
            workload(RESERVED, nominated=["w1"]),
            {"w1": NEVER["w1"]},
            connected=("w1",),
            inadmissible_since=0.0,
            **GIVE_UP,
        ),
        d.Nominate(("w1",), False, (), (), ()),
    ),
    (
        "a worker the run does not select does not count",
        group(
            workload(RESERVED, nominated=["w2"]),
            {"w2": NEVER["w2"]},
            selection=selection(LABELS, "", "region=us"),
            inadmissible_since=0.0,
            **GIVE_UP,
        ),
        d.GiveUp({"w2": "Misconfigured: LocalQueue q doesn't exist"}),
    ),
    (
        "Incremental: not before every worker has been nominated",
        group(
            workload(RESERVED, nominated=["w1"]),
            {"w1": NEVER["w1"]},
            round_started=990.0,
            inadmissible_since=0.0,
            **{**INCREMENTAL, "clusters": ("w1", "w2"), "connected": ("w1", "w2")},
            **GIVE_UP,
        ),
        d.Nominate(("w1",), False, (), (), (), 290.0),
    ),
]


@pytest.mark.parametrize(("name", "given", "expected"), INADMISSIBLE_CASES, ids=[c[0] for c in INADMISSIBLE_CASES])
def test_a_run_no_workers_kueue_can_ever_admit_gives_up_after_the_timeout(
    name: str, given: d.Group, expected: d.Step
) -> None:
    assert d.decide(given) == expected


def test_giving_up_names_each_worker_and_its_reason() -> None:
    step = d.GiveUp({"w2": "Misconfigured: LocalQueue q doesn't exist", "w1": "ExceedsMaxQuota: too big"})
    assert step.message == (
        "No worker's Kueue can admit the workload: "
        'worker "w1": ExceedsMaxQuota: too big; worker "w2": Misconfigured: LocalQueue q doesn\'t exist'
    )


def test_a_run_whose_selected_workers_lack_the_kind_is_told_so() -> None:
    given = group(workload(RESERVED), selection=selected("region=us"), serving={"w1": True, "w2": False})
    step = d.decide(given)
    assert isinstance(step, d.Nominate)
    assert step.nominated == ()
    assert step.unmatched == (
        "No worker matches the run's worker selection (the object's worker-selector \"region=us\"): "
        "the workers it selects do not serve the kind: w2"
    )


def test_a_finished_run_within_its_retention_keeps_its_object_and_loses_its_workload_copies() -> None:
    finished = workload(RESERVED, cond("Finished"), state="Ready", cluster="w1")
    assert d.decide(group(finished, retained_for=30.0)) == d.RemoveEverywhere(30.0, keep_objects=True)
    assert d.decide(group(finished, retained_for=0.0)) == d.RemoveEverywhere(None)


@pytest.mark.parametrize(
    ("listed", "recorded", "holders", "expected"),
    [
        (("w1", "w2"), "", ("w1", "w2"), ()),  # every holder listed: the pass reads them all
        (("w1",), "", ("w1", "w2"), ("w2",)),  # w2 left the list while the run waits: its copy goes
        (("w1",), "w2", ("w1", "w2"), ()),  # the recorded worker's copy is the run's lifecycle, listed or not
        (("w1",), "w1", ("w1", "w2", "w3"), ("w2", "w3")),  # losers outside the list go as losers do
        ((), "", ("w1",), ("w1",)),  # a list emptied: nothing may wait anywhere
        (("w1", "w2"), "", (), ()),
    ],
)
def test_strays_are_copies_outside_the_list_but_the_recorded_workers(
    listed: tuple[str, ...], recorded: str, holders: tuple[str, ...], expected: tuple[str, ...]
) -> None:
    assert d.strays(listed, recorded, holders) == expected


@pytest.mark.parametrize(
    ("listed", "open_", "recorded", "expected"),
    [
        (("w1", "w2"), None, "", ("w1", "w2")),  # a list written by hand, as it is
        (("w1",), None, "w2", ("w1", "w2")),  # its recorded worker dropped by hand: still read, its run goes on
        (("w1", "w2"), ("w1",), "", ("w1",)),  # w2 kept only for its runs: no new run there
        (("w1", "w2"), ("w1", "w2"), "w2", ("w1", "w2")),
        (("w2",), (), "", ()),  # only a cluster kept for its runs: no worker for a new run (said: NONE_OPEN)
        (("w1", "w2"), (), "w3", ("w3",)),  # recorded elsewhere: that worker alone
    ],
)
def test_a_runs_workers_are_its_open_list_and_always_its_recorded_worker(
    listed: tuple[str, ...], open_: tuple[str, ...] | None, recorded: str, expected: tuple[str, ...]
) -> None:
    assert d.run_workers(listed, open_, recorded) == expected


def test_a_stray_holding_the_runs_object_is_left_to_the_lifecycle() -> None:
    """A copy outside the list whose worker holds the run's object: a record this pass has not seen (a lost answer,
    a stale cache) may name that worker; deleting it would end a run that runs there."""
    assert d.strays(("w1",), "", ("w1", "w2", "w3"), holding=("w2",)) == ("w3",)


@pytest.mark.parametrize("dispatcher", [DISPATCHER_INCREMENTAL, "example.com/external-dispatcher"])
def test_a_nominated_worker_that_left_the_runs_workers_is_nominated_no_longer(dispatcher: str) -> None:
    """w2 nominated, then out of the run's workers (deselected, or the list edited), still connected: kept in the
    nominations it was reported missing on every pass ("no remote client for nominated cluster"), for ever."""
    wl = workload(RESERVED, nominated=["w1", "w2"])
    options: dict[str, Any] = {"dispatcher": dispatcher, "round_length": 300.0, "step_size": 2}
    for started in (990.0, 100.0):  # within the round and after it
        step = d.decide(group(wl, clusters=("w1", "w3"), connected=("w1", "w3"), round_started=started, **options))
        assert isinstance(step, d.Nominate), step
        assert step.missing == (), step
        assert "w2" not in step.nominated, step


def test_a_run_whose_list_has_no_cluster_open_to_it_is_told_so() -> None:
    """Every cluster of a selector-kept list kept only for the runs recorded there (its selector matching none): a
    new run is nominated nowhere, and its check says why (it once fell back to the whole list: a new run went to a
    cluster kept for its runs only)."""
    step = d.decide(group(workload(RESERVED), clusters=(), connected=(), serving={}))
    assert isinstance(step, d.Nominate), step
    assert step.nominated == (), step
    assert (step.unmatched or "").startswith(d.NONE_OPEN), step


def test_an_incremental_run_whose_nominations_all_left_starts_a_new_round_at_once() -> None:
    """Incremental, one worker a round: w1 nominated at 990, gone from the run's workers at 1000, w2 and w3 open.
    The narrowed nominations were empty and the round held for its 290 s left: nominated nowhere meanwhile."""
    options: dict[str, Any] = {"dispatcher": DISPATCHER_INCREMENTAL, "step_size": 1, "round_length": 300.0}
    step = d.decide(group(workload(RESERVED, nominated=["w1"]), clusters=("w2", "w3"), connected=("w2", "w3"),
                          round_started=990.0, now=1000.0, **options))  # fmt: skip
    assert isinstance(step, d.Nominate), step
    assert step.nominated == ("w2",), step


@pytest.mark.parametrize(
    ("holding", "read", "gone"),
    [
        ({"w2": True}, ("w1", "w2"), ()),  # this admission's object there (an eviction cleared clusterName): read
        ({"w2": False}, ("w1",), ("w2",)),  # a waiting copy left there: a stray
        ({"w2": None}, ("w1",), ()),  # its cache not listed yet: neither read (nominated, waited on) nor removed
    ],
)
def test_a_worker_outside_the_list_is_read_only_while_it_holds_this_admissions_object(
    holding: dict[str, bool | None], read: tuple[str, ...], gone: tuple[str, ...]
) -> None:
    assert d.reading(("w1",), "", ("w1", "w2"), {"w1": False, **holding}) == (read, gone)
