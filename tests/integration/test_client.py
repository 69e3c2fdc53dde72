"""kube/'s own client against a real API server: the rate limiter, the connection bound, Events written
undecoded, and credentials from an exec plugin."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from types import TracebackType

import anyio
import pytest
from kubernetes_asyncio import client as k8s_client

from multikueue.kube import events, leader
from multikueue.kube.client import ApiClient, api_client_from_kubeconfig, rate_limit
from multikueue.kube.errors import CredentialsUnavailable, Forbidden, NotFound, Unauthorized, summary
from multikueue_testbed import TestBed
from multikueue_testbed.accounts import mint_service_account_kubeconfig
from multikueue_testbed.client import k8s
from multikueue_testbed.waiting import eventually


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
            await api.request("GET", "/version")
        await api.request("GET", "/api/v1/namespaces")
    assert limiter.entered == 4


async def test_a_real_limiter_lets_requests_through(testbed: TestBed, tmp_path: Path) -> None:
    kubeconfig = testbed.cluster("worker1").kubeconfig
    limiter = rate_limit(qps=1000, burst=5)
    async with await api_client_from_kubeconfig(kubeconfig, temp_dir=tmp_path, limiter=limiter) as api:
        versions = [await api.request("GET", "/version") for _ in range(10)]
    assert {v["major"] for v in versions} == {"1"}


def _connections_to(port: int) -> int:
    """Established TCP connections this process holds to ``port`` on the loopback (from /proc, not from aiohttp)."""
    ours = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            ours.add(target[len("socket:[") : -1])
    count = 0
    for table in ("/proc/self/net/tcp", "/proc/self/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            remote_port = int(fields[2].rsplit(":", 1)[1], 16)
            if remote_port == port and fields[3] == "01" and fields[9] in ours:  # 01: ESTABLISHED
                count += 1
    return count


async def test_requests_in_flight_share_at_most_max_connections(testbed: TestBed, tmp_path: Path) -> None:
    cluster = testbed.cluster("worker1")
    port = int(cluster.url.rsplit(":", 1)[1])
    opened = {}
    for limit in (3, 30):
        before = _connections_to(port)
        async with await api_client_from_kubeconfig(
            cluster.kubeconfig, temp_dir=tmp_path, max_connections=limit
        ) as api:
            results = await asyncio.gather(*(api.request("GET", "/api/v1/namespaces") for _ in range(30)))
            assert all(r["items"] for r in results)  # every request beyond the limit waited for a connection
            opened[limit] = _connections_to(port) - before  # idle connections stay open (keep-alive)
    assert 1 <= opened[3] <= 3
    assert opened[30] > 3  # without the bound the same burst opens more: the count above can tell


async def test_an_event_is_written_without_decoding_its_answer_and_a_refused_one_is_counted(
    testbed: TestBed, tmp_path: Path
) -> None:
    failures: list[str] = []
    kubeconfig = testbed.cluster("worker1").kubeconfig
    async with await api_client_from_kubeconfig(kubeconfig, temp_dir=tmp_path, on_error=failures.append) as api:
        about = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "about", "namespace": "default"}}
        await events.record(api, about, type_="Normal", reason="Written", message="raw", component="test")
        listed = await k8s_client.CoreV1Api(k8s(api)).list_namespaced_event("default")
        assert [e.message for e in listed.items if e.reason == "Written"] == ["raw"]
        with pytest.raises(NotFound):  # what events.record gets back (and logs) when the namespace is missing
            await api.send("POST", "/api/v1/namespaces/no-such-namespace/events", body={"metadata": {"name": "x"}})
    assert failures == ["404"], "a refused request is counted as a decoded one's would be"


async def test_an_exec_plugin_authenticates_and_runs_again_when_the_server_refuses_its_token(
    testbed: TestBed, worker1_api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    """The plugin prints whatever token is in a file: first a wrong one (401, refused and counted), then the
    ServiceAccount's own, which the next request fetches by running the plugin again."""
    cluster = testbed.cluster("worker1")
    minted = await mint_service_account_kubeconfig(worker1_api, cluster, namespace=namespace, name="exec-user")
    token = minted["users"][0]["user"]["token"]
    source = tmp_path / "token"
    source.write_text("not-a-token")
    script = ("import json,pathlib,sys; print(json.dumps({'apiVersion': 'client.authentication.k8s.io/v1', "
              "'kind': 'ExecCredential', 'status': {'token': pathlib.Path(sys.argv[1]).read_text()}}))")  # fmt: skip
    minted["users"][0]["user"] = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                 "args": ["-c", script, str(source)]},
    }  # fmt: skip
    failures: list[str] = []
    async with await api_client_from_kubeconfig(minted, on_error=failures.append) as api:
        with pytest.raises(Unauthorized):
            await api.request("GET", "/version")
        source.write_text(token)
        review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        answer = await api.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review)
    assert answer["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:exec-user"
    assert failures == ["401"]


async def test_impersonation_in_the_kubeconfig_is_who_the_server_authorises(testbed: TestBed, tmp_path: Path) -> None:
    """``as``, ``as-uid``, ``as-groups`` and ``as-user-extra`` are sent as kubectl sends them: the server sees the
    impersonated identity, and refuses what that identity may not do although the base identity (the bed's admin)
    could."""
    kubeconfig = testbed.cluster("worker1").kubeconfig
    kubeconfig["users"][0]["user"].update(
        {"as": "jane", "as-uid": "1234", "as-groups": ["team-a"], "as-user-extra": {"scopes": ["read", "view"]}}
    )
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    async with await api_client_from_kubeconfig(kubeconfig, temp_dir=tmp_path) as api:
        answer = await api.request("POST", "/apis/authentication.k8s.io/v1/selfsubjectreviews", body=review)
        with pytest.raises(Forbidden) as refused:
            await api.request("GET", "/api/v1/namespaces/kube-system/secrets")
    user = answer["status"]["userInfo"]
    assert (user["username"], user["uid"]) == ("jane", "1234")
    assert user["groups"] == ["team-a", "system:authenticated"]
    assert user["extra"] == {"scopes": ["read", "view"]}
    assert 'User "jane" cannot list resource "secrets"' in summary(refused.value).message


PLUGIN = """
import datetime, json, pathlib, sys
state = pathlib.Path(sys.argv[1])
failed = int((state / "failed").read_text() or 0) if (state / "failed").exists() else 0
if (state / "fail").exists() and failed < 2:  # fails twice once asked to, then works again
    (state / "failed").write_text(str(failed + 1))
    sys.exit("the identity provider did not answer")
now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"clientCertificateData": (state / "crt").read_text(),
                             "clientKeyData": (state / "key").read_text(), "expirationTimestamp": now}}))
"""


async def test_a_leader_keeps_its_lease_when_its_exec_plugin_fails_for_a_moment(
    testbed: TestBed, namespace: str, tmp_path: Path
) -> None:
    """The plugin hands out the admin's certificate, asked again on every request (its credential expires at once),
    and fails twice while the leader renews: each failure is a renewal attempt that failed (retried within the renew
    deadline), not an error that ends the election."""
    cluster = testbed.cluster("worker1")
    cluster.admin.write(tmp_path, "")
    (tmp_path / ".crt").rename(tmp_path / "crt")
    (tmp_path / ".key").rename(tmp_path / "key")
    kubeconfig = cluster.kubeconfig
    kubeconfig["users"][0]["user"] = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                 "args": ["-c", PLUGIN, str(tmp_path)]},
    }  # fmt: skip
    acquired, lost = anyio.Event(), anyio.Event()

    async def on_acquired() -> None:
        acquired.set()

    async def on_lost() -> None:
        lost.set()

    lease = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/plugin-lease"
    async with await api_client_from_kubeconfig(kubeconfig) as api, anyio.create_task_group() as tg:
        tg.start_soon(lambda: leader.contend(
            api, namespace=namespace, name="plugin-lease", identity="a", lease_duration=6, renew_deadline=4,
            retry_period=0.3, on_acquired=on_acquired, on_lost=on_lost,
        ))  # fmt: skip
        with anyio.fail_after(30):
            await acquired.wait()
        (tmp_path / "fail").touch()
        await eventually(lambda: _read(tmp_path / "failed"), until=lambda n: n == "2", what="two failed plugin runs")
        renewed_before = (await api.request("GET", lease))["spec"]["renewTime"]
        await eventually(
            lambda: api.request("GET", lease),
            until=lambda held: held["spec"]["renewTime"] > renewed_before,
            what="a renewal after the failures",
        )
        assert not lost.is_set(), "the lease was given up"
        tg.cancel_scope.cancel()


async def _read(path: Path) -> str:
    file = anyio.Path(path)
    return await file.read_text() if await file.exists() else ""


async def test_a_new_client_certificate_from_the_exec_plugin_is_the_one_used_next(
    testbed: TestBed, tmp_path: Path
) -> None:
    """The plugin's credential expires at once, so it runs before every request; when it hands out another client
    certificate, the next request (on the same client, its pool warm) is made as that identity, not over a pooled
    connection made with the old one."""
    cluster = testbed.cluster("worker1")
    assert testbed.ca is not None
    cluster.admin.write(tmp_path, "admin")
    testbed.ca.issue("jane", organizations=("team-a",), client=True).write(tmp_path, "jane")
    for suffix in ("crt", "key"):
        (tmp_path / suffix).symlink_to(tmp_path / f"admin.{suffix}")
    kubeconfig = cluster.kubeconfig
    kubeconfig["users"][0]["user"] = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                 "args": ["-c", PLUGIN, str(tmp_path)]},
    }  # fmt: skip
    review = {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
    path = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
    async with await api_client_from_kubeconfig(kubeconfig) as api:
        first = await api.request("POST", path, body=review)
        for suffix in ("crt", "key"):
            (tmp_path / suffix).unlink()
            (tmp_path / suffix).symlink_to(tmp_path / f"jane.{suffix}")
        second = await api.request("POST", path, body=review)
    assert first["status"]["userInfo"]["username"] == "admin"
    assert second["status"]["userInfo"]["username"] == "jane"


CLUSTER_PLUGIN = """
import json, os, pathlib, sys
cluster = json.loads(os.environ["KUBERNETES_EXEC_INFO"])["spec"].get("cluster") or {}
if cluster.get("server") != sys.argv[2] or cluster.get("config") != {"audience": "workers"}:
    sys.exit(f"no credential for cluster {cluster}")
state = pathlib.Path(sys.argv[1])
print(json.dumps({"apiVersion": "client.authentication.k8s.io/v1", "kind": "ExecCredential",
                  "status": {"clientCertificateData": (state / "admin.crt").read_text(),
                             "clientKeyData": (state / "admin.key").read_text()}}))
"""


async def test_an_exec_plugin_with_provide_cluster_info_is_told_which_cluster(testbed: TestBed, tmp_path: Path) -> None:
    """``provideClusterInfo: true``: the plugin gets the cluster's server, CA and its exec extension's config in
    KUBERNETES_EXEC_INFO (here it hands out a credential only for that cluster, as per-cluster token minters do)."""
    cluster = testbed.cluster("worker1")
    cluster.admin.write(tmp_path, "admin")
    kubeconfig = cluster.kubeconfig
    kubeconfig["clusters"][0]["cluster"]["extensions"] = [
        {"name": "client.authentication.k8s.io/exec", "extension": {"audience": "workers"}}
    ]
    kubeconfig["users"][0]["user"] = {
        "exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": sys.executable,
                 "args": ["-c", CLUSTER_PLUGIN, str(tmp_path), cluster.url], "provideClusterInfo": True},
    }  # fmt: skip
    async with await api_client_from_kubeconfig(kubeconfig) as api:
        assert (await api.request("GET", "/version"))["major"] == "1"
    kubeconfig["users"][0]["user"]["exec"]["provideClusterInfo"] = False
    async with await api_client_from_kubeconfig(kubeconfig) as api:
        with pytest.raises(CredentialsUnavailable, match="no credential for cluster"):
            await api.request("GET", "/version")
