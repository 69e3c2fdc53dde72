"""What admission writes into each pod template, and what stopping restores: Kueue's ``PodSetInfo``.

On admission Kueue's jobframework merges, into each pod template of the job, the admitted flavors' node labels (as a
node selector) and tolerations, its own pod labels and annotations (the pod set's name, the queue names, the
Workload's name for topology-aware scheduling, the MultiKueue worker label) and every admission check's
``podSetUpdates``; a key already in the template with another value is a conflict, and the Workload is finished
``FailedToStart``. On suspension or eviction it restores the templates exactly as the Workload's pod sets hold
them (the templates as they were before admission). These functions do the same on plain dicts (pure: the
ResourceFlavors are handed in); v0.19.2's ``podset.FromAssignment``, ``Merge``, ``RestorePodSpec`` and
``getPodSetsInfoFromStatus``, with Kueue's default feature gates.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from multikueue.labels import ORIGIN_LABEL

Object = dict[str, Any]

POD_SET_LABEL = "kueue.x-k8s.io/podset"
LOCAL_QUEUE_LABEL = "kueue.x-k8s.io/local-queue-name"
CLUSTER_QUEUE_LABEL = "kueue.x-k8s.io/cluster-queue-name"
WORKER_POD_LABEL = "kueue.x-k8s.io/multikueue-worker-workload-pod"
WORKLOAD_ANNOTATION = "kueue.x-k8s.io/workload"
UNCONSTRAINED_ANNOTATION = "kueue.x-k8s.io/podset-unconstrained-topology"
TOPOLOGY_GATE = "kueue.x-k8s.io/topology"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


class InvalidPodSetInfo(ValueError):
    """The admission cannot be written into the templates: a key already set to another value, or pod sets that no
    longer match the admission's (Kueue: permanent, the Workload is finished ``FailedToStart``)."""


@dataclass
class PodSetInfo:
    name: str
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[Object] = field(default_factory=list)
    scheduling_gates: list[Object] = field(default_factory=list)

    def merge(self, other: PodSetInfo, what: str = "") -> None:
        """Kueue's ``PodSetInfo.Merge``: maps united (a conflict raises), tolerations and gates appended once."""
        for field_name, mine, theirs in (
            ("annotations", self.annotations, other.annotations),
            ("labels", self.labels, other.labels),
            ("nodeSelector", self.node_selector, other.node_selector),
        ):
            for key, value in theirs.items():
                if key in mine and mine[key] != value:  # Kueue's words, from BadPodSetsUpdateError and HaveConflict
                    raise InvalidPodSetInfo(
                        f"{what}invalid admission check PodSetUpdate: conflict for {field_name}: "
                        f"conflict for key={key}, value1={mine[key]}, value2={value}"
                    )
        self.annotations.update(other.annotations)
        self.labels.update(other.labels)
        self.node_selector.update(other.node_selector)
        for toleration in other.tolerations:
            if not any(_same_toleration(t, toleration) for t in self.tolerations):
                self.tolerations.append(toleration)
        for gate in other.scheduling_gates:
            if gate not in self.scheduling_gates:
                self.scheduling_gates.append(gate)


def _same_toleration(a: Object, b: Object) -> bool:
    """Kubernetes' ``MatchToleration`` with an empty operator read as ``Equal`` (``tolerationSeconds`` ignored)."""
    return all(a.get(k) == b.get(k) for k in ("key", "effect", "value")) and (
        (a.get("operator") or "Equal") == (b.get("operator") or "Equal")
    )


def flavors_of(workload: Object) -> list[str]:
    """The ResourceFlavors the admission names, each once."""
    names: list[str] = []
    for assignment in ((workload.get("status") or {}).get("admission") or {}).get("podSetAssignments") or []:
        for flavor in (assignment.get("flavors") or {}).values():
            if flavor not in names:
                names.append(flavor)
    return names


def on_admission(workload: Object, flavors: Mapping[str, Object]) -> list[PodSetInfo]:
    """The info to merge into each pod set's template, in the order of the admission's pod set assignments
    (``getPodSetsInfoFromStatus``). ``flavors``: each admitted ResourceFlavor by name; a missing one raises
    ``LookupError`` (Kueue retries)."""
    status = workload.get("status") or {}
    pod_sets = (workload.get("spec") or {}).get("podSets") or []
    infos = []
    for i, assignment in enumerate((status.get("admission") or {}).get("podSetAssignments") or []):
        info = _from_assignment(assignment, pod_sets[i] if i < len(pod_sets) else {}, flavors)
        info.annotations[WORKLOAD_ANNOTATION] = workload["metadata"]["name"]
        info.labels.update(_kueue_labels(workload, info.name))
        for check in status.get("admissionChecks") or []:
            update = next((u for u in check.get("podSetUpdates") or [] if u.get("name") == info.name), None)
            if update is not None:
                info.merge(_from_update(update), f'in admission check "{check.get("name")}": ')
        infos.append(info)
    return infos


def _kueue_labels(workload: Object, pod_set: str) -> dict[str, str]:
    """The pod set's name, the MultiKueue worker mark on a worker's copy, and the queues (Kueue's
    ``AssignQueueLabelsForPods``, on by default; the ClusterQueue only when its name is a valid label value)."""
    labels = {POD_SET_LABEL: pod_set}
    if ORIGIN_LABEL in (workload["metadata"].get("labels") or {}):
        labels[WORKER_POD_LABEL] = "true"
    labels[LOCAL_QUEUE_LABEL] = str((workload.get("spec") or {}).get("queueName") or "")
    cluster_queue = str(((workload.get("status") or {}).get("admission") or {}).get("clusterQueue") or "")
    if len(cluster_queue) <= 63 and _DNS_LABEL.match(cluster_queue):
        labels[CLUSTER_QUEUE_LABEL] = cluster_queue
    return labels


def _from_assignment(assignment: Object, pod_set: Object, flavors: Mapping[str, Object]) -> PodSetInfo:
    info = PodSetInfo(name=str(assignment.get("name") or ""))
    if assignment.get("topologyAssignment") is not None:
        request = pod_set.get("topologyRequest") or {}
        if not any(request.get(k) is not None for k in ("required", "preferred", "unconstrained")):
            info.annotations[UNCONSTRAINED_ANNOTATION] = "true"  # implicit TAS: unconstrained
        info.scheduling_gates.append({"name": TOPOLOGY_GATE})
    seen: set[str] = set()
    for name in (assignment.get("flavors") or {}).values():
        if name in seen:
            continue
        seen.add(name)
        if name not in flavors:
            raise LookupError(f"ResourceFlavor {name!r} not found")
        spec = flavors[name].get("spec") or {}
        info.node_selector.update(spec.get("nodeLabels") or {})
        info.tolerations.extend(copy.deepcopy(spec.get("tolerations") or []))
    return info


def _from_update(update: Object) -> PodSetInfo:
    return PodSetInfo(
        name=str(update.get("name") or ""),
        labels=dict(update.get("labels") or {}),
        annotations=dict(update.get("annotations") or {}),
        node_selector=dict(update.get("nodeSelector") or {}),
        tolerations=copy.deepcopy(update.get("tolerations") or []),
    )


def from_workload(workload: Object) -> list[PodSetInfo]:
    """The templates as the Workload's pod sets hold them (``GetPodSetsInfoFromWorkload``): what stopping restores."""
    infos = []
    for pod_set in (workload.get("spec") or {}).get("podSets") or []:
        template = pod_set.get("template") or {}
        meta, spec = template.get("metadata") or {}, template.get("spec") or {}
        infos.append(
            PodSetInfo(
                name=str(pod_set.get("name") or ""),
                labels=dict(meta.get("labels") or {}),
                annotations=dict(meta.get("annotations") or {}),
                node_selector=dict(spec.get("nodeSelector") or {}),
                tolerations=copy.deepcopy(spec.get("tolerations") or []),
                scheduling_gates=copy.deepcopy(spec.get("schedulingGates") or []),
            )
        )
    return infos


# The template fields an info writes: (where in the template, the info's attribute).
_FIELDS = (
    (("metadata", "labels"), "labels"),
    (("metadata", "annotations"), "annotations"),
    (("spec", "nodeSelector"), "node_selector"),
    (("spec", "tolerations"), "tolerations"),
    (("spec", "schedulingGates"), "scheduling_gates"),
)


def _get(template: Object, where: tuple[str, str]) -> Any:
    return (template.get(where[0]) or {}).get(where[1])


def _put(template: Object, where: tuple[str, str], value: Any) -> None:
    """Set a template field; an empty value is left out (as Go's ``omitempty`` writes it)."""
    parent = template.get(where[0])
    if value:
        if not isinstance(parent, dict):
            parent = template[where[0]] = {}
        parent[where[1]] = copy.deepcopy(value)
    elif isinstance(parent, dict):
        parent.pop(where[1], None)


def merge(template: Object, info: PodSetInfo) -> None:
    """Merge ``info`` into ``template`` in place (``podset.Merge``); ``InvalidPodSetInfo`` on a clash."""
    current = PodSetInfo(
        info.name, **{attr: copy.deepcopy(_get(template, where) or _empty(attr)) for where, attr in _FIELDS}
    )
    current.merge(info)
    for where, attr in _FIELDS:
        if getattr(current, attr) != (_get(template, where) or _empty(attr)):
            _put(template, where, getattr(current, attr))


def restore(template: Object, info: PodSetInfo) -> bool:
    """Set the template's fields back to ``info`` (``podset.RestorePodSpec``); whether anything changed. An absent
    field and an empty one are the same (as Go's ``maps.Equal`` and ``slices.Equal`` read nil and empty)."""
    changed = False
    for where, attr in _FIELDS:
        if (_get(template, where) or _empty(attr)) != getattr(info, attr):
            _put(template, where, getattr(info, attr))
            changed = True
    return changed


def _empty(attr: str) -> Any:
    return [] if attr in ("tolerations", "scheduling_gates") else {}


def apply(templates: Sequence[Object | None], infos: Sequence[PodSetInfo], *, restoring: bool) -> None:
    """Merge (admission) or restore (stop) each pod set's info into its template, in place. A pod set without a
    template in the object (a synthetic one) has nowhere to hold it and is passed over."""
    for template, info in zip(templates, infos, strict=True):
        if template is None:
            continue
        if restoring:
            restore(template, info)
        else:
            merge(template, info)
