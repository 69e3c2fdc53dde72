"""The README's main job: three local clusters, the shipped manifests, the dispatcher as its own process, and one
Tekton PipelineRun taken from the manager to a worker and back.

No Kueue, tekton-kueue or Tekton controller runs here, so the demo plays their parts with the exact writes they
make, and says so at each step; everything the dispatcher does, it does by itself.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import yaml

from multikueue.kube.addresses import MULTIKUEUE_CLUSTERS, WORKLOADS, Resource
from multikueue.kube.client import api_client_from_kubeconfig
from multikueue.kube.resources import Objects
from multikueue_testbed import crds, kueue
from multikueue_testbed.accounts import mint_service_account_kubeconfig
from multikueue_testbed.dispatcher import run_argv
from multikueue_testbed.testbed import TestBed, free_port
from multikueue_testbed.waiting import eventually

ROOT = Path(__file__).resolve().parents[2]  # the checkout: testbed/multikueue_testbed/demo.py
Object = dict[str, Any]
PIPELINERUNS = Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun")
NAMESPACE, SYSTEM, CHECK = "team-a", "multikueue-system", "multikueue-pipelines"


class Story:
    def __init__(self) -> None:
        self.started = time.monotonic()

    def say(self, text: str, *, role: str | None = None) -> None:
        who = f"[{role}] " if role else ""
        print(f"[{time.monotonic() - self.started:6.1f}s] {who}{text}", flush=True)


def _kubectl(bed: TestBed, cluster: str, *args: str) -> None:
    assert bed.binaries.kubectl is not None
    argv = [str(bed.binaries.kubectl), "--kubeconfig", str(bed.kubeconfig_path), "--context", cluster, *args]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    if result.returncode != 0:
        raise RuntimeError(f"kubectl {' '.join(args)} on {cluster} failed:\n{result.stdout}{result.stderr}")


MODES = {
    # mode: (configuration file, manager manifest, worker manifest)
    "direct": ("examples/tekton/direct/config.yaml", "examples/tekton/direct/manager.yaml",
               "examples/tekton/direct/worker.yaml"),
    "kueue": ("config/manager/config.yaml", "examples/tekton/manager.yaml", "examples/tekton/worker.yaml"),
}  # fmt: skip


def main(*, once: bool, mode: str = "direct") -> int:
    config_file, manager_manifest, worker_manifest = (ROOT / f for f in MODES[mode])
    for needed in (config_file, manager_manifest, worker_manifest, ROOT / "examples" / "tekton" / "pipelinerun.yaml"):
        if not needed.exists():
            print(
                f"multikueue demo: {needed} not found; run the demo from a checkout of the repository", file=sys.stderr
            )
            return 2
    story = Story()
    story.say(f"{mode} mode; starting etcd and three kube-apiservers: manager, worker1, worker2")
    with TestBed() as bed:
        story.say(f"clusters ready ({bed.binaries.version()}); installing Kueue's and Tekton's CRDs on each")
        crds.install_on_bed(bed)
        for worker in ("worker1", "worker2"):
            _kubectl(bed, worker, "apply", "--server-side", "-k", str(ROOT / "config" / "worker"))
            _kubectl(bed, worker, "apply", "--server-side", "-f", str(worker_manifest))
        _kubectl(bed, "manager", "apply", "--server-side", "-f", str(ROOT / "config" / "manager" / "namespace.yaml"))
        _kubectl(bed, "manager", "apply", "--server-side", "-f", str(manager_manifest))
        story.say(
            f"applied config/worker and {worker_manifest.relative_to(ROOT)} on the workers, "
            f"{manager_manifest.relative_to(ROOT)} on the manager"
        )
        port = free_port()
        log_path = (bed.workdir or Path(".")) / "dispatcher.log"
        token_path = (bed.workdir or Path(".")) / "metrics-reader.token"
        with log_path.open("w") as log:
            argv = run_argv(
                bed.cluster("manager").kubeconfig_path,
                *("--config-file", str(config_file), "--metrics-bind-address", f"127.0.0.1:{port}"),
                *("--health-probe-bind-address", f"127.0.0.1:{free_port()}", "--log-format", "console"),
            )
            dispatcher = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
            story.say(
                f"dispatcher started as its own process (PID {dispatcher.pid}) from {config_file.relative_to(ROOT)}; "
                f"log: {log_path}"
            )
            try:
                anyio.run(_direct_story if mode == "direct" else _story, bed, story)
                anyio.run(_metrics_reader, bed, story, port, token_path)
                _print_exploration(bed, log_path, port, token_path, once=once, mode=mode)
                if not once:
                    print("\nEverything keeps running; press Ctrl-C to stop and remove it all.", flush=True)
                    dispatcher.wait()
            finally:
                dispatcher.terminate()
                dispatcher.wait(timeout=30)
    return 0


async def _connect_workers(bed: TestBed, story: Story, manager: Any, workers: dict[str, Any]) -> None:
    for worker, api in workers.items():
        kubeconfig = await mint_service_account_kubeconfig(
            api, bed.cluster(worker), namespace=SYSTEM, name="multikueue-dispatcher"
        )
        await kueue.put_kubeconfig_secret(manager, SYSTEM, f"{worker}-kubeconfig", kubeconfig)
    story.say(
        "minted a kubeconfig for each worker's multikueue-dispatcher ServiceAccount and stored it in "
        "the manager Secrets the MultiKueueClusters name"
    )
    for worker in workers:
        await eventually(
            _present(Objects(manager, MULTIKUEUE_CLUSTERS), worker, None), until=_active, timeout=60,
            what=f"{worker} Active",
        )  # fmt: skip
    story.say("MultiKueueClusters worker1 and worker2: Active=True, reason Active, message Connected")


async def _direct_story(bed: TestBed, story: Story) -> None:
    async with (
        await api_client_from_kubeconfig(bed.cluster("manager").kubeconfig) as manager,
        await api_client_from_kubeconfig(bed.cluster("worker1").kubeconfig) as worker1,
        await api_client_from_kubeconfig(bed.cluster("worker2").kubeconfig) as worker2,
    ):
        workers = {"worker1": worker1, "worker2": worker2}
        await _connect_workers(bed, story, manager, workers)
        runs = Objects(manager, PIPELINERUNS)
        text = (ROOT / "examples" / "tekton" / "pipelinerun.yaml").read_text()
        await runs.create(yaml.safe_load(text), NAMESPACE)
        story.say(
            "submitted examples/tekton/pipelinerun.yaml on the manager (spec.managedBy: kueue.x-k8s.io/multikueue); "
            "no Workload, no queue: the dispatcher places it itself"
        )
        placed = await eventually(
            _present(runs, "hello"),
            until=lambda r: (_placement(r) or {}).get("reason") == "Placed",
            timeout=60,
            what="placed",
        )
        worker = placed["metadata"]["annotations"]["multikueue.x-k8s.io/worker"]
        head, *verdicts = _placement(placed)["message"].split("; ")
        story.say(f"{head} (condition MultiKueuePlacement=True, and an Event); every worker was weighed:")
        for verdict in verdicts:
            story.say(f"    {verdict}")
        worker_runs = Objects(workers[worker], PIPELINERUNS)
        worker_obj = await eventually(_present(worker_runs, "hello"), timeout=60, what=f"run on {worker}")
        story.say(f"PipelineRun hello created on {worker} without managedBy (spec keys: {sorted(worker_obj['spec'])})")

        role = f"standing in for Tekton on {worker}"
        await worker_runs.patch_status(
            "hello",
            {"status": _status("Unknown", "Running", "Tasks Completed: 0 (Failed: 0, Cancelled 0), Incomplete: 1")},
            NAMESPACE,
        )
        story.say("marked the run Running (no Tekton controller runs here)", role=role)
        await eventually(
            _present(runs, "hello"), until=lambda r: _reason(r) == "Running", timeout=60, what="Running mirrored"
        )
        story.say("the manager's PipelineRun shows Succeeded=Unknown/Running: the worker's status, mirrored")
        await worker_runs.patch_status(
            "hello",
            {"status": _status("True", "Succeeded", "Tasks Completed: 1 (Failed: 0, Cancelled 0), Skipped: 0",
                               done=True)},
            NAMESPACE,
        )  # fmt: skip
        story.say("marked the run Succeeded", role=role)
        final = await eventually(
            _present(runs, "hello"),
            until=lambda r: r["metadata"]["annotations"].get("multikueue.x-k8s.io/phase") == "Finished",
            timeout=60,
            what="finished",
        )
        story.say(
            f"manager PipelineRun: Succeeded={_succeeded(final).get('status')} ({_reason(final)}); "
            "phase Finished, seen by the kind's finished predicate, with no Kueue on the worker"
        )
        await eventually(
            lambda: worker_runs.get("hello", NAMESPACE), until=lambda r: r is None, timeout=60, what="clean-up"
        )
        story.say(f"nothing left on the workers: the dispatcher deleted the copy on {worker} after its final status")


async def _story(bed: TestBed, story: Story) -> None:
    async with (
        await api_client_from_kubeconfig(bed.cluster("manager").kubeconfig) as manager,
        await api_client_from_kubeconfig(bed.cluster("worker1").kubeconfig) as worker1,
        await api_client_from_kubeconfig(bed.cluster("worker2").kubeconfig) as worker2,
    ):
        await _connect_workers(bed, story, manager, {"worker1": worker1, "worker2": worker2})

        runs = Objects(manager, PIPELINERUNS)
        text = (ROOT / "examples" / "tekton" / "pipelinerun.yaml").read_text()
        run = await runs.create(yaml.safe_load(text), NAMESPACE)
        story.say(
            "submitted examples/tekton/pipelinerun.yaml on the manager (spec.managedBy: kueue.x-k8s.io/multikueue)"
        )
        workload = await Objects(manager, WORKLOADS).create(kueue.workload_for(run, queue="pipelines-queue"), NAMESPACE)
        wl = workload["metadata"]["name"]
        story.say(f"created Workload {wl} owned by the PipelineRun", role="playing tekton-kueue")
        await kueue.reserve_quota(manager, wl, NAMESPACE, checks=[CHECK], queue="pipelines")
        story.say(
            "reserved quota in ClusterQueue pipelines; admission check multikueue-pipelines is Pending",
            role="playing Kueue on the manager",
        )

        for worker, api in (("worker1", worker1), ("worker2", worker2)):
            await eventually(_present(Objects(api, WORKLOADS), wl), timeout=60, what=f"copy on {worker}")
        story.say("the dispatcher nominated both workers and copied the Workload to each")
        await kueue.admit(worker1, wl, NAMESPACE)
        story.say("admitted its copy first", role="playing Kueue on worker1")
        admitted = await eventually(
            _present(Objects(manager, WORKLOADS), wl),
            until=lambda w: bool(w["status"].get("clusterName")),
            timeout=60,
            what="admitted",
        )
        state = next(s for s in admitted["status"]["admissionChecks"] if s["name"] == CHECK)
        story.say(
            f"admission check {state['state']}: {state['message']}; clusterName={admitted['status']['clusterName']}"
        )
        await eventually(
            lambda: Objects(worker2, WORKLOADS).get(wl, NAMESPACE),
            until=lambda w: w is None,
            timeout=60,
            what="worker2 copy removed",
        )
        worker_runs = Objects(worker1, PIPELINERUNS)
        worker_obj = await eventually(_present(worker_runs, "hello"), timeout=60, what="run on worker1")
        story.say(
            f"PipelineRun hello created on worker1 without managedBy (spec keys: {sorted(worker_obj['spec'])}); "
            "worker2's copy deleted"
        )

        await worker_runs.patch_status(
            "hello",
            {
                "status": _status(
                    "Unknown", "Running", "Tasks Completed: 0 (Failed: 0, Cancelled 0), Incomplete: 1, Skipped: 0"
                )
            },
            NAMESPACE,
        )
        story.say("marked the run Running", role="playing Tekton on worker1")
        await eventually(
            _present(runs, "hello"),
            until=lambda r: _reason(r) == "Running",
            timeout=60,
            what="Running mirrored",
        )
        story.say("the manager's PipelineRun shows Succeeded=Unknown/Running: the worker's status, mirrored")
        await worker_runs.patch_status(
            "hello",
            {
                "status": _status(
                    "True", "Succeeded", "Tasks Completed: 1 (Failed: 0, Cancelled 0), Skipped: 0", done=True
                )
            },
            NAMESPACE,
        )
        story.say("marked the run Succeeded", role="playing Tekton on worker1")
        await kueue.finish(worker1, wl, NAMESPACE, reason="Succeeded", message="PipelineRun finished")
        story.say("marked its Workload Finished", role="playing Kueue on worker1")
        await eventually(
            _present(Objects(manager, WORKLOADS), wl),
            until=lambda w: any(c["type"] == "Finished" for c in w["status"]["conditions"]),
            timeout=60,
            what="finished",
        )
        final = await _present(runs, "hello")()
        story.say(
            f"manager PipelineRun: Succeeded={_succeeded(final).get('status')} "
            f"({_reason(final)}); manager Workload Finished"
        )
        await eventually(
            lambda: worker_runs.get("hello", NAMESPACE), until=lambda r: r is None, timeout=60, what="clean-up"
        )
        await eventually(
            lambda: Objects(worker1, WORKLOADS).get(wl, NAMESPACE),
            until=lambda w: w is None,
            timeout=60,
            what="clean-up",
        )
        story.say("nothing left on the workers: the dispatcher deleted the worker's PipelineRun and Workload")


def _present(objects: Objects, name: str, namespace: str | None = NAMESPACE) -> Callable[[], Awaitable[Object]]:
    """A probe for ``eventually``: the object, or "not yet" while it does not exist."""

    async def probe() -> Object:
        found = await objects.get(name, namespace)
        if found is None:
            raise LookupError(f"{name} not found yet")
        return found

    return probe


def _active(cluster: Any) -> bool:
    conditions = ((cluster or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)


def _placement(run: Any) -> Any:
    conditions = ((run or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "MultiKueuePlacement"), None)


def _succeeded(run: Any) -> dict[str, Any]:
    conditions = ((run or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "Succeeded"), {})


def _reason(run: Any) -> str:
    return str(_succeeded(run).get("reason", ""))


def _status(status: str, reason: str, message: str, *, done: bool = False) -> dict[str, Any]:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body: dict[str, Any] = {
        "startTime": now,
        "conditions": [
            {"type": "Succeeded", "status": status, "reason": reason, "message": message, "lastTransitionTime": now}
        ],
    }
    if done:
        body["completionTime"] = now
    return body


async def _metrics_reader(bed: TestBed, story: Story, port: int, token_path: Path) -> None:
    """/metrics as shipped: HTTPS, and only for a token RBAC allows; a ServiceAccount bound to the shipped
    multikueue-metrics-reader ClusterRole reads it (as Prometheus's would)."""
    from multikueue_testbed import scrape

    url = f"https://127.0.0.1:{port}/metrics"
    async with await api_client_from_kubeconfig(bed.cluster("manager").kubeconfig) as manager:
        token = await scrape.metrics_reader_token(manager, namespace=SYSTEM)
    await anyio.Path(token_path).write_text(token)
    refused, _ = await scrape.get(url)
    text = await scrape.metrics(port, token)
    count = sum(1 for line in text.splitlines() if line.startswith("multikueue_"))
    story.say(f"{url}: {refused} without a token; with the token of {SYSTEM}/metrics-reader (bound to "
              f"multikueue-metrics-reader), {count} samples")  # fmt: skip


def _print_exploration(bed: TestBed, log_path: Path, port: int, token_path: Path, *, once: bool, mode: str) -> None:
    kubectl = bed.binaries.kubectl or "kubectl"
    when = "run `make run` (without --once) to keep the clusters and explore" if once else "while it runs"
    if mode == "direct":
        specific = f"""
  {sys.executable} -m multikueue explain --kind PipelineRun.v1.tekton.dev team-a/hello
  kubectl --context manager -n team-a get events --field-selector involvedObject.name=hello"""
    else:
        specific = """
  kubectl --context manager get admissioncheck
  kubectl --context manager -n team-a get events --field-selector reason=MultiKueue"""
    print(
        f"""
Explore ({when}):
  export KUBECONFIG={bed.kubeconfig_path}
  alias kubectl={kubectl}
  kubectl --context manager -n team-a get pipelineruns,workloads -o wide
  kubectl --context manager get multikueueclusters --show-labels{specific}
  kubectl --context worker1 -n team-a get pipelineruns,workloads
  curl -sk --oauth2-bearer "$(cat {token_path})" https://127.0.0.1:{port}/metrics | grep ^multikueue_
  less {log_path}""",
        flush=True,
    )
