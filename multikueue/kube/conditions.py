"""metav1.Condition handling as apimachinery's ``meta.SetStatusCondition`` does it."""

from __future__ import annotations

import datetime
from typing import Any

Condition = dict[str, Any]


def now_rfc3339() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def find(conditions: list[Condition] | None, condition_type: str) -> Condition | None:
    return next((c for c in conditions or [] if c.get("type") == condition_type), None)


def is_true(obj: dict[str, Any], condition_type: str) -> bool:
    condition = find((obj.get("status") or {}).get("conditions"), condition_type)
    return condition is not None and condition.get("status") == "True"


def same_state(old: Condition | None, new: Condition) -> bool:
    """Status, reason, message and observedGeneration all equal (Kueue's ``cmpConditionState``)."""
    if old is None:
        return False
    return all(old.get(k) == new.get(k) for k in ("status", "reason", "message", "observedGeneration"))


def set_condition(conditions: list[Condition] | None, new: Condition, *, now: str | None = None) -> list[Condition]:
    """Return the list with ``new`` set; ``lastTransitionTime`` moves only when the status changes."""
    result = [dict(c) for c in conditions or []]
    existing = find(result, new["type"])
    stamp = now or now_rfc3339()
    if existing is None:
        result.append({**new, "lastTransitionTime": new.get("lastTransitionTime") or stamp})
        return result
    if existing.get("status") != new["status"]:
        existing["lastTransitionTime"] = new.get("lastTransitionTime") or stamp
    for key in ("status", "reason", "message", "observedGeneration"):
        if key in new:
            existing[key] = new[key]
    return result
