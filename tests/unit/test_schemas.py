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
