"""A list endpoint of one cluster as a list+watch source of raw objects, for ``runtime.informer``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
from kubernetes_asyncio.client.exceptions import ApiException

from multikueue.kube.errors import refused, typed

Object = dict[str, Any]


class ApiListSource:
    """A ``kubernetes_asyncio`` list method (bound to one cluster's client) as a source of raw objects.

    Works with ``CustomObjectsApi`` and typed APIs alike: lists are read unparsed and watch events as raw
    objects, so the cache holds plain dicts either way.
    """

    def __init__(self, list_method: Callable[..., Awaitable[Any]], *args: Any, description: str, **filters: Any):
        self._method = list_method
        self._args = args
        self._filters = filters
        self.description = description

    async def list(self, *, limit: int, continue_token: str | None) -> Object:
        kwargs: dict[str, Any] = {**self._filters, "limit": limit, "_preload_content": False}
        if continue_token:
            kwargs["_continue"] = continue_token
        response = await self._method(*self._args, **kwargs)
        try:
            body = await response.read()
        finally:
            response.release()
        if response.status >= 400:  # _preload_content=False leaves the status check to the caller
            raise refused(response.status, body)
        result: Object = json.loads(body)
        return result

    async def watch(self, *, resource_version: str, timeout_seconds: int) -> AsyncIterator[Object]:
        """The watch's events as they arrive, each line decoded once. kubernetes_asyncio's ``Watch`` is not used:
        it makes an ``ApiClient`` of its own per watch (a TLS context loading the system's CA bundle and an HTTP
        session, ~0.8 MiB each, several per worker) and encodes and decodes every event once more."""
        read_timeout = aiohttp.ClientTimeout(connect=10, sock_connect=10, sock_read=timeout_seconds + 15)
        response = await self._method(
            *self._args,
            **self._filters,
            watch=True,
            resource_version=resource_version,
            allow_watch_bookmarks=True,
            timeout_seconds=timeout_seconds,
            _preload_content=False,
            _request_timeout=read_timeout,
        )
        try:
            if response.status >= 400:  # _preload_content=False leaves the status check to the caller
                body = await response.read()
                raise refused(response.status, body)
            while line := await response.content.readline():
                if line.strip():
                    yield event_of(json.loads(line))
        except BaseException:
            # Cancelled or failed mid-stream (shutdown, kubeconfig rotation, a bad line): the connection is closed
            # at once (no await: safe under cancellation), or every restart would leak one.
            response.close()
            raise
        response.release()  # the server ended the watch: its connection goes back to the pool


def event_of(event: Object) -> Object:
    """A watch event as the informer takes it; an ERROR event (410 Gone: the history asked for is compacted) is
    raised as the API error it carries."""
    if event.get("type") == "ERROR":
        status = event.get("object") or {}
        reason = f"{status.get('reason')}: {status.get('message')}"
        raise typed(ApiException(status=int(status.get("code") or 500), reason=reason))
    return {"type": event["type"], "object": event["object"]}
