"""Where the e2e suite's three clusters and the dispatcher come from.

A provider gives admin access to ``manager``, ``worker1`` and ``worker2`` from the test process, tells how the
dispatcher reaches each worker (the server URL written into its kubeconfig Secret), runs the dispatcher as its
own process or container with the shipped ``multikueue-controller`` ServiceAccount, and can take a worker away
and bring it back. Everything else the suite does goes through the Kubernetes API (and kubectl).
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any

CLUSTERS = ("manager", "worker1", "worker2")
WORKERS = ("worker1", "worker2")
PROVIDERS = ("local", "testcontainers", "kind")


class ProviderUnavailable(RuntimeError):
    """The provider cannot run on this machine; the message says what is missing and how to get it."""


class Environment(ABC):
    name: str
    # Where no Kueue (or Tekton) controller runs, the suite writes the status they would (as the demo does).
    plays_kueue = True
    # The dispatcher's configuration (a Configuration document) in place of config/manager's, where it needs more.
    dispatcher_config: Path | None = None

    @abstractmethod
    def start(self) -> None:
        """Bring the three clusters up, with Kueue's and Tekton's CRDs installed."""

    @abstractmethod
    def stop(self) -> None:
        """Remove everything this provider started."""

    @abstractmethod
    def kubeconfig(self, cluster: str) -> dict[str, Any]:
        """An admin kubeconfig for ``cluster``, usable from the test process."""

    @property
    @abstractmethod
    def kubeconfig_path(self) -> Path:
        """One kubeconfig file with a context per cluster, for kubectl."""

    @property
    @abstractmethod
    def kubectl(self) -> str:
        """The kubectl program to use."""

    @abstractmethod
    def server_seen_by_dispatcher(self, cluster: str) -> str:
        """The URL the dispatcher uses for ``cluster`` (inside a container network it is not the host's)."""

    @abstractmethod
    def start_dispatcher(self, manager_kubeconfig: dict[str, Any] | None = None) -> None:
        """Run ``multikueue run`` with the shipped Deployment's arguments as the given identity (``None``: start
        it again as before, as a restarted pod would)."""

    @abstractmethod
    def stop_dispatcher(self, *, kill: bool = False) -> None:
        """SIGKILL with ``kill`` (a crash), else a graceful stop."""

    @abstractmethod
    def dispatcher_log(self) -> str:
        """What the dispatcher printed, for failure messages."""

    @abstractmethod
    def lose_worker(self, worker: str) -> None:
        """Make ``worker`` unreachable for the dispatcher (its data is kept)."""

    @abstractmethod
    def restore_worker(self, worker: str) -> None:
        """Make ``worker`` reachable again and wait until it serves."""


def dispatcher_args(metrics_address: str, health_address: str) -> list[str]:
    """The ``run`` arguments of config/manager/deployment.yaml, so every provider runs the dispatcher as shipped."""
    return [
        "--leader-elect",
        "--leader-elect-namespace=multikueue-system",
        "--config-namespace=multikueue-system",
        "--config-name=multikueue-config",
        f"--metrics-bind-address={metrics_address}",
        f"--health-probe-bind-address={health_address}",
        "--log-format=json",
    ]


def environment(name: str | None = None) -> Environment:
    """The provider named by ``name`` or ``$MULTIKUEUE_E2E_PROVIDER`` (default ``local``)."""
    name = name or os.environ.get("MULTIKUEUE_E2E_PROVIDER", "local")
    if name == "local":
        from e2e.providers.local import LocalEnvironment

        return LocalEnvironment()
    if name == "testcontainers":
        from e2e.providers.containers import ContainersEnvironment

        return ContainersEnvironment()
    if name == "kind":
        from e2e.providers.kind import KindEnvironment

        return KindEnvironment()
    raise ProviderUnavailable(f"unknown e2e provider {name!r}; choose one of {', '.join(PROVIDERS)}")
