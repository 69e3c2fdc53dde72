"""The API server's published schemas (OpenAPI v3 discovery, readable by every authenticated identity): what a
kind's objects can hold, and when a group version's schema changes (its document's hash), without the right to
read CustomResourceDefinitions.

A CRD's schema is published a few seconds after the CRD is established: until then a group version is absent.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import structlog

from multikueue.kube.client import ApiClient
from multikueue.kube.errors import KubeError, describe

log = structlog.get_logger(__name__)
Object = dict[str, Any]

RECHECK_SECONDS = 30.0
"""How often the published schemas are compared with the last seen (a CRD upgraded on the manager)."""


def group_version_path(group: str, version: str) -> str:
    """The key of a group version in ``/openapi/v3``'s ``paths`` (``apis/tekton.dev/v1``, ``api/v1``)."""
    return f"apis/{group}/{version}" if group else f"api/{version}"


async def published(api: ApiClient) -> dict[str, str]:
    """Each group version's document URL, whose ``hash`` changes with its schema."""
    root = await api.request("GET", "/openapi/v3")
    return {
        path: str((entry or {}).get("serverRelativeURL") or "") for path, entry in (root.get("paths") or {}).items()
    }


@dataclass(frozen=True)
class KindSchema:
    schema: Object  # the kind's schema (components.schemas entry)
    components: Object  # every schema of the document, for ``$ref``s

    @property
    def digest(self) -> str:
        """Changes with the kind's own schema only (a group version's hash also changes with its other kinds')."""
        return hashlib.sha256(json.dumps(self.schema, sort_keys=True).encode()).hexdigest()


async def kind_schema(
    api: ApiClient, group: str, version: str, kind: str, *, index: dict[str, str] | None = None
) -> KindSchema | None:
    """The published schema of ``kind``; ``None`` when the group version or the kind is not published (yet).
    ``index``: ``published``'s answer, when the caller already has it (one read for several kinds)."""
    url = (index if index is not None else await published(api)).get(group_version_path(group, version))
    if not url:
        return None
    document = await api.request("GET", url)
    schemas: Object = (document.get("components") or {}).get("schemas") or {}
    for schema in schemas.values():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            if (gvk.get("group", ""), gvk.get("version"), gvk.get("kind")) == (group, version, kind):
                return KindSchema(schema, schemas)
    return None


def changed_paths(seen: dict[str, str], now: dict[str, str], gone: set[str]) -> set[str]:
    """The group versions whose document changed since ``seen``, or came back after being ``gone`` (a CRD deleted and
    created again). ``gone`` is updated in place."""
    changed = {path for path, url in now.items() if (path in seen and seen[path] != url) or path in gone}
    gone.update(set(seen) - set(now))
    gone.difference_update(now)
    return changed


async def watch_changes(
    api: ApiClient,
    on_change: Callable[[set[str]], Awaitable[None]],
    *,
    interval: Callable[[], float] = lambda: RECHECK_SECONDS,
) -> None:
    """Await ``on_change`` with the group versions whose published schema changed, every ``interval`` seconds, until
    cancelled. An unreadable round is skipped (logged), the last good view kept."""
    seen: dict[str, str] | None = None
    gone: set[str] = set()
    while True:
        try:
            now = await published(api)
        except KubeError as e:
            log.warning("published schemas not readable; looked at again later", error=describe(e))
        else:
            changed = changed_paths(seen, now, gone) if seen is not None else set()
            seen = now
            if changed:
                await on_change(changed)
        await anyio.sleep(interval())
