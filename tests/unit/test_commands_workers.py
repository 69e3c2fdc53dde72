"""``multikueue workers``: a ClusterQueue's usage against its nominal quota, and the fleet as text and JSON."""

from __future__ import annotations

import json
from typing import Any

import pytest

from multikueue.clusterqueues import quantity_value, queue_of
from multikueue.commands.workers import Fleet, as_json, from_cluster, render

CLUSTER_QUEUE: dict[str, Any] = {
    "metadata": {"name": "cq"},
    "spec": {"resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
        {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "8"},
                                          {"name": "memory", "nominalQuota": "16Gi"}]},
    ]}]},
    "status": {"pendingWorkloads": 3, "reservingWorkloads": 2, "admittedWorkloads": 2,
               "flavorsUsage": [{"name": "default", "resources": [{"name": "cpu", "total": "2"}]}]},
}  # fmt: skip

CLUSTER: dict[str, Any] = {
    "metadata": {"name": "worker1", "labels": {"region": "eu"},
                 "annotations": {"multikueue.x-k8s.io/credentials-expire-at": "2026-12-01T10:00:00Z"}},
    "status": {"conditions": [{"type": "Active", "status": "True", "reason": "Active", "message": "Connected"}]},
}  # fmt: skip


def test_a_cluster_queue_is_read_as_usage_against_nominal_quota_per_flavor_and_resource() -> None:
    queue = queue_of(CLUSTER_QUEUE)
    assert (queue.name, queue.pending, queue.reserving, queue.admitted) == ("cq", 3, 2, 2)
    assert [(u.flavor, u.resource, u.used, u.nominal) for u in queue.usage] == [
        ("default", "cpu", "2", "8"),
        ("default", "memory", "0", "16Gi"),  # nothing used: no entry in flavorsUsage
    ]


def test_the_fleet_as_text_and_as_json() -> None:
    read = from_cluster(CLUSTER)
    read.kinds = {"PipelineRun.v1.tekton.dev": True, "JobSet.v1alpha2.jobset.x-k8s.io": False}
    read.queues = [queue_of(CLUSTER_QUEUE)]
    unread = Fleet("worker2", "False", "BadConfig", "Secret not found", unreadable="no Secret")
    assert render([read, unread]) == "\n".join([
        "worker worker1: Active=True Active: Connected",
        "  labels: region=eu",
        "  credentials expire: 2026-12-01T10:00:00Z",
        "  kinds: PipelineRun.v1.tekton.dev, JobSet.v1alpha2.jobset.x-k8s.io (not served)",
        "  ClusterQueue cq: 3 pending, 2 reserving, 2 admitted",
        "    default cpu: 2 of 8",
        "    default memory: 0 of 16Gi",
        "worker worker2: Active=False BadConfig: Secret not found",
        "  credentials expire: not known (no expiry recorded)",
        "  worker: no Secret",
    ])  # fmt: skip
    document = json.loads(json.dumps(as_json([read])))
    assert document["kind"] == "WorkerList"
    assert document["items"][0]["queues"][0]["usage"][0] == {"flavor": "default", "resource": "cpu", "used": "2",
                                                             "nominal": "8"}  # fmt: skip
    assert render([]) == "no MultiKueueClusters on the manager"


def test_quantities_are_read_as_kubernetes_writes_them() -> None:
    assert [quantity_value(q) for q in ("8", "500m", "16Gi", "1k", "2.5", "1e3", "100Mi")] == [
        8, 0.5, 16 * 2**30, 1000, 2.5, 1000, 100 * 2**20,
    ]  # fmt: skip
    with pytest.raises(ValueError, match="not a quantity"):
        quantity_value("eight")
