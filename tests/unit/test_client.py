from __future__ import annotations

from multikueue.kube.client import rate_limit


def test_rate_limit_has_client_go_semantics() -> None:
    limiter = rate_limit(qps=5, burst=10)
    assert limiter.max_rate == 10  # the burst is available at once
    assert limiter.time_period == 2  # and refills at 5 per second
