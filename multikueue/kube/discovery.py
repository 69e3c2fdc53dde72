"""Discovery: the resource behind a kind (its plural, scope and whether it has a ``/status`` subresource), as a
RESTMapper finds it, and the poller that finds a kind whose CRD is installed after start."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import structlog

from multikueue.kube.addresses import GroupVersionKind, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import ApiError, KubeError, NotFound

log = structlog.get_logger(__name__)


class KindUnavailable(Exception):
    """The cluster does not serve this kind (its CRD is missing)."""


class KindMisspelt(KindUnavailable):
    """The cluster serves the kind under another spelling: kinds are case-sensitive."""

    def __init__(self, gvk: GroupVersionKind, served: GroupVersionKind) -> None:
        written, right = f"{gvk.kind}.{gvk.version}.{gvk.group}", f"{served.kind}.{served.version}.{served.group}"
        super().__init__(f'kind "{written}" is not served; kinds are case-sensitive: did you mean "{right}"?')
        self.served = served


async def _resources(api: ApiClient, group: str, version: str) -> list[dict[str, Any]]:
    """The APIResourceList of one group version (the core group is ``/api/v1``)."""
    listed = await api.request("GET", f"/apis/{group}/{version}" if group else f"/api/{version}")
    return list(listed.get("resources") or [])


async def discover_resource(api: ApiClient, gvk: GroupVersionKind) -> Resource:
    """Find ``gvk``'s resource. Raises ``KindUnavailable`` (``KindMisspelt`` when only the case differs)."""
    missing = f'no matches for kind "{gvk.kind}" in version "{gvk.api_version}"'
    try:
        resources = await _resources(api, gvk.group, gvk.version)
    except NotFound:
        raise await _misspelt(api, gvk) or KindUnavailable(missing) from None
    names = {r["name"] for r in resources}
    for resource in resources:
        if resource["kind"] == gvk.kind and "/" not in resource["name"]:
            return Resource(
                gvk.group,
                gvk.version,
                resource["name"],
                gvk.kind,
                namespaced=bool(resource.get("namespaced")),
                status_subresource=f"{resource['name']}/status" in names,
            )
    for resource in resources:
        if resource["kind"].lower() == gvk.kind.lower() and "/" not in resource["name"]:
            raise KindMisspelt(gvk, GroupVersionKind(gvk.group, gvk.version, resource["kind"]))
    raise KindUnavailable(missing)


async def _misspelt(api: ApiClient, gvk: GroupVersionKind) -> KindMisspelt | None:
    """The group or version in another case (``pipelinerun.v1.Tekton.dev``): the served spelling, if any."""
    try:
        groups = (await api.request("GET", "/apis")).get("groups") or []
    except ApiError:
        return None
    for group in groups:
        if group["name"].lower() != gvk.group.lower():
            continue
        for version in group.get("versions") or []:
            if version["version"].lower() != gvk.version.lower():
                continue
            try:
                resources = await _resources(api, group["name"], version["version"])
            except ApiError:
                return None
            for resource in resources:
                if resource["kind"].lower() == gvk.kind.lower() and "/" not in resource["name"]:
                    return KindMisspelt(gvk, GroupVersionKind(group["name"], version["version"], resource["kind"]))
    return None


async def cluster_identity(api: ApiClient) -> str:
    """What tells one cluster from another: the UID of its ``kube-system`` namespace (created once, never
    recreated). Raises the API's error where it cannot be read."""
    namespace = await api.request("GET", "/api/v1/namespaces/kube-system")
    return str(namespace["metadata"]["uid"])


KIND_RETRY_SECONDS = 30.0
"""How often a configured kind that a cluster does not serve (its CRD missing) is looked for again."""
_DISCOVERY_FAILURES: tuple[type[Exception], ...] = (KindUnavailable, KubeError)


async def discover_later(
    api: ApiClient, missing: list[GroupVersionKind], on_served: Callable[[GroupVersionKind, Resource], None]
) -> None:
    """Look for each kind in ``missing`` every ``KIND_RETRY_SECONDS`` and hand it to ``on_served`` once the cluster
    serves it: a CRD installed after start is picked up without a restart. Returns when none is missing."""
    while missing:
        await anyio.sleep(KIND_RETRY_SECONDS)
        for gvk in list(missing):
            try:
                resource = await discover_resource(api, gvk)
            except _DISCOVERY_FAILURES:
                continue  # still missing, or the server did not answer: the next round asks again
            missing.remove(gvk)
            log.info("kind now served; watching it", kind=str(gvk))
            on_served(gvk, resource)
