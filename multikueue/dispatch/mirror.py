"""What the manager cannot hold of a worker's status: fields its schema prunes, learnt from the writes' answers.

A manager CRD older than the worker's controller drops the newer status fields without an error. Mirroring would
then see a difference on every pass and write it again forever. The first answer that lacks a field sent is
remembered per kind (not compared again) and told once per object, as an Event naming the fields; forgotten when
the kind's published schema changes (the CRD upgraded as the Event advised), so the fields are mirrored again.
"""

from __future__ import annotations

from typing import Any

from multikueue.kube.addresses import GroupVersionKind
from multikueue.mergepatch import pruned_paths
from multikueue.runtime.informer import ObjectKey

Object = dict[str, Any]


class PrunedFields:
    def __init__(self) -> None:
        self._paths: dict[GroupVersionKind, frozenset[str]] = {}
        self._told: set[tuple[GroupVersionKind, ObjectKey]] = set()

    def of(self, gvk: GroupVersionKind) -> frozenset[str]:
        return self._paths.get(gvk, frozenset())

    def learn(self, gvk: GroupVersionKind, key: ObjectKey, patch: Object, answer: Object) -> list[str]:
        """Record what ``answer`` lacks of ``patch``; the paths to tell about (once per object), else ``[]``."""
        lost = pruned_paths(patch.get("status"), answer.get("status"), "status")
        if not lost:
            return []
        self._paths[gvk] = self.of(gvk) | frozenset(lost)
        if (gvk, key) in self._told:
            return []
        self._told.add((gvk, key))
        return lost

    def forget(self, gvk: GroupVersionKind, key: ObjectKey) -> None:
        self._told.discard((gvk, key))

    def forget_kind(self, gvk: GroupVersionKind) -> bool:
        """The kind's schema changed: what it dropped is tried again (and told again, if it still drops it).
        Whether anything was remembered for it."""
        self._told = {told for told in self._told if told[0] != gvk}
        return self._paths.pop(gvk, None) is not None


def pruned_message(kind: str, key: ObjectKey, worker: str, paths: list[str]) -> str:
    return (
        f"{kind} {key}: the manager's {kind} schema drops status fields that worker {worker} writes: "
        f"{', '.join(paths)}; they are not mirrored (install the worker's CRD version on the manager)"
    )
