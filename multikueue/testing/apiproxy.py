"""A reverse proxy in front of one test-bed API server, to play a fault no process signal can time: a write the
server carries out whose answer never comes back.

The controller under test reaches the worker through the proxy (``kubeconfig``: TLS with the proxy's own CA); the
proxy speaks to the API server as the bed's admin. Everything passes through, watches streamed as they arrive,
until ``withhold`` arms it: from the next matching request on, nothing more reaches the caller (not even the watch
event of that write); the request is forwarded and answered by the server, the answer kept back (the caller's request
times out), and ``on_withheld`` runs (a test pauses the server there, so the worker then answers nothing at all).
``release`` ends the held request without an answer and lets the held streams go on. ``lose_answer`` ends it
without an answer too but keeps the watches held, while other requests pass again: a retry then meets the state the
lost write left, before the caller's caches can see it. ``hold`` keeps back matching requests (a kind's list, say)
until ``release``. ``cut`` closes the connections of the answers being streamed (watches) mid-body, as a server that
crashed or a network that dropped them.
"""

from __future__ import annotations

import asyncio
import base64
import ssl
import tempfile
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp
import anyio
from aiohttp import web

from multikueue.pki import CertificateAuthority
from multikueue.testing.testbed import Cluster

HOP_BY_HOP = frozenset(
    ("connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade", "te", "trailer")
)


@dataclass(frozen=True)
class Withheld:
    """An answered request whose answer was kept from the caller."""

    method: str
    path: str
    status: int


class ApiProxy:
    def __init__(self, cluster: Cluster, *, on_withheld: Callable[[], Awaitable[None]] | None = None) -> None:
        self.cluster = cluster
        self.on_withheld = on_withheld
        self.withheld: list[Withheld] = []
        self.writes: list[Withheld] = []  # every request but a GET, with the server's answer's status
        self.answered = anyio.Event()  # a withheld request was answered by the server, and ``on_withheld`` ran
        self._armed: tuple[str, str] | None = None
        self._frozen = False  # answers held until ``release`` (or ``lose_answer``)
        self._watches_frozen = False  # watch streams held until ``release``
        self._released = anyio.Event()  # everything goes on
        self._answers_go = anyio.Event()  # the withheld request ends, other answers go on
        self._held: tuple[str, str] | None = None  # requests kept back until ``release``
        self._streaming: set[asyncio.BaseTransport] = set()  # the callers' connections of answers under way
        self._ca = CertificateAuthority("multikueue-test-proxy-ca")
        self._dir = tempfile.TemporaryDirectory(prefix="multikueue-proxy-")
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self.port = 0

    @property
    def kubeconfig(self) -> dict[str, Any]:
        """A kubeconfig for the proxy: its CA, and the bed's admin credentials (the proxy uses its own upstream)."""
        document = self.cluster.kubeconfig
        entry = document["clusters"][0]["cluster"]
        entry["server"] = f"https://127.0.0.1:{self.port}"
        entry["certificate-authority-data"] = base64.b64encode(self._ca.cert_pem).decode()
        return document

    def withhold(self, method: str, path_suffix: str) -> None:
        """Keep back the answer of the next ``method`` request whose path ends with ``path_suffix``."""
        self._armed = (method, path_suffix)

    def hold(self, method: str, path_suffix: str) -> None:
        """Keep back every ``method`` request whose path ends with ``path_suffix`` (a list's query string aside)
        until ``release``: forwarded only then."""
        self._held = (method, path_suffix)

    def lose_answer(self) -> None:
        """End the withheld request with no answer; other requests are answered again, the watches stay held (what
        the lost write changed is not seen by the caller's caches) until ``release``."""
        self._frozen = False
        self._answers_go.set()

    def release(self) -> None:
        """End the held requests (their callers get no answer: the connection is closed); held streams go on."""
        self._frozen = False
        self._watches_frozen = False
        self._held = None
        self._answers_go.set()
        self._released.set()

    def cut(self) -> int:
        """Close the connections of the answers under way mid-body, the server left running; returns how many."""
        cut = len(self._streaming)
        for transport in self._streaming:
            transport.close()
        self._streaming.clear()
        return cut

    async def __aenter__(self) -> ApiProxy:
        serving = self._ca.issue("proxy", ip_addresses=("127.0.0.1",), server=True)
        cert, key = serving.write(Path(self._dir.name), "serving")
        server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        server_ssl.load_cert_chain(cert, key)
        self._session = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(ssl=self.cluster.ssl_context()),
            auto_decompress=False,
            timeout=aiohttp.ClientTimeout(total=None),
        )
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._forward)
        self._runner = web.AppRunner(app, handler_cancellation=True)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0, ssl_context=server_ssl)
        await site.start()
        self.port = int(self._runner.addresses[0][1])
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()
        self._dir.cleanup()

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP | {"authorization"}}
        url = self.cluster.url + request.path_qs
        withhold = self._matches(request)
        if withhold:  # from here on nothing reaches the caller, not even the watch event of this very write
            self._frozen = self._watches_frozen = True
        watch = request.query.get("watch") in ("true", "1")
        held = self._held
        if held is not None and not watch and request.method == held[0] and request.path.endswith(held[1]):
            await self._released.wait()
        async with self._session.request(request.method, url, data=body or None, headers=headers) as upstream:
            if request.method != "GET":
                self.writes.append(Withheld(request.method, request.path, upstream.status))
            if withhold:
                return await self._withhold(request, upstream)
            response = web.StreamResponse(status=upstream.status, reason=upstream.reason)
            for name, value in upstream.headers.items():
                if name.lower() not in HOP_BY_HOP:
                    response.headers[name] = value
            await response.prepare(request)
            transport = request.transport
            assert transport is not None
            self._streaming.add(transport)
            try:
                async for chunk in upstream.content.iter_any():
                    if self._frozen:
                        await self._answers_go.wait()
                    if watch and self._watches_frozen:
                        await self._released.wait()
                    await response.write(chunk)
                await response.write_eof()
            finally:
                self._streaming.discard(transport)
            return response

    def _matches(self, request: web.Request) -> bool:
        if self._armed is None:
            return False
        method, suffix = self._armed
        if request.method != method or not request.path.endswith(suffix):
            return False
        self._armed = None
        return True

    async def _withhold(self, request: web.Request, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
        await upstream.read()  # the whole answer, as the server sent it
        self.withheld.append(Withheld(request.method, request.path, upstream.status))
        if self.on_withheld is not None:
            await self.on_withheld()
        self.answered.set()
        await self._answers_go.wait()
        assert request.transport is not None
        request.transport.close()  # no answer at all, as from a server that stopped
        return web.Response(status=504)
