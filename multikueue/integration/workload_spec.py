"""The Workload for a queued object, built from the kind's ``integration`` options (pure: no API calls).

Names, labels, the finalizer and the owner reference are those of Kueue's jobframework (``ConstructWorkload``,
``GetWorkloadNameForOwnerWithGVK``), so Kueue, its MultiKueue and kubectl see a Workload like any other.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass
from typing import Any, cast

from multikueue import jsonpaths, owners
from multikueue.config import (
    DNS_LABEL,
    CountConst,
    CountExpression,
    CountPath,
    DefaultTemplate,
    Integration,
    PodSetsFrom,
    PodSetSource,
    Topology,
    check_quantity,
    template_steps,
)
from multikueue.kube.addresses import WORKLOADS, GroupVersionKind
from multikueue.labels import (
    JOB_UID_LABEL,
    LABEL_VALUE_MAX,
    MAX_EXEC_TIME_LABEL,
    QUEUE_NAME_LABEL,
    RESOURCE_IN_USE_FINALIZER,
    prebuilt_workload_of,
)
from multikueue.predicates import holds

Object = dict[str, Any]


class InvalidObject(ValueError):
    """The object cannot be turned into a Workload; the message names the field and the bad value."""


def queue_name(obj: Object) -> str:
    return str(((obj["metadata"].get("labels") or {}).get(QUEUE_NAME_LABEL)) or "")


def prebuilt_workload(obj: Object) -> str:
    """The Workload MultiKueue made for this worker copy (annotation first, then label, as Kueue reads it)."""
    return prebuilt_workload_of(obj)


def count(expression: CountExpression, where: Object, what: str) -> int:
    """Evaluate a pod count in ``where`` (the object, or an item of a ``podSetsFrom`` array). A value missing
    without a default, or not a non-negative integer, raises ``InvalidObject`` naming ``what`` and the path: a
    count is never guessed."""
    if isinstance(expression, CountConst):
        return expression.value
    if isinstance(expression, CountPath):
        value = jsonpaths.first(where, expression.path)
        if value is None:
            if expression.default is None:
                raise InvalidObject(f"{what}: {expression.path} has no value (give the count a default)")
            return count(expression.default, where, what)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidObject(f"{what}: {expression.path} must be a non-negative integer, got {value!r}")
        return value
    values = [count(arg, where, what) for arg in expression.args]
    if expression.op == "min":
        return min(values)
    if expression.op == "max":
        return max(values)
    return sum(values) if expression.op == "sum" else math.prod(values)


def _requests(obj: Object, source: PodSetSource) -> dict[str, str]:
    requests = dict(source.requests)
    prefix = source.requests_from_annotations
    if prefix:
        for key, value in sorted((obj["metadata"].get("annotations") or {}).items()):
            if key.startswith(prefix) and len(key) > len(prefix):
                try:
                    requests[key[len(prefix) :]] = check_quantity(value)
                except ValueError as e:
                    raise InvalidObject(f"annotation {key}: {e}") from None
    return requests


MAX_POD_SETS = 8
"""Kueue's limit on a Workload's pod sets."""


def pod_sets(obj: Object, integration: Integration) -> list[Object]:
    """The Workload's pod sets: the fixed ones, then one per item of each ``podSetsFrom`` array; ``InvalidObject``
    names the annotation or field that is wrong."""
    result = []
    for source in present(obj, integration):
        what = f"pod set {source.name}"
        if source.template is not None:
            template = _template(_with_default(obj, source), source.template, what)
            added = [copy.deepcopy(a.container) for a in source.add_containers if holds(a.when, obj)]
            if added:
                template["spec"] = {**template["spec"], "containers": [*template["spec"]["containers"], *added]}
        else:
            # Synthetic, as tekton-kueue's: one container whose requests stand for what one pod of the run needs.
            resources = {"requests": _requests(obj, source)}
            # `metadata: {}` as Go writes an empty ObjectMeta: the Workload is then byte for byte tekton-kueue's.
            template = {
                "metadata": {},
                "spec": {"containers": [{"name": "dummy", "image": "dummy", "resources": resources}]},
            }
        pod_set = {"name": source.name, "count": count(source.pod_count, obj, what), "template": template}
        result.append(_with_topology(pod_set, source.topology, obj, what))
    for source_from in integration.pod_sets_from:
        result.extend(_pod_sets_from(obj, source_from))
    if not result:  # every pod set optional and none present: a Workload needs one
        raise InvalidObject("no pod sets: the `when` of every pod set in podSets is false for this object")
    names = [p["name"] for p in result]
    if len(set(names)) != len(names):
        raise InvalidObject(f"pod set names repeat: {names}")
    if len(result) > MAX_POD_SETS:
        raise InvalidObject(f"{len(result)} pod sets ({names}); Kueue takes at most {MAX_POD_SETS}")
    return result


def _pod_sets_from(obj: Object, source: PodSetsFrom) -> list[Object]:
    items = jsonpaths.find(obj, source.path)
    if not items:
        raise InvalidObject(f"podSetsFrom {source.path}: no items in the object")
    result = []
    for i, item in enumerate(items):
        where = f"{source.path.removesuffix('[*]')}[{i}]"
        name = jsonpaths.first(item, source.name) if isinstance(item, dict) else None
        if not isinstance(name, str) or not DNS_LABEL.match(name) or len(name) > 63:
            raise InvalidObject(f"{where}{source.name}: a pod set name must be a DNS label, got {name!r}")
        what = f"pod set {name} ({where})"
        template = _template(item, source.template, what)
        pod_set = {"name": name, "count": count(source.count, item, what), "template": template}
        result.append(_with_topology(pod_set, source.topology, item, what))
    return result


def present(obj: Object, integration: Integration) -> list[PodSetSource]:
    """The fixed pod sets this object has: those without ``when``, and those whose ``when`` holds on it."""
    return [s for s in integration.pod_sets if s.when is None or holds(s.when, obj)]


def default_template(obj: Object, default: DefaultTemplate) -> Object:
    """``default``'s template with its ``fill`` fields read from ``obj`` (one without a value left out)."""
    template = copy.deepcopy(default.template)
    for fill in default.fill:
        *parents, last = template_steps(fill.path)
        node: Any = template
        for step in parents:
            node = node[step]
        value = jsonpaths.first(obj, fill.from_)
        if value is not None:
            node[last] = copy.deepcopy(value)
    return template


def _with_default(obj: Object, source: PodSetSource) -> Object:
    """``obj`` as the pod set reads it: its default template at the template path when there is none there (a
    copy; ``obj`` when nothing is missing)."""
    if source.default_template is None or source.template is None or jsonpaths.first(obj, source.template) is not None:
        return obj
    with_default = copy.deepcopy(obj)
    jsonpaths.set_in_place(with_default, source.template, default_template(obj, source.default_template))
    return with_default


def templates(obj: Object, integration: Integration, *, write_defaults: bool = False) -> list[Object | None]:
    """Each pod set's template inside ``obj`` itself (not a copy: changing one changes ``obj``), in the order of
    ``pod_sets``; ``None`` for a synthetic pod set, which has no template in the object, and for a missing one with
    a default. With ``write_defaults`` (admission) that default is written into ``obj`` first, so what admission
    merges into it is kept there, as Kueue's RayJob keeps the default submitter template it admitted; a stop
    leaves the object without it, as Kueue restores into a default it does not keep."""
    found: list[Object | None] = []
    for source in present(obj, integration):
        if source.template is None:
            found.append(None)
            continue
        if write_defaults and source.default_template is not None and jsonpaths.first(obj, source.template) is None:
            jsonpaths.set_in_place(obj, source.template, default_template(obj, source.default_template))
        found.append(_template_in(obj, source.template))
    for source_from in integration.pod_sets_from:
        items = jsonpaths.find(obj, source_from.path)
        found.extend(_template_in(item, source_from.template) if isinstance(item, dict) else None for item in items)
    return found


def _template_in(where: Object, path: str) -> Object | None:
    found = jsonpaths.first(where, path)
    return found if isinstance(found, dict) else None


TOPOLOGY = "kueue.x-k8s.io/podset-"
REQUIRED, PREFERRED, UNCONSTRAINED = f"{TOPOLOGY}required-topology", f"{TOPOLOGY}preferred-topology", \
    f"{TOPOLOGY}unconstrained-topology"  # fmt: skip
SLICE_REQUIRED, SLICE_SIZE, GROUP_NAME = f"{TOPOLOGY}slice-required-topology", f"{TOPOLOGY}slice-size", \
    f"{TOPOLOGY}group-name"  # fmt: skip


def _with_topology(pod_set: Object, topology: Topology | None, where: Object, what: str) -> Object:
    request = topology_request(pod_set["template"], topology, where, what)
    return {**pod_set, "topologyRequest": request} if request is not None else pod_set


def topology_request(template: Object, topology: Topology | None, where: Object, what: str) -> Object | None:
    """The pod set's ``topologyRequest`` as Kueue's ``NewPodSetTopologyRequest(...).Build()`` makes it from the pod
    template's annotations and the integration's index labels (``None``: no request). Kueue's multi-layer
    constraints annotation (behind an alpha feature gate) is not read."""
    notes = (template.get("metadata") or {}).get("annotations") or {}
    topology = topology or Topology()
    request, sliced = _placement(notes, what), _slice(notes, what)
    if not request and not sliced and topology == Topology():
        return None
    request.update(sliced)
    if topology.pod_index_label is not None:
        request["podIndexLabel"] = topology.pod_index_label
    if topology.sub_group_count is not None:
        request["subGroupCount"] = count(topology.sub_group_count, where, what)
    if topology.sub_group_index_label is not None:
        request["subGroupIndexLabel"] = topology.sub_group_index_label
    if GROUP_NAME in notes and ("required" in request or "preferred" in request):
        request["podSetGroupName"] = notes[GROUP_NAME]
    return request


def _placement(notes: dict[str, str], what: str) -> Object:
    """Required, else preferred, else unconstrained (the first annotation found, in Kueue's order)."""
    if REQUIRED in notes:
        return {"required": notes[REQUIRED]}
    if PREFERRED in notes:
        return {"preferred": notes[PREFERRED]}
    if UNCONSTRAINED not in notes:
        return {}
    value = str(notes[UNCONSTRAINED]).lower()
    if value not in ("true", "false", "1", "0", "t", "f"):
        raise InvalidObject(f"{what}: annotation {UNCONSTRAINED} must be a boolean, got {notes[UNCONSTRAINED]!r}")
    return {"unconstrained": value in ("true", "1", "t")}


def _slice(notes: dict[str, str], what: str) -> Object:
    if SLICE_REQUIRED not in notes or SLICE_SIZE not in notes:
        return {}
    size = str(notes[SLICE_SIZE])
    if not size.lstrip("-").isdigit():
        raise InvalidObject(f"{what}: annotation {SLICE_SIZE} must be an integer, got {size!r}")
    return {"podSetSliceRequiredTopology": notes[SLICE_REQUIRED], "podSetSliceSize": int(size)}


def _template(where: Object, path: str, what: str) -> Object:
    found = jsonpaths.first(where, path)
    if not isinstance(found, dict) or not (found.get("spec") or {}).get("containers"):
        raise InvalidObject(f"{what}: {path} must be a pod template with containers, got {found!r}")
    return {"metadata": {}, **cast(Object, _without_empty(found))}


def _without_empty(value: Any) -> Any:
    """A copy without empty maps and lists, as Kueue's Go structs write a pod template (``omitempty``; an
    ``ObjectMeta`` is a struct, always written): an object stored with ``labels: {}`` gets a Workload without it,
    and one without ``metadata`` gets ``metadata: {}``, as from Kueue's own integrations."""
    if isinstance(value, dict):
        kept = {k: _without_empty(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if k == "metadata" or v not in ({}, [])}
    if isinstance(value, list):
        return [_without_empty(v) for v in value]
    return copy.deepcopy(value)


@dataclass(frozen=True)
class Priority:
    """A WorkloadPriorityClass's name and value (Kueue resolves the value when it builds the Workload)."""

    class_name: str
    value: int


def build(obj: Object, gvk: GroupVersionKind, integration: Integration, *, active: bool,
          priority: Priority | None) -> Object:  # fmt: skip
    """The Workload Kueue's ``ConstructWorkload`` would create for ``obj`` (raises ``InvalidObject``)."""
    meta = obj["metadata"]
    labels = job_uid_labels(meta["uid"])
    spec: Object = {"queueName": queue_name(obj), "podSets": pod_sets(obj, integration)}
    if priority is not None:
        spec["priorityClassRef"] = {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                    "name": priority.class_name}  # fmt: skip
        spec["priority"] = priority.value
    else:
        spec["priority"] = 0
    seconds = (meta.get("labels") or {}).get(MAX_EXEC_TIME_LABEL)
    if seconds is not None:
        if not str(seconds).isdigit() or int(seconds) < 1:
            raise InvalidObject(f"label {MAX_EXEC_TIME_LABEL} must be a positive integer, got {seconds!r}")
        spec["maximumExecutionTimeSeconds"] = int(seconds)
    if not active:
        spec["active"] = False
    return {
        "apiVersion": WORKLOADS.api_version,
        "kind": WORKLOADS.kind,
        "metadata": {
            "name": owners.workload_name(meta["name"], meta["uid"], gvk),
            "namespace": meta["namespace"],
            "labels": labels,
            "finalizers": [RESOURCE_IN_USE_FINALIZER],
            "ownerReferences": [owner_reference(obj, gvk)],
        },
        "spec": spec,
    }


def job_uid_labels(uid: str) -> dict[str, str]:
    """Kueue's ``job-uid`` label, when the UID fits a label value (Kueue skips it otherwise)."""
    return {JOB_UID_LABEL: uid} if len(uid) <= LABEL_VALUE_MAX else {}


def owner_reference(obj: Object, gvk: GroupVersionKind) -> Object:
    meta = obj["metadata"]
    return {"apiVersion": gvk.api_version, "kind": gvk.kind, "name": meta["name"], "uid": meta["uid"],
            "controller": True, "blockOwnerDeletion": True}  # fmt: skip


def controller_uid(workload: Object) -> str | None:
    uids = owners.owner_uids(workload)
    return uids[0] if uids else None


def _canonical(pod_set: Object) -> tuple[Any, ...]:
    containers = ((pod_set.get("template") or {}).get("spec") or {}).get("containers") or []
    requests = [sorted(((c.get("resources") or {}).get("requests") or {}).items()) for c in containers]
    return pod_set.get("name"), pod_set.get("count", 1), repr(requests)


def equivalent(workload: Object, expected: list[Object]) -> bool:
    """Same pod sets by name, count and container requests (Kueue's prebuilt in-sync test, on what it compares)."""
    have = [_canonical(p) for p in (workload.get("spec") or {}).get("podSets") or []]
    return have == [_canonical(p) for p in expected]
