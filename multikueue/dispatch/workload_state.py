"""Reading and shaping Kueue Workloads (v1beta2): pure functions over dicts."""

from __future__ import annotations

import copy
import datetime
from typing import Any

from multikueue.kube import conditions
from multikueue.kube.addresses import GroupVersionKind

# Re-exported: the dispatch code reads Kueue's names as ``wl.<NAME>``.
from multikueue.labels import (
    ADMITTED as ADMITTED,
)
from multikueue.labels import (
    EVICTED as EVICTED,
)
from multikueue.labels import (
    FINISHED as FINISHED,
)
from multikueue.labels import (
    JOB_OWNER_GVK as JOB_OWNER_GVK,
)
from multikueue.labels import (
    JOB_OWNER_NAME as JOB_OWNER_NAME,
)
from multikueue.labels import (
    JOB_UID_LABEL as JOB_UID_LABEL,
)
from multikueue.labels import (
    ORIGIN_LABEL as ORIGIN_LABEL,
)
from multikueue.labels import (
    OUT_OF_SYNC as OUT_OF_SYNC,
)
from multikueue.labels import (
    PENDING as PENDING,
)
from multikueue.labels import (
    QUOTA_RESERVED as QUOTA_RESERVED,
)
from multikueue.labels import (
    READY as READY,
)
from multikueue.labels import (
    REJECTED as REJECTED,
)
from multikueue.labels import (
    RESOURCE_IN_USE_FINALIZER as RESOURCE_IN_USE_FINALIZER,
)
from multikueue.labels import (
    RETRY as RETRY,
)

Object = dict[str, Any]


def condition(workload: Object | None, condition_type: str) -> Object | None:
    found = conditions.find(((workload or {}).get("status") or {}).get("conditions"), condition_type)
    return dict(found) if found is not None else None


def is_true(workload: Object | None, condition_type: str) -> bool:
    return workload is not None and conditions.is_true(workload, condition_type)


def check_state(workload: Object, check_name: str) -> Object | None:
    for state in (workload.get("status") or {}).get("admissionChecks") or []:
        if state.get("name") == check_name:
            return dict(state)
    return None


def check_names(workload: Object) -> list[str]:
    return [s["name"] for s in (workload.get("status") or {}).get("admissionChecks") or [] if "name" in s]


def parse_api_version(api_version: str) -> tuple[str, str]:
    group, _, version = api_version.rpartition("/")
    return group, version


def owner(workload: Object) -> tuple[GroupVersionKind, str] | None:
    """The job that owns the Workload, as Kueue's ``adapter()`` finds it: the multi-owner annotations, then the
    controller ownerReference, then the first ownerReference."""
    meta = workload["metadata"]
    annotations = meta.get("annotations") or {}
    if annotations.get(JOB_OWNER_GVK) and annotations.get(JOB_OWNER_NAME):
        try:
            return GroupVersionKind.parse(annotations[JOB_OWNER_GVK]), annotations[JOB_OWNER_NAME]
        except ValueError:
            pass
    refs = meta.get("ownerReferences") or []
    chosen = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    if chosen is None:
        return None
    group, version = parse_api_version(chosen.get("apiVersion", ""))
    return GroupVersionKind(group, version, chosen.get("kind", "")), chosen.get("name", "")


def owner_uid(workload: Object) -> str | None:
    """The UID of the job the Workload was made for, where it says (the owner reference ``owner`` reads, else
    Kueue's job-uid label): a same-named object made again since is another job."""
    meta = workload["metadata"]
    refs = meta.get("ownerReferences") or []
    chosen = next((r for r in refs if r.get("controller")), refs[0] if refs else None)
    annotations = meta.get("annotations") or {}
    if chosen is not None and not (annotations.get(JOB_OWNER_GVK) and annotations.get(JOB_OWNER_NAME)):
        return str(chosen.get("uid") or "") or None
    return str((meta.get("labels") or {}).get(JOB_UID_LABEL) or "") or None


def clone_for_create(workload: Object, origin: str) -> Object:
    """The worker copy of a Workload: name, namespace, labels (origin added, job UID dropped), annotations, spec."""
    meta = workload["metadata"]
    labels = {k: v for k, v in (meta.get("labels") or {}).items() if k != JOB_UID_LABEL}
    labels[ORIGIN_LABEL] = origin
    return {
        "apiVersion": workload.get("apiVersion", "kueue.x-k8s.io/v1beta2"),
        "kind": "Workload",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "labels": labels,
            "annotations": dict(meta.get("annotations") or {}),
        },
        "spec": copy.deepcopy(workload.get("spec") or {}),
    }


def earliest_true(workloads: dict[str, Object], condition_type: str) -> tuple[str, Object] | None:
    """The worker whose copy has ``condition_type`` True with the earliest transition (ties: by name)."""
    candidates = []
    for cluster, wl in workloads.items():
        found = condition(wl, condition_type)
        if found is not None and found.get("status") == "True":
            candidates.append((found.get("lastTransitionTime", ""), cluster, found))
    if not candidates:
        return None
    _, cluster, found = min(candidates, key=lambda c: (c[0], c[1]))
    return cluster, found


# Kueue's QuotaReserved=False reasons for a Workload its ClusterQueue can never admit as configured (the granular
# reasons, gate UnadmittedWorkloadsObservability; Misconfigured also covers a queue being recreated, which the
# timeout rides out), and what its messages say with the gate off (reason Pending, or Inadmissible for a queue).
NEVER_ADMITTED_REASONS = frozenset({"ExceedsMaxQuota", "NoMatchingFlavor", "Misconfigured"})
GRANULAR_REASONS = NEVER_ADMITTED_REASONS | {
    "WaitingForQuota",
    "TopologyPlacementFailed",
    "Suspended",
    "WaitingForPreemptedWorkloads",
    "WaitingForPodsReady",
    "PendingEvaluation",
}
# One flavor may be too small while another is only busy: Kueue lists each flavor it tried in one message.
FOR_NOW_MESSAGES = ("insufficient unused quota", "more needed", "preempt", "is inactive", "is stopped")
NEVER_ADMITTED_MESSAGES = (
    "> maximum capacity",  # insufficient quota ... request (10) > maximum capacity (8): more than nominal + borrowing
    "unavailable in ClusterQueue",  # resource X unavailable in ClusterQueue: no flavor covers it
    "doesn't exist",  # LocalQueue q / ClusterQueue cq doesn't exist
    "doesn't match ClusterQueue selector",  # workload namespace doesn't match ClusterQueue selector
)


def never_admitted(worker_copy: Object | None) -> str | None:
    """Why a worker's Kueue can never admit this copy as its queues stand (``"reason: message"``), or None when it
    is admitted, not looked at yet, or only waiting for room."""
    reserved = condition(worker_copy, QUOTA_RESERVED) or {}
    if reserved.get("status") != "False":
        return None
    reason, message = str(reserved.get("reason") or ""), str(reserved.get("message") or "")
    if reason in GRANULAR_REASONS:  # the reason says it: trusted alone
        never = reason in NEVER_ADMITTED_REASONS
    else:
        never = any(m in message for m in NEVER_ADMITTED_MESSAGES) and not any(m in message for m in FOR_NOW_MESSAGES)
    if not never:
        return None
    return f"{reason}: {message}" if message else reason


def waits_for_a_fit(workload: Object, state: Object, copies: list[Object | None]) -> bool:
    """Quota held on the manager, the check still Pending, and every nominated worker's Kueue unable to fit its copy
    (``QuotaReserved=False``, reason ``Pending``): the run waits for room somewhere (the alert's signal)."""
    if state.get("state") != PENDING or not is_true(workload, QUOTA_RESERVED) or not copies:
        return False
    for worker_copy in copies:
        reserved = condition(worker_copy, QUOTA_RESERVED) or {}
        if reserved.get("status") != "False" or reserved.get("reason") != "Pending":
            return False
    return True


def retained_for(workload: Object, retention: float | None, now: datetime.datetime) -> float:
    """How much longer a finished run's object stays on its worker: the kind's retention from the manager Workload's
    ``Finished`` time (kept in the Workload, so a restart keeps the same deadline); 0 when none, or past."""
    finished = condition(workload, FINISHED) or {}
    if finished.get("status") != "True":
        return 0.0
    return retention_left(finished.get("lastTransitionTime"), retention, now)


def retention_left(finished_at: str | None, retention: float | None, now: datetime.datetime) -> float:
    """Seconds a run finished at ``finished_at`` (RFC 3339) is still kept (both modes); 0 without retention, or past."""
    if not retention or not finished_at:
        return 0.0
    try:
        at = datetime.datetime.strptime(finished_at, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=datetime.UTC)
    except ValueError:
        return 0.0
    return max(0.0, retention - (now - at).total_seconds())


def evicted_before(workload: Object) -> bool:
    """Whether the manager's Workload was evicted (or requeued) at least once: the status on its object may then have
    come from a worker other than the one now recorded."""
    status = workload.get("status") or {}
    return bool((status.get("schedulingStats") or {}).get("evictions") or status.get("requeueState"))


def attempt(workload: Object) -> str:
    """The admission the run is in ("" while its quota is not reserved): ``uid/reserved/evictions``. The Workload's
    UID (a Workload deleted and made again under the same name is another), when its quota was reserved (each
    re-admission reserves it again; Kueue keeps the time while the condition stays True), and how often it was
    evicted (Kueue counts every eviction in ``schedulingStats``, in the eviction's own write: two admissions within
    one second differ there). Compared for equality only: the time comes from whichever Kueue replica reserved."""
    reserved = condition(workload, QUOTA_RESERVED) or {}
    uid = (workload.get("metadata") or {}).get("uid")
    if reserved.get("status") != "True" or not uid:
        return ""
    # Kueue counts the eviction as it begins, while the quota is still reserved: the admission under way is the same.
    under_way = 1 if is_true(workload, EVICTED) else 0
    return f"{uid}/{reserved.get('lastTransitionTime') or ''}/{max(evictions(workload) - under_way, 0)}"


def evictions(workload: Object) -> int:
    """How often Kueue evicted the Workload (``status.schedulingStats.evictions``, by reason and cause)."""
    counted = ((workload.get("status") or {}).get("schedulingStats") or {}).get("evictions") or []
    return sum(int(e.get("count") or 0) for e in counted if isinstance(e, dict))


def adopted_by(worker_wl: Object | None, kind: str, name: str) -> bool:
    """Whether a worker's Workload copy is owned by the object ``kind``/``name`` there (the worker's integration
    adopts the prebuilt Workload when the object is created): proof that the object was there."""
    meta = (worker_wl or {}).get("metadata") or {}
    if meta.get("deletionTimestamp"):
        return False  # going (removed by this dispatcher, or with its object): proves nothing of this attempt
    refs = meta.get("ownerReferences") or []
    return any(ref.get("kind") == kind and ref.get("name") == name for ref in refs)
