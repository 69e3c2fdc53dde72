"""Direct-mode placement and the label selectors it reads: every rule, and the explanation naming every worker."""

from __future__ import annotations

import pytest

from multikueue.config import Placement
from multikueue.dispatch.placement import WorkerView, decide
from multikueue.selectors import parse


def worker(name: str, running: int = 0, **labels: str) -> WorkerView:
    return WorkerView(name, labels, connected=True, serves_kind=True, running=running)


@pytest.mark.parametrize(
    ("text", "labels", "expected"),
    [
        ("tier=cloud", {"tier": "cloud"}, True),
        ("tier==cloud", {"tier": "edge"}, False),
        ("tier!=cloud", {}, True),
        ("tier in (cloud, edge),!legacy", {"tier": "edge"}, True),
        ("tier in (cloud, edge),!legacy", {"tier": "edge", "legacy": ""}, False),
        ("zone notin (z1)", {"zone": "z1"}, False),
        ("gpu", {"gpu": "a100"}, True),
        ("kubernetes.io/arch=amd64", {"kubernetes.io/arch": "amd64"}, True),
        ("", {}, True),
    ],
)
def test_label_selectors(text: str, labels: dict[str, str], expected: bool) -> None:
    assert parse(text).matches(labels) is expected


@pytest.mark.parametrize("text", ["a in ()", "=b", "a b", "a=(b)", "a in (b"])
def test_bad_selectors_quote_the_part(text: str) -> None:
    with pytest.raises(ValueError, match="label selector"):
        parse(text)


def test_least_loaded_wins_and_ties_go_by_name() -> None:
    decision = decide(Placement(), [worker("b", 1), worker("a", 1), worker("c", 0)])
    assert decision.worker == "c"
    assert decide(Placement(), [worker("b", 1), worker("a", 1)]).worker == "a"


def test_every_worker_is_explained() -> None:
    workers = [
        worker("w1", 2, tier="cloud"),
        WorkerView("w2", {}, connected=False, serves_kind=True, running=0),
        WorkerView("w3", {}, connected=True, serves_kind=False, running=0),
        worker("w4", 0, tier="onprem"),
        worker("w5", 5, tier="cloud"),
        worker("w6", 0, tier="cloud"),
    ]
    decision = decide(
        Placement(worker_selector="tier", max_per_worker=5),
        workers,
        object_selector="tier=cloud",
        avoid={"w6": "the object failed there before"},
    )
    assert decision.worker == "w1"
    assert decision.message == (
        "placed on w1; w1: fits (2/5 running, score 0.40); w2: rejected: not connected; "
        "w3: rejected: does not serve this kind; "
        "w4: rejected: labels do not match the object's worker-selector (tier in (cloud)); "
        "w5: rejected: full (5/5 running); w6: rejected: the object failed there before"
    )


def test_spill_over_uses_a_later_tier_only_when_earlier_ones_are_full() -> None:
    placement = Placement(tiers=("cost=cheap", "cost=dear"), max_per_worker=1)
    workers = [worker("cheap", 0, cost="cheap"), worker("dear", 0, cost="dear"), worker("other", 0)]
    first = decide(placement, workers)
    assert first.worker == "cheap"
    assert "dear: rejected: in spill-over tier 2, used only when tier 1 has no room" in first.message
    assert "other: rejected: in no spill-over tier" in first.message
    full = [worker("cheap", 1, cost="cheap"), worker("dear", 0, cost="dear")]
    assert decide(placement, full).worker == "dear"


def test_no_worker_fits_says_why_and_a_bad_object_selector_is_named() -> None:
    decision = decide(Placement(max_per_worker=1), [worker("w1", 1)])
    assert decision.worker is None
    assert decision.message == "no worker fits; w1: rejected: full (1/1 running)"
    bad = decide(Placement(), [worker("w1")], object_selector="tier in (")
    assert bad.worker is None
    assert bad.message.startswith("no worker fits: annotation multikueue.x-k8s.io/worker-selector: label selector")


def test_a_run_no_worker_can_ever_fit_is_told_apart_from_one_that_waits_for_room() -> None:
    gpu = Placement(worker_selector="gpu")
    lost = WorkerView("w3", {"gpu": "a100"}, connected=False, serves_kind=True, running=0)
    assert decide(gpu, [worker("w1"), worker("w2")]).never, "no worker has the label"
    assert decide(Placement(), [worker("w1")], avoid={"w1": "lost there"}).never
    assert decide(Placement(), [worker("w1")], object_selector="tier in (").never, "an unreadable selector"
    assert not decide(gpu, [worker("w1"), lost]).never, "the lost worker may come back"
    assert not decide(Placement(max_per_worker=1), [worker("w1", 1)]).never, "full: room will free"
    assert not decide(Placement(tiers=("a=1", "b=1"), max_per_worker=1),
                      [worker("w1", 1, a="1"), worker("w2", 0, b="1")]).never  # fmt: skip
    assert not decide(Placement(), []).never, "no workers yet: one may be added"
    assert not decide(Placement(), [worker("w1")]).never, "placed"
