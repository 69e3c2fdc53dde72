"""What ``status`` and ``explain`` know about one run (``RunView``, gathered by ``status.gather``) and the verdicts
drawn from it: where the run stands (``phase``), which mode placed it (``mode``), and why, in one sentence
(``why``). Pure: no client, no I/O; ``run_document`` builds the ``-o json`` document from the same facts."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from multikueue.dispatch.placement import NO_WORKER_MATCHES
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.conditions import find
from multikueue.labels import (
    ADMITTED,
    EVICTED,
    FINISHED,
    PLACEMENT_PHASE,
    PLACEMENT_WORKER,
    QUOTA_RESERVED,
)

Object = dict[str, Any]
KUEUE, DIRECT = "Kueue", "Direct"


@dataclass
class WorkerView:
    name: str
    unreadable: str = ""  # why the worker could not be read ("" when it was), one line
    workload: Object | None = None  # this run's Workload copy there
    copy: Object | None = None  # this run's object there
    events: list[Object] = field(default_factory=list)


@dataclass
class RunView:
    gvk: GroupVersionKind
    namespace: str
    name: str
    obj: Object | None = None
    workload: Object | None = None
    workers: list[WorkerView] = field(default_factory=list)
    events: list[Object] = field(default_factory=list)  # the manager's, about the object and its Workload
    placement: Object | None = None  # Direct mode's MultiKueuePlacement condition (or its annotation copy)
    avoided: dict[str, str] = field(default_factory=dict)  # Direct mode: worker -> why the run avoids it
    unreadable: dict[str, str] = field(default_factory=dict)  # what on the manager could not be read -> why


def condition(obj: Object | None, kind: str) -> Object:
    return find(((obj or {}).get("status") or {}).get("conditions"), kind) or {}


def holds(obj: Object | None, kind: str) -> bool:
    return condition(obj, kind).get("status") == "True"


def notes(view: RunView) -> dict[str, str]:
    return dict(((view.obj or {}).get("metadata") or {}).get("annotations") or {})


def workers_of(view: RunView) -> list[str]:
    """The workers the run is on or may go to: the one it runs on, else those nominated, else (direct mode) the
    one its placement names."""
    status = (view.workload or {}).get("status") or {}
    if status.get("clusterName"):
        return [str(status["clusterName"])]
    if status.get("nominatedClusterNames"):
        return [str(c) for c in status["nominatedClusterNames"]]
    placed = notes(view).get(PLACEMENT_WORKER)
    return [placed] if placed else []


def finished(view: RunView) -> bool:
    """The run is over (Kueue mode: its Workload finished; Direct mode: its phase)."""
    return holds(view.workload, FINISHED) or notes(view).get(PLACEMENT_PHASE) in ("Finished", "Failed")


def mode(view: RunView) -> str | None:
    """Direct when this dispatcher's placement record is on the object, Kueue when it has a Workload, else not known
    (not queued, or not looked at yet)."""
    recorded = notes(view)
    if recorded.get(PLACEMENT_WORKER) or recorded.get(PLACEMENT_PHASE) or view.placement is not None:
        return DIRECT
    return KUEUE if view.workload is not None else None


def worker_of(view: RunView) -> str | None:
    """The worker the run is admitted or placed on, if any."""
    admitted = ((view.workload or {}).get("status") or {}).get("clusterName")
    return str(admitted) if admitted else notes(view).get(PLACEMENT_WORKER) or None


def phase(view: RunView) -> str:
    """One word for where the run stands; the documented values of the document's ``phase``."""
    if view.obj is None:
        return "NotFound"
    found = mode(view)
    if found == DIRECT:
        recorded = notes(view)
        ended = recorded.get(PLACEMENT_PHASE)
        if ended in ("Finished", "Failed"):
            return str(ended)
        return "Placed" if recorded.get(PLACEMENT_WORKER) else "WaitingForWorker"
    if found is None:
        return "Unknown"
    return _kueue_phase(view.workload or {})


def _kueue_phase(workload: Object) -> str:
    if holds(workload, FINISHED):
        return "Finished" if condition(workload, FINISHED).get("reason") == "Succeeded" else "Failed"
    if holds(workload, EVICTED):
        return "Evicted"
    if not holds(workload, QUOTA_RESERVED):
        return "WaitingForQuota"
    return "Placed" if (workload.get("status") or {}).get("clusterName") else "WaitingForWorker"


# ------------------------------------------------------------------------------------------- the sentence


def why(view: RunView) -> str:
    """Where the run stands, in one sentence a user can act on."""
    if view.obj is None:
        return f"{view.gvk.kind} {view.namespace}/{view.name} does not exist on the manager"
    if view.workload is None:
        return _without_workload(view)
    workload = view.workload
    for kind, word in ((FINISHED, "finished"), (EVICTED, "evicted")):
        if holds(workload, kind):
            return f"{word} ({condition(workload, kind).get('reason')}): {condition(workload, kind).get('message')}"
    if not holds(workload, QUOTA_RESERVED):
        reserved = condition(workload, QUOTA_RESERVED)
        return f"waiting for quota on the manager: {reserved.get('message') or 'not looked at by Kueue yet'}"
    status = workload.get("status") or {}
    if status.get("clusterName"):
        return _running(view, str(status["clusterName"]))
    return _waiting_for_a_worker(view)


def _without_workload(view: RunView) -> str:
    recorded = notes(view)
    if recorded.get(PLACEMENT_WORKER):
        step = recorded.get(PLACEMENT_PHASE) or "being created"
        return f"placed on {recorded[PLACEMENT_WORKER]} (direct mode), {step}"
    if recorded.get(PLACEMENT_PHASE):  # ended before any placement: no worker could ever run it
        return f"{recorded[PLACEMENT_PHASE]} without a worker (direct mode); `multikueue explain` tells why"
    if view.placement is not None:
        return f"waiting for a worker (direct mode): {view.placement.get('message') or view.placement.get('reason')}"
    if view.unreadable.get("Workloads"):
        return f"not known: Workloads cannot be read {view.unreadable['Workloads']}"
    return ("no Workload: not queued (no kueue.x-k8s.io/queue-name label), not managed by Kueue, or not looked at "
            "yet; `multikueue explain` tells a direct-mode placement")  # fmt: skip


def _running(view: RunView, worker: str) -> str:
    where = next((w for w in view.workers if w.name == worker), WorkerView(worker))
    if where.unreadable:
        return f"admitted on {worker}; that worker {where.unreadable}"
    if where.copy is None:
        return f"admitted on {worker}; its copy is not created there yet"
    return f"admitted on {worker}, running there: {state(where.copy)}"


def _waiting_for_a_worker(view: RunView) -> str:
    checks = ((view.workload or {}).get("status") or {}).get("admissionChecks") or []
    blocking = [c for c in checks if c.get("state") in ("Retry", "Rejected")]
    if blocking:
        return "; ".join(f"admission check {c.get('name')} is {c.get('state')}: {c.get('message')}" for c in blocking)
    unmatched = next((m for c in checks if (m := str(c.get("message") or "")).startswith(NO_WORKER_MATCHES)), None)
    if unmatched:
        return f"sent to no worker: {unmatched}"
    if not view.workers:
        pending = [
            f"{c.get('name')}: {c.get('message') or c.get('state')}" for c in checks if c.get("state") != "Ready"
        ]
        return "waiting to be sent to a worker" + (f" ({'; '.join(pending)})" if pending else "")
    return "waiting for a worker's Kueue to admit it: " + "; ".join(
        f"{w.name}{' ' if w.unreadable else ': '}{worker_wait(w)}" for w in view.workers
    )


def worker_wait(worker: WorkerView) -> str:
    """What a nominated worker says about the run, in one line (its Kueue's own reason where it has one)."""
    if worker.unreadable:
        return worker.unreadable
    if worker.workload is None:
        return "its Workload copy is not there yet"
    reserved = condition(worker.workload, QUOTA_RESERVED)
    if reserved.get("status") == "True" and not holds(worker.workload, ADMITTED):
        return "quota reserved, waiting for its admission checks"
    return str(reserved.get("message") or "not looked at by its Kueue yet")


def state(obj: Object) -> str:
    """The object's own conditions, as ``type=status (reason)``; its kind decides what they mean."""
    return conditions_text(((obj.get("status") or {}).get("conditions")) or [])


def conditions_text(rows: list[Object]) -> str:
    return ", ".join(f"{c.get('type')}={c.get('status')} ({c.get('reason')})" for c in rows) or "no conditions yet"
