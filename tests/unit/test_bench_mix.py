"""The minimal request mix of a dispatch (bench/mix.py) and what a measured run sent beyond it."""

from __future__ import annotations

import pytest

from bench import mix


def test_kueue_mode_needs_a_copy_everywhere_the_object_on_the_winner_and_two_status_writes() -> None:
    minimal = mix.minimal_mix("kueue", 3, 1000)
    assert minimal["manager"] == {"patch workloads/status": 2000}
    assert [minimal[f"bench-worker{i}"]["create workloads"] for i in (1, 2, 3)] == [1000, 1000, 1000]
    assert sum(minimal[f"bench-worker{i}"]["create pipelineruns"] for i in (1, 2, 3)) == 1000
    assert sum(minimal[f"bench-worker{i}"]["delete workloads"] for i in (1, 2, 3)) == 2000  # the losers' copies
    assert mix.per_run(minimal) / 1000 == 8.0  # 2 + 3 + 1 + 2


def test_direct_mode_needs_the_record_and_the_create() -> None:
    minimal = mix.minimal_mix("direct", 2, 5)
    workers = {"bench-worker1": {"create pipelineruns": 2}, "bench-worker2": {"create pipelineruns": 3}}
    assert minimal == {"manager": {"patch pipelineruns": 5}, **workers}
    with pytest.raises(ValueError, match="mode 'both'"):
        mix.minimal_mix("both", 2, 5)


def test_overhead_is_what_a_run_sent_beyond_the_minimal_mix_start_up_left_out() -> None:
    measured = {
        "manager": {"patch workloads/status": 2003, "create events": 1000, "watch workloads": 1, "list workloads": 3},
        "bench-worker1": {"create workloads": 1000, "create pipelineruns": 440, "create pipelineruns 409": 106,
                          "get pipelineruns": 106, "delete workloads": 666, "get /version": 9},
    }  # fmt: skip
    minimal = mix.minimal_mix("kueue", 3, 1000)
    assert mix.overhead(measured, minimal) == {
        "manager": {"patch workloads/status": 3, "create events": 1000},
        "bench-worker1": {"create pipelineruns": 440 - 333, "get pipelineruns": 106},  # 106 of those creates: 409
    }
    assert mix.overhead(minimal, minimal) == {}
