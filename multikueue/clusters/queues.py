"""The workers' ClusterQueues, listed every ``QUEUE_POLL_SECONDS`` for the fleet metrics
(``multikueue_worker_clusterqueue_*``): one LIST per connected worker a period, no watch, no cache beyond the last
answer. A worker whose RBAC does not allow it (a role from before this metric) is said once in the log and left
out; the fleet view (``multikueue workers``) still reads it with the user's own access."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import structlog

from multikueue.clusterqueues import Queue, queue_of
from multikueue.clusters.worker import KindNotServed, Worker
from multikueue.kube.errors import ApiError, KubeError, describe

log = structlog.get_logger(__name__)
QUEUE_POLL_SECONDS = 30.0


class WorkerQueues:
    def __init__(self, connections: Callable[[], dict[str, Worker]], every: float = QUEUE_POLL_SECONDS) -> None:
        self.connections = connections
        self.every = every
        self.seen: dict[str, list[Queue]] = {}  # worker -> its ClusterQueues at the last answer
        self.refused: set[str] = set()  # workers whose answer was a refusal, said once

    def current(self) -> dict[str, list[Queue]]:
        """What the metrics show: connected workers only (a lost worker's last answer is not its state now)."""
        connected = {name for name, worker in self.connections().items() if worker.connected}
        return {name: queues for name, queues in self.seen.items() if name in connected}

    async def run(self) -> None:
        while True:  # until the generation ends
            await self.poll()
            await anyio.sleep(self.every)

    async def poll(self) -> None:
        for name, worker in list(self.connections().items()):
            if not worker.connected:
                continue
            try:
                listed = await worker.cluster_queues().items()
            except ApiError as e:
                self.seen.pop(name, None)
                if name not in self.refused:
                    self.refused.add(name)
                    log.warning("worker ClusterQueues cannot be listed: left out of the queue metrics", cluster=name,
                                error=describe(e))  # fmt: skip
                continue
            except (KubeError, KindNotServed):
                continue  # not answering (the connection's own probe tells) or gone meanwhile
            self.refused.discard(name)
            try:
                self.seen[name] = [queue_of(q) for q in listed]
            except (KeyError, TypeError, ValueError) as e:  # not what Kueue writes: that worker is left out
                self.seen.pop(name, None)
                log.warning(
                    "worker ClusterQueues unreadable: left out of the queue metrics", cluster=name, error=str(e)
                )
