"""API errors as users read them: the HTTP code, the API's reason and message, never the response headers.

``str(ApiException)`` dumps the response headers and the raw body, which is what a log line or a condition
message must never carry. Everything that reports an API failure goes through ``describe``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# The client's own exception types, re-exported: code outside kube/ catches them from here, never from the client.
from kubernetes_asyncio.client.exceptions import ApiException as ApiException
from kubernetes_asyncio.config.config_exception import ConfigException as KubeconfigError

__all__ = ["REFUSALS", "ApiError", "ApiException", "KubeconfigError", "api_error", "describe", "status_of"]

REFUSALS = frozenset({400, 403, 404, 422})
"""Answers that say "this cluster will not take this object" (bad request, forbidden, namespace missing, invalid):
retrying the same write to the same cluster gives the same answer."""


@dataclass(frozen=True)
class ApiError:
    code: int
    reason: str  # the Status reason (NotFound, Forbidden, Invalid, ...) or the HTTP reason phrase
    message: str  # the API's own message

    def __str__(self) -> str:
        return f"HTTP {self.code} {self.reason}: {self.message}" if self.message else f"HTTP {self.code} {self.reason}"


def api_error(error: ApiException) -> ApiError:
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
    return ApiError(code, reason, message)


def describe(error: BaseException) -> str:
    """One line for any failure: API errors without headers, others as ``Type: text``."""
    if isinstance(error, ApiException):
        return str(api_error(error))
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


def status_of(error: BaseException) -> int | None:
    """The HTTP code of an API error, ``None`` for anything else."""
    return int(error.status) if isinstance(error, ApiException) and error.status else None
