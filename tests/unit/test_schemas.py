"""What a published schema keeps (the API server prunes the rest), and the paths it is asked about."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.jsonpaths import field_names
from multikueue.schemas import keeps

# The shapes the API server publishes for a CRD (/openapi/v3/apis/<group>/<version>): metadata by reference.
COMPONENTS: dict[str, Any] = {
    "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta": {
        "type": "object",
        "properties": {
            "annotations": {"type": "object", "additionalProperties": {"type": "string"}},
            "name": {"type": "string"},
        },
    },
}
META = {"allOf": [{"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"}]}
PYTORCHJOB_181 = {  # Kubeflow's training-operator v1.8.1: runPolicy without managedBy
    "type": "object",
    "properties": {
        "metadata": META,
        "spec": {"type": "object", "properties": {
            "runPolicy": {"type": "object", "properties": {"suspend": {"type": "boolean"}}},
            "pytorchReplicaSpecs": {"type": "object", "additionalProperties": {"type": "object"}},
        }},
    },
}  # fmt: skip
PRESERVE = "x-kubernetes-preserve-unknown-fields"
ARGO_MINIMAL = {"type": "object", "properties": {"metadata": META, "spec": {"type": "object", PRESERVE: True}}}


@pytest.mark.parametrize(
    ("schema", "path", "kept"),
    [
        (PYTORCHJOB_181, ".spec.runPolicy.managedBy", False),
        (PYTORCHJOB_181, ".spec.runPolicy.suspend", True),
        (PYTORCHJOB_181, ".spec.managedBy", False),
        (PYTORCHJOB_181, '.metadata.annotations["multikueue.x-k8s.io/managed-by"]', True),  # through the $ref
        (PYTORCHJOB_181, ".metadata.labels", False),
        (PYTORCHJOB_181, ".spec.pytorchReplicaSpecs.Master", True),  # a map's values
        (ARGO_MINIMAL, ".spec.managedBy", True),  # preserved unknown fields keep anything below
        (ARGO_MINIMAL, ".spec.a.b.c", True),
    ],
)
def test_keeps(schema: dict[str, Any], path: str, kept: bool) -> None:
    fields = field_names(path)
    assert fields is not None
    assert keeps(schema, COMPONENTS, fields) is kept


@pytest.mark.parametrize(
    ("path", "names"),
    [
        (".spec.managedBy", ["spec", "managedBy"]),
        ("$.spec.runPolicy.managedBy", ["spec", "runPolicy", "managedBy"]),
        ('.metadata.annotations["a.io/managed-by"]', ["metadata", "annotations", "a.io/managed-by"]),
        ('.status.conditions[?type=="Succeeded"].status', None),
        (".spec.items[0].name", None),
    ],
)  # fmt: skip
def test_field_names(path: str, names: list[str] | None) -> None:
    assert field_names(path) == names


def test_changed_group_versions_include_one_that_comes_back() -> None:
    from multikueue.kube.openapi import changed_paths

    gone: set[str] = set()
    seen = {"apis/a/v1": "/openapi/v3/apis/a/v1?hash=1", "apis/b/v1": "/openapi/v3/apis/b/v1?hash=1"}
    assert changed_paths(seen, {**seen, "apis/a/v1": "/openapi/v3/apis/a/v1?hash=2"}, gone) == {"apis/a/v1"}
    assert changed_paths(seen, {"apis/b/v1": seen["apis/b/v1"]}, gone) == set()  # a's CRD deleted
    assert gone == {"apis/a/v1"}
    back = {"apis/a/v1": "/openapi/v3/apis/a/v1?hash=1", "apis/b/v1": seen["apis/b/v1"]}  # created again, same hash
    assert changed_paths({"apis/b/v1": seen["apis/b/v1"]}, back, gone) == {"apis/a/v1"}
    assert gone == set()
    assert changed_paths(back, {**back, "apis/c/v1": "x"}, gone) == set()  # a new group version: nothing to heal


def test_managed_by_problems_name_the_kind_and_the_path() -> None:
    from multikueue.config import parse_configuration
    from multikueue.kube.addresses import GroupVersionKind
    from multikueue.kube.openapi import KindSchema
    from multikueue.manager_schemas import managed_by_problems

    config = parse_configuration(
        "multiKueue: {externalFrameworks: [{name: PyTorchJob.v1.kubeflow.org},\n"
        "                                  {name: Workflow.v1alpha1.argoproj.io}]}\n"
        "dispatcher: {adapters: [{name: PyTorchJob.v1.kubeflow.org, managedByPath: .spec.runPolicy.managedBy}]}\n"
    )
    schemas = {
        GroupVersionKind("kubeflow.org", "v1", "PyTorchJob"): KindSchema(PYTORCHJOB_181, COMPONENTS),
        GroupVersionKind("argoproj.io", "v1alpha1", "Workflow"): KindSchema(ARGO_MINIMAL, COMPONENTS),
    }
    (problem,) = managed_by_problems(config, schemas)
    assert problem.startswith("PyTorchJob: the manager's PyTorchJob schema has no field at managedByPath "
                              ".spec.runPolicy.managedBy")  # fmt: skip
    assert KindSchema(PYTORCHJOB_181, COMPONENTS).digest != KindSchema(ARGO_MINIMAL, COMPONENTS).digest
