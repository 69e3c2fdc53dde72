"""Per-kind adapter options: each one changes exactly its step, and the defaults are Kueue's generic adapter."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.config import ConfigError, parse_configuration
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.kube.addresses import GroupVersionKind
from multikueue.mergepatch import apply_merge_patch
from multikueue.predicates import holds
from multikueue_testbed.objects import pipelinerun, running_status

PIPELINERUN = GroupVersionKind("tekton.dev", "v1", "PipelineRun")
MANAGED = "kueue.x-k8s.io/multikueue"
SUCCEEDED = '.status.conditions[?type=="Succeeded"].status'
TEKTON = f"""
multiKueue: {{externalFrameworks: [{{name: PipelineRun.v1.tekton.dev}}]}}
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    create:
      removeWhen: [{{path: .spec.status, equals: PipelineRunPending}}]
      remove: [.spec.timeouts]
      set: [{{path: .metadata.labels.placed, value: "yes"}}]
    specSync: [{{path: .spec.status, values: [Cancelled, CancelledRunFinally, StoppedRunFinally]}}]
    suspended: {{path: .spec.status, equals: PipelineRunPending}}
    finished: {{path: '{SUCCEEDED}', notIn: [Unknown]}}
    failed: {{path: '{SUCCEEDED}', equals: 'False'}}
    conflictPolicy: Adopt
"""


def adapter(text: str = TEKTON, gvk: GroupVersionKind = PIPELINERUN) -> GenericAdapter:
    config = parse_configuration(text)
    return GenericAdapter(gvk, MANAGED, config.adapter(gvk))


def manager_run(**spec: Any) -> dict[str, Any]:
    run = pipelinerun("hello", managedBy=MANAGED, **spec)
    run["metadata"].update(namespace="team-a", uid="u-1")
    return run


def succeeded(status: str) -> dict[str, Any]:
    return {"status": {"conditions": [{"type": "Succeeded", "status": status, "reason": "r"}]}}


def test_create_transforms_remove_set_and_remove_when() -> None:
    worker_obj = adapter().build_copy(
        manager_run(status="PipelineRunPending", timeouts={"pipeline": "1h"}), workload_name="w", origin="mk"
    )
    assert "status" not in worker_obj["spec"]  # a Pending copy would never start where no Kueue unsuspends it
    assert "timeouts" not in worker_obj["spec"]
    assert "managedBy" not in worker_obj["spec"]
    assert "pipelineSpec" in worker_obj["spec"]
    assert worker_obj["metadata"]["labels"]["placed"] == "yes"
    cancelled = adapter().build_copy(manager_run(status="Cancelled"), workload_name="w", origin="mk")
    assert cancelled["spec"]["status"] == "Cancelled"  # removeWhen applies only when its predicate holds


def test_managed_by_at_another_path() -> None:
    gvk = GroupVersionKind("kubeflow.org", "v1", "PyTorchJob")
    a = adapter(
        "multiKueue: {externalFrameworks: [{name: PyTorchJob.v1.kubeflow.org}]}\n"
        "dispatcher: {adapters: [{name: PyTorchJob.v1.kubeflow.org, managedByPath: .spec.runPolicy.managedBy}]}",
        gvk,
    )
    job: dict[str, Any] = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "j", "namespace": "n", "uid": "u"},
        "spec": {"runPolicy": {"managedBy": MANAGED, "suspend": False}, "replicas": 2},
    }
    assert a.is_managed(job) == (True, "")
    worker_obj = a.build_copy(job, workload_name="w", origin="mk")
    assert worker_obj["spec"] == {"runPolicy": {"suspend": False}, "replicas": 2}
    job["spec"]["runPolicy"]["managedBy"] = "someone-else"
    assert a.is_managed(job) == (False, 'Expecting .spec.runPolicy.managedBy to be "kueue.x-k8s.io/multikueue" '
                                        'not "someone-else"')  # fmt: skip


def test_spec_sync_carries_only_listed_values_and_only_when_different() -> None:
    a = adapter()
    worker_obj = a.build_copy(manager_run(), workload_name="w", origin="mk")
    assert a.spec_patch(manager_run(), worker_obj) is None
    assert a.spec_patch(manager_run(status="PipelineRunPending"), worker_obj) is None  # not a listed value
    patch = a.spec_patch(manager_run(status="Cancelled"), worker_obj)
    assert patch == {"spec": {"status": "Cancelled"}}
    assert a.spec_patch(manager_run(status="Cancelled"), apply_merge_patch(worker_obj, patch)) is None


def test_suspended_finished_and_failed_predicates() -> None:
    a = adapter()
    assert a.suspended(manager_run(status="PipelineRunPending"))
    assert not a.suspended(manager_run())
    assert a.finished(succeeded("Unknown")) is None
    assert a.finished({"status": {}}) is None  # notIn needs a value: no condition yet is not finished
    assert a.finished(succeeded("True")) == ("Succeeded", "PipelineRun finished on the worker")
    assert a.finished(succeeded("False")) == ("Failed", "PipelineRun failed on the worker")


def test_defaults_are_kueues_generic_adapter() -> None:
    a = adapter("multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}")
    run = manager_run(status="PipelineRunPending")
    assert a.build_copy(run, workload_name="w", origin="mk")["spec"]["status"] == "PipelineRunPending"
    assert a.spec_patch(manager_run(status="Cancelled"), {"spec": {}}) is None
    assert not a.suspended(run)
    assert a.finished(succeeded("True")) is None
    assert not a.adoptable({"metadata": {"annotations": {}}}, run, "mk")


def test_status_mapping_selects_and_excludes_and_leaves_other_fields_alone() -> None:
    a = adapter(
        "multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}\n"
        "dispatcher: {adapters: [{name: PipelineRun.v1.tekton.dev, "
        "status: {paths: [.status.conditions, .status.childReferences], exclude: [.status.childReferences]}}]}"
    )
    manager_obj = manager_run()
    manager_obj["status"] = {"managerOnly": "kept"}
    worker_obj = {"status": running_status("hello")}
    worker_obj["status"]["childReferences"] = [{"name": "x"}]
    patch = a.status_patch(manager_obj, worker_obj)
    assert patch == {"status": {"conditions": worker_obj["status"]["conditions"]}}
    merged = apply_merge_patch(manager_obj, patch)
    assert merged["status"]["managerOnly"] == "kept"
    assert a.status_patch(merged, worker_obj) is None


def test_adopt_needs_the_policy_the_origin_and_the_manager_uid() -> None:
    a = adapter()
    run = manager_run()
    ours = {"metadata": {"annotations": {"multikueue.x-k8s.io/origin": "mk", "multikueue.x-k8s.io/manager-uid": "u-1"}}}
    assert a.adoptable(ours, run, "mk")
    assert not a.adoptable(ours, run, "another-manager")
    other_uid = {
        "metadata": {"annotations": {"multikueue.x-k8s.io/origin": "mk", "multikueue.x-k8s.io/manager-uid": "u-9"}}
    }
    assert not a.adoptable(other_uid, run, "mk")
    abort = adapter("multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}")
    assert not abort.adoptable(ours, run, "mk")


@pytest.mark.parametrize(
    ("predicate", "obj", "expected"),
    [
        ({"path": ".a", "exists": True}, {"a": 0}, True),
        ({"path": ".a", "exists": False}, {"a": 0}, False),
        ({"path": ".a", "exists": False}, {}, True),
        ({"path": ".a", "in": [1, 2]}, {"a": 2}, True),
        ({"path": ".a", "notIn": [1, 2]}, {"a": 3}, True),
        ({"path": ".a", "notIn": [1, 2]}, {}, False),
        ({"path": ".a[*].b", "equals": "x"}, {"a": [{"b": "y"}, {"b": "x"}]}, True),
    ],
)
def test_predicates(predicate: dict[str, Any], obj: dict[str, Any], expected: bool) -> None:
    from multikueue.config import Predicate

    assert holds(Predicate.model_validate(predicate), obj) is expected


def test_bad_options_name_the_field_and_value() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_configuration(
            "multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}\n"
            "dispatcher:\n"
            "  adapters:\n"
            "  - {name: PipelineRun.v1.tekton.dev, managedByPath: '.spec[', finished: {path: .status.x},"
            " status: {paths: [.spec.x]}, conflictPolicy: Steal, create: {remove: [.metadata.name]}}\n"
        )
    problems = raised.value.problems
    assert any(p.startswith("dispatcher.adapters[0].managedByPath: not a valid JSONPath: '.spec['") for p in problems)
    assert any(p.startswith("dispatcher.adapters[0].finished.path: needs exactly one of equals") for p in problems)
    assert any("dispatcher.adapters[0].status.paths" in p and "'.spec.x'" in p for p in problems)
    assert any(p.startswith("dispatcher.adapters[0].conflictPolicy") and "'Steal'" in p for p in problems)
    assert any(p.startswith("dispatcher.adapters[0].create: a copy carries only") for p in problems), problems


def test_options_for_a_kind_not_configured_are_refused() -> None:
    with pytest.raises(ConfigError) as raised:
        parse_configuration(
            "multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}\n"
            "dispatcher: {adapters: [{name: Job.v1.batch}]}\n"
        )
    assert raised.value.problems == [
        "dispatcher.adapters[0].name: 'Job.v1.batch' is not in multiKueue.externalFrameworks "
        "(PipelineRun.v1.tekton.dev)"
    ]
