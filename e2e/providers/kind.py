"""``kind``: three kind clusters (mk-manager, mk-worker1, mk-worker2) with real Kueue on all three, real Tekton on
the workers, and the dispatcher deployed from config/manager as its two-replica Deployment.

Where no registry answers (this project's machines), everything is built here and cached by version: the kind
engine (``e2e/kind/engine.sh``), the node image and clusters (``e2e/kind/clusters.py``), and the images of the
dispatcher, Kueue, Tekton and the step (``e2e/kind/components.py``), loaded with ``kind load``. Elsewhere
``e2e/kind/up.sh`` pulls ``kindest/node`` and applies the released manifests.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from e2e.providers import CLUSTERS, WORKERS, Environment, ProviderUnavailable

ROOT = Path(__file__).resolve().parents[2]
NAMES = {name: f"mk-{name}" for name in CLUSTERS}
KIND_DOCKER_HOST = "unix:///run/multikueue-kind/docker.sock"
SYSTEM = "multikueue-system"


def registry_reachable() -> bool:
    """Whether kind's node image could be pulled (``MULTIKUEUE_KIND_OFFLINE=1`` says no without asking)."""
    if os.environ.get("MULTIKUEUE_KIND_OFFLINE") == "1":
        return False
    try:
        socket.create_connection(("registry-1.docker.io", 443), timeout=5).close()
        return True
    except OSError:
        return False


class KindEnvironment(Environment):
    name = "kind"
    plays_kueue = False  # real Kueue runs on every cluster, real Tekton on the workers
    # Tekton-aware adapter options: with no tekton-kueue on the workers, the run's own status ends it.
    dispatcher_config: Path | None = ROOT / "examples" / "tekton" / "adapter-config.yaml"

    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="multikueue-e2e-kind-"))
        self._kubeconfig: dict[str, Any] = {}
        self._created = False
        self.offline = False
        self.host_settings_before: dict[str, str] = {}

    # ------------------------------------------------------------------------------------------ bring-up

    def start(self) -> None:
        from e2e.kind.clusters import host_settings

        self.host_settings_before = host_settings()
        self.offline = not registry_reachable()
        if self.offline:
            self._start_offline()
        else:
            self._start_online()

    def _start_offline(self) -> None:
        from e2e.kind import clusters
        from e2e.kind.node import NodeImageError

        engine = subprocess.run([str(ROOT / "e2e" / "kind" / "engine.sh"), "start"], text=True, capture_output=True,
                                check=False, timeout=900)  # fmt: skip
        if engine.returncode != 0:
            raise ProviderUnavailable(f"the kind engine did not start: {engine.stderr.strip()[-1500:]}")
        os.environ["DOCKER_HOST"] = engine.stdout.strip() or KIND_DOCKER_HOST
        self._created = True
        try:
            clusters.up()
            _install_components()
        except NodeImageError as e:
            raise ProviderUnavailable(str(e)) from None
        self._kubeconfig = _merged_kubeconfig({name: clusters.kubeconfig(NAMES[name]) for name in CLUSTERS})
        self.kubeconfig_path.write_text(yaml.safe_dump(self._kubeconfig))

    def _start_online(self) -> None:
        missing = [tool for tool in ("kind", "docker", "kubectl") if shutil.which(tool) is None]
        if missing:
            raise ProviderUnavailable(f"the kind provider needs {', '.join(missing)} on PATH")
        self._created = True
        result = subprocess.run([str(ROOT / "e2e" / "kind" / "up.sh")], text=True, capture_output=True, timeout=1800)
        if result.returncode != 0:
            raise ProviderUnavailable(f"e2e/kind/up.sh failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
        exported = subprocess.run(
            ["kubectl", "config", "view", "--raw", "--flatten"], text=True, capture_output=True, check=True, timeout=60
        )
        document = yaml.safe_load(exported.stdout)
        for cluster in CLUSTERS:  # the suite addresses clusters by their bare names
            for context in list(document["contexts"]):
                if context["name"] == f"kind-{NAMES[cluster]}":
                    document["contexts"].append({"name": cluster, "context": context["context"]})
        self._kubeconfig = document
        self.kubeconfig_path.write_text(yaml.safe_dump(document))

    def stop(self) -> None:
        try:
            if self._created and not os.environ.get("MULTIKUEUE_E2E_KIND_KEEP"):
                self._tear_down()
        finally:
            shutil.rmtree(self.workdir, ignore_errors=True)

    def _tear_down(self) -> None:
        if not self.offline:
            subprocess.run([str(ROOT / "e2e" / "kind" / "down.sh")], check=False, timeout=600)
            return
        from e2e.kind import clusters

        try:
            clusters.down()
        finally:
            subprocess.run([str(ROOT / "e2e" / "kind" / "engine.sh"), "stop"], check=False, timeout=120)
        self._check_host()

    def _check_host(self) -> None:
        from e2e.kind import clusters

        after = clusters.host_settings()
        if after != self.host_settings_before:
            raise AssertionError(f"the host's kernel settings changed: {self.host_settings_before} -> {after}")

    # ------------------------------------------------------------------------------------------- access

    def kubeconfig(self, cluster: str) -> dict[str, Any]:
        document = dict(self._kubeconfig)
        document["current-context"] = cluster
        return document

    @property
    def kubeconfig_path(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def kubectl(self) -> str:
        if self.offline:
            from e2e.kind.node import programs

            return str(programs()["kubectl"])
        return "kubectl"

    def server_seen_by_dispatcher(self, cluster: str) -> str:
        return f"https://{NAMES[cluster]}-control-plane:6443"

    def run_kubectl(self, cluster: str, *args: str, timeout: float = 300) -> str:
        argv = [self.kubectl, "--kubeconfig", str(self.kubeconfig_path), "--context", cluster, *args]
        return subprocess.run(argv, text=True, capture_output=True, check=True, timeout=timeout).stdout

    # --------------------------------------------------------------------------------------- dispatcher

    def start_dispatcher(self, manager_kubeconfig: dict[str, Any] | None = None) -> None:
        # The Deployment runs as its own ServiceAccount: the identity the suite minted is the same one.
        deployment = ["-n", SYSTEM, "deployment/multikueue-controller"]
        self.run_kubectl("manager", "scale", "--replicas=2", *deployment)
        self.run_kubectl("manager", "rollout", "status", "--timeout=300s", *deployment, timeout=330)

    def stop_dispatcher(self, *, kill: bool = False) -> None:
        self.run_kubectl("manager", "scale", "--replicas=0", "-n", SYSTEM, "deployment/multikueue-controller")
        if kill:  # pods deleted with no grace, as a node failure would
            self.run_kubectl("manager", "delete", "pods", "-n", SYSTEM, "-l", "app.kubernetes.io/name=multikueue",
                             "--grace-period=0", "--force")  # fmt: skip

    def dispatcher_log(self) -> str:
        try:
            return self.run_kubectl("manager", "logs", "-n", SYSTEM, "-l", "app.kubernetes.io/name=multikueue",
                                    "--tail=40", "--prefix")  # fmt: skip
        except subprocess.CalledProcessError as e:
            return f"(no logs: {e.stderr})"

    # ------------------------------------------------------------------------------------------ workers

    def node_container(self, cluster: str) -> str:
        return f"{NAMES[cluster]}-control-plane"

    def lose_worker(self, worker: str) -> None:
        """The worker's node container frozen. cgroup v1's freezer gives up when a task does not freeze in time
        (runc: "unable to freeze") and runc thaws the container again, so the pause is tried again, bounded."""
        argv = ["docker", "pause", self.node_container(worker)]
        for _ in range(5):
            done = subprocess.run(argv, capture_output=True, text=True, check=False, timeout=60)
            if done.returncode == 0:
                return
            if "unable to freeze" not in done.stderr:
                break
            time.sleep(1)  # a moment for the tasks that would not freeze
        raise subprocess.CalledProcessError(done.returncode, argv, done.stdout, done.stderr)

    def restore_worker(self, worker: str) -> None:
        subprocess.run(["docker", "unpause", self.node_container(worker)], check=True, timeout=60)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                self.run_kubectl(worker, "get", "--raw", "/readyz", timeout=10)
                return
            except (subprocess.CalledProcessError, subprocess.TimeoutExpired):
                time.sleep(1)
        raise TimeoutError(f"{worker} did not become ready within 180 s after unpausing")


def _install_components() -> None:
    """Images into the clusters, then Kueue everywhere, then (once Kueue's webhooks answer: they admit Deployments
    too) Tekton on the workers, each waited for."""
    from e2e.kind import clusters, components
    from e2e.kind.node import say

    images = components.build_images()
    configs = {cluster: clusters.kubeconfig(NAMES[cluster]) for cluster in CLUSTERS}
    for cluster in CLUSTERS:
        components.load_images(NAMES[cluster], images["manager" if cluster == "manager" else "worker"])
        say(f"installing Kueue on {NAMES[cluster]}")
        components.apply(configs[cluster], components.kueue_manifests(multikueue=cluster != "manager"), "apply Kueue")
    for cluster in CLUSTERS:
        components.wait_rollout(configs[cluster], components.KUEUE_NAMESPACE, "kueue-controller-manager")
        components.wait_admitted(configs[cluster], components.KUEUE_PROBE, f"Kueue's webhooks on {NAMES[cluster]}")
        say(f"installing Tekton on {NAMES[cluster]}" + (" (its CRDs only)" if cluster == "manager" else ""))
        components.apply(configs[cluster], components.tekton_manifests(controller=cluster != "manager"), "apply Tekton")
    for cluster in WORKERS:
        components.wait_rollout(configs[cluster], components.TEKTON_NAMESPACE, "tekton-pipelines-controller")
        components.default_storage(configs[cluster])
    say("Kueue on mk-manager, mk-worker1, mk-worker2; Tekton and local-path storage on the workers: ready")


def _merged_kubeconfig(paths: dict[str, Path]) -> dict[str, Any]:
    """One kubeconfig with a cluster, user and context per cluster, named by the suite's bare names."""
    merged: dict[str, Any] = {"apiVersion": "v1", "kind": "Config", "clusters": [], "users": [], "contexts": []}
    for name, path in paths.items():
        document = yaml.safe_load(path.read_text())
        merged["clusters"].append({"name": name, "cluster": document["clusters"][0]["cluster"]})
        merged["users"].append({"name": name, "user": document["users"][0]["user"]})
        merged["contexts"].append({"name": name, "context": {"cluster": name, "user": name}})
    merged["current-context"] = "manager"
    return merged
