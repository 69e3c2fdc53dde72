"""The manager's published schemas against the configuration: a ``managedByPath`` the kind's schema has no place
for (the API server would drop it from every object, so none is ever dispatched), said at start and on reload."""

from __future__ import annotations

from collections.abc import Iterable

from multikueue.config import Configuration
from multikueue.jsonpaths import field_names
from multikueue.kube import openapi
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import KubeError
from multikueue.schemas import keeps, managed_by_pruned


async def published_kinds(
    api: ApiClient, gvks: Iterable[GroupVersionKind]
) -> dict[GroupVersionKind, openapi.KindSchema]:
    """The manager's published schema of each kind that has one now (not published yet, or unreadable: left out)."""
    found: dict[GroupVersionKind, openapi.KindSchema] = {}
    try:
        index = await openapi.published(api)  # once for every kind
    except KubeError:
        return found
    for gvk in gvks:
        try:
            schema = await openapi.kind_schema(api, gvk.group, gvk.version, gvk.kind, index=index)
        except KubeError:
            continue
        if schema is not None:
            found[gvk] = schema
    return found


def managed_by_problems(config: Configuration, schemas: dict[GroupVersionKind, openapi.KindSchema]) -> list[str]:
    """One line per configured kind whose managedByPath its schema prunes (a path that is not a plain chain of
    fields, or a kind without a schema, says nothing)."""
    problems = []
    for gvk, published in schemas.items():
        path = config.adapter(gvk).managed_by_path
        fields = field_names(path)
        if fields is not None and not keeps(published.schema, published.components, fields):
            problems.append(managed_by_pruned(gvk.kind, path, config.dispatcher.managed_by))
    return problems
