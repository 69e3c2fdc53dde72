"""``multikueue status``'s verdict (``status.why``): one row per way a run can stand."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.commands.status import RunView, WorkerView, why
from multikueue.kube.addresses import GroupVersionKind

PR = GroupVersionKind("tekton.dev", "v1", "PipelineRun")
RUN: dict[str, Any] = {"metadata": {"name": "r", "namespace": "ns", "uid": "u", "annotations": {}}}


def cond(kind: str, status: str = "True", reason: str = "", message: str = "") -> dict[str, Any]:
    return {"type": kind, "status": status, "reason": reason or kind, "message": message}


def workload(*conditions: dict[str, Any], **status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "wl"}, "status": {"conditions": list(conditions), **status}}


RESERVED = cond("QuotaReserved")
NO_MATCH = "No worker matches the run's worker selection (the object's worker-selector \"gpu=a100\"): w1: ..."


def view(wl: dict[str, Any] | None = None, *workers: WorkerView, obj: Any = RUN) -> RunView:
    return RunView(PR, "ns", "r", obj=obj, workload=wl, workers=list(workers))


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (view(obj=None), "PipelineRun ns/r does not exist on the manager"),
        (
            view(),
            "no Workload: not queued (no kueue.x-k8s.io/queue-name label), not managed by Kueue, or not looked "
            "at yet; `multikueue explain` tells a direct-mode placement",
        ),
        (
            view(
                obj={
                    "metadata": {
                        "annotations": {"multikueue.x-k8s.io/worker": "w1", "multikueue.x-k8s.io/phase": "Running"}
                    }
                }
            ),
            "placed on w1 (direct mode), Running",
        ),
        (
            view(workload(cond("QuotaReserved", "False", "Pending", "insufficient quota for cpu"))),
            "waiting for quota on the manager: insufficient quota for cpu",
        ),
        (view(workload()), "waiting for quota on the manager: not looked at by Kueue yet"),
        (
            view(obj={**RUN, "metadata": {**RUN["metadata"], "annotations": {"multikueue.x-k8s.io/phase": "Failed"}}}),
            "Failed without a worker (direct mode); `multikueue explain` tells why",
        ),
        (
            view(
                workload(
                    RESERVED,
                    admissionChecks=[
                        {"name": "ac", "state": "Pending"},
                        {"name": "prov", "state": "Pending", "message": "provisioning"},
                    ],
                )
            ),
            "waiting to be sent to a worker (ac: Pending; prov: provisioning)",
        ),
        (
            view(workload(RESERVED, admissionChecks=[{"name": "ac", "state": "Pending", "message": NO_MATCH}])),
            f"sent to no worker: {NO_MATCH}",
        ),
        (
            view(
                workload(
                    RESERVED, admissionChecks=[{"name": "ac", "state": "Retry", "message": "Admitting remote lost"}]
                )
            ),
            "admission check ac is Retry: Admitting remote lost",
        ),
        (
            view(
                workload(RESERVED, nominatedClusterNames=["w1", "w2"]),
                WorkerView("w1", workload=workload(cond("QuotaReserved", "False", "Pending", "no fit"))),
                WorkerView("w2", unreadable="cannot read its Secret ns/w2 with your credentials (Forbidden)"),
            ),
            "waiting for a worker's Kueue to admit it: w1: no fit; w2 cannot read its Secret ns/w2 with your "
            "credentials (Forbidden)",
        ),
        (
            view(workload(RESERVED, nominatedClusterNames=["w1"]), WorkerView("w1", workload=workload(RESERVED))),
            "waiting for a worker's Kueue to admit it: w1: quota reserved, waiting for its admission checks",
        ),
        (
            view(workload(RESERVED, nominatedClusterNames=["w1"]), WorkerView("w1")),
            "waiting for a worker's Kueue to admit it: w1: its Workload copy is not there yet",
        ),
        (
            view(
                workload(RESERVED, clusterName="w1"),
                WorkerView("w1", copy={"status": {"conditions": [cond("Succeeded", "Unknown", "Running")]}}),
            ),
            "admitted on w1, running there: Succeeded=Unknown (Running)",
        ),
        (
            view(workload(RESERVED, clusterName="w1"), WorkerView("w1")),
            "admitted on w1; its copy is not created there yet",
        ),
        (
            view(workload(RESERVED, cond("Evicted", reason="Preempted", message="by a higher priority"))),
            "evicted (Preempted): by a higher priority",
        ),
        (
            view(workload(RESERVED, cond("Finished", reason="Succeeded", message="done"), clusterName="w1")),
            "finished (Succeeded): done",
        ),
    ],
)
def test_why(case: RunView, expected: str) -> None:
    assert why(case) == expected
