from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest
from anyio import wait_all_tasks_blocked

from multikueue.runtime.workqueue import Backoff, ShutDown, WorkQueue


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_bursts_of_the_same_key_coalesce() -> None:
    q: WorkQueue[str] = WorkQueue()
    for key in ("a", "b", "a", "a", "b"):
        q.add(key)
    assert len(q) == 2
    assert [await q.get(), await q.get()] == ["a", "b"]


async def test_a_key_in_processing_is_not_handed_out_twice() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    assert await q.get() == "a"
    q.add("a")  # changed while being processed
    assert len(q) == 0, "must not be given to a second worker"
    with anyio.move_on_after(0.05) as scope:
        await q.get()
    assert scope.cancelled_caught
    q.done("a")
    assert await q.get() == "a"  # processed again, once


async def test_done_without_new_adds_forgets_the_key() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    await q.get()
    q.done("a")
    assert len(q) == 0
    assert not q.is_processing("a")


async def test_add_after_keeps_the_earliest_delay() -> None:
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add_after("a", 10)
    q.add_after("a", 5)
    q.add_after("a", 30)
    assert q.delayed == 1
    assert q.is_delayed("a")
    assert not q.is_delayed("b")
    clock.now += 5
    assert await q.get() == "a"
    assert not q.is_delayed("a")
    q.done("a")
    clock.now += 100  # the superseded 10 s and 30 s entries do not fire again
    with anyio.move_on_after(0.05) as scope:
        await q.get()
    assert scope.cancelled_caught


async def test_a_waiting_worker_wakes_when_a_delay_expires() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add_after("later", 0.05)
    with anyio.fail_after(2):
        assert await q.get() == "later"


async def test_rate_limited_adds_back_off_per_key_until_forgotten() -> None:
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(backoff=Backoff(base=1, factor=2, cap=5), clock=clock)
    assert [q.add_rate_limited("a") for _ in range(5)] == [1, 2, 4, 5, 5]
    assert q.add_rate_limited("b") == 1, "backoff is per key"
    q.forget("a")
    assert q.failures("a") == 0
    assert q.add_rate_limited("a") == 1


async def test_shut_down_drains_then_stops_workers() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("last")
    q.shut_down()
    q.add("ignored")
    assert await q.get() == "last"
    with pytest.raises(ShutDown):
        await q.get()


async def test_shut_down_wakes_an_idle_worker() -> None:
    q: WorkQueue[str] = WorkQueue()
    stopped = []

    async def worker() -> None:
        try:
            await q.get()
        except ShutDown:
            stopped.append(True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(worker)
        await wait_all_tasks_blocked()  # the worker is now waiting inside get()
        q.shut_down()
    assert stopped == [True]


async def test_concurrent_workers_never_share_a_key() -> None:
    q: WorkQueue[int] = WorkQueue()
    active: set[int] = set()
    overlaps = 0
    processed = 0

    async def worker() -> None:
        nonlocal overlaps, processed
        while True:
            try:
                key = await q.get()
            except ShutDown:
                return
            overlaps += key in active
            active.add(key)
            await anyio.lowlevel.checkpoint()
            q.add(key % 3)  # keep re-adding keys that may be in flight elsewhere
            active.discard(key)
            processed += 1
            q.done(key)
            if processed >= 200:
                q.shut_down()

    for key in range(10):
        q.add(key)
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            for _ in range(4):
                tg.start_soon(worker)
    assert overlaps == 0
    assert processed >= 200


def test_backoff_is_capped() -> None:
    assert Backoff(base=0.05, cap=300).delay(1000) == 300
    assert Backoff().delay(0) == 0


async def test_a_key_added_low_waits_behind_every_key_added_normally() -> None:
    """A bulk look at every object (a first list, a worker back) must not delay a change someone made (a cancel)."""
    q: WorkQueue[str] = WorkQueue()
    for key in ("bulk-1", "bulk-2", "bulk-3"):
        q.add(key, low=True)
    q.add("cancel")
    assert (len(q), q.waiting_low) == (4, 3)
    assert [await q.get() for _ in range(4)] == ["cancel", "bulk-1", "bulk-2", "bulk-3"]


async def test_a_low_key_added_normally_moves_up_once_and_a_normal_key_added_low_stays_up() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a", low=True)
    q.add("b", low=True)
    q.add("c")
    q.add("b")  # changed by someone meanwhile: moves up
    q.add("c", low=True)  # a bulk look at a key already waiting normally keeps its place
    assert (len(q), q.waiting_low) == (3, 1)
    assert [await q.get() for _ in range(3)] == ["c", "b", "a"]
    for key in ("a", "b", "c"):
        q.done(key)
    assert len(q) == 0
    with anyio.move_on_after(0.05) as scope:  # the entry "b" left in the low lane is not handed out again
        await q.get()
    assert scope.cancelled_caught


async def test_a_key_added_while_processing_comes_back_at_the_priority_it_was_added_with() -> None:
    q: WorkQueue[str] = WorkQueue()
    q.add("a")
    q.add("b")
    assert await q.get() == "a"
    q.add("a", low=True)  # looked at again in bulk while being processed
    q.add("x")
    q.done("a")
    assert [await q.get(), await q.get(), await q.get()] == ["b", "x", "a"]
    q.add("b", low=True)  # again in bulk while being processed, then changed: normal
    q.add("b")
    q.add("y", low=True)
    q.done("b")
    assert [await q.get(), await q.get()] == ["b", "y"]


async def test_a_delayed_key_comes_back_normally() -> None:
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock)
    q.add("bulk", low=True)
    q.add_after("retry", 1.0)
    clock.now += 2
    assert [await q.get(), await q.get()] == ["retry", "bulk"]


async def test_a_low_key_waiting_too_long_takes_every_other_turn_and_is_not_starved() -> None:
    """A run pending when a leader took over comes in its first list, low; a steady stream of new runs must not
    hold it back for ever: once it has waited ``low_max_wait`` it alternates with them."""
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock, low_max_wait=5.0)
    for key in ("old-1", "old-2", "old-3"):
        q.add(key, low=True)
    for key in ("new-1", "new-2"):
        q.add(key)
    assert await q.get() == "new-1"  # not waited long enough yet: changes first
    clock.now += 5
    for key in ("new-3", "new-4"):
        q.add(key)
    assert [await q.get() for _ in range(6)] == ["old-1", "new-2", "old-2", "new-3", "old-3", "new-4"]


async def test_an_aged_low_key_moved_up_or_handed_out_is_not_handed_out_again() -> None:
    clock = Clock()
    q: WorkQueue[str] = WorkQueue(clock=clock, low_max_wait=5.0)
    q.add("a", low=True)
    q.add("b", low=True)
    q.add("a")  # moved up: its low entry is stale
    clock.now += 10
    assert [await q.get(), await q.get()] == ["b", "a"]  # "b" aged takes its turn; "a" once, from the normal lane
    for key in ("a", "b"):
        q.done(key)
    with anyio.move_on_after(0.05) as scope:
        await q.get()
    assert scope.cancelled_caught


async def idle_workers(q: WorkQueue[str], count: int, handled: list[str], tg: anyio.abc.TaskGroup,
                       got: anyio.Event | None = None) -> None:  # fmt: skip
    """``count`` workers that record each key (``got`` set at the first) and mark it done; idle on return."""

    async def worker() -> None:
        while True:
            try:
                key = await q.get()
            except ShutDown:
                return
            handled.append(key)
            if got is not None:
                got.set()
            await anyio.lowlevel.checkpoint()
            q.done(key)

    for _ in range(count):
        tg.start_soon(worker)
    await wait_all_tasks_blocked()


async def test_a_key_wakes_one_idle_worker_not_all(monkeypatch: pytest.MonkeyPatch) -> None:
    """With 16 workers idle, a key added wakes one: the others stay asleep (a shared wake-up woke all 16 per key,
    and 15 went back to sleep: most of a key's CPU at the dispatcher's concurrency)."""
    q: WorkQueue[str] = WorkQueue()
    handled: list[str] = []
    idles = 0
    idle = q._idle

    async def counted() -> None:
        nonlocal idles
        idles += 1
        await idle()

    monkeypatch.setattr(q, "_idle", counted)
    async with anyio.create_task_group() as tg:
        await idle_workers(q, 16, handled, tg)
        assert idles == 16
        q.add("a")
        await wait_all_tasks_blocked()
        assert handled == ["a"]
        assert idles == 17, "only the worker that took the key went idle again"
        q.shut_down()


async def test_keys_due_together_are_handled_by_several_workers_at_once() -> None:
    """Three keys come due at the same moment: each goes to a worker of its own, none waits behind another."""
    q: WorkQueue[str] = WorkQueue()
    started: list[str] = []
    all_started = anyio.Event()

    async def worker() -> None:
        key = await q.get()
        started.append(key)
        if len(started) == 3:
            all_started.set()
        await all_started.wait()  # each holds its key until all three are being handled
        q.done(key)

    async with anyio.create_task_group() as tg:
        for _ in range(4):
            tg.start_soon(worker)
        await wait_all_tasks_blocked()
        for key in ("a", "b", "c"):
            q.add_after(key, 0.05)
        with anyio.fail_after(5):
            await all_started.wait()
        assert sorted(started) == ["a", "b", "c"]
        tg.cancel_scope.cancel()


async def test_a_delay_earlier_than_the_one_waited_for_is_handed_out_on_time() -> None:
    """The timer worker waits for the earliest delayed key; an earlier one added later wakes it to wait less."""
    q: WorkQueue[str] = WorkQueue()
    handled: list[str] = []
    got = anyio.Event()
    async with anyio.create_task_group() as tg:
        await idle_workers(q, 4, handled, tg, got)
        q.add_after("late", 60)
        await wait_all_tasks_blocked()
        q.add_after("soon", 0.05)
        with anyio.fail_after(5):
            await got.wait()
        assert handled == ["soon"]
        q.shut_down()
