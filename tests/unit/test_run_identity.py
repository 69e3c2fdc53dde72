"""Which run a worker copy belongs to, whether a manager object's status came from a worker, and the SSL error's
own words (#43): pure functions, no API server."""

from __future__ import annotations

import ssl
from typing import Any

import pytest

from multikueue.dispatch import copies
from multikueue.dispatch import workload_state as wl
from multikueue.kube.credentials import ssl_reason

Object = dict[str, Any]


def worker_copy(uid: str | None = "u1", prebuilt: str | None = "pipelinerun-build-abcde") -> Object:
    annotations = {}
    if uid is not None:
        annotations["multikueue.x-k8s.io/manager-uid"] = uid
    if prebuilt is not None:
        annotations["kueue.x-k8s.io/prebuilt-workload-name"] = prebuilt
    return {"metadata": {"name": "build", "namespace": "ns", "annotations": annotations}}


@pytest.mark.parametrize(
    ("run", "copy", "made"),
    [
        (copies.Run("u1", "pipelinerun-build-abcde"), worker_copy(), True),
        (copies.Run("u2", "pipelinerun-build-fghij"), worker_copy(), False),  # a same-named re-run
        (copies.Run("u1", "pipelinerun-build-fghij"), worker_copy(), False),  # another Workload of that name
        (copies.Run("u2"), worker_copy(), False),  # Direct mode: the UID alone
        (copies.Run("u1"), worker_copy(), True),
        (copies.Run("u1", "pipelinerun-build-abcde"), worker_copy(uid=None, prebuilt=None), True),  # an older copy
        (copies.Run(), worker_copy(), True),  # a removal that names no run
        (copies.Run(workload="pipelinerun-build-abcde"), worker_copy(uid="u9"), True),  # Kueue mode's removal
        (copies.Run(workload="pipelinerun-build-fghij"), worker_copy(uid="u9"), False),
    ],
)
def test_a_copy_is_this_runs_only_when_its_uid_and_workload_match(run: copies.Run, copy: Object, made: bool) -> None:
    assert run.made(copy) is made


def test_a_run_is_read_from_its_manager_object() -> None:
    assert copies.Run.of({"metadata": {"uid": "u1"}}, "wl") == copies.Run("u1", "wl")
    assert copies.Run.of(None) == copies.Run()


@pytest.mark.parametrize(
    ("status", "mirrored"),
    [
        (None, False),
        ({}, False),
        ({"conditions": [{"type": "MultiKueuePlacement", "status": "True"}]}, False),  # this controller's own
        ({"conditions": [{"type": "Succeeded", "status": "Unknown"}]}, True),
        ({"startTime": "2026-08-01T10:00:01Z"}, True),
        ({"childReferences": []}, False),
        ({"failed": 0, "succeeded": 0}, False),  # RayJob's schema defaults, filled in on the manager
        ({"failed": 0, "succeeded": 1}, True),
        ({"jobDeploymentStatus": "Running", "failed": 0}, True),
        ({"restarts": 0, "replicatedJobsStatus": [{"name": "w", "ready": 0}]}, True),  # JobSet reported it
    ],
)
def test_a_status_mirrored_from_a_worker_is_told_from_this_controllers_own(status: Any, mirrored: bool) -> None:
    obj: Object = {"metadata": {}} if status is None else {"metadata": {}, "status": status}
    assert copies.has_mirrored_status(obj, frozenset({"MultiKueuePlacement"})) is mirrored


def test_a_workload_copy_adopted_by_its_object_proves_the_object_was_there() -> None:
    adopted = {"metadata": {"ownerReferences": [{"kind": "PipelineRun", "name": "build"}]}}
    assert wl.adopted_by(adopted, "PipelineRun", "build")
    assert not wl.adopted_by(adopted, "PipelineRun", "other")
    assert not wl.adopted_by({"metadata": {}}, "PipelineRun", "build")
    assert not wl.adopted_by(None, "PipelineRun", "build")
    going = {"metadata": {**adopted["metadata"], "deletionTimestamp": "2026-08-01T10:00:00Z"}}
    assert not wl.adopted_by(going, "PipelineRun", "build")


def test_an_eviction_on_record_says_the_status_may_come_from_another_worker() -> None:
    assert not wl.evicted_before({"status": {}})
    assert wl.evicted_before({"status": {"schedulingStats": {"evictions": [{"reason": "Preempted", "count": 1}]}}})
    assert wl.evicted_before({"status": {"requeueState": {"count": 1}}})


def test_ca_data_that_is_not_a_certificate_is_said_in_the_ssl_errors_own_words() -> None:
    with pytest.raises(ssl.SSLError) as raised:
        ssl.create_default_context(cadata="not a cert")
    reason = ssl_reason(raised.value)
    assert "cadata does not contain a certificate" in reason
    assert "_ssl.c" not in reason
    assert reason != "None"


def test_a_workers_outage_clock_outlives_a_reload_and_ends_when_it_connects() -> None:
    from multikueue.clusters.outages import WorkerOutages

    now = [100.0]
    outages = WorkerOutages(clock=lambda: now[0])
    assert outages.started_at == 100.0
    assert outages.since("w1") is None
    now[0] = 150.0
    outages.dropped("w1", since=120.0)  # it was already down: the outage began then
    now[0] = 200.0
    outages.dropped("w1")  # a reload drops it again: the clock does not start again
    assert outages.since("w1") == 120.0
    outages.connected("w1")
    assert outages.since("w1") is None
    outages.dropped("w2")
    assert outages.since("w2") == 200.0
