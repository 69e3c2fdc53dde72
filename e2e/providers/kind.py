"""``kind``: three kind clusters with real Kueue and Tekton, and the dispatcher deployed from config/manager
(e2e/kind/up.sh). For machines with Docker and internet access; elsewhere it stops at once, saying what is
missing. The dispatcher runs as the shipped Deployment, so stopping it scales that Deployment."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from e2e.providers import CLUSTERS, Environment, ProviderUnavailable

ROOT = Path(__file__).resolve().parents[2]
CONTEXT = {name: f"kind-mk-{name}" for name in CLUSTERS}


class KindEnvironment(Environment):
    name = "kind"
    plays_kueue = False  # real Kueue runs on every cluster

    def __init__(self) -> None:
        self.workdir = Path(tempfile.mkdtemp(prefix="multikueue-e2e-kind-"))
        self._kubeconfig: dict[str, Any] = {}
        self._created = False

    def start(self) -> None:
        missing = [tool for tool in ("kind", "docker", "kubectl") if shutil.which(tool) is None]
        if missing:
            raise ProviderUnavailable(
                f"the kind provider needs {', '.join(missing)} on PATH (and internet access for kind's node image "
                "and the Kueue and Tekton release manifests); use MULTIKUEUE_E2E_PROVIDER=local or testcontainers here"
            )
        self._created = True
        result = subprocess.run([str(ROOT / "e2e" / "kind" / "up.sh")], text=True, capture_output=True, timeout=1800)
        if result.returncode != 0:
            raise ProviderUnavailable(f"e2e/kind/up.sh failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
        exported = subprocess.run(
            ["kubectl", "config", "view", "--raw", "--flatten"], text=True, capture_output=True, check=True, timeout=60
        )
        self._kubeconfig = yaml.safe_load(exported.stdout)
        self.kubeconfig_path.write_text(exported.stdout)
        for cluster in CLUSTERS:  # the suite addresses clusters by their bare names
            for context in self._kubeconfig["contexts"]:
                if context["name"] == CONTEXT[cluster]:
                    self._kubeconfig["contexts"].append({"name": cluster, "context": context["context"]})
        self.kubeconfig_path.write_text(yaml.safe_dump(self._kubeconfig))

    def stop(self) -> None:
        if self._created and not os.environ.get("MULTIKUEUE_E2E_KIND_KEEP"):
            subprocess.run([str(ROOT / "e2e" / "kind" / "down.sh")], check=False, timeout=600)
        shutil.rmtree(self.workdir, ignore_errors=True)

    def kubeconfig(self, cluster: str) -> dict[str, Any]:
        document = dict(self._kubeconfig)
        document["current-context"] = CONTEXT[cluster]
        return document

    @property
    def kubeconfig_path(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def kubectl(self) -> str:
        return "kubectl"

    def server_seen_by_dispatcher(self, cluster: str) -> str:
        return f"https://mk-{cluster}-control-plane:6443"

    def _kubectl(self, cluster: str, *args: str) -> str:
        argv = ["kubectl", "--kubeconfig", str(self.kubeconfig_path), "--context", CONTEXT[cluster], *args]
        return subprocess.run(argv, text=True, capture_output=True, check=True, timeout=300).stdout

    def start_dispatcher(self, manager_kubeconfig: dict[str, Any] | None = None) -> None:
        # The Deployment runs with its own ServiceAccount: the identity the suite minted is the same one.
        deployment = ["-n", "multikueue-system", "deployment/multikueue-controller"]
        self._kubectl("manager", "scale", "--replicas=2", *deployment)
        self._kubectl("manager", "rollout", "status", "--timeout=300s", *deployment)

    def stop_dispatcher(self, *, kill: bool = False) -> None:
        self._kubectl("manager", "scale", "--replicas=0", "-n", "multikueue-system", "deployment/multikueue-controller")
        if kill:  # pods deleted with no grace, as a node failure would
            self._kubectl(
                "manager",
                "delete",
                "pods",
                "-n",
                "multikueue-system",
                "-l",
                "app.kubernetes.io/name=multikueue",
                "--grace-period=0",
                "--force",
            )

    def dispatcher_log(self) -> str:
        try:
            return self._kubectl(
                "manager", "logs", "-n", "multikueue-system", "-l", "app.kubernetes.io/name=multikueue", "--tail=60"
            )
        except subprocess.CalledProcessError as e:
            return f"(no logs: {e.stderr})"

    def lose_worker(self, worker: str) -> None:
        subprocess.run(["docker", "pause", f"mk-{worker}-control-plane"], check=True, timeout=60)

    def restore_worker(self, worker: str) -> None:
        subprocess.run(["docker", "unpause", f"mk-{worker}-control-plane"], check=True, timeout=60)
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            try:
                self._kubectl(worker, "get", "--raw", "/readyz")
                return
            except subprocess.CalledProcessError:
                time.sleep(1)
        raise TimeoutError(f"{worker} did not become ready within 180 s after unpausing")
