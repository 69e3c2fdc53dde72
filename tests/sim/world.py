"""The simulated world of one schedule: a manager and three workers (``SimApiServer``), the dispatcher's real
``Process`` connected to them through ``SimApiClient``s, and small models of what the dispatcher does not own:
Tekton on each worker (runs a copy, finishes it), a user (submits runs, deletes and re-submits one under the same
name), and the faults (a link cut and restored, an answer lost, the dispatcher killed and started again with empty
caches). Everything is drawn from one seed on the virtual clock of ``tests/sim/loop.py``.

The invariants are checked after every change any cluster stores (``check``), and at the end (``settle``):
- no run has copies running on two workers at once;
- an ``AtMostOnce`` run is never created twice;
- a run finished on the manager carries the final status of its own copy, never another run's;
- once faults stop, every run reaches a final state within ``SETTLE`` virtual seconds;
- nothing of ours is left on a worker once every run has finished and its retention has passed.

Direct mode first: the world of Kueue mode adds Kueue's models on the manager and the workers (issue #55).
"""

from __future__ import annotations

import base64
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast
from unittest import mock

import anyio
import yaml

from multikueue.config import parse_configuration
from multikueue.kube.client import ApiClient
from multikueue.labels import MANAGER_UID_ANNOTATION, PLACEMENT_PHASE
from multikueue.process import Process
from multikueue_testbed import kueue
from tests.sim.apiserver import Kind, SimApiServer
from tests.sim.client import Link, SimApiClient

Object = dict[str, Any]
NS = "sim"
PIPELINERUNS = Kind("tekton.dev", "v1", "pipelineruns", "PipelineRun")
KUEUE_KINDS = tuple(
    Kind("kueue.x-k8s.io", "v1beta2", plural, kind, namespaced=namespaced)
    for plural, kind, namespaced in (
        ("workloads", "Workload", True), ("admissionchecks", "AdmissionCheck", False),
        ("multikueueclusters", "MultiKueueCluster", False), ("multikueueconfigs", "MultiKueueConfig", False),
        ("clusterqueues", "ClusterQueue", False), ("localqueues", "LocalQueue", True),
        ("resourceflavors", "ResourceFlavor", False),
    )
)  # fmt: skip
WORKERS = ("worker1", "worker2", "worker3")
FINAL = ("Finished", "Failed")  # a Direct-mode run's phases once it is over
SETTLE = 900.0  # virtual seconds after the last fault within which every run must be final
SUCCEEDED = '.status.conditions[?type=="Succeeded"].status'


def config_text(policy: str) -> str:
    return f"""
multiKueue: {{gcInterval: 5s, workerLostTimeout: 60s, externalFrameworks: [{{name: PipelineRun.v1.tekton.dev}}]}}
dispatcher:
  namespace: {NS}
  eventsBatchPeriod: 100ms
  workerClient: {{timeout: 3s}}
  adapters:
  - name: PipelineRun.v1.tekton.dev
    mode: Direct
    finished: {{path: '{SUCCEEDED}', notIn: [Unknown]}}
    placement: {{lostWorkerPolicy: {policy}}}
"""


class Violation(AssertionError):
    """An invariant broken: which, of which run, and the schedule's last steps."""


@dataclass
class Ledger:
    """What the world knows happened, to check the dispatcher against."""

    creates: dict[str, list[str]] = field(default_factory=dict)  # manager uid -> workers a copy was created on
    final: dict[str, str] = field(default_factory=dict)  # manager uid -> the message its own copy finished with
    steps: list[str] = field(default_factory=list)

    def step(self, now: float, what: str) -> None:
        self.steps.append(f"{now:9.3f} {what}")


class World:
    def __init__(self, seed: int, *, policy: str = "AtLeastOnce", runs: int = 6, faults: bool = True) -> None:
        self.seed = seed
        self.rng = random.Random(f"world-{seed}")
        self.policy = policy
        self.runs = runs
        self.faults = faults
        clock: Callable[[], float] = lambda: time.time()  # noqa: E731 (read at each call: the loop's clock)
        self.manager = SimApiServer("manager", random.Random(f"manager-{seed}"), clock, KUEUE_KINDS)
        self.manager.serve(PIPELINERUNS)
        self.workers = {w: SimApiServer(w, random.Random(f"{w}-{seed}"), clock, KUEUE_KINDS) for w in WORKERS}
        for server in (self.manager, *self.workers.values()):
            server.handle("POST", "/api/v1/namespaces", {}, {"metadata": {"name": NS}}, "application/json")
            server.on_commit = self.check
        for server in self.workers.values():
            server.serve(PIPELINERUNS)
        self.links = {w: Link() for w in WORKERS}
        self.ledger = Ledger()
        self.submitted: dict[str, str] = {}  # manager uid -> name
        self.faults_over = 0.0
        self.process: Process | None = None
        self.violation: Violation | None = None
        self.faults_injected: dict[str, int] = {}

    # -- invariants ------------------------------------------------------------------------------------------------

    def copies(self) -> list[tuple[str, Object]]:
        return [(w, obj) for w, server in self.workers.items() for obj in server.objects(PIPELINERUNS)]

    def check(self, *_: Any) -> None:
        running: dict[str, str] = {}
        for worker, obj in self.copies():
            uid = (obj["metadata"].get("annotations") or {}).get(MANAGER_UID_ANNOTATION, "")
            if not uid or _finished(obj) or obj["metadata"].get("deletionTimestamp"):
                continue
            if uid in running and running[uid] != worker:
                self.fail(f"run {self.submitted.get(uid, uid)} runs on {running[uid]} and {worker} at once")
            running[uid] = worker
        for obj in self.manager.objects(PIPELINERUNS):
            uid = obj["metadata"]["uid"]
            message = _message(obj)
            # Another run's result (a copy's message names its run); a run that could not get its own says why.
            if _finished(obj) and message.startswith("done ") and message != self.ledger.final.get(uid):
                self.fail(f"run {obj['metadata']['name']} ({uid[:8]}) shows {message!r}, which no copy of it "
                          "finished with")  # fmt: skip

    def fail(self, what: str) -> None:
        """The first violation is kept (raising inside a cluster's write would reach the dispatcher, not the test);
        ``settle`` ends the schedule with it."""
        if self.violation is None:
            last = "\n".join(self.ledger.steps[-25:])
            self.violation = Violation(f"seed {self.seed}: {what}\nthe last steps:\n{last}")

    # -- the models ------------------------------------------------------------------------------------------------

    async def tekton(self, worker: str) -> None:
        """Runs each copy on ``worker``: started at once, finished after a drawn while, its message naming its run."""
        server, rng = self.workers[worker], random.Random(f"tekton-{worker}-{self.seed}")
        started: dict[str, float] = {}
        while True:
            await anyio.sleep(1)
            for obj in server.objects(PIPELINERUNS):
                meta = obj["metadata"]
                key, uid = meta["uid"], (meta.get("annotations") or {}).get(MANAGER_UID_ANNOTATION, "")
                path = f"/apis/tekton.dev/v1/namespaces/{NS}/pipelineruns/{meta['name']}/status"
                if key not in started:
                    started[key] = time.monotonic() + rng.uniform(2, 40)
                    self.ledger.creates.setdefault(uid, []).append(worker)
                    self.ledger.step(time.monotonic(), f"tekton {worker}: {meta['name']} starts")
                    if self.policy == "AtMostOnce" and len(self.ledger.creates[uid]) > 1:
                        self.fail(f"AtMostOnce run {meta['name']} created again on {worker} "
                                  f"(before: {self.ledger.creates[uid][:-1]})")  # fmt: skip
                    status = {"startTime": _now(), "conditions": [_succeeded("Unknown", "Running", "running")]}
                    server.handle("PATCH", path, {}, {"status": status}, "application/merge-patch+json")
                elif not _finished(obj) and time.monotonic() >= started[key]:
                    message = f"done {uid[:8]} on {worker}"
                    self.ledger.final[uid] = message
                    self.ledger.step(time.monotonic(), f"tekton {worker}: {meta['name']} finishes")
                    status = {"completionTime": _now(), "conditions": [_succeeded("True", "Succeeded", message)]}
                    server.handle("PATCH", path, {}, {"status": status}, "application/merge-patch+json")

    async def user(self) -> None:
        rng = random.Random(f"user-{self.seed}")
        for i in range(self.runs):
            await anyio.sleep(rng.uniform(0, 10))
            name = f"run-{i % max(1, self.runs - 1)}"  # the last one re-uses a name: a same-named re-run
            path = f"/apis/tekton.dev/v1/namespaces/{NS}/pipelineruns"
            if self.manager.handle("GET", f"{path}/{name}", {}, None, "")[0] == 200:
                self.ledger.step(time.monotonic(), f"user deletes {name}")
                self.manager.handle("DELETE", f"{path}/{name}", {}, None, "")
            body = {"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "metadata": {"name": name},
                    "spec": {"pipelineRef": {"name": "p"}, "managedBy": kueue.MANAGED_BY}}  # fmt: skip
            code, created = self.manager.handle("POST", path, {}, body, "application/json")
            assert code == 201, created
            self.submitted[created["metadata"]["uid"]] = name
            self.ledger.step(time.monotonic(), f"user submits {name} ({created['metadata']['uid'][:8]})")

    async def chaos(self, restart: Callable[[], Any]) -> None:
        """Faults for a while: a worker cut off and back, an answer lost, the dispatcher killed and started again."""
        rng = random.Random(f"faults-{self.seed}")
        for _ in range(rng.randint(1, 4)):
            await anyio.sleep(rng.uniform(1, 30))
            fault = rng.choice(("cut", "lose", "restart"))
            worker = rng.choice(WORKERS)
            self.faults_injected[fault] = self.faults_injected.get(fault, 0) + 1
            if fault == "cut":
                self.links[worker].cut = True
                self.ledger.step(time.monotonic(), f"fault: {worker} cut off")
                await anyio.sleep(rng.uniform(1, 90))
                self.links[worker].cut = False
                self.ledger.step(time.monotonic(), f"fault: {worker} back")
            elif fault == "lose":
                self.links[worker].lose_next("POST", "/pipelineruns")
                self.ledger.step(time.monotonic(), f"fault: the next create's answer from {worker} is lost")
            else:
                self.ledger.step(time.monotonic(), "fault: the dispatcher is killed and started again")
                await restart()
        self.faults_over = time.monotonic()

    # -- the schedule ----------------------------------------------------------------------------------------------

    def client_for(self, kubeconfig: Object) -> SimApiClient:
        server = kubeconfig["clusters"][0]["cluster"]["server"]
        worker = server.removeprefix("https://").removesuffix(".sim")
        return SimApiClient(self.workers[worker], self.links[worker], kubeconfig)

    async def run(self, tmp: Path) -> None:
        manager_api = cast(ApiClient, SimApiClient(self.manager))
        for worker in WORKERS:  # the Secrets the MultiKueueClusters name, as kueue.put_kubeconfig_secret writes them
            data = {"kubeconfig": base64.b64encode(yaml.safe_dump(_kubeconfig(worker)).encode()).decode()}
            secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": f"{worker}-kubeconfig"}, "data": data}
            self.manager.handle("POST", f"/api/v1/namespaces/{NS}/secrets", {}, secret, "application/json")
        with mock.patch.object(kueue, "put_kubeconfig_secret", _already_there):
            await kueue.multikueue_setup(manager_api, namespace=NS, prefix=NS, controller_name=_CONTROLLER,
                                         workers={w: _kubeconfig(w) for w in WORKERS})  # fmt: skip
        config = parse_configuration(yaml.safe_dump(yaml.safe_load(config_text(self.policy))))

        async def from_kubeconfig(kubeconfig: Object, **_: Any) -> SimApiClient:
            return self.client_for(kubeconfig)

        with mock.patch("multikueue.clusters.connections.api_client_from_kubeconfig", from_kubeconfig):
            async with anyio.create_task_group() as tg:
                scope = [anyio.CancelScope()]

                async def dispatcher() -> None:
                    process = Process(manager_api, config, temp_dir=tmp)
                    self.process = process
                    with scope[0]:
                        await process.run()

                async def restart() -> None:
                    scope[0].cancel()
                    await anyio.sleep(self.rng.uniform(0.5, 20))
                    scope[0] = anyio.CancelScope()
                    tg.start_soon(dispatcher)

                tg.start_soon(dispatcher)
                for worker in WORKERS:
                    tg.start_soon(self.tekton, worker)
                await anyio.sleep(1)
                tg.start_soon(self.user)
                if self.faults:
                    tg.start_soon(self.chaos, restart)
                await self.settle()
                tg.cancel_scope.cancel()

    async def settle(self) -> None:
        """Waits (virtually) for every run to be final once the faults are over, then for the workers to be clear."""
        deadline = None
        while True:
            await anyio.sleep(5)
            if self.violation is not None:
                raise self.violation
            done = len(self.submitted) == self.runs and all(
                _phase(obj) in FINAL for obj in self.manager.objects(PIPELINERUNS)
            )
            if done and not self.copies_left():
                return
            if self.faults_over or not self.faults:
                deadline = deadline or time.monotonic() + SETTLE
                if time.monotonic() > deadline:
                    waiting = [f"{o['metadata']['name']}: {_phase(o) or 'unplaced'}"
                               for o in self.manager.objects(PIPELINERUNS) if _phase(o) not in FINAL]  # fmt: skip
                    self.fail(f"not settled {SETTLE:.0f}s after the faults: runs {waiting}, "
                              f"copies left {self.copies_left()}")  # fmt: skip

    def copies_left(self) -> list[str]:
        return [f"{w}/{o['metadata']['name']}" for w, o in self.copies()]


_CONTROLLER = "multikueue.x-k8s.io/external-dispatcher"


async def _already_there(*_: Any) -> None:
    """The Secrets are written by the world itself (the test bed's own writer speaks through its own client)."""


def _kubeconfig(worker: str) -> Object:
    return {
        "apiVersion": "v1", "kind": "Config", "current-context": worker,
        "clusters": [{"name": worker, "cluster": {"server": f"https://{worker}.sim"}}],
        "users": [{"name": worker, "user": {"token": f"token-{worker}"}}],
        "contexts": [{"name": worker, "context": {"cluster": worker, "user": worker}}],
    }  # fmt: skip


def _succeeded(status: str, reason: str, message: str) -> Object:
    return {"type": "Succeeded", "status": status, "reason": reason, "message": message,
            "lastTransitionTime": _now()}  # fmt: skip


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time()))


def _condition(obj: Object) -> Object:
    conditions = (obj.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Succeeded"), {})


def _finished(obj: Object) -> bool:
    return _condition(obj).get("status") in ("True", "False")


def _message(obj: Object) -> str:
    return str(_condition(obj).get("message", ""))


def _phase(obj: Object) -> str:
    return str((obj["metadata"].get("annotations") or {}).get(PLACEMENT_PHASE, ""))
