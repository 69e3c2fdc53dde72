"""tekton-kueue's manifests for a kind cluster: cert-manager's objects replaced by what cert-manager would make of
them, the local image, and the MultiKueue override on the manager only."""

from __future__ import annotations

import base64
from typing import Any

import yaml
from cryptography import x509

from e2e.kind.components import TEKTON_KUEUE_IMAGE
from e2e.kind.tekton_kueue import SOURCE, UPSTREAM_IMAGE, manifests, priority_class
from multikueue.pki import CertificateAuthority

NS = "tekton-kueue"


def _rendered() -> list[dict[str, Any]]:
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Issuer", "metadata": {"name": "selfsigned", "namespace": NS},
         "spec": {"selfSigned": {}}},
        {"apiVersion": "cert-manager.io/v1", "kind": "Certificate", "metadata": {"name": "serving", "namespace": NS},
         "spec": {"dnsNames": ["svc.tekton-kueue.svc", "svc.tekton-kueue.svc.cluster.local"],
                  "secretName": "webhook-server-cert", "issuerRef": {"name": "selfsigned"}}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tekton-kueue-config", "namespace": NS},
         "data": {"config.yaml": "queueName: pipelines-queue\n"}},
        {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "webhook", "namespace": NS},
         "spec": {"template": {"spec": {"containers": [{"name": "webhook", "image": "konflux-ci/tekton-kueue:latest"},
                                                         {"name": "other", "image": "busybox"}]}}}},
        {"apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
         "metadata": {"name": "hook", "annotations": {"cert-manager.io/inject-ca-from": f"{NS}/serving"}},
         "webhooks": [{"name": "a", "clientConfig": {"service": {"name": "svc", "namespace": NS}}}]},
    ]  # fmt: skip


def _by_kind(documents: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["kind"]: d for d in documents}


def test_each_certificate_becomes_the_secret_cert_manager_writes_and_its_ca_is_injected() -> None:
    ca = CertificateAuthority("tekton-kueue-ca")
    documents = manifests(_rendered(), manager=False, ca=ca)
    kinds = [d["kind"] for d in documents]
    assert "Certificate" not in kinds
    assert "Issuer" not in kinds
    assert kinds.index("Namespace") < kinds.index("Secret")
    secret = _by_kind(documents)["Secret"]
    assert (secret["metadata"]["name"], secret["metadata"]["namespace"]) == ("webhook-server-cert", NS)
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert data["ca.crt"] == ca.cert_pem
    sans = x509.load_pem_x509_certificate(data["tls.crt"]).extensions.get_extension_for_class(
        x509.SubjectAlternativeName
    )
    assert sans.value.get_values_for_type(x509.DNSName) == [
        "svc.tekton-kueue.svc",
        "svc.tekton-kueue.svc.cluster.local",
    ]
    webhook = _by_kind(documents)["MutatingWebhookConfiguration"]["webhooks"][0]
    assert base64.b64decode(webhook["clientConfig"]["caBundle"]) == ca.cert_pem


def test_the_image_built_here_runs_and_only_the_manager_overrides_managed_by() -> None:
    rendered = _rendered()
    ca = CertificateAuthority("tekton-kueue-ca")
    manager = _by_kind(manifests(rendered, manager=True, ca=ca))
    worker = _by_kind(manifests(rendered, manager=False, ca=ca))
    containers = manager["Deployment"]["spec"]["template"]["spec"]["containers"]
    assert [(c["image"], c.get("imagePullPolicy")) for c in containers] == [
        (TEKTON_KUEUE_IMAGE, "IfNotPresent"),
        ("busybox", None),
    ]
    assert yaml.safe_load(manager["ConfigMap"]["data"]["config.yaml"]) == {
        "queueName": "pipelines-queue",
        "multiKueueOverride": True,
    }
    assert yaml.safe_load(worker["ConfigMap"]["data"]["config.yaml"]) == {"queueName": "pipelines-queue"}
    assert rendered == _rendered(), "the rendered documents are left as they were"


def test_the_real_manifests_name_the_image_replaced_and_the_priority_class_they_create() -> None:
    """Against tekton-kueue's own files (its Go module): the image ``manifests`` replaces is the one its kustomization
    names, and the class its webhook's CEL rule labels runs with is the WorkloadPriorityClass ``config/default``
    creates (its name prefixed)."""
    config = SOURCE.directory() / "config"
    kustomization = yaml.safe_load((config / "webhook" / "kustomization.yaml").read_text())
    assert [i["newName"] for i in kustomization["images"]] == [UPSTREAM_IMAGE]
    prefix = yaml.safe_load((config / "default" / "kustomization.yaml").read_text())["namePrefix"]
    [created] = yaml.safe_load_all((config / "webhook" / "default-priority-class.yaml").read_text())
    assert created["kind"] == "WorkloadPriorityClass"
    assert priority_class() == prefix + created["metadata"]["name"]
