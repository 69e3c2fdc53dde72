"""Addresses of the resources this controller reads and writes, and a thin typed wrapper over them.

Objects travel as plain dicts (what the API returns for custom resources): the domain code never sees the
client library's model classes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from kubernetes_asyncio import client as k8s_client

from multikueue.kube.client import ApiClient
from multikueue.kube.errors import NotFound
from multikueue.kube.listwatch import ApiListSource

Object = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    # Whether ``/status`` is a subresource (discovery tells). Without one (Argo's minimal Workflow CRD has
    # ``subresources: {}``) status is written through the object itself, and ``PATCH .../status`` is a 404.
    status_subresource: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}/{self.version}" if self.group else f"{self.plural}/{self.version}"


KUEUE = "kueue.x-k8s.io"
WORKLOADS = Resource(KUEUE, "v1beta2", "workloads", "Workload")
ADMISSION_CHECKS = Resource(KUEUE, "v1beta2", "admissionchecks", "AdmissionCheck", namespaced=False)
MULTIKUEUE_CLUSTERS = Resource(KUEUE, "v1beta2", "multikueueclusters", "MultiKueueCluster", namespaced=False)
MULTIKUEUE_CONFIGS = Resource(KUEUE, "v1beta2", "multikueueconfigs", "MultiKueueConfig", namespaced=False)
RESOURCE_FLAVORS = Resource(KUEUE, "v1beta2", "resourceflavors", "ResourceFlavor", namespaced=False)


class Objects:
    """CRUD on one resource of one cluster. ``get``/``delete`` treat 404 as an answer, not an error."""

    def __init__(self, api: ApiClient, resource: Resource) -> None:
        self.api = api
        self.resource = resource
        # Typed as Any on purpose: this is the one boundary with CustomObjectsApi, whose stubs lack
        # `_content_type` (needed for merge patches) and want model classes where dicts are the documented use.
        self._co: Any = k8s_client.CustomObjectsApi(api)

    def _address(self, namespace: str | None) -> tuple[str, ...]:
        r = self.resource
        if r.namespaced:
            if not namespace:
                raise ValueError(f"{r} is namespaced: a namespace is required")
            return (r.group, r.version, namespace, r.plural)
        return (r.group, r.version, r.plural)

    def _method(self, verb: str, suffix: str = "") -> Any:
        """``CustomObjectsApi.<verb>_{namespaced|cluster}_custom_object<suffix>`` for this resource's scope."""
        scope = "namespaced" if self.resource.namespaced else "cluster"
        return getattr(self._co, f"{verb}_{scope}_custom_object{suffix}")

    async def get(self, name: str, namespace: str | None = None) -> Object | None:
        try:
            result: Object = await self._method("get")(*self._address(namespace), name)
        except NotFound:
            return None
        return result

    async def items(self, namespace: str | None = None) -> list[Object]:
        """Every object (in ``namespace``, for a namespaced resource), in one request."""
        result = await self._method("list")(*self._address(namespace))
        return list(result.get("items") or [])

    async def create(self, body: Object, namespace: str | None = None) -> Object:
        result: Object = await self._method("create")(*self._address(namespace), body)
        return result

    async def delete(self, name: str, namespace: str | None = None, *, propagation: str = "Background") -> bool:
        try:
            await self._method("delete")(*self._address(namespace), name, propagation_policy=propagation)
        except NotFound:
            return False
        return True

    async def patch(self, name: str, patch: Object, namespace: str | None = None) -> Object:
        """A JSON merge patch (RFC 7386: ``None`` deletes a key, lists are replaced whole)."""
        result: Object = await self._method("patch")(*self._address(namespace), name, patch, _content_type=MERGE_PATCH)
        return result

    async def json_patch(self, name: str, operations: list[Object], namespace: str | None = None) -> Object:
        """A JSON patch (RFC 6902: operations at exact paths, array items by index; a failed ``test`` is a 422)."""
        method = self._method("patch")
        result: Object = await method(*self._address(namespace), name, operations, _content_type=JSON_PATCH)
        return result

    async def patch_status(self, name: str, patch: Object, namespace: str | None = None) -> Object:
        """A JSON merge patch of the status: on the ``/status`` subresource, or on the object itself for a kind
        that has none (where the object's endpoint keeps the status it is sent)."""
        method = self._method("patch", "_status" if self.resource.status_subresource else "")
        result: Object = await method(*self._address(namespace), name, patch, _content_type=MERGE_PATCH)
        return result

    def source(self, *, namespace: str | None = None, label_selector: str | None = None) -> ApiListSource:
        """A list+watch source for an informer (all namespaces unless ``namespace``)."""
        r = self.resource
        filters = {"label_selector": label_selector} if label_selector else {}
        where = f"namespace {namespace}" if namespace else "all namespaces"
        if namespace:
            method = functools.partial(self._co.list_namespaced_custom_object, r.group, r.version, namespace, r.plural)
        else:
            method = functools.partial(self._co.list_cluster_custom_object, r.group, r.version, r.plural)
        selector = f" with {label_selector}" if label_selector else ""
        return ApiListSource(method, description=f"{r} in {where}{selector}", **filters)
