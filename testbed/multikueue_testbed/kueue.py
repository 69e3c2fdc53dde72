"""Kueue's part where no Kueue runs: the objects and status writes Kueue's own controllers would make.

Used by the tests, the demo and the benchmarks. Each write is the one Kueue makes (conditions, admission,
admission-check states), so the dispatcher sees exactly what it would see beside a real Kueue.
"""

from __future__ import annotations

import base64
import contextlib
from collections.abc import Callable
from typing import Any

import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.client.exceptions import ApiException

from multikueue.kube.addresses import (
    ADMISSION_CHECKS,
    KUEUE,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
    RESOURCE_FLAVORS,
    WORKLOADS,
    Resource,
)
from multikueue.kube.client import ApiClient
from multikueue.kube.conditions import now_rfc3339, set_condition
from multikueue.kube.errors import Conflict
from multikueue.kube.resources import Objects
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.objects import pipelinerun

Object = dict[str, Any]
API_VERSION = "kueue.x-k8s.io/v1beta2"
MANAGED_BY = "kueue.x-k8s.io/multikueue"
PIPELINERUNS = Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun")
DEFAULT_FLAVOR = "default"  # the flavor the played admissions name
# Read by real Kueue only (the dispatcher never touches them): for beds where Kueue's scheduler runs.
CLUSTER_QUEUES = Resource(KUEUE, "v1beta2", "clusterqueues", "ClusterQueue", namespaced=False)
LOCAL_QUEUES = Resource(KUEUE, "v1beta2", "localqueues", "LocalQueue")


def workload_for(owner: Object, *, name: str | None = None, queue: str = "user-queue", cpu: str = "1") -> Object:
    """The Workload a job integration creates for ``owner`` (controller ownerReference, one pod set)."""
    meta = owner["metadata"]
    return {
        "apiVersion": API_VERSION,
        "kind": "Workload",
        "metadata": {
            "name": name or f"{owner['kind'].lower()}-{meta['name']}",
            "namespace": meta["namespace"],
            "labels": {"kueue.x-k8s.io/job-uid": meta["uid"]},
            "ownerReferences": [
                {
                    "apiVersion": owner["apiVersion"],
                    "kind": owner["kind"],
                    "name": meta["name"],
                    "uid": meta["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "queueName": queue,
            "podSets": [
                {
                    "name": "main",
                    "count": 1,
                    "template": {
                        "spec": {
                            "restartPolicy": "Never",
                            "containers": [
                                {
                                    "name": "run",
                                    "image": "busybox",
                                    "resources": {"requests": {"cpu": cpu}},
                                }
                            ],
                        }
                    },
                }
            ],
        },
    }


async def _patch_status(api: ApiClient, name: str, namespace: str, change: Callable[[Object], Object]) -> Object:
    """Read, change (the Workload in, its new status out), write back with the resourceVersion (a conflict is
    retried by the caller's poll)."""
    workloads = Objects(api, WORKLOADS)
    current = await workloads.get(name, namespace)
    if current is None:
        raise LookupError(f"Workload {namespace}/{name} not found")
    status = change(current)
    patch = {"metadata": {"resourceVersion": current["metadata"]["resourceVersion"]}, "status": status}
    return await workloads.patch_status(name, patch, namespace)


def _status(workload: Object) -> Object:
    return dict(workload.get("status") or {})


async def ensure_flavor(api: ApiClient, name: str, spec: Object | None = None) -> None:
    """The ResourceFlavor an admission names (the integration reads its node labels and tolerations on admission,
    as Kueue's does): created unless there."""
    with contextlib.suppress(Conflict):
        body = {"apiVersion": API_VERSION, "kind": "ResourceFlavor", "metadata": {"name": name}, "spec": spec or {}}
        await Objects(api, RESOURCE_FLAVORS).create(body)


def _reserved(workload: Object, queue: str, flavor: str = DEFAULT_FLAVOR) -> Object:
    """Status fields of a quota reservation in ``queue``: the condition and the admission."""
    condition = {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved",
                 "message": f"Quota reserved in ClusterQueue {queue}"}  # fmt: skip
    # One assignment per pod set, as Kueue's API requires.
    pod_sets = (workload.get("spec") or {}).get("podSets") or [{"name": "main", "count": 1}]
    assignments = [{"name": p["name"], "flavors": {"cpu": flavor}, "resourceUsage": {"cpu": "1"},
                    "count": p.get("count", 1)} for p in pod_sets]  # fmt: skip
    rows = set_condition(_status(workload).get("conditions"), condition)
    evicted = next((c for c in rows if c.get("type") == "Evicted"), None)
    if evicted is not None and evicted.get("status") == "True":  # Kueue's SetQuotaReservation resets it
        rows = set_condition(rows, {"type": "Evicted", "status": "False", "reason": "QuotaReserved",
                                    "message": "Previously: " + str(evicted.get("message", ""))})  # fmt: skip
    return {
        "conditions": rows,
        "admission": {"clusterQueue": queue, "podSetAssignments": assignments},
    }


async def reserve_quota(api: ApiClient, name: str, namespace: str, *, checks: list[str], queue: str = "cq") -> Object:
    """The manager's scheduler reserving quota: QuotaReserved, admission, and each admission check Pending."""
    now = now_rfc3339()
    await ensure_flavor(api, DEFAULT_FLAVOR)

    def change(workload: Object) -> Object:
        pending = [{"name": c, "state": "Pending", "message": "", "lastTransitionTime": now} for c in checks]
        return {**_reserved(workload, queue), "admissionChecks": pending}

    return await _patch_status(api, name, namespace, change)


async def submit_pipelinerun(api: ApiClient, namespace: str, name: str, *, check: str, queued: bool = False) -> str:
    """A PipelineRun handed to MultiKueue on the manager, the Workload its integration (tekton-kueue) would create
    for it, and its quota reserved (``check`` Pending); the Workload's name. ``queued``: with the queue-name label."""
    body = pipelinerun(name, labels={"kueue.x-k8s.io/queue-name": "user-queue"} if queued else None)
    body["spec"]["managedBy"] = MANAGED_BY
    run = await Objects(api, PIPELINERUNS).create(body, namespace)
    workload = await Objects(api, WORKLOADS).create(workload_for(run), namespace)
    wl_name: str = workload["metadata"]["name"]
    await reserve_quota(api, wl_name, namespace, checks=[check])
    return wl_name


async def pending(api: ApiClient, name: str, namespace: str, message: str, *, reason: str = "Pending") -> Object:
    """Kueue's scheduler failing to fit a Workload: QuotaReserved=False, reason Pending (Inadmissible for a queue
    that does not exist), with its explanation."""

    def change(workload: Object) -> Object:
        condition = {"type": "QuotaReserved", "status": "False", "reason": reason, "message": message}
        return {"conditions": set_condition(_status(workload).get("conditions"), condition)}

    return await _patch_status(api, name, namespace, change)


async def admit(
    api: ApiClient, name: str, namespace: str, *, queue: str = "cq", flavor: str = DEFAULT_FLAVOR
) -> Object:
    """A worker's Kueue admitting its copy (no checks there): QuotaReserved, then Admitted, in ``flavor``."""
    if flavor == DEFAULT_FLAVOR:
        await ensure_flavor(api, DEFAULT_FLAVOR)

    def change(workload: Object) -> Object:
        reserved = _reserved(workload, queue, flavor)
        admitted = {"type": "Admitted", "status": "True", "reason": "Admitted", "message": "The workload is admitted"}
        return {**reserved, "conditions": set_condition(reserved["conditions"], admitted)}

    return await _patch_status(api, name, namespace, change)


async def finish(api: ApiClient, name: str, namespace: str, *, reason: str = "Succeeded", message: str = "") -> Object:
    """A worker's Kueue marking its copy Finished (what a job integration does when the job completes)."""

    def change(workload: Object) -> Object:
        condition = {"type": "Finished", "status": "True", "reason": reason, "message": message or reason}
        return {"conditions": set_condition(_status(workload).get("conditions"), condition)}

    return await _patch_status(api, name, namespace, change)


async def evict(api: ApiClient, name: str, namespace: str, *, reason: str = "Preempted", message: str = "") -> Object:
    """Kueue evicting a Workload, in one write as its ``Evict`` does (``pkg/workload/evict``): ``Evicted``, the
    eviction counted in ``schedulingStats``, ``clusterName`` and the nominations cleared, every check not Pending
    back to Pending; the quota still reserved (released later, once the job has stopped)."""

    def change(workload: Object) -> Object:
        status = _status(workload)
        condition = {"type": "Evicted", "status": "True", "reason": reason, "message": message or reason}
        counted = [dict(e) for e in (status.get("schedulingStats") or {}).get("evictions") or []]
        same = next((e for e in counted if e.get("reason") == reason and not e.get("underlyingCause")), None)
        if same is None:
            counted.append({"reason": reason, "underlyingCause": "", "count": 1})
        else:
            same["count"] = int(same.get("count") or 0) + 1
        checks = [c if c.get("state") == "Pending" else
                  {**c, "state": "Pending", "message": f"Reset to Pending after eviction. Previously: {c.get('state')}"}
                  for c in status.get("admissionChecks") or []]  # fmt: skip
        out: Object = {"conditions": set_condition(status.get("conditions"), condition),
                       "schedulingStats": {**(status.get("schedulingStats") or {}), "evictions": counted}}  # fmt: skip
        if checks:
            out["admissionChecks"] = checks
        for cleared in ("clusterName", "nominatedClusterNames"):
            if status.get(cleared):
                out[cleared] = None  # a merge patch's null removes it
        return out

    return await _patch_status(api, name, namespace, change)


async def put_kubeconfig_secret(api: ApiClient, namespace: str, name: str, kubeconfig: Object | str) -> None:
    """Create or replace the Secret a MultiKueueCluster names (the kubeconfig under the key ``kubeconfig``)."""
    text = kubeconfig if isinstance(kubeconfig, str) else yaml.safe_dump(kubeconfig)
    body = raw_body({"metadata": {"name": name}, "data": {"kubeconfig": base64.b64encode(text.encode()).decode()}})
    core = k8s_client.CoreV1Api(k8s(api))
    try:
        await core.create_namespaced_secret(namespace, body)
    except ApiException as e:
        if e.status != 409:
            raise
        await core.replace_namespaced_secret(name, namespace, body)


async def multikueue_setup(
    api: ApiClient,
    *,
    namespace: str,
    prefix: str,
    workers: dict[str, Object],
    controller_name: str,
    in_config: int | None = None,
    sources: dict[str, Object] | None = None,
) -> dict[str, str]:
    """Secrets (in ``namespace``), MultiKueueClusters, a MultiKueueConfig (of the first ``in_config`` clusters, or
    all: Kueue's schema allows 20) and an AdmissionCheck naming ``controller_name``. Cluster-scoped names get
    ``prefix``; returns the names used. ``sources``: a worker's ``clusterSource`` instead of its Secret (a
    ``clusterProfileRef``)."""
    names = {"check": f"{prefix}-ac", "config": f"{prefix}-config"}
    clusters = []
    for worker, kubeconfig in workers.items():
        secret = f"{worker}-kubeconfig"
        await put_kubeconfig_secret(api, namespace, secret, kubeconfig)
        cluster = f"{prefix}-{worker}"
        clusters.append(cluster)
        names[worker] = cluster
        source = (sources or {}).get(worker) or {"kubeConfig": {"location": secret, "locationType": "Secret"}}
        await Objects(api, MULTIKUEUE_CLUSTERS).create(
            {
                "apiVersion": API_VERSION,
                "kind": "MultiKueueCluster",
                "metadata": {"name": cluster},
                "spec": {"clusterSource": source},
            }
        )
    await Objects(api, MULTIKUEUE_CONFIGS).create(
        {
            "apiVersion": API_VERSION,
            "kind": "MultiKueueConfig",
            "metadata": {"name": names["config"]},
            "spec": {"clusters": clusters[:in_config]},
        }
    )
    await Objects(api, ADMISSION_CHECKS).create(
        {
            "apiVersion": API_VERSION,
            "kind": "AdmissionCheck",
            "metadata": {"name": names["check"]},
            "spec": {
                "controllerName": controller_name,
                "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": names["config"]},
            },
        }
    )
    return names


async def queues(
    api: ApiClient,
    namespace: str,
    *,
    local_queue: str,
    cluster_queue: str,
    flavor: str,
    quota: dict[str, str],
    check: str | None,
    namespace_selector: Object,
    flavor_spec: Object | None = None,
) -> None:
    """For real Kueue's scheduler: a ResourceFlavor (``flavor_spec``: node labels, tolerations), a ClusterQueue with
    ``quota`` (resource -> nominal quota) of that flavor and, if given, the admission check, and the LocalQueue in
    ``namespace`` pointing at it."""
    await ensure_flavor(api, flavor, flavor_spec)
    resources = [{"name": name, "nominalQuota": value} for name, value in quota.items()]
    spec: Object = {
        "namespaceSelector": namespace_selector,
        "resourceGroups": [{"coveredResources": list(quota), "flavors": [{"name": flavor, "resources": resources}]}],
    }
    if check is not None:
        spec["admissionChecksStrategy"] = {"admissionChecks": [{"name": check}]}
    await Objects(api, CLUSTER_QUEUES).create(
        {"apiVersion": API_VERSION, "kind": "ClusterQueue", "metadata": {"name": cluster_queue}, "spec": spec}
    )
    local = {"apiVersion": API_VERSION, "kind": "LocalQueue", "metadata": {"name": local_queue}}
    await Objects(api, LOCAL_QUEUES).create(local | {"spec": {"clusterQueue": cluster_queue}}, namespace)


async def multikueue_teardown(api: ApiClient, names: dict[str, str]) -> None:
    """Delete what ``multikueue_setup`` made outside the namespace (cluster-scoped objects outlive a test)."""
    await Objects(api, ADMISSION_CHECKS).delete(names["check"])
    await Objects(api, MULTIKUEUE_CONFIGS).delete(names["config"])
    for key, name in names.items():
        if key not in ("check", "config"):
            await Objects(api, MULTIKUEUE_CLUSTERS).delete(name)
