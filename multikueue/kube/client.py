"""One ``ApiClient`` per cluster, built from a kubeconfig document, never the global default, always timed out.

kubernetes_asyncio sends a request with *no timeout at all* unless ``_request_timeout`` is passed on that call
(rest.py builds an empty ``aiohttp.ClientTimeout``), so a hung worker would stall a reconcile forever. This
client fills in a default for every call that does not set its own; watches pass their own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import aiohttp
from aiolimiter import AsyncLimiter
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import kube_config
from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader

DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=30, connect=5, sock_connect=5)
"""Total and connect bounds for a request that sets none (watches set their own)."""

Timeout = float | tuple[float, float] | aiohttp.ClientTimeout
"""Seconds in total, a (connect, read) pair, or an ``aiohttp.ClientTimeout``."""


def raw_body(obj: dict[str, Any]) -> Any:
    """Pass a plain dict as a request body: the client sends it as-is, while its stubs ask for model classes."""
    return obj


def _client_timeout(timeout: Timeout | tuple[float]) -> float | aiohttp.ClientTimeout:
    if isinstance(timeout, tuple):
        connect, read = (timeout[0], None) if len(timeout) == 1 else timeout
        return aiohttp.ClientTimeout(connect=connect, sock_connect=connect, sock_read=read)
    return timeout


class RateLimit(Protocol):
    """An async context manager entered before each request (``aiolimiter.AsyncLimiter`` is one)."""

    async def __aenter__(self) -> Any: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Any: ...


def rate_limit(qps: float, burst: int) -> AsyncLimiter:
    """``burst`` requests at once, refilled at ``qps`` per second (client-go's token-bucket semantics)."""
    return AsyncLimiter(max_rate=burst, time_period=burst / qps)


class ApiClient(k8s_client.ApiClient):
    """``kubernetes_asyncio.client.ApiClient`` with a default timeout on every request, and optionally a rate limit."""

    def __init__(
        self,
        configuration: k8s_client.Configuration,
        *,
        timeout: Timeout = DEFAULT_TIMEOUT,
        limiter: RateLimit | None = None,
        on_error: Callable[[str], None] | None = None,
        on_request: Callable[[str], None] | None = None,
    ) -> None:
        super().__init__(configuration=configuration)
        self.default_timeout = timeout
        self.limiter = limiter
        self.on_error = on_error  # called with the HTTP status (or "connection") of each failed request
        self.on_request = on_request  # called with the HTTP method of every request (a watch counts once)

    def request(
        self,
        method: str,
        url: str,
        query_params: Any = None,
        headers: Any = None,
        post_params: Any = None,
        body: Any = None,
        _preload_content: bool = True,
        _request_timeout: Timeout | tuple[float] | None = None,
    ) -> Any:
        call = functools.partial(
            super().request,
            method,
            url,
            query_params=query_params,
            headers=headers,
            post_params=post_params,
            body=body,
            _preload_content=_preload_content,
            _request_timeout=_client_timeout(self.default_timeout if _request_timeout is None else _request_timeout),
        )
        if self.on_request is not None:
            self.on_request(method)
        if self.limiter is None and self.on_error is None:
            return call()
        return self._guarded(call)

    async def _guarded(self, call: Any) -> Any:
        try:
            if self.limiter is None:
                return await call()
            async with self.limiter:
                return await call()
        except ApiException as e:
            if self.on_error is not None:
                self.on_error(str(e.status))
            raise
        except (aiohttp.ClientError, TimeoutError, OSError):
            if self.on_error is not None:
                self.on_error("connection")
            raise


async def api_client_from_kubeconfig(
    kubeconfig: dict[str, Any],
    *,
    context: str | None = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
    temp_dir: Path | None = None,
    limiter: RateLimit | None = None,
    on_error: Callable[[str], None] | None = None,
    on_request: Callable[[str], None] | None = None,
) -> ApiClient:
    """Build a client for one cluster without touching kubernetes_asyncio's global default configuration.

    ``temp_dir`` is where the library writes ``*-data`` certificates as files (it cannot use them in memory).
    """
    configuration = k8s_client.Configuration()
    await kube_config.load_kube_config_from_dict(
        config_dict=kubeconfig,
        context=context,
        client_configuration=configuration,
        temp_file_path=str(temp_dir) if temp_dir else None,
    )
    return ApiClient(configuration, timeout=timeout, limiter=limiter, on_error=on_error, on_request=on_request)


async def in_cluster_api_client(*, timeout: Timeout = DEFAULT_TIMEOUT) -> ApiClient:
    """A client from the pod's service account (what the manager-cluster Deployment uses)."""
    configuration = k8s_client.Configuration()
    InClusterConfigLoader(
        token_filename="/var/run/secrets/kubernetes.io/serviceaccount/token",
        cert_filename="/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
    ).load_and_set(configuration)
    return ApiClient(configuration, timeout=timeout)
