"""A list endpoint of one cluster as a list+watch source of raw objects, for ``runtime.informer``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import aiohttp
import anyio
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from multikueue.kube.errors import typed

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
            raise typed(ApiException(status=response.status, reason=body.decode(errors="replace")[:300]))
        result: Object = json.loads(body)
        return result

    async def watch(self, *, resource_version: str, timeout_seconds: int) -> AsyncIterator[Object]:
        read_timeout = aiohttp.ClientTimeout(connect=10, sock_connect=10, sock_read=timeout_seconds + 15)
        stream = watch.Watch()
        try:
            async for event in stream.stream(
                self._method,
                *self._args,
                **self._filters,
                resource_version=resource_version,
                allow_watch_bookmarks=True,
                timeout_seconds=timeout_seconds,
                _request_timeout=read_timeout,
            ):
                yield {"type": event["type"], "object": event["raw_object"]}
        except ApiException as e:  # an ERROR event (410 Gone: the history asked for is compacted)
            raise typed(e) from None
        finally:
            # Shielded: a watch cancelled mid-stream (shutdown, kubeconfig rotation) must still release its
            # response and the HTTP session Watch() opens for itself, or every restart leaks one.
            with anyio.CancelScope(shield=True):
                await stream.close()
