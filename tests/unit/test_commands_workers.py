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


def test_every_worker_failure_is_one_line_and_a_cluster_not_readable_is_said_on_its_line() -> None:
    """A condition message another controller wrote over several lines (a parser's dump) is one line here."""
    dump = 'load client config failed: while parsing a block mapping\n  in "<byte string>", line 1\n    ^'
    broken = Fleet("worker1", "False", "BadKubeConfig", dump, unreadable="kubeconfig Secret ns/s key kubeconfig "
                   "is not YAML: line 3, column 5: mapping values are not allowed here")  # fmt: skip
    unlisted = Fleet("worker2", "Unknown", cluster_unreadable="MultiKueueClusters cannot be listed with your "
                     "credentials (403 Forbidden)")  # fmt: skip
    assert render([broken, unlisted]).splitlines() == [
        'worker worker1: Active=False BadKubeConfig: load client config failed: while parsing a block mapping in '
        '"<byte string>", line 1 ^',
        "  credentials expire: not known (no expiry recorded)",
        "  worker: kubeconfig Secret ns/s key kubeconfig is not YAML: line 3, column 5: mapping values are not "
        "allowed here",
        "worker worker2: Active=Unknown: MultiKueueClusters cannot be listed with your credentials (403 Forbidden)",
        "  credentials expire: not known (no expiry recorded)",
        "  ClusterQueues: none",
    ]  # fmt: skip
    document = as_json([unlisted])
    assert (document["apiVersion"], document["kind"]) == ("multikueue.x-k8s.io/v1alpha1", "WorkerList")
    assert document["items"][0]["cluster_unreadable"].startswith("MultiKueueClusters cannot be listed")
