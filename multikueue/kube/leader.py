"""Leader election on a coordination.k8s.io Lease, as client-go's ``leaderelection`` does it.

A candidate reads the Lease; it takes it when there is none, when it already holds it, or when the holder has not
renewed it for ``leaseDurationSeconds`` *as this candidate observed* (its own monotonic clock: clocks of different
machines are never compared). Every write carries the resourceVersion it read, so of two candidates only one wins.
The leader renews every ``retry_period``; when no renewal succeeds for ``renew_deadline`` it has lost the Lease.
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from multikueue.kube.client import ApiClient
from multikueue.kube.errors import KubeError, NotFound, describe

log = structlog.get_logger(__name__)

Object = dict[str, Any]


def _now() -> str:
    """A MicroTime, as the Lease's ``acquireTime`` and ``renewTime`` are."""
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def next_spec(current: Object | None, identity: str, lease_duration: int, now: str) -> Object:
    """The Lease spec this candidate writes over ``current`` (``None``: there is no Lease yet)."""
    current = current or {}
    holder = current.get("holderIdentity")
    kept = holder == identity
    transitions = int(current.get("leaseTransitions") or 0) + (1 if holder and not kept else 0)
    return {
        "holderIdentity": identity,
        "leaseDurationSeconds": lease_duration,
        "acquireTime": current.get("acquireTime") if kept and current.get("acquireTime") else now,
        "renewTime": now,
        "leaseTransitions": transitions,
    }


def released_spec(current: Object, now: str) -> Object:
    """The spec a leader writes to give the Lease up (client-go's ``ReleaseOnCancel``): no holder, so a standby
    takes it at its next attempt instead of waiting out ``leaseDurationSeconds``."""
    return {
        "holderIdentity": "",
        "leaseDurationSeconds": 1,
        "acquireTime": now,
        "renewTime": now,
        "leaseTransitions": int(current.get("leaseTransitions") or 0),
    }


@dataclass
class Election:
    api: ApiClient
    namespace: str
    name: str
    identity: str
    lease_duration: int
    observed: Object | None = None  # the Lease spec as last read
    observed_at: float = 0.0  # when it last changed, by this process's monotonic clock

    @property
    def path(self) -> str:
        return f"/apis/coordination.k8s.io/v1/namespaces/{self.namespace}/leases/{self.name}"

    def held_by_another(self, spec: Object) -> bool:
        if spec != self.observed:
            self.observed, self.observed_at = spec, time.monotonic()
        holder = spec.get("holderIdentity")
        duration = int(spec.get("leaseDurationSeconds") or self.lease_duration)
        return bool(holder) and holder != self.identity and time.monotonic() < self.observed_at + duration

    async def try_acquire_or_renew(self) -> bool:
        """One attempt; ``False`` when the Lease is another's, a write lost a race, or the API did not answer."""
        try:
            return await self._attempt()
        except KubeError as e:
            log.warning(
                "leader lease not acquired or renewed", lease=f"{self.namespace}/{self.name}", error=describe(e)
            )
            return False

    async def _attempt(self) -> bool:
        try:
            lease: Object = await self.api.request("GET", self.path)
        except NotFound:
            spec = next_spec(None, self.identity, self.lease_duration, _now())
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace}, "spec": spec}  # fmt: skip
            await self.api.request("POST", self.path.rsplit("/", 1)[0], body=body)
            self.observed, self.observed_at = spec, time.monotonic()
            return True
        if self.held_by_another(lease.get("spec") or {}):
            return False
        lease["spec"] = next_spec(lease.get("spec"), self.identity, self.lease_duration, _now())
        written: Object = await self.api.request("PUT", self.path, body=lease)  # carries the resourceVersion read
        self.observed, self.observed_at = written.get("spec") or {}, time.monotonic()
        return True

    async def release(self) -> bool:
        """Give the Lease up if this candidate holds it; ``False`` when it does not or the API did not answer."""
        try:
            lease: Object = await self.api.request("GET", self.path)
            if (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            lease["spec"] = released_spec(lease.get("spec") or {}, _now())
            await self.api.request("PUT", self.path, body=lease)  # carries the resourceVersion read
        except KubeError as e:
            log.warning("leader lease not released", lease=f"{self.namespace}/{self.name}", error=describe(e))
            return False
        return True


async def release(api: ApiClient, *, namespace: str, name: str, identity: str) -> bool:
    """Give up the Lease ``identity`` holds, once its reconciles have stopped: the next leader starts at once."""
    return await Election(api, namespace, name, identity, lease_duration=1).release()


async def _renewed_within(election: Election, renew_deadline: float, retry_period: float) -> bool:
    """Retry the renewal every ``retry_period`` until it succeeds or ``renew_deadline`` has passed."""
    deadline = time.monotonic() + renew_deadline
    while (left := deadline - time.monotonic()) > 0:
        with anyio.move_on_after(left):
            if await election.try_acquire_or_renew():
                return True
        await anyio.sleep(min(retry_period, max(0.0, deadline - time.monotonic())))
    return False


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

    ``on_acquired`` is awaited in this task: it should only signal."""
    election = Election(api, namespace, name, identity, lease_duration)
    while True:  # polling the Lease is the protocol: nothing announces that its holder stopped renewing
        if await election.try_acquire_or_renew():
            break
        await anyio.sleep(retry_period)
    await on_acquired()
    while True:
        await anyio.sleep(retry_period)
        if not await _renewed_within(election, renew_deadline, retry_period):
            await on_lost()
            return
