"""Who may read ``/metrics``: which answer each step of a delegated review leads to (pure; the reviews themselves
are ``kube.reviews``, carried out by ``endpoints``).

As controller-runtime's metrics filter: no token or a token the API server does not recognise is 401, a known
identity RBAC does not allow is 403, a review that could not be made is a server-side failure (503 when the API
server did not answer, so a scraper retries; 500 when it refused, which needs an operator), never a 200.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from multikueue.kube.reviews import AccessDecision, UserInfo


@dataclass(frozen=True)
class Answer:
    status: int
    text: str


@dataclass(frozen=True)
class ReviewFailed:
    """A TokenReview or SubjectAccessReview that got no verdict."""

    review: str  # "TokenReview" or "SubjectAccessReview"
    detail: str  # one line, for the log
    answered: bool  # the API server answered with an error (vs. no answer: a timeout, a refused connection)


UNAUTHORIZED = Answer(401, "Unauthorized: send a ServiceAccount token as 'Authorization: Bearer <token>'")


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header (the scheme is case-insensitive), else ``None``."""
    scheme, _, token = (authorization or "").strip().partition(" ")
    token = token.strip()
    return token if scheme.lower() == "bearer" and token and " " not in token else None


def _failed(failure: ReviewFailed) -> Answer:
    if failure.answered:
        return Answer(500, f"{failure.review} failed: see the controller's log")
    return Answer(503, f"{failure.review} got no answer from the API server; try again")


def after_token_review(outcome: UserInfo | ReviewFailed | None) -> Answer | UserInfo:
    """The answer once the token is reviewed (``None``: no token, or one the API server does not authenticate), or
    the identity to authorise."""
    if outcome is None:
        return UNAUTHORIZED
    if isinstance(outcome, ReviewFailed):
        return _failed(outcome)
    return outcome


def after_access_review(user: UserInfo, verb: str, path: str, outcome: AccessDecision | ReviewFailed) -> Answer:
    """The answer once RBAC was asked whether ``user`` may ``verb`` the non-resource URL ``path``."""
    if isinstance(outcome, ReviewFailed):
        return _failed(outcome)
    if not outcome.allowed:
        return Answer(403, f"Forbidden: user {user.username!r} may not {verb} {path} (grant multikueue-metrics-reader)")
    return Answer(200, "")
