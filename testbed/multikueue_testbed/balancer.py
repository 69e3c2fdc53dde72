"""A Service's stand-in: one address in front of several replicas of a server (the admission webhook's), so a
MutatingWebhookConfiguration's ``clientConfig.url`` reaches them all, as a Service with an EndpointSlice would.

A TCP pass-through, as kube-proxy is: TLS is not terminated, so each replica's own certificate is what the caller
sees. Each accepted connection goes to the next ready backend, round robin; with none ready it is closed at once (a
Service without endpoints refuses). Readiness is what the EndpointSlice would say: a backend's ``readyz`` URL is
polled (plain HTTP GET every 0.2 s, 1 s timeout; 200 is ready, anything else or no answer is not), and a backend
without one is always ready. As with kube-proxy, a connection already made is never cut: a backend turning unready
(or removed) only gets no new connections.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from types import TracebackType
from urllib.parse import urlsplit

import anyio
from anyio.abc import ByteStream, Listener, SocketAttribute, SocketStream, TaskGroup

POLL_INTERVAL = 0.2
POLL_TIMEOUT = 1.0
CONNECT_TIMEOUT = 1.0
_GONE = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)  # a peer that reset or went away


@dataclass
class _Backend:
    port: int
    readyz: str | None
    ready: bool  # a backend with a probe is not ready until it answers 200, as a pod's endpoint
    polling: anyio.CancelScope = field(default_factory=anyio.CancelScope)  # cancelled by ``remove``


class Balancer:
    """``async with Balancer() as b:`` listens on 127.0.0.1:``b.port`` (``port`` to choose it, e.g. to reopen the
    same address); ``add``/``remove`` backends at any time; ``connections[name]`` counts what each was given."""

    def __init__(self, port: int = 0) -> None:
        self.port = port  # 0: the kernel's choice, bound at once (no race with another server for it)
        self.connections: dict[str, int] = {}  # kept after ``remove``, so a test sees nothing more went there
        self._backends: dict[str, _Backend] = {}
        self._turn = 0
        self._group: TaskGroup | None = None
        self._listener: Listener[SocketStream] | None = None

    def add(self, name: str, port: int, readyz: str | None = None) -> None:
        """A backend on 127.0.0.1:``port`` (replacing one of that name), polled at ``readyz`` if given."""
        self.remove(name)
        backend = self._backends[name] = _Backend(port, readyz, ready=readyz is None)
        self.connections.setdefault(name, 0)
        self._poll_soon(backend)

    def remove(self, name: str) -> None:
        """No new connection goes to ``name`` (those made stay, as with an endpoint removed under kube-proxy)."""
        backend = self._backends.pop(name, None)
        if backend is not None:
            backend.polling.cancel()

    def ready(self) -> list[str]:
        """The backends new connections may go to now, in the order they were added."""
        return [name for name, backend in self._backends.items() if backend.ready]

    async def __aenter__(self) -> Balancer:
        self._listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=self.port)
        self.port = self._listener.extra(SocketAttribute.local_port)
        self._group = anyio.create_task_group()
        await self._group.__aenter__()
        self._group.start_soon(self._listener.serve, self._forward, self._group)
        for backend in self._backends.values():
            self._poll_soon(backend)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._group is not None
        assert self._listener is not None
        # Every task (listener, pollers, connections) ends on this cancellation; their clean-up only closes sockets.
        self._group.cancel_scope.cancel()
        try:
            return await self._group.__aexit__(exc_type, exc, tb)
        finally:
            await self._listener.aclose()
            self._group = self._listener = None

    def _poll_soon(self, backend: _Backend) -> None:
        if self._group is not None and backend.readyz is not None:
            self._group.start_soon(self._poll, backend, backend.readyz)

    async def _poll(self, backend: _Backend, readyz: str) -> None:
        with backend.polling:
            while True:  # until ``remove`` or the context's exit cancels it
                backend.ready = await _answers_200(readyz)
                await anyio.sleep(POLL_INTERVAL)

    def _pick(self) -> tuple[str, int] | None:
        ready = self.ready()
        if not ready:
            return None
        name = ready[self._turn % len(ready)]
        self._turn += 1
        return name, self._backends[name].port

    async def _forward(self, client: SocketStream) -> None:
        async with client:
            picked = self._pick()
            if picked is None:
                return  # closed at once: a Service without endpoints
            name, port = picked
            upstream: SocketStream | None = None
            with anyio.move_on_after(CONNECT_TIMEOUT), contextlib.suppress(OSError):
                upstream = await anyio.connect_tcp("127.0.0.1", port)
            if upstream is None:
                return  # ready a moment ago, gone now: the caller sees its connection closed
            self.connections[name] += 1
            async with upstream, anyio.create_task_group() as pipes:
                pipes.start_soon(_copy, client, upstream, pipes)
                pipes.start_soon(_copy, upstream, client, pipes)


async def _copy(source: ByteStream, sink: ByteStream, pipes: TaskGroup) -> None:
    """Bytes from ``source`` to ``sink``; its end of stream passed on as a half-close (the other way goes on), a
    reset ends both ways."""
    try:
        async for chunk in source:
            await sink.send(chunk)
        await sink.send_eof()
    except _GONE:
        pipes.cancel_scope.cancel()


async def _answers_200(url: str) -> bool:
    """Whether a plain HTTP GET of ``url`` is answered 200 within ``POLL_TIMEOUT``."""
    parts = urlsplit(url)
    target = parts._replace(scheme="", netloc="").geturl() or "/"
    request = f"GET {target} HTTP/1.1\r\nHost: {parts.netloc}\r\nConnection: close\r\n\r\n"
    head = b""
    with anyio.move_on_after(POLL_TIMEOUT):
        try:
            async with await anyio.connect_tcp(parts.hostname or "127.0.0.1", parts.port or 80) as stream:
                await stream.send(request.encode())
                async for chunk in stream:  # the status line is all it takes
                    head += chunk
                    if b"\r\n" in head:
                        break
        except _GONE:
            return False
    return head.split(b" ", 2)[1:2] == [b"200"]
