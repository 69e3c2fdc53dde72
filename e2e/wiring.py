"""The suite's set-up, the same on every provider and done only through the Kubernetes API and kubectl: the
shipped manifests, the worker-connection script, and the dispatcher run as the shipped ServiceAccount."""

from __future__ import annotations

import base64
import os
import subprocess
from pathlib import Path
from typing import Any

import anyio

from e2e.providers import WORKERS, Environment
from multikueue.kube.addresses import ADMISSION_CHECKS, MULTIKUEUE_CLUSTERS
from multikueue.kube.client import api_client_from_kubeconfig
from multikueue.kube.resources import Objects
from multikueue.labels import WORKER_IDENTITY_ANNOTATION as IDENTITY
from multikueue_testbed.testbed import kubeconfig_document
from multikueue_testbed.waiting import eventually

ROOT = Path(__file__).resolve().parents[1]
SYSTEM = "multikueue-system"
CHECK = "multikueue-pipelines"


def kubectl(env: Environment, cluster: str, *args: str, stdin: str | None = None) -> str:
    argv = [env.kubectl, "--kubeconfig", str(env.kubeconfig_path), "--context", cluster, *args]
    result = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=300, check=False)
    if result.returncode != 0:
        raise AssertionError(f"kubectl {' '.join(args)} on {cluster} failed:\n{result.stdout}{result.stderr}")
    return result.stdout


def apply_manifests(env: Environment) -> None:
    for worker in WORKERS:
        kubectl(env, worker, "apply", "--server-side", "-k", str(ROOT / "config" / "worker"))
        kubectl(env, worker, "apply", "--server-side", "-f", str(ROOT / "examples" / "tekton" / "worker.yaml"))
    kubectl(env, "manager", "apply", "--server-side", "-k", str(ROOT / "config" / "manager"))
    if env.dispatcher_config is not None:  # the ConfigMap's one key replaced, as a user edits it
        configmap = kubectl(env, "manager", "-n", SYSTEM, "create", "configmap", "multikueue-config",
                            f"--from-file=controller_manager_config.yaml={env.dispatcher_config}",
                            "--dry-run=client", "-o", "yaml")  # fmt: skip
        kubectl(env, "manager", "apply", "--server-side", "-f", "-", stdin=configmap)
    kubectl(env, "manager", "apply", "--server-side", "-f", str(ROOT / "examples" / "tekton" / "manager.yaml"))


def connect_workers(env: Environment) -> None:
    """config/worker/connect-worker.sh, exactly as a user runs it."""
    script = ROOT / "config" / "worker" / "connect-worker.sh"
    variables = {**os.environ, "KUBECTL": env.kubectl, "KUBECONFIG": str(env.kubeconfig_path)}
    for worker in WORKERS:
        argv = [str(script), worker, "--worker-context", worker, "--manager-context", "manager"]
        argv += ["--server", env.server_seen_by_dispatcher(worker), "--duration", "24h"]
        result = subprocess.run(argv, env=variables, capture_output=True, text=True, timeout=300, check=False)
        if result.returncode != 0:
            raise AssertionError(f"connect-worker.sh {worker} failed:\n{result.stdout}{result.stderr}")


def dispatcher_kubeconfig(env: Environment) -> dict[str, Any]:
    """A token for the shipped ``multikueue-controller`` ServiceAccount: the dispatcher gets no more than RBAC
    in config/manager grants."""
    token = kubectl(env, "manager", "-n", SYSTEM, "create", "token", "multikueue-controller", "--duration", "24h")
    admin = env.kubeconfig("manager")
    current = next(c for c in admin["contexts"] if c["name"] == admin["current-context"])["context"]["cluster"]
    ca = next(c for c in admin["clusters"] if c["name"] == current)["cluster"]["certificate-authority-data"]
    return kubeconfig_document(
        "manager",
        env.server_seen_by_dispatcher("manager"),
        ca_pem=base64.b64decode(ca),
        user={"token": token.strip()},
    )


def _active(obj: dict[str, Any] | None) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "Active" and c["status"] == "True" for c in conditions)


def _identified(obj: dict[str, Any] | None) -> bool:
    return _active(obj) and bool(((obj or {}).get("metadata", {}).get("annotations") or {}).get(IDENTITY))


async def wait_active(env: Environment, *workers: str, timeout: float = 120) -> None:
    """Each worker Active, with the identity of the cluster it leads to recorded (the shipped RBAC allows both),
    and the admission check Active."""
    async with await api_client_from_kubeconfig(env.kubeconfig("manager")) as api:
        for worker in workers:
            await eventually(
                lambda w=worker: Objects(api, MULTIKUEUE_CLUSTERS).get(w),  # type: ignore[misc]
                until=_identified,
                timeout=timeout,
                what=f"MultiKueueCluster {worker} Active, its worker's identity recorded\n{env.dispatcher_log()}",
            )
        await eventually(
            lambda: Objects(api, ADMISSION_CHECKS).get(CHECK), until=_active, timeout=timeout, what=f"{CHECK} Active"
        )


def wire(env: Environment) -> None:
    apply_manifests(env)
    connect_workers(env)
    env.start_dispatcher(dispatcher_kubeconfig(env))
    anyio.run(wait_active, env, *WORKERS)
