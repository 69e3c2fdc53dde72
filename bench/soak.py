"""The fault soak: sustained load on the local test bed, a fault schedule, and the promise checked at the end.

    make soak                                                        # 10 minutes, Kueue mode, W = 3, 2 replicas
    python -m bench.soak --mode direct --workers 5 --rate 10 --duration 3600 --fault-interval 30
    python -m bench.soak --duration 180 --check                      # CI: exit 1 when an invariant breaks

Runs are submitted at ``--rate`` a second for ``--duration`` seconds to two dispatcher replicas with leader election
(``--replicas``), configured from their ConfigMap as deployed. Kueue and Tekton are played as the benchmark plays
them: in Kueue mode every worker's Kueue admits every copy it receives after a random delay (the first admission
wins); each run's object, once on its worker, lives 1-8 s and succeeds, fails (10 %), or is cancelled by its user on
the manager halfway (5 %; the cancel must reach the worker's copy). Meanwhile the faults of ``bench/soakfaults.py``
come one every ``--fault-interval`` seconds. Then the soak waits for every run to finish and every copy to go, and
checks ``bench/invariants.py`` against what its watches and the API servers' audit logs saw. The result (JSON, and
with ``--report`` a page and a timeline plot) has the faults, the invariants, recovery times (a leader killed ->
the next object dispatched; a worker back -> the Workload copies it kept for runs decided elsewhere gone) and
latency percentiles.
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import signal
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import anyio
import structlog
import yaml
from kubernetes_asyncio import client as k8s_client

from bench import audit, invariants, runtime, soakreport
from bench import run as bench_run
from bench.dispatcher import Dispatcher
from bench.run import (
    CHECK_CONTROLLER,
    DISPATCHER_ACCOUNT,
    NAMESPACE,
    PIPELINERUNS,
    RESULTS,
    SYSTEM,
    Run,
    configuration,
    percentile,
    say,
)  # fmt: skip
from bench.soakfaults import CONFIG_KEY, CYCLE, Fault, Schedule
from multikueue.dispatch.direct import FAILED, FINISHED
from multikueue.kube.addresses import WORKLOADS, Resource
from multikueue.kube.client import ApiClient, api_client_from_kubeconfig
from multikueue.kube.errors import Conflict
from multikueue.kube.resources import Objects
from multikueue.labels import ORIGIN_LABEL, PLACEMENT_PHASE, PLACEMENT_WORKER
from multikueue.runtime.informer import ADDED, DELETED, Informer
from multikueue_testbed import crds, kueue
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.testbed import TestBed

Object = dict[str, Any]
LIFETIME = (1.0, 8.0)
FATES = (("succeed", 0.85), ("fail", 0.10), ("cancel", 0.05))
DECIDED = {"succeed": ("True", "Succeeded"), "fail": ("False", "Failed"), "cancel": ("False", "Cancelled")}
WRITE_DEADLINE = 240.0  # a played write retried past any outage the schedule makes
# A user's cancel not on its worker's copy by then counts as lost. Under a backlog a cancel waits its turn in the
# queue like any reconcile (the Kueue-mode hour saw status mirrored 263 s late), so it is measured, not timed out at
# the write deadline (``cancel_to_worker`` in the result).
CANCEL_DEADLINE = 1200.0
# Submissions in flight at once: a manager slow to answer (restarting under a backlog) queues them here, instead of
# thousands of retry loops reconnecting at once (seen: the restarted API server then accepted no connection).
SUBMISSIONS_AT_ONCE = 64
CONFIG_MAP = "multikueue-config"
CONFIG_MAPS = Resource("", "v1", "configmaps", "ConfigMap")


def soak_configuration(mode: str) -> str:
    """The shipped configuration, with the PipelineRun adapter carrying a user's cancel to the worker's copy."""
    document = yaml.safe_load(configuration(mode, SYSTEM))
    adapters = document["dispatcher"].setdefault("adapters", [{"name": "PipelineRun.v1.tekton.dev"}])
    adapters[0]["specSync"] = [{"path": ".spec.status", "values": ["Cancelled"]}]
    return str(yaml.safe_dump(document))


class Soak:
    """What the soak plays (users, Tekton; Kueue through ``Run``) and what it observes."""

    def __init__(self, args: argparse.Namespace, bed: TestBed, workers: list[str]) -> None:
        self.args, self.bed, self.workers = args, bed, workers
        self.rng = random.Random(args.seed)
        self.run = Run(args, bed, workers)  # the submission and the workers' played Kueue
        self.names: dict[str, str] = {}  # bed worker -> its MultiKueueCluster
        self.observed: dict[str, invariants.Observed] = {}
        self.fate: dict[str, str] = {}
        self.submitted: dict[str, float] = {}
        self.dispatched: dict[str, float] = {}  # first seen on a worker
        self.decided_at: dict[str, float] = {}
        self.final_at: dict[str, float] = {}
        self.cancel_seen: dict[str, anyio.Event] = {}
        self.cancel_sent: dict[str, float] = {}  # the cancel written on the manager
        self.cancel_reached: dict[str, float] = {}  # first seen on the worker's copy
        self.workload_copies: dict[str, dict[str, bool]] = {w: {} for w in workers}  # worker -> run -> present
        self.started = time.monotonic()
        self.timeline: list[tuple[float, int, int, int]] = []  # (s, submitted, in flight, finished on the manager)
        self.tg: Any = None
        self.submitting = anyio.Semaphore(SUBMISSIONS_AT_ONCE)
        self.given_up: list[str] = []  # played writes the harness gave up on: the record is incomplete

    @property
    def api(self) -> dict[str, ApiClient]:
        return self.run.api

    def _now(self) -> float:
        return round(time.monotonic() - self.started, 3)

    # --------------------------------------------------------------------------------------- watches

    def worker_runs(self, worker: str) -> Any:
        def seen(kind: str, obj: Object) -> None:
            name = obj["metadata"]["name"]
            run = self.observed.get(name)
            if run is None:
                return
            lives = run.lives.setdefault(self.names[worker], [])
            run.uids.add(obj["metadata"].get("uid", ""))
            if kind == ADDED:
                lives.append((self._now(), None))
                self.dispatched.setdefault(name, time.monotonic())
                self.tg.start_soon(self._play_tekton, worker, name)
            elif kind == DELETED and lives and lives[-1][1] is None:
                lives[-1] = (lives[-1][0], self._now())
            if (obj.get("spec") or {}).get("status") == "Cancelled" and name in self.cancel_seen:
                self.cancel_reached.setdefault(name, time.monotonic())
                self.cancel_seen[name].set()

        return seen

    def worker_workloads(self, worker: str, index: int) -> Any:
        admit = self.run.worker_workloads(worker, index, self.tg)

        def seen(kind: str, obj: Object) -> None:
            name = obj["metadata"]["name"].removeprefix("pipelinerun-")
            self.workload_copies[worker][name] = kind != DELETED
            admit(kind, obj)

        return seen

    def manager_runs(self, kind: str, obj: Object) -> None:
        run = self.observed.get(obj["metadata"]["name"])
        if run is None or kind == DELETED:
            return
        self.run.manager_runs(kind, obj)
        if self.args.mode == "direct":
            notes = obj["metadata"].get("annotations") or {}
            run.recorded = notes.get(PLACEMENT_WORKER, run.recorded)
            if notes.get(PLACEMENT_PHASE) in (FINISHED, FAILED):  # failed and cancelled runs are over too
                self.run.finished.setdefault(run.name, time.monotonic())
        for c in (obj.get("status") or {}).get("conditions") or []:
            final = (c.get("status"), c.get("reason"))
            if c.get("type") == "Succeeded" and final[0] in ("True", "False") and run.finals[-1:] != [final]:
                run.finals.append((str(final[0]), str(final[1])))
                self.final_at.setdefault(run.name, time.monotonic())

    def manager_workloads(self, kind: str, obj: Object) -> None:
        self.run.manager_workloads(kind, obj)
        run = self.observed.get(obj["metadata"]["name"].removeprefix("pipelinerun-"))
        if run is not None and kind != DELETED:
            run.recorded = (obj.get("status") or {}).get("clusterName") or run.recorded

    # --------------------------------------------------------------------------------------- players

    async def _retrying(self, what: str, action: Any) -> None:
        """A played write, retried across outages (a worker paused, the manager restarting, etcd paused)."""
        deadline = time.monotonic() + WRITE_DEADLINE
        for attempt in range(10_000):
            try:
                await action()
                return
            except Conflict:
                return  # made by the attempt before, whose answer was lost
            except Exception as e:
                if time.monotonic() > deadline:  # recorded, not raised: one write must not end the whole soak
                    say(f"gave up on {what}: {e}")
                    self.given_up.append(f"{what}: {e}")
                    return
                await anyio.sleep(min(2.0, 0.2 * (attempt + 1)))

    async def submit(self, i: int) -> None:
        name = f"run-{i:05d}"
        self.observed[name] = invariants.Observed(name)
        self.fate[name] = self.rng.choices([f for f, _ in FATES], [w for _, w in FATES])[0]
        async with self.submitting:
            self.submitted[name] = time.monotonic()
            await self._retrying(f"submitting {name}", lambda: self.run.submit(i))

    async def _play_tekton(self, worker: str, name: str) -> None:
        """Tekton on the worker: the run lives a while, then ends as its fate says (a cancel once it reached the
        copy), the worker's Kueue marks its Workload copy Finished."""
        fate, life = self.fate[name], self.rng.uniform(*LIFETIME)
        run = self.observed[name]
        if run.decided is not None:
            return  # already ended (seen again after a relist)
        if fate == "cancel":
            self.cancel_seen[name] = anyio.Event()
            await anyio.sleep(life / 2)
            patch, manager_runs = {"spec": {"status": "Cancelled"}}, Objects(self.api["manager"], PIPELINERUNS)
            await self._retrying(f"cancelling {name}", lambda: manager_runs.patch(name, patch, NAMESPACE))
            self.cancel_sent[name] = time.monotonic()
            with anyio.move_on_after(CANCEL_DEADLINE):
                await self.cancel_seen[name].wait()
            if not self.cancel_seen[name].is_set():
                run.lost_cancel = True
                fate = "succeed"
        else:
            await anyio.sleep(life)
        status, reason = DECIDED[fate]
        run.decided, run.worker_decided = (status, reason), self.names[worker]
        self.decided_at[name] = time.monotonic()
        condition = {"type": "Succeeded", "status": status, "reason": reason, "message": f"{reason} {name}"}
        runs, body = Objects(self.api[worker], PIPELINERUNS), {"status": {"conditions": [condition]}}
        await self._retrying(f"{name}'s status on {worker}", lambda: runs.patch_status(name, body, NAMESPACE))
        if self.args.mode == "kueue":
            await self._retrying(f"{name}'s Workload on {worker}",
                                 lambda: kueue.finish(self.api[worker], f"pipelinerun-{name}", NAMESPACE,
                                                      reason=reason))  # fmt: skip

    # --------------------------------------------------------------------------------------- figures

    def sample(self) -> None:
        finished = len(self.run.finished)
        self.timeline.append((self._now(), len(self.submitted), len(self.submitted) - finished, finished))

    def stale_copies(self, worker: str) -> set[str]:
        """Workload copies the worker keeps for runs that are finished or run on another worker."""
        mine, finished = self.names[worker], self.run.finished
        return {name for name, present in self.workload_copies[worker].items()
                if present and (name in finished or self.observed[name].recorded not in ("", mine))}  # fmt: skip

    def leftovers(self) -> None:
        """Workload copies still on a worker at the end are left behind too (Kueue mode)."""
        for worker, copies in self.workload_copies.items():
            for name, present in copies.items():
                if present:
                    self.observed[name].workload_copies_left += (self.names[worker],)


async def recovery_after_return(soak: Soak, worker: str, back: float, figures: list[float]) -> None:
    """From a worker's return until the stale Workload copies it kept then are gone (bounded)."""
    stale = soak.stale_copies(worker)
    if not stale:
        return
    for _ in range(2400):  # 10 minutes at most
        if not stale & soak.stale_copies(worker):
            figures.append(round(time.monotonic() - back, 2))
            return
        await anyio.sleep(0.25)


async def recovery_after_leader_kill(soak: Soak, killed: float, leader: float, figures: list[float]) -> None:
    """From a leader's SIGKILL until the first object seen on a worker after the next leader took the Lease (one
    seen sooner was created by the killed leader) (bounded)."""
    for _ in range(6000):  # 10 minutes at most
        if after := [t for t in soak.dispatched.values() if t > leader]:
            figures.append(round(min(after) - killed, 2))
            return
        await anyio.sleep(0.1)


# ------------------------------------------------------------------------------------------- the soak


async def set_up(args: argparse.Namespace, bed: TestBed, workdir: Path, soak: Soak) -> list[Dispatcher]:
    """Namespaces, audited identities, Kueue's objects, the configuration's ConfigMap and the replicas, started and
    connected."""
    for cluster in ("manager", *soak.workers):
        soak.api[cluster] = await api_client_from_kubeconfig(bed.cluster(cluster).kubeconfig,
                                                             temp_dir=workdir / "certs")  # fmt: skip
        await k8s_client.CoreV1Api(k8s(soak.api[cluster])).create_namespace(raw_body({"metadata": {"name": NAMESPACE}}))
    manager = soak.api["manager"]
    await k8s_client.CoreV1Api(k8s(manager)).create_namespace(raw_body({"metadata": {"name": SYSTEM}}))
    identities = {c: await audit.identity(soak.api[c], bed.cluster(c), NAMESPACE, DISPATCHER_ACCOUNT)
                  for c in ("manager", *soak.workers)}  # fmt: skip
    names = await kueue.multikueue_setup(manager, namespace=SYSTEM, prefix="bench", controller_name=CHECK_CONTROLLER,
                                         workers={w: identities[w] for w in soak.workers})  # fmt: skip
    soak.run.check = names["check"]
    soak.names = {w: names[w] for w in soak.workers}
    config = {"metadata": {"name": CONFIG_MAP}, "data": {CONFIG_KEY: soak_configuration(args.mode)}}
    await Objects(manager, CONFIG_MAPS).create(config, SYSTEM)
    kubeconfig = workdir / "dispatcher-kubeconfig.yaml"
    kubeconfig.write_text(yaml.safe_dump(identities["manager"]))
    replicas = []
    for k in range(args.replicas):
        (workdir / f"replica{k}").mkdir()
        identity = f"replica-{k}"
        election = ("--leader-elect", "--leader-elect-namespace", SYSTEM, "--leader-elect-identity", identity)
        replica = Dispatcher(kubeconfig, None, workdir / f"replica{k}", extra=election, identity=identity,
                             interpreter=args.interpreter)  # fmt: skip
        replica.start()
        replicas.append(replica)
    say(f"{args.mode} mode, {len(soak.workers)} workers, {args.replicas} replicas (leader election) started")
    return replicas


async def rotate_secret(soak: Soak, worker: str) -> None:
    """The worker's kubeconfig Secret replaced by one with a fresh token of the same identity."""
    fresh = await audit.identity(soak.api[worker], soak.bed.cluster(worker), NAMESPACE, DISPATCHER_ACCOUNT)
    await kueue.put_kubeconfig_secret(soak.api["manager"], SYSTEM, f"{worker}-kubeconfig", fresh)


async def watch(soak: Soak, tg: Any) -> None:
    """The soak's informers (manager runs and Workloads; every worker's copies), synced."""
    manager, mode = soak.api["manager"], soak.args.mode
    informers = [Informer(Objects(manager, PIPELINERUNS).source(namespace=NAMESPACE), on_event=soak.manager_runs)]
    if mode == "kueue":
        informers.append(Informer(Objects(manager, WORKLOADS).source(namespace=NAMESPACE),
                                  on_event=soak.manager_workloads))  # fmt: skip
    selector = f"{ORIGIN_LABEL}=multikueue"
    for index, w in enumerate(soak.workers):
        source = Objects(soak.api[w], PIPELINERUNS).source(namespace=NAMESPACE, label_selector=selector)
        informers.append(Informer(source, on_event=soak.worker_runs(w)))
        if mode == "kueue":
            source = Objects(soak.api[w], WORKLOADS).source(namespace=NAMESPACE, label_selector=selector)
            informers.append(Informer(source, on_event=soak.worker_workloads(w, index)))
    for informer in informers:
        tg.start_soon(informer.run)
    with anyio.fail_after(120):
        for informer in informers:
            await informer.synced.wait()


async def submit_all(soak: Soak, tg: Any) -> None:
    """``rate`` runs a second for ``duration`` seconds, on schedule (a slow submission does not delay the next)."""
    args = soak.args
    total, start = int(args.rate * args.duration), time.monotonic()
    for i in range(total):
        delay = start + i / args.rate - time.monotonic()
        if delay > 0:
            await anyio.sleep(delay)
        tg.start_soon(soak.submit, i)
        if i % max(1, int(args.rate * 30)) == 0:
            say(f"{i}/{total} submitted, {len(soak.run.finished)} finished on the manager, "
                f"{len(soak.submitted) - len(soak.run.finished)} in flight")  # fmt: skip


async def kubelet(replicas: list[Dispatcher]) -> None:
    """A replica that exits (a lost Lease ends the process, as controller-runtime's managers do) is started again,
    as kubelet restarts its container (here after a second, not kubelet's growing back-off)."""
    for _ in range(10_000_000):
        for replica in replicas:
            process = replica.process
            if process is not None and process.poll() is not None:
                replica.exits.append(process.returncode)
                say(f"{replica.identity} exited ({process.returncode}); started again")
                replica.start()
        await anyio.sleep(1.0)


async def sample_every(soak: Soak, seconds: float) -> None:
    for _ in range(1_000_000):
        soak.sample()
        await anyio.sleep(seconds)


async def drain(soak: Soak, timeout: float) -> bool:
    """Until every run is finished on the manager and no copy is on a worker; whether that came in time."""
    done = False
    with anyio.move_on_after(timeout):
        for i in range(1_000_000):
            open_lives = sum(
                1 for r in soak.observed.values() for spans in r.lives.values() for _, g in spans if g is None
            )
            copies = sum(1 for c in soak.workload_copies.values() for present in c.values() if present)
            if len(soak.run.finished) == len(soak.submitted) and not open_lives and not copies:
                done = True
                break
            if i % 40 == 0:
                say(f"draining: {len(soak.submitted) - len(soak.run.finished)} runs not finished on the manager, "
                    f"{open_lives} objects and {copies} Workload copies on workers")  # fmt: skip
            await anyio.sleep(0.25)
    return done


async def soak_async(args: argparse.Namespace, bed: TestBed, workdir: Path) -> dict[str, Any]:
    workers = [f"worker{i + 1}" for i in range(args.workers)]
    soak = Soak(args, bed, workers)
    replicas = await set_up(args, bed, workdir, soak)
    leader_recovery: list[float] = []
    new_leader: list[float] = []
    worker_recovery: list[float] = []
    async with anyio.create_task_group() as tg:
        soak.tg = tg
        await watch(soak, tg)
        schedule = Schedule(bed, replicas, lambda: soak.api["manager"], lambda w: rotate_secret(soak, w),
                            (SYSTEM, CONFIG_MAP), workers, random.Random(args.seed + 1), say, soak.started,
                            kinds=tuple(args.faults))  # fmt: skip
        schedule.on_return = lambda w, t: tg.start_soon(recovery_after_return, soak, w, t, worker_recovery)
        tg.start_soon(sample_every, soak, 2.0)
        tg.start_soon(kubelet, replicas)
        stop = anyio.Event()
        if args.fault_interval:
            tg.start_soon(schedule.every, args.fault_interval, stop, tg)
        await submit_all(soak, tg)
        stop.set()
        await schedule.all_back()
        for killed, leader in schedule.leader_kills:
            if leader is not None:
                new_leader.append(round(leader - killed, 2))
                tg.start_soon(recovery_after_leader_kill, soak, killed, leader, leader_recovery)
        drained = await drain(soak, args.drain_timeout)
        tg.cancel_scope.cancel()
    for replica in replicas:
        replica.stop()
    soak.leftovers()
    for name, per_worker in audit_creates(bed, workers, soak.names).items():
        if name in soak.observed:
            soak.observed[name].creates = {w: done for w, (done, _) in per_worker.items() if done}
            soak.observed[name].uncertain_creates = sum(unknown for _, unknown in per_worker.values())
    _created_while_killed(soak, schedule.log)
    for client in soak.api.values():
        await client.close()
    recovery = {"leader_kill_to_new_leader": new_leader, "leader_kill_to_next_dispatch": leader_recovery,
                "worker_back_to_stale_copies_gone": worker_recovery}  # fmt: skip
    return result(args, soak, schedule, drained, recovery, replicas)


KILL_SETTLE = 20.0  # seconds after a killed worker is back within which a run first seen there may be one it took


def _created_while_killed(soak: Soak, faults: list[Fault]) -> None:
    """A create the worker's kube-apiserver carried out just before its SIGKILL leaves no audit event (the event is
    written after the answer, and went with the process): a run with no create audited, first seen on a worker in a
    kill's window (from just before it until its watches are back), counts one create of uncertain answer."""
    kills = [(f.at - 5.0, f.at + f.seconds + KILL_SETTLE, soak.names[f.target]) for f in faults
             if f.kind == "worker-kill" and f.target in soak.names]  # fmt: skip
    for run in soak.observed.values():
        if sum(run.creates.values()) or run.uncertain_creates:
            continue
        firsts = [(worker, spans[0][0]) for worker, spans in run.lives.items() if spans]
        if any(name == worker and start <= seen <= end for worker, seen in firsts for start, end, name in kills):
            run.uncertain_creates = 1


def audit_creates(bed: TestBed, workers: list[str], names: dict[str, str]) -> dict[str, dict[str, tuple[int, int]]]:
    """Run name -> {worker: (creates of its object there answered 2xx, with no certain answer)}, from the workers'
    audit logs."""
    user = audit.user(NAMESPACE, DISPATCHER_ACCOUNT)
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for w in workers:
        for name, count in audit.creates_by_name(bed.cluster(w), user, PIPELINERUNS.plural).items():
            out.setdefault(name, {})[names[w]] = count
    return out


def cancel_latencies(sent: dict[str, float], reached: dict[str, float]) -> list[float]:
    """Seconds from each cancel written on the manager to its first sight on the worker's copy (a cancel seen there
    before the harness noted its write counts as 0; one never seen is the lost-cancel violation, not a figure)."""
    return [max(0.0, reached[n] - sent[n]) for n in sent if n in reached]


def _percentiles(values: list[float]) -> dict[str, float | None]:
    return {f"p{q}": percentile(values, q) for q in (50, 90, 99)} | {"max": max(values) if values else None}


def result(args: argparse.Namespace, soak: Soak, schedule: Schedule, drained: bool, recovery: dict[str, list[float]],
           replicas: list[Dispatcher]) -> dict[str, Any]:  # fmt: skip
    violations = invariants.check(list(soak.observed.values()))
    finals = {n: soak.final_at[n] - soak.decided_at[n] for n in soak.final_at if n in soak.decided_at}
    fates = {f: sum(1 for v in soak.fate.values() if v == f) for f, _ in FATES}
    return {
        "kind": "soak",
        "mode": args.mode, "workers": args.workers, "replicas": args.replicas, "rate_per_s": args.rate,
        "duration_s": args.duration, "fault_interval_s": args.fault_interval, "seed": args.seed,
        "source": args.source_commit, "runs": len(soak.submitted), "fates": fates,
        "finished_on_the_manager": len(soak.run.finished), "drained": drained,
        "faults": [asdict(f) for f in schedule.log],
        "fault_counts": {k: sum(1 for f in schedule.log if f.kind == k) for k in CYCLE},
        "invariants": invariants.summary(violations),
        "violations": [str(v) for v in violations[:200]],
        "held": not violations and drained and not soak.given_up,
        "harness_gave_up": {"count": len(soak.given_up), "first": soak.given_up[:20]},
        "recovery_s": recovery,
        "latency_s": {
            "dispatch": _percentiles([soak.dispatched[n] - soak.submitted[n] for n in soak.dispatched]),
            "status_to_manager": _percentiles(list(finals.values())),
            "cancel_to_worker": _percentiles(cancel_latencies(soak.cancel_sent, soak.cancel_reached)),
        },
        "replica_exits": {r.identity: r.exits for r in replicas},  # ended by themselves (and started again)
        "timeline": soak.timeline,
    }  # fmt: skip


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m bench.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=["kueue", "direct"], default="kueue")
    parser.add_argument("--workers", type=int, default=3)
    parser.add_argument("--replicas", type=int, default=2, help="dispatcher replicas, with leader election")
    parser.add_argument("--rate", type=float, default=5.0, help="runs submitted per second")
    parser.add_argument("--duration", type=float, default=600.0, help="seconds of submissions")
    parser.add_argument("--fault-interval", type=float, default=20.0, help="a fault every SECONDS (0: none)")
    parser.add_argument("--faults", default=",".join(CYCLE), help=f"the faults, in turn (default {','.join(CYCLE)})")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--drain-timeout", type=float, default=900.0, help="seconds for every run to finish after")
    parser.add_argument("--check", action="store_true", help="exit 1 when an invariant breaks (CI)")
    parser.add_argument("--report", action="store_true", help="also write the page and the timeline plot")
    parser.add_argument("--out", type=Path, help="JSON result (default bench/results/soak-<mode>-...json)")
    return parser


def arguments(argv: list[str] | None) -> argparse.Namespace:
    """The flags, checked (argparse's one line and exit 2 for values that cannot run)."""
    parser = _parser()
    args = parser.parse_args(argv)
    args.faults = [f for f in args.faults.split(",") if f]
    if unknown := [f for f in args.faults if f not in CYCLE]:
        parser.error(f"--faults {','.join(unknown)}: not a fault (one of {', '.join(CYCLE)})")
    if args.rate <= 0 or args.duration <= 0 or args.workers < 1 or args.replicas < 1:
        parser.error("--rate, --duration, --workers and --replicas must be positive")
    if args.fault_interval and not args.faults:
        parser.error("--fault-interval with no --faults")
    # What bench.run's Run reads: the played Kueue races every copy in Kueue mode.
    args.kueue, args.race, args.shards, args.integration = "played", args.mode == "kueue", 1, False
    args.source_commit = bench_run._commit(bench_run.ROOT)
    args.interpreter = runtime.python(bench_run.ROOT)
    return args


def stop_on_signals() -> None:
    """Ctrl-C and SIGTERM both end the soak through its clean-up (dispatchers and API servers stopped, a restarted
    one included). A process started in the background by a shell inherits SIGINT ignored, and SIGTERM's default
    ends it at once: neither would clean up."""
    signal.signal(signal.SIGINT, signal.default_int_handler)  # asyncio's runner then cancels the soak on SIGINT
    signal.signal(signal.SIGTERM, lambda *_: signal.raise_signal(signal.SIGINT))


def main(argv: list[str] | None = None) -> int:
    args = arguments(argv)
    stop_on_signals()
    # The soak's own informers ride out every fault: their retries are not news (the replicas' logs have theirs).
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.ERROR))
    out: Path = args.out or RESULTS / f"soak-{args.mode}-w{args.workers}-r{args.rate:g}-d{args.duration:g}.json"
    clusters = ("manager", *(f"worker{i + 1}" for i in range(args.workers)))
    users = [audit.user(NAMESPACE, DISPATCHER_ACCOUNT)]
    with (
        tempfile.TemporaryDirectory(prefix="multikueue-soak-") as policy_dir,
        TestBed(clusters=clusters, apiserver_args=audit.apiserver_args(Path(policy_dir), users)) as bed,
    ):
        crds.install_on_bed(bed, [c for c in crds.all_crds() if c["spec"]["group"] in ("kueue.x-k8s.io", "tekton.dev")])
        assert bed.workdir is not None
        try:
            figures = anyio.run(soak_async, args, bed, bed.workdir)
        finally:
            for dispatcher in Dispatcher.started:
                dispatcher.stop()
            Dispatcher.started.clear()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(figures, indent=2) + "\n")
    say(f"wrote {out}")
    if args.report:
        say(f"wrote {', '.join(str(p) for p in soakreport.write(figures, out))}")
    say(soakreport.verdict(figures))
    return 1 if args.check and not figures["held"] else 0


if __name__ == "__main__":
    sys.exit(main())
