"""Which object a Workload belongs to: its controller owner reference, as two informer indexes.

The dispatcher (a change to a PipelineRun wakes its Workload) and the integration (the Workload of an object, the
Workloads to delete with it) read the same Workload cache through these, rather than each keeping a map of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from typing import Any

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
