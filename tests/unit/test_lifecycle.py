"""The integration's lifecycle decision (integration/lifecycle.py): one step per reconcile, the suspend and
admission patches, and the release of a reservation; the PipelineRun and Workload builders the other integration
tests share."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.config import Adapter, parse_configuration
from multikueue.integration import workload_spec
from multikueue.integration.lifecycle import Step, admission_patch, decide, released_status, suspend_patch
from multikueue.kube.addresses import GroupVersionKind
from multikueue.labels import HELD_ANNOTATION, QUEUE_NAME_LABEL

PR = GroupVersionKind("tekton.dev", "v1", "PipelineRun")
SUCCEEDED = '.status.conditions[?type=="Succeeded"].status'
TEKTON = f"""
multiKueue: {{externalFrameworks: [{{name: PipelineRun.v1.tekton.dev}}]}}
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    finished: {{path: '{SUCCEEDED}', notIn: [Unknown]}}
    failed: {{path: '{SUCCEEDED}', equals: 'False'}}
    integration:
      suspend: {{path: .spec.status, value: PipelineRunPending, stopValue: StoppedRunFinally, honorUserSuspend: true}}
      active: {{path: .status.startTime, exists: true}}
      podSets:
      - name: pod-set-1
        requests: {{tekton.dev/pipelineruns: "1"}}
        requestsFromAnnotations: kueue.konflux-ci.dev/requests-
"""


def _adapter(text: str = TEKTON) -> Adapter:
    return parse_configuration(text).adapter(PR)


def _run(spec_status: str | None = None, *, held: bool = False, annotations: dict[str, str] | None = None,
         status: dict[str, Any] | None = None, labels: dict[str, str] | None = None) -> dict[str, Any]:  # fmt: skip
    notes = dict(annotations or {})
    if held:
        notes[HELD_ANNOTATION] = "true"
    spec: dict[str, Any] = {"pipelineSpec": {}}
    if spec_status is not None:
        spec["status"] = spec_status
    return {
        "apiVersion": "tekton.dev/v1", "kind": "PipelineRun",
        "metadata": {"name": "build", "namespace": "team", "uid": "u-1", "resourceVersion": "7",
                     "labels": {QUEUE_NAME_LABEL: "q", **(labels or {})}, "annotations": notes},
        "spec": spec, "status": status or {},
    }  # fmt: skip


def _workload(*conditions: tuple[str, str], active: bool | None = None, reason: str = "") -> dict[str, Any]:
    rows = [{"type": t, "status": s, "reason": reason, "message": "m"} for t, s in conditions]
    spec: dict[str, Any] = {"queueName": "q", "podSets": []}
    if active is not None:
        spec["active"] = active
    refs = [{"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "name": "build", "uid": "u-1", "controller": True}]
    return {"metadata": {"name": "w", "namespace": "team", "resourceVersion": "3", "generation": 1,
                         "ownerReferences": refs, "finalizers": ["kueue.x-k8s.io/resource-in-use"]},
            "spec": spec, "status": {"conditions": rows}}  # fmt: skip


@pytest.mark.parametrize(
    ("obj", "workload", "step"),
    [
        (_run(labels={QUEUE_NAME_LABEL: ""}), None, Step.NOTHING),
        (_run(), None, Step.HOLD),  # webhook absent: held on first sight
        (_run("PipelineRunPending", held=True), None, Step.CREATE_WORKLOAD),
        (_run("PipelineRunPending"), None, Step.CREATE_WORKLOAD),  # the user's hold: queued inactive
        (_run(status={"startTime": "t"}), None, Step.NOTHING),  # started before it was queued: left alone
        (_run("PipelineRunPending", held=True), _workload(("QuotaReserved", "True")), Step.NOTHING),
        (_run("PipelineRunPending", held=True), _workload(("Admitted", "True")), Step.RUN),
        (
            _run("PipelineRunPending", held=True),
            _workload(("Admitted", "True"), active=False),
            Step.ACTIVATE,
        ),
        (
            _run("PipelineRunPending"),
            _workload(("Admitted", "True")),
            Step.DEACTIVATE,
        ),  # never fight the user
        (_run("PipelineRunPending"), _workload(active=False), Step.NOTHING),
        (_run(), _workload(active=False), Step.HOLD),  # the user let go: queued again
        (_run(), _workload(("Admitted", "True")), Step.NOTHING),
        # Deactivated while running, before Kueue's eviction lands: left to the eviction, not held (and reactivated)
        (_run(), _workload(("Admitted", "True"), active=False), Step.NOTHING),
        (_run(status={"startTime": "t"}), _workload(("Admitted", "True"), active=False), Step.NOTHING),
        (_run(status={"startTime": "t"}), _workload(("Admitted", "True"), ("Evicted", "True")), Step.STOP),
        (
            _run(status={"startTime": "t"}),
            _workload(),
            Step.STOP,
        ),  # running, not admitted, started: stopped
        (
            _run("StoppedRunFinally", status={"startTime": "t"}),
            _workload(("Evicted", "True")),
            Step.NOTHING,
        ),
        (_run("Cancelled"), _workload(), Step.NOTHING),  # the user's instruction to Tekton
        (_run(status={"conditions": [{"type": "Succeeded", "status": "True"}]}), _workload(), Step.FINISH),
        (
            _run(status={"conditions": [{"type": "Succeeded", "status": "True"}]}),
            _workload(("Finished", "True")),
            Step.REMOVE_FINALIZER,
        ),
    ],
)
def test_decide(obj: dict[str, Any], workload: dict[str, Any] | None, step: Step) -> None:
    assert decide(obj, workload, _adapter()).step is step


def test_a_failed_run_finishes_its_workload_as_failed() -> None:
    obj = _run(status={"conditions": [{"type": "Succeeded", "status": "False"}]})
    decision = decide(obj, _workload(), _adapter())
    assert (decision.step, decision.succeeded) == (Step.FINISH, False)


def test_prebuilt_workloads_are_adopted_then_checked() -> None:
    obj = _run("PipelineRunPending", held=True, labels={"kueue.x-k8s.io/prebuilt-workload-name": "w"})
    orphan = _workload(("Admitted", "True"))
    orphan["metadata"]["ownerReferences"] = []
    assert decide(obj, orphan, _adapter()).step is Step.ADOPT
    assert decide(obj, None, _adapter()).step is Step.WAIT_FOR_PREBUILT
    other = _workload(("Admitted", "True"))  # pod sets differ from the object's
    assert decide(obj, other, _adapter()).step is Step.OUT_OF_SYNC
    adapter = _adapter()
    assert adapter.integration is not None
    other["spec"]["podSets"] = workload_spec.pod_sets(obj, adapter.integration)
    assert decide(obj, other, adapter).step is Step.RUN


def test_kueues_suspend_convention_releases_an_object_created_suspended() -> None:
    adapter = _adapter(TEKTON.replace(", honorUserSuspend: true", ""))
    assert decide(_run("PipelineRunPending"), None, adapter).step is Step.MARK_HELD


def test_a_spec_suspend_kind_is_held_again_by_stopping() -> None:
    adapter = _adapter(TEKTON.replace("path: .spec.status, value: PipelineRunPending, stopValue: StoppedRunFinally",
                                      "path: .spec.runPolicy.suspend, value: true, runValue: false"))  # fmt: skip
    assert adapter.integration is not None
    assert suspend_patch(adapter.integration, Step.STOP) == {
        "spec": {"runPolicy": {"suspend": True}}, "metadata": {"annotations": {HELD_ANNOTATION: "true"}}}  # fmt: skip
    assert suspend_patch(adapter.integration, Step.RUN) == {
        "spec": {"runPolicy": {"suspend": False}}, "metadata": {"annotations": {HELD_ANNOTATION: None}}}  # fmt: skip


def test_release_clears_the_reservation_as_kueue_does() -> None:
    workload = _workload(("QuotaReserved", "True"), ("Admitted", "True"), ("Evicted", "True"), reason="Preempted")
    status = released_status(workload)
    rows = {c["type"]: (c["status"], c["reason"]) for c in status["conditions"]}
    assert rows["QuotaReserved"] == ("False", "Pending")
    assert rows["Admitted"] == ("False", "NoReservation")
    assert rows["Requeued"] == ("True", "Preempted")
    assert status["admission"] is None


def test_the_admission_patch_touches_only_the_suspend_field_and_one_annotation() -> None:
    adapter = _adapter(TEKTON.replace(", honorUserSuspend: true", ""))
    assert adapter.integration is not None
    obj = _run()
    obj["metadata"]["annotations"] = None
    del obj["metadata"]["annotations"]
    assert admission_patch(obj, adapter.integration) == [
        {"op": "add", "path": "/spec/status", "value": "PipelineRunPending"},
        {"op": "add", "path": "/metadata/annotations", "value": {HELD_ANNOTATION: "true"}},
    ]
    assert admission_patch(_run(labels={QUEUE_NAME_LABEL: ""}), adapter.integration) == []
