"""This project's own job integration on the kind clusters, installed by the blocks of docs/tekton.md, run verbatim:
``config/integration`` on the manager (the webhook holds a queued PipelineRun, the integration makes its Workload)
and ``config/worker-integration`` on each worker (``multikueue run --role worker``: adopts MultiKueue's prebuilt
Workload copy and releases the PipelineRun copy once the worker's Kueue admits it), every cluster's ConfigMap from
``examples/tekton/integration-config.yaml``. Removed again, leaving ``config/manager`` and ``config/worker`` as
the suite's other scenarios expect them."""

from __future__ import annotations

import anyio
import yaml

from e2e import tekton_page
from e2e.kind.scene import restart, rolled_out
from e2e.providers import WORKERS
from e2e.providers.kind import ROOT, KindEnvironment
from e2e.wiring import SYSTEM, apply_manifests, kubectl
from multikueue.kube.client import ApiClient

WORKER = ROOT / "config" / "worker-integration"
MANAGER = ROOT / "config" / "integration"
MANAGER_CONFIG = ROOT / "examples" / "tekton" / "integration-config.yaml"  # what docs/tekton.md's manager block puts
# What config/integration adds to config/manager (removed from the manager when the scenario ends).
MANAGER_ADDED = ("mutatingwebhookconfiguration/multikueue-mutating-webhook",
                 "clusterrolebinding/multikueue-integration", "clusterrole/multikueue-integration",
                 "-n", SYSTEM, "service/multikueue-webhook", "rolebinding/multikueue-webhook-cert",
                 "role/multikueue-webhook-cert", "secret/multikueue-webhook-cert")  # fmt: skip


def _remove_from_workers(kind: KindEnvironment) -> None:
    """config/worker-integration deleted without its Namespace: config/worker's ServiceAccount, the one the manager's
    Secret for the worker acts as, lives there and stays."""
    for worker in WORKERS:
        rendered = kind.run_kubectl(worker, "kustomize", str(WORKER))
        objects = [doc for doc in yaml.safe_load_all(rendered) if doc and doc["kind"] != "Namespace"]
        kubectl(kind, worker, "delete", "--ignore-not-found", "-f", "-", stdin=yaml.safe_dump_all(objects))


async def install(kind: KindEnvironment, api: dict[str, ApiClient], *, workers: bool) -> None:
    """The integration on the manager (its Deployment restarted: the webhook starts with the process) and, with
    ``workers``, ``--role worker`` on each worker, every Deployment rolled out."""

    def run(mark: str) -> None:
        tekton_page.run(mark, kind.kubectl, kind.kubeconfig_path)

    if workers:
        await anyio.to_thread.run_sync(run, "workers")
    await anyio.to_thread.run_sync(run, "manager")
    await rolled_out(kind, api, "the dispatcher restarted with the integration")


def apply_again(kind: KindEnvironment) -> None:
    """config/integration applied again on the manager, as an operator re-applies what is installed: its objects in
    one server-side apply, the ConfigMap carrying the configuration the install put there (config/manager's own text
    would take the webhook's integrations away while it stood). The webhook configuration has no caBundle here: the
    controller keeps it."""
    rendered = kind.run_kubectl("manager", "kustomize", str(MANAGER))
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    configs = [doc for doc in objects if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "multikueue-config"]
    assert len(configs) == 1, f"{MANAGER} renders {len(configs)} multikueue-config ConfigMaps"
    configs[0]["data"] = {"controller_manager_config.yaml": MANAGER_CONFIG.read_text()}
    kubectl(kind, "manager", "apply", "--server-side", "-f", "-", stdin=yaml.safe_dump_all(objects))


async def remove(kind: KindEnvironment, api: dict[str, ApiClient], *, workers: bool) -> None:
    """Back to config/manager (its ConfigMap text, restarted) and, with ``workers``, nothing of the integration left
    on the workers."""
    if workers:
        await anyio.to_thread.run_sync(lambda: _remove_from_workers(kind))
    await anyio.to_thread.run_sync(lambda: kind.run_kubectl("manager", "delete", "--ignore-not-found", *MANAGER_ADDED))
    await anyio.to_thread.run_sync(lambda: apply_manifests(kind))
    await restart(api, "integration-removed")
    await rolled_out(kind, api, "the dispatcher back without the integration")
