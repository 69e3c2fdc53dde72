"""When a credential stops working, read from the credential itself: a JWT bearer token's ``exp`` claim (a
ServiceAccount token from the TokenRequest API, an OIDC id-token), a client certificate's ``notAfter``, an exec
plugin's ``expirationTimestamp``. Pure: the token's signature is not checked (the server does that), only read.
"""

from __future__ import annotations

import base64
import datetime
import json


def token_expiry(token: str) -> float | None:
    """The ``exp`` of a JWT (seconds since the epoch); ``None`` for a token that is not a JWT or never expires
    (a legacy ServiceAccount token Secret has no ``exp``)."""
    return number_claim(jwt_claims(token), "exp")


def jwt_claims(token: str) -> dict[str, object]:
    """The claims of a JWT, read without checking its signature; empty for a token that is not a JWT."""
    parts = token.split(".")
    if len(parts) != 3:
        return {}
    try:
        claims = json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, TypeError):
        return {}
    return claims if isinstance(claims, dict) else {}


def number_claim(claims: dict[str, object], name: str) -> float | None:
    """A NumericDate claim (``exp``, ``iat``) as seconds since the epoch; ``None`` when absent or not a number."""
    value = claims.get(name)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def certificate_expiry(pem: bytes) -> float | None:
    """The ``notAfter`` of the first certificate in ``pem``; ``None`` if it cannot be read."""
    from cryptography import x509  # only where a client certificate is used: ~10 MiB resident once imported

    try:
        certificate = x509.load_pem_x509_certificate(pem)
    except ValueError:
        return None
    return certificate.not_valid_after_utc.timestamp()


def timestamp_expiry(timestamp: object) -> float | None:
    """An RFC 3339 ``expirationTimestamp`` as seconds since the epoch; ``None`` when absent or unreadable."""
    if not timestamp:
        return None
    try:
        return datetime.datetime.fromisoformat(str(timestamp).replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def earliest(*expiries: float | None) -> float | None:
    """The first of several expiries (a token and a certificate both used), ``None`` if none expires."""
    known = [e for e in expiries if e is not None]
    return min(known) if known else None
