"""Discovery: the resource behind a kind (its plural, scope and whether it has a ``/status`` subresource), as a
RESTMapper finds it."""

from __future__ import annotations

from kubernetes_asyncio import client as k8s_client

from multikueue.config import GroupVersionKind
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import ApiError, NotFound
from multikueue.kube.resources import Resource


class KindUnavailable(Exception):
    """The cluster does not serve this kind (its CRD is missing)."""


class KindMisspelt(KindUnavailable):
    """The cluster serves the kind under another spelling: kinds are case-sensitive."""

    def __init__(self, gvk: GroupVersionKind, served: GroupVersionKind) -> None:
        written, right = f"{gvk.kind}.{gvk.version}.{gvk.group}", f"{served.kind}.{served.version}.{served.group}"
        super().__init__(f'kind "{written}" is not served; kinds are case-sensitive: did you mean "{right}"?')
        self.served = served


async def discover_resource(api: ApiClient, gvk: GroupVersionKind) -> Resource:
    """Find ``gvk``'s resource. Raises ``KindUnavailable`` (``KindMisspelt`` when only the case differs)."""
    missing = f'no matches for kind "{gvk.kind}" in version "{gvk.api_version}"'
    try:
        listed = await k8s_client.CustomObjectsApi(api).get_api_resources(gvk.group, gvk.version)
    except NotFound:
        raise await _misspelt(api, gvk) or KindUnavailable(missing) from None
    resources = listed.resources or []
    names = {r.name for r in resources}
    for resource in resources:
        if resource.kind == gvk.kind and "/" not in resource.name:
            return Resource(
                gvk.group,
                gvk.version,
                resource.name,
                gvk.kind,
                namespaced=bool(resource.namespaced),
                status_subresource=f"{resource.name}/status" in names,
            )
    for resource in resources:
        if resource.kind.lower() == gvk.kind.lower() and "/" not in resource.name:
            raise KindMisspelt(gvk, GroupVersionKind(gvk.group, gvk.version, resource.kind))
    raise KindUnavailable(missing)


async def _misspelt(api: ApiClient, gvk: GroupVersionKind) -> KindMisspelt | None:
    """The group or version in another case (``pipelinerun.v1.Tekton.dev``): the served spelling, if any."""
    try:
        groups = await k8s_client.ApisApi(api).get_api_versions()
    except ApiError:
        return None
    for group in groups.groups or []:
        if group.name.lower() != gvk.group.lower():
            continue
        for version in group.versions or []:
            if version.version.lower() != gvk.version.lower():
                continue
            try:
                listed = await k8s_client.CustomObjectsApi(api).get_api_resources(group.name, version.version)
            except ApiError:
                return None
            for resource in listed.resources or []:
                if resource.kind.lower() == gvk.kind.lower() and "/" not in resource.name:
                    return KindMisspelt(gvk, GroupVersionKind(group.name, version.version, resource.kind))
    return None


async def cluster_identity(api: ApiClient) -> str:
    """What tells one cluster from another: the UID of its ``kube-system`` namespace (created once, never
    recreated). Raises the API's error where it cannot be read."""
    namespace = await k8s_client.CoreV1Api(api).read_namespace("kube-system")
    return str(namespace.metadata.uid)
