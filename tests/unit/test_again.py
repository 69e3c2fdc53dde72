"""A reconciler's ``again`` signal: keys it emits reach its own controller as a declared ``Watch``, queued as
``Controller.enqueue`` queued them (ahead of a bulk look), and a key emitted during its own reconcile is looked at once
more after it."""

from __future__ import annotations

import anyio

from multikueue.runtime.again import Again
from multikueue.runtime.controller import Controller
from multikueue.runtime.watches import install


async def test_a_key_emitted_on_again_is_queued_ahead_of_a_bulk_look() -> None:
    async def reconcile(key: str) -> None:
        return None

    controller: Controller[str] = Controller("test", reconcile)
    again: Again[str] = Again("capacity freed on a worker")
    watch = again.watch()
    assert (watch.what, watch.source, watch.low, watch.delay) == ("capacity freed on a worker", again, False, None)
    install(controller, [watch])
    controller.enqueue("every-object", low=True)  # a bulk look, already waiting
    again.emit("freed")
    assert [await controller.queue.get() for _ in range(2)] == ["freed", "every-object"]


async def test_a_key_emitted_during_its_own_reconcile_is_reconciled_again_after_it() -> None:
    again: Again[str] = Again("a write that ended after its pass")
    reconciled: list[str] = []
    twice = anyio.Event()

    async def reconcile(key: str) -> None:
        reconciled.append(key)
        if len(reconciled) == 1:
            again.emit(key)  # while it is being reconciled: queued for after it (the work queue's dirty set)
        else:
            twice.set()

    controller: Controller[str] = Controller("test", reconcile)
    install(controller, [again.watch()])
    controller.enqueue("run-1")
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(controller.run)
            await twice.wait()
            tg.cancel_scope.cancel()
    assert reconciled == ["run-1", "run-1"]
    assert len(controller.queue) == 0
