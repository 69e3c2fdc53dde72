"""kube/'s own HTTP client without a cluster: the rate limit, the proxy read once (and as Go reads the
environment), and a connection that fails oddly on uvloop (kubeconfig and credentials: test_kubeconfig.py,
test_credentials.py)."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.kube.client import ApiClient, rate_limit
from multikueue.kube.errors import Unreachable
from multikueue.kube.kubeconfig import ClusterAccess
from multikueue.kube.proxy import environment_proxy
from multikueue.metrics import Metrics


def test_rate_limit_has_client_go_semantics() -> None:
    limiter = rate_limit(qps=5, burst=10)
    assert limiter.max_rate == 10  # the burst is available at once
    assert limiter.time_period == 2  # and refills at 5 per second


async def test_the_proxy_is_read_from_the_environment_once_and_still_used(monkeypatch: Any) -> None:
    """aiohttp would look up the proxy (and ~/.netrc) in a thread on every request; the client reads the
    environment once instead, and a proxy it names is still used: here a local HTTP proxy answers for a cluster
    whose name does not even resolve."""
    from aiohttp import web

    from multikueue_testbed.testbed import free_port

    seen: list[str] = []

    async def proxy(request: web.Request) -> web.Response:
        seen.append(f"{request.url} {request.headers.get('Proxy-Authorization')}")
        return web.json_response({"gitVersion": "v1.35.0-via-proxy"})

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", proxy)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    monkeypatch.setenv("HTTP_PROXY", f"http://user:secret@127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    try:
        async with ApiClient(ClusterAccess(server="http://cluster.invalid:6443")) as api:
            assert api.proxy == f"http://user:secret@127.0.0.1:{port}"
            version = await api.request("GET", "/version")
    finally:
        await runner.cleanup()
    assert version["gitVersion"] == "v1.35.0-via-proxy"
    assert seen == ["http://cluster.invalid:6443/version Basic dXNlcjpzZWNyZXQ="]  # user:secret


async def test_no_proxy_for_a_cluster_the_environment_exempts(monkeypatch: Any) -> None:
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    monkeypatch.setenv("NO_PROXY", "cluster.invalid")
    async with ApiClient(ClusterAccess(server="https://cluster.invalid:6443")) as api:
        assert api.proxy is None
    monkeypatch.setenv("NO_PROXY", "elsewhere.invalid")
    async with ApiClient(ClusterAccess(server="https://cluster.invalid:6443")) as api:
        assert api.proxy == "http://127.0.0.1:3128"
    proxied = ClusterAccess(server="https://cluster.invalid:6443", proxy_url="http://10.0.0.1:8080")
    async with ApiClient(proxied) as api:
        assert api.proxy == "http://10.0.0.1:8080", "the kubeconfig's proxy-url wins over the environment"


async def test_uvloops_descriptor_reuse_on_connect_is_a_failed_connection_not_a_crash(monkeypatch: Any) -> None:
    """uvloop#653: connecting can raise ``RuntimeError: File descriptor N is used by transport ...``; uncaught, it
    left an informer and ended the dispatcher (found by the fault soak). It is a connection that failed, retried
    like any other; any other RuntimeError is still a bug that surfaces."""
    api = ApiClient(ClusterAccess(server="http://127.0.0.1:1"))
    errors: list[str] = []
    api.on_error = errors.append

    async def reused(*_: Any) -> Any:
        raise RuntimeError("File descriptor 20 is used by transport <TCPTransport closed=False reading=True 0x5640>")

    monkeypatch.setattr(api, "_request", reused)
    with pytest.raises(Unreachable, match=r"^cannot connect to 127\.0\.0\.1:1: .*uvloop#653") as raised:
        await api.request("GET", "/version")
    assert raised.value.maybe_done is False, "no connection was made: the request never went out"
    assert isinstance(raised.value.__cause__, RuntimeError)
    assert errors == ["connection"]

    async def other(*_: Any) -> Any:
        raise RuntimeError("Session is closed")

    monkeypatch.setattr(api, "_request", other)
    with pytest.raises(RuntimeError, match="Session is closed"):
        await api.request("GET", "/version")
    await api.close()


@pytest.mark.parametrize(
    ("server", "environ", "proxy"),
    [
        ("https://k.example.com:6443", {"HTTPS_PROXY": "http://p:3128"}, "http://p:3128"),
        ("https://k.example.com:6443", {"https_proxy": "http://lower:3128"}, "http://lower:3128"),
        ("https://k.example.com:6443", {"HTTPS_PROXY": "http://up:1", "https_proxy": "http://low:1"}, "http://up:1"),
        ("https://k.example.com:6443", {"HTTP_PROXY": "http://p:3128"}, None),  # https takes HTTPS_PROXY only
        ("http://k.example.com:8080", {"HTTP_PROXY": "http://p:3128"}, "http://p:3128"),
        ("https://k.example.com:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "example.com"}, None),
        ("https://example.com:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": ".example.com"}, "http://p:1"),
        ("https://k.example.com:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": ".example.com"}, None),
        ("https://k.example.com:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "k.example.com:443"}, "http://p:1"),
        ("https://k.example.com:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "k.example.com:6443"}, None),
        ("https://10.1.2.3:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "10.0.0.0/8"}, None),
        ("https://[fd00::1]:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "fd00::/8"}, None),
        ("https://10.1.2.3:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "192.168.0.0/16,other"}, "http://p:1"),
        ("https://k.example.com:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "*"}, None),
        ("https://127.0.0.1:6443", {"HTTPS_PROXY": "http://p:1"}, None),  # the loopback never, as Go's
        ("https://localhost:6443", {"HTTPS_PROXY": "http://p:1"}, None),
        ("https://notexample.com:6443", {"HTTPS_PROXY": "http://p:1", "NO_PROXY": "example.com"}, "http://p:1"),
    ],
)
def test_the_environments_proxy_as_go_reads_it(server: str, environ: dict[str, str], proxy: str | None) -> None:
    assert environment_proxy(server, environ) == proxy


async def test_a_client_built_with_a_process_metrics_hooks_counts_into_them_by_cluster() -> None:
    """The process counts the manager client's requests through the hooks it was built with (``requests_to``),
    never by changing a client it is handed: another client to the same server counts nowhere."""
    metrics = Metrics()
    on_request, on_error = metrics.requests_to("manager")
    counted = ApiClient(ClusterAccess(server="http://127.0.0.1:1"), on_request=on_request, on_error=on_error)
    other = ApiClient(ClusterAccess(server="http://127.0.0.1:1"))
    for api in (counted, other):
        with pytest.raises(Unreachable):
            await api.request("GET", "/version")
        await api.close()
    sample = metrics.registry.get_sample_value
    assert sample("multikueue_api_requests_total", {"cluster": "manager", "method": "GET"}) == 1
    assert sample("multikueue_api_errors_total", {"cluster": "manager", "code": "connection"}) == 1
