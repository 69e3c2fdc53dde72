"""Which object a Workload belongs to: its controller owner reference, as two informer indexes.

The dispatcher (a change to a PipelineRun wakes its Workload) and the integration (the Workload of an object, the
Workloads to delete with it) read the same Workload cache through these, rather than each keeping a map of its own.
The name of the Workload an object gets is here too: the integration creates it, ``adapter check`` previews it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Hashable, Iterable
from typing import Any

from multikueue.kube.addresses import GroupVersionKind

Object = dict[str, Any]

BY_OWNER_UID = "controller-owner-uid"
"""Index of Workloads by the UID of their controller owner."""

BY_OWNER_NAME = "controller-owner-name"
"""Index of Workloads by (namespace, owner kind, owner name) of their controller owner: the only way to find them
once the owner is deleted and its UID no longer known."""


def controller_refs(obj: Object) -> list[dict[str, Any]]:
    """The owner references marked ``controller`` (a Workload has at most one)."""
    return [ref for ref in obj["metadata"].get("ownerReferences") or [] if ref.get("controller")]


def owner_uids(obj: Object) -> list[str]:
    return [str(ref.get("uid", "")) for ref in controller_refs(obj)]


def owner_names(obj: Object) -> list[tuple[str, str, str]]:
    namespace = obj["metadata"].get("namespace", "")
    return [(namespace, str(ref.get("kind", "")), str(ref.get("name", ""))) for ref in controller_refs(obj)]


INDEXES: dict[str, Callable[[Object], Iterable[Hashable]]] = {BY_OWNER_UID: owner_uids, BY_OWNER_NAME: owner_names}
"""Every Workload informer carries both."""

_MAX_NAME = 253  # Kueue's default; its ShortWorkloadNames gate (alpha, off) would make it 63
_HASH = 5


def workload_name(owner_name: str, owner_uid: str, gvk: GroupVersionKind) -> str:
    """``<kind>-<name>-<hash5>``, as Kueue's ``GetWorkloadNameForOwnerWithGVK`` names it."""
    prefix = f"{gvk.kind.lower()}-{owner_name}"[: _MAX_NAME - 1 - _HASH]
    digest = hashlib.sha1(f"{gvk.kind}\n{gvk.group}\n{owner_name}\n{owner_uid}".encode(), usedforsecurity=False)
    return f"{prefix}-{digest.hexdigest()[:_HASH]}"
