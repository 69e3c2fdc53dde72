"""What the kind scenarios share: the example PipelineRun on the local step image, the Workload tekton-kueue
would create for it, the dispatcher's Pods, its leader and its rollout."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import yaml
from anyio.abc import TaskGroup
from kubernetes_asyncio import client as k8s_client

from e2e.kind.components import STEP_IMAGE
from e2e.providers import WORKERS
from e2e.providers.kind import ROOT, KindEnvironment
from e2e.wiring import SYSTEM
from multikueue.kube.addresses import WORKLOADS, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue.runtime.informer import DELETED, Informer
from multikueue_testbed import kueue
from multikueue_testbed.client import k8s
from multikueue_testbed.waiting import eventually

PIPELINERUNS = Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun")
TASKRUNS = Resource("tekton.dev", "v1", "taskruns", "TaskRun")
EVENTS = Resource("", "v1", "events", "Event")
NAMESPACE, QUEUE = "team-a", "pipelines-queue"
Object = dict[str, Any]


def example() -> Object:
    body: Object = yaml.safe_load((ROOT / "examples" / "tekton" / "pipelinerun.yaml").read_text())
    return body


def step(body: Object) -> Object:
    first: Object = body["spec"]["pipelineSpec"]["tasks"][0]["taskSpec"]["steps"][0]
    return first


def condition(obj: Object | None, kind: str) -> Object:
    found = (c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind)
    return next(found, {})


async def submit(api: dict[str, ApiClient], name: str, script: str | None = None) -> tuple[Object, str]:
    """The example PipelineRun (the step on the local image; another script if given) and the Workload
    tekton-kueue would create for it, on the manager."""
    body = example()
    body["metadata"]["name"] = name
    step(body)["image"] = STEP_IMAGE
    if script is not None:
        step(body)["script"] = script
    run = await Objects(api["manager"], PIPELINERUNS).create(body, NAMESPACE)
    workload = await Objects(api["manager"], WORKLOADS).create(kueue.workload_for(run, queue=QUEUE), NAMESPACE)
    return run, str(workload["metadata"]["name"])


async def leader_pod(api: dict[str, ApiClient]) -> str:
    lease = await Objects(api["manager"], Resource("coordination.k8s.io", "v1", "leases", "Lease")).get(
        "multikueue-dispatcher", SYSTEM
    )
    assert lease is not None, "no Lease: leader election is off?"
    holder: str = lease["spec"]["holderIdentity"]
    return holder.rsplit("-", 1)[0]  # "<host name>-<pid>"; a pod's host name is its name


DEPLOYMENT = f"/apis/apps/v1/namespaces/{SYSTEM}/deployments/multikueue-controller"


async def dispatcher_pods(api: dict[str, ApiClient]) -> list[Object]:
    listed = await api["manager"].request("GET", f"/api/v1/namespaces/{SYSTEM}/pods",
                                          query={"labelSelector": "app.kubernetes.io/name=multikueue"})  # fmt: skip
    pods: list[Object] = listed["items"]
    return pods


def settled(deployment: Object, pods: list[Object]) -> bool:
    """Rolled out (every replica of the newest template ready) and no old Pod still terminating."""
    spec, status = deployment["spec"], deployment.get("status") or {}
    rolled = status.get("observedGeneration", 0) >= deployment["metadata"]["generation"] and all(
        status.get(field) == spec["replicas"] for field in ("replicas", "updatedReplicas", "readyReplicas")
    )
    return rolled and len(pods) == spec["replicas"] and not any(p["metadata"].get("deletionTimestamp") for p in pods)


async def rolled_out(kind: KindEnvironment, api: dict[str, ApiClient], what: str) -> None:
    async def state() -> tuple[Object, list[Object]]:
        return await api["manager"].request("GET", DEPLOYMENT), await dispatcher_pods(api)

    await eventually(state, until=lambda s: settled(*s), timeout=300, interval=1,
                     what=f"{what}\n{kind.dispatcher_log()}")  # fmt: skip


async def restart(api: dict[str, ApiClient], stamp: str) -> None:
    """``kubectl rollout restart`` of the manager's dispatcher: a new annotation on the Pod template."""
    patch = {"spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": stamp}}}}}
    await k8s_client.AppsV1Api(k8s(api["manager"])).patch_namespaced_deployment("multikueue-controller", SYSTEM, patch)


async def live_leader(api: dict[str, ApiClient], *, timeout: float) -> str:
    """The leader's Pod, once it is one of the running Pods (a Lease left by a Pod that is gone, not given up, names
    it until a standby takes it over)."""

    async def found() -> tuple[str, set[str]]:
        running = {p["metadata"]["name"] for p in await dispatcher_pods(api)
                   if not p["metadata"].get("deletionTimestamp")}  # fmt: skip
        return await leader_pod(api), running

    leader, _ = await eventually(found, until=lambda f: f[0] in f[1], timeout=timeout,
                                 what="a leader among the running Pods")  # fmt: skip
    return leader


class WorkerWatch:
    """Every version of the PipelineRuns and Workloads the workers' watches deliver in the namespace, by worker, kind
    and name: a copy is deleted once its run has finished, so what the worker's Tekton wrote is read from here."""

    def __init__(self, api: dict[str, ApiClient]) -> None:
        self.api = api
        self.seen: dict[tuple[str, str, str], list[Object]] = {}
        self.frozen: set[str] = set()  # objects an Event says runc could not start: "unable to freeze"

    def _recorder(self, worker: str, kind: str) -> Callable[[str, Object], None]:
        def record(event: str, obj: Object) -> None:
            if event != DELETED:
                self.seen.setdefault((worker, kind, obj["metadata"]["name"]), []).append(obj)

        return record

    def _freezes(self, event: str, obj: Object) -> None:
        if "unable to freeze" in str(obj.get("message")):
            self.frozen.add(str((obj.get("involvedObject") or {}).get("name")))

    def froze(self, run: str) -> bool:
        """Whether one of the run's pods failed to start for this host's cgroup v1 freezer (a TaskRun is named
        ``<run>-<task>``, its pod ``<taskrun>-pod``)."""
        return any(name.startswith(f"{run}-") for name in self.frozen)

    async def start(self, group: TaskGroup) -> None:
        informers = [Informer(Objects(self.api[w], r).source(namespace=NAMESPACE), on_event=self._recorder(w, r.kind))
                     for w in WORKERS for r in (PIPELINERUNS, WORKLOADS)]  # fmt: skip
        informers += [Informer(Objects(self.api[w], EVENTS).source(namespace=NAMESPACE), on_event=self._freezes)
                      for w in WORKERS]  # fmt: skip
        for informer in informers:
            group.start_soon(informer.run)
        with anyio.fail_after(60):
            for informer in informers:
                await informer.synced.wait()

    def versions(self, worker: str, kind: str, name: str) -> list[Object]:
        return self.seen.get((worker, kind, name), [])

    def last(self, worker: str, kind: str, name: str) -> Object:
        found = self.versions(worker, kind, name)
        assert found, f"no {kind} {name} was seen on {worker}"
        return found[-1]
