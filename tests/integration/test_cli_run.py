"""``multikueue run`` as its own process: every start-up failure (configuration, address, credentials, kinds) is
one line naming what and why, with a non-zero exit."""

from __future__ import annotations

import copy
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client as k8s_client

from multikueue.kube.client import ApiClient
from multikueue_testbed import TestBed
from multikueue_testbed.client import k8s
from tests.integration.controller import run_argv


async def _config_map(api: ApiClient, namespace: str, text: str) -> None:
    await k8s_client.CoreV1Api(k8s(api)).create_namespaced_config_map(
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


def _run_with(bed: TestBed, tmp_path: Path, config: str, *extra: str, kubeconfig: Any = None) -> Any:
    argv = run_argv(bed, tmp_path, config, *extra)
    if kubeconfig is not None:
        (tmp_path / "manager.kubeconfig").write_text(yaml.safe_dump(kubeconfig))
    return subprocess.run(argv, capture_output=True, text=True, timeout=60)


def _one_line(result: Any) -> str:
    """Start-up failures are one line on stderr, no traceback, exit 2."""
    assert result.returncode == 2, (result.returncode, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("multikueue: ")]
    assert len(lines) == 1, result.stderr
    return str(lines[0])


CONFIG = "multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}\n"


@pytest.mark.parametrize("flag", ["--metrics-bind-address", "--health-probe-bind-address"])
async def test_an_address_in_use_is_one_line(testbed: TestBed, tmp_path: Path, flag: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = _run_with(testbed, tmp_path, CONFIG, flag, f"127.0.0.1:{port}")
    line = _one_line(result)
    assert line.startswith(f"multikueue: cannot serve {flag} 127.0.0.1:{port}: "), line
    assert "in use" in line.lower(), line


async def test_a_metrics_cert_dir_without_its_files_is_one_line(testbed: TestBed, tmp_path: Path) -> None:
    line = _one_line(_run_with(testbed, tmp_path, CONFIG, "--metrics-cert-dir", str(tmp_path / "nowhere")))
    assert line == f"multikueue: --metrics-cert-dir {tmp_path / 'nowhere'}: no tls.crt or tls.key there", line


async def test_credentials_refused_or_a_server_not_answering_are_one_line(testbed: TestBed, tmp_path: Path) -> None:
    kubeconfig = copy.deepcopy(testbed.cluster("manager").kubeconfig)
    for user in kubeconfig["users"]:
        user["user"] = {"token": "not-a-valid-token"}
    line = _one_line(_run_with(testbed, tmp_path, CONFIG, kubeconfig=kubeconfig))
    assert line == "multikueue: the manager cluster refused GET /version: HTTP 401 Unauthorized: Unauthorized", line

    unreachable = copy.deepcopy(testbed.cluster("manager").kubeconfig)
    for cluster in unreachable["clusters"]:
        cluster["cluster"]["server"] = "https://127.0.0.1:1"
    line = _one_line(_run_with(testbed, tmp_path, CONFIG, kubeconfig=unreachable))
    assert line.startswith("multikueue: cannot reach the manager cluster (GET /version): "), line


async def test_a_kind_spelt_in_another_case_stops_start_up_with_the_right_spelling(
    testbed: TestBed, tmp_path: Path
) -> None:
    config = "multiKueue: {externalFrameworks: [{name: pipelinerun.v1.tekton.dev}]}\n"
    line = _one_line(_run_with(testbed, tmp_path, config))
    assert line == (
        'multikueue: multiKueue.externalFrameworks: kind "pipelinerun.v1.tekton.dev" is not served; kinds are '
        'case-sensitive: did you mean "PipelineRun.v1.tekton.dev"?'
    ), line
