"""API errors by what they mean, and as users read them.

Every failed request through ``kube/`` raises a ``KubeError``, and nothing else (no ``aiohttp`` or socket error leaves
``kube/``):

- ``ApiError``: the server answered with an error; a subclass per meaning (``NotFound``, ``Conflict``, ``Gone``,
  ``Refused``...), so code outside ``kube/`` says ``except NotFound`` rather than comparing HTTP codes;
- ``Unreachable``: no answer (connection refused, name not found, TLS handshake failed, timed out, connection lost),
  with whether the request may have reached the server (``maybe_done``);
- ``StreamBroken``: an answer cut short or unreadable (a watch or log stream ending mid-body, a garbled line);
- ``CredentialsUnavailable``: no credential just now, the request not sent.

``str()`` of an ``ApiError`` keeps the answer's headers and raw body for debugging, which a log line or a condition
message must never carry: everything that reports an API failure goes through ``describe``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass

__all__ = [
    "NO_ANSWER", "TRANSIENT",
    "ApiError", "BadRequest", "Busy", "Conflict", "CredentialsUnavailable",
    "Forbidden", "Gone", "Invalid", "KubeError", "KubeconfigError", "NotFound",
    "Refused", "StreamBroken", "Summary", "Unauthorized", "Unreachable",
    "describe", "outcome_unknown", "refused", "status_of", "summary",
]  # fmt: skip


class KubeconfigError(ValueError):
    """A kubeconfig (or the pod's service account) that cannot be used: one line naming the field and value."""


class KubeError(Exception):
    """Any way a call through ``kube/`` fails: every one is retried (with backoff) by a controller, never a crash."""


class Unreachable(KubeError):
    """No answer came: the connection was refused, the name not found, the TLS handshake failed, the request timed
    out or the connection was lost. ``maybe_done``: whether the request may have reached the server (``False`` only
    when no connection was ever made for it). ``str()`` is one line naming the server and why."""

    def __init__(self, message: str, *, maybe_done: bool) -> None:
        super().__init__(message)
        self.maybe_done = maybe_done


class StreamBroken(KubeError):
    """An answer cut short or unreadable: a watch or log stream that ended mid-body, went silent past its read
    timeout, or carried a line that is not JSON. The stream is started again; nothing it said is lost for good."""


class CredentialsUnavailable(KubeError):
    """No credential could be had for a request just now (an exec plugin failed or timed out, a token file could
    not be read): the request was not sent, and is retried like one that got no answer. Never a configuration
    error: a plugin that fails once must not end a running controller."""


class ApiError(KubeError):
    """A failed API call: the HTTP status, the reason phrase, the raw body and the answer's headers."""

    def __init__(
        self, status: int, reason: str = "", body: bytes | str | None = None, headers: Mapping[str, str] | None = None
    ) -> None:
        self.status = status
        self.reason = reason
        self.body = body.decode(errors="replace") if isinstance(body, bytes) else body
        self.headers: Mapping[str, str] = headers or {}
        super().__init__(status, reason)

    def __str__(self) -> str:
        headers = "".join(f"\n{k}: {v}" for k, v in self.headers.items())
        return f"({self.status})\nReason: {self.reason}{headers}\nBody: {self.body}"


class Refused(ApiError):
    """ "This cluster will not take this request as it is" (bad request, forbidden, not found, invalid): the same
    write to the same cluster gets the same answer."""


class BadRequest(Refused):
    """400"""


class Forbidden(Refused):
    """403"""


class NotFound(Refused):
    """404: the object, or its namespace, or the resource itself."""


class Invalid(Refused):
    """422: the object fails validation."""


class Unauthorized(ApiError):
    """401: the credentials are not accepted."""


class Conflict(ApiError):
    """409: the object already exists (on create), or it changed since the resourceVersion the write carried."""


class Gone(ApiError):
    """410: the watch history asked for is gone; list again."""


class Busy(ApiError):
    """429 or 503: the server is starting or shedding load; its ``Retry-After`` says when to come back."""


_BY_CODE: dict[int, type[ApiError]] = {
    400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone, 422: Invalid,
    429: Busy, 503: Busy,
}  # fmt: skip


def refused(status: int, reason: str = "", body: bytes | str | None = None, headers: Mapping[str, str] | None = None
            ) -> ApiError:  # fmt: skip
    """The ``ApiError`` subclass an HTTP answer's code means, with the answer kept."""
    return _BY_CODE.get(status, ApiError)(status, reason, body, headers)


@dataclass(frozen=True)
class Summary:
    code: int
    reason: str  # the Status reason (NotFound, Forbidden, Invalid, ...) or the HTTP reason phrase
    message: str  # the API's own message

    def __str__(self) -> str:
        return f"HTTP {self.code} {self.reason}: {self.message}" if self.message else f"HTTP {self.code} {self.reason}"


def summary(error: ApiError) -> Summary:
    """The code, reason and message of a failed API call (the Status body when there is one)."""
    code = int(error.status or 0)
    reason, message = str(error.reason or ""), ""
    try:
        body = json.loads(error.body or "{}")
    except (TypeError, ValueError):
        body = {}
    if isinstance(body, dict):
        reason = str(body.get("reason") or reason)
        message = str(body.get("message") or "")
    return Summary(code, reason, message)


NO_ANSWER: tuple[type[KubeError], ...] = (Unreachable, StreamBroken)
"""A request that got no answer, or no whole answer: what was sent may or may not have been carried out."""

TRANSIENT: tuple[type[KubeError], ...] = (CredentialsUnavailable, *NO_ANSWER)
"""A request that got no answer, or could not be sent for want of a credential just now: nothing was refused."""


def describe(error: BaseException) -> str:
    """One line for any failure: API errors without headers, the other ``KubeError``s as their own one line, others
    as ``Type: text``."""
    if isinstance(error, ApiError):
        return str(summary(error))
    text = str(error)
    if isinstance(error, KubeError) and text:
        return text
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def outcome_unknown(error: BaseException) -> bool:
    """Whether a failed write may still have been carried out: no answer came (a timeout, a connection lost after
    the request went out) or the server failed midway (a 5xx other than 503, which is sent before any work). Such a
    write is never taken as not done: what it wrote is read back before anything depends on it."""
    if isinstance(error, ApiError):
        return error.status >= 500 and error.status != 503
    if isinstance(error, Unreachable):
        return error.maybe_done  # False: no connection was ever made for it
    return not isinstance(error, CredentialsUnavailable)  # not sent at all


def status_of(error: BaseException) -> int | None:
    """The HTTP code of an API error, ``None`` for anything else."""
    return error.status if isinstance(error, ApiError) and error.status else None
