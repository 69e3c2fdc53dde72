"""Leader election on a coordination.k8s.io Lease, with kubernetes_asyncio's LeaderElection behind one call."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from kubernetes_asyncio.leaderelection.electionconfig import Config as ElectionConfig
from kubernetes_asyncio.leaderelection.leaderelection import LeaderElection
from kubernetes_asyncio.leaderelection.resourcelock.leaselock import LeaseLock

from multikueue.kube.client import ApiClient


async def contend(
    api: ApiClient,
    *,
    namespace: str,
    name: str,
    identity: str,
    lease_duration: int,
    renew_deadline: float,
    retry_period: float,
    on_acquired: Callable[[], Coroutine[Any, Any, None]],
    on_lost: Callable[[], Coroutine[Any, Any, None]],
) -> None:
    """Try for the Lease until it is held, keep renewing it, and return once a held Lease could not be renewed.

    kubernetes_asyncio runs ``on_acquired`` as a free task that nothing awaits or cancels: it should only signal.
    """
    lock = LeaseLock(name, namespace, identity, api)
    config = ElectionConfig(lock, lease_duration, renew_deadline, retry_period, on_acquired, on_lost)
    await LeaderElection(config).run()
