"""``multikueue status``'s verdict (``status.why``, ``phase``, ``mode``): one row per way a run can stand; the
``RunStatus`` document (``-o json``) and the text rendered from it; a worker's Secret that holds no usable
kubeconfig, said in one line."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from multikueue.commands.run_document import document, verdicts
from multikueue.commands.run_text import explain_text
from multikueue.commands.run_view import mode, phase
from multikueue.commands.status import RunView, WorkerView, _kubeconfig_in, render, why
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


def direct(**notes: str) -> dict[str, Any]:
    keys = {"worker": "multikueue.x-k8s.io/worker", "phase": "multikueue.x-k8s.io/phase"}
    return {**RUN, "metadata": {**RUN["metadata"], "annotations": {keys[k]: v for k, v in notes.items()}}}


NO_FIT = "no worker fits; w1: rejected: not connected; w2: rejected: does not serve this kind"


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (view(obj=None), (None, "NotFound", None)),
        (view(), (None, "Unknown", None)),
        (view(workload()), ("Kueue", "WaitingForQuota", None)),
        (view(workload(RESERVED, nominatedClusterNames=["w1"]), WorkerView("w1")), ("Kueue", "WaitingForWorker", None)),
        (view(workload(RESERVED, clusterName="w1"), WorkerView("w1")), ("Kueue", "Placed", "w1")),
        (view(workload(RESERVED, cond("Evicted", reason="Preempted"))), ("Kueue", "Evicted", None)),
        (view(workload(RESERVED, cond("Finished", reason="Succeeded"), clusterName="w1")), ("Kueue", "Finished", "w1")),
        (view(workload(RESERVED, cond("Finished", reason="Failed"), clusterName="w1")), ("Kueue", "Failed", "w1")),
        (RunView(PR, "ns", "r", obj=RUN, placement=cond("MultiKueuePlacement", "False", "NoWorkerFits", NO_FIT)),
         ("Direct", "WaitingForWorker", None)),
        (view(obj=direct(worker="w1", phase="Placed")), ("Direct", "Placed", "w1")),
        (view(obj=direct(worker="w1", phase="Finished")), ("Direct", "Finished", "w1")),
        (view(obj=direct(phase="Failed")), ("Direct", "Failed", None)),
    ],
)  # fmt: skip
def test_mode_phase_and_worker(case: RunView, expected: tuple[str | None, str, str | None]) -> None:
    found = document(case)
    assert (mode(case), phase(case)) == expected[:2]
    assert (found["mode"], found["phase"], found["worker"]) == expected


def test_the_document_carries_each_workers_reason_and_its_kueues_own_and_the_text_is_rendered_from_it() -> None:
    pending = cond("QuotaReserved", "False", "Pending", "insufficient unused quota for cpu")
    event = {"involvedObject": {"kind": "PipelineRun", "name": "r"}, "type": "Normal", "reason": "WorkerPending",
             "message": "w1 pending", "lastTimestamp": "2026-01-01T00:00:00Z"}  # fmt: skip
    case = view(
        workload(RESERVED, nominatedClusterNames=["w1", "w2"], admissionChecks=[{"name": "ac", "state": "Pending"}]),
        WorkerView("w1", workload=workload(pending), events=[event]),
        WorkerView("w2", unreadable="cannot read its MultiKueueCluster with your credentials (403 Forbidden)"),
    )
    found = json.loads(json.dumps(document(case)))  # plain JSON all the way down
    assert (found["apiVersion"], found["kind"]) == ("multikueue.x-k8s.io/v1alpha1", "RunStatus")
    assert found["run"] == {"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "namespace": "ns", "name": "r",
                            "uid": "u"}  # fmt: skip
    assert found["why"] == why(case)
    w1, w2 = found["workers"]
    assert (w1["name"], w1["reason"], w1["read"]) == ("w1", "insufficient unused quota for cpu", True)
    assert w1["kueue"] == {"status": "False", "reason": "Pending", "message": "insufficient unused quota for cpu"}
    assert w1["workload"] == {"name": "wl", "admitted": False}
    assert w1["object"] is None
    assert (w2["read"], w2["kueue"]) == (False, None)
    assert w2["reason"] == w2["unreadable"] == "cannot read its MultiKueueCluster with your credentials (403 Forbidden)"
    assert found["manager"]["workload"]["admissionChecks"] == [{"name": "ac", "state": "Pending", "message": ""}]
    assert found["events"] == [{"time": "2026-01-01T00:00:00Z", "cluster": "w1", "kind": "PipelineRun", "name": "r",
                                "type": "Normal", "reason": "WorkerPending", "message": "w1 pending"}]  # fmt: skip
    text = render(case)
    assert f"  why: {found['why']}" in text
    assert "  worker w2: cannot read its MultiKueueCluster with your credentials (403 Forbidden)" in text
    assert "    2026-01-01T00:00:00Z w1 PipelineRun/r Normal WorkerPending: w1 pending" in text


def test_a_run_on_its_worker_is_said_there() -> None:
    running = {"status": {"conditions": [cond("Succeeded", "Unknown", "Running")]}}
    case = view(workload(RESERVED, clusterName="w1"), WorkerView("w1", workload=workload(RESERVED), copy=running))
    [w1] = document(case)["workers"]
    assert w1["reason"] == "admitted here, running: Succeeded=Unknown (Running)"
    ended = view(workload(RESERVED, cond("Finished", reason="Succeeded"), clusterName="w1"), WorkerView("w1"))
    assert document(ended)["workers"][0]["reason"] == "ran here; its copy is gone"
    placed = RunView(PR, "ns", "r", obj=direct(worker="w1", phase="Placed"), workers=[WorkerView("w1")])
    assert document(placed)["workers"][0]["reason"] == "placed here; its copy is not created here yet"
    assert w1["object"] == {"conditions": [{"type": "Succeeded", "status": "Unknown", "reason": "Running",
                                            "message": ""}]}  # fmt: skip


def test_a_direct_mode_run_that_waits_gives_each_workers_verdict_in_the_document_and_in_explain() -> None:
    record = {**cond("MultiKueuePlacement", "False", "NoWorkerFits", NO_FIT), "lastTransitionTime": "t0"}
    case = RunView(PR, "ns", "r", obj=RUN, placement=record, avoided={"w3": "lost there"})
    found = document(case)
    assert found["why"] == f"waiting for a worker (direct mode): {NO_FIT}"
    assert [(w["name"], w["reason"], w["read"], w["placement"]) for w in found["workers"]] == [
        ("w1", "rejected: not connected", False, "rejected: not connected"),
        ("w2", "rejected: does not serve this kind", False, "rejected: does not serve this kind"),
        ("w3", "avoided: lost there", False, None),
    ]
    assert found["manager"]["placement"]["condition"] == {"status": "False", "reason": "NoWorkerFits",
                                                          "message": NO_FIT, "lastTransitionTime": "t0"}  # fmt: skip
    assert explain_text(found) == "\n".join([
        "PipelineRun ns/r",
        "  worker: (none)    phase: (not placed)",
        "  avoided: w3: lost there",
        "  MultiKueuePlacement: False NoWorkerFits (since t0)",
        "    no worker fits",
        "    w1: rejected: not connected",
        "    w2: rejected: does not serve this kind",
    ])  # fmt: skip
    assert "  worker w1" not in render(case), "judged, not read: explain's to show"


def test_explain_of_an_object_it_does_not_find_or_with_no_placement_record() -> None:
    assert explain_text(document(view(obj=None))) == "PipelineRun ns/r not found"
    assert explain_text(document(view(workload()))).endswith(
        "  MultiKueuePlacement: not set (not a direct-mode object, or not looked at yet)"
    )


def test_only_worker_verdicts_are_read_from_a_placement_message() -> None:
    message = "placed on w1; w1: fits (0 running, score 0.00); w2: rejected: full (2/2 running); trailing words"
    assert verdicts(message) == {"w1": "fits (0 running, score 0.00)", "w2": "rejected: full (2/2 running)"}
    assert verdicts("worker w1 is unreachable: the run is waited for") == {}


def secret(text: str | None) -> dict[str, Any]:
    return {"data": {} if text is None else {"kubeconfig": base64.b64encode(text.encode()).decode()}}


@pytest.mark.parametrize(
    ("data", "said"),
    [
        ("apiVersion: v1\nclusters:\n  - name: a\n    cluster: server: x\n",
         "kubeconfig Secret ns/s key kubeconfig is not YAML: line 4, column 20: mapping values are not allowed here"),
        (None, "its Secret ns/s has no key kubeconfig"),
        ("just text",
         "its Secret ns/s holds no usable kubeconfig: failed to parse kubeconfig(apiconfig): not a mapping"),
    ],
)  # fmt: skip
def test_a_secret_without_a_usable_kubeconfig_is_one_line_on_its_worker(data: str | None, said: str) -> None:
    worker = WorkerView("w1")
    assert _kubeconfig_in(secret(data), "ns/s", worker) is None
    assert worker.unreadable == said
    worker = WorkerView("w1")
    assert _kubeconfig_in({"data": {"kubeconfig": "not base64!"}}, "ns/s", worker) is None
    assert worker.unreadable.startswith("its Secret ns/s key kubeconfig is not base64: ")
