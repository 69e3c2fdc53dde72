"""The dispatcher under load on the local test bed: N PipelineRuns through W workers, end to end.

    python -m bench.run --mode kueue --workers 3 --objects 1000          # one run, JSON to bench/results/
    python -m bench.run --mode direct --workers 3 --objects 1000 --faults
    python -m bench.run --mode kueue --workers 3 --objects 3000 --race --rate 5 --fault-interval 20   # the fault soak
    python -m bench.run --workers 3 --objects 1000 --dispatchers kueue,kueue-fixed,multikueue       # side by side

The dispatcher runs as its own process with the shipped defaults (config/manager/config.yaml; direct mode adds
only ``mode: Direct`` and Tekton's finished predicate). The benchmark plays the parts that do not run here, at
once: tekton-kueue and Kueue on the manager (Workload, quota), Kueue on the workers (each worker admits the
copies assigned to it), and Tekton (status writes). Phases:

1. dispatch: submit N objects as fast as the bench can; dispatch latency = submitted (quota reserved in Kueue
   mode) -> the object seen on its worker; throughput = N / (first submit -> last object on a worker);
2. status sync: the N runs stay in flight; RSS is sampled; then worker statuses change at ``--status-rate`` per
   second for ``--status-seconds``, and each change's lag to the manager object is measured;
3. finish: every run succeeds on its worker; end-to-end = first submit -> last object finished on the manager,
   with nothing left on any worker.

Measured on the dispatcher process: CPU seconds and peak RSS (/proc), and its own request counter per cluster
(``multikueue_api_requests_total``) divided by N. This is not a test: nothing is asserted but completion.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import yaml
from kubernetes_asyncio import client as k8s_client

from bench import audit, cores, proc, runtime, sidebyside
from bench.dispatcher import Dispatcher, Shards
from bench.faults import Faults
from bench.kueue import FIX_PATCH, KUEUE_DISPATCHERS, MULTIKUEUE_CONTROLLER, RealKueue
from multikueue.kube.addresses import MULTIKUEUE_CLUSTERS, WORKLOADS, Resource
from multikueue.kube.client import ApiClient, api_client_from_kubeconfig
from multikueue.kube.errors import Conflict, NotFound
from multikueue.kube.resources import Objects
from multikueue.labels import ORIGIN_LABEL, PLACEMENT_PHASE
from multikueue.runtime.informer import DELETED, Informer
from multikueue_testbed import crds, kueue
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.interop import (
    KUEUE_NAMESPACE,
    ComponentUnavailable,
    KueueProcess,
    kueue_binary,
    patched_kueue_binary,
)
from multikueue_testbed.objects import pipelinerun
from multikueue_testbed.testbed import TestBed
from multikueue_testbed.waiting import eventually

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "bench" / "results"
PIPELINERUNS = Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun")
NAMESPACE, SYSTEM, CHECK_CONTROLLER = "bench", "multikueue-system", "multikueue.x-k8s.io/external-dispatcher"
DISPATCHER_ACCOUNT, KUEUE_ACCOUNT = "bench-dispatcher", "bench-kueue"  # ServiceAccounts in NAMESPACE, audited
Object = dict[str, Any]


def say(message: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100 * len(ordered)) - 1))]


SHARD_LABEL = "bench.multikueue.x-k8s.io/shard"


def shard_selector(k: int, shards: int) -> str:
    """Shard ``k``'s objects: those labelled ``k``; the last also takes every object the others do not select."""
    if k < shards - 1:
        return f"{SHARD_LABEL}={k}"
    return f"{SHARD_LABEL} notin ({','.join(str(i) for i in range(shards - 1))})"


INTEGRATION = {
    "suspend": {"path": ".spec.status", "value": "PipelineRunPending", "stopValue": "StoppedRunFinally"},
    "podSets": [{"name": "pod-set-1", "requests": {"tekton.dev/pipelineruns": "1"}}],
}
"""``--integration``: the PipelineRun adapter's integration section (the bench's runs carry no queue-name label, so
the integration only reads them: what it adds is its caches and its reconciles)."""


def configuration(mode: str, namespace: str, *, integration: bool = False, shard: str = "") -> str:
    document = yaml.safe_load((ROOT / "config" / "manager" / "config.yaml").read_text())
    document["dispatcher"]["namespace"] = namespace
    if shard:
        document["dispatcher"]["shard"] = {"objectSelector": shard}
    adapter: dict[str, Any] = {"name": "PipelineRun.v1.tekton.dev"}
    if mode == "direct":
        finished = {"path": '.status.conditions[?type=="Succeeded"].status', "notIn": ["Unknown"]}
        adapter.update(mode="Direct", finished=finished)
    if integration:
        adapter["integration"] = INTEGRATION
    if len(adapter) > 1:
        document["dispatcher"]["adapters"] = [adapter]
    return yaml.safe_dump(document)


class Run:
    def __init__(self, args: argparse.Namespace, bed: TestBed, workers: list[str]) -> None:
        self.args, self.bed, self.workers = args, bed, workers
        self.submitted: dict[str, float] = {}  # run name -> handed over (quota reserved; real Kueue: check Pending)
        self.created: dict[str, float] = {}  # run name -> when submitted (real Kueue reserves quota later)
        self.reserved: dict[str, float] = {}  # real Kueue: run name -> QuotaReserved seen
        self.copied: dict[str, float] = {}  # Kueue mode: run name -> its Workload copy seen on its worker-to-be
        self.admitted: dict[str, float] = {}  # Kueue mode: run name -> that copy admitted (by the bench)
        self.on_worker: dict[str, tuple[str, float]] = {}  # run name -> (worker, first seen there)
        self.finished: dict[str, float] = {}
        self.copies_created: dict[str, int] = {}  # run name -> times an object was created on a worker
        self.workers_of: dict[str, set[str]] = {}  # run name -> every worker its object was seen on
        self.status_sent: dict[str, float] = {}  # status marker -> when written on the worker
        self.status_lag: list[float] = []
        self.superseded = 0
        self.api: dict[str, ApiClient] = {}
        self.check = ""  # the AdmissionCheck's name (Kueue mode)

    # ------------------------------------------------------------------------------------- players

    def worker_runs(self, worker: str) -> Callable[[str, Object], None]:
        def seen(kind: str, obj: Object) -> None:
            name = obj["metadata"]["name"]
            if kind == "ADDED":
                self.copies_created[name] = self.copies_created.get(name, 0) + 1
                self.workers_of.setdefault(name, set()).add(worker)
                self.on_worker.setdefault(name, (worker, time.monotonic()))

        return seen

    def manager_runs(self, kind: str, obj: Object) -> None:
        if kind == DELETED:
            return
        name = obj["metadata"]["name"]
        if self.args.mode == "direct" and (obj["metadata"].get("annotations") or {}).get(PLACEMENT_PHASE) == "Finished":
            self.finished.setdefault(name, time.monotonic())
        conditions = (obj.get("status") or {}).get("conditions") or []
        for condition in conditions:
            marker = condition.get("message", "")
            if marker in self.status_sent:
                self.status_lag.append(time.monotonic() - self.status_sent.pop(marker))

    def manager_workloads(self, kind: str, obj: Object) -> None:
        if kind == DELETED:
            return
        name = obj["metadata"]["name"].removeprefix("pipelinerun-")
        true = {c["type"] for c in (obj.get("status") or {}).get("conditions") or [] if c["status"] == "True"}
        if "QuotaReserved" in true and self.args.kueue == "real":
            self.reserved.setdefault(name, time.monotonic())
            checks = (obj.get("status") or {}).get("admissionChecks") or []
            if any(c.get("name") == self.check and c.get("state") == "Pending" for c in checks):
                # Handed over: Kueue's workload controller has set the check Pending, which every dispatcher
                # (Kueue's MultiKueue too) waits for; before that the time is Kueue's own.
                self.submitted.setdefault(name, time.monotonic())
        if "Finished" in true:
            self.finished.setdefault(name, time.monotonic())

    def worker_workloads(self, worker: str, index: int, tg: Any) -> Callable[[str, Object], None]:
        """Kueue on a worker: admit the copies assigned to this worker (spread evenly by name); with ``--race``,
        every copy it receives, after a random delay of up to a second (the first admission wins, as with
        Kueue's AllAtOnce dispatching)."""

        def seen(kind: str, obj: Object) -> None:
            name = obj["metadata"]["name"]
            conditions = {c["type"] for c in (obj.get("status") or {}).get("conditions") or []}
            mine = self.args.race or int(name.rsplit("-", 1)[1]) % len(self.workers) == index
            if kind == "ADDED" and "Admitted" not in conditions and mine:
                self.copied.setdefault(name.removeprefix("pipelinerun-"), time.monotonic())
                delay = random.uniform(0.0, 1.0) if self.args.race else 0.0
                tg.start_soon(self._retry, lambda: self._admit(worker, name, delay))

        return seen

    async def _admit(self, worker: str, name: str, delay: float = 0.0) -> None:
        await anyio.sleep(delay)
        if self.args.race:  # lost the race meanwhile: the dispatcher deleted the copy
            with contextlib.suppress(LookupError, NotFound):
                await kueue.admit(self.api[worker], name, NAMESPACE)
            return
        await kueue.admit(self.api[worker], name, NAMESPACE)
        self.admitted.setdefault(name.removeprefix("pipelinerun-"), time.monotonic())

    async def _retry(self, action: Callable[[], Any], attempts: int = 20) -> None:
        for attempt in range(attempts):
            try:
                await action()
                return
            except Exception:
                if attempt == attempts - 1:
                    raise
                await anyio.sleep(0.2 * (attempt + 1))

    # ------------------------------------------------------------------------------------- phases

    async def submit(self, i: int) -> None:
        name = f"run-{i:05d}"
        body = pipelinerun(name, labels={SHARD_LABEL: str(i % self.args.shards)} if self.args.shards > 1 else None)
        body["spec"]["managedBy"] = kueue.MANAGED_BY
        runs = Objects(self.api["manager"], PIPELINERUNS)
        try:
            run = await runs.create(body, NAMESPACE)
        except Conflict:  # a retried submission: the attempt before made it, then failed further on
            run = await runs.get(name, NAMESPACE) or {}
        if self.args.mode == "kueue":
            with contextlib.suppress(Conflict):
                await Objects(self.api["manager"], WORKLOADS).create(kueue.workload_for(run), NAMESPACE)
        if self.args.mode == "kueue" and self.args.kueue == "played":
            await kueue.reserve_quota(self.api["manager"], f"pipelinerun-{name}", NAMESPACE, checks=[self.check])
        self.created[name] = time.monotonic()
        if self.args.kueue == "played":
            self.submitted[name] = self.created[name]

    async def set_status(self, name: str, status: str, reason: str, marker: str) -> None:
        worker = self.on_worker[name][0]
        body = {
            "status": {"conditions": [{"type": "Succeeded", "status": status, "reason": reason, "message": marker}]}
        }
        await Objects(self.api[worker], PIPELINERUNS).patch_status(name, body, NAMESPACE)

    async def finish(self, name: str) -> None:
        await self.set_status(name, "True", "Succeeded", f"done {name}")
        if self.args.mode == "kueue":
            await kueue.finish(self.api[self.on_worker[name][0]], f"pipelinerun-{name}", NAMESPACE)


@dataclass
class Setup:
    """What a run talks to and measures: the clusters' clients (in ``run``), the MultiKueue objects' names, and the
    processes: this dispatcher (or its shards), real Kueue beside it or in its place."""

    args: argparse.Namespace
    bed: TestBed
    run: Run
    workers: list[str]
    names: dict[str, str]
    dispatcher: Dispatcher | Shards | None
    real_kueue: RealKueue | None
    faults: Faults | None = None

    @property
    def measured(self) -> Dispatcher | Shards | RealKueue:
        measured = self.dispatcher or self.real_kueue
        assert measured is not None
        return measured

    @property
    def beside(self) -> RealKueue | None:
        """Real Kueue beside this dispatcher (its scheduler and admission checks): its own costs, reported apart."""
        return self.real_kueue if self.dispatcher is not None else None


@dataclass
class Before:
    """The counters as the measured phases start."""

    rss: int
    cpu: float
    shard_cpu: list[float]
    requests: dict[str, float]
    beside_cpu: float
    counter: audit.Counter


@dataclass
class Dispatched:
    """Phase 1's figures: from the first submission (or the dispatcher's start, with ``--backlog``) until every
    object is on a worker."""

    started: float
    submitted_at: float
    dispatched_at: float
    phase_cpu: dict[str, float]
    requests: dict[str, Any]
    inflight_rss: int


@dataclass
class After:
    """The counters once every run finished and nothing is left on a worker."""

    finished_at: float
    status_changes: int
    cpu: float
    shard_cpu: list[float]
    requests: dict[str, float]
    work_queues: dict[str, dict[str, float]]
    audited: dict[str, dict[str, dict[str, int]]]
    beside: dict[str, Any] | None


async def main_async(args: argparse.Namespace, bed: TestBed, workdir: Path) -> dict[str, Any]:
    setup = await _set_up(args, bed, workdir)
    before = await _counters(setup)
    async with anyio.create_task_group() as tg:
        await _watch(setup, tg)
        dispatched = await _dispatch(setup, before, tg)
        changes = await _status_sync(setup, tg)
        after = await _finish(setup, before, tg, changes)
        tg.cancel_scope.cancel()
    if setup.dispatcher is not None:
        setup.dispatcher.stop()
    if setup.real_kueue is not None:
        setup.real_kueue.stop()
    for client in setup.run.api.values():
        await client.close()
    return _result(setup, before, dispatched, after)


async def _set_up(args: argparse.Namespace, bed: TestBed, workdir: Path) -> Setup:
    """Clients, namespaces and audited identities on every cluster; Kueue's objects (and real Kueue with
    ``--kueue real``); the dispatcher started, every worker Active and connected."""
    workers = [f"worker{i + 1}" for i in range(args.workers)]
    run = Run(args, bed, workers)
    for cluster in ("manager", *workers):
        run.api[cluster] = await api_client_from_kubeconfig(bed.cluster(cluster).kubeconfig, temp_dir=workdir / "certs")
        await k8s_client.CoreV1Api(k8s(run.api[cluster])).create_namespace(raw_body({"metadata": {"name": NAMESPACE}}))
    # Beside real Kueue, the kubeconfig Secrets live in Kueue's namespace: its MultiKueueCluster controller reads
    # them there for every MultiKueueCluster, whichever controller the admission check names (docs/dispatch.md).
    system = KUEUE_NAMESPACE if args.kueue == "real" else SYSTEM
    # Who is measured talks as a ServiceAccount of its own on every cluster: the audit logs count its requests.
    identities = {
        c: await audit.identity(run.api[c], bed.cluster(c), NAMESPACE, DISPATCHER_ACCOUNT)
        for c in ("manager", *workers)
    }
    manager_kubeconfig = workdir / "dispatcher-kubeconfig.yaml"
    manager_kubeconfig.write_text(yaml.safe_dump(identities["manager"]))
    real_kueue = await _real_kueue(args, bed, run, workdir, manager_kubeconfig)
    names = await kueue.multikueue_setup(
        run.api["manager"],
        namespace=system,
        prefix="bench",
        controller_name=MULTIKUEUE_CONTROLLER if args.dispatcher in KUEUE_DISPATCHERS else CHECK_CONTROLLER,
        workers={w: identities[w] for w in workers},
        in_config=KUEUE_MAX_CLUSTERS,  # Direct mode places on every MultiKueueCluster; the config is not read
    )
    run.check = names["check"]
    if real_kueue is not None:
        await kueue.queues(run.api["manager"], NAMESPACE, local_queue="user-queue", cluster_queue="bench-cq",
                           flavor="bench-flavor", quota={"cpu": str(2 * args.objects)}, check=names["check"],
                           namespace_selector={})  # fmt: skip
    setup = Setup(args, bed, run, workers, names, _dispatcher(args, system, manager_kubeconfig, workdir), real_kueue)
    await _connected(setup)
    return setup


async def _real_kueue(
    args: argparse.Namespace, bed: TestBed, run: Run, workdir: Path, manager_kubeconfig: Path
) -> RealKueue | None:
    """Real Kueue on the manager with ``--kueue real`` (its MultiKueue dispatching with ``--dispatcher kueue``);
    otherwise only the namespace the played Kueue's objects live in."""
    if args.kueue != "real":
        await k8s_client.CoreV1Api(k8s(run.api["manager"])).create_namespace(raw_body({"metadata": {"name": SYSTEM}}))
        return None
    kueue_kubeconfig = manager_kubeconfig
    dispatches, fixed = args.dispatcher in KUEUE_DISPATCHERS, args.dispatcher == "kueue-fixed"
    if not dispatches:  # Kueue's core beside this dispatcher: counted apart
        kueue_kubeconfig = workdir / "kueue-kubeconfig.yaml"
        kueue_identity = await audit.identity(run.api["manager"], bed.cluster("manager"), NAMESPACE, KUEUE_ACCOUNT)
        kueue_kubeconfig.write_text(yaml.safe_dump(kueue_identity))
    process = KueueProcess(bed.cluster("manager"), args.kueue_fixed_binary if fixed else args.kueue_binary,
                           workdir / "kueue", log_level="info",
                           extra=RealKueue.configuration(multikueue=dispatches, fixed=fixed),
                           kubeconfig=kueue_kubeconfig, feature_gates=RealKueue.feature_gates(fixed=fixed))  # fmt: skip
    real_kueue = await RealKueue.start(run.api["manager"], process)
    role = ("dispatches, with the fix" if fixed else "dispatches") if dispatches else "unused"
    say(f"real Kueue on the manager (PID {real_kueue.pid}); its MultiKueue {role}")
    return real_kueue


def _dispatcher(args: argparse.Namespace, system: str, kubeconfig: Path, workdir: Path) -> Dispatcher | Shards | None:
    """This project's dispatcher started (``--shards`` of them, each with its objectSelector), or ``None`` when
    Kueue's own MultiKueue dispatches."""
    if args.dispatcher != "multikueue":
        return None
    dispatcher: Dispatcher | Shards
    if args.shards > 1:
        members = []
        for k in range(args.shards):
            config = configuration(
                args.mode, system, integration=args.integration, shard=shard_selector(k, args.shards)
            )
            (workdir / f"shard{k}").mkdir()
            members.append(Dispatcher(kubeconfig, config, workdir / f"shard{k}", source=args.source,
                                      interpreter=args.interpreter))  # fmt: skip
        dispatcher = Shards(members)
    else:
        config = configuration(args.mode, system, integration=args.integration)
        dispatcher = Dispatcher(kubeconfig, config, workdir, traced=args.tracemalloc, source=args.source,
                                interpreter=args.interpreter)  # fmt: skip
    dispatcher.start()
    return dispatcher


async def _connected(setup: Setup) -> None:
    """Every worker's MultiKueueCluster Active, and (this dispatcher) connected in its own view."""
    names, manager = setup.names, setup.run.api["manager"]
    for w in setup.workers:
        await eventually(
            lambda w=w: Objects(manager, MULTIKUEUE_CLUSTERS).get(names[w]),  # type: ignore[misc]
            until=lambda c: any(
                x["type"] == "Active" and x["status"] == "True"
                for x in ((c or {}).get("status") or {}).get("conditions") or []
            ),
            timeout=120,
            what=f"{w} Active",
        )
    if setup.dispatcher is not None:
        expected = {names[w] for w in setup.workers}
        await eventually(setup.dispatcher.connected, until=lambda up: up >= expected, timeout=120, what="connected")
    say(f"{setup.args.mode} mode, {len(setup.workers)} workers, {setup.args.objects} objects: dispatcher up, "
        "workers connected")  # fmt: skip


async def _counters(setup: Setup) -> Before:
    dispatcher, beside = setup.dispatcher, setup.beside
    counter = audit.Counter(
        {"manager": setup.bed.cluster("manager"), **{setup.names[w]: setup.bed.cluster(w) for w in setup.workers}}
    )
    before = Before(
        rss=setup.measured.rss(),
        cpu=setup.measured.cpu_seconds(),
        shard_cpu=dispatcher.each_cpu_seconds() if isinstance(dispatcher, Shards) else [],
        requests=await dispatcher.requests() if dispatcher else {},
        beside_cpu=beside.cpu_seconds() if beside else 0.0,
        counter=counter,
    )
    counter.mark()
    return before


async def _watch(setup: Setup, tg: Any) -> None:
    """The bench's own informers (it plays Kueue on the workers from them, and times what it sees), synced."""
    args, run = setup.args, setup.run
    manager = run.api["manager"]
    informers = [Informer(Objects(manager, PIPELINERUNS).source(namespace=NAMESPACE), on_event=run.manager_runs)]
    if args.mode == "kueue":
        informers.append(
            Informer(Objects(manager, WORKLOADS).source(namespace=NAMESPACE), on_event=run.manager_workloads)
        )
    selector = f"{ORIGIN_LABEL}=multikueue"
    for index, w in enumerate(setup.workers):
        source = Objects(run.api[w], PIPELINERUNS).source(namespace=NAMESPACE, label_selector=selector)
        informers.append(Informer(source, on_event=run.worker_runs(w)))
        if args.mode == "kueue":
            source = Objects(run.api[w], WORKLOADS).source(namespace=NAMESPACE, label_selector=selector)
            informers.append(Informer(source, on_event=run.worker_workloads(w, index, tg)))
    for informer in informers:
        tg.start_soon(informer.run)
    for informer in informers:
        await informer.synced.wait()


async def _dispatch(setup: Setup, before: Before, tg: Any) -> Dispatched:
    """Phase 1: submit (with ``--backlog``: everything first, then the dispatcher drains it) until every object is
    on a worker; who used the machine's cores meanwhile; the memory with every run in flight."""
    args, run, dispatcher, measured = setup.args, setup.run, setup.dispatcher, setup.measured
    if args.backlog:
        assert dispatcher is not None
        dispatcher.pause()
    started = time.monotonic()

    def cpu_now() -> tuple[float, float, float]:
        return measured.cpu_seconds(), time.process_time(), proc.machine_busy_seconds()

    cpu_at_start = (0.0, 0.0, 0.0) if args.backlog else cpu_now()  # a paused dispatcher has no process
    await _submit_all(setup, tg)
    submitted_at = time.monotonic()
    say(f"submitted {args.objects} in {submitted_at - started:.1f}s")
    if args.backlog:
        assert dispatcher is not None
        dispatcher.start()
        started = time.monotonic()  # throughput and latency count from the dispatcher's start
        cpu_at_start = cpu_now()
        run.submitted = dict.fromkeys(run.submitted, started)
    await progress(lambda: len(run.on_worker), args.objects, "on a worker", timeout=args.timeout)
    dispatched_at = max(t for _, t in run.on_worker.values())
    # Who used the machine's cores until the last object was on a worker: the dispatcher, the bench (submitting,
    # playing Kueue and Tekton on the workers), and the rest (API servers, etcd, Kueue).
    dispatcher_cpu = measured.cpu_seconds() - cpu_at_start[0]
    bench_cpu = time.process_time() - cpu_at_start[1]
    phase_cpu = {"seconds": time.monotonic() - started, "dispatcher": dispatcher_cpu, "bench": bench_cpu,
                 "rest": proc.machine_busy_seconds() - cpu_at_start[2] - dispatcher_cpu - bench_cpu}  # fmt: skip
    counted = before.counter.count(by_resource=True).get(audit.user(NAMESPACE, DISPATCHER_ACCOUNT), {})
    inflight_rss = measured.rss()
    if args.tracemalloc is not None and isinstance(dispatcher, Dispatcher):
        await dispatcher.dump_allocations()
        say(f"live allocations written to {args.tracemalloc}")
    return Dispatched(started, submitted_at, dispatched_at, phase_cpu, counted, inflight_rss)


async def _submit_all(setup: Setup, tg: Any) -> None:
    """N submissions, ``--submitters`` at a time (at most ``--rate`` a second); with ``--faults``, a worker's
    apiserver and the dispatcher are killed on the way, with ``--fault-interval`` a fault every that many seconds."""
    args, n = setup.args, setup.args.objects
    if setup.dispatcher is not None and (args.faults or args.fault_interval):
        setup.faults = Faults(setup.bed, setup.dispatcher, setup.workers, random.Random(args.seed), say)
    at = {int(n * 0.3): "kill", int(n * 0.6): "dispatcher"} if args.faults else {}
    limiter, done, began = anyio.Semaphore(args.submitters), anyio.Event(), time.monotonic()

    async def submit(i: int) -> None:
        async with limiter:
            await setup.run._retry(lambda: setup.run.submit(i))

    async with anyio.create_task_group() as submitters:
        if setup.faults is not None and args.fault_interval:
            tg.start_soon(setup.faults.every, args.fault_interval, done, tg)
        for i in range(n):
            if i in at and setup.faults is not None:
                await setup.faults.inject(at[i], tg)
            if args.rate:
                await anyio.sleep(max(0.0, began + i / args.rate - time.monotonic()))
            await limiter.acquire()
            limiter.release()
            submitters.start_soon(submit, i)
    done.set()
    if setup.faults is not None:  # the measured phases that follow run on a whole fleet
        await setup.faults.all_back()


async def _status_sync(setup: Setup, tg: Any) -> int:
    """Phase 2: worker status changes at ``--status-rate`` for ``--status-seconds``, each one's lag to the
    manager's object measured. Returns how many were written."""
    args, run = setup.args, setup.run
    names_in_flight = sorted(run.on_worker)
    changes = int(args.status_rate * args.status_seconds)
    latest: dict[str, str] = {}
    for k in range(changes):
        name = random.choice(names_in_flight)
        marker = f"step {k} of {name}"
        # A change not yet mirrored when the next one lands on the same object is superseded, not lost:
        # the dispatcher rightly mirrors only the newest state.
        if run.status_sent.pop(latest.get(name, ""), None) is not None:
            run.superseded += 1
        latest[name] = marker
        run.status_sent[marker] = time.monotonic()
        tg.start_soon(run._retry, lambda name=name, marker=marker: run.set_status(name, "Unknown", "Running", marker))
        await anyio.sleep(1 / args.status_rate)
    await progress(
        lambda: len(run.status_lag) + run.superseded, changes, "status changes mirrored", timeout=120, exact=False
    )
    return changes


async def _finish(setup: Setup, before: Before, tg: Any, changes: int) -> After:
    """Phase 3: every run succeeds on its worker, as many at once as submissions (10,000 writes started together
    wait for the bench's own connections past their connect timeout: aiohttp counts the wait for a pooled
    connection in it), until each is finished on the manager and nothing is left on any worker."""
    args, run, dispatcher, beside = setup.args, setup.run, setup.dispatcher, setup.beside
    finishers = anyio.Semaphore(args.submitters)

    async def finish(name: str) -> None:
        async with finishers:
            await run._retry(lambda: run.finish(name))

    for name in sorted(run.on_worker):
        tg.start_soon(finish, name)
    await progress(lambda: len(run.finished), args.objects, "finished on the manager", timeout=args.timeout)
    finished_at = max(run.finished.values())
    for w in setup.workers:
        await eventually(
            lambda w=w: names_on(run.api[w]),  # type: ignore[misc]
            until=lambda names: names == [],
            timeout=max(300.0, args.timeout),  # Kueue as released deletes at 5 QPS per worker
            what=f"nothing left on {w}",
        )
    cpu = setup.measured.cpu_seconds() - before.cpu
    setup.measured.rss()
    audited = before.counter.count()
    beside_figures: dict[str, Any] | None = None
    if beside is not None:
        beside.rss()
        beside_figures = {
            "cpu_seconds": beside.cpu_seconds() - before.beside_cpu,
            "peak_rss_mib": beside.peak_rss / 2**20,
            "requests_per_object": audited_per_object(audited, KUEUE_ACCOUNT, args.objects, by_verb=False),
            "requests_per_object_by_verb": audited_per_object(audited, KUEUE_ACCOUNT, args.objects, by_verb=True),
        }
    return After(
        finished_at=finished_at,
        status_changes=changes,
        cpu=cpu,
        shard_cpu=dispatcher.each_cpu_seconds() if isinstance(dispatcher, Shards) else [],
        requests=await dispatcher.requests() if dispatcher else {},
        work_queues=await dispatcher.queue_wait() if dispatcher else {},
        audited=audited,
        beside=beside_figures,
    )


def _latency_steps(run: Run) -> dict[str, list[float]]:
    """Kueue mode: where the dispatch latency goes (p50 of each step), the bench's own step in the middle."""
    return {
        "quota_reserved_to_check_pending (Kueue)": [run.submitted[k] - run.reserved[k] for k in run.reserved
                                                    if k in run.submitted],
        "handed_over_to_copy_on_worker": [run.copied[k] - run.submitted[k] for k in run.copied if k in run.submitted],
        "copy_to_admitted_by_the_bench": [run.admitted[k] - run.copied[k] for k in run.admitted if k in run.copied],
        "admitted_to_object_on_worker": [run.on_worker[k][1] - run.admitted[k] for k in run.on_worker
                                         if k in run.admitted],
    }  # fmt: skip


def _result(setup: Setup, before: Before, d: Dispatched, after: After) -> dict[str, Any]:
    args, run, n = setup.args, setup.run, setup.args.objects
    latencies = [run.on_worker[k][1] - run.submitted[k] for k in run.on_worker if k in run.submitted]
    from_creation = [run.on_worker[k][1] - run.created[k] for k in run.on_worker if k in run.created]
    placement = {w: sum(1 for x, _ in run.on_worker.values() if x == w) for w in setup.workers}
    duplicates = {k: c for k, c in run.copies_created.items() if c > 1}
    return {
        "mode": args.mode,
        "dispatcher": args.dispatcher,
        "kueue": args.kueue,
        "kueue_build": _kueue_build(args),
        "side_by_side": args.side_by_side,
        "kueue_beside": after.beside,
        "workers": len(setup.workers),
        "objects": n,
        "faults": args.faults,
        "backlog": args.backlog,
        "integration": args.integration,
        "source": args.source_commit,
        "dispatch_throughput_per_s": n / (d.dispatched_at - d.started),
        "end_to_end_throughput_per_s": n / (after.finished_at - d.started),
        "submit_seconds": d.submitted_at - d.started,
        "dispatch_latency_s": {f"p{q}": percentile(latencies, q) for q in (50, 95, 99)},
        "submit_to_worker_latency_s": {f"p{q}": percentile(from_creation, q) for q in (50, 95, 99)},
        "dispatch_latency_steps_p50_s": {
            step: percentile(values, 50) for step, values in _latency_steps(run).items() if values
        },
        "status_sync_lag_s": {
            "p50": percentile(run.status_lag, 50),
            "p99": percentile(run.status_lag, 99),
            "changes": after.status_changes,
            "superseded": run.superseded,
            "mirrored": len(run.status_lag),
            "rate_per_s": args.status_rate,
        },
        "controller_cpu_seconds": after.cpu,
        **_cpu_per_thousand(after, n),
        "dispatch_phase_cpu_seconds": d.phase_cpu,
        "controller_work_queues": after.work_queues,
        "controller_peak_rss_mib": setup.measured.peak_rss / 2**20,
        "controller_rss_baseline_mib": before.rss / 2**20,
        "controller_rss_in_flight_mib": d.inflight_rss / 2**20,
        "rss_per_1000_in_flight_mib": (d.inflight_rss - before.rss) / 2**20 / n * 1000,
        "requests_per_object": audited_per_object(after.audited, DISPATCHER_ACCOUNT, n, by_verb=False),
        "requests_per_object_by_verb": audited_per_object(after.audited, DISPATCHER_ACCOUNT, n, by_verb=True),
        "requests_per_object_self_reported": per_object(before.requests, after.requests, n, by_method=False),
        "requests_per_object_self_reported_by_method": per_object(before.requests, after.requests, n, by_method=True),
        "placement": placement,
        "shards": args.shards,
        "split_cores": args.split_cores,
        "shard_cpu_seconds": [c - c0 for c, c0 in zip(after.shard_cpu, before.shard_cpu, strict=True)],
        # What the dispatcher asked of each cluster until every object was on its worker, by verb and resource
        # (totals for the N objects): the mix bench/ceiling.py replays.
        "dispatch_phase_requests": d.requests,
        "objects_created_more_than_once": len(duplicates),
        "runs_on_two_workers": sum(1 for seen in run.workers_of.values() if len(seen) > 1),
        "race": args.race,
        "rate_per_s": args.rate,
        "fault_interval_s": args.fault_interval,
        "seed": args.seed,
        "faults_injected": setup.faults.counts() if setup.faults is not None else {},
        "fault_log": setup.faults.log if setup.faults is not None else [],
        "dispatcher_exited_by_itself": setup.dispatcher.exits if isinstance(setup.dispatcher, Dispatcher) else [],
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform()},
    }


def _cpu_per_thousand(after: After, n: int) -> dict[str, float]:
    """The dispatching process's user + system CPU (/proc) over the measured phases, per 1,000 runs: this
    dispatcher's, or the whole Kueue process's where Kueue dispatches; and the whole manager side's (beside real
    Kueue: this dispatcher + Kueue's core)."""
    beside = after.beside["cpu_seconds"] if after.beside else 0.0
    return {
        "cpu_seconds_per_1000_runs": proc.per_thousand(after.cpu, n),
        "manager_side_cpu_seconds_per_1000_runs": proc.per_thousand(after.cpu + beside, n),
    }


def _kueue_build(args: argparse.Namespace) -> dict[str, Any] | None:
    """Which Kueue ran on the manager: its version, the patch applied, its gates and clientConnection."""
    if args.kueue != "real":
        return None
    fixed = args.dispatcher == "kueue-fixed"
    return {
        "version": crds.KUEUE_VERSION,
        "patch": FIX_PATCH.name if fixed else None,
        "feature_gates": list(RealKueue.feature_gates(fixed=fixed)),
        "client_connection": RealKueue.configuration(multikueue=False, fixed=fixed).get("clientConnection"),
    }


def per_object(before: dict[str, float], after: dict[str, float], n: int, *, by_method: bool) -> dict[str, float]:
    """Requests per object, per cluster (and method): the dispatcher's own counts during the run."""
    totals: dict[str, float] = {}
    for key, value in after.items():
        name = key if by_method else key.split(" ", 1)[0]
        totals[name] = totals.get(name, 0.0) + (value - before.get(key, 0.0)) / n
    return {k: round(v, 2) for k, v in sorted(totals.items())}


def audited_per_object(
    audited: dict[str, dict[str, dict[str, int]]], account: str, n: int, *, by_verb: bool
) -> dict[str, float]:
    """Requests per object per cluster (and verb) made by ``account``, as the apiservers' audit logs count them."""
    totals: dict[str, float] = {}
    for cluster, verbs in audited.get(audit.user(NAMESPACE, account), {}).items():
        for verb, count in verbs.items():
            if " " in verb and not by_verb:  # a failed request, already counted under its verb
                continue
            key = f"{cluster} {verb}" if by_verb else cluster
            totals[key] = totals.get(key, 0.0) + count / n
    return {k: round(v, 2) for k, v in sorted(totals.items())}


async def names_on(api: ApiClient) -> list[str]:
    listed = await k8s_client.CustomObjectsApi(k8s(api)).list_namespaced_custom_object(
        "tekton.dev", "v1", NAMESPACE, "pipelineruns"
    )
    return sorted(i["metadata"]["name"] for i in listed["items"])


async def progress(count: Callable[[], int], total: int, what: str, *, timeout: float, exact: bool = True) -> None:
    deadline, last = time.monotonic() + timeout, -1
    while True:
        done = count()
        if done != last and (done % max(1, total // 10) == 0 or done >= total):
            say(f"{done}/{total} {what}")
            last = done
        if done >= total:
            return
        if time.monotonic() > deadline:
            if exact:
                raise TimeoutError(f"only {done}/{total} {what} after {timeout:.0f}s")
            say(f"{done}/{total} {what} within {timeout:.0f}s; the rest counted as lost")
            return
        await anyio.sleep(0.1)


def _commit(checkout: Path) -> str:
    """The commit a checkout is at (short), or "" outside git."""
    try:
        out = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10, check=True)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return out.stdout.strip()


KUEUE_MAX_CLUSTERS = 20
"""MultiKueueConfig's spec.clusters maxItems in Kueue v0.19.2's CRD."""


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["kueue", "direct"], default="kueue")
    parser.add_argument(
        "--kueue",
        choices=["played", "real"],
        default="played",
        help="Kueue on the manager: played by the bench at once, or the real one (built from its Go module)",
    )
    parser.add_argument(
        "--dispatcher",
        choices=list(sidebyside.VARIANTS),
        default="multikueue",
        help="what dispatches: this project, or Kueue's own MultiKueue with its generic adapter, as released or with "
        "the worker-client fix (both imply --kueue real)",
    )
    parser.add_argument(
        "--dispatchers",
        metavar="LIST",
        help="the side by side in one invocation: each of e.g. kueue,kueue-fixed,multikueue on a fresh bed under the "
        "same load, one after the other (bench/sidebyside.py); results in --out-dir",
    )
    parser.add_argument("--rounds", type=int, default=1, help="--dispatchers: run the sequence this many times")
    parser.add_argument(
        "--out-dir", type=Path, default=RESULTS, help="--dispatchers: where each run's JSON goes (bench/results)"
    )
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--status-rate", type=float, default=20.0, help="worker status changes per second")
    parser.add_argument("--status-seconds", type=float, default=10.0)
    parser.add_argument("--submitters", type=int, default=16, help="concurrent submissions by the bench")
    parser.add_argument("--faults", action="store_true", help="kill a worker's apiserver and the dispatcher mid-run")
    parser.add_argument(
        "--fault-interval",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="while submitting, a fault every SECONDS: a worker's apiserver paused, the dispatcher killed, a worker's "
        "apiserver killed, in turn (bench/faults.py)",
    )
    parser.add_argument(
        "--race", action="store_true", help="Kueue mode: every worker admits every copy (the first admission wins)"
    )
    parser.add_argument("--rate", type=float, default=0.0, help="submissions per second (0: as fast as possible)")
    parser.add_argument("--seed", type=int, default=1, help="the random choices of a run (faults, races, status)")
    parser.add_argument(
        "--backlog", action="store_true", help="submit everything with the dispatcher stopped, then time its drain"
    )
    parser.add_argument("--timeout", type=float, default=900.0)
    parser.add_argument("--logs", type=Path, help="keep the controllers' logs in this directory (the bed's is removed)")
    parser.add_argument(
        "--tracemalloc",
        type=Path,
        metavar="FILE",
        help="trace the dispatcher's allocations and write what is live in flight to FILE (slows it: no timings)",
    )
    parser.add_argument(
        "--integration", action="store_true", help="the PipelineRun adapter also has an integration section"
    )
    parser.add_argument(
        "--source",
        type=Path,
        metavar="DIR",
        help="run the dispatcher from another checkout of this repository (git worktree), for before/after figures",
    )
    parser.add_argument(
        "--dev-venv",
        action="store_true",
        help="run the dispatcher with this interpreter (test tools installed) instead of the runtime virtualenv",
    )
    parser.add_argument(
        "--shards", type=int, default=1, help="Direct mode: this many dispatchers split the objects (docs/scaling.md)"
    )
    parser.add_argument(
        "--split-cores",
        action="store_true",
        help="the API servers and etcd on CPU 0, the bench and the dispatcher on CPU 1 (bench/cores.py)",
    )
    parser.add_argument("--out", type=Path, help="JSON result file (default bench/results/<mode>-w<W>-n<N>.json)")
    return parser


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    """The flags, checked together (argparse's one line and exit 2 for a combination that cannot run)."""
    parser = _parser()
    args = parser.parse_args(argv)
    args.source_commit = _commit(args.source or ROOT)
    args.side_by_side = None  # one run of a --dispatchers session: its session, round and variant
    try:
        args.variants = sidebyside.parse_variants(args.dispatchers) if args.dispatchers else [args.dispatcher]
    except ValueError as e:
        parser.error(str(e))
    if args.dispatchers or args.dispatcher in KUEUE_DISPATCHERS:
        args.kueue = "real"
    if (problem := _cannot_run(args)) is not None:
        parser.error(problem)
    # The dispatcher runs with its runtime dependencies only (bench/runtime.py), unless --dev-venv.
    ours = "multikueue" in args.variants and not args.dev_venv
    args.interpreter = runtime.python(args.source or ROOT) if ours else None
    return args


def _cannot_fault(args: argparse.Namespace) -> str | None:
    """Why the fault flags cannot run with the others, or ``None``."""
    if not (args.faults or args.fault_interval):
        return None
    if args.dispatcher in KUEUE_DISPATCHERS or args.dispatchers:
        return "--faults, --fault-interval: this project's dispatcher only (not --dispatcher kueue, --dispatchers)"
    if args.shards > 1:
        return "--faults, --fault-interval: not with --shards"
    if args.split_cores:
        return "--split-cores: not with faults (a restarted apiserver would start on the load's core)"
    return None


def _cannot_compare(args: argparse.Namespace) -> str | None:
    """Why Kueue's own MultiKueue, or the side by side, cannot run with the other flags, or ``None``."""
    if (args.dispatcher in KUEUE_DISPATCHERS or args.dispatchers) and (args.backlog or args.mode != "kueue"):
        return "--dispatcher kueue, kueue-fixed and --dispatchers run Kueue mode only, without --backlog"
    if args.dispatchers and (args.shards > 1 or args.tracemalloc or args.out):
        return "--dispatchers: not with --shards, --tracemalloc or --out (each run's JSON goes to --out-dir)"
    if args.rounds > 1 and not args.dispatchers:
        return "--rounds: with --dispatchers only"
    return None


def _cannot_run(args: argparse.Namespace) -> str | None:
    """Why this combination of flags cannot run, or ``None``."""
    if (why := _cannot_fault(args) or _cannot_compare(args)) is not None:
        return why
    if args.race and (args.mode != "kueue" or args.kueue != "played"):
        return "--race: Kueue mode with the played Kueue only"
    if args.kueue == "real" and args.mode != "kueue":
        return "--kueue real needs --mode kueue"
    if args.shards > 1 and (args.mode != "direct" or args.tracemalloc):
        return "--shards: Direct mode only, without --tracemalloc"
    if args.split_cores and (why := cores.check()) is not None:
        return why
    if args.mode == "kueue" and args.workers > KUEUE_MAX_CLUSTERS:
        return (f"--workers {args.workers}: Kueue's MultiKueueConfig holds at most {KUEUE_MAX_CLUSTERS} clusters "
                "(spec.clusters maxItems); --mode direct places on more")  # fmt: skip
    return None


def _out_path(args: argparse.Namespace) -> Path:
    """bench/results/<mode>-w<W>-n<N>[-faults][-backlog][-integration][-shardsK][-split][-kueue-...].json, or
    --out."""
    suffix = ("-faults" if args.faults else "") + ("-backlog" if args.backlog else "")
    suffix += ("-race" if args.race else "") + (f"-soak{args.fault_interval:g}s" if args.fault_interval else "")
    suffix += "-integration" if args.integration else ""
    suffix += f"-shards{args.shards}" if args.shards > 1 else ""
    suffix += "-split" if args.split_cores else ""
    if args.kueue == "real":
        kueue_suffix = {"kueue": "-kueue-multikueue", "kueue-fixed": "-kueue-fixed-multikueue"}
        suffix += kueue_suffix.get(args.dispatcher, "-kueue-core")
    out: Path = args.out or RESULTS / f"{args.mode}-w{args.workers}-n{args.objects}{suffix}.json"
    return out


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    try:
        _build_kueue(args)
    except ComponentUnavailable as e:
        say(f"cannot run real Kueue: {e}")
        return 3
    if args.dispatchers:
        return _side_by_side(args)
    out = _out_path(args)
    result = _run_once(args)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2) + "\n")
    say(f"wrote {out}")
    print(json.dumps(result, indent=2))
    return 0


def _build_kueue(args: argparse.Namespace) -> None:
    """Kueue's builds the variants need, from the cache or built now (a cold build prints its progress)."""
    args.kueue_binary = args.kueue_fixed_binary = None
    if args.kueue == "real" and set(args.variants) - {"kueue-fixed"}:
        args.kueue_binary = kueue_binary(say)
    if "kueue-fixed" in args.variants:
        args.kueue_fixed_binary = patched_kueue_binary(FIX_PATCH, say)


def _side_by_side(args: argparse.Namespace) -> int:
    """Every variant of --dispatchers on a fresh bed, --rounds times, each result written as it ends."""
    session = time.strftime("%Y%m%dT%H%M%S")
    stem = f"side-by-side-w{args.workers}-n{args.objects}"
    slots = sidebyside.schedule(args.variants, args.rounds, args.out_dir, stem)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    for k, slot in enumerate(slots, 1):
        say(f"side by side {session}, run {k}/{len(slots)}: {sidebyside.VARIANTS[slot.variant]}")
        one = sidebyside.variant_args(args, slot, session)
        slot.out.write_text(json.dumps(_run_once(one), indent=2) + "\n")
        say(f"wrote {slot.out}")
    say(f"side by side {session} done: python -m bench.report --results {args.out_dir}")
    return 0


def _run_once(args: argparse.Namespace) -> dict[str, Any]:
    """One run on a fresh bed: the result (not yet written)."""
    random.seed(args.seed)  # the status phase's and the race's choices: the same for every side-by-side variant
    clusters = ("manager", *(f"worker{i + 1}" for i in range(args.workers)))
    users = [audit.user(NAMESPACE, a) for a in (DISPATCHER_ACCOUNT, KUEUE_ACCOUNT)]
    if args.split_cores:
        cores.load_here()  # before the bed starts: its servers are moved off this core once up
    with (
        tempfile.TemporaryDirectory(prefix="multikueue-bench-") as policy_dir,
        TestBed(clusters=clusters, apiserver_args=audit.apiserver_args(Path(policy_dir), users)) as bed,
    ):
        crds.install_on_bed(bed, [c for c in crds.all_crds() if c["spec"]["group"] in ("kueue.x-k8s.io", "tekton.dev")])
        if args.split_cores:
            cores.servers_apart(bed)
        assert bed.workdir is not None
        try:
            return anyio.run(main_async, args, bed, bed.workdir)
        finally:
            for dispatcher in Dispatcher.started:
                dispatcher.stop()
            Dispatcher.started.clear()
            if args.logs is not None:
                args.logs.mkdir(parents=True, exist_ok=True)
                for log in (bed.workdir / "dispatcher.log", bed.workdir / "kueue" / "kueue.log"):
                    if log.exists():
                        shutil.copy(log, args.logs / log.name)


if __name__ == "__main__":
    sys.exit(main())
