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

Crash points, for a test that stops a process right after one of its writes (never by timing): ``after_write``
runs a callback once the Nth write matching a method, a path and a predicate on its JSON body has been carried out
by the server (answered 2xx), and by default keeps that answer from the caller. ``shut`` is the process gone as the
server sees it: every caller connection closed and nothing more forwarded (a request under way then gets no answer;
whether the server carried it out is as with any process stopped mid-request) until ``reopen`` lets its successor
through. ``hold_watches`` keeps back every watch event from then on (a caller's stale view while its writes go
through) until ``release``. ``writes`` records every write with its JSON body, so a test counts them (creates per
worker, the writes that end a run).
"""

from __future__ import annotations

import asyncio
import base64
import json
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
from multikueue_testbed.testbed import Cluster

HOP_BY_HOP = frozenset(
    ("connection", "keep-alive", "transfer-encoding", "content-length", "host", "upgrade", "te", "trailer")
)


@dataclass(frozen=True)
class Withheld:
    """An answered request whose answer was kept from the caller."""

    method: str
    path: str
    status: int
    body: Any = None  # the request's JSON body; None without one (or when it is not JSON)


@dataclass
class _FaultPoint:
    """The ``nth`` write matching ``method``, a path ending with ``path_suffix`` and ``when`` (on its JSON body) that
    the server carries out runs ``then``; its answer goes back only without ``drop_answer``."""

    method: str
    path_suffix: str
    when: Callable[[Any], bool]
    nth: int
    then: Callable[[], None]
    drop_answer: bool
    seen: int = 0

    def hit(self, write: Withheld) -> bool:
        """Whether ``write`` is the one (it counts towards ``nth`` when it matches)."""
        if write.method != self.method or not write.path.endswith(self.path_suffix):
            return False
        if not 200 <= write.status < 300 or not self.when(write.body):
            return False
        self.seen += 1
        return self.seen == self.nth


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
        self._callers: set[asyncio.BaseTransport] = set()  # every caller connection a request came on
        self._fault: _FaultPoint | None = None
        self._shut = False  # the caller's process is gone: nothing is forwarded until ``reopen``
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

    def after_write(
        self,
        method: str,
        path_suffix: str,
        then: Callable[[], None],
        *,
        when: Callable[[Any], bool] = lambda _: True,
        nth: int = 1,
        drop_answer: bool = True,
    ) -> None:
        """Once the ``nth`` ``method`` request whose path ends with ``path_suffix`` and whose JSON body satisfies
        ``when`` is carried out by the server (answered 2xx), run ``then``, before anything else reaches any caller;
        with ``drop_answer`` that request's caller never gets the answer (its connection is closed)."""
        self._fault = _FaultPoint(method, path_suffix, when, nth, then, drop_answer)

    def shut(self) -> None:
        """The caller's process is gone: every caller connection closed, and each request from now on is closed
        unanswered without reaching the server, until ``reopen``."""
        self._shut = True
        for transport in self._callers:
            transport.close()
        self._callers.clear()

    def reopen(self) -> None:
        """Forward again (a successor's requests), after ``shut``."""
        self._shut = False

    def hold_watches(self) -> None:
        """Keep back every watch event from now on, the streams left open, until ``release``."""
        if self._released.is_set():  # released before: a fresh gate
            self._released = anyio.Event()
        self._watches_frozen = True

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
        if not self._let_in(request):
            return _hang_up(request)
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
            if self._no_answer(request, upstream.status, body):
                return _hang_up(request)
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

    def _let_in(self, request: web.Request) -> bool:
        """Whether the request is forwarded (not after ``shut``); its connection is remembered, for ``shut``."""
        if self._shut or request.transport is None:
            return False
        self._callers.add(request.transport)
        return True

    def _no_answer(self, request: web.Request, status: int, body: bytes) -> bool:
        """Record a write and run the fault point it hits; whether its caller gets no answer: the fault point keeps it
        back, or the caller's process went (``shut``) while it was under way."""
        if request.method != "GET":
            write = Withheld(request.method, request.path, status, _json(body))
            self.writes.append(write)
            if self._fault is not None and self._fault.hit(write):
                fault, self._fault = self._fault, None
                fault.then()  # at once: nothing else reaches a caller before it
                if fault.drop_answer:
                    return True
        return self._shut

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


def _hang_up(request: web.Request) -> web.Response:
    """No answer at all: the caller's connection closed."""
    if request.transport is not None:
        request.transport.close()
    return web.Response(status=504)


def _json(body: bytes) -> Any:
    """A request body as JSON, or None (no body, or not JSON)."""
    try:
        return json.loads(body) if body else None
    except ValueError:
        return None
