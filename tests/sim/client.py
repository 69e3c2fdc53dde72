"""``ApiClient``'s three doors (``request``, ``send``, ``stream``) onto a ``SimApiServer``, so the dispatcher's own
code runs unchanged against it: answers are JSON round-tripped (no object is shared with the server) and failures
raise what ``kube.errors.refused`` makes of the same status code and body, as the real client does.

A ``Link`` stands between the client and its server: the world's faults act there (``cut``: no answer and nothing
done; ``lose_next``: done, the answer lost), each as ``Unreachable``, the type the real client raises for both.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio

from multikueue.kube.client import JSON, Query, Timeout
from multikueue.kube.credentials import Credentials
from multikueue.kube.errors import StreamBroken, Unreachable, refused
from multikueue.kube.kubeconfig import access_from_kubeconfig
from tests.sim.apiserver import Failure, SimApiServer, Watch


@dataclass
class Link:
    """The path from one client to one server: the faults the world injects on it."""

    cut: bool = False
    lose: list[tuple[str, str]] = field(default_factory=list)  # (method, path suffix): done, the answer lost
    sent: list[tuple[str, str, int]] = field(default_factory=list)  # (method, path, code), every request answered

    def lose_next(self, method: str, path_suffix: str) -> None:
        self.lose.append((method, path_suffix))

    def _losing(self, method: str, path: str) -> bool:
        for i, (m, suffix) in enumerate(self.lose):
            if m == method and path.endswith(suffix):
                del self.lose[i]
                return True
        return False


def _query(query: Query | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in (query or {}).items():
        if value is None:
            continue
        out[key] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out


class SimLines:
    """A watch's lines as ``kube.client.Lines`` yields them: bytes, one event each, until the server ends it."""

    def __init__(self, watch: Watch, link: Link) -> None:
        self._watch = watch
        self._link = link
        self._ready = anyio.Event()
        watch.wake = self._ready.set

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while True:
            while not self._watch.lines:
                if self._link.cut:
                    raise StreamBroken("the simulated link was cut")
                self._ready = anyio.Event()
                self._watch.wake = self._ready.set
                await self._ready.wait()
            line = self._watch.lines.pop(0)
            if line is None:
                return
            yield line


class SimApiClient:
    """What the dispatcher holds for one cluster: ``host`` names it in errors, as the real client's does."""

    def __init__(self, server: SimApiServer, link: Link | None = None, kubeconfig: dict[str, Any] | None = None
                 ) -> None:  # fmt: skip
        self.server = server
        self.link = link or Link()
        self.host = f"https://{server.name}.sim"
        # What the cluster reconciler reads of a worker's client (its credential's expiry, whether it renews).
        self.access = access_from_kubeconfig(kubeconfig) if kubeconfig else None
        self.credentials = Credentials(self.access) if self.access else None
        self.on_request: Any = None
        self.on_error: Any = None

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> SimApiClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def request(self, method: str, path: str, *, query: Query | None = None, body: Any = None,
                      content_type: str = JSON, timeout: Timeout | None = None) -> Any:  # fmt: skip
        await anyio.lowlevel.checkpoint()  # a request is a suspension point, as on the network
        if self.link.cut:
            raise Unreachable(f"{self.host}: the simulated link is cut", maybe_done=False)
        sent = json.loads(json.dumps(body)) if body is not None else None
        code, answer = self.server.handle(method, path, _query(query), sent, content_type)
        self.link.sent.append((method, path, code))
        if self.link._losing(method, path):
            raise Unreachable(f"{self.host}: the answer to {method} {path} was lost", maybe_done=True)
        await anyio.lowlevel.checkpoint()
        if code >= 400:
            raise refused(code, str(answer.get("reason", "")), json.dumps(answer))
        return json.loads(json.dumps(answer)) if isinstance(answer, dict) else answer

    async def send(self, method: str, path: str, *, body: Any = None, content_type: str = JSON) -> None:
        await self.request(method, path, body=body, content_type=content_type)

    @asynccontextmanager
    async def stream(self, path: str, *, query: Query | None = None, timeout: Timeout | None = None
                     ) -> AsyncIterator[SimLines]:  # fmt: skip
        await anyio.lowlevel.checkpoint()
        if self.link.cut:
            raise Unreachable(f"{self.host}: the simulated link is cut", maybe_done=False)
        try:
            watch = self.server.watch(path, _query(query))
        except Failure as e:
            raise refused(e.code, str(e.status["reason"]), json.dumps(e.status)) from None
        try:
            yield SimLines(watch, self.link)
        finally:
            if watch in self.server.watches:
                self.server.watches.remove(watch)
