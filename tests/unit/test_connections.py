from __future__ import annotations

from typing import Any

from multikueue.clusters.connections import WorkerConnection, retry_after
from multikueue.runtime.informer import ObjectKey


def connection(seen: list[tuple[str, ObjectKey]]) -> WorkerConnection:
    return WorkerConnection(
        "worker1",
        {},
        origin="mk",
        gvks=(),
        timeout=1,
        on_state_change=lambda: None,
        on_worker_event=lambda worker, key: seen.append((worker, key)),
    )


def obj(kind: str, name: str, **meta: Any) -> dict[str, Any]:
    return {"kind": kind, "metadata": {"name": name, "namespace": "ns", **meta}}


def test_worker_changes_map_to_the_manager_workload_they_concern() -> None:
    seen: list[tuple[str, ObjectKey]] = []
    c = connection(seen)
    c._event_handler(workloads=True)("MODIFIED", obj("Workload", "pipelinerun-hello"))
    annotated = obj("PipelineRun", "hello", annotations={"kueue.x-k8s.io/prebuilt-workload-name": "pipelinerun-hello"})
    c._event_handler(workloads=False)("MODIFIED", annotated)
    labelled = obj("PipelineRun", "other", labels={"kueue.x-k8s.io/prebuilt-workload-name": "pipelinerun-other"})
    c._event_handler(workloads=False)("ADDED", labelled)
    c._event_handler(workloads=False)("ADDED", obj("PipelineRun", "unnamed"))  # no Workload named: nothing to do
    assert seen == [
        ("worker1", ObjectKey("ns", "pipelinerun-hello")),
        ("worker1", ObjectKey("ns", "pipelinerun-hello")),
        ("worker1", ObjectKey("ns", "pipelinerun-other")),
    ]


def test_observation_times_are_forgotten_with_the_object() -> None:
    c = connection([])
    handle = c._event_handler(workloads=False)
    handle("ADDED", obj("PipelineRun", "hello"))
    assert ("PipelineRun", "ns", "hello") in c.observed
    handle("DELETED", obj("PipelineRun", "hello"))
    assert c.observed == {}


def test_a_new_connection_counts_as_lost_since_its_creation() -> None:
    c = connection([])
    assert not c.connected
    assert c.disconnected_since == c.created_at


def test_reconnect_schedule_is_kueues() -> None:
    assert [retry_after(n) for n in range(1, 10)] == [5, 10, 20, 40, 80, 160, 320, 320, 320]
