"""The integration's pure parts: configuration, Workload shape, the lifecycle decision, the webhook's answer."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from multikueue import owners
from multikueue.config import Adapter, ConfigError, parse_configuration
from multikueue.integration import workloads
from multikueue.integration.lifecycle import Step, admission_patch, decide, released_status, suspend_patch
from multikueue.integration.webhook import review
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


def test_the_workload_name_is_kueues() -> None:
    # Kueue: sha1("PipelineRun\ntekton.dev\nbuild\nu-1")[:5], after "<kind lowercased>-<name>".
    name = owners.workload_name("build", "u-1", PR)
    assert name.startswith("pipelinerun-build-")
    assert len(name) == len("pipelinerun-build-") + 5
    long = owners.workload_name("x" * 300, "u-1", PR)
    assert len(long) == 253


def test_pod_sets_take_constant_and_annotation_requests() -> None:
    adapter = _adapter()
    assert adapter.integration is not None
    obj = _run(annotations={"kueue.konflux-ci.dev/requests-cpu": "500m", "kueue.konflux-ci.dev/requests-memory": "1Gi"})
    [pod_set] = workloads.pod_sets(obj, adapter.integration)
    assert pod_set["name"] == "pod-set-1"
    assert pod_set["count"] == 1
    requests = pod_set["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {"tekton.dev/pipelineruns": "1", "cpu": "500m", "memory": "1Gi"}


def test_a_bad_quantity_in_an_annotation_names_the_annotation_and_value() -> None:
    adapter = _adapter()
    assert adapter.integration is not None
    obj = _run(annotations={"kueue.konflux-ci.dev/requests-cpu": "lots"})
    with pytest.raises(workloads.InvalidObject, match=r"annotation kueue.konflux-ci.dev/requests-cpu: .*'lots'"):
        workloads.pod_sets(obj, adapter.integration)


def test_a_template_pod_set_counts_from_the_object() -> None:
    config = parse_configuration("""
multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    integration:
      suspend: {path: .spec.suspend, value: true, runValue: false}
      podSets: [{name: workers, countPath: .spec.parallelism, template: .spec.template}]
""")
    integration = config.adapter(PR).integration
    assert integration is not None
    template = {"spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "2"}}}]}}
    obj = _run()
    obj["spec"].update(parallelism=4, template=template)
    [pod_set] = workloads.pod_sets(obj, integration)
    # As Kueue's Go structs write it: the ObjectMeta always, empty maps and lists never.
    assert (pod_set["count"], pod_set["template"]) == (4, {"metadata": {}, **template})
    obj["spec"]["template"] = {"metadata": {"labels": {}}, "spec": {**template["spec"], "tolerations": []}}
    assert workloads.pod_sets(obj, integration)[0]["template"] == {"metadata": {}, **template}
    obj["spec"]["parallelism"] = "four"
    with pytest.raises(
        workloads.InvalidObject,
        match=r"pod set workers: \.spec\.parallelism must be a non-negative integer, got 'four'",
    ):
        workloads.pod_sets(obj, integration)


def test_the_built_workload_has_kueues_metadata() -> None:
    adapter = _adapter()
    assert adapter.integration is not None
    body = workloads.build(_run(held=True), PR, adapter.integration, active=True,
                           priority=workloads.Priority("high", 100))  # fmt: skip
    meta = body["metadata"]
    assert meta["labels"] == {"kueue.x-k8s.io/job-uid": "u-1"}
    assert meta["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]
    assert meta["ownerReferences"][0] | {"controller": True} == meta["ownerReferences"][0]
    assert body["spec"]["queueName"] == "q"
    assert body["spec"]["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                                "name": "high"}  # fmt: skip
    assert body["spec"]["priority"] == 100
    assert "active" not in body["spec"]


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
        (_run("PipelineRunPending", held=True), _workload(("Admitted", "True"), active=False), Step.ACTIVATE),
        (_run("PipelineRunPending"), _workload(("Admitted", "True")), Step.DEACTIVATE),  # never fight the user
        (_run("PipelineRunPending"), _workload(active=False), Step.NOTHING),
        (_run(), _workload(active=False), Step.HOLD),  # the user let go: queued again
        (_run(), _workload(("Admitted", "True")), Step.NOTHING),
        # Deactivated while running, before Kueue's eviction lands: left to the eviction, not held (and reactivated)
        (_run(), _workload(("Admitted", "True"), active=False), Step.NOTHING),
        (_run(status={"startTime": "t"}), _workload(("Admitted", "True"), active=False), Step.NOTHING),
        (_run(status={"startTime": "t"}), _workload(("Admitted", "True"), ("Evicted", "True")), Step.STOP),
        (_run(status={"startTime": "t"}), _workload(), Step.STOP),  # running, not admitted, started: stopped
        (_run("StoppedRunFinally", status={"startTime": "t"}), _workload(("Evicted", "True")), Step.NOTHING),
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
    other["spec"]["podSets"] = workloads.pod_sets(obj, adapter.integration)
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


def test_the_webhook_answers_create_with_a_json_patch_and_lets_the_rest_through() -> None:
    integrations = parse_configuration(TEKTON).integrations
    request: dict[str, Any] = {"request": {"uid": "r1", "operation": "CREATE", "object": _run(),
                           "kind": {"group": "tekton.dev", "version": "v1", "kind": "PipelineRun"}}}  # fmt: skip
    response = review(request, integrations)["response"]
    assert response["uid"] == "r1"
    assert response["allowed"] is True
    ops = json.loads(base64.b64decode(response["patch"]))
    assert ops[0] == {"op": "add", "path": "/spec/status", "value": "PipelineRunPending"}
    request["request"]["operation"] = "UPDATE"
    assert "patch" not in review(request, integrations)["response"]
    request["request"]["operation"] = "CREATE"
    request["request"]["kind"]["kind"] = "TaskRun"
    assert "patch" not in review(request, integrations)["response"]


@pytest.mark.parametrize(
    ("integration", "message"),
    [
        ("{suspend: {path: '.spec.x[0]', value: true}, podSets: [{}]}", "integration.suspend.path: must be a plain"),
        ("{suspend: {path: .spec.suspend}, podSets: [{}]}", "integration.suspend.value: Field required"),
        ("{suspend: {path: .spec.suspend, value: true}}", "integration.podSets: at least one pod set"),
        (
            "{suspend: {path: .spec.suspend, value: true}, podSets: [{requests: {cpu: 1x}}]}",
            "integration.podSets[0].requests.cpu: must be a non-negative resource quantity such as 500m, 2Gi or 1, "
            "got '1x'",
        ),
        (
            "{suspend: {path: .spec.suspend, value: true}, podSets: [{template: .spec.t, requests: {cpu: '1'}}]}",
            "integration.podSets[0].template: requests come from the template",
        ),
        ("{suspend: {path: .spec.suspend, value: true}, podSets: [{}, {}]}", "duplicate names ['main']"),
    ],
)
def test_bad_integration_options_name_the_field_and_value(integration: str, message: str) -> None:
    text = f"""
multiKueue: {{externalFrameworks: [{{name: PipelineRun.v1.tekton.dev}}]}}
dispatcher: {{adapters: [{{name: PipelineRun.v1.tekton.dev, integration: {integration}}}]}}
"""
    with pytest.raises(ConfigError) as error:
        parse_configuration(text)
    assert message in str(error.value)


def test_an_integration_cannot_be_direct() -> None:
    text = """
multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}
dispatcher: {adapters: [{name: PipelineRun.v1.tekton.dev, mode: Direct,
                         integration: {suspend: {path: .spec.suspend, value: true}, podSets: [{}]}}]}
"""
    with pytest.raises(ConfigError, match=r"adapters\[0\]\.integration: queues the kind with Kueue"):
        parse_configuration(text)


def test_the_shipped_example_parses_and_makes_tekton_kueues_workload() -> None:
    from pathlib import Path

    text = (Path(__file__).parents[2] / "examples" / "tekton" / "integration-config.yaml").read_text()
    config = parse_configuration(text)
    integration = config.integrations[PR]
    obj = _run(annotations={"kueue.konflux-ci.dev/requests-cpu": "1"})
    body = workloads.build(obj, PR, integration, active=True, priority=None)
    [pod_set] = body["spec"]["podSets"]
    container = pod_set["template"]["spec"]["containers"][0]
    assert (pod_set["name"], pod_set["count"], container["name"], container["image"]) == ("pod-set-1", 1, "dummy",
                                                                                          "dummy")  # fmt: skip
    assert container["resources"]["requests"] == {"tekton.dev/pipelineruns": "1", "cpu": "1"}
    assert config.dispatcher.webhook is not None


def test_the_readmes_integration_lines_parse_and_count_as_kueue_counts_a_job() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    lines = readme.split("For a Job-like kind", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    widget = GroupVersionKind("examples.multikueue.x-k8s.io", "v1", "Widget")
    document = {"multiKueue": {"externalFrameworks": [{"name": "Widget.v1.examples.multikueue.x-k8s.io"}]},
                "dispatcher": {"adapters": [{"name": "Widget.v1.examples.multikueue.x-k8s.io",
                                             **yaml.safe_load(lines)}]}}  # fmt: skip
    integration = parse_configuration(yaml.safe_dump(document)).adapter(widget).integration
    assert integration is not None
    template = {"spec": {"containers": [{"name": "c", "image": "i"}]}}
    counts = [({"parallelism": 4, "completions": 3}, 3), ({"parallelism": 4}, 4), ({"completions": 5}, 1), ({}, 1)]
    for spec, expected in counts:
        [pod_set] = workloads.pod_sets({"metadata": {"name": "w"}, "spec": {**spec, "template": template}}, integration)
        assert pod_set["count"] == expected, spec
