"""``dispatcher.routineRecords: false`` (#46): a run that goes as planned writes no Normal Event and, in Direct mode,
no ``MultiKueuePlacement`` condition; a problem is recorded all the same, and its record cleared when it ends. Each
test runs with the option on and off: what is left out with it off is there with it on."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue_testbed import kueue
from tests.integration.scenario import Scenario
from tests.integration.test_direct import WORKER, direct, notes, placement_condition, submit, succeed

SELECTOR = "multikueue.x-k8s.io/worker-selector"
PLACED = "Placed"


def kueue_mode(routine: bool) -> Any:
    config = f"multiKueue: {{gcInterval: 2s}}\ndispatcher: {{routineRecords: {str(routine).lower()}}}\n"
    return pytest.param(config, routine, id=f"routineRecords={routine}")


def direct_mode(routine: bool) -> Any:
    setting = f"dispatcher:\n  routineRecords: {str(routine).lower()}\n"
    return pytest.param(direct("{maxPerWorker: 1}").replace("dispatcher:\n", setting, 1), routine,
                        id=f"routineRecords={routine}")  # fmt: skip


def placed_record(run: Any) -> str:
    return str((placement_condition(run) or {}).get("reason") or "")


def reasons(events: list[Any]) -> list[tuple[str, str]]:
    return [(e.type, e.reason) for e in events]


@pytest.mark.parametrize(("multikueue_config", "routine"), [kueue_mode(True), kueue_mode(False)])
async def test_kueue_mode_an_admission_on_a_worker_is_told_only_with_routine_records(
    scenario: Scenario, routine: bool
) -> None:
    s = scenario
    _, workload = await s.submit("build")
    wl_name = workload["metadata"]["name"]
    await s.copied(wl_name)
    await kueue.admit(s.api["worker1"], wl_name, s.namespace)
    # The copy is made on the pass after the one that records the admission (and its Event).
    await s.wait(s.runs("worker1"), "build", lambda r: r is not None, "build on worker1")
    await s.check_state(wl_name, state="Ready", message='The workload was admitted on "')
    admitted = [e for e in await s.events(wl_name) if "was admitted on" in (e.message or "")]
    assert bool(admitted) == routine, reasons(await s.events(wl_name))


@pytest.mark.parametrize(("multikueue_config", "routine"), [direct_mode(True), direct_mode(False)])
async def test_direct_mode_a_plain_placement_is_recorded_only_with_routine_records_a_waits_record_always(
    scenario: Scenario, routine: bool
) -> None:
    s = scenario
    pinned = {SELECTOR: "pin=one"}
    await s.label("worker1", pin="one")
    await submit(s, "first", **pinned)
    # The copy is made on the pass after the one that records the placement (and its Event).
    await s.wait(s.runs("worker1"), "first", lambda r: r is not None, "first on worker1")
    first = await s.get(s.runs("manager"), "first")
    assert notes(first)[WORKER] == s.names["worker1"], "where it runs is always on the object"
    assert (placement_condition(first) is not None) == routine, first.get("status")
    assert (("Normal", "Placed") in reasons(await s.events("first"))) == routine

    # worker1 is full (one at a time): the second waits, and that is recorded whatever the option says.
    await submit(s, "second", **pinned)
    waiting = await s.wait(s.runs("manager"), "second",
                           lambda r: (placement_condition(r) or {}).get("reason") == "NoWorkerFits",
                           "second waiting, told why")  # fmt: skip
    assert s.names["worker1"] in placement_condition(waiting)["message"]
    # Room frees: it is placed, and the waiting record is cleared (written Placed) with the option off too.
    await succeed(s, "worker1", "first")
    await s.wait(s.runs("worker1"), "second", lambda r: r is not None, "second on worker1")
    cleared = await s.wait(s.runs("manager"), "second", lambda r: placed_record(r) == PLACED,
                           "its record cleared")  # fmt: skip
    assert notes(cleared)[WORKER] == s.names["worker1"]
