"""The adapter for an external-framework kind: pure functions, the reconciler does the I/O.

With no options this is Kueue's fixed transformation (externalframeworks/adapter.go): a worker copy carries only
name, namespace, labels, annotations and spec, with ``spec.managedBy`` removed, the origin label and the
prebuilt-workload annotation added; never ownerReferences (the worker's garbage collector would delete the copy
in a loop, Kueue #12540), uid, finalizers or status; the worker's ``/status`` is mirrored back whole. The
per-kind options (``dispatcher.adapters``) change each step declaratively: where managedBy lives, fields removed
or set on the copy, fields carried to the copy later, which status is mirrored and when, and when a run is over.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from multikueue import jsonpaths
from multikueue.config import Adapter
from multikueue.kube.addresses import GroupVersionKind
from multikueue.labels import (
    ATTEMPT_ANNOTATION,
    LABEL_VALUE_MAX,
    MANAGER_ONLY_ANNOTATIONS,
    MANAGER_UID_ANNOTATION,
    ORIGIN_ANNOTATION,
    ORIGIN_LABEL,
    PREBUILT_WORKLOAD,
)
from multikueue.mergepatch import SAME, merge_diff, without_paths
from multikueue.predicates import holds

Object = dict[str, Any]


@dataclass(frozen=True)
class GenericAdapter:
    gvk: GroupVersionKind
    managed_by: str
    options: Adapter

    def is_managed(self, obj: Object) -> tuple[bool, str]:
        """The managedBy field must equal the accepted value; the reason is Kueue's wording."""
        path = self.options.managed_by_path
        value = jsonpaths.first(obj, path)
        if value == self.managed_by:
            return True, ""
        shown = "" if value is None else value
        return False, f'Expecting {path} to be "{self.managed_by}" not "{shown}"'

    def build_copy(self, obj: Object, *, workload_name: str | None, origin: str, attempt: str = "") -> Object:
        """The worker copy; ``workload_name`` is the prebuilt Workload's (None in direct mode: no Workload),
        ``attempt`` the admission it is made for (Kueue mode; ``workload_state.attempt``)."""
        meta = obj["metadata"]
        # What a copy may carry: labels, annotations and spec; the create transforms work on exactly that.
        body: Object = {
            "metadata": {"labels": dict(meta.get("labels") or {}), "annotations": dict(meta.get("annotations") or {})},
            "spec": copy.deepcopy(obj.get("spec") or {}),
        }
        body = jsonpaths.remove(body, self.options.managed_by_path)
        create = self.options.create
        for path in create.remove:
            body = jsonpaths.remove(body, path)
        for predicate in create.remove_when:
            if holds(predicate, body):
                body = jsonpaths.remove(body, predicate.path)
        for setting in create.set:
            body = jsonpaths.set_value(body, setting.path, setting.value)
        kept = {
            k: v for k, v in (body["metadata"].get("annotations") or {}).items() if k not in MANAGER_ONLY_ANNOTATIONS
        }
        annotations = {
            **kept,
            # Proof of authorship that survives a lost label: what the Adopt conflict policy checks.
            ORIGIN_ANNOTATION: origin,
            MANAGER_UID_ANNOTATION: meta.get("uid", ""),
        }
        labels = {**(body["metadata"].get("labels") or {}), ORIGIN_LABEL: origin}
        if workload_name is not None:
            annotations[PREBUILT_WORKLOAD] = workload_name
            if attempt:
                annotations[ATTEMPT_ANNOTATION] = attempt
            # Kueue >= 0.18 writes only the annotation and reads it first; integrations built on older Kueue
            # (tekton-kueue v0.3.0 is on v0.14.5) read only the label, and without it make a Workload of their own,
            # admitted beside the prebuilt one (seen in `make interop`). Both, where a label value can hold it.
            if len(workload_name) <= LABEL_VALUE_MAX:
                labels[PREBUILT_WORKLOAD] = workload_name
        return {
            "apiVersion": self.gvk.api_version,
            "kind": self.gvk.kind,
            "metadata": {
                "name": meta["name"],
                "namespace": meta["namespace"],
                "labels": labels,
                "annotations": annotations,
            },
            "spec": body.get("spec") or {},
        }

    def worker_copy(self, obj: Object, *, origin: str, workload_name: str, attempt: str = "") -> Object:
        """The copy as the dispatcher creates it in this kind's mode: in Kueue mode naming the prebuilt Workload
        (``workload_name``) and the admission (``attempt``), in Direct mode with no Workload at all. ``multikueue
        adapter check`` previews this."""
        direct = self.options.mode == "Direct"
        return self.build_copy(obj, workload_name=None if direct else workload_name, origin=origin, attempt=attempt)

    def spec_patch(self, obj: Object, worker_obj: Object) -> Object | None:
        """The merge patch carrying ``specSync`` fields from the manager object to the worker copy, or ``None``."""
        patch: Object = {}
        for rule in self.options.spec_sync:
            wanted = jsonpaths.find(obj, rule.path)
            if not wanted or (rule.values is not None and wanted[0] not in rule.values):
                continue
            if jsonpaths.find(worker_obj, rule.path)[:1] != wanted[:1]:
                patch = jsonpaths.set_value(patch, rule.path, wanted[0])
        return patch or None

    def suspended(self, obj: Object) -> bool:
        """While the manager object is suspended its status is not written (it would be rejected or misleading)."""
        return self.options.suspended is not None and holds(self.options.suspended, obj)

    def finished(self, worker_obj: Object) -> tuple[str, str] | None:
        """(reason, message) when the worker object itself says the run is over; ``None`` otherwise."""
        if self.options.finished is None or not holds(self.options.finished, worker_obj):
            return None
        failed = self.options.failed is not None and holds(self.options.failed, worker_obj)
        reason = "Failed" if failed else "Succeeded"
        return reason, f"{self.gvk.kind} {'failed' if failed else 'finished'} on the worker"

    def adoptable(self, worker_obj: Object, obj: Object, origin: str) -> bool:
        """A same-named worker object without the origin label is adopted only under ``Adopt`` and only when its
        annotations prove this manager created it for this very object."""
        annotations = worker_obj["metadata"].get("annotations") or {}
        return (
            self.options.conflict_policy == "Adopt"
            and annotations.get(ORIGIN_ANNOTATION) == origin
            and bool(obj["metadata"].get("uid"))
            and annotations.get(MANAGER_UID_ANNOTATION) == obj["metadata"]["uid"]
        )

    def status_patch(self, obj: Object, worker_obj: Object, pruned: frozenset[str] = frozenset()) -> Object | None:
        """The merge patch that makes the manager's mapped status equal the worker's, or ``None`` if nothing to do.
        ``pruned``: paths the manager's schema is known to drop (``pruned_paths``), left out of the comparison so a
        field the manager cannot hold is not written again on every pass."""
        if "status" not in worker_obj:
            return None
        if pruned:
            worker_obj = without_paths(worker_obj, pruned)
        mapping = self.options.status
        if tuple(mapping.paths) == (".status",) and not mapping.exclude:
            diff = merge_diff(obj.get("status"), worker_obj["status"])
            return None if diff is SAME else {"status": diff}
        # Only the mapped fields are compared, so what others write elsewhere in the manager's status stays.
        mine = jsonpaths.project(obj, mapping.paths, mapping.exclude)
        theirs = jsonpaths.project(worker_obj, mapping.paths, mapping.exclude)
        diff = merge_diff(mine.get("status") or {}, theirs.get("status") or {})
        return None if diff is SAME else {"status": diff}
