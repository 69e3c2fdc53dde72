"""The API server's published schemas (OpenAPI v3 discovery, readable by every authenticated identity): what a
kind's objects can hold, and when a group version's schema changes (its document's hash), without the right to
read CustomResourceDefinitions.

A CRD's schema is published a few seconds after the CRD is established: until then a group version is absent.
"""

from __future__ import annotations

from collections.abc import Callable
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


async def kind_schema(api: ApiClient, group: str, version: str, kind: str) -> KindSchema | None:
    """The published schema of ``kind``; ``None`` when the group version or the kind is not published (yet)."""
    url = (await published(api)).get(group_version_path(group, version))
    if not url:
        return None
    document = await api.request("GET", url)
    schemas: Object = (document.get("components") or {}).get("schemas") or {}
    for schema in schemas.values():
        for gvk in schema.get("x-kubernetes-group-version-kind") or []:
            if (gvk.get("group", ""), gvk.get("version"), gvk.get("kind")) == (group, version, kind):
                return KindSchema(schema, schemas)
    return None


async def watch_changes(
    api: ApiClient, on_change: Callable[[set[str]], None], *, interval: Callable[[], float] = lambda: RECHECK_SECONDS
) -> None:
    """Call ``on_change`` with the group versions whose published schema changed, every ``interval`` seconds, until
    cancelled. An unreadable round is skipped (logged), the last good view kept."""
    seen: dict[str, str] | None = None
    while True:
        try:
            now = await published(api)
        except KubeError as e:
            log.warning("published schemas not readable; looked at again later", error=describe(e))
        else:
            if seen is not None:
                changed = {path for path, url in now.items() if seen.get(path) not in (None, url)}
                if changed:
                    on_change(changed)
            seen = now
        await anyio.sleep(interval())
