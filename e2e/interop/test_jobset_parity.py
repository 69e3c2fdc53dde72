"""This project's declarative integration beside Kueue's own JobSet integration, on real Kueue (#18).

The same JobSets go to worker1, where Kueue v0.19.2's built-in JobSet integration makes and runs their Workloads,
and to worker2, where this project's integration does it from the JobSet recipe in docs/integration.md (Kueue
there does not know the kind). Both clusters run real Kueue with ``waitForPodsReady: {timeout: 20s}``, JobSet's
own controller (built from its module) and kube-controller-manager, kube-scheduler and kwok, so Jobs, pods and
readiness are real. Compared field by field: the Workloads, the admissions, the pod templates as admission leaves
them and as eviction restores them, PodsReady, and the finish. The differences that remain are listed in
docs/integration.md, each with its reason, and asserted here as exactly those.
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
from multikueue.pki import CertificateAuthority
from multikueue_testbed import crds, kueue
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.dispatcher import running
from multikueue_testbed.interop import COMPLETE_LABEL, ComponentUnavailable, jobset_binary
from multikueue_testbed.waiting import eventually

KUEUES, OURS = "worker1", "worker2"
JOBSET = GroupVersionKind("jobset.x-k8s.io", "v1alpha2", "JobSet")
JOBSETS = Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet")
PODS_READY_TIMEOUT = "20s"
QUEUE = "user-queue"


ADAPTER = recipe("JobSet, as Kueue's own JobSet integration shapes it")


def _progress(message: str) -> None:
    import sys

    sys.stderr.write(f"[interop] {message}\n")
    sys.stderr.flush()


async def _install_crd(fleet: Fleet) -> None:
    from multikueue.kube.client import api_client_from_kubeconfig

    for worker in (KUEUES, OURS):
        async with await api_client_from_kubeconfig(fleet.bed.cluster(worker).kubeconfig) as api:
            await crds.install_crds(api, [crds.foreign_crd("JobSet")])


@pytest.fixture(scope="module")
def jobset_workers(fleet: Fleet) -> Iterator[None]:
    """For this module: the JobSet CRD and controller on both workers, waitForPodsReady on both workers' Kueue and
    Kueue's JobSet integration on worker1; everything as it was afterwards (the other tests run without them)."""
    try:
        binary = jobset_binary(_progress)
    except ComponentUnavailable as e:
        pytest.exit(f"interop profile: {e}", returncode=3)
    anyio.run(_install_crd, fleet)
    before = {w: (fleet.kueues[w].frameworks, dict(fleet.kueues[w].extra)) for w in (KUEUES, OURS)}
    started = []
    try:
        frameworks: tuple[str, ...]
        for worker, frameworks in ((KUEUES, ("batch/job", "jobset.x-k8s.io/jobset")), (OURS, ("batch/job",))):
            extra = {**before[worker][1], "waitForPodsReady": {"timeout": PODS_READY_TIMEOUT}}
            fleet.kueues[worker].restart(frameworks=frameworks, extra=extra)
            started.append(fleet.runtimes[worker].start_jobset(binary, CertificateAuthority("jobset-webhooks")))
        _progress(f"JobSet {crds.JOBSET.version} on {KUEUES}, {OURS}; Kueue's JobSet integration on {KUEUES}")
        yield
    finally:
        for process in started:
            process.stop()
        for worker, (frameworks, extra) in before.items():
            fleet.kueues[worker].restart(frameworks=frameworks, extra=extra)


@pytest.fixture
async def namespace(jobset_workers: None, clients: dict[str, ApiClient]) -> AsyncIterator[str]:
    """A namespace on both workers with the same queues: a flavor with a node label (the fake node's) and a
    toleration, a ClusterQueue and the LocalQueue; this project's integration running on worker2."""
    name = f"jobset-{uuid.uuid4().hex[:6]}"
    toleration = {"key": "interop/accelerator", "operator": "Exists", "effect": "NoSchedule"}
    flavor = {"nodeLabels": {"type": "kwok"}, "tolerations": [toleration]}
    for worker in (KUEUES, OURS):
        api = clients[worker]
        await k8s_client.CoreV1Api(k8s(api)).create_namespace(raw_body({"metadata": {"name": name}}))
        await kueue.queues(api, name, local_queue=QUEUE, cluster_queue=f"{name}-cq", flavor=f"{name}-accelerated",
                           flavor_spec=flavor, check=None, quota={"cpu": "8", "memory": "16Gi"},
                           namespace_selector={"matchLabels": {"kubernetes.io/metadata.name": name}})  # fmt: skip
    config = yaml.safe_dump({"multiKueue": {"externalFrameworks": [{"name": ADAPTER["name"]}]},
                             "dispatcher": {"namespace": name, "adapters": [ADAPTER]}})  # fmt: skip
    async with running(clients[OURS], config, role="worker", timeout=60):
        yield name


def _jobset(name: str, jobs: list[dict[str, Any]], *, complete: bool) -> dict[str, Any]:
    """A JobSet as JobSet's defaulting webhook leaves it (not installed here), suspended as Kueue's webhook leaves it,
    queued; its pods complete (kwok) only with ``complete``."""
    replicated = []
    for job in jobs:
        labels = {COMPLETE_LABEL: "true"} if complete else {}
        pod = {"metadata": {"labels": labels, **job.get("pod_metadata", {})},
               "spec": {"restartPolicy": "OnFailure", "containers": [
                   {"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "100m"}}}]}}  # fmt: skip
        spec = {"completionMode": "Indexed", "backoffLimit": 0, "template": pod, **job.get("spec", {})}
        replicated.append({"name": job["name"], "replicas": job.get("replicas", 1), "template": {"spec": spec}})
    return {
        "apiVersion": JOBSET.api_version, "kind": "JobSet",
        "metadata": {"name": name, "labels": {"kueue.x-k8s.io/queue-name": QUEUE}},
        "spec": {"suspend": True, "replicatedJobs": replicated, "successPolicy": {"operator": "All"},
                 "startupPolicy": {"startupPolicyOrder": "AnyOrder"},
                 "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True}},
    }  # fmt: skip


TWO: list[dict[str, Any]] = [
    {"name": "leader"},
    {"name": "crew", "replicas": 2, "spec": {"parallelism": 2, "completions": 2}},
]
THREE: list[dict[str, Any]] = [
    {"name": "driver"},
    {"name": "ps", "replicas": 2, "spec": {"parallelism": 4, "completions": 3}},  # completions < parallelism
    {"name": "trainers", "replicas": 3, "spec": {"completions": 2}},  # parallelism missing
]


async def _both(clients: dict[str, ApiClient], namespace: str, name: str, jobs: list[dict[str, Any]], *,
                complete: bool) -> dict[str, tuple[Any, str]]:  # fmt: skip
    """The JobSet created on both workers: (object, its Workload's name) by worker."""
    made = {}
    for worker in (KUEUES, OURS):
        created = await Objects(clients[worker], JOBSETS).create(_jobset(name, jobs, complete=complete), namespace)
        made[worker] = (created, workload_name(name, created["metadata"]["uid"], JOBSET))
    return made


async def _workloads(clients: dict[str, ApiClient], namespace: str, made: dict[str, tuple[Any, str]],
                     until: Any = bool, what: str = "the Workload") -> dict[str, Any]:  # fmt: skip
    return {w: await eventually(lambda w=w: Objects(clients[w], WORKLOADS).get(made[w][1], namespace),  # type: ignore[misc]
                                until=lambda x: x is not None and until(x), timeout=90, what=f"{what} on {w}")
            for w in (KUEUES, OURS)}  # fmt: skip


def _condition(obj: Any, kind: str) -> dict[str, Any]:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


def _workload_view(workload: Any, owner: Any) -> dict[str, Any]:
    """A Workload less what differs by construction (UIDs, times, versions), UIDs compared to the owner's."""
    meta, uid = workload["metadata"], owner["metadata"]["uid"]
    return {
        "name": meta["name"] == workload_name(owner["metadata"]["name"], uid, JOBSET),
        "labels": {k: v == uid if k == "kueue.x-k8s.io/job-uid" else v for k, v in (meta.get("labels") or {}).items()},
        "annotations": meta.get("annotations") or {},
        "finalizers": meta.get("finalizers"),
        "ownerReferences": [{**r, "uid": r["uid"] == uid} for r in meta.get("ownerReferences") or []],
        "spec": workload["spec"],
    }  # fmt: skip


def _admission_view(workload: Any) -> Any:
    return copy.deepcopy((workload.get("status") or {}).get("admission"))


def _templates(jobset: Any, workload_name_: str) -> list[Any]:
    """Each replicatedJob's pod template, the Workload's name in Kueue's annotation read as "this Workload"."""
    result = []
    for job in jobset["spec"]["replicatedJobs"]:
        template = copy.deepcopy(job["template"]["spec"]["template"])
        notes = (template.get("metadata") or {}).get("annotations") or {}
        if "kueue.x-k8s.io/workload" in notes:
            notes["kueue.x-k8s.io/workload"] = notes["kueue.x-k8s.io/workload"] == workload_name_
        result.append(template)
    return result


async def _jobset_when(api: ApiClient, name: str, namespace: str, until: Any, what: str) -> Any:
    return await eventually(lambda: Objects(api, JOBSETS).get(name, namespace), until=until, timeout=90, what=what)


@pytest.mark.parametrize("shape", [TWO, THREE], ids=["two-replicated-jobs", "three-with-kueues-count-rules"])
async def test_a_jobset_runs_through_both_integrations_alike(
    clients: dict[str, ApiClient], namespace: str, shape: list[dict[str, Any]]
) -> None:
    """Made, admitted, released with the flavor in its templates, PodsReady within waitForPodsReady's timeout,
    finished: the Workloads, admissions and templates are the same on both workers."""
    made = await _both(clients, namespace, "train", shape, complete=True)
    first = await _workloads(clients, namespace, made)
    assert _workload_view(first[OURS], made[OURS][0]) == _workload_view(first[KUEUES], made[KUEUES][0])

    admitted = await _workloads(clients, namespace, made, lambda w: _condition(w, "Admitted").get("status") == "True",
                                "admitted")  # fmt: skip
    assert _admission_view(admitted[OURS]) == _admission_view(admitted[KUEUES])
    released = {w: await _jobset_when(clients[w], "train", namespace, lambda j: j["spec"]["suspend"] is False,
                                      f"released on {w}") for w in (KUEUES, OURS)}  # fmt: skip
    assert _templates(released[OURS], made[OURS][1]) == _templates(released[KUEUES], made[KUEUES][1])
    pod = released[OURS]["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]
    assert pod["spec"]["nodeSelector"] == {"type": "kwok"}, "the flavor's node label, in both"

    ready = await _workloads(clients, namespace, made, lambda w: _condition(w, "PodsReady").get("status") == "True",
                             "PodsReady")  # fmt: skip
    views = {w: {k: _condition(ready[w], "PodsReady").get(k) for k in ("status", "reason", "message")} for w in ready}
    assert views[OURS] == views[KUEUES]
    assert (views[OURS]["status"], views[OURS]["reason"]) == ("True", "Started")

    done = await _workloads(clients, namespace, made, lambda w: _condition(w, "Finished").get("status") == "True",
                            "Finished")  # fmt: skip
    finished = {w: {k: _condition(done[w], "Finished").get(k) for k in ("status", "reason", "message")} for w in done}
    assert finished[OURS] == finished[KUEUES]
    assert not any(_condition(done[w], "Evicted").get("status") == "True" for w in done), "never evicted"


async def test_topology_requests_make_the_same_workload(clients: dict[str, ApiClient], namespace: str) -> None:
    """Kueue's topology annotations on the templates (required with a pod-set group, preferred, slice): the same
    Workload from both (not admitted here: that needs a Topology and a topology-aware flavor)."""
    shape = copy.deepcopy(THREE)
    rack, host = "cloud.example.com/rack", "kubernetes.io/hostname"
    shape[0]["pod_metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": rack,
                                                "kueue.x-k8s.io/podset-group-name": "g"}}  # fmt: skip
    shape[1]["pod_metadata"] = {"annotations": {"kueue.x-k8s.io/podset-required-topology": rack,
                                                "kueue.x-k8s.io/podset-group-name": "g"}}  # fmt: skip
    shape[2]["pod_metadata"] = {"annotations": {"kueue.x-k8s.io/podset-preferred-topology": rack,
                                                "kueue.x-k8s.io/podset-slice-required-topology": host,
                                                "kueue.x-k8s.io/podset-slice-size": "1"}}  # fmt: skip
    made = await _both(clients, namespace, "placed", shape, complete=False)
    workloads = await _workloads(clients, namespace, made)
    assert _workload_view(workloads[OURS], made[OURS][0]) == _workload_view(workloads[KUEUES], made[KUEUES][0])
    assert workloads[OURS]["spec"]["podSets"][2]["topologyRequest"]["podSetSliceSize"] == 1


async def test_an_evicted_jobset_is_stopped_and_its_templates_restored_alike(
    clients: dict[str, ApiClient], namespace: str
) -> None:
    """Running (pods ready, not completing), then its Workload deactivated: Kueue evicts it, each integration
    suspends the JobSet and restores its templates; the JobSets and Workloads are the same on both workers."""
    made = await _both(clients, namespace, "evicted", TWO, complete=False)
    await _workloads(clients, namespace, made, lambda w: _condition(w, "PodsReady").get("status") == "True", "running")
    for worker in (KUEUES, OURS):
        await Objects(clients[worker], WORKLOADS).patch(made[worker][1], {"spec": {"active": False}}, namespace)
    stopped = {w: await _jobset_when(clients[w], "evicted", namespace, lambda j: j["spec"]["suspend"] is True,
                                     f"suspended on {w}") for w in (KUEUES, OURS)}  # fmt: skip
    assert _templates(stopped[OURS], made[OURS][1]) == _templates(stopped[KUEUES], made[KUEUES][1])
    created = _templates(made[OURS][0], made[OURS][1])
    for template in created:  # written with `labels: {}`; restored as Kueue restores, an empty map and none alike
        template["metadata"] = {k: v for k, v in template["metadata"].items() if v}
    assert _templates(stopped[OURS], made[OURS][1]) == created, "as created"
    kinds = ("Evicted", "QuotaReserved", "Admitted", "PodsReady", "Requeued")

    async def conditions() -> dict[str, Any]:
        found = {w: await Objects(clients[w], WORKLOADS).get(made[w][1], namespace) for w in (KUEUES, OURS)}
        return {w: {kind: {k: _condition(wl, kind).get(k) for k in ("status", "reason", "message")} for kind in kinds}
                for w, wl in found.items()}  # fmt: skip

    # Both settle (the two controllers' steps interleave differently with the JobSet controller's): then the same.
    settled = await eventually(conditions, until=lambda c: c[OURS] == c[KUEUES]
                               and c[KUEUES]["QuotaReserved"]["status"] == "False", timeout=60,
                               what="the same conditions once the quota is released")  # fmt: skip
    assert settled[OURS]["Evicted"]["reason"] == "Deactivated"
    _progress(f"evicted, settled alike: {settled[OURS]}")
