from __future__ import annotations

from typing import Any

import pytest

from multikueue_testbed.crds import prepare_crd


def _crd(*versions: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "things.example.com",
            "annotations": {"controller-gen.kubebuilder.io/version": "x"},
        },
        "spec": {
            "group": "example.com",
            "names": {"kind": "Thing", "plural": "things"},
            "scope": "Namespaced",
            "versions": list(versions),
            "conversion": {"strategy": "Webhook", "webhook": {"clientConfig": {"service": {"name": "w"}}}},
        },
    }


def test_conversion_webhook_removed_and_only_the_storage_version_kept() -> None:
    original = _crd(
        {"name": "v1beta1", "served": True, "storage": False}, {"name": "v1", "served": True, "storage": True}
    )
    prepared = prepare_crd(original)
    assert "conversion" not in prepared["spec"]
    assert [v["name"] for v in prepared["spec"]["versions"]] == ["v1"]
    assert "annotations" not in prepared["metadata"]
    assert "conversion" in original["spec"], "the input is not modified"


def test_a_single_version_crd_keeps_its_version() -> None:
    prepared = prepare_crd(_crd({"name": "v1", "served": True, "storage": True}))
    assert [v["name"] for v in prepared["spec"]["versions"]] == ["v1"]


def test_a_crd_without_one_storage_version_is_refused() -> None:
    with pytest.raises(ValueError, match=r"things\.example\.com has 0 storage versions"):
        prepare_crd(_crd({"name": "v1", "served": True, "storage": False}, {"name": "v2", "served": True}))
