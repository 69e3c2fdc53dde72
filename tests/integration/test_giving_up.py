"""Kueue mode with ``dispatcher.inadmissibleTimeout``: a run no worker's Kueue can ever admit gives up (its check
Rejected with each worker's reason), while a run a worker is merely too busy for waits. On the real bed, with the
tests playing the workers' Kueue (its QuotaReserved=False messages, word for word)."""

from __future__ import annotations

import pytest

from multikueue_testbed import kueue
from multikueue_testbed.waiting import eventually
from tests.integration.scenario import Scenario

EXCEEDS = (
    "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default, previously considered "
    "podsets requests (0) + current podset request (10) > maximum capacity (8)"
)
NO_QUEUE = "LocalQueue user-queue doesn't exist"
BUSY = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 2 more needed"
GIVING_UP = """
multiKueue: {gcInterval: 2s, workerLostTimeout: 10s}
dispatcher: {inadmissibleTimeout: 3s}
"""


@pytest.mark.parametrize("multikueue_config", [GIVING_UP])
async def test_a_run_no_workers_kueue_can_admit_gives_up_and_a_busy_one_waits(scenario: Scenario) -> None:
    s = scenario
    _, busy = await s.submit("busy")  # first: its clock starts no later than the other's
    _, never = await s.submit("never")
    for workload, (says, reason) in ((busy, (BUSY, "Pending")), (never, (NO_QUEUE, "Inadmissible"))):
        name = workload["metadata"]["name"]
        await s.copied(name)
        await kueue.pending(s.api["worker1"], name, s.namespace, EXCEEDS)
        await kueue.pending(s.api["worker2"], name, s.namespace, says, reason=reason)

    w1, w2 = s.names["worker1"], s.names["worker2"]
    told = (
        f'No worker\'s Kueue can admit the workload: worker "{w1}": Pending: {EXCEEDS}; '
        f'worker "{w2}": Inadmissible: {NO_QUEUE}'
    )
    rejected = await s.check_state(never["metadata"]["name"], state="Rejected", message=told)
    assert rejected["status"]["admissionChecks"][0]["message"] == f'{told}, Previously: "Pending"'
    on_run = await eventually(
        lambda: s.events("never"), until=lambda e: any(x.reason == "NoWorkerCanAdmit" for x in e), what="an Event"
    )
    assert [(x.type, x.message) for x in on_run if x.reason == "NoWorkerCanAdmit"] == [("Warning", told)]
    on_workload = await s.events(never["metadata"]["name"])
    assert any(x.type == "Warning" and x.message == told for x in on_workload), on_workload

    waiting = await s.get(s.workloads("manager"), busy["metadata"]["name"])
    assert waiting["status"]["admissionChecks"][0]["state"] == "Pending", "one worker only busy: it waits"
