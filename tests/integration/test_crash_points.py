"""Crash points: the dispatcher stopped right after each write of a run's sequence, in both modes, and a successor
started; every run ends exactly once, on one worker, with its worker's status. And stale views of one worker.

All three API servers are reached through the bed's proxies (``multikueue_testbed.apiproxy``): the dispatcher's
manager client and both workers' kubeconfigs; the test's own requests go direct. A fault point in one proxy stops
the dispatcher as soon as the server has carried out the chosen write (answered 2xx), whose answer never reaches it:
its task group is cancelled and every proxy shut, so nothing more of it reaches a server. Once its generation has
closed, the proxies reopen and a successor starts (a fresh ``Process``: empty caches); the test drives the run to
its end on its worker (playing Kueue and Tekton there) and waits until the dispatcher has nothing left to do for it.
Each point is the first write carried out that matches a method, the end of a path and a predicate on the request's
body, never a time:

Kueue mode (the run admitted on worker1 only)
  1. the loser's copy removed: DELETE of the Workload copy on worker2
  2. the winner recorded: PATCH of the manager Workload's status setting ``clusterName``
  3. the object created: POST of the PipelineRun on worker1
  4. the status mirrored: the PATCH of the manager PipelineRun's status bringing ``startTime``
  5. the final status mirrored: the PATCH of its status bringing ``completionTime``
  6. the Workload finished: the PATCH of the manager Workload's status setting ``Finished``
  7. the copy deleted: DELETE of the PipelineRun on worker1
  8. the Workload copy deleted: DELETE of the Workload copy on worker1
Direct mode (placed on worker1: both idle, ties go by name)
  1. the placement recorded: PATCH of the manager PipelineRun setting the ``multikueue.x-k8s.io/worker`` annotation
  2.-4. the object created, the status mirrored, the final status mirrored: as in Kueue mode
  5. the run finished: PATCH of the manager PipelineRun setting the ``multikueue.x-k8s.io/phase`` annotation Finished
  6. the copy deleted: DELETE of the PipelineRun on worker1

Then, whatever the point: the run ended exactly once (one write carried out that ends it: ``Finished`` on the
Workload's status, or the phase; and one Finished condition, or phase, on the manager), it was created on exactly one
worker over the whole test (the creates the workers' proxies saw carried out; no copy left on any worker), and the
manager object's status is that worker's final status.

Stale views: one worker's watch events held back by its proxy while writes go through, then released; the same
invariants hold. Kueue mode: worker2's Kueue admits the copy first, unseen, then worker1's; the run goes to worker1
and ends there before worker2's events come. Direct mode: worker1's events are held while the run is placed and
created there and both its statuses are written.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest

from multikueue.generation import ManagerGeneration
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.client import ApiClient, api_client_from_kubeconfig
from multikueue.kube.resources import Objects
from multikueue.labels import PLACEMENT_CONDITION, PLACEMENT_FINISHED_AT, PLACEMENT_PHASE, PLACEMENT_WORKER
from multikueue.runtime.informer import ObjectKey
from multikueue_testbed import TestBed, kueue
from multikueue_testbed.apiproxy import ApiProxy, Withheld
from multikueue_testbed.objects import pipelinerun, running_status
from multikueue_testbed.waiting import NotReached, wait_until
from tests.integration.scenario import Scenario
from tests.integration.test_direct import direct

NAME = "crash"
WL = f"pipelinerun-{NAME}"  # the Workload's name, as ``kueue.workload_for`` names it
WORKERS = ("worker1", "worker2")
KIND = GroupVersionKind.parse("PipelineRun.v1.tekton.dev")
DONE = "done on worker1"
KUEUE = "multiKueue: {gcInterval: 2s, workerLostTimeout: 1m}"  # no worker is lost while a successor starts
DIRECT = direct(lost_timeout="1m")


def status(obj: Any) -> dict[str, Any]:
    return dict((obj or {}).get("status") or {})


def notes(obj: Any) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def finished(conditions: Any) -> dict[str, Any] | None:
    return next((c for c in conditions or [] if c.get("type") == "Finished" and c.get("status") == "True"), None)


def final_status(name: str) -> dict[str, Any]:
    """The status Tekton writes once a run has succeeded."""
    succeeded = {"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": DONE,
                 "lastTransitionTime": "2026-08-01T10:00:20Z"}  # fmt: skip
    return {**running_status(name), "completionTime": "2026-08-01T10:00:20Z", "conditions": [succeeded]}


# ----------------------------------------------------------------------------------------- the points


@dataclass(frozen=True)
class Point:
    """The first write that ``on``'s proxy sees carried out matching ``method``, the path's end and ``when``."""

    on: str
    method: str
    path: str  # its end, below /namespaces/<the test's>
    when: Callable[[Any], bool] = lambda _: True


def winner(body: Any) -> bool:
    return bool(status(body).get("clusterName"))


def running(body: Any) -> bool:
    return "startTime" in status(body) and "completionTime" not in status(body)


def final(body: Any) -> bool:
    return "completionTime" in status(body)


def finishes(body: Any) -> bool:
    return finished(status(body).get("conditions")) is not None


def places(body: Any) -> bool:
    return bool(notes(body).get(PLACEMENT_WORKER))


def ends(body: Any) -> bool:
    return notes(body).get(PLACEMENT_PHASE) in ("Finished", "Failed")


CREATED = Point("worker1", "POST", "/pipelineruns")
MIRRORED = Point("manager", "PATCH", f"/pipelineruns/{NAME}/status", running)
FINAL_MIRRORED = Point("manager", "PATCH", f"/pipelineruns/{NAME}/status", final)
COPY_DELETED = Point("worker1", "DELETE", f"/pipelineruns/{NAME}")
POINTS = [
    pytest.param(KUEUE, Point("worker2", "DELETE", f"/workloads/{WL}"), id="kueue-loser-copy-removed"),
    pytest.param(KUEUE, Point("manager", "PATCH", f"/workloads/{WL}/status", winner), id="kueue-winner-recorded"),
    pytest.param(KUEUE, CREATED, id="kueue-object-created"),
    pytest.param(KUEUE, MIRRORED, id="kueue-status-mirrored"),
    pytest.param(KUEUE, FINAL_MIRRORED, id="kueue-final-status-mirrored"),
    pytest.param(KUEUE, Point("manager", "PATCH", f"/workloads/{WL}/status", finishes), id="kueue-workload-finished"),
    pytest.param(KUEUE, COPY_DELETED, id="kueue-copy-deleted"),
    pytest.param(KUEUE, Point("worker1", "DELETE", f"/workloads/{WL}"), id="kueue-workload-copy-deleted"),
    pytest.param(DIRECT, Point("manager", "PATCH", f"/pipelineruns/{NAME}", places), id="direct-placement-recorded"),
    pytest.param(DIRECT, CREATED, id="direct-object-created"),
    pytest.param(DIRECT, MIRRORED, id="direct-status-mirrored"),
    pytest.param(DIRECT, FINAL_MIRRORED, id="direct-final-status-mirrored"),
    pytest.param(DIRECT, Point("manager", "PATCH", f"/pipelineruns/{NAME}", ends), id="direct-run-finished"),
    pytest.param(DIRECT, COPY_DELETED, id="direct-copy-deleted"),
]


# ------------------------------------------------------------------------------------------- the bed


class Bed:
    """The scenario behind the proxies, and the crash: the dispatcher stopped at a fault point, a successor started
    once it is gone."""

    def __init__(self, s: Scenario, proxies: dict[str, ApiProxy]) -> None:
        self.s, self.proxies = s, proxies
        self.stopped: ManagerGeneration | None = None  # the stopped dispatcher's generation
        self.taken_over = False

    def arm(self, point: Point) -> None:
        path = f"/namespaces/{self.s.namespace}{point.path}"
        self.proxies[point.on].after_write(point.method, path, self._crash, when=point.when)

    def _crash(self) -> None:
        """Run by the proxy once the write is carried out, before its answer or anything else reaches a caller."""
        assert self.s.manager is not None
        assert self.s.stop_manager is not None
        self.stopped = self.s.manager.generation
        self.s.stop_manager()
        for proxy in self.proxies.values():
            proxy.shut()

    async def _take_over_if_stopped(self) -> None:
        if self.stopped is None or self.taken_over:
            return
        # Its generation closes its worker connections once every one of its tasks has ended: only then may the
        # proxies forward again, so that nothing of the stopped dispatcher reaches a server after the fault point.
        connections = self.stopped.cluster_reconciler.connections
        await wait_until(lambda: not connections, timeout=30, what="the stopped dispatcher's generation closed")
        for proxy in self.proxies.values():
            proxy.reopen()
        self.taken_over = True
        await self.s.start_manager()

    async def wait(self, objects: Objects, name: str, until: Callable[[Any], bool], what: str) -> Any:
        """The object once ``until`` holds on it (``None``: absent), polled; a stopped dispatcher's successor is
        started first."""
        with anyio.move_on_after(60):
            while True:
                await self._take_over_if_stopped()
                found = await objects.get(name, self.s.namespace)
                if until(found):
                    return found
                await anyio.sleep(0.1)
        raise NotReached(f"{what} not reached within 60s")

    async def settled(self, mode: str) -> None:
        """The dispatcher running now (the successor, if one started) has looked at every object it has and has
        nothing left to do for the run."""
        await self._take_over_if_stopped()
        assert self.s.manager is not None
        generation = self.s.manager.generation
        key: Any = ObjectKey(self.s.namespace, WL)
        controller: Any = generation.workload_controller
        if mode == "direct":
            key, controller = (KIND, ObjectKey(self.s.namespace, NAME)), generation.direct_controller

        def idle() -> bool:
            queue = controller.queue
            return bool(controller.reconciles > 0 and len(queue) == 0 and not queue.is_processing(key))

        await wait_until(idle, timeout=30, what="the dispatcher idle")

    def carried_out(self, cluster: str, method: str, path: str, when: Callable[[Any], bool]) -> list[Withheld]:
        """The writes ``cluster``'s proxy saw carried out (2xx) matching ``method``, the path's end and ``when``."""
        end = f"/namespaces/{self.s.namespace}{path}"
        return [w for w in self.proxies[cluster].writes
                if w.method == method and w.path.endswith(end) and 200 <= w.status < 300 and when(w.body)]  # fmt: skip


@pytest.fixture
async def proxies(testbed: TestBed) -> AsyncIterator[dict[str, ApiProxy]]:
    async with (
        ApiProxy(testbed.cluster("manager")) as manager,
        ApiProxy(testbed.cluster("worker1")) as worker1,
        ApiProxy(testbed.cluster("worker2")) as worker2,
    ):
        yield {"manager": manager, "worker1": worker1, "worker2": worker2}


@pytest.fixture
def worker_kubeconfigs(proxies: dict[str, ApiProxy]) -> dict[str, Any]:
    return {worker: proxies[worker].kubeconfig for worker in WORKERS}


@pytest.fixture
async def manager_api(proxies: dict[str, ApiProxy], tmp_path: Path) -> AsyncIterator[ApiClient]:
    """The manager through its proxy: the scenario builds each dispatcher's client from this one's access."""
    async with await api_client_from_kubeconfig(proxies["manager"].kubeconfig, temp_dir=tmp_path / "certs") as api:
        yield api


@pytest.fixture
async def bed(scenario: Scenario, proxies: dict[str, ApiProxy], testbed: TestBed, tmp_path: Path) -> AsyncIterator[Bed]:
    """The scenario, its own requests to the manager sent direct (never through a proxy a fault point shuts)."""
    kubeconfig = testbed.cluster("manager").kubeconfig
    async with await api_client_from_kubeconfig(kubeconfig, temp_dir=tmp_path / "certs") as direct_api:
        scenario.api["manager"] = direct_api
        try:
            yield Bed(scenario, proxies)
        finally:
            for proxy in proxies.values():  # the scenario's teardown goes through them
                proxy.reopen()
                proxy.release()


# -------------------------------------------------------------------------------------- the runs, driven


def present(obj: Any) -> bool:
    return obj is not None


def absent(obj: Any) -> bool:
    return obj is None


async def tekton(b: Bed, worker: str) -> dict[str, Any]:
    """Tekton on ``worker``: the run started, then succeeded, each status waited for on the manager; the final
    status as the worker holds it."""
    s = b.s
    await b.wait(s.runs(worker), NAME, present, f"the run created on {worker}")
    await s.runs(worker).patch_status(NAME, {"status": running_status(NAME)}, s.namespace)
    await b.wait(s.runs("manager"), NAME, lambda r: "startTime" in status(r), "the running status mirrored")
    written = await s.runs(worker).patch_status(NAME, {"status": final_status(NAME)}, s.namespace)
    await b.wait(s.runs("manager"), NAME, lambda r: "completionTime" in status(r), "the final status mirrored")
    return status(written)


async def kueue_submitted(b: Bed) -> None:
    s = b.s
    await s.submit(NAME)
    for worker in WORKERS:
        await b.wait(s.workloads(worker), WL, present, f"the Workload copied to {worker}")


async def kueue_ends(b: Bed) -> dict[str, Any]:
    """Admitted on worker1, run and finished there; the worker's final status."""
    s = b.s
    await kueue.admit(s.api["worker1"], WL, s.namespace)
    worker_status = await tekton(b, "worker1")
    await kueue.finish(s.api["worker1"], WL, s.namespace, reason="Succeeded", message=DONE)
    await b.wait(s.workloads("manager"), WL, lambda w: finished(status(w).get("conditions")) is not None,
                 "the manager Workload finished")  # fmt: skip
    for worker in WORKERS:
        await b.wait(s.workloads(worker), WL, absent, f"the Workload copy gone from {worker}")
    await b.wait(s.runs("worker1"), NAME, absent, "the copy deleted on worker1")
    return worker_status


async def direct_ends(b: Bed) -> dict[str, Any]:
    """Created on the manager, placed on worker1, run and finished there; the worker's final status."""
    s = b.s
    body = pipelinerun(NAME)
    body["spec"]["managedBy"] = kueue.MANAGED_BY
    await s.runs("manager").create(body, s.namespace)
    placed = await b.wait(s.runs("manager"), NAME, lambda r: bool(notes(r).get(PLACEMENT_WORKER)), "the run placed")
    assert notes(placed)[PLACEMENT_WORKER] == s.names["worker1"], "both idle: the tie goes to the first name"
    worker_status = await tekton(b, "worker1")
    await b.wait(s.runs("manager"), NAME, lambda r: notes(r).get(PLACEMENT_PHASE) == "Finished", "the run Finished")
    await b.wait(s.runs("worker1"), NAME, absent, "the copy deleted on worker1")
    return worker_status


# --------------------------------------------------------------------------------------- the invariants


async def ended_once_on_worker1(b: Bed, mode: str, worker_status: dict[str, Any]) -> None:
    """Ended exactly once, created on worker1 alone over the whole test, nothing left on any worker, and the manager
    object's status that worker's final status."""
    s = b.s
    await b.settled(mode)
    created = {w: len(b.carried_out(w, "POST", "/pipelineruns", lambda _: True)) for w in WORKERS}
    assert created == {"worker1": 1, "worker2": 0}, created
    for worker in WORKERS:
        assert await s.runs(worker).items(s.namespace) == [], f"a copy left on {worker}"
        assert await s.workloads(worker).items(s.namespace) == [], f"a Workload copy left on {worker}"
    run = await s.get(s.runs("manager"), NAME)
    await (workload_ended_once(b) if mode == "kueue" else placement_ended_once(b, run))
    mirrored = status(run)
    mirrored["conditions"] = [c for c in mirrored.get("conditions") or [] if c["type"] != PLACEMENT_CONDITION]
    assert mirrored == worker_status


async def workload_ended_once(b: Bed) -> None:
    """Kueue mode: one write carried out set Finished on the manager Workload, which has the one Finished condition,
    with the worker's reason, and worker1 recorded."""
    s = b.s
    endings = b.carried_out("manager", "PATCH", f"/workloads/{WL}/status", finishes)
    assert len(endings) == 1, [json.dumps(w.body) for w in endings]
    workload = await s.get(s.workloads("manager"), WL)
    assert status(workload)["clusterName"] == s.names["worker1"]
    conditions = status(workload)["conditions"]
    assert [c["reason"] for c in conditions if c["type"] == "Finished"] == ["Succeeded"], conditions


async def placement_ended_once(b: Bed, run: dict[str, Any]) -> None:
    """Direct mode: one write carried out ended the run (its phase), the one the object shows, placed on worker1."""
    endings = b.carried_out("manager", "PATCH", f"/pipelineruns/{NAME}", ends)
    assert len(endings) == 1, [json.dumps(w.body) for w in endings]
    assert (notes(run)[PLACEMENT_WORKER], notes(run)[PLACEMENT_PHASE]) == (b.s.names["worker1"], "Finished")
    assert notes(endings[0].body)[PLACEMENT_FINISHED_AT] == notes(run)[PLACEMENT_FINISHED_AT]


# ------------------------------------------------------------------------------------------------ tests


@pytest.mark.timeout(180)
@pytest.mark.parametrize(("multikueue_config", "point"), POINTS)
async def test_a_dispatcher_stopped_right_after_a_write_its_successor_ends_the_run_once(
    bed: Bed, multikueue_config: str, point: Point
) -> None:
    b = bed
    mode = "kueue" if multikueue_config == KUEUE else "direct"
    b.arm(point)
    if mode == "kueue":
        await kueue_submitted(b)
        worker_status = await kueue_ends(b)
    else:
        worker_status = await direct_ends(b)
    await ended_once_on_worker1(b, mode, worker_status)
    assert b.stopped is not None, "the fault point was never reached"
    assert b.taken_over, "no successor ran"


@pytest.mark.timeout(180)
@pytest.mark.parametrize("multikueue_config", [KUEUE])
async def test_kueue_a_stale_view_of_the_worker_that_admitted_first_runs_the_run_once(bed: Bed) -> None:
    """worker2's events are held from before its Kueue admits the copy (first, unseen) until the run has ended on
    worker1, whose admission was seen; worker2's copy goes meanwhile, its deletion unseen too."""
    b = bed
    await kueue_submitted(b)
    b.proxies["worker2"].hold_watches()
    await kueue.admit(b.s.api["worker2"], WL, b.s.namespace)
    worker_status = await kueue_ends(b)
    b.proxies["worker2"].release()
    await ended_once_on_worker1(b, "kueue", worker_status)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("multikueue_config", [DIRECT])
async def test_direct_a_stale_view_of_the_runs_worker_still_ends_the_run_once(bed: Bed) -> None:
    """worker1's events are held while the run is placed, created there, and both its statuses are written; the
    dispatcher sees them only once they are released."""
    b = bed
    s = b.s
    b.proxies["worker1"].hold_watches()
    body = pipelinerun(NAME)
    body["spec"]["managedBy"] = kueue.MANAGED_BY
    await s.runs("manager").create(body, s.namespace)
    await b.wait(s.runs("worker1"), NAME, present, "the run created on worker1")
    await s.runs("worker1").patch_status(NAME, {"status": running_status(NAME)}, s.namespace)
    worker_status = status(await s.runs("worker1").patch_status(NAME, {"status": final_status(NAME)}, s.namespace))
    b.proxies["worker1"].release()
    await b.wait(s.runs("manager"), NAME, lambda r: notes(r).get(PLACEMENT_PHASE) == "Finished", "the run Finished")
    await b.wait(s.runs("worker1"), NAME, absent, "the copy deleted on worker1")
    await ended_once_on_worker1(b, "direct", worker_status)
