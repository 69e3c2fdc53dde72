"""Renewing a worker's ServiceAccount token without a person (MultiKueueClusters annotated
``multikueue.x-k8s.io/renew-token: "true"``).

Before the token in the kubeconfig Secret lapses, the dispatcher asks the worker, with that still-valid token, for a
fresh one for the same ServiceAccount (TokenRequest) and writes it into the Secret, replacing only the token and only
if the Secret is unchanged meanwhile. The Secret's watch then brings the new kubeconfig to the cluster reconciler,
which swaps the credential of the live connection in place (``WorkerConnection.renew_credentials``): nothing
reconnects. A refusal (no RBAC on the worker for the token, none on the manager for the Secret) is a Warning Event
on the MultiKueueCluster and a line in its ``Active`` message, retried with backoff while the old token still works.
"""

from __future__ import annotations

import base64
import time
from dataclasses import dataclass
from typing import Any

import structlog

from multikueue.clusters import renewal
from multikueue.clusters.connections import WorkerConnection
from multikueue.config import TokenRenewal
from multikueue.kube import core, events
from multikueue.kube.addresses import MULTIKUEUE_CLUSTERS
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import Conflict, KubeError, describe
from multikueue.kube.serviceaccounts import ServiceAccountToken, request_token, service_account_token
from multikueue.labels import RENEW_TOKEN_ANNOTATION
from multikueue.runtime.informer import Informer, ObjectKey

log = structlog.get_logger(__name__)
Object = dict[str, Any]
SECRET_KEY = "kubeconfig"
CONFLICT_RETRY = 1.0  # the Secret changed meanwhile: its watch brings the new one, looked at again soon


@dataclass(frozen=True)
class Outcome:
    """What a pass learnt: when to look again (``None``: no need), and a problem to show on the MultiKueueCluster."""

    next_check: float | None = None
    problem: str | None = None


@dataclass
class _Failing:
    failures: int = 0
    next_try: float = 0.0  # time.time() of the next attempt
    problem: str | None = None
    token: tuple[float, float] = (0.0, 0.0)  # (iat, exp) of the token failing: one replaced by hand starts afresh


def opted_in(cluster: Object) -> bool:
    return (cluster["metadata"].get("annotations") or {}).get(RENEW_TOKEN_ANNOTATION) == "true"


class TokenRenewer:
    def __init__(self, settings: TokenRenewal, manager: ApiClient, secrets: Informer, namespace: str,
                 component: str) -> None:  # fmt: skip
        self.settings = settings
        self.manager = manager
        self.secrets = secrets
        self.namespace = namespace
        self.component = component
        self.failing: dict[str, _Failing] = {}

    def renews(self, cluster: Object, token: str | None) -> bool:
        """Whether this dispatcher renews the token (opted in, a ServiceAccount token, and its renewals not failing):
        its expiry is then no person's deadline (the metric's ``renewable`` label, which the expiry alert reads)."""
        failing = self.failing.get(cluster["metadata"]["name"])
        if failing is not None and failing.failures > 0:
            return False
        return opted_in(cluster) and token is not None and service_account_token(token) is not None

    def forget(self, name: str) -> None:
        self.failing.pop(name, None)

    async def check(self, cluster: Object, connection: WorkerConnection, secret_name: str | None) -> Outcome:
        """Renew the connection's token if the cluster opted in and the time has come."""
        name = cluster["metadata"]["name"]
        if not opted_in(cluster) or connection.api is None or secret_name is None:
            self.forget(name)
            return Outcome()
        token = connection.api.access.token or ""
        account = service_account_token(token)
        if account is None:
            problem = (
                f'token renewal: the kubeconfig in Secret "{secret_name}" has no ServiceAccount token to renew (a '
                "JWT with sub system:serviceaccount:NAMESPACE:NAME, iat and exp)"
            )
            await self._report(cluster, self.failing.setdefault(name, _Failing()), problem)
            return Outcome(problem=problem)
        failing, now = self.failing.get(name), time.time()
        if failing is not None and (failing.failures == 0 or failing.token != (account.issued_at, account.expires_at)):
            self.forget(name)  # the token's kind was the only problem, or the token was replaced: afresh
            failing = None
        wait = renewal.renew_in(account.issued_at, account.expires_at, now, self.settings.renew_after)
        if failing is not None and failing.next_try > now:
            wait = max(wait, failing.next_try - now)
        if wait > 0:
            return Outcome(wait, failing.problem if failing else None)
        return await self._renew(cluster, connection, secret_name, token, account)

    async def _renew(self, cluster: Object, connection: WorkerConnection, secret_name: str, token: str,
                     account: ServiceAccountToken) -> Outcome:  # fmt: skip
        name = cluster["metadata"]["name"]
        secret = self.secrets.get(ObjectKey(self.namespace, secret_name))
        raw = base64.b64decode(((secret or {}).get("data") or {}).get(SECRET_KEY) or "")
        if secret is None or token.encode() not in raw:
            return Outcome(CONFLICT_RETRY)  # the Secret changed and the connection has not followed yet
        assert connection.api is not None
        lifetime = renewal.requested_lifetime(account.lifetime, self.settings.expiration)
        try:
            new = await request_token(connection.api, account.namespace, account.name, expiration_seconds=lifetime,
                                      audiences=account.audiences)  # fmt: skip
        except KubeError as e:
            return await self._failed(cluster, account, f"the worker did not grant a new token for ServiceAccount "
                                      f"{account.account}: {describe(e)}")  # fmt: skip
        renewed = service_account_token(new)
        if renewed is None or renewed.account != account.account:
            return await self._failed(cluster, account, f"the worker's answer for ServiceAccount {account.account} "
                                      "is not a token for that account")  # fmt: skip
        try:
            written = await core.patch_secret_data(self.manager, self.namespace, secret_name,
                                                   secret["metadata"]["resourceVersion"], SECRET_KEY,
                                                   renewal.with_token(raw, token, new))  # fmt: skip
        except Conflict:
            return Outcome(CONFLICT_RETRY)
        except KubeError as e:
            return await self._failed(cluster, account, f'the new token cannot be written into Secret '
                                      f'"{self.namespace}/{secret_name}": {describe(e)}')  # fmt: skip
        self.secrets.remember(written)  # the next pass reads the new kubeconfig, and swaps it in
        self.forget(name)
        log.info("worker token renewed", cluster=name, service_account=account.account, secret=secret_name,
                 lifetime=lifetime)  # fmt: skip
        await self._event(cluster, "Normal", "TokenRenewed",
                          f"renewed the token of ServiceAccount {account.account} on worker {name} "
                          f"(Secret {self.namespace}/{secret_name}, {lifetime}s)")  # fmt: skip
        return Outcome(0.0)

    async def _failed(self, cluster: Object, account: ServiceAccountToken, why: str) -> Outcome:
        name = cluster["metadata"]["name"]
        failing = self.failing.setdefault(name, _Failing())
        failing.failures += 1
        failing.token = (account.issued_at, account.expires_at)
        now = time.time()
        delay = renewal.retry_in(failing.failures, account.expires_at, now)
        failing.next_try = now + delay
        until = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(account.expires_at))
        problem = f"token renewal failed: {why}; the current token works until {until}"
        await self._report(cluster, failing, problem)
        log.warning("worker token renewal failed", cluster=name, service_account=account.account, error=why,
                    retry_in=delay)  # fmt: skip
        return Outcome(delay, problem)

    async def _report(self, cluster: Object, failing: _Failing, problem: str) -> None:
        """A Warning Event when the problem is new (not one per retry)."""
        if failing.problem == problem:
            return
        failing.problem = problem
        await self._event(cluster, "Warning", "TokenRenewalFailed", f"worker {cluster['metadata']['name']}: {problem}")

    async def _event(self, cluster: Object, type_: str, reason: str, message: str) -> None:
        obj = {**cluster, "apiVersion": MULTIKUEUE_CLUSTERS.api_version, "kind": MULTIKUEUE_CLUSTERS.kind}
        await events.record(self.manager, obj, type_=type_, reason=reason, message=message, component=self.component)
