from __future__ import annotations

from typing import Any

import pytest

from multikueue.config import Adapter
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.kube.addresses import GroupVersionKind
from multikueue.mergepatch import apply_merge_patch
from multikueue_testbed.objects import pipelinerun, running_status

PIPELINERUN = GroupVersionKind("tekton.dev", "v1", "PipelineRun")
ADAPTER = GenericAdapter(PIPELINERUN, "kueue.x-k8s.io/multikueue", Adapter.defaults(PIPELINERUN))


def manager_run() -> dict[str, Any]:
    run = pipelinerun("hello", labels={"app": "x"}, managedBy="kueue.x-k8s.io/multikueue")
    run["metadata"].update(
        namespace="team-a",
        uid="u-1",
        resourceVersion="42",
        generation=3,
        finalizers=["f"],
        annotations={"note": "kept"},
        creationTimestamp="2026-01-01T00:00:00Z",
        ownerReferences=[{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u-2"}],
    )
    run["status"] = running_status("hello")
    return run


def test_a_prebuilt_name_too_long_for_a_label_is_only_an_annotation() -> None:
    name = "w" * 64
    worker_obj = ADAPTER.build_copy(manager_run(), workload_name=name, origin="mk")
    assert "kueue.x-k8s.io/prebuilt-workload-name" not in worker_obj["metadata"]["labels"]
    assert worker_obj["metadata"]["annotations"]["kueue.x-k8s.io/prebuilt-workload-name"] == name


def test_the_worker_copy_carries_only_name_namespace_labels_annotations_and_spec() -> None:
    worker_obj = ADAPTER.build_copy(manager_run(), workload_name="pipelinerun-hello", origin="mk")
    assert set(worker_obj) == {"apiVersion", "kind", "metadata", "spec"}
    assert (worker_obj["apiVersion"], worker_obj["kind"]) == ("tekton.dev/v1", "PipelineRun")
    assert worker_obj["metadata"] == {
        "name": "hello",
        "namespace": "team-a",
        # The prebuilt name as Kueue >= 0.18 writes it (annotation) and as older integrations read it (label).
        "labels": {
            "app": "x",
            "kueue.x-k8s.io/multikueue-origin": "mk",
            "kueue.x-k8s.io/prebuilt-workload-name": "pipelinerun-hello",
        },
        "annotations": {
            "note": "kept",
            "kueue.x-k8s.io/prebuilt-workload-name": "pipelinerun-hello",
            "multikueue.x-k8s.io/origin": "mk",
            "multikueue.x-k8s.io/manager-uid": "u-1",
        },
    }
    assert "managedBy" not in worker_obj["spec"]
    assert worker_obj["spec"]["pipelineSpec"] == manager_run()["spec"]["pipelineSpec"]


def test_building_the_copy_does_not_modify_the_manager_object() -> None:
    run = manager_run()
    ADAPTER.build_copy(run, workload_name="w", origin="mk")
    assert run == manager_run()


@pytest.mark.parametrize(
    ("value", "managed", "reason"),
    [
        ("kueue.x-k8s.io/multikueue", True, ""),
        (None, False, 'Expecting .spec.managedBy to be "kueue.x-k8s.io/multikueue" not ""'),
        (
            "tekton.dev/pipeline",
            False,
            'Expecting .spec.managedBy to be "kueue.x-k8s.io/multikueue" not "tekton.dev/pipeline"',
        ),
    ],
)
def test_managed_by(value: str | None, managed: bool, reason: str) -> None:
    run = pipelinerun("x") if value is None else pipelinerun("x", managedBy=value)
    assert ADAPTER.is_managed(run) == (managed, reason)


def test_status_patch_is_none_when_nothing_to_do() -> None:
    manager_obj = manager_run()
    assert ADAPTER.status_patch(manager_obj, {"metadata": {}, "spec": {}}) is None, (
        "a worker without status changes nothing"
    )
    assert ADAPTER.status_patch(manager_obj, {"status": running_status("hello")}) is None, "equal: no write"


def test_status_patch_makes_the_manager_equal_to_the_worker() -> None:
    manager_obj = manager_run()
    remote_status = {**running_status("hello"), "completionTime": "2026-08-01T10:00:20Z"}
    del remote_status["childReferences"]
    patch = ADAPTER.status_patch(manager_obj, {"status": remote_status})
    assert patch is not None
    assert patch["status"]["childReferences"] is None
    assert apply_merge_patch(manager_obj, patch)["status"] == remote_status


def test_an_annotation_can_carry_managed_by_for_a_kind_whose_schema_has_no_field_for_it() -> None:
    # docs/configuration.md's recipe for kinds like PyTorchJob v1.8.1 (no spec.runPolicy.managedBy).
    path = '.metadata.annotations["multikueue.x-k8s.io/managed-by"]'
    options = Adapter.model_validate({"name": "PipelineRun.v1.tekton.dev", "managedByPath": path})
    adapter = GenericAdapter(PIPELINERUN, "kueue.x-k8s.io/multikueue", options)
    run = manager_run()
    del run["spec"]["managedBy"]
    assert adapter.is_managed(run) == (False, f'Expecting {path} to be "kueue.x-k8s.io/multikueue" not ""')
    run["metadata"]["annotations"] = {"multikueue.x-k8s.io/managed-by": "kueue.x-k8s.io/multikueue", "keep": "me"}
    assert adapter.is_managed(run) == (True, "")
    copy = adapter.build_copy(run, workload_name="wl", origin="multikueue")
    assert "multikueue.x-k8s.io/managed-by" not in copy["metadata"]["annotations"]  # the worker's controller runs it
    assert copy["metadata"]["annotations"]["keep"] == "me"
