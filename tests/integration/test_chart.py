"""The Helm chart (charts/multikueue) with a real Helm built from its module: it lints, it renders what the
kustomize manifests render where the two should agree, its generated RBAC follows the configured kinds, and a
real API server accepts what it renders."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from multikueue_testbed import TestBed
from multikueue_testbed.interop import helm_binary
from tests.integration.test_manifests import kubectl

ROOT = Path(__file__).parents[2]
CHART = ROOT / "charts" / "multikueue"
SYSTEM = "multikueue-system"
Object = dict[str, Any]
# `helm template` renders for a Kubernetes version of its own (without a cluster to ask): one the chart supports.
KUBE = ("--kube-version", "1.34.0")


@pytest.fixture(scope="module")
def helm() -> Path:
    return helm_binary(lambda message: sys.stderr.write(f"[helm] {message}\n"))  # progress on the cold build


async def _helm(helm: Path, *args: str) -> str:
    result = await anyio.run_process([str(helm), *args], check=False)
    output = result.stdout.decode()
    assert result.returncode == 0, f"helm {' '.join(args)} failed:\n{output}{result.stderr.decode()}"
    return output


async def _template(helm: Path, *args: str) -> dict[tuple[str, str], Object]:
    rendered = await _helm(helm, "template", "multikueue", str(CHART), "--namespace", SYSTEM, *KUBE, *args)
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(rendered) if d}


async def _kustomize(bed: TestBed, overlay: str) -> dict[tuple[str, str], Object]:
    rendered = await kubectl(bed, "manager", "kustomize", str(ROOT / "config" / overlay))
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(rendered) if d}


def _comparable(doc: Object) -> Object:
    """What both should say: everything but labels, annotations and the ConfigMap's text (compared parsed)."""
    meta = {k: v for k, v in doc["metadata"].items() if k not in ("labels", "annotations")}
    body = {k: v for k, v in doc.items() if k not in ("metadata", "data")}
    data = {k: yaml.safe_load(v) for k, v in (doc.get("data") or {}).items()}
    return {"metadata": meta, **body, "data": data}


async def test_the_chart_lints_with_every_option(helm: Path) -> None:
    await _helm(helm, "lint", "--strict", str(CHART))
    await _helm(helm, "lint", "--strict", str(CHART), "--set", "integration.enabled=true",
                "--set", "metrics.serviceMonitor.enabled=true")  # fmt: skip


async def test_the_chart_renders_what_config_manager_renders(helm: Path, testbed: TestBed) -> None:
    chart, kustomize = await _template(helm), await _kustomize(testbed, "manager")
    del kustomize[("Namespace", SYSTEM)]  # helm install --create-namespace (or an existing one) instead
    assert sorted(chart) == sorted(kustomize)
    for key, doc in kustomize.items():
        assert _comparable(chart[key]) == _comparable(doc), key


async def test_the_chart_with_the_integration_renders_what_config_integration_renders(
    helm: Path, testbed: TestBed, tmp_path: Path
) -> None:
    """With the integration's configuration (examples/tekton/integration-config.yaml): its RBAC, webhook Service
    and MutatingWebhookConfiguration generated from the integrated kind, and the webhook port."""
    values = tmp_path / "values.yaml"
    config = (ROOT / "examples" / "tekton" / "integration-config.yaml").read_text()
    values.write_text(yaml.safe_dump({"integration": {"enabled": True},
                                      "managerConfig": {"controllerManagerConfigYaml": config}}))  # fmt: skip
    chart, kustomize = await _template(helm, "--values", str(values)), await _kustomize(testbed, "integration")
    del kustomize[("Namespace", SYSTEM)]
    assert sorted(chart) == sorted(kustomize)
    for key, doc in kustomize.items():
        if key == ("ConfigMap", "multikueue-config"):
            continue  # config/integration ships config/manager's text; the chart carries the one it is given
        assert _comparable(chart[key]) == _comparable(doc), key


async def test_the_charts_service_monitor_is_config_monitorings(helm: Path, testbed: TestBed) -> None:
    chart = await _template(helm, "--set", "metrics.serviceMonitor.enabled=true")
    kustomize = await _kustomize(testbed, "monitoring")
    for key in (("ServiceMonitor", "multikueue"), ("ClusterRoleBinding", "multikueue-metrics-reader")):
        assert _comparable(chart[key]) == _comparable(kustomize[key]), key
    endpoint = chart[("ServiceMonitor", "multikueue")]["spec"]["endpoints"][0]
    # HTTPS with Prometheus's own token, on the Service's https port
    assert (endpoint["port"], endpoint["scheme"]) == ("https", "https")
    assert endpoint["bearerTokenFile"] == "/var/run/secrets/kubernetes.io/serviceaccount/token"
    service = chart[("Service", "multikueue-metrics")]["spec"]["ports"]
    assert service == [{"name": "https", "port": 8443, "targetPort": "metrics"}]


async def test_the_disruption_budget_needs_two_replicas_and_the_shutdown_delay_is_passed_on(helm: Path) -> None:
    budget = ("PodDisruptionBudget", "multikueue-controller")
    default = await _template(helm)
    selector = {"matchLabels": {"app.kubernetes.io/name": "multikueue"}}
    assert default[budget]["spec"] == {"maxUnavailable": 1, "selector": selector}
    assert budget not in await _template(helm, "--set", "replicas=1"), "with one replica it would block every drain"
    assert budget not in await _template(helm, "--set", "podDisruptionBudget.enabled=false")
    pod = default[("Deployment", "multikueue-controller")]["spec"]["template"]["spec"]
    assert not [a for a in pod["containers"][0]["args"] if a.startswith("--shutdown-delay")], "5 s: the default"
    longer = await _template(helm, "--set", "shutdownDelay=12", "--set", "terminationGracePeriodSeconds=40")
    pod = longer[("Deployment", "multikueue-controller")]["spec"]["template"]["spec"]
    assert "--shutdown-delay=12" in pod["containers"][0]["args"]
    assert pod["terminationGracePeriodSeconds"] == 40


async def test_the_metrics_certificate_comes_from_the_secret_given(helm: Path) -> None:
    default = (await _template(helm))[("Deployment", "multikueue-controller")]["spec"]["template"]["spec"]
    given = (await _template(helm, "--set", "metrics.certSecret=metrics-tls"))[("Deployment", "multikueue-controller")]
    spec = given["spec"]["template"]["spec"]
    controller = spec["containers"][0]
    assert "--metrics-cert-dir=/etc/multikueue/metrics-certs" in controller["args"]
    assert {"name": "metrics-certs", "mountPath": "/etc/multikueue/metrics-certs", "readOnly": True} in controller[
        "volumeMounts"
    ]
    assert {"name": "metrics-certs", "secret": {"secretName": "metrics-tls", "items": [
        {"key": "tls.crt", "path": "tls.crt"}, {"key": "tls.key", "path": "tls.key"}]}} in spec["volumes"]  # fmt: skip
    assert not any(a.startswith("--metrics-cert-dir") for a in default["containers"][0]["args"]), "self-signed"
    probes = [controller[p]["httpGet"]["port"] for p in ("livenessProbe", "readinessProbe")]
    assert probes == ["health", "health"]


async def test_the_generated_rbac_follows_the_configured_kinds(helm: Path, tmp_path: Path) -> None:
    config = {"multiKueue": {"externalFrameworks": [{"name": "JobSet.v1alpha2.jobset.x-k8s.io"},
                                                    {"name": "Policy.v1.example.com"}]}}  # fmt: skip
    values = tmp_path / "values.yaml"
    values.write_text(yaml.safe_dump({"managerConfig": {"controllerManagerConfigYaml": yaml.safe_dump(config)},
                                      "rbac": {"plurals": {"Policy.v1.example.com": "policies"}}}))  # fmt: skip
    chart = await _template(helm, "--values", str(values))
    rules = chart[("ClusterRole", "multikueue-controller")]["rules"]
    for group, plural in (("jobset.x-k8s.io", "jobsets"), ("example.com", "policies")):
        assert {"apiGroups": [group], "resources": [plural], "verbs": ["get", "list", "watch", "patch"]} in rules
        assert {"apiGroups": [group], "resources": [f"{plural}/status"], "verbs": ["patch"]} in rules
    assert not any("pipelineruns" in r["resources"] for r in rules), "only the configured kinds"
    dispatcher = yaml.safe_load(chart[("ConfigMap", "multikueue-config")]["data"]["controller_manager_config.yaml"])
    assert dispatcher["dispatcher"]["namespace"] == SYSTEM, "defaulted to the release's namespace"


async def test_a_real_api_server_accepts_what_the_chart_renders(helm: Path, testbed: TestBed, tmp_path: Path) -> None:
    rendered = await _helm(helm, "template", "multikueue", str(CHART), "--namespace", SYSTEM, *KUBE,
                           "--set", "integration.enabled=true")  # fmt: skip
    manifest, namespace = tmp_path / "chart.yaml", tmp_path / "namespace.yaml"
    manifest.write_text(rendered)
    namespace.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": SYSTEM}}))
    await kubectl(testbed, "manager", "apply", "--server-side", "-f", str(namespace))  # as --create-namespace
    out = await kubectl(testbed, "manager", "apply", "--server-side", "--dry-run=server", "-f", str(manifest))
    assert "deployment.apps/multikueue-controller serverside-applied (server dry run)" in out, out


async def test_token_renewal_may_write_only_the_secrets_named_and_none_by_default(helm: Path) -> None:
    role = ("Role", "multikueue-controller-token-renewal")
    assert role not in await _template(helm), "no Secret may be written unless renewal is asked for"
    chart = await _template(helm, "--set", "tokenRenewal.secrets={worker1-kubeconfig}")
    documents = yaml.safe_load_all((ROOT / "config" / "manager" / "token-renewal.yaml").read_text())
    shipped = {(d["kind"], d["metadata"]["name"]): d for d in documents}
    for key, doc in shipped.items():
        assert _comparable(chart[key]) == _comparable(doc), key
    assert chart[role]["rules"] == [
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": ["worker1-kubeconfig"], "verbs": ["patch"]}
    ]
