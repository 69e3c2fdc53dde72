"""The status mirror, one step of a copy's life in both modes: the worker copy's status written on the manager object.

Held while the manager object is suspended (the write would be rejected or misleading; said once per suspension),
not written for a copy with no status yet, refused writes raised as ``StatusRejected``.

What the manager cannot hold of a worker's status: fields its schema prunes, learnt from the writes' answers. A
manager CRD older than the worker's controller drops the newer status fields without an error. Mirroring would
then see a difference on every pass and write it again forever. The first answer that lacks a field sent is
remembered per kind (not compared again) and told once per object, as an Event naming the fields; forgotten when
the kind's published schema changes (the CRD upgraded as the Event advised), so the fields are mirrored again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import structlog

from multikueue.clusters.worker import LiveObjects
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.errors import Refused, summary
from multikueue.mergepatch import pruned_paths
from multikueue.runtime.informer import ObjectKey

log = structlog.get_logger(__name__)
Object = dict[str, Any]
MirrorState = Literal["held", "in-sync"]


class StatusRejected(Exception):
    """The manager refused the worker's status: never dropped in silence, told where the run is looked at and
    retried with backoff."""


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


def status_to_write(
    adapter: GenericAdapter,
    obj: Object,
    worker_obj: Object,
    pruned: frozenset[str],
    *,
    keep_conditions: frozenset[str] = frozenset(),
) -> tuple[MirrorState, Object | None]:
    """What mirroring ``worker_obj`` onto ``obj`` comes to (pure): held (with what would be written, were it not),
    no status yet (in sync: a finished predicate may read the spec), or
    in sync once the returned merge patch, if any, is written. Conditions named in ``keep_conditions`` are the
    dispatcher's own on the manager object: kept as they are, whatever the copy says."""
    view = worker_obj
    if "status" in worker_obj and keep_conditions:
        ours = [c for c in ((obj.get("status") or {}).get("conditions") or []) if c.get("type") in keep_conditions]
        theirs = [c for c in worker_obj["status"].get("conditions") or [] if c.get("type") not in keep_conditions]
        view = {**worker_obj, "status": dict(worker_obj["status"])}
        if ours or theirs:
            view["status"]["conditions"] = theirs + ours
    if adapter.suspended(obj):
        return "held", adapter.status_patch(obj, view, pruned)
    if "status" not in worker_obj:
        return "in-sync", None
    return "in-sync", adapter.status_patch(obj, view, pruned)


@dataclass(frozen=True)
class Mirrored:
    state: MirrorState
    obj: Object  # the manager object now: after a write, with its new resourceVersion
    first_hold: bool = False  # held, with something to write, for the first pass of this suspension
    written: bool = False
    pruned: tuple[str, ...] = ()  # status fields the manager's schema dropped, to tell once per object


class StatusMirror:
    """One per reconciler: what each kind's schema drops, and which objects' status is being held back."""

    def __init__(self) -> None:
        self.pruned = PrunedFields()
        self._held: set[tuple[GroupVersionKind, ObjectKey]] = set()

    async def write(
        self,
        manager: LiveObjects,
        adapter: GenericAdapter,
        obj: Object,
        worker_obj: Object,
        *,
        worker: str,
        keep_conditions: frozenset[str] = frozenset(),
    ) -> Mirrored:
        gvk, key = adapter.gvk, ObjectKey.of(obj)
        state, patch = status_to_write(
            adapter, obj, worker_obj, self.pruned.of(gvk), keep_conditions=keep_conditions,
        )  # fmt: skip
        if state == "held":
            first = patch is not None and (gvk, key) not in self._held
            if first:
                self._held.add((gvk, key))
            return Mirrored(state, obj, first_hold=first)
        self._held.discard((gvk, key))
        if patch is None:
            return Mirrored(state, obj)
        try:
            written: Object = await manager.patch_status(key.name, patch, key.namespace)
        except Refused as e:
            raise StatusRejected(f"status of {gvk.kind} {key} from worker {worker} was rejected by the manager: "
                                 f"{summary(e)}") from None  # fmt: skip
        lost = self.pruned.learn(gvk, key, patch, written)
        if lost:
            log.warning("status fields pruned by the manager", cluster=worker, kind=gvk.kind,
                        namespace=key.namespace, name=key.name, fields=lost)  # fmt: skip
        log.info("status mirrored from worker", cluster=worker, kind=gvk.kind, object=str(key))
        return Mirrored(state, written, written=True, pruned=tuple(lost))

    def forget(self, gvk: GroupVersionKind, key: ObjectKey) -> None:
        """The object is gone: nothing is held or told about it any more."""
        self.pruned.forget(gvk, key)
        self._held.discard((gvk, key))

    def forget_kind(self, gvk: GroupVersionKind) -> bool:
        """The kind's schema changed (``PrunedFields.forget_kind``)."""
        return self.pruned.forget_kind(gvk)
