"""A keyed work queue with client-go's guarantees, for anyio.

- A key is queued at most once however often it is added (bursts coalesce).
- A key being processed is never handed to a second worker; added meanwhile, it is queued again on ``done``.
- ``add_after`` delays a key (the earliest pending delay wins); ``add_rate_limited`` delays it by a per-key
  exponential backoff that ``forget`` resets.
- Two priorities, as controller-runtime's priority queue: a key added ``low`` (a bulk look at every object — an
  informer's first list, a worker reconnected, a configuration reloaded) waits behind every key added normally (a
  change someone made: a user's cancel, a new run). Added normally while queued low, it moves up; nothing is dropped.
  Unlike controller-runtime's, a low key is not starved: once it has waited ``low_max_wait`` seconds it takes every
  other turn, so a run that was pending when a leader took over is not left behind a steady stream of new runs.
"""

from __future__ import annotations

import heapq
import itertools
import math
import time
from collections import deque
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import anyio

K = TypeVar("K", bound=Hashable)


class ShutDown(Exception):
    """The queue is shut down; workers should exit."""


@dataclass(frozen=True)
class Backoff:
    """Exponential per-key backoff: ``base * factor**failures``, capped at ``cap`` seconds."""

    base: float = 0.05
    factor: float = 2.0
    cap: float = 300.0

    def delay(self, failures: int) -> float:
        if failures <= 0:
            return 0.0
        exponent = min(failures - 1, 64)
        return min(self.cap, self.base * math.pow(self.factor, exponent))


_DEFAULT_BACKOFF = Backoff()


class WorkQueue(Generic[K]):
    def __init__(self, *, backoff: Backoff = _DEFAULT_BACKOFF, clock: Callable[[], float] | None = None,
                 low_max_wait: float = 5.0) -> None:  # fmt: skip
        self._queue: deque[K] = deque()
        self._low: deque[K] = deque()
        self._dirty: set[K] = set()
        self._queued_low: set[K] = set()  # dirty keys whose every add was low (their entry is in ``_low``)
        self._low_since: dict[K, float] = {}  # when each of those was queued low
        self._low_max_wait = low_max_wait
        self._aged_turn = False  # the last key handed out was an aged low one: a normal one's turn
        self._processing: set[K] = set()
        self._delayed: list[tuple[float, int, K]] = []
        self._delay_of: dict[K, float] = {}
        self._failures: dict[K, int] = {}
        self._added_at: dict[K, float] = {}
        self._sequence = itertools.count()
        # Each idle worker waits on its own event and a new key wakes one of them (client-go's condition variable
        # signals one): a shared event woke every idle worker for each key, and all but one went back to sleep
        # (measured: most of a key's CPU with 32 workers idle). One of them, the timer, also waits for the earliest
        # delayed key.
        self._waiters: deque[anyio.Event] = deque()
        self._timer: anyio.Event | None = None
        self._shut_down = False
        self._backoff = backoff
        self._clock = clock or time.monotonic  # read at construction, not import: a test's clock is seen

    # --------------------------------------------------------------------------------------- producers

    def add(self, key: K, *, low: bool = False) -> None:
        if self._shut_down:
            return
        if key in self._dirty:
            if not low and key in self._queued_low:  # moved up; its entry in ``_low`` is skipped when reached
                self._queued_low.discard(key)
                self._low_since.pop(key, None)
                if key not in self._processing:
                    self._queue.append(key)
                    self._wake()
            return
        self._dirty.add(key)
        self._added_at.setdefault(key, self._clock())
        if low:
            self._queued_low.add(key)
            self._low_since[key] = self._clock()
        if key not in self._processing:
            (self._low if low else self._queue).append(key)
            self._wake()

    def add_after(self, key: K, delay: float) -> None:
        if delay <= 0:
            self.add(key)
            return
        if self._shut_down:
            return
        when = self._clock() + delay
        if key in self._delay_of and self._delay_of[key] <= when:
            return  # an earlier (or equal) wake-up is already pending
        self._delay_of[key] = when
        earliest = not self._delayed or when < self._delayed[0][0]
        heapq.heappush(self._delayed, (when, next(self._sequence), key))
        if self._timer is not None and earliest:
            self._timer.set()  # it waits for a later time: it looks again
        elif self._timer is None:
            self._wake()  # an idle worker becomes the timer

    def add_rate_limited(self, key: K) -> float:
        """Queue ``key`` after its next backoff step; returns the delay chosen."""
        failures = self._failures.get(key, 0) + 1
        self._failures[key] = failures
        delay = self._backoff.delay(failures)
        self.add_after(key, delay)
        return delay

    def forget(self, key: K) -> None:
        self._failures.pop(key, None)

    def failures(self, key: K) -> int:
        return self._failures.get(key, 0)

    # ----------------------------------------------------------------------------------------- workers

    async def get(self) -> K:
        """Wait for the next key and mark it as processing; raises ``ShutDown`` once shut down and drained."""
        while True:
            self._promote_due()
            key = self._next()
            if key is not None:
                self._hand_out(key)
                return key
            if self._shut_down:
                raise ShutDown
            await self._idle()

    def _hand_out(self, key: K) -> None:
        self._dirty.discard(key)
        self._queued_low.discard(key)
        self._low_since.pop(key, None)
        self._processing.add(key)
        if len(self) or (self._delayed and self._timer is None):
            self._wake()  # more keys ready (several came due at once), or nobody left watching the delayed ones

    async def _idle(self) -> None:
        """Wait until woken alone: a key added, a key back from processing, shut down; as the timer, until the
        earliest delayed key is due too."""
        event = anyio.Event()
        timer = bool(self._delayed) and self._timer is None
        if timer:
            self._timer = event
        self._waiters.append(event)
        try:
            if timer:
                with anyio.move_on_after(max(self._delayed[0][0] - self._clock(), 0)):
                    await event.wait()
            else:
                await event.wait()
        except anyio.get_cancelled_exc_class():
            if event.is_set() and event not in self._waiters:
                self._wake()  # woken for a key, then cancelled: another worker takes it
            raise
        finally:
            if event in self._waiters:  # timed out, cancelled, or woken as the timer: never to be woken for a key
                self._waiters.remove(event)
            if self._timer is event:
                self._timer = None

    def done(self, key: K) -> None:
        self._processing.discard(key)
        if key in self._dirty:
            (self._low if key in self._queued_low else self._queue).append(key)
            self._wake()
        else:
            self._added_at.pop(key, None)

    def wait_time(self, key: K) -> float:
        """Seconds since ``key`` was first added and not yet processed (for metrics)."""
        return self._clock() - self._added_at.get(key, self._clock())

    def shut_down(self) -> None:
        self._shut_down = True
        while self._waiters:
            self._wake()

    # -------------------------------------------------------------------------------------- inspection

    def __len__(self) -> int:
        """Keys waiting to be processed, at either priority."""
        return len(self._dirty) - sum(1 for key in self._processing if key in self._dirty)

    @property
    def waiting_low(self) -> int:
        return len(self._queued_low) - sum(1 for key in self._processing if key in self._queued_low)

    @property
    def delayed(self) -> int:
        return len(self._delay_of)

    def is_processing(self, key: K) -> bool:
        return key in self._processing

    def is_delayed(self, key: K) -> bool:
        """Whether the key is due again later (a pass asked to look again after a while)."""
        return key in self._delay_of

    # --------------------------------------------------------------------------------------- internals

    def _next(self) -> K | None:
        """The next key to hand out: normal ones first, except that a low key waiting ``low_max_wait`` takes every
        other turn."""
        normal = self._head(self._queue, self._waiting_normally)
        low = self._head(self._low, self._waiting_low)
        if low is not None and (normal is None or (not self._aged_turn and self._aged(low))):
            self._aged_turn = self._aged(low)
            return self._low.popleft()
        self._aged_turn = False
        return None if normal is None else self._queue.popleft()

    @staticmethod
    def _head(lane: deque[K], waiting: Callable[[K], bool]) -> K | None:
        """The first key of a lane still waiting there; entries left behind by a move up or a hand-out dropped."""
        while lane and not waiting(lane[0]):
            lane.popleft()
        return lane[0] if lane else None

    def _waiting_normally(self, key: K) -> bool:
        return key in self._dirty and key not in self._processing and key not in self._queued_low

    def _waiting_low(self, key: K) -> bool:
        return key in self._queued_low and key not in self._processing

    def _aged(self, key: K) -> bool:
        return self._clock() - self._low_since[key] >= self._low_max_wait

    def _wake(self) -> None:
        """Wake one idle worker (none idle: the next to finish its key finds the queue)."""
        if self._waiters:
            self._waiters.popleft().set()

    def _promote_due(self) -> None:
        now = self._clock()
        while self._delayed and self._delayed[0][0] <= now:
            when, _, key = heapq.heappop(self._delayed)
            if self._delay_of.get(key) == when:  # skip entries superseded by an earlier add_after
                del self._delay_of[key]
                self.add(key)
