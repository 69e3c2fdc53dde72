"""What a dispatch reconciler keeps about each run between passes: one place, forgotten at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

Object = dict[str, Any]
K = TypeVar("K")


@dataclass
class RunMemory(Generic[K]):
    """Per-run state of one reconciler, keyed as its work queue is. Nothing here is needed for correctness across
    a restart: each is a clock or a hint that a successor starts afresh."""

    deleted: dict[K, Object] = field(default_factory=dict)  # last state of a deleted run: its copies still go
    # Since when no worker can ever take the run as the fleet stands (this process's clock: inadmissibleTimeout).
    unfit_since: dict[K, float] = field(default_factory=dict)
    waiting: set[K] = field(default_factory=set)  # waiting for a worker: a worker's labels or capacity may change that
    rounds: dict[K, float] = field(default_factory=dict)  # Kueue's incremental dispatch: when its round began

    def forget(self, key: K) -> None:
        self.deleted.pop(key, None)
        self.unfit_since.pop(key, None)
        self.waiting.discard(key)
        self.rounds.pop(key, None)
