"""A thin typed wrapper over one resource of one cluster (the addresses are in kube/addresses.py).

Objects travel as plain dicts (what the API returns for custom resources): the domain code never sees the
client library's model classes.
"""

from __future__ import annotations

from typing import Any

from multikueue.kube.addresses import Resource
from multikueue.kube.client import JSON_PATCH, MERGE_PATCH, ApiClient
from multikueue.kube.errors import NotFound
from multikueue.kube.listwatch import ApiListSource

Object = dict[str, Any]


class Objects:
    """CRUD on one resource of one cluster. ``get``/``delete`` treat 404 as an answer, not an error."""

    def __init__(self, api: ApiClient, resource: Resource) -> None:
        self.api = api
        self.resource = resource

    def path(self, namespace: str | None = None, name: str = "", subresource: str = "") -> str:
        """The resource's URL path: its collection (in ``namespace``, or in all of them), one object, or one of its
        subresources."""
        r = self.resource
        path = f"/apis/{r.group}/{r.version}" if r.group else f"/api/{r.version}"
        if namespace:
            path += f"/namespaces/{namespace}"
        path += f"/{r.plural}"
        if name:
            path += f"/{name}/{subresource}" if subresource else f"/{name}"
        return path

    def _in(self, namespace: str | None) -> str | None:
        if self.resource.namespaced and not namespace:
            raise ValueError(f"{self.resource} is namespaced: a namespace is required")
        return namespace if self.resource.namespaced else None

    async def get(self, name: str, namespace: str | None = None) -> Object | None:
        try:
            result: Object = await self.api.request("GET", self.path(self._in(namespace), name))
        except NotFound:
            return None
        return result

    async def items(self, namespace: str | None = None) -> list[Object]:
        """Every object (in ``namespace``, for a namespaced resource), in one request."""
        result = await self.api.request("GET", self.path(self._in(namespace)))
        return list(result.get("items") or [])

    async def create(self, body: Object, namespace: str | None = None) -> Object:
        result: Object = await self.api.request("POST", self.path(self._in(namespace)), body=body)
        return result

    async def delete(
        self, name: str, namespace: str | None = None, *, propagation: str = "Background", uid: str | None = None
    ) -> bool:
        """``uid``: delete only the object of that UID (a precondition: another one of that name is a 409)."""
        body = {"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"uid": uid}} if uid else None
        try:
            path = self.path(self._in(namespace), name)
            await self.api.request("DELETE", path, query={"propagationPolicy": propagation}, body=body)
        except NotFound:
            return False
        return True

    async def patch(self, name: str, patch: Object, namespace: str | None = None) -> Object:
        """A JSON merge patch (RFC 7386: ``None`` deletes a key, lists are replaced whole)."""
        path = self.path(self._in(namespace), name)
        result: Object = await self.api.request("PATCH", path, body=patch, content_type=MERGE_PATCH)
        return result

    async def json_patch(self, name: str, operations: list[Object], namespace: str | None = None) -> Object:
        """A JSON patch (RFC 6902: operations at exact paths, array items by index; a failed ``test`` is a 422)."""
        path = self.path(self._in(namespace), name)
        result: Object = await self.api.request("PATCH", path, body=operations, content_type=JSON_PATCH)
        return result

    async def patch_status(self, name: str, patch: Object, namespace: str | None = None) -> Object:
        """A JSON merge patch of the status: on the ``/status`` subresource, or on the object itself for a kind
        that has none (where the object's endpoint keeps the status it is sent)."""
        subresource = "status" if self.resource.status_subresource else ""
        path = self.path(self._in(namespace), name, subresource)
        result: Object = await self.api.request("PATCH", path, body=patch, content_type=MERGE_PATCH)
        return result

    def source(self, *, namespace: str | None = None, label_selector: str | None = None) -> ApiListSource:
        """A list+watch source for an informer (all namespaces unless ``namespace``)."""
        where = f"namespace {namespace}" if namespace else "all namespaces"
        selector = f" with {label_selector}" if label_selector else ""
        return ApiListSource(
            self.api, self.path(namespace), description=f"{self.resource} in {where}{selector}",
            query={"labelSelector": label_selector},
        )  # fmt: skip
