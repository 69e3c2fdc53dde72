"""Poll with a deadline instead of sleeping: tests wait for an outcome, never for a guessed duration."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio

T = TypeVar("T")


class NotReached(AssertionError):
    """The condition never held before the deadline; carries the last value or error seen."""


async def eventually(
    probe: Callable[[], Awaitable[T]],
    *,
    until: Callable[[T], bool] = bool,
    timeout: float = 30.0,
    interval: float = 0.1,
    what: str = "condition",
) -> T:
    """Call ``probe`` until ``until(result)`` holds; return that result, or raise ``NotReached``.

    Exceptions from ``probe`` count as "not yet" (a server restarting, an object not created yet).
    """
    last: object = None
    with anyio.move_on_after(timeout):
        while True:
            try:
                value = await probe()
            except Exception as e:
                last = e
            else:
                if until(value):
                    return value
                last = value
            await anyio.sleep(interval)
    raise NotReached(f"{what} not reached within {timeout}s; last seen: {last!r}")


async def wait_until(
    condition: Callable[[], bool], *, timeout: float = 30.0, interval: float = 0.05, what: str = "condition"
) -> None:
    """Wait until a synchronous ``condition()`` holds (state kept in memory, e.g. an informer's cache)."""

    async def probe() -> bool:
        return condition()

    await eventually(probe, timeout=timeout, interval=interval, what=what)
