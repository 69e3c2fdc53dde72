from __future__ import annotations

import pytest

from multikueue_testbed.waiting import NotReached, eventually


async def test_eventually_returns_the_first_value_that_holds() -> None:
    calls = []

    async def probe() -> int:
        calls.append(1)
        if len(calls) < 3:
            raise ConnectionError("not yet")
        return len(calls)

    assert await eventually(probe, timeout=5, interval=0.01) == 3


async def test_eventually_reports_the_last_value_on_timeout() -> None:
    async def probe() -> str:
        return "still pending"

    with pytest.raises(NotReached, match="'still pending'"):
        await eventually(probe, until=lambda v: v == "done", timeout=0.2, interval=0.01, what="done")
