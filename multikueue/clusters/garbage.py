"""The garbage collector every ``gcInterval``: ``collect_garbage`` (dispatch/garbage.py, both modes' rules) removes
what this origin left on the workers that no manager run wants any more (copies whose manager Workload or object is
gone, finished past retention, or placed elsewhere). Started by the manager generation; a failed pass is logged and
the next one comes an interval later."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

import anyio
import structlog

log = structlog.get_logger(__name__)


class Collects(Protocol):
    """A dispatch mode's reconciler: what it knows to be garbage on the workers, removed in one pass."""

    async def collect_garbage(self) -> None: ...


class GarbageCollection:
    def __init__(self, collectors: Sequence[Collects], every: float) -> None:
        self.collectors = collectors
        self.every = every  # seconds; 0 turns collection off (as Kueue's gcInterval)

    async def run(self) -> None:
        """A pass of every collector each ``every`` seconds, the first one interval after start, until cancelled."""
        if self.every <= 0:
            return
        while True:
            await anyio.sleep(self.every)
            for collector in self.collectors:
                try:
                    await collector.collect_garbage()
                except Exception as e:  # one mode failing does not keep the other from collecting
                    log.warning("garbage collection failed", error=f"{type(e).__name__}: {e}")
