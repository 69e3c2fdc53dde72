from __future__ import annotations

import pytest

from multikueue.ttlcache import TTLCache


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_entry_expires_after_its_own_ttl() -> None:
    clock = Clock()
    cache: TTLCache[str, str] = TTLCache(10, clock=clock)
    cache.put("allowed", "yes", 300)
    cache.put("denied", "no", 30)
    clock.now += 29.9
    assert (cache.get("allowed"), cache.get("denied")) == ("yes", "no")
    clock.now += 0.1
    assert (cache.get("allowed"), cache.get("denied")) == ("yes", None)
    assert len(cache) == 1, "an expired entry is dropped when met"


def test_the_cache_is_bounded_and_drops_the_least_recently_used() -> None:
    cache: TTLCache[int, int] = TTLCache(3, clock=Clock())
    for i in range(3):
        cache.put(i, i, 60)
    assert cache.get(0) == 0  # 0 used: 1 is now the oldest
    for i in range(3, 1000):
        cache.put(i, i, 60)
        assert len(cache) <= 3
    assert cache.get(1) is None
    assert [cache.get(i) for i in (997, 998, 999)] == [997, 998, 999]


def test_a_cache_holds_at_least_one_entry() -> None:
    with pytest.raises(ValueError, match="at least one"):
        TTLCache(0)
