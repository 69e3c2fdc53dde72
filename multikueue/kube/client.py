"""One ``ApiClient`` per cluster, built from a kubeconfig document (or the pod's service account), always timed out.

A small HTTP client of its own on aiohttp: objects travel as plain dicts, so the generated models of a full client
library (kubernetes_asyncio imports ~860 modules, a third of this controller's resident memory) are never loaded.
Every request has a timeout (a hung worker must not stall a reconcile), passes the cluster's rate limiter, is
counted, and fails as a ``kube.errors.KubeError``: the typed error its code means, or ``Unreachable``,
``StreamBroken``, ``CredentialsUnavailable``; an aiohttp or socket error never leaves this module
(``kube.failures`` translates them). JSON goes through orjson (``encode``, ``decode``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import aiohttp
import orjson
from aiolimiter import AsyncLimiter

from multikueue import __version__
from multikueue.kube.credentials import Credentials
from multikueue.kube.errors import refused
from multikueue.kube.failures import broken, is_transport_failure, unreachable
from multikueue.kube.kubeconfig import ClusterAccess, access_from_kubeconfig, in_cluster_access
from multikueue.kube.proxy import environment_proxy


@dataclass(frozen=True)
class Timeouts:
    """Bounds on one request, in seconds (``None``: unbounded)."""

    total: float | None = None  # the whole request, its answer read to the end
    connect: float | None = None  # to have a connection: a free one from the pool, or a new one, TLS included
    read: float | None = None  # silence between two reads of the answer (a watch's stream that went dead)


DEFAULT_TIMEOUT = Timeouts(total=30, connect=5)
"""Total and connect bounds for a request that sets none (watches set their own)."""

DEFAULT_MAX_CONNECTIONS = 100
"""Connections kept to one cluster. aiohttp speaks HTTP/1.1 only, so each request in flight holds a TLS connection
of its own (client-go multiplexes one HTTP/2 connection); each costs a handshake on both ends and, on asyncio's own
loop (not uvloop's), a resident 256 KiB read buffer. Fewer trade dispatch latency for memory (measured in
bench/results/README.md)."""

JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"

Timeout = float | Timeouts
"""Seconds in total, or ``Timeouts``."""

Query = Mapping[str, str | int | bool | None]


def encode(body: Any) -> bytes:
    """A request body as compact JSON, as ``json.dumps(body, separators=(",", ":"))`` writes it but in UTF-8 rather
    than ``\\u`` escapes (both what the API server reads), in about a tenth of its time (bench/results/profiles/).
    Keys that are not strings are written as ``json`` writes them. orjson stops at 255 levels of nesting where
    ``decode`` reads 1024: a document that deep (a schemaless field) is written by ``json``, so whatever was read can
    be written back; what ``json`` cannot write either raises its ``TypeError``."""
    try:
        return orjson.dumps(body, option=orjson.OPT_NON_STR_KEYS)
    except TypeError:
        return json.dumps(body, separators=(",", ":")).encode()


def decode(data: bytes) -> Any:
    """A JSON document as ``json.loads`` gives it, in about half its time; what is not JSON raises a ``ValueError``
    (``orjson.JSONDecodeError`` is ``json.JSONDecodeError``). It differs from ``json.loads`` only on input a
    kube-apiserver never sends: integers beyond 64 bits (a ``float`` here; the server's own are int64 or float64),
    ``NaN``/``Infinity``, lone surrogate escapes, a byte-order mark, UTF-16 or UTF-32 (refused)."""
    return orjson.loads(data)


def _client_timeout(timeout: Timeout) -> aiohttp.ClientTimeout:
    if isinstance(timeout, int | float):
        return aiohttp.ClientTimeout(total=timeout)
    return aiohttp.ClientTimeout(
        total=timeout.total, connect=timeout.connect, sock_connect=timeout.connect, sock_read=timeout.read
    )


def _params(query: Query | None) -> dict[str, str]:
    """Query parameters as the API server reads them (booleans as ``true``/``false``, ``None`` left out)."""
    if not query:
        return {}
    return {k: ("true" if v else "false") if isinstance(v, bool) else str(v) for k, v in query.items() if v is not None}


class RateLimit(Protocol):
    """An async context manager entered before each request (``aiolimiter.AsyncLimiter`` is one)."""

    async def __aenter__(self) -> Any: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> Any: ...


def rate_limit(qps: float, burst: int) -> AsyncLimiter:
    """``burst`` requests at once, refilled at ``qps`` per second (client-go's token-bucket semantics)."""
    return AsyncLimiter(max_rate=burst, time_period=burst / qps)


class Lines:
    """An answer read line by line as it arrives (a watch, a log); a read that fails raises ``StreamBroken``."""

    def __init__(self, response: aiohttp.ClientResponse, server: str) -> None:
        self._response = response
        self._server = server

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            try:
                line = await self._response.content.readline()
            except Exception as e:  # a line longer than the read buffer is a ValueError too
                if not (is_transport_failure(e) or isinstance(e, ValueError)):
                    raise
                raise broken(e, self._server) from e
            if not line:
                return
            yield line


class ApiClient:
    """Requests to one cluster: JSON in and out, a default timeout on every request, optionally a rate limit."""

    def __init__(
        self,
        access: ClusterAccess,
        *,
        timeout: Timeout = DEFAULT_TIMEOUT,
        limiter: RateLimit | None = None,
        on_error: Callable[[str], None] | None = None,
        on_request: Callable[[str], None] | None = None,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        temp_dir: Path | None = None,
    ) -> None:
        self.access = access
        self.host = access.server
        self.credentials = Credentials(access, temp_dir)
        self.proxy = access.proxy_url or environment_proxy(access.server)
        self.default_timeout = _client_timeout(timeout)
        self.limiter = limiter
        self.on_error = on_error  # called with the HTTP status (or "connection") of each failed request
        self.on_request = on_request  # called with the HTTP method of every request (a watch counts once)
        self.max_connections = max_connections
        self._session: aiohttp.ClientSession | None = None
        self._headers = [("Accept", JSON), ("User-Agent", f"multikueue/{__version__}")]
        if access.impersonate is not None:  # as kubectl: the base identity, then every request as the impersonated
            self._headers += access.impersonate.headers()

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None:  # made on first use, inside the event loop
            connector = aiohttp.TCPConnector(limit=self.max_connections)
            # read_bufsize: one watch event of a large object is a single line, beyond aiohttp's 64 KiB default.
            self._session = aiohttp.ClientSession(connector=connector, trust_env=False, read_bufsize=2**21)
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __aenter__(self) -> ApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _send(self, method: str, path: str, query: Query | None, body: Any, content_type: str,
                    timeout: Timeout | None) -> aiohttp.ClientResponse:  # fmt: skip
        """One request; its answer returned once the status says it succeeded (the body still to read)."""
        if self.on_request is not None:
            self.on_request(method)
        headers = list(self._headers)
        if (authorization := await self.credentials.authorization()) is not None:
            headers.append(("Authorization", authorization))
        data = None
        if body is not None:
            data = encode(body)
            headers.append(("Content-Type", content_type))
        try:
            response = await self._request(method, path, query, data, headers, timeout)
        except Exception as e:
            # uvloop can hand a new socket a descriptor its loop still maps to a closing transport (uvloop#653,
            # open): a RuntimeError that is a failed connection, retried as one; uncaught, it ended the process
            # (fault soak). Any other RuntimeError is a bug and surfaces as it is.
            if not is_transport_failure(e):
                raise
            if self.on_error is not None:
                self.on_error("connection")
            raise unreachable(e, self.host) from e
        if response.status >= 400:
            try:
                answer = await self._read(response)
            finally:
                response.release()
            if self.on_error is not None:
                self.on_error(str(response.status))
            if response.status == 401:
                self.credentials.expire()
            raise refused(response.status, response.reason or "", answer, dict(response.headers))
        return response

    async def _request(self, method: str, path: str, query: Query | None, data: bytes | None,
                       headers: list[tuple[str, str]], timeout: Timeout | None) -> aiohttp.ClientResponse:  # fmt: skip
        call = self._http().request(
            method, self.host + path, params=_params(query), data=data, headers=headers, proxy=self.proxy,
            ssl=self.credentials.ssl if self.credentials.ssl is not None else True,
            server_hostname=self.access.tls_server_name,
            timeout=self.default_timeout if timeout is None else _client_timeout(timeout),
        )  # fmt: skip
        if self.limiter is None:
            return await call
        async with self.limiter:
            return await call

    async def _answer(self, method: str, path: str, query: Query | None, body: Any, content_type: str,
                      timeout: Timeout | None) -> bytes:  # fmt: skip
        """The whole answer's bytes, its connection back in the pool."""
        response = await self._send(method, path, query, body, content_type, timeout)
        try:
            return await self._read(response)
        finally:
            response.release()

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        """The answer's body, whose status already came (a write it answers was carried out)."""
        try:
            return await response.read()
        except Exception as e:
            if not is_transport_failure(e):
                raise
            raise broken(e, self.host) from e

    async def request(self, method: str, path: str, *, query: Query | None = None, body: Any = None,
                      content_type: str = JSON, timeout: Timeout | None = None) -> Any:  # fmt: skip
        """The decoded JSON answer (``None`` when it is empty)."""
        answer = await self._answer(method, path, query, body, content_type, timeout)
        try:
            return decode(answer) if answer else None
        except ValueError as e:
            raise broken(e, self.host) from e

    async def send(self, method: str, path: str, *, body: Any = None, content_type: str = JSON) -> None:
        """A request whose answer is not wanted: read and let go undecoded."""
        await self._answer(method, path, None, body, content_type, None)

    @asynccontextmanager
    async def stream(self, path: str, *, query: Query | None = None, timeout: Timeout | None = None
                     ) -> AsyncIterator[Lines]:  # fmt: skip
        """A GET whose answer is read line by line as it arrives (a watch, a log). Left early (cancelled, failed, or
        the caller stops), the connection is closed at once with no await, safe under cancellation, or every restart
        would leak one; read to its end, it goes back to the pool."""
        response = await self._send("GET", path, query, None, JSON, timeout)
        try:
            yield Lines(response, self.host)
        except BaseException:
            response.close()
            raise
        if response.content.at_eof():
            response.release()
        else:
            response.close()


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
    """A client for one cluster of a kubeconfig document. Raises ``KubeconfigError`` naming what cannot be used.

    ``temp_dir``: where, off Linux, client key material is written for the moment TLS loads it. Relative file paths
    in the document are read from the working directory (``kubeconfig.read_kubeconfig`` makes a file's absolute).
    """
    return ApiClient(
        access_from_kubeconfig(kubeconfig, context=context),
        timeout=timeout,
        limiter=limiter,
        on_error=on_error,
        on_request=on_request,
        max_connections=max_connections,
        temp_dir=temp_dir,
    )


async def in_cluster_api_client(
    *,
    timeout: Timeout = DEFAULT_TIMEOUT,
    max_connections: int = DEFAULT_MAX_CONNECTIONS,
    on_error: Callable[[str], None] | None = None,
    on_request: Callable[[str], None] | None = None,
) -> ApiClient:
    """A client from the pod's service account (what the manager-cluster Deployment uses)."""
    return ApiClient(in_cluster_access(), timeout=timeout, max_connections=max_connections, on_error=on_error,
                     on_request=on_request)  # fmt: skip
