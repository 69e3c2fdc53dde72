"""A Workload's spec as the dispatcher compares a worker's copy with the manager's: a digest, priority apart.

A copy whose spec no longer matches the manager Workload's is replaced, or, when only the priority changed, has
the priority carried over. That comparison is all a worker copy's spec is read for, so the worker caches keep
this summary in place of the spec (an informer transform): a copy's spec is as large as the manager's (pod
templates), and with one copy per worker per run in flight it was the largest cached part of Kueue mode's memory.
Pure functions over dicts.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

Object = dict[str, Any]

DIGEST = "multikueue/digest"
"""The summary's key: no Workload spec field has it (API field names carry no ``/``)."""
PRIORITY_FIELDS = ("priority", "priorityClassRef")
"""Carried to a copy in place, without replacing it (Kueue's MultiKueue does the same)."""
NOT_COMPARED = ("preemptionGates",)
"""The manager's gates are not the worker's (orchestrated preemption)."""


def digest(spec: Object) -> str:
    """The spec without its priority fields and the fields not compared, hashed: equal specs, equal digests."""
    rest = {k: v for k, v in spec.items() if k not in PRIORITY_FIELDS and k not in NOT_COMPARED}
    text = json.dumps(rest, sort_keys=True, separators=(",", ":"))
    return hashlib.blake2b(text.encode(), digest_size=16).hexdigest()


def summarized(workload: Object) -> Object:
    """The Workload with its spec replaced by ``{DIGEST: ..., priority, priorityClassRef}`` (a shallow copy; one
    already summarized, or without a spec, as it is)."""
    spec = workload.get("spec")
    if not isinstance(spec, dict) or DIGEST in spec:
        return workload
    summary = {DIGEST: digest(spec), **{k: spec[k] for k in PRIORITY_FIELDS if k in spec}}
    return {**workload, "spec": summary}


def compared(workload: Object) -> tuple[str, tuple[Any, ...]]:
    """(digest, priority fields) of a Workload, summarized or whole."""
    spec = workload.get("spec") or {}
    found = spec.get(DIGEST)
    return (found if isinstance(found, str) else digest(spec)), tuple(spec.get(k) for k in PRIORITY_FIELDS)
