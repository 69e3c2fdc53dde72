"""A bounded cache whose entries expire: review verdicts kept briefly, so a scraper every few seconds costs the API
server two reviews a minute, not two per scrape; bounded, so unknown tokens sent in a loop cannot grow it."""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class TTLCache(Generic[K, V]):
    """Up to ``size`` entries, each valid for the seconds given when it was put; the least recently used goes first."""

    def __init__(self, size: int, *, clock: Callable[[], float] | None = None) -> None:
        if size < 1:
            raise ValueError(f"a cache holds at least one entry, got size {size}")
        self.size = size
        self.clock = clock or time.monotonic  # read at construction, not import: a test's clock is seen
        self._entries: OrderedDict[K, tuple[float, V]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, key: K) -> V | None:
        found = self._entries.get(key)
        if found is None:
            return None
        expires, value = found
        if self.clock() >= expires:
            del self._entries[key]
            return None
        self._entries.move_to_end(key)
        return value

    def put(self, key: K, value: V, ttl: float) -> None:
        self._entries[key] = (self.clock() + ttl, value)
        self._entries.move_to_end(key)
        while len(self._entries) > self.size:
            self._entries.popitem(last=False)
