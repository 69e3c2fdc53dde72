"""A Kueue ClusterQueue read for the fleet view: usage against nominal quota per flavor and resource, and its
Workloads pending, reserving and admitted. Pure: ``multikueue workers`` and the worker queue metrics share it."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

Object = dict[str, Any]
_SUFFIX = {"n": "1e-9", "u": "1e-6", "m": "1e-3", "": "1", "k": "1e3", "M": "1e6", "G": "1e9", "T": "1e12",
           "P": "1e15", "E": "1e18", "Ki": str(2**10), "Mi": str(2**20), "Gi": str(2**30), "Ti": str(2**40),
           "Pi": str(2**50), "Ei": str(2**60)}  # fmt: skip
_QUANTITY = re.compile(r"^([+-]?[0-9.]+)([eE][+-]?[0-9]+|[KMGTPE]i|[numkMGTPE])?$")


@dataclass
class Usage:
    flavor: str
    resource: str
    used: str  # Kueue's quantity, as it writes it
    nominal: str


@dataclass
class Queue:
    name: str
    pending: int
    reserving: int
    admitted: int
    usage: list[Usage] = field(default_factory=list)


def queue_of(cluster_queue: Object) -> Queue:
    """A ClusterQueue's usage (``status.flavorsUsage``) against its nominal quota (``spec.resourceGroups``)."""
    status = cluster_queue.get("status") or {}
    used = {(f["name"], r["name"]): str(r.get("total", "0"))
            for f in status.get("flavorsUsage") or [] for r in f.get("resources") or []}  # fmt: skip
    usage = [
        Usage(flavor["name"], resource["name"], used.get((flavor["name"], resource["name"]), "0"),
              str(resource.get("nominalQuota", "0")))
        for group in (cluster_queue.get("spec") or {}).get("resourceGroups") or []
        for flavor in group.get("flavors") or []
        for resource in flavor.get("resources") or []
    ]  # fmt: skip
    pending, reserving, admitted = (int(status.get(k) or 0) for k in ("pendingWorkloads", "reservingWorkloads",
                                                                        "admittedWorkloads"))  # fmt: skip
    return Queue(cluster_queue["metadata"]["name"], pending, reserving, admitted, usage)


def quantity_value(text: str) -> float:
    """A Kubernetes quantity as a number (``500m`` -> 0.5, ``16Gi`` -> 17179869184); ``ValueError`` if not one."""
    match = _QUANTITY.match(text.strip())
    if match is None:
        raise ValueError(f"not a quantity: {text!r}")
    number, suffix = match.group(1), match.group(2) or ""
    try:
        scale = Decimal(f"1{suffix}") if suffix[:1] in ("e", "E") else Decimal(_SUFFIX[suffix])
        return float(Decimal(number) * scale)
    except ArithmeticError:  # decimal.InvalidOperation: "1.2.3"
        raise ValueError(f"not a quantity: {text!r}") from None
