"""A list endpoint of one cluster as a list+watch source of raw objects, for ``runtime.informer``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from multikueue.kube.client import ApiClient, Query, Timeouts, decode
from multikueue.kube.errors import StreamBroken, refused
from multikueue.kube.failures import broken, where

Object = dict[str, Any]


class ApiListSource:
    """``GET <path>`` (a collection, filtered by ``query``: label or field selectors), listed in pages and watched.

    Lists and watch events are decoded once into plain dicts, which is what the informer's cache holds.
    """

    def __init__(self, api: ApiClient, path: str, *, description: str, query: Query | None = None) -> None:
        self.api = api
        self.path = path
        self.query = dict(query or {})
        self.description = description

    async def list(self, *, limit: int, continue_token: str | None) -> Object:
        query = {**self.query, "limit": limit, "continue": continue_token or None}
        result: Object = await self.api.request("GET", self.path, query=query)
        return result

    async def watch(self, *, resource_version: str, timeout_seconds: int) -> AsyncIterator[Object]:
        """The watch's events as they arrive, each line decoded once. A line that is not a watch event (garbled, or
        cut off) raises ``StreamBroken``."""
        read_timeout = Timeouts(connect=10, read=timeout_seconds + 15)
        query = {
            **self.query, "watch": True, "resourceVersion": resource_version, "allowWatchBookmarks": True,
            "timeoutSeconds": timeout_seconds,
        }  # fmt: skip
        async with self.api.stream(self.path, query=query, timeout=read_timeout) as lines:
            async for line in lines:
                if not line.strip():
                    continue
                try:
                    event = decode(line)
                except ValueError as e:
                    raise broken(e, self.api.host) from e
                if not isinstance(event, dict) or "type" not in event or "object" not in event:
                    text = line[:80].decode(errors="replace").strip()
                    raise StreamBroken(f"the watch from {where(self.api.host)} sent a line that is no event: {text}")
                yield event_of(event)


def event_of(event: Object) -> Object:
    """A watch event as the informer takes it; an ERROR event (410 Gone: the history asked for is compacted) is
    raised as the API error it carries."""
    if event.get("type") == "ERROR":
        status = event.get("object") or {}
        reason = f"{status.get('reason')}: {status.get('message')}"
        raise refused(int(status.get("code") or 500), reason, json.dumps(status))
    return {"type": event["type"], "object": event["object"]}
