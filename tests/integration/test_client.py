"""The per-cluster client: every request passes the worker's rate limiter (a real server answers)."""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from kubernetes_asyncio import client as k8s_client

from multikueue.kube.client import api_client_from_kubeconfig, rate_limit
from multikueue.testing import TestBed


class CountingLimiter:
    def __init__(self) -> None:
        self.entered = 0

    async def __aenter__(self) -> None:
        self.entered += 1

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        return None


async def test_every_request_passes_the_limiter(testbed: TestBed, tmp_path: Path) -> None:
    limiter = CountingLimiter()
    kubeconfig = testbed.cluster("worker1").kubeconfig
    async with await api_client_from_kubeconfig(kubeconfig, temp_dir=tmp_path, limiter=limiter) as api:
        for _ in range(3):
            await k8s_client.VersionApi(api).get_code()
        await k8s_client.CoreV1Api(api).list_namespace()
    assert limiter.entered == 4


async def test_a_real_limiter_lets_requests_through(testbed: TestBed, tmp_path: Path) -> None:
    kubeconfig = testbed.cluster("worker1").kubeconfig
    limiter = rate_limit(qps=1000, burst=5)
    async with await api_client_from_kubeconfig(kubeconfig, temp_dir=tmp_path, limiter=limiter) as api:
        versions = [await k8s_client.VersionApi(api).get_code() for _ in range(10)]
    assert {v.major for v in versions} == {"1"}
