"""A short fault soak on the kind clusters: PipelineRuns submitted at a steady pace (most succeed, some fail, some
are cancelled by their user on the manager) while, in turn, a worker's node container is paused and resumed and the
leader's Pod is deleted. Real Kueue admits, real Tekton runs the steps, the dispatcher is the two-replica
Deployment. At the end the promise is checked by ``bench/invariants.py``, as ``make soak`` checks it on the test
bed, from what this test's own watches saw: every run finished exactly once on the manager with the status its
worker's Tekton decided, never on two workers at once, never created twice, nothing left behind, every placement
recorded. kind keeps no audit log: "never created twice" rests on the UIDs the watches saw (each creation makes a
new one).
"""

from __future__ import annotations

import sys
import time
from typing import Any

import anyio
import pytest

from bench import invariants
from e2e.kind.scene import NAMESPACE, PIPELINERUNS, Object, condition, leader_pod, live_leader, rolled_out, submit
from e2e.providers import WORKERS, Environment
from e2e.providers.kind import KindEnvironment
from e2e.wiring import SYSTEM
from multikueue.kube.addresses import WORKLOADS
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue.runtime.informer import ADDED, DELETED, Informer
from multikueue_testbed.waiting import NotReached, eventually, wait_until

RUNS, EVERY = 40, 3.0  # two minutes of load, as long as the fault schedule below
PAUSE, SETTLE = 25.0, 10.0  # a worker's node paused this long; quiet time after each fault
PREFIX = "kind-soak-"
DECIDED = {"succeed": ("True", "Succeeded"), "fail": ("False", "Failed"), "cancel": ("False", "Cancelled")}
SCRIPTS = {
    "succeed": "#!/bin/sh\necho working\nsleep 3\n",
    "fail": "#!/bin/sh\necho failing\nexit 1\n",
    "cancel": "#!/bin/sh\necho waiting to be cancelled\nsleep 300\n",
}


def fate(i: int) -> str:
    """One run in ten fails, one in ten is cancelled by its user, the rest succeed."""
    return {3: "fail", 7: "cancel"}.get(i % 10, "succeed")


def final(obj: Object) -> invariants.Final | None:
    """A PipelineRun's ``Succeeded`` condition once it is decided."""
    found = condition(obj, "Succeeded")
    if found.get("status") in ("True", "False"):
        return str(found["status"]), str(found.get("reason", ""))
    return None


@pytest.fixture
def kind(env: Environment) -> KindEnvironment:
    assert isinstance(env, KindEnvironment), "the kind soak runs on the kind provider only"
    return env


class Soak:
    """What this test's watches saw of each run, and the faults it injected."""

    def __init__(self, api: dict[str, ApiClient]) -> None:
        self.api = api
        self.runs: dict[str, invariants.Observed] = {}
        self.fates: dict[str, str] = {}
        self.copies: dict[str, dict[str, bool]] = {w: {} for w in WORKERS}  # worker -> run -> Workload copy present
        self.dispatched: dict[str, float] = {}  # run -> first seen on a worker
        self.faults: list[tuple[float, str]] = []
        self.surprises: dict[str, str] = {}  # run -> what its worker's Tekton said, where it is not the run's fate
        self.recovery: list[float] = []  # a leader's Pod deleted -> the next run dispatched after a new leader
        self.started = time.monotonic()
        self.tg: Any = None

    def now(self) -> float:
        return round(time.monotonic() - self.started, 3)

    def on_worker_run(self, worker: str) -> Any:
        def seen(kind: str, obj: Object) -> None:
            run = self.runs.get(obj["metadata"]["name"])
            if run is None:
                return
            lives = run.lives.setdefault(worker, [])
            run.uids.add(obj["metadata"]["uid"])
            if kind == ADDED:
                lives.append((self.now(), None))
                if run.name not in self.dispatched:
                    self.dispatched[run.name] = time.monotonic()
                    if self.fates[run.name] == "cancel":
                        self.tg.start_soon(self.cancel, run.name)
            elif kind == DELETED and lives and lives[-1][1] is None:
                lives[-1] = (lives[-1][0], self.now())
            decided = final(obj) if kind != DELETED else None
            if decided is not None and run.decided is None:
                run.decided, run.worker_decided = decided, worker
                if decided != DECIDED[self.fates[run.name]]:
                    said = condition(obj, "Succeeded").get("message", "")
                    self.surprises[run.name] = f"{worker}: {decided[1]}: {said}"
                    self.tg.start_soon(self.why, worker, run.name)

        return seen

    def on_worker_workload(self, worker: str) -> Any:
        def seen(kind: str, obj: Object) -> None:
            name = obj["metadata"]["name"].removeprefix("pipelinerun-")
            if name in self.runs:
                self.copies[worker][name] = kind != DELETED

        return seen

    def on_manager_run(self, kind: str, obj: Object) -> None:
        run = self.runs.get(obj["metadata"]["name"])
        decided = final(obj) if kind != DELETED else None
        if run is not None and decided is not None and run.finals[-1:] != [decided]:
            run.finals.append(decided)

    def on_manager_workload(self, kind: str, obj: Object) -> None:
        run = self.runs.get(obj["metadata"]["name"].removeprefix("pipelinerun-"))
        if run is not None and kind != DELETED:
            run.recorded = (obj.get("status") or {}).get("clusterName") or run.recorded

    async def why(self, worker: str, name: str) -> None:
        """What the worker's TaskRuns of a run that ended otherwise than meant say (read once, at its end)."""
        listed = await self.api[worker].request("GET", f"/apis/tekton.dev/v1/namespaces/{NAMESPACE}/taskruns",
                                                query={"labelSelector": f"tekton.dev/pipelineRun={name}"})  # fmt: skip
        for taskrun in listed["items"]:
            said = condition(taskrun, "Succeeded")
            self.surprises[name] += (
                f"; TaskRun {taskrun['metadata']['name']}: {said.get('reason')}: {said.get('message')}"
            )

    async def cancel(self, name: str) -> None:
        """The user cancels on the manager once the run reached a worker (its step is then sleeping)."""
        await anyio.sleep(3)
        await Objects(self.api["manager"], PIPELINERUNS).patch(name, {"spec": {"status": "Cancelled"}}, NAMESPACE)

    async def watch(self) -> None:
        manager = self.api["manager"]
        informers = [
            Informer(Objects(manager, PIPELINERUNS).source(namespace=NAMESPACE), on_event=self.on_manager_run),
            Informer(Objects(manager, WORKLOADS).source(namespace=NAMESPACE), on_event=self.on_manager_workload),
        ]
        for w in WORKERS:
            informers.append(Informer(Objects(self.api[w], PIPELINERUNS).source(namespace=NAMESPACE),
                                      on_event=self.on_worker_run(w)))  # fmt: skip
            informers.append(Informer(Objects(self.api[w], WORKLOADS).source(namespace=NAMESPACE),
                                      on_event=self.on_worker_workload(w)))  # fmt: skip
        for informer in informers:
            self.tg.start_soon(informer.run)
        with anyio.fail_after(60):
            for informer in informers:
                await informer.synced.wait()

    async def submit_all(self) -> None:
        for i in range(RUNS):
            name = f"{PREFIX}{i:02d}"
            self.runs[name], self.fates[name] = invariants.Observed(name, audited=False), fate(i)
            self.tg.start_soon(submit, self.api, name, SCRIPTS[fate(i)])
            await anyio.sleep(EVERY)

    async def delete_leader(self, kind: KindEnvironment) -> None:
        """The leader's Pod deleted (graceful), as a node drain or a user would; then the time until a run is
        dispatched by the leader that follows."""

        leader = await live_leader(self.api, timeout=120)
        deleted = time.monotonic()
        self.faults.append((self.now(), f"leader Pod {leader} deleted"))
        await anyio.to_thread.run_sync(
            lambda: kind.run_kubectl("manager", "-n", SYSTEM, "delete", "pod", leader, "--wait=false")
        )
        await eventually(lambda: leader_pod(self.api), until=lambda pod: pod not in ("", leader), timeout=120,
                         what=f"a leader other than {leader}")  # fmt: skip
        took_over = time.monotonic()
        for _ in range(1200):  # 2 minutes at most; only while runs are still to be dispatched
            after = [t for t in self.dispatched.values() if t > took_over]
            if after or len(self.dispatched) == RUNS:
                self.recovery += [round(min(after) - deleted, 1)] if after else []
                return
            await anyio.sleep(0.1)

    async def pause_worker(self, kind: KindEnvironment, worker: str) -> None:
        self.faults.append((self.now(), f"{worker}'s node paused {PAUSE:.0f} s"))
        kind.lose_worker(worker)
        try:
            await anyio.sleep(PAUSE)
        finally:
            await anyio.to_thread.run_sync(lambda: kind.restore_worker(worker))

    async def faults_in_turn(self, kind: KindEnvironment) -> None:
        await anyio.sleep(SETTLE)
        for worker in WORKERS:
            await self.pause_worker(kind, worker)
            await anyio.sleep(SETTLE)
            await self.delete_leader(kind)
            await anyio.sleep(SETTLE)

    def finished(self) -> int:
        return sum(1 for run in self.runs.values() if run.finals)

    def left(self) -> list[str]:
        on_workers = [f"{name} on {w}" for name, run in self.runs.items() for w, lives in run.lives.items()
                      if any(gone is None for _, gone in lives)]  # fmt: skip
        copies = [
            f"Workload of {name} on {w}" for w, present in self.copies.items() for name, p in present.items() if p
        ]
        return on_workers + copies

    def observed(self) -> list[invariants.Observed]:
        for name, run in self.runs.items():
            run.lost_cancel = self.fates[name] == "cancel" and run.decided != ("False", "Cancelled")
            run.workload_copies_left = tuple(w for w, present in self.copies.items() if present.get(name))
        return list(self.runs.values())


async def test_a_short_soak_with_nodes_paused_and_leader_pods_deleted_keeps_every_run_once(
    kind: KindEnvironment, api: dict[str, ApiClient]
) -> None:
    soak = Soak(api)
    try:
        with anyio.fail_after(1800):
            async with anyio.create_task_group() as tg:
                soak.tg = tg
                await soak.watch()
                async with anyio.create_task_group() as load:
                    load.start_soon(soak.submit_all)
                    load.start_soon(soak.faults_in_turn, kind)
                try:
                    await wait_until(lambda: soak.finished() == RUNS, timeout=900, interval=1,
                                     what=f"all {RUNS} runs finished on the manager")  # fmt: skip
                    await wait_until(lambda: soak.left() == [], timeout=300, interval=1,
                                     what="nothing of the soak's runs left on the workers")  # fmt: skip
                except NotReached as e:
                    unfinished = sorted(name for name, run in soak.runs.items() if not run.finals)
                    raise NotReached(f"{e}\nunfinished: {unfinished}\nleft: {soak.left()}\n"
                                     f"{kind.dispatcher_log()}") from None  # fmt: skip
                tg.cancel_scope.cancel()
    finally:
        await rolled_out(kind, api, "the dispatcher's Deployment settled after the soak")
    runs = soak.observed()
    violations = invariants.check(runs)
    fates = {f: sum(1 for run in runs if run.decided and run.decided[1] == f) for f in ("Succeeded", "Failed",
                                                                                          "Cancelled")}  # fmt: skip
    sys.stderr.write(f"\n[kind soak] {RUNS} runs {fates}; faults: {soak.faults}; a leader's Pod deleted -> next "
                     f"dispatch: {soak.recovery} s; invariants: {invariants.summary(violations)}; ended otherwise "
                     f"than meant (the worker's Tekton decided so): {soak.surprises}\n")  # fmt: skip
    assert violations == [], "\n".join(str(v) for v in violations)
    assert len(soak.faults) == 2 * len(WORKERS)
    # A run meant to fail or to be cancelled did (a node paused may fail a step that was meant to succeed: that
    # is the worker's decision, mirrored as such, and printed above).
    meant = {name: DECIDED[f] for name, f in soak.fates.items() if f != "succeed"}
    assert {name: soak.runs[name].decided for name in meant} == meant
