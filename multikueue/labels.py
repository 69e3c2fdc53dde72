"""Kueue's names this controller reads and writes: labels, annotations, finalizers, Workload condition types and
admission-check states (one place, as Kueue's constants.go)."""

from __future__ import annotations

from typing import Any

ORIGIN_LABEL = "kueue.x-k8s.io/multikueue-origin"
"""On everything created on a worker: which manager owns it (``multiKueue.origin``)."""

PREBUILT_WORKLOAD = "kueue.x-k8s.io/prebuilt-workload-name"
"""On a worker object: the Workload copy the worker's Kueue integration should adopt (label or annotation)."""

ORIGIN_ANNOTATION = "multikueue.x-k8s.io/origin"
"""On a worker object (this controller's own key): the origin that created it, kept even if the label is lost."""

MANAGER_UID_ANNOTATION = "multikueue.x-k8s.io/manager-uid"
"""On a worker object: the UID of the manager object it copies; with the origin, what ``Adopt`` requires."""

ATTEMPT_ANNOTATION = "multikueue.x-k8s.io/attempt"
"""On a Kueue-mode worker object: the admission it was made for (its manager Workload's UID and when that Workload's
quota was reserved). A copy of an earlier admission of the same run (evicted, or its Workload deleted and made again
with the same name) is never taken for this one's, and this one's is never taken for an earlier one's."""

# Direct mode: the placement is written on the manager object before anything is created on a worker, so a
# restart at any point finds it and neither loses nor duplicates the run.
PLACEMENT_WORKER = "multikueue.x-k8s.io/worker"
"""On a direct-mode manager object: the worker it was placed on."""

PLACEMENT_PHASE = "multikueue.x-k8s.io/phase"
"""On a direct-mode manager object: ``Placed``, then ``Finished`` or ``Failed``."""

PLACEMENT_FINISHED_AT = "multikueue.x-k8s.io/finished-at"
"""On a direct-mode manager object: when its copy's final status was mirrored (RFC 3339): a kind's ``retention``
counts from it, across restarts."""

PLACEMENT_CONDITION = "MultiKueuePlacement"
"""On a direct-mode manager object: the condition that says where the run is and why (this dispatcher's own: never
mirrored over from a worker)."""

PLACEMENT_AVOID = "multikueue.x-k8s.io/avoid"
"""On a direct-mode manager object: JSON map of workers not to use again, with why (lost there, refused it)."""

JOB_OWNER_GVK = "kueue.x-k8s.io/job-owner-gvk"
"""On a Workload made for a kind Kueue knows no integration of: the owner's kind (``Kind.version.group``)."""

JOB_OWNER_NAME = "kueue.x-k8s.io/job-owner-name"
"""On such a Workload: the owner's name."""

# Workload condition types and admission-check states (Kueue's workload_types.go).
QUOTA_RESERVED, ADMITTED, FINISHED, EVICTED = "QuotaReserved", "Admitted", "Finished", "Evicted"
PODS_READY = "PodsReady"
OUT_OF_SYNC = "OutOfSync"
"""The ``Finished`` reason of a prebuilt Workload whose pod sets differ from its object's."""
PENDING, READY, RETRY, REJECTED = "Pending", "Ready", "Retry", "Rejected"

LABEL_VALUE_MAX = 63
"""The longest label value Kubernetes accepts: longer names go in annotations only."""

# The integration (a kind queued on its own cluster with no code): Kueue's keys, as its jobframework uses them.
QUEUE_NAME_LABEL = "kueue.x-k8s.io/queue-name"
"""On a job: the LocalQueue its Workload is submitted to."""

PRIORITY_CLASS_LABEL = "kueue.x-k8s.io/priority-class"
"""On a job: the WorkloadPriorityClass of its Workload."""

MAX_EXEC_TIME_LABEL = "kueue.x-k8s.io/max-exec-time-seconds"
"""On a job: the Workload's maximumExecutionTimeSeconds."""

JOB_UID_LABEL = "kueue.x-k8s.io/job-uid"
"""On a Workload: the UID of the job it was made for."""

RESOURCE_IN_USE_FINALIZER = "kueue.x-k8s.io/resource-in-use"
"""On a Workload: Kueue's finalizer, removed by the job's integration once the job is finished or gone."""

HELD_ANNOTATION = "multikueue.x-k8s.io/suspended-for-queue"
"""On a job: this controller (or its webhook) suspended it to wait for admission, so admission may release it.
A suspension without it is the user's own, and is never undone here (tekton-kueue#540)."""

PLACEMENT_RECORD = "multikueue.x-k8s.io/placement"
"""On a direct-mode manager object whose kind cannot hold the ``MultiKueuePlacement`` condition (its status schema
has no ``conditions``, so the API server prunes it): the condition as JSON, where ``explain`` finds it."""

WORKER_IDENTITY_ANNOTATION = "multikueue.x-k8s.io/worker-identity"
"""On a MultiKueueCluster: the UID of the worker's ``kube-system`` namespace this controller first connected to. A
kubeconfig that later leads to another cluster is refused while it differs."""

CREDENTIALS_EXPIRY_ANNOTATION = "multikueue.x-k8s.io/credentials-expire-at"
"""On a MultiKueueCluster: when the credential used for the worker stops working (RFC 3339), as it says itself."""

RENEW_TOKEN_ANNOTATION = "multikueue.x-k8s.io/renew-token"
"""On a MultiKueueCluster, ``"true"``: the dispatcher renews the ServiceAccount token in its kubeconfig Secret before
it lapses (asked of the worker with the still-valid token, written back into the Secret)."""

MANAGER_ONLY_ANNOTATIONS = (
    "kubectl.kubernetes.io/last-applied-configuration",  # holds the manager's whole object, managedBy included
    PLACEMENT_WORKER,
    PLACEMENT_PHASE,
    PLACEMENT_AVOID,
    PLACEMENT_RECORD,
)
"""Annotations that describe the manager object, never its worker copy."""


def prebuilt_workload_of(obj: dict[str, Any]) -> str:
    """The manager Workload a worker object belongs to ("" if none): the prebuilt-workload annotation first, then
    the label of that name (as Kueue reads it). The one place that answers this, for every event and pass."""
    meta = obj.get("metadata") or {}
    return str((meta.get("annotations") or {}).get(PREBUILT_WORKLOAD) or (meta.get("labels") or {}).get(
        PREBUILT_WORKLOAD) or "")  # fmt: skip
