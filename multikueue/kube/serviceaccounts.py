"""ServiceAccount tokens: what a token says of itself (read, not verified: only for timing), and a fresh one for the
same account from the TokenRequest API (what ``kubectl create token`` calls)."""

from __future__ import annotations

from dataclasses import dataclass

from multikueue.kube.client import ApiClient
from multikueue.kube.expiry import jwt_claims, number_claim

SUBJECT_PREFIX = "system:serviceaccount:"


@dataclass(frozen=True)
class ServiceAccountToken:
    namespace: str
    name: str
    issued_at: float  # seconds since the epoch
    expires_at: float
    audiences: tuple[str, ...] = ()

    @property
    def account(self) -> str:
        return f"{self.namespace}/{self.name}"

    @property
    def lifetime(self) -> float:
        return self.expires_at - self.issued_at


def service_account_token(token: str) -> ServiceAccountToken | None:
    """The account and timing of a ServiceAccount JWT (``sub`` system:serviceaccount:NS:NAME, ``iat``, ``exp``);
    ``None`` for any other token (a legacy Secret token has no ``exp``, an OIDC token another subject)."""
    claims = jwt_claims(token)
    subject = claims.get("sub")
    issued, expires = number_claim(claims, "iat"), number_claim(claims, "exp")
    if not isinstance(subject, str) or not subject.startswith(SUBJECT_PREFIX) or issued is None or expires is None:
        return None
    namespace, _, name = subject.removeprefix(SUBJECT_PREFIX).partition(":")
    if not namespace or not name or expires <= issued:
        return None
    audience = claims.get("aud")
    audiences = [audience] if isinstance(audience, str) else audience if isinstance(audience, list) else []
    return ServiceAccountToken(namespace, name, issued, expires, tuple(a for a in audiences if isinstance(a, str)))


async def request_token(
    api: ApiClient, namespace: str, name: str, *, expiration_seconds: int, audiences: tuple[str, ...] = ()
) -> str:
    """A new token for the ServiceAccount ``namespace/name``, asked with ``api``'s own credential."""
    spec: dict[str, object] = {"expirationSeconds": expiration_seconds}
    if audiences:  # the same audiences as the token it replaces (the API server's own when none were asked)
        spec["audiences"] = list(audiences)
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": spec}
    path = f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token"
    answer = await api.request("POST", path, body=body)
    return str(((answer or {}).get("status") or {}).get("token") or "")
