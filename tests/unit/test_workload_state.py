from __future__ import annotations

import datetime
from typing import Any

import pytest

from multikueue.dispatch import workload_state as wl
from multikueue.kube.addresses import GroupVersionKind


def workload(**meta: Any) -> dict[str, Any]:
    return {"metadata": {"name": "w", "namespace": "ns", **meta}, "spec": {"queueName": "q"}}


def test_owner_prefers_the_multi_owner_annotations_then_the_controller_reference() -> None:
    refs = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "first"},
        {"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "name": "run", "controller": True},
    ]
    assert wl.owner(workload(ownerReferences=refs)) == (GroupVersionKind("tekton.dev", "v1", "PipelineRun"), "run")
    assert wl.owner(workload(ownerReferences=refs[:1])) == (GroupVersionKind("", "v1", "ConfigMap"), "first")
    annotated = workload(
        ownerReferences=refs,
        annotations={wl.JOB_OWNER_GVK: "LeaderWorkerSet.v1.leaderworkerset.x-k8s.io", wl.JOB_OWNER_NAME: "lws"},
    )
    assert wl.owner(annotated) == (GroupVersionKind("leaderworkerset.x-k8s.io", "v1", "LeaderWorkerSet"), "lws")
    assert wl.owner(workload()) is None


def test_the_worker_copy_drops_job_uid_and_everything_server_owned() -> None:
    local = workload(
        labels={wl.JOB_UID_LABEL: "u", "team": "a"},
        uid="x",
        resourceVersion="9",
        finalizers=["f"],
        ownerReferences=[{"apiVersion": "v1", "kind": "Pod", "name": "p"}],
        annotations={"k": "v"},
    )
    local["status"] = {"conditions": []}
    copy = wl.clone_for_create(local, "mk")
    assert copy["metadata"] == {
        "name": "w",
        "namespace": "ns",
        "labels": {"team": "a", "kueue.x-k8s.io/multikueue-origin": "mk"},
        "annotations": {"k": "v"},
    }
    assert copy["spec"] == {"queueName": "q"}
    assert "status" not in copy


def test_earliest_true_picks_the_first_transition() -> None:
    def admitted(at: str) -> dict[str, Any]:
        return {"status": {"conditions": [{"type": "Admitted", "status": "True", "lastTransitionTime": at}]}}

    copies = {"w2": admitted("2026-01-01T00:00:05Z"), "w1": admitted("2026-01-01T00:00:09Z"), "w3": {"status": {}}}
    found = wl.earliest_true(copies, wl.ADMITTED)
    assert found is not None
    assert found[0] == "w2"
    assert wl.earliest_true({"w3": {"status": {}}}, wl.ADMITTED) is None


def test_a_run_waits_for_a_fit_only_when_every_nominated_workers_kueue_cannot_fit_it() -> None:
    def made(*conditions: dict[str, str]) -> dict[str, object]:
        return {"status": {"conditions": list(conditions)}}

    reserved = {"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}
    no_fit = made({"type": "QuotaReserved", "status": "False", "reason": "Pending"})
    pending = {"state": "Pending"}
    assert wl.waits_for_a_fit(made(reserved), pending, [no_fit, no_fit])
    assert not wl.waits_for_a_fit(made(reserved), pending, [no_fit, made(reserved)]), "one worker fits it"
    assert not wl.waits_for_a_fit(made(reserved), pending, [no_fit, None]), "a copy not seen is not a refusal"
    assert not wl.waits_for_a_fit(made(reserved), pending, [no_fit, made()]), "its Kueue has not looked yet"
    assert not wl.waits_for_a_fit(made(), pending, [no_fit]), "no quota on the manager: Kueue's wait"
    assert not wl.waits_for_a_fit(made(reserved), {"state": "Ready"}, [no_fit]), "already admitted somewhere"
    assert not wl.waits_for_a_fit(made(reserved), pending, []), "not nominated yet"


@pytest.mark.parametrize(
    ("reason", "message", "never"),
    [
        ("Pending", "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor default, previously "
         "considered podsets requests (0) + current podset request (10) > maximum capacity (8)", True),
        ("Pending", "couldn't assign flavors to pod set main: resource tekton.dev/pipelineruns unavailable in "
         "ClusterQueue", True),
        ("Inadmissible", "LocalQueue user-queue doesn't exist", True),
        ("Pending", "workload namespace doesn't match ClusterQueue selector", True),
        ("ExceedsMaxQuota", "insufficient quota for cpu", True),
        ("NoMatchingFlavor", "", True),
        ("Misconfigured", "ClusterQueue cq not found", True),
        ("Pending", "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 2 "
         "more needed", False),
        ("WaitingForQuota", "insufficient unused quota", False),
        ("Suspended", "ClusterQueue cq is inactive", False),  # a stopped queue may be started again
        # One flavor too small, another only busy: it may be admitted on the second.
        ("Pending", "couldn't assign flavors to pod set main: insufficient quota for cpu in flavor spot, previously "
         "considered podsets requests (0) + current podset request (10) > maximum capacity (8), insufficient unused "
         "quota for cpu in flavor on-demand, 2 more needed", False),
        ("WaitingForQuota", "request (10) > maximum capacity (8)", False),  # a granular reason is trusted alone
    ],
)  # fmt: skip
def test_what_a_workers_kueue_says_it_can_never_admit(reason: str, message: str, never: bool) -> None:
    copy = {"status": {"conditions": [{"type": "QuotaReserved", "status": "False", "reason": reason,
                                       "message": message}]}}  # fmt: skip
    assert (wl.never_admitted(copy) is not None) == never
    admitted = {"status": {"conditions": [{"type": "QuotaReserved", "status": "True", "reason": "QuotaReserved"}]}}
    assert wl.never_admitted(admitted) is None
    assert wl.never_admitted(None) is None


def test_a_finished_runs_object_is_retained_from_the_finish_time_on_the_manager() -> None:
    finished = {"status": {"conditions": [{"type": "Finished", "status": "True", "reason": "Succeeded",
                                           "lastTransitionTime": "2026-11-26T10:00:00Z"}]}}  # fmt: skip
    at = datetime.datetime(2026, 11, 26, 10, 0, 40, tzinfo=datetime.UTC)
    assert wl.retained_for(finished, 60.0, at) == 20.0
    assert wl.retained_for(finished, 30.0, at) == 0.0, "past"
    assert wl.retained_for(finished, None, at) == 0.0, "no retention: removed at once"
    assert wl.retained_for({"status": {}}, 60.0, at) == 0.0, "not finished"


def test_the_attempt_is_the_workloads_uid_and_when_its_quota_was_reserved() -> None:
    reserved = {"type": "QuotaReserved", "status": "True", "lastTransitionTime": "2026-08-01T10:00:00Z"}
    workload: dict[str, Any] = {"metadata": {"uid": "u-1"}, "status": {"conditions": [reserved]}}
    assert wl.attempt(workload) == "u-1/2026-08-01T10:00:00Z/0"
    evicted = {"evictions": [{"reason": "Preempted", "count": 2}, {"reason": "AdmissionCheck", "count": 1}]}
    again = {"metadata": {"uid": "u-1"}, "status": {"conditions": [reserved], "schedulingStats": evicted}}
    assert wl.attempt(again) == "u-1/2026-08-01T10:00:00Z/3", "every eviction counted"
    released = {**reserved, "status": "False"}
    assert wl.attempt({"metadata": {"uid": "u-1"}, "status": {"conditions": [released]}}) == "", "not admitted now"
    assert wl.attempt({"status": {"conditions": [reserved]}}) == "", "read before it had a UID"


def test_the_owner_uid_is_the_one_the_owner_reference_names_else_the_job_uid_label() -> None:
    refs = [{"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "name": "run", "uid": "u-1", "controller": True}]
    assert wl.owner_uid(workload(ownerReferences=refs)) == "u-1"
    labelled = workload(labels={wl.JOB_UID_LABEL: "u-2"},
                        annotations={wl.JOB_OWNER_GVK: "LeaderWorkerSet.v1.leaderworkerset.x-k8s.io",
                                     wl.JOB_OWNER_NAME: "lws"})  # fmt: skip
    assert wl.owner_uid(labelled) == "u-2", "multi-owner annotations: the job-uid label"
    assert wl.owner_uid(workload()) is None
