"""Determinism for the simulation: an asyncio event loop on virtual time whose order of ready callbacks is drawn from
the schedule's seed.

- Virtual time: ``time.monotonic`` and ``time.time`` (what asyncio's clock, anyio's deadlines and the dispatcher's own
  timers read) are the loop's clock while a schedule runs. When nothing is ready to run, the clock jumps to the next
  timer: an hour of ``workerLostTimeout`` and ``gcInterval`` passes in the time it takes to run its callbacks.
- Order: before each turn, the callbacks ready to run are put in an order drawn from the seed (asyncio runs them
  first in, first out; a real process's order depends on when each answer arrives, which is what this explores).
- Nothing real waits: the simulated clusters answer in memory, so the selector is only ever polled (``select(0)``).

The same seed gives the same run: every source of order and time is here or in the world's ``random.Random``.
"""

from __future__ import annotations

import asyncio
import datetime
import random
import sys
import time
import types
import uuid
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

T = TypeVar("T")
EPOCH = 1_800_000_000.0  # the wall clock at virtual time 0 (2027-01-15): fixed, so a seed replays exactly


class SimLoop(asyncio.SelectorEventLoop):
    """asyncio's selector loop with a virtual clock and a seeded order of ready callbacks."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng
        self.now = 0.0
        self.turns = 0
        self._tasks = 0
        self.set_task_factory(self._task)

    def _task(self, loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Future[Any]:
        """Python's own Task (its callbacks are bound methods, so the task they wake is known), numbered in the
        order tasks are made: what the order of ready callbacks is put in before it is drawn."""
        task = asyncio.tasks._PyTask(coro, loop=loop, **kwargs)  # type: ignore[attr-defined]
        self._tasks += 1
        task.sim_number = self._tasks
        return task  # type: ignore[no-any-return]

    @staticmethod
    def _order_of(handle: asyncio.Handle) -> tuple[str, int]:
        """A key that does not depend on where objects sit in memory: what the callback is, and the number of the
        task it wakes (or whose cancel scope it serves)."""
        callback = handle._callback  # type: ignore[attr-defined]
        name = getattr(callback, "__qualname__", type(callback).__name__)
        for part in (getattr(callback, "__self__", None), *handle._args):
            task = getattr(part, "_host_task", part)
            if hasattr(task, "sim_number"):
                return name, task.sim_number
        return name, 0

    def time(self) -> float:
        return self.now

    def _run_once(self) -> None:
        ready: Any = self._ready  # type: ignore[attr-defined]
        if len(ready) > 1:
            # Put in an order of their own first (sets of tasks, iterated by address, queue them in an order that
            # changes from one process to the next), then drawn.
            order = sorted(ready, key=self._order_of)
            self.rng.shuffle(order)
            ready.clear()
            ready.extend(order)
        if not ready:
            scheduled = [h for h in self._scheduled if not h.cancelled()]  # type: ignore[attr-defined]
            if scheduled:
                self.now = max(self.now, min(h.when() for h in scheduled))
        self.turns += 1
        super()._run_once()  # type: ignore[misc]


class _VirtualDatetime(datetime.datetime):
    """``datetime.datetime`` whose ``now`` is the virtual wall clock (``time.time`` while a schedule runs)."""

    @classmethod
    def now(cls, tz: datetime.tzinfo | None = None) -> _VirtualDatetime:
        return cls.fromtimestamp(time.time(), tz)


_DATETIME = types.SimpleNamespace(**{k: getattr(datetime, k) for k in dir(datetime) if not k.startswith("__")})
_DATETIME.datetime = _VirtualDatetime


@contextmanager
def virtual_clock(loop: SimLoop) -> Iterator[None]:
    """``time.monotonic``, ``time.time`` and, in the dispatcher's modules, ``datetime.datetime.now`` read the loop's
    clock; ``random``'s module generator and ``uuid.uuid4`` draw from the schedule's seed (all restored afterwards)."""
    monotonic, wall, uuid4, state = time.monotonic, time.time, uuid.uuid4, random.getstate()
    random.seed(loop.rng.random())  # the module's generator (the informers' jitter) drawn from the schedule's seed
    uuid.uuid4 = lambda: uuid.UUID(int=loop.rng.getrandbits(128), version=4)  # Event names, reconcile ids
    time.monotonic = lambda: loop.now
    time.time = lambda: EPOCH + loop.now
    modules = [m for name, m in list(sys.modules.items())
               if name.startswith("multikueue") and getattr(m, "datetime", None) is datetime]  # fmt: skip
    for module in modules:
        module.datetime = _DATETIME  # type: ignore[attr-defined]
    try:
        yield
    finally:
        time.monotonic, time.time, uuid.uuid4 = monotonic, wall, uuid4
        random.setstate(state)
        for module in modules:
            module.datetime = datetime  # type: ignore[attr-defined]


def run(main: Callable[[], Coroutine[Any, Any, T]], seed: int) -> tuple[T, SimLoop]:
    """``main()`` to its end on a ``SimLoop`` drawn from ``seed``; its result and the loop (its clock and turns)."""
    loop = SimLoop(random.Random(f"loop-{seed}"))
    try:
        with virtual_clock(loop):
            result = loop.run_until_complete(main())
        return result, loop
    finally:
        loop.close()
