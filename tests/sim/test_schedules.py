"""The simulation's CI budget: schedules of the whole dispatcher (Direct mode, both lost-worker policies) on virtual
time, every invariant checked at every change; ``make simulate`` runs more (tests/sim/__main__.py). And its power:
a dispatcher that breaks a promise is caught."""

from __future__ import annotations

import os

import pytest

from tests.sim import world
from tests.sim.__main__ import run_one

BUDGET = int(os.environ.get("MULTIKUEUE_SIM_SEEDS", "15"))


@pytest.fixture(autouse=True)
def _quiet() -> None:
    from multikueue import logs

    logs.configure(level="critical")


@pytest.mark.parametrize("policy", ["AtLeastOnce", "AtMostOnce"])
def test_every_invariant_holds_on_the_ci_budget_of_schedules(policy: str) -> None:
    violations = [v for seed in range(1, BUDGET + 1) if (v := run_one(seed, policy)[0]) is not None]
    assert not violations, "\n\n".join(violations)


def test_a_schedule_replays_exactly() -> None:
    first, second = (run_one(7, "AtMostOnce") for _ in range(2))
    assert first == second
    assert first[1], "faults were injected"


def test_an_at_most_once_run_sent_again_elsewhere_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """The power of the invariants, on a known-bad variant: the dispatcher configured AtLeastOnce while the world
    holds it to AtMostOnce (a lost worker's run is started again elsewhere)."""
    text = world.config_text
    monkeypatch.setattr(world, "config_text", lambda policy: text("AtLeastOnce"))
    caught = [v for seed in range(1, 41) if (v := run_one(seed, "AtMostOnce")[0]) is not None]
    assert caught, "no schedule of 40 caught a run started twice"
    assert all("AtMostOnce run" in v and "created again" in v for v in caught), caught
