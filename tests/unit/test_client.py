"""kube/'s own HTTP client without a cluster: the rate limit, the proxy read once, kubeconfig documents and the
service account read into what a request presents, and credentials that rotate (a token file, an exec plugin)."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from multikueue.kube.client import ApiClient, rate_limit
from multikueue.kube.credentials import Credentials
from multikueue.kube.errors import CredentialsUnavailable, KubeconfigError, Unreachable
from multikueue.kube.kubeconfig import (
    ClusterAccess,
    ExecPlugin,
    access_from_kubeconfig,
    in_cluster_access,
    read_kubeconfig,
)
from multikueue.kube.proxy import environment_proxy


def test_rate_limit_has_client_go_semantics() -> None:
    limiter = rate_limit(qps=5, burst=10)
    assert limiter.max_rate == 10  # the burst is available at once
    assert limiter.time_period == 2  # and refills at 5 per second


async def test_the_proxy_is_read_from_the_environment_once_and_still_used(monkeypatch: Any) -> None:
    """aiohttp would look up the proxy (and ~/.netrc) in a thread on every request; the client reads the
    environment once instead, and a proxy it names is still used: here a local HTTP proxy answers for a cluster
    whose name does not even resolve."""
    from aiohttp import web

    from multikueue.testing.testbed import free_port

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


def document(cluster: dict[str, Any], user: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "current-context": "x", **extra,
    }  # fmt: skip


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_a_kubeconfig_reads_inline_data_files_relative_to_it_and_every_kind_of_user(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("CA")
    cluster = {"server": "https://k.example:6443/", "certificate-authority": "ca.pem", "tls-server-name": "api",
               "proxy-url": "http://p:1"}  # fmt: skip
    user = {"client-certificate-data": b64("CERT"), "client-key-data": b64("KEY"), "tokenFile": "token"}
    (tmp_path / "config").write_text(yaml.safe_dump(document(cluster, user)))
    access = access_from_kubeconfig(read_kubeconfig(str(tmp_path / "config")))
    assert (access.server, access.ca, access.tls_server_name, access.proxy_url) == (
        "https://k.example:6443",
        "CA",
        "api",
        "http://p:1",
    )
    assert (access.client_certificate, access.client_key, access.token_file) == (
        b"CERT",
        b"KEY",
        str(tmp_path / "token"),
    )
    plugin = {"command": "aws", "args": ["eks", "get-token"], "env": [{"name": "AWS_PROFILE", "value": "p"}],
              "apiVersion": "client.authentication.k8s.io/v1beta1"}  # fmt: skip
    access = access_from_kubeconfig(document({"server": "http://k:80"}, {"exec": plugin}))
    assert access.exec == ExecPlugin("aws", ("eks", "get-token"), (("AWS_PROFILE", "p"),),
                                     "client.authentication.k8s.io/v1beta1")  # fmt: skip
    basic = access_from_kubeconfig(document({"server": "http://k:80"}, {"username": "a", "password": "b"}))
    assert basic.basic == ("a", "b")


@pytest.mark.parametrize(
    ("config", "context", "message"),
    [
        (document({"server": "https://k:6443"}, {}, **{"current-context": ""}), None, "current-context is not set"),
        (document({"server": "https://k:6443"}, {}), "other", "context 'other' not found in contexts"),
        (document({"server": "k:6443"}, {}), None, "clusters[c].cluster.server must be an http(s) URL, got 'k:6443'"),
        (document({"server": "https://k", "certificate-authority-data": "%%"}, {}), None,
         "clusters[c].cluster.certificate-authority-data is not base64"),
        (document({"server": "https://k", "certificate-authority": "/no/such/ca.pem"}, {}), None,
         "clusters[c].cluster.certificate-authority '/no/such/ca.pem' cannot be read: No such file or directory"),
        (document({"server": "https://k"}, {"client-certificate-data": b64("C")}), None,
         "users[u].user has a client certificate without its key"),
        (document({"server": "https://k"}, {"auth-provider": {"name": "gcp"}}), None,
         "users[u].user.auth-provider 'gcp' is not supported (client-go removed it): use an exec credential plugin"),
        # client-go still has oidc: the refusal must not say it was removed, and says what to use instead.
        (document({"server": "https://k"}, {"auth-provider": {"name": "oidc"}}), None,
         "users[u].user.auth-provider 'oidc' is not supported by this client: use an exec credential plugin (for "
         "OIDC: kubelogin, `kubectl oidc-login get-token`)"),
        (document({"server": "https://k"}, {"exec": {"args": ["x"]}}), None, "users[u].user.exec.command is required"),
        (document({"server": "https://k"}, {"exec": {"command": "x", "interactiveMode": "Always"}}), None,
         "users[u].user.exec.interactiveMode 'Always' cannot be honoured"),
        (document({"server": "https://k", "certificate-authority-data": b64("CA"), "insecure-skip-tls-verify": True},
                  {}), None,
         "clusters[c].cluster has both certificate-authority and insecure-skip-tls-verify: true; keep one"),
        (document({"server": "https://k", "proxy-url": "socks5://p:1080"}, {}), None,
         "clusters[c].cluster.proxy-url 'socks5://p:1080' is not supported: an http(s) proxy only"),
        (document({"server": "https://k"}, {"as-groups": ["g"]}), None,
         "users[u].user.as is required with as-uid, as-groups or as-user-extra"),
    ],
)  # fmt: skip
def test_a_kubeconfig_that_cannot_be_used_is_one_line_naming_field_and_value(
    config: dict[str, Any], context: str | None, message: str
) -> None:
    with pytest.raises(KubeconfigError) as raised:
        access_from_kubeconfig(config, context=context)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_in_cluster_access_reads_the_service_account_and_says_when_there_is_none(tmp_path: Path, monkeypatch: Any
                                                                                  ) -> None:  # fmt: skip
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeconfigError, match="not running in a cluster"):
        in_cluster_access(tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(KubeconfigError, match=r"ca\.crt cannot be read"):
        in_cluster_access(tmp_path)
    (tmp_path / "ca.crt").write_text("CA")
    access = in_cluster_access(tmp_path)
    assert (access.server, access.ca, access.token_file) == ("https://[fd00::1]:443", "CA", str(tmp_path / "token"))


async def test_a_token_file_is_read_again_after_a_401(tmp_path: Path) -> None:
    token = tmp_path / "token"
    token.write_text("first\n")
    credentials = Credentials(ClusterAccess(server="http://k:80", token_file=str(token)))
    assert await credentials.authorization() == "Bearer first"
    token.write_text("second")
    assert await credentials.authorization() == "Bearer first", "kept for a minute, not read per request"
    credentials.expire()
    assert await credentials.authorization() == "Bearer second"


def plugin_printing(tmp_path: Path, status: dict[str, Any]) -> ExecPlugin:
    """An exec plugin (a Python one-liner) that counts its runs in a file and prints an ExecCredential."""
    runs = tmp_path / "runs"
    credential = json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                             "status": status})  # fmt: skip
    script = (
        "import os,pathlib,sys; p=pathlib.Path(sys.argv[1]); p.write_text(p.read_text()+'x' if p.exists() else 'x');"
        "assert '\"interactive\": false' in os.environ['KUBERNETES_EXEC_INFO'];"
        f"print(os.environ['PREFIX'] + {credential!r})"
    )
    return ExecPlugin(sys.executable, ("-c", script, str(runs)), (("PREFIX", ""),))


async def test_an_exec_plugin_runs_once_until_its_credential_expires_or_the_server_refuses_it(tmp_path: Path) -> None:
    plugin = plugin_printing(tmp_path, {"token": "t1", "expirationTimestamp": "2999-01-01T00:00:00Z"})
    credentials = Credentials(ClusterAccess(server="http://k:80", exec=plugin))
    assert [await credentials.authorization() for _ in range(3)] == ["Bearer t1"] * 3
    assert (tmp_path / "runs").read_text() == "x"
    credentials.expire()
    assert await credentials.authorization() == "Bearer t1"
    assert (tmp_path / "runs").read_text() == "xx"
    expired = plugin_printing(tmp_path, {"token": "t2", "expirationTimestamp": "2000-01-01T00:00:00Z"})
    credentials = Credentials(ClusterAccess(server="http://k:80", exec=expired))
    await credentials.authorization()
    await credentials.authorization()
    assert (tmp_path / "runs").read_text() == "xxxx", "an expired credential is asked for again"


@pytest.mark.parametrize(
    ("plugin", "message"),
    [
        (ExecPlugin("/no/such/plugin", install_hint="install it"), "exec plugin '/no/such/plugin' cannot run"),
        (ExecPlugin(sys.executable, ("-c", "import sys; sys.exit('token expired, log in again')")),
         "failed: token expired, log in again"),
        (ExecPlugin(sys.executable, ("-c", "print('{}')")), "did not print an ExecCredential with a status"),
        (ExecPlugin(sys.executable, ("-c", "print('{\"status\": {}}')")), "returned neither a token nor"),
    ],
)  # fmt: skip
async def test_an_exec_plugin_that_fails_is_one_line(plugin: ExecPlugin, message: str) -> None:
    """A retryable error of its own (no credential just now), never a configuration error that ends a process."""
    with pytest.raises(CredentialsUnavailable) as raised:
        await Credentials(ClusterAccess(server="http://k:80", exec=plugin)).authorization()
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_a_kubeconfig_file_resolves_its_relative_paths_and_a_kubeconfig_list_merges_first_wins(tmp_path: Path) -> None:
    import yaml

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "ca.pem").write_text("CA of a")
    first = document({"server": "https://a:6443", "certificate-authority": "ca.pem"}, {"tokenFile": "/abs/token"})
    (tmp_path / "a" / "config").write_text(yaml.safe_dump(first))
    second = document({"server": "https://b:6443"}, {"token": "b"}, **{"current-context": "y"})
    second["contexts"] += [{"name": "y", "context": {"cluster": "c", "user": "u"}}]
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(second))
    (tmp_path / "empty.yaml").write_text("")
    merged = read_kubeconfig(f"{tmp_path / 'empty.yaml'}:{tmp_path / 'a' / 'config'}:{tmp_path / 'b.yaml'}")
    assert merged["current-context"] == "x", "the first file to set current-context wins"
    assert [c["name"] for c in merged["contexts"]] == ["x", "y"]
    access = access_from_kubeconfig(merged)
    assert (access.server, access.ca, access.token_file) == ("https://a:6443", "CA of a", "/abs/token")
    assert access_from_kubeconfig(merged, context="y").server == "https://a:6443", "cluster c is the first file's"
    for content, message in (("[1, 2]", "not a kubeconfig document"), ("a: [", "is not YAML")):
        (tmp_path / "bad.yaml").write_text(content)
        with pytest.raises(KubeconfigError, match=message):
            read_kubeconfig(str(tmp_path / "bad.yaml"))
    with pytest.raises(KubeconfigError, match="cannot be read: No such file or directory"):
        read_kubeconfig(str(tmp_path / "missing.yaml"))


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
