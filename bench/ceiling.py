"""The machine's ceiling for dispatching: the requests one dispatch needs, replayed at full concurrency by a
load generator that cannot be the bottleneck, on the same bed as the benchmark.

    python -m bench.ceiling --mix bench/results/kueue-w3-n1000-backlog.json
    python -m bench.ceiling --mix bench/results/direct-w3-n1000.json
    python -m bench.ceiling --mix bench/results/direct-w3-n1000.json --minimal

``--mix`` is a benchmark result (``python -m bench.run``): its ``dispatch_phase_requests`` are what the dispatcher
asked of each cluster until every object was on its worker, as the apiservers' audit logs count them, by verb and
resource. This command starts the same bed (manager + W workers, audit logging on as in the benchmark), submits
the same N objects beforehand (PipelineRuns, and in Kueue mode their Workloads with quota reserved), and builds a
plan: per object, that mix of requests with bodies as the dispatcher sends them (worker copies made by the
adapter's own functions), plus, in Kueue mode, the bench's admission of each copy on its worker; the watches the
dispatcher and the bench hold during a run are held open meanwhile. ``bench/ceiling/main.go`` (Go's net/http:
HTTP/2, one connection per cluster, built here from the standard library and cached by source hash) replays the
plan with ``--concurrency`` objects side by side. The rate it sustains is the ceiling; the result records the
dispatcher's own drain rate from ``--mix`` and the fraction. With ``--minimal`` the plan is the minimal mix of the
result's mode, W and N instead (``bench/mix.py``: what MultiKueue's model needs, whoever dispatches), so the fraction
is of what the machine could do for a dispatcher that sent nothing more. This is a benchmark: nothing is asserted.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import anyio
from kubernetes_asyncio import client as k8s_client

from bench import audit, cores
from bench import mix as mixes
from bench.run import NAMESPACE, PIPELINERUNS, RESULTS, ROOT, say
from multikueue.config import parse_configuration
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.workload_state import clone_for_create
from multikueue.kube.addresses import WORKLOADS, GroupVersionKind
from multikueue.kube.client import ApiClient, api_client_from_kubeconfig
from multikueue.kube.resources import Objects
from multikueue_testbed import crds, kueue
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.objects import pipelinerun
from multikueue_testbed.testbed import TestBed

Object = dict[str, Any]
SOURCE = ROOT / "bench" / "ceiling"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "multikueue" / "bench"
ORIGIN = "multikueue"
MERGE = "application/merge-patch+json"
PATHS = {"workloads": "/apis/kueue.x-k8s.io/v1beta2", "pipelineruns": "/apis/tekton.dev/v1", "events": "/api/v1"}
ORDER = {"get": 0, "create": 1, "patch": 2, "update": 2, "delete": 3}  # a dispatch reads, creates, writes, cleans


def binary() -> Path:
    """The replayer, built once per version of its source (standard library only: no module download)."""
    digest = hashlib.sha256(b"".join(p.read_bytes() for p in sorted(SOURCE.glob("*.go")))).hexdigest()[:16]
    path = CACHE / f"ceiling-{digest}"
    if not path.exists():
        say(f"building the replayer ({SOURCE.relative_to(ROOT)}) into {path}")
        CACHE.mkdir(parents=True, exist_ok=True)
        env = {**os.environ, "CGO_ENABLED": "0", "GOFLAGS": "-mod=mod"}
        subprocess.run(["go", "build", "-o", str(path), "."], cwd=SOURCE, env=env, check=True, timeout=600)
    return path


def spread(total: int, n: int, i: int) -> int:
    """Object ``i``'s share of ``total`` requests over ``n`` objects (integers summing to ``total``)."""
    return math.floor(total * (i + 1) / n) - math.floor(total * i / n)


class Planner:
    """Turns the mix into concrete requests per object, against the objects submitted beforehand."""

    def __init__(self, mode: str, workers: list[str], manager_objects: list[tuple[Object, Object | None]]) -> None:
        self.mode, self.workers, self.objects = mode, workers, manager_objects
        config = parse_configuration(
            "multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}\n"
            + ("dispatcher: {adapters: [{name: PipelineRun.v1.tekton.dev, mode: Direct}]}" if mode == "direct" else "")
        )
        gvk = GroupVersionKind.parse("PipelineRun.v1.tekton.dev")
        self.adapter = GenericAdapter(gvk, config.dispatcher.managed_by, config.adapter(gvk))
        self.unknown: dict[str, int] = {}

    def path(self, resource: str, name: str | None = None, sub: str = "") -> str:
        base = f"{PATHS[resource]}/namespaces/{NAMESPACE}/{resource}"
        return base + (f"/{quote(name)}" if name else "") + (f"/{sub}" if sub else "")

    def body(self, resource: str, i: int, k: int) -> Object:
        """What the dispatcher creates for object ``i`` (the ``k``-th such create of the object)."""
        run, workload = self.objects[i]
        if resource == "workloads" and workload is not None:
            body = clone_for_create(workload, ORIGIN)
        elif resource == "pipelineruns":
            wl_name = workload["metadata"]["name"] if workload is not None else ""
            body = self.adapter.worker_copy(run, origin=ORIGIN, workload_name=wl_name)
        else:  # an Event about the object
            meta = run["metadata"]
            return {"apiVersion": "v1", "kind": "Event", "metadata": {"generateName": f"{meta['name']}."},
                    "involvedObject": {"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "name": meta["name"],
                                       "namespace": NAMESPACE, "uid": meta["uid"]},
                    "reason": "Replayed", "message": f"replay {k}", "type": "Normal",
                    "source": {"component": "bench-ceiling"}}  # fmt: skip
        if k:
            body["metadata"]["name"] += f"-{k}"
        return body

    def patch(self, resource: str, sub: str, i: int, k: int) -> Object:
        """A write of the same size and kind as the dispatcher's: status conditions, or an annotation."""
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if sub == "status":
            condition = {"type": "BenchReplay", "status": "True", "reason": "Replayed", "message": f"replay {k}",
                         "lastTransitionTime": when}  # fmt: skip
            workload = self.objects[i][1]
            if resource == "workloads" and workload is not None:
                checks = (workload.get("status") or {}).get("admissionChecks") or []
                return {"status": {"admissionChecks": [{**c, "message": f"replay {k}"} for c in checks]}}
            return {"status": {"conditions": [condition]}}
        return {"metadata": {"annotations": {"bench.multikueue.x-k8s.io/replay": f"{k}"}}}

    def requests(self, mix: dict[str, dict[str, int]], n: int, i: int) -> list[Object]:
        steps: list[tuple[int, Object]] = []
        created: dict[tuple[str, str], list[str]] = {}
        for cluster, counts in mix.items():
            for key, total in sorted(counts.items()):
                parts = key.split(" ")
                if len(parts) != 2:  # "<verb> <resource> <code>": a failure, already counted under its request
                    continue
                verb, resource = parts
                kind, _, sub = resource.partition("/")
                if kind not in PATHS or verb not in ORDER:  # start-up (lists, discovery) and watches (held open)
                    self.unknown[f"{cluster} {key}"] = total
                    continue
                steps.extend(
                    (ORDER[verb], self.request(cluster, verb, kind, sub, i, k, created))
                    for k in range(spread(total, n, i))
                )
        if self.mode == "kueue":  # the worker's Kueue (played by the bench) admits the copy on one worker
            winner = self.workers[i % len(self.workers)]
            name = self.objects[i][1]["metadata"]["name"]  # type: ignore[index]
            status = self.patch("pipelineruns", "status", i, 0)  # a condition: no admission to validate
            steps.append((2, {"cluster": winner, "method": "PATCH", "path": self.path("workloads", name, "status"),
                              "contentType": MERGE, "body": status, "step": "bench admits"}))  # fmt: skip
        return [s for _, s in sorted(steps, key=lambda s: s[0])]

    def request(
        self, cluster: str, verb: str, kind: str, sub: str, i: int, k: int, created: dict[tuple[str, str], list[str]]
    ) -> Object:
        step = f"{verb} {kind}" + (f"/{sub}" if sub else "")
        run, workload = self.objects[i]
        own = (workload if kind == "workloads" and workload is not None else run)["metadata"]["name"]
        if verb == "create":
            body = self.body(kind, i, k)
            if "name" in body["metadata"]:
                created.setdefault((cluster, kind), []).append(body["metadata"]["name"])
            return {"cluster": cluster, "method": "POST", "path": self.path(kind), "body": body, "step": step}
        if verb == "delete":
            made = created.get((cluster, kind)) or [own]
            return {"cluster": cluster, "method": "DELETE", "path": self.path(kind, made.pop(0)), "step": step}
        if verb == "get":
            return {"cluster": cluster, "method": "GET", "path": self.path(kind, own, sub), "step": step}
        return {"cluster": cluster, "method": "PATCH", "path": self.path(kind, own, sub), "contentType": MERGE,
                "body": self.patch(kind, sub, i, k), "step": step}  # fmt: skip


WATCHED = {
    "workloads": "/apis/kueue.x-k8s.io/v1beta2/workloads", "pipelineruns": "/apis/tekton.dev/v1/pipelineruns",
    "admissionchecks": "/apis/kueue.x-k8s.io/v1beta2/admissionchecks",
    "multikueueclusters": "/apis/kueue.x-k8s.io/v1beta2/multikueueclusters",
    "multikueueconfigs": "/apis/kueue.x-k8s.io/v1beta2/multikueueconfigs",
    "events": "/api/v1/events", "secrets": "/api/v1/secrets", "configmaps": "/api/v1/configmaps",
}  # fmt: skip
"""Where a watch the audit log names is opened again (all namespaces: the bed holds only the bench's)."""


def watches(mode: str, requests: dict[str, dict[str, int]]) -> list[Object]:
    """The watches held during a benchmark run: the dispatcher's, as the audit log names them, and the bench's own
    informers (the objects on every cluster, in Kueue mode their Workloads too)."""
    out = []
    for cluster, counts in requests.items():
        bench = ["pipelineruns"] + (["workloads"] if mode == "kueue" else [])
        held = [k.split(" ")[1] for k, v in counts.items() for _ in range(v) if k.startswith("watch ")]
        for kind in held + bench:
            if kind in WATCHED:
                path = f"{WATCHED[kind]}?watch=1&allowWatchBookmarks=true"
                out.append({"cluster": cluster, "method": "GET", "path": path, "step": f"watch {kind}"})
    return out


async def submit_all(api: ApiClient, mode: str, n: int, check: str, concurrency: int = 16) -> list[tuple[Object, Any]]:
    """The N objects as the benchmark submits them, before the clock starts."""
    objects: list[tuple[Object, Any]] = [({}, None)] * n
    limiter = anyio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with limiter:
            body = pipelinerun(f"run-{i:05d}")
            body["spec"]["managedBy"] = kueue.MANAGED_BY
            run = await Objects(api, PIPELINERUNS).create(body, NAMESPACE)
            workload = None
            if mode == "kueue":
                created = await Objects(api, WORKLOADS).create(kueue.workload_for(run), NAMESPACE)
                workload = await kueue.reserve_quota(api, created["metadata"]["name"], NAMESPACE, checks=[check])
            objects[i] = (run, workload)

    async with anyio.create_task_group() as tg:
        for i in range(n):
            tg.start_soon(one, i)
    return objects


def write_credentials(bed: TestBed, directory: Path) -> dict[str, Object]:
    clusters = {}
    for name in bed.clusters:
        cluster = bed.cluster(name)
        files = {"ca": cluster.ca_pem, "cert": cluster.admin.cert_pem, "key": cluster.admin.key_pem}
        for suffix, pem in files.items():
            (directory / f"{name}.{suffix}").write_bytes(pem)
        clusters[name] = {"server": cluster.url, **{k: str(directory / f"{name}.{k}") for k in files}}
    return clusters


async def prepare(bed: TestBed, mix: Object, n: int, directory: Path) -> tuple[Object, dict[str, int]]:
    mode, workers = mix["mode"], [f"worker{i + 1}" for i in range(mix["workers"])]
    api = await api_client_from_kubeconfig(bed.cluster("manager").kubeconfig, temp_dir=directory)
    try:
        for name in bed.clusters:
            client = api if name == "manager" else await api_client_from_kubeconfig(bed.cluster(name).kubeconfig)
            await k8s_client.CoreV1Api(k8s(client)).create_namespace(raw_body({"metadata": {"name": NAMESPACE}}))
            if client is not api:
                await client.close()
        check = "bench-ac"
        say(f"submitting {n} objects before the clock starts")
        objects = await submit_all(api, mode, n, check)
    finally:
        await api.close()
    # The audit log names workers by their MultiKueueCluster (bench-worker1); the bed by its own (worker1).
    requests = {("manager" if c == "manager" else c.removeprefix("bench-")): v
                for c, v in mix["dispatch_phase_requests"].items()}  # fmt: skip
    planner = Planner(mode, workers, objects)
    plan = {"clusters": write_credentials(bed, directory), "watches": watches(mode, requests),
            "objects": [planner.requests(requests, n, i) for i in range(n)]}  # fmt: skip
    return plan, planner.unknown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.ceiling", description=__doc__.split("\n\n")[0])
    parser.add_argument("--mix", type=Path, required=True, help="a bench result with dispatch_phase_requests")
    parser.add_argument(
        "--minimal",
        action="store_true",
        help="replay the minimal mix (bench/mix.py) for the result's mode, W and N instead of its own",
    )
    parser.add_argument("--concurrency", type=int, default=64, help="objects replayed side by side")
    parser.add_argument("--out", type=Path, help="JSON result (default bench/results/ceiling-<mix name>)")
    args = parser.parse_args(argv)
    try:
        mix = json.loads(args.mix.read_text())
    except (OSError, ValueError) as e:
        parser.error(f"--mix {args.mix}: {e}")
    if not mix.get("dispatch_phase_requests"):
        parser.error(f"--mix {args.mix}: no dispatch_phase_requests (made before they were recorded: run it again)")
    n = int(mix["objects"])
    measured, minimal = mix["dispatch_phase_requests"], mixes.minimal_mix(mix["mode"], mix["workers"], n)
    if args.minimal:  # the requests MultiKueue's model needs, whoever dispatches; the run's drain rate is kept
        mix = {**mix, "dispatch_phase_requests": minimal}
    replayer = binary()
    clusters = ("manager", *(f"worker{i + 1}" for i in range(mix["workers"])))
    users = [audit.user(NAMESPACE, "bench-dispatcher")]
    split = bool(mix.get("split_cores"))  # the servers on the core they had in the measured run
    if split:
        if why := cores.check():
            parser.error(f"--mix {args.mix} was measured with --split-cores: {why}")
        cores.load_here()
    with (
        tempfile.TemporaryDirectory(prefix="multikueue-ceiling-") as scratch,
        TestBed(clusters=clusters, apiserver_args=audit.apiserver_args(Path(scratch), users)) as bed,
    ):
        crds.install_on_bed(bed, [c for c in crds.all_crds() if c["spec"]["group"] in ("kueue.x-k8s.io", "tekton.dev")])
        if split:
            cores.servers_apart(bed)
        plan, unknown = anyio.run(prepare, bed, mix, n, Path(scratch))
        plan_file = Path(scratch) / "plan.json"
        plan_file.write_text(json.dumps(plan))
        requests = sum(len(o) for o in plan["objects"])
        say(f"replaying {requests} requests for {n} objects ({requests / n:.2f} each), {args.concurrency} at once")
        done = subprocess.run([str(replayer), "-plan", str(plan_file), "-concurrency", str(args.concurrency)],
                              capture_output=True, text=True, timeout=1800, check=False)  # fmt: skip
        if done.returncode != 0:
            say(f"the replayer failed: {done.stderr.strip()}")
            return 1
    replayed = json.loads(done.stdout)
    drain = mix["dispatch_throughput_per_s"]
    result = {
        "mix": args.mix.name,
        "mix_source": mix.get("source", ""),  # the dispatcher's commit the drain and the own mix were measured at
        "replayed_mix": "minimal" if args.minimal else "own",
        "requests_per_run_own_mix": mixes.per_run(measured) / n,
        "requests_per_run_minimal_mix": mixes.per_run(minimal) / n,
        "overhead_requests": mixes.overhead(measured, minimal),
        "mode": mix["mode"], "workers": mix["workers"], "objects": n, "backlog": mix.get("backlog", False),
        "split_cores": split,
        "ceiling_objects_per_s": replayed["objects_per_s"],
        "dispatcher_objects_per_s": drain,
        "fraction_of_ceiling": drain / replayed["objects_per_s"],
        "requests_per_object_replayed": requests / n,
        "not_replayed_start_up_and_watches": unknown,
        "replay": replayed,
        "machine": {"cpus": os.cpu_count()},
    }  # fmt: skip
    out = args.out or RESULTS / f"ceiling-{args.mix.stem}{'-minimal' if args.minimal else ''}.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    say(f"ceiling {replayed['objects_per_s']:.1f} objects/s ({replayed['requests_per_s']:.0f} requests/s); "
        f"the dispatcher drained {drain:.1f}/s = {result['fraction_of_ceiling']:.2f} of it; wrote {out}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
