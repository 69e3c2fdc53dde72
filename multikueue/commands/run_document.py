"""The ``RunStatus`` document of ``multikueue status -o json`` and ``explain -o json`` (``multikueue.x-k8s.io/
v1alpha1``; README.md, "Asking why from a program", is its schema), built from a ``RunView`` by one pure function.
Both commands' text is rendered from this document (``run_text``), so the text and the JSON never disagree.

v1alpha1 may gain fields; it loses or changes none (a change of meaning is a new version)."""

from __future__ import annotations

from typing import Any

from multikueue.commands.run_view import (
    DIRECT,
    KUEUE,
    RunView,
    WorkerView,
    condition,
    finished,
    holds,
    mode,
    notes,
    phase,
    state,
    why,
    worker_of,
    worker_wait,
)
from multikueue.labels import ADMITTED, PLACEMENT_PHASE, PLACEMENT_WORKER, QUOTA_RESERVED

Object = dict[str, Any]
API_VERSION = "multikueue.x-k8s.io/v1alpha1"
KIND = "RunStatus"
VERDICTS = ("rejected: ", "fits (")  # how placement.py's Verdict says each worker's, after "name: "


def document(view: RunView) -> Object:
    """Everything known about the run, in the documented shape; ``view`` is not changed."""
    meta = (view.obj or {}).get("metadata") or {}
    gvk = view.gvk
    found = view.obj is not None
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "run": {
            "apiVersion": f"{gvk.group}/{gvk.version}" if gvk.group else gvk.version,
            "kind": gvk.kind,
            "namespace": view.namespace,
            "name": view.name,
            "uid": meta.get("uid"),
        },
        "mode": mode(view),
        "phase": phase(view),
        "worker": worker_of(view),
        "why": why(view),
        "workers": _workers(view) if found else [],
        "manager": _manager(view) if found else None,
        "events": _events(view),
    }


# ------------------------------------------------------------------------------------------------ workers


def verdicts(message: str) -> dict[str, str]:
    """Each worker's verdict in a ``MultiKueuePlacement`` message (``head; w1: rejected: ...; w2: fits (...)``)."""
    found = {}
    for item in message.split("; ")[1:]:
        worker, _, verdict = item.partition(": ")
        if verdict.startswith(VERDICTS):
            found[worker] = verdict
    return found


def _workers(view: RunView) -> list[Object]:
    judged = verdicts(str((view.placement or {}).get("message") or ""))
    rows = [_read_worker(view, w, judged.get(w.name)) for w in view.workers]
    seen = {w.name for w in view.workers}
    for name in sorted((judged.keys() | view.avoided.keys()) - seen):  # Direct mode: judged, not read
        reason = judged.get(name) or f"avoided: {view.avoided[name]}"
        rows.append(_row(name, reason, read=False, placement=judged.get(name), avoided=view.avoided.get(name)))
    return rows


def _row(name: str, reason: str, *, read: bool, unreadable: str | None = None, kueue: Object | None = None,
         workload: Object | None = None, copy: Object | None = None, placement: str | None = None,
         avoided: str | None = None) -> Object:  # fmt: skip
    return {"name": name, "reason": reason, "read": read, "unreadable": unreadable, "kueue": kueue,
            "workload": workload, "object": copy, "placement": placement, "avoided": avoided}  # fmt: skip


def _read_worker(view: RunView, worker: WorkerView, verdict: str | None) -> Object:
    quota = condition(worker.workload, QUOTA_RESERVED)
    copy = worker.workload
    return _row(
        worker.name,
        _worker_reason(view, worker, verdict),
        read=not worker.unreadable,
        unreadable=worker.unreadable or None,
        kueue=_condition_fields(quota) if quota else None,
        workload={"name": copy["metadata"]["name"], "admitted": holds(copy, ADMITTED)} if copy else None,
        copy={"conditions": _conditions(worker.copy)} if worker.copy is not None else None,
        placement=verdict,
        avoided=view.avoided.get(worker.name),
    )


def _worker_reason(view: RunView, worker: WorkerView, verdict: str | None) -> str:
    """What this worker says about the run, in one line: why the run is not there yet, or how it runs there."""
    if worker.unreadable:
        return worker.unreadable
    if worker.name == worker_of(view):
        if finished(view):  # its copy goes once the final status is mirrored (unless the kind's retention keeps it)
            return f"ran here: {state(worker.copy)}" if worker.copy is not None else "ran here; its copy is gone"
        word = "placed" if mode(view) == DIRECT else "admitted"
        if worker.copy is None:
            return f"{word} here; its copy is not created here yet"
        return f"{word} here, running: {state(worker.copy)}"
    if mode(view) == KUEUE:
        return worker_wait(worker)
    return verdict or "read, but the run is not placed here"


# ------------------------------------------------------------------------------------------------ manager


def _manager(view: RunView) -> Object:
    return {
        "conditions": _conditions(view.obj),
        "workload": _workload(view.workload) if view.workload is not None else None,
        "placement": _placement(view),
        "unreadable": dict(view.unreadable),
    }


def _workload(workload: Object) -> Object:
    status = workload.get("status") or {}
    quota = condition(workload, QUOTA_RESERVED)
    return {
        "name": workload["metadata"]["name"],
        "queue": (workload.get("spec") or {}).get("queueName"),
        "clusterQueue": (status.get("admission") or {}).get("clusterQueue"),
        "quota": _condition_fields(quota) if quota else None,
        "admissionChecks": [
            {"name": c.get("name"), "state": c.get("state"), "message": c.get("message") or ""}
            for c in status.get("admissionChecks") or []
        ],
        "nominated": [str(c) for c in status.get("nominatedClusterNames") or []],
        "admittedOn": status.get("clusterName"),
    }


def _placement(view: RunView) -> Object | None:
    recorded = notes(view)
    if mode(view) != DIRECT:
        return None
    record = view.placement
    return {
        "worker": recorded.get(PLACEMENT_WORKER),
        "phase": recorded.get(PLACEMENT_PHASE),
        "avoided": dict(view.avoided),
        "condition": {**_condition_fields(record), "lastTransitionTime": record.get("lastTransitionTime")}
        if record
        else None,
    }


def _condition_fields(found: Object) -> Object:
    return {"status": found.get("status"), "reason": found.get("reason"), "message": found.get("message") or ""}


def _conditions(obj: Object | None) -> list[Object]:
    rows = ((obj or {}).get("status") or {}).get("conditions") or []
    return [{"type": c.get("type"), **_condition_fields(c)} for c in rows if isinstance(c, dict)]


# ------------------------------------------------------------------------------------------------- events


def _events(view: RunView) -> list[Object]:
    """The manager's and the read workers' Events about the run, oldest first."""
    rows = [("manager", e) for e in view.events] + [(w.name, e) for w in view.workers for e in w.events]
    found = [_event(cluster, e) for cluster, e in rows]
    return sorted(found, key=lambda e: str(e["time"]))


def _event(cluster: str, event: Object) -> Object:
    involved = event.get("involvedObject") or {}
    return {"time": str(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or ""),
            "cluster": cluster, "kind": involved.get("kind"), "name": involved.get("name"), "type": event.get("type"),
            "reason": event.get("reason"), "message": event.get("message")}  # fmt: skip
