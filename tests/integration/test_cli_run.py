"""``multikueue run`` as its own process: configuration errors stop start-up with the field named."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml
from kubernetes_asyncio import client as k8s_client

from multikueue.kube.client import ApiClient
from multikueue.testing import TestBed


async def _config_map(api: ApiClient, namespace: str, text: str) -> None:
    await k8s_client.CoreV1Api(api).create_namespaced_config_map(
        namespace, {"metadata": {"name": "multikueue-config"}, "data": {"controller_manager_config.yaml": text}}
    )


def _run(bed: TestBed, namespace: str, tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    kubeconfig = tmp_path / "manager.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(bed.cluster("manager").kubeconfig))
    argv = [sys.executable, "-m", "multikueue", "run", "--kubeconfig", str(kubeconfig), "--config-namespace", namespace]
    return subprocess.run([*argv, *extra], capture_output=True, text=True, timeout=60)


async def test_a_malformed_configmap_stops_start_up_naming_field_and_value(
    testbed: TestBed, namespace: str, manager_api: ApiClient, tmp_path: Path
) -> None:
    await _config_map(
        manager_api,
        namespace,
        "apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n"
        "multiKueue:\n  workerLostTimeout: 15 minutes\n  externalFrameworks:\n  - name: pipelineruns.tekton\n",
    )
    result = _run(testbed, namespace, tmp_path)
    assert result.returncode == 2
    assert f"invalid configuration in ConfigMap {namespace}/multikueue-config key controller_manager_config.yaml" in (
        result.stderr
    )
    assert "multiKueue.workerLostTimeout: not a duration like 30s, 1m or 1h30m: '15 minutes'" in result.stderr
    assert "multiKueue.externalFrameworks[0].name: must be in 'Kind.version.group' format" in result.stderr
    assert "Traceback" not in result.stderr


async def test_a_missing_configmap_or_key_is_named(testbed: TestBed, namespace: str, tmp_path: Path) -> None:
    result = _run(testbed, namespace, tmp_path)
    assert result.returncode == 2
    assert f"ConfigMap {namespace}/multikueue-config key controller_manager_config.yaml" in result.stderr
    assert "cannot read the ConfigMap: HTTP 404" in result.stderr
