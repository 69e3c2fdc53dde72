"""What the dispatch controllers watch of the workers, emitted by the cluster reconciler and its connections."""

from __future__ import annotations

from dataclasses import dataclass, field

from multikueue.kube.addresses import GroupVersionKind
from multikueue.runtime.informer import ObjectKey
from multikueue.runtime.signal import Signal


@dataclass(frozen=True)
class WorkerSignals:
    # Every connection attempt (the MultiKueueCluster's condition counts them).
    attempted: Signal[str] = field(default_factory=lambda: Signal("a worker connection attempt"))
    # A worker connected, lost, its first attempt ended, or a kind on it came or went: runs waiting on it look again.
    changed: Signal[str] = field(default_factory=lambda: Signal("a worker, or a kind on it, coming or going"))
    # (worker, the manager Workload it concerns): a Workload copy or an object on the worker changed.
    workload: Signal[tuple[str, ObjectKey]] = field(default_factory=lambda: Signal("a worker's Workload copy"))
    # (worker, kind, namespace/name): a Direct-mode copy on the worker changed.
    object: Signal[tuple[str, GroupVersionKind, ObjectKey]] = field(
        default_factory=lambda: Signal("a worker's Direct-mode copy")
    )
