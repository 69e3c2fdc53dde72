"""The manager generation's gauges counted when scraped: ``multikueue_runs_waiting_for_a_worker`` and the workers'
ClusterQueues (``multikueue_worker_clusterqueue_*``, polled by ``clusters/queues.py``).

Each is a runnable: it gives the metric its source when it starts and takes it back when the generation stops, so a
scrape never reads a stopped generation's caches (the next generation's runnables set their own)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import anyio

from multikueue.clusters.queues import WorkerQueues
from multikueue.metrics import Metrics
from multikueue.runtime.informer import Informer

Object = dict[str, Any]


def none_waiting() -> dict[str, int]:
    """Between generations: both modes still exported, at zero."""
    return {"Kueue": 0, "Direct": 0}


class WaitingGauge:
    """``multikueue_runs_waiting_for_a_worker{mode}``: runs no worker can take now, counted from the caches."""

    def __init__(
        self,
        metrics: Metrics,
        *,
        kueue: Callable[[], int],
        direct_kinds: Mapping[Any, tuple[Informer, Any]],
        waits: Callable[[Object], bool],
    ) -> None:
        self.metrics = metrics
        self.kueue = kueue  # the Kueue-mode Workloads every nominated worker's Kueue cannot fit
        self.direct_kinds = direct_kinds  # the Direct-mode kinds' informers, kept up to date as kinds are served
        self.waits = waits  # whether a Direct-mode object's placement says no worker fits it now

    def count(self) -> dict[str, int]:
        direct = sum(self.waits(obj) for informer, _ in self.direct_kinds.values() for obj in informer.items())
        return {"Kueue": self.kueue(), "Direct": direct}

    async def run(self) -> None:
        self.metrics.waiting.count = self.count
        try:
            await anyio.sleep_forever()
        finally:
            self.metrics.waiting.count = none_waiting


class WorkerQueuesGauge:
    """The workers' ClusterQueues: ``queues`` polled every period, connected workers' shown."""

    def __init__(self, metrics: Metrics, queues: WorkerQueues) -> None:
        self.metrics = metrics
        self.queues = queues

    async def run(self) -> None:
        self.metrics.worker_queues.queues = self.queues.current
        try:
            await self.queues.run()
        finally:
            self.metrics.worker_queues.queues = dict
