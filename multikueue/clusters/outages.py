"""Since when each worker has had no usable connection: the worker-lost clock of the runs recorded there.

Owned by the process, not by a generation: a configuration reload rebuilds every connection, and the clock of a run
that waits on a lost worker must not start again with it (a reload every few minutes would otherwise keep such a run
waiting for ever). A connection that drops (its MultiKueueCluster deleted, its kubeconfig no longer usable, a reload)
is recorded here; one that connects clears its worker.
"""

from __future__ import annotations

import time
from collections.abc import Callable


class WorkerOutages:
    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self.clock = clock or time.monotonic  # read at construction, not import: a test's clock is seen
        self.started_at = self.clock()  # a worker never connected in this process counts as lost since its start
        self._since: dict[str, float] = {}

    def dropped(self, name: str, since: float | None = None) -> None:
        """The worker's connection was dropped (its outage began at ``since``, if earlier than now)."""
        now = self.clock()
        self._since[name] = min(t for t in (since, self._since.get(name), now) if t is not None)

    def connected(self, name: str) -> None:
        self._since.pop(name, None)

    def since(self, name: str) -> float | None:
        """When the worker's connection was dropped, if it was and has not connected since."""
        return self._since.get(name)
