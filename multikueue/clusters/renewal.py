"""When a worker's ServiceAccount token is renewed, how long the new one lives, and the kubeconfig that carries it.
Pure: the TokenRequest and the Secret write are ``clusters.renewer``'s."""

from __future__ import annotations

MIN_TOKEN_SECONDS = 600
"""The shortest lifetime the API server grants a TokenRequest."""

KUBELET_MAX_AGE = 24 * 3600.0
"""The kubelet renews a projected token once it is a day old, whatever its lifetime."""

RETRY_FIRST, RETRY_MAX = 5.0, 320.0


def renew_in(issued_at: float, expires_at: float, now: float, renew_after: float) -> float:
    """Seconds from ``now`` until the token is renewed (0 or less: now): once ``renew_after`` of its lifetime has
    passed, or it is a day old, as the kubelet renews projected tokens. Times in seconds since the epoch."""
    lifetime = max(0.0, expires_at - issued_at)
    return issued_at + min(lifetime * renew_after, KUBELET_MAX_AGE) - now


def requested_lifetime(token_lifetime: float, configured: float | None) -> int:
    """Seconds of life to ask for: the configured lifetime, else the current token's own; never below what the API
    server grants."""
    return max(MIN_TOKEN_SECONDS, round(configured if configured else token_lifetime))


def retry_in(failures: int, expires_at: float, now: float) -> float:
    """After ``failures`` failed renewals in a row: 5 s doubling to 320 s, and never past the middle of what is left
    of the token's life, so a passing fault still has tries left before it lapses (at least 1 s apart)."""
    backoff = min(RETRY_FIRST * float(2 ** min(max(failures - 1, 0), 10)), RETRY_MAX)
    if expires_at <= now:  # lapsed: nothing left to save, so no hurry either
        return backoff
    return max(1.0, min(backoff, (expires_at - now) / 2))


def with_token(kubeconfig: bytes, old: str, new: str) -> bytes:
    """The kubeconfig with its token ``old`` replaced by ``new`` and nothing else changed (layout, comments, other
    entries kept). Raises ``ValueError`` when ``old`` is not in it (the Secret changed meanwhile)."""
    if not old or old.encode() not in kubeconfig:
        raise ValueError("the token in use is not in the kubeconfig")
    return kubeconfig.replace(old.encode(), new.encode())
