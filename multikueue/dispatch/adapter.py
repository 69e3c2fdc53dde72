"""The generic adapter for an external-framework kind: pure functions, the reconciler does the I/O.

Kueue's fixed transformation (externalframeworks/adapter.go): a worker copy carries only name, namespace,
labels, annotations and spec, with ``spec.managedBy`` removed, the origin label and the prebuilt-workload
annotation added; never ownerReferences (the worker's garbage collector would delete the copy in a loop, Kueue
#12540), uid, finalizers or status. The worker's ``/status`` is mirrored back whole.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from multikueue.config import GroupVersionKind
from multikueue.labels import ORIGIN_LABEL, PREBUILT_WORKLOAD

Object = dict[str, Any]


@dataclass(frozen=True)
class GenericAdapter:
    gvk: GroupVersionKind
    managed_by: str

    def is_managed(self, obj: Object) -> tuple[bool, str]:
        """``.spec.managedBy`` must equal the accepted value; the reason is Kueue's wording."""
        value = (obj.get("spec") or {}).get("managedBy")
        if value == self.managed_by:
            return True, ""
        shown = "" if value is None else value
        return False, f'Expecting .spec.managedBy to be "{self.managed_by}" not "{shown}"'

    def build_remote(self, local: Object, *, workload_name: str, origin: str) -> Object:
        meta = local["metadata"]
        spec = copy.deepcopy(local.get("spec") or {})
        spec.pop("managedBy", None)
        return {
            "apiVersion": self.gvk.api_version,
            "kind": self.gvk.kind,
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "labels": {**(meta.get("labels") or {}), ORIGIN_LABEL: origin},
                "annotations": {**(meta.get("annotations") or {}), PREBUILT_WORKLOAD: workload_name},
            },
            "spec": spec,
        }

    def status_patch(self, local: Object, remote: Object) -> Object | None:
        """The merge patch that makes the manager's status equal the worker's, or ``None`` if nothing to do."""
        if "status" not in remote:
            return None
        diff = merge_diff(local.get("status"), remote["status"])
        return None if diff is _SAME else {"status": diff}


class _Same:
    pass


_SAME: Any = _Same()


def merge_diff(old: Any, new: Any) -> Any:
    """An RFC 7386 merge patch from ``old`` to ``new``; ``_SAME`` when equal. Removed keys become ``None``."""
    if old == new:
        return _SAME
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
        if sub is not _SAME:
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
