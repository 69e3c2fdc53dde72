"""``multikueue explain``: a direct-mode object's placement record (worker, phase, avoided workers, the
``MultiKueuePlacement`` condition's verdicts), read from the manager."""

from __future__ import annotations

from multikueue.dispatch.direct import CONDITION, avoided, notes_of, placement_record
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.client import ApiClient
from multikueue.kube.discovery import KindUnavailable, discover_resource
from multikueue.kube.resources import Objects
from multikueue.labels import PLACEMENT_PHASE, PLACEMENT_WORKER


async def explain(api: ApiClient, gvk: GroupVersionKind, namespace: str, name: str) -> tuple[str, bool]:
    """The placement record of one object, as ``multikueue explain`` prints it; (text, whether it was found)."""
    try:
        resource = await discover_resource(api, gvk)
    except KindUnavailable as e:
        return f"{gvk.kind}.{gvk.version}.{gvk.group}: {e} on this cluster", False
    obj = await Objects(api, resource).get(name, namespace)
    if obj is None:
        return f"{gvk.kind} {namespace}/{name} not found", False
    notes = notes_of(obj)
    lines = [
        f"{gvk.kind} {namespace}/{name}",
        f"  worker: {notes.get(PLACEMENT_WORKER) or '(none)'}    phase: {notes.get(PLACEMENT_PHASE) or '(not placed)'}",
    ]
    for worker, why in avoided(obj).items():
        lines.append(f"  avoided: {worker}: {why}")
    condition = placement_record(obj)
    if condition is None:
        lines.append(f"  {CONDITION}: not set (not a direct-mode object, or not looked at yet)")
    else:
        head, *verdicts = str(condition.get("message", "")).split("; ")
        lines.append(f"  {CONDITION}: {condition.get('status')} {condition.get('reason')} "
                     f"(since {condition.get('lastTransitionTime')})")  # fmt: skip
        lines.append(f"    {head}")
        lines.extend(f"    {verdict}" for verdict in verdicts)
    return "\n".join(lines), True
