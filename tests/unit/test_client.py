from __future__ import annotations

from typing import Any

from multikueue.kube.client import rate_limit


def test_rate_limit_has_client_go_semantics() -> None:
    limiter = rate_limit(qps=5, burst=10)
    assert limiter.max_rate == 10  # the burst is available at once
    assert limiter.time_period == 2  # and refills at 5 per second


async def test_the_proxy_is_read_from_the_environment_once_and_still_used(monkeypatch: Any) -> None:
    """aiohttp would look up the proxy (and ~/.netrc) in a thread on every request; the client reads the
    environment once instead, and a proxy it names is still used: here a local HTTP proxy answers for a cluster
    whose name does not even resolve."""
    from aiohttp import web
    from kubernetes_asyncio import client as k8s_client

    from multikueue.kube.client import ApiClient
    from multikueue.testing.testbed import free_port

    seen: list[str] = []

    async def proxy(request: web.Request) -> web.Response:
        seen.append(f"{request.url} {request.headers.get('Proxy-Authorization')}")
        fields = ("buildDate", "compiler", "gitCommit", "gitTreeState", "goVersion", "major", "minor", "platform")
        return web.json_response(dict.fromkeys(fields, "-") | {"gitVersion": "v1.35.0-via-proxy"})

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", proxy)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    monkeypatch.setenv("HTTP_PROXY", f"http://user:secret@127.0.0.1:{port}")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    configuration = k8s_client.Configuration(host="http://cluster.invalid:6443")
    try:
        async with ApiClient(configuration) as api:
            assert api.rest_client.pool_manager.trust_env is False
            assert api.rest_client.proxy == f"http://user:secret@127.0.0.1:{port}"
            version = await k8s_client.VersionApi(api).get_code()
    finally:
        await runner.cleanup()
    assert version.git_version == "v1.35.0-via-proxy"
    assert seen == ["http://cluster.invalid:6443/version/ Basic dXNlcjpzZWNyZXQ="]  # user:secret


async def test_no_proxy_for_a_cluster_the_environment_exempts(monkeypatch: Any) -> None:
    from kubernetes_asyncio import client as k8s_client

    from multikueue.kube.client import ApiClient

    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:3128")
    monkeypatch.setenv("NO_PROXY", "cluster.invalid")
    async with ApiClient(k8s_client.Configuration(host="https://cluster.invalid:6443")) as api:
        assert api.rest_client.proxy is None
    monkeypatch.setenv("NO_PROXY", "elsewhere.invalid")
    async with ApiClient(k8s_client.Configuration(host="https://cluster.invalid:6443")) as api:
        assert api.rest_client.proxy == "http://127.0.0.1:3128"
