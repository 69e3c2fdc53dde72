"""The text of ``multikueue status`` and ``multikueue explain``, rendered from the ``RunStatus`` document
(``run_document``) and nothing else, so what a user reads and what a program reads never disagree. Pure."""

from __future__ import annotations

from typing import Any

from multikueue.labels import PLACEMENT_CONDITION

Object = dict[str, Any]
EVENTS_SHOWN = 20


def one_line(text: str) -> str:
    """A message from elsewhere (a condition another controller wrote) on one line: a worker's failure is one line."""
    return " ".join(str(text).split())


def _head(document: Object) -> str:
    run = document["run"]
    return f"{run['kind']} {run['namespace']}/{run['name']}"


def _conditions_text(rows: list[Object]) -> str:
    return ", ".join(f"{c.get('type')}={c.get('status')} ({c.get('reason')})" for c in rows) or "no conditions yet"


def _quota(quota: Object | None) -> str:
    if not quota:
        return "not looked at by Kueue yet"
    return f"{quota.get('status')} {quota.get('reason')}: {quota.get('message') or ''}"


# ------------------------------------------------------------------------------------------------- status


def status_text(document: Object) -> str:
    lines = [_head(document), f"  why: {document['why']}"]
    manager = document.get("manager")
    if manager is None:
        return "\n".join(lines)
    lines.append(f"  manager object: {_conditions_text(manager['conditions'])}")
    lines.extend(f"  manager: cannot read {what} {one_line(why)}" for what, why in manager["unreadable"].items())
    if manager["workload"] is not None:
        lines.extend(_workload_lines(manager["workload"]))
    for worker in document["workers"]:
        lines.extend(_worker_lines(worker))
    lines.extend(_event_lines(document["events"]))
    return "\n".join(lines)


def _workload_lines(workload: Object) -> list[str]:
    queues = f"queue {workload['queue']}, ClusterQueue {workload['clusterQueue'] or '-'}"
    lines = [f"  Workload {workload['name']}: {queues}", f"    quota: {_quota(workload['quota'])}"]
    lines.extend(
        f"    check {c['name']}: {c['state']}" + (f": {c['message']}" if c["message"] else "")
        for c in workload["admissionChecks"]
    )
    if workload["nominated"]:
        lines.append(f"    nominated: {', '.join(workload['nominated'])}")
    if workload["admittedOn"]:
        lines.append(f"    admitted on: {workload['admittedOn']}")
    return lines


def _worker_lines(worker: Object) -> list[str]:
    """A worker that was read, or could not be (one line); a worker only judged by Direct placement is shown by
    ``explain``, not here."""
    if worker["unreadable"]:
        return [f"  worker {worker['name']}: {one_line(worker['unreadable'])}"]
    if not worker["read"]:
        return []
    lines = [f"  worker {worker['name']}:"]
    if worker["workload"] is None:
        lines.append("    Workload copy: not there")
    else:
        admitted = "admitted" if worker["workload"]["admitted"] else "not admitted"
        lines.append(f"    Workload copy: {admitted}; quota: {_quota(worker['kueue'])}")
    copy = worker["object"]
    lines.append(f"    object: {_conditions_text(copy['conditions']) if copy is not None else 'not created'}")
    return lines


def _event_lines(events: list[Object]) -> list[str]:
    if not events:
        return []
    lines = ["  events (oldest first):"]
    lines.extend(f"    {e['time']} {e['cluster']} {e['kind']}/{e['name']} {e['type']} {e['reason']}: {e['message']}"
                 for e in events[-EVENTS_SHOWN:])  # fmt: skip
    return lines


# ------------------------------------------------------------------------------------------------ explain


def explain_text(document: Object) -> str:
    """A direct-mode object's placement record: worker, phase, avoided workers, the condition's verdicts."""
    if document["manager"] is None:
        return f"{_head(document)} not found"
    placement = document["manager"]["placement"] or {}
    lines = [
        _head(document),
        f"  worker: {placement.get('worker') or '(none)'}    phase: {placement.get('phase') or '(not placed)'}",
    ]
    lines.extend(f"  avoided: {worker}: {why}" for worker, why in (placement.get("avoided") or {}).items())
    record = placement.get("condition")
    if record is None:
        lines.append(f"  {PLACEMENT_CONDITION}: not set (not a direct-mode object, or not looked at yet)")
        return "\n".join(lines)
    head, *verdicts = str(record["message"]).split("; ")
    lines.append(f"  {PLACEMENT_CONDITION}: {record['status']} {record['reason']} "
                 f"(since {record['lastTransitionTime']})")  # fmt: skip
    lines.append(f"    {head}")
    lines.extend(f"    {verdict}" for verdict in verdicts)
    return "\n".join(lines)
