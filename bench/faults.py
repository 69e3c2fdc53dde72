"""Faults injected while the bench submits: the two of ``--faults``, or a schedule of them (``--fault-interval``).

The schedule cycles through three faults, one every interval, each on a worker drawn with the run's seed:

- ``pause``: a worker's kube-apiserver SIGSTOPped for 5-40 s (a hung or partitioned worker: sockets stay open, no
  answer comes back, not even to a write it has already carried out), then SIGCONTed;
- ``dispatcher``: the dispatcher SIGKILLed and started again (a leader killed mid-write; its successor starts from
  what is recorded);
- ``kill``: a worker's kube-apiserver SIGKILLed, started again 10 s later.

Every pause and kill is shorter than ``workerLostTimeout`` (15 min by default): no run may then be created on a
second worker, which the run counts (``runs_on_two_workers``).
"""

from __future__ import annotations

import random
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import anyio

from bench.dispatcher import Dispatcher, Shards
from multikueue_testbed.testbed import TestBed

CYCLE = ("pause", "dispatcher", "kill")
PAUSE_SECONDS = (5.0, 40.0)
KILLED_SECONDS = 10.0


async def ticks(interval: float, stop: anyio.Event) -> AsyncIterator[int]:
    """0, 1, 2... one every ``interval`` seconds until ``stop`` (bounded in count)."""
    for i in range(100_000):
        with anyio.move_on_after(interval):
            await stop.wait()
        if stop.is_set():
            return
        yield i


@dataclass
class Outages:
    """What a fault has taken down right now (workers, etcd, the manager), and a wait until all of it is back."""

    down: set[str] = field(default_factory=set)
    _back: anyio.Event = field(default_factory=anyio.Event)  # set each time something is back

    def out(self, name: str) -> None:
        self.down.add(name)

    def back(self, name: str) -> None:
        self.down.discard(name)
        self._back.set()

    async def all_back(self, timeout: float) -> None:
        """Until nothing is down (bounded by ``timeout`` seconds)."""
        with anyio.fail_after(timeout):
            while self.down:
                self._back = anyio.Event()
                await self._back.wait()


@dataclass
class Faults:
    """What was injected: (seconds since the schedule began, fault, worker or "", seconds down)."""

    bed: TestBed
    dispatcher: Dispatcher | Shards
    workers: list[str]
    rng: random.Random
    say: Callable[[str], None]  # progress, as the bench prints it
    log: list[tuple[float, str, str, float]] = field(default_factory=list)
    outages: Outages = field(default_factory=Outages)  # workers paused or killed right now
    started: float = field(default_factory=time.monotonic)

    def counts(self) -> dict[str, int]:
        return {kind: sum(1 for _, k, _, _ in self.log if k == kind) for kind in CYCLE}

    async def every(self, interval: float, stop: anyio.Event, tg: Any) -> None:
        """One fault every ``interval`` seconds, in ``CYCLE`` order, until ``stop``; bounded by the submissions."""
        async for i in ticks(interval, stop):
            await self.inject(CYCLE[i % len(CYCLE)], tg)

    async def all_back(self) -> None:
        """Until every worker paused or killed is back (bounded: the longest outage and its restart)."""
        await self.outages.all_back(PAUSE_SECONDS[1] + 120)

    async def inject(self, fault: str, tg: Any) -> None:
        if fault == "dispatcher":
            self.say("fault: SIGKILL the dispatcher, start it again")
            self.dispatcher.kill()
            self.dispatcher.start()
            self.log.append((time.monotonic() - self.started, fault, "", 0.0))
            return
        up = [w for w in self.workers if w not in self.outages.down]
        if not up:
            return
        victim = self.rng.choice(up)
        self.outages.out(victim)
        if fault == "pause":
            seconds = round(self.rng.uniform(*PAUSE_SECONDS), 1)
            self.say(f"fault: SIGSTOP {victim}'s kube-apiserver for {seconds} s")
            await anyio.to_thread.run_sync(self.bed.pause_apiserver, victim)
        else:
            seconds = KILLED_SECONDS
            self.say(f"fault: SIGKILL {victim}'s kube-apiserver; it comes back in {seconds:g} s")
            self.bed.stop_apiserver(victim, kill=True)
        self.log.append((time.monotonic() - self.started, fault, victim, seconds))
        tg.start_soon(self._back, fault, victim, seconds)

    async def _back(self, fault: str, victim: str, seconds: float) -> None:
        await anyio.sleep(seconds)
        if fault == "pause":
            await anyio.to_thread.run_sync(lambda: self.bed.resume_apiserver(victim, wait=True))
        else:
            await anyio.to_thread.run_sync(self.bed.start_apiserver, victim)
        self.outages.back(victim)
        self.say(f"{victim} is back")
