"""Delegated authentication and authorisation, as a kube-apiserver extension does it: a bearer token reviewed by
the API server (TokenReview), then the identity it belongs to checked against RBAC (SubjectAccessReview).

The controller's own identity needs ``create`` on ``tokenreviews.authentication.k8s.io`` and
``subjectaccessreviews.authorization.k8s.io``. Failures raise what the client raises (``kube.errors.ApiError``, or
one of ``kube.client.TRANSIENT`` when no answer came).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from multikueue.kube.client import ApiClient, Timeout

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True)
class UserInfo:
    """Who a token belongs to (TokenReview ``status.user``); hashable, so a decision about it can be cached."""

    username: str
    uid: str = ""
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()  # sorted by key

    @classmethod
    def of(cls, user: dict[str, Any]) -> UserInfo:
        extra = user.get("extra") or {}
        return cls(
            username=str(user.get("username") or ""),
            uid=str(user.get("uid") or ""),
            groups=tuple(str(g) for g in user.get("groups") or ()),
            extra=tuple(sorted((str(k), tuple(str(v) for v in values or ())) for k, values in extra.items())),
        )


@dataclass(frozen=True)
class AccessDecision:
    allowed: bool
    reason: str = ""  # the authorizer's, e.g. the RBAC binding that allowed it; often empty on a denial


async def review_token(api: ApiClient, token: str, *, timeout: Timeout) -> UserInfo | None:
    """The identity the API server says ``token`` belongs to, or ``None`` when it does not authenticate."""
    body = {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}}
    answer = await api.request("POST", TOKEN_REVIEWS, body=body, timeout=timeout)
    status = (answer or {}).get("status") or {}
    if not status.get("authenticated"):
        return None
    return UserInfo.of(status.get("user") or {})


async def review_access(api: ApiClient, user: UserInfo, path: str, verb: str, *, timeout: Timeout) -> AccessDecision:
    """May ``user`` send ``verb`` to the non-resource URL ``path`` (RBAC's ``nonResourceURLs``)?"""
    spec: dict[str, Any] = {"user": user.username, "groups": list(user.groups),
                            "nonResourceAttributes": {"path": path, "verb": verb}}  # fmt: skip
    if user.uid:
        spec["uid"] = user.uid
    if user.extra:
        spec["extra"] = {k: list(v) for k, v in user.extra}
    body = {"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview", "spec": spec}
    answer = await api.request("POST", ACCESS_REVIEWS, body=body, timeout=timeout)
    status = (answer or {}).get("status") or {}
    # ``denied`` short-circuits other authorizers; either way only ``allowed`` lets a caller in.
    return AccessDecision(bool(status.get("allowed")) and not status.get("denied"), str(status.get("reason") or ""))
