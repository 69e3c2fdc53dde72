"""RFC 7386 JSON merge patches on plain objects: the diff, its application, and the fields a server pruned.

Pure: the status mirror, the integration and the adapter check compute and compare patches with these.
"""

from __future__ import annotations

import copy
from typing import Any

Object = dict[str, Any]


class _Same:
    pass


SAME: Any = _Same()
"""What ``merge_diff`` returns when there is nothing to patch (``None`` would be a patch: a removal)."""


def merge_diff(old: Any, new: Any) -> Any:
    """An RFC 7386 merge patch from ``old`` to ``new``; ``SAME`` when equal. Removed keys become ``None``."""
    if old == new:
        return SAME
    if not isinstance(old, dict) or not isinstance(new, dict):
        return copy.deepcopy(new)
    patch: Object = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        if key not in old:
            patch[key] = copy.deepcopy(value)
            continue
        sub = merge_diff(old[key], value)
        if sub is not SAME:
            patch[key] = sub
    return patch


def apply_merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386 ``MergePatch(target, patch)`` (used to check diffs round-trip)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = apply_merge_patch(result.get(key), value)
    return result


def pruned_paths(sent: Any, kept: Any, prefix: str = "") -> list[str]:
    """The fields of a merge patch ``sent`` that the object written back (``kept``) does not have: what the API
    server pruned because its schema has no place for them. Dotted paths, ``[]`` for every item of a list."""
    if isinstance(sent, dict):
        if not isinstance(kept, dict):
            return [prefix] if prefix else []
        found: list[str] = []
        for key, value in sent.items():
            path = f"{prefix}.{key}" if prefix else key
            if value is None:
                continue  # a removal: nothing to keep
            if key not in kept:
                found.append(path)
            else:
                found.extend(pruned_paths(value, kept[key], path))
        return found
    if isinstance(sent, list) and isinstance(kept, list) and len(sent) == len(kept):
        items = sorted({p for s, k in zip(sent, kept, strict=True) for p in pruned_paths(s, k, f"{prefix}[]")})
        return items
    return []


def without_paths(obj: Object, paths: frozenset[str]) -> Object:
    """A copy of ``obj`` without the fields at ``paths`` (as ``pruned_paths`` names them)."""
    result = copy.deepcopy(obj)
    for path in paths:
        _drop(result, path.replace("[]", ".[]").split("."))
    return result


def _drop(value: Any, parts: list[str]) -> None:
    if not parts:
        return
    head, rest = parts[0], parts[1:]
    if head == "[]":
        for item in value if isinstance(value, list) else []:
            _drop(item, rest)
    elif isinstance(value, dict) and head in value:
        if rest:
            _drop(value[head], rest)
        else:
            del value[head]
