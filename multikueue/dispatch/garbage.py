"""One garbage collector for both modes, by origin label.

The workers' caches hold only this origin's copies (they are label-selected by it), so one sweep over each
connected worker's cached copies, kind by kind, finds everything this dispatcher left there. The mode the kind is
dispatched in says whether a run still wants each copy (``Mode.wants``): Kueue mode, its manager Workload is still
there; Direct mode, its object is placed there, made for this very run, and not finished past its retention. What no
run wants is deleted. Kueue mode also sweeps the Workload copies whose manager Workload is gone (Kueue's ``runGC``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Protocol

import structlog

from multikueue.clusters.worker import Worker
from multikueue.kube.addresses import GroupVersionKind
from multikueue.runtime.informer import ObjectKey

log = structlog.get_logger(__name__)
Object = dict[str, Any]


class Mode(Protocol):
    """A dispatch mode's rules for the collector."""

    def dispatches(self, gvk: GroupVersionKind) -> bool:
        """Whether this mode dispatches the kind's runs."""

    async def wants(self, worker: Worker, gvk: GroupVersionKind, worker_obj: Object) -> bool:
        """Whether a run still wants this copy on ``worker``."""

    async def remove(self, worker: Worker, gvk: GroupVersionKind, worker_obj: Object) -> bool:
        """Delete a copy no run wants; whether a delete was sent."""

    async def sweep(self, worker: Worker) -> None:
        """What else of this mode's the worker holds that no run wants (Kueue mode: Workload copies)."""


class GarbageCollector:
    def __init__(self, connections: Callable[[], dict[str, Worker]], modes: Sequence[Mode]) -> None:
        self.connections = connections
        self.modes = modes

    async def collect_garbage(self) -> None:
        for name, worker in list(self.connections().items()):
            if worker.connected:
                await self._collect(name, worker)

    async def _collect(self, name: str, worker: Worker) -> None:
        """Each mode on its own: one that fails (a worker that stops answering, a refused delete) is logged and
        tried again next time, and never keeps the other, or the next worker, from being collected."""
        for mode in self.modes:
            try:
                await self._collect_mode(name, worker, mode)
            except Exception as e:
                log.warning("garbage collection failed", cluster=name, error=f"{type(e).__name__}: {e}")

    async def _collect_mode(self, name: str, worker: Worker, mode: Mode) -> None:
        for gvk in [g for g in worker.kinds() if mode.dispatches(g)]:
            for worker_obj in worker.copies(gvk):
                if not await mode.wants(worker, gvk, worker_obj) and await mode.remove(worker, gvk, worker_obj):
                    log.info("orphan copy deleted", cluster=name, kind=gvk.kind, object=str(ObjectKey.of(worker_obj)))
        await mode.sweep(worker)
