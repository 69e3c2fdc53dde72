"""tekton-kueue on the kind clusters, as its README installs it: its ``config/default`` rendered from its Go module
(the version the interop profile builds) on every cluster, running the image built here, and on the manager its
ConfigMap with ``multiKueueOverride: true`` ("Usage with MultiKueue": its webhook marks every PipelineRun
``managedBy`` MultiKueue). Nothing of this project runs on the workers.

cert-manager, which that README installs first, is not built here: the Certificates tekton-kueue's manifests ask
for are issued as cert-manager's CA issuer would (for each, the Secret it names with ``ca.crt``, ``tls.crt`` and
``tls.key`` for its DNS names; the CA put where ``cert-manager.io/inject-ca-from`` asks for it)."""

from __future__ import annotations

import base64
import copy
import re
from typing import Any

import yaml

from e2e.kind.clusters import kubeconfig
from e2e.kind.components import TEKTON_KUEUE_IMAGE, wait_admitted
from e2e.kind.scene import NAMESPACE
from e2e.providers import CLUSTERS
from e2e.providers.kind import NAMES, KindEnvironment
from e2e.wiring import kubectl
from multikueue.pki import CertificateAuthority
from multikueue_testbed.crds import ModuleSource
from multikueue_testbed.interop import TEKTON_KUEUE_MODULE, TEKTON_KUEUE_VERSION

SOURCE = ModuleSource(TEKTON_KUEUE_MODULE, TEKTON_KUEUE_VERSION)
CERT_MANAGER = "cert-manager.io/"
INJECT_CA = "cert-manager.io/inject-ca-from"
UPSTREAM_IMAGE = "konflux-ci/tekton-kueue"  # what its config/webhook kustomization names
PRIORITY_LABEL = "kueue.x-k8s.io/priority-class"  # what its webhook's CEL priority(...) sets
# A PipelineRun its webhook (failurePolicy: Fail) must admit, in a dry run, before the scenario creates one.
_STEPS = [{"name": "s", "image": "x"}]
PROBE = {"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "metadata": {"name": "probe", "namespace": NAMESPACE},
         "spec": {"pipelineSpec": {"tasks": [{"name": "t", "taskSpec": {"steps": _STEPS}}]}}}  # fmt: skip

Document = dict[str, Any]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _issued(certificate: Document, ca: CertificateAuthority) -> Document:
    """The Secret cert-manager writes for ``certificate``: its key pair for its DNS names, and the CA."""
    spec, meta = certificate["spec"], certificate["metadata"]
    pair = ca.issue(meta["name"], dns_names=tuple(spec["dnsNames"]), server=True)
    data = {"ca.crt": _b64(ca.cert_pem), "tls.crt": _b64(pair.cert_pem), "tls.key": _b64(pair.key_pem)}
    return {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": spec["secretName"], "namespace": meta["namespace"]}, "data": data}  # fmt: skip


def _local(document: Document, *, manager: bool) -> None:
    """The image built here, and on the manager the MultiKueue override its README asks for."""
    if document["kind"] == "Deployment":
        for container in document["spec"]["template"]["spec"]["containers"]:
            if container["image"].startswith(UPSTREAM_IMAGE):
                container.update(image=TEKTON_KUEUE_IMAGE, imagePullPolicy="IfNotPresent")
    if manager and document["kind"] == "ConfigMap" and "config.yaml" in document.get("data", {}):
        config = yaml.safe_load(document["data"]["config.yaml"]) or {}
        document["data"]["config.yaml"] = yaml.safe_dump({**config, "multiKueueOverride": True})


def manifests(rendered: list[Document], *, manager: bool, ca: CertificateAuthority) -> list[Document]:
    """tekton-kueue's rendered ``config/default`` for one cluster: cert-manager's objects replaced by what it would
    make of them, everything else as rendered but for the image (and the manager's override)."""
    ours = [d for d in rendered if d["apiVersion"].startswith(CERT_MANAGER)]
    # each cluster's own copy: the manager's differs
    documents = [copy.deepcopy(d) for d in rendered if not d["apiVersion"].startswith(CERT_MANAGER)]
    secrets = [_issued(d, ca) for d in ours if d["kind"] == "Certificate"]
    for document in documents:
        _local(document, manager=manager)
        if INJECT_CA in (document["metadata"].get("annotations") or {}):
            for webhook in document.get("webhooks") or []:
                webhook["clientConfig"]["caBundle"] = _b64(ca.cert_pem)
    namespaces = [d for d in documents if d["kind"] == "Namespace"]
    return namespaces + secrets + [d for d in documents if d["kind"] != "Namespace"]


def _render(kind: KindEnvironment) -> list[Document]:
    text = kind.run_kubectl("manager", "kustomize", str(SOURCE.directory() / "config" / "default"))
    return [d for d in yaml.safe_load_all(text) if d]


def _deployments(documents: list[Document]) -> list[tuple[str, str]]:
    return [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in documents if d["kind"] == "Deployment"]


def priority_class() -> str:
    """The WorkloadPriorityClass its shipped webhook configuration's CEL rule names (``priority("...")``)."""
    config = (SOURCE.directory() / "config" / "webhook" / "config.yaml").read_text()
    found = re.search(r'priority\("([^"]+)"\)', config)
    assert found is not None, f"no priority(...) rule in tekton-kueue's webhook configuration:\n{config}"
    return found.group(1)


def install(kind: KindEnvironment) -> None:
    """tekton-kueue on the manager and both workers, each Deployment rolled out and its webhook answering."""
    rendered, ca = _render(kind), CertificateAuthority("tekton-kueue-ca")
    for cluster in CLUSTERS:
        documents = manifests(rendered, manager=cluster == "manager", ca=ca)
        kubectl(kind, cluster, "apply", "--server-side", "--force-conflicts", "-f", "-",
                stdin=yaml.safe_dump_all(documents))  # fmt: skip
    for cluster in CLUSTERS:
        for namespace, name in _deployments(rendered):
            kubectl(kind, cluster, "-n", namespace, "rollout", "status", f"deployment/{name}", "--timeout=300s")
        wait_admitted(kubeconfig(NAMES[cluster]), PROBE, f"tekton-kueue's webhook on {cluster}")


def remove(kind: KindEnvironment) -> None:
    """Everything :func:`install` applied, gone from every cluster (its namespace last, waited for)."""
    documents = manifests(_render(kind), manager=False, ca=CertificateAuthority("tekton-kueue-ca"))
    for cluster in CLUSTERS:
        kubectl(kind, cluster, "delete", "--ignore-not-found", "--wait", "-f", "-",
                stdin=yaml.safe_dump_all(list(reversed(documents))))  # fmt: skip
