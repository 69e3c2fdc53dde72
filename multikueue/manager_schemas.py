"""The manager's published schemas against the configuration: a ``managedByPath`` the kind's schema has no place
for (the API server would drop it from every object, so none is ever dispatched), said at start and on reload."""

from __future__ import annotations

from multikueue.config import Configuration
from multikueue.jsonpaths import field_names
from multikueue.kube import openapi
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import KubeError
from multikueue.schemas import keeps, managed_by_pruned


async def managed_by_problems(api: ApiClient, config: Configuration) -> list[str]:
    """One line per configured kind whose managedByPath the manager's schema prunes. A kind not published (yet), a
    path that is not a plain chain of fields, or a schema that cannot be read says nothing."""
    problems = []
    for gvk in config.multi_kueue.gvks:
        path = config.adapter(gvk).managed_by_path
        fields = field_names(path)
        if fields is None:
            continue
        try:
            published = await openapi.kind_schema(api, gvk.group, gvk.version, gvk.kind)
        except KubeError:
            continue
        if published is not None and not keeps(published.schema, published.components, fields):
            problems.append(managed_by_pruned(gvk.kind, path, config.dispatcher.managed_by))
    return problems
