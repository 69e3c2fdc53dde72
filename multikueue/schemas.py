"""What an object of a kind can hold, read from its published schema (pure): a field the schema has no place for
is pruned by the API server from every write, silently unless the client asks for strict validation."""

from __future__ import annotations

from typing import Any

Object = dict[str, Any]
PRESERVE = "x-kubernetes-preserve-unknown-fields"


def _resolved(node: Object, components: Object) -> Object:
    """Follow a ``$ref`` (directly or as the only ``allOf`` entry, as published schemas wrap them)."""
    for _ in range(8):  # refs to refs: bounded
        ref = node.get("$ref")
        if ref is None and len(node.get("allOf") or []) == 1:
            ref = node["allOf"][0].get("$ref")
        if not isinstance(ref, str):
            return node
        node = components.get(ref.rsplit("/", 1)[-1]) or {}
    return node


def keeps(schema: Object, components: Object, fields: list[str]) -> bool:
    """Whether an object of ``schema`` keeps a value at ``fields`` (a chain of field names from the root)."""
    node = schema
    for name in fields:
        node = _resolved(node, components)
        if node.get(PRESERVE):
            return True
        properties = node.get("properties") or {}
        if name in properties:
            node = properties[name]
            continue
        extra = node.get("additionalProperties")
        if isinstance(extra, dict):
            node = extra
            continue
        return extra is True
    return True


def managed_by_pruned(kind: str, path: str, managed_by: str) -> str:
    """What to tell when the manager's schema has no place at ``managedByPath``."""
    return (
        f"{kind}: the manager's {kind} schema has no field at managedByPath {path}: the API server drops it from "
        f"every {kind} written there, so none is seen as managed by {managed_by} (in Direct mode none is placed; "
        f"in Kueue mode the manager's own {kind} controller may run it). Install a {kind} CRD version that has the "
        f'field, or use an annotation: managedByPath: .metadata.annotations["multikueue.x-k8s.io/managed-by"]'
    )
