"""This project's RayJob recipe beside Kueue's own RayJob integration, on real Kueue.

The same RayJobs go to worker1, where Kueue v0.19.2's built-in RayJob integration (``ray.io/rayjob``) makes their
Workloads, and to worker2, where this project's integration makes them from the RayJob recipe in
docs/integration.md. KubeRay's CRDs only (no KubeRay controller: nothing runs, Kueue's Workload is what is compared).
Compared: the Workloads (pod sets by name: the recipe writes the submitter before the worker groups, Kueue after,
the one difference docs/integration.md lists), and after admission the RayJob's templates, the default submitter's
that both write into the RayJob included.
"""

from __future__ import annotations

import copy
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest
import yaml
from kubernetes_asyncio import client as k8s_client

from e2e.interop.conftest import Fleet
from e2e.interop.recipes import recipe
from multikueue.kube.addresses import WORKLOADS, GroupVersionKind, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue.owners import workload_name
from multikueue_testbed import crds, kueue
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.dispatcher import running
from multikueue_testbed.waiting import eventually

KUEUES, OURS = "worker1", "worker2"
RAYJOB = GroupVersionKind("ray.io", "v1", "RayJob")
RAYJOBS = Resource("ray.io", "v1", "rayjobs", "RayJob")
QUEUE = "user-queue"


ADAPTER = recipe("RayJob, as Kueue's own RayJob integration shapes it")


async def _install_crds(fleet: Fleet) -> None:
    from multikueue.kube.client import api_client_from_kubeconfig

    for worker in (KUEUES, OURS):
        async with await api_client_from_kubeconfig(fleet.bed.cluster(worker).kubeconfig) as api:
            await crds.install_crds(api, [crds.foreign_crd("RayJob"), crds.foreign_crd("RayCluster")])


@pytest.fixture(scope="module")
def ray_workers(fleet: Fleet) -> Iterator[None]:
    """KubeRay's CRDs on both workers and Kueue's RayJob integration on worker1; Kueue as it was afterwards."""
    anyio.run(_install_crds, fleet)
    before = fleet.kueues[KUEUES].frameworks
    try:
        fleet.kueues[KUEUES].restart(frameworks=(*before, "ray.io/rayjob"))
        yield
    finally:
        fleet.kueues[KUEUES].restart(frameworks=before)


@pytest.fixture
async def namespace(ray_workers: None, clients: dict[str, ApiClient]) -> AsyncIterator[str]:
    name = f"ray-{uuid.uuid4().hex[:6]}"
    toleration = {"key": "interop/accelerator", "operator": "Exists", "effect": "NoSchedule"}
    for worker in (KUEUES, OURS):
        api = clients[worker]
        await k8s_client.CoreV1Api(k8s(api)).create_namespace(raw_body({"metadata": {"name": name}}))
        await kueue.queues(api, name, local_queue=QUEUE, cluster_queue=f"{name}-cq", flavor=f"{name}-flavor",
                           flavor_spec={"nodeLabels": {"type": "kwok"}, "tolerations": [toleration]}, check=None,
                           quota={"cpu": "8", "memory": "16Gi"},
                           namespace_selector={"matchLabels": {"kubernetes.io/metadata.name": name}})  # fmt: skip
    config = yaml.safe_dump({"multiKueue": {"externalFrameworks": [{"name": ADAPTER["name"]}]},
                             "dispatcher": {"namespace": name, "adapters": [ADAPTER]}})  # fmt: skip
    async with running(clients[OURS], config, role="worker", timeout=60):
        yield name


POD = {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.9",
                                "resources": {"requests": {"cpu": "100m"}}}]}}  # fmt: skip
SUBMITTER = {"spec": {"restartPolicy": "Never", "containers": [
    {"name": "submit", "image": "rayproject/ray:2.9", "resources": {"requests": {"cpu": "200m"}}}]}}  # fmt: skip


def _rayjob(name: str, **spec: Any) -> dict[str, Any]:
    """Queued and suspended, as Kueue's webhook leaves a RayJob; deleting its cluster when done, which Kueue's
    validating webhook requires."""
    cluster = {"headGroupSpec": {"rayStartParams": {}, "template": copy.deepcopy(POD)},
               "workerGroupSpecs": [{"groupName": "small", "minReplicas": 0, "maxReplicas": 4, "replicas": 2,
                                     "rayStartParams": {}, "template": copy.deepcopy(POD)}]}  # fmt: skip
    return {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
            "spec": {"suspend": True, "entrypoint": "python job.py", "shutdownAfterJobFinishes": True,
                     "rayClusterSpec": cluster, **spec}}  # fmt: skip


def _view(workload: Any, owner: Any) -> dict[str, Any]:
    """A Workload less what differs by construction (UIDs, times), its pod sets by name."""
    meta, uid = workload["metadata"], owner["metadata"]["uid"]
    spec = {**workload["spec"], "podSets": sorted(workload["spec"]["podSets"], key=lambda p: p["name"])}
    return {
        "name": meta["name"] == workload_name(owner["metadata"]["name"], uid, RAYJOB),
        "labels": {k: v == uid if k == "kueue.x-k8s.io/job-uid" else v for k, v in (meta.get("labels") or {}).items()},
        "finalizers": meta.get("finalizers"),
        "ownerReferences": [{**r, "uid": r["uid"] == uid} for r in meta.get("ownerReferences") or []],
        "spec": spec,
    }  # fmt: skip


def _templates(rayjob: Any, workload: str) -> Any:
    """The RayJob's pod templates, Kueue's workload annotation read as "this Workload"."""
    spec = copy.deepcopy(rayjob["spec"])
    found = [spec["rayClusterSpec"]["headGroupSpec"]["template"], spec.get("submitterPodTemplate"),
             *(g["template"] for g in spec["rayClusterSpec"]["workerGroupSpecs"])]  # fmt: skip
    for template in found:
        notes = ((template or {}).get("metadata") or {}).get("annotations") or {}
        if "kueue.x-k8s.io/workload" in notes:
            notes["kueue.x-k8s.io/workload"] = notes["kueue.x-k8s.io/workload"] == workload
    return found


SHAPES: dict[str, dict[str, Any]] = {
    "no-submitter-template": {},
    "a-submitter-template": {"submitterPodTemplate": SUBMITTER},
    "http-mode": {"submissionMode": "HTTPMode"},
}


@pytest.mark.parametrize("shape", list(SHAPES), ids=list(SHAPES))
async def test_a_rayjob_gets_the_same_workload_and_admitted_templates_from_both(
    clients: dict[str, ApiClient], namespace: str, shape: str
) -> None:
    made = {}
    for worker in (KUEUES, OURS):
        created = await Objects(clients[worker], RAYJOBS).create(_rayjob("ray", **SHAPES[shape]), namespace)
        made[worker] = (created, workload_name("ray", created["metadata"]["uid"], RAYJOB))

    async def when(worker: str, resource: Resource, name: str, until: Any, what: str) -> Any:
        return await eventually(lambda: Objects(clients[worker], resource).get(name, namespace),
                                until=lambda x: x is not None and until(x), timeout=90,
                                what=f"{what} on {worker}")  # fmt: skip

    def is_admitted(workload: Any) -> bool:
        conditions = (workload.get("status") or {}).get("conditions") or []
        return any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions)

    admitted = {w: await when(w, WORKLOADS, made[w][1], is_admitted, "admitted") for w in (KUEUES, OURS)}
    assert _view(admitted[OURS], made[OURS][0]) == _view(admitted[KUEUES], made[KUEUES][0])
    names = sorted(p["name"] for p in admitted[OURS]["spec"]["podSets"])
    assert names == (["head", "small"] if shape == "http-mode" else ["head", "small", "submitter"])
    released = {w: await when(w, RAYJOBS, "ray", lambda r: not r["spec"].get("suspend"), "released")
                for w in (KUEUES, OURS)}  # fmt: skip
    assert _templates(released[OURS], made[OURS][1]) == _templates(released[KUEUES], made[KUEUES][1])
