"""One ``ApiClient`` per cluster, built from a kubeconfig document, never the global default, always timed out.

kubernetes_asyncio sends a request with *no timeout at all* unless ``_request_timeout`` is passed on that call
(rest.py builds an empty ``aiohttp.ClientTimeout``), so a hung worker would stall a reconcile forever. This
client fills in a default for every call that does not set its own; watches pass their own.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import aiohttp
from aiohttp.helpers import get_env_proxy_for_url
from aiolimiter import AsyncLimiter
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.config import kube_config
from kubernetes_asyncio.config.incluster_config import InClusterConfigLoader
from yarl import URL

from multikueue.kube.errors import refused, typed

DEFAULT_TIMEOUT = aiohttp.ClientTimeout(total=30, connect=5, sock_connect=5)
"""Total and connect bounds for a request that sets none (watches set their own)."""

DEFAULT_MAX_CONNECTIONS = 100
"""Connections kept to one cluster (kubernetes_asyncio's default). aiohttp speaks HTTP/1.1 only, so each request in
flight holds a TLS connection of its own (client-go multiplexes one HTTP/2 connection); each costs a handshake on
both ends and a 256 KiB read buffer (asyncio's SSL protocol): under a burst, most of this controller's memory
growth. Fewer trade dispatch latency for memory (measured in bench/results/README.md)."""

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
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        configuration.connection_pool_maxsize = max_connections  # read when the connector is built, just below
        super().__init__(configuration=configuration)
        _read_environment_once(self.rest_client, configuration.host)
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
        return self._guarded(call)

    async def _guarded(self, call: Any) -> Any:
        """Every request: rate-limited, counted when it fails, and its API error raised as what it means
        (``errors.typed``: ``NotFound``, ``Conflict``...)."""
        try:
            if self.limiter is None:
                return await call()
            async with self.limiter:
                return await call()
        except ApiException as e:
            if self.on_error is not None:
                self.on_error(str(e.status))
            raise typed(e) from None
        except (aiohttp.ClientError, TimeoutError, OSError):
            if self.on_error is not None:
                self.on_error("connection")
            raise


async def unread(api: ApiClient, request: Awaitable[Any]) -> None:
    """A request made with ``_preload_content=False`` whose answer is not wanted: its body read and let go, and a
    failure raised typed (and counted) as a decoded request's would be."""
    response = await request
    try:
        body = await response.read()
    finally:
        response.release()
    if response.status >= 400:
        if api.on_error is not None:
            api.on_error(str(response.status))
        raise refused(response.status, body)


def _read_environment_once(rest: Any, host: str | None) -> None:
    """kubernetes_asyncio's session trusts the environment, so aiohttp looks up proxies and ~/.netrc in a worker
    thread on *every* request: two thread hops and a file open per call, a fifth of this controller's CPU under
    load (py-spy; bench/results/README.md). The proxy the environment names for this cluster (HTTPS_PROXY,
    NO_PROXY, credentials in the URL or in netrc) is read once here instead, as client-go reads it once; netrc is
    never used to authenticate to the cluster (client-go does not either)."""
    session = rest.pool_manager
    connector = session.connector
    session.detach()  # keep the connector (its TLS settings) for the new session
    # read_bufsize as kubernetes_asyncio sets it: a watch event of a large object exceeds aiohttp's default.
    rest.pool_manager = aiohttp.ClientSession(connector=connector, trust_env=False, read_bufsize=2**21)
    if rest.proxy or not host:
        return  # a proxy set in the configuration wins, as it did
    try:
        proxy, auth = get_env_proxy_for_url(URL(host))
    except LookupError:
        return
    # Credentials ride in the URL: aiohttp turns them into Proxy-Authorization, for CONNECT and plain requests alike.
    rest.proxy = str(proxy if auth is None else proxy.with_user(auth.login).with_password(auth.password))


async def api_client_from_kubeconfig(
    kubeconfig: dict[str, Any],
    *,
    context: str | None = None,
    timeout: Timeout = DEFAULT_TIMEOUT,
    temp_dir: Path | None = None,
    limiter: RateLimit | None = None,
    on_error: Callable[[str], None] | None = None,
    on_request: Callable[[str], None] | None = None,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
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
    return ApiClient(
        configuration,
        timeout=timeout,
        limiter=limiter,
        on_error=on_error,
        on_request=on_request,
        max_connections=max_connections,
    )


async def in_cluster_api_client(
    *, timeout: Timeout = DEFAULT_TIMEOUT, max_connections: int = DEFAULT_MAX_CONNECTIONS
) -> ApiClient:
    """A client from the pod's service account (what the manager-cluster Deployment uses)."""
    configuration = k8s_client.Configuration()
    InClusterConfigLoader(
        token_filename="/var/run/secrets/kubernetes.io/serviceaccount/token",
        cert_filename="/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
    ).load_and_set(configuration)
    return ApiClient(configuration, timeout=timeout, max_connections=max_connections)
