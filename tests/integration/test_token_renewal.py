"""A worker's ServiceAccount token renewed without a person, under load, without reconnecting; and a refusal shown
where an operator looks. Real API servers issue and check the tokens; the worker's RBAC is the shipped one."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from kubernetes_asyncio import client as k8s_client

from multikueue.clusters.connections import WorkerConnection
from multikueue.kube.addresses import MULTIKUEUE_CLUSTERS
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import Unauthorized
from multikueue.kube.kubeconfig import access_from_kubeconfig
from multikueue.kube.resources import Objects
from multikueue.kube.serviceaccounts import service_account_token
from multikueue.labels import RENEW_TOKEN_ANNOTATION
from multikueue_testbed import kueue
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.testbed import kubeconfig_document
from multikueue_testbed.waiting import eventually, wait_until
from tests.integration.scenario import Scenario

WORKER_RBAC = Path(__file__).parents[2] / "config" / "worker" / "rbac.yaml"
ACCOUNT = "dispatcher"
# A 600 s token (the shortest the API server issues) is renewed 6 s after it was issued.
RENEW_SOON = """
multiKueue: {gcInterval: 2s, workerLostTimeout: 10s}
dispatcher: {tokenRenewal: {renewAfter: 0.01}}
"""
pytestmark = pytest.mark.parametrize("multikueue_config", [RENEW_SOON])


def _shipped(kind: str, name: str) -> dict[str, Any]:
    return next(
        d for d in yaml.safe_load_all(WORKER_RBAC.read_text()) if d["kind"] == kind and d["metadata"]["name"] == name
    )


async def _grant(s: Scenario, *, renewal: bool) -> None:
    """The shipped worker RBAC for the ServiceAccount ``ACCOUNT`` in the test's namespace on worker1: the dispatch
    rules, and (with ``renewal``) the Role that lets it ask for its own token."""
    rbac = k8s_client.RbacAuthorizationV1Api(k8s(s.api["worker1"]))
    await k8s_client.CoreV1Api(k8s(s.api["worker1"])).create_namespaced_service_account(
        s.namespace, raw_body({"metadata": {"name": ACCOUNT}})
    )
    subject = [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": s.namespace}]
    role = _shipped("ClusterRole", "multikueue-dispatcher")
    name = f"{s.namespace}-dispatcher"  # cluster-scoped: unique per test
    await rbac.create_cluster_role(raw_body({"metadata": {"name": name}, "rules": role["rules"]}))
    await rbac.create_cluster_role_binding(raw_body({
        "metadata": {"name": name}, "subjects": subject,
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
    }))  # fmt: skip
    if renewal:
        rules = _shipped("Role", "multikueue-dispatcher-token")["rules"]
        for rule in rules:
            rule["resourceNames"] = [ACCOUNT]
        await rbac.create_namespaced_role(s.namespace, raw_body({"metadata": {"name": "token"}, "rules": rules}))
        await rbac.create_namespaced_role_binding(s.namespace, raw_body({
            "metadata": {"name": "token"}, "subjects": subject,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "token"},
        }))  # fmt: skip


async def _ungrant(s: Scenario) -> None:
    rbac = k8s_client.RbacAuthorizationV1Api(k8s(s.api["worker1"]))
    await rbac.delete_cluster_role_binding(f"{s.namespace}-dispatcher")
    await rbac.delete_cluster_role(f"{s.namespace}-dispatcher")


async def _connect_with_a_short_token(s: Scenario, *, bound_to: str | None = None) -> tuple[str, WorkerConnection]:
    """worker1's Secret now holds a 600 s token of ``ACCOUNT`` (bound to the worker Secret ``bound_to``: it stops
    working when that Secret is deleted); the token and the connection once it uses it."""
    spec: dict[str, Any] = {"expirationSeconds": 600}
    if bound_to is not None:
        anchor = await k8s_client.CoreV1Api(k8s(s.api["worker1"])).create_namespaced_secret(
            s.namespace, raw_body({"metadata": {"name": bound_to}})
        )
        spec["boundObjectRef"] = {"apiVersion": "v1", "kind": "Secret", "name": bound_to, "uid": anchor.metadata.uid}
    path = f"/api/v1/namespaces/{s.namespace}/serviceaccounts/{ACCOUNT}/token"
    token = (await s.api["worker1"].request("POST", path, body={"spec": spec}))["status"]["token"]
    cluster = s.bed.cluster("worker1")
    kubeconfig = kubeconfig_document("worker1", cluster.url, ca_pem=cluster.ca_pem, user={"token": token})
    await kueue.put_kubeconfig_secret(s.api["manager"], s.namespace, "worker1-kubeconfig", kubeconfig)
    connections = _reconciler(s).connections

    def using_it() -> bool:
        connection = connections.get(s.names["worker1"])
        return bool(connection and connection.connected and connection.api and connection.api.access.token == token)

    await wait_until(using_it, timeout=30, what="worker1 connected with the short token")
    return token, connections[s.names["worker1"]]


def _reconciler(s: Scenario) -> Any:
    assert s.manager is not None
    return s.manager.generation.cluster_reconciler


async def _opt_in(s: Scenario) -> None:
    await Objects(s.api["manager"], MULTIKUEUE_CLUSTERS).patch(
        s.names["worker1"], {"metadata": {"annotations": {RENEW_TOKEN_ANNOTATION: "true"}}}
    )


async def _secret_token(s: Scenario) -> str:
    secret = await k8s_client.CoreV1Api(k8s(s.api["manager"])).read_namespaced_secret("worker1-kubeconfig", s.namespace)
    kubeconfig = yaml.safe_load(base64.b64decode(secret.data["kubeconfig"]))
    return str(access_from_kubeconfig(kubeconfig).token)


async def _cluster_events(s: Scenario, reason: str) -> list[Any]:
    listed = await k8s_client.CoreV1Api(k8s(s.api["manager"])).list_namespaced_event("default")
    return [e for e in listed.items if e.involved_object.name == s.names["worker1"] and e.reason == reason]


async def _runs_finish_on_worker1(s: Scenario, names: list[str], *, at_once: int = 10) -> None:
    """Each run dispatched, admitted on worker1, its status mirrored, finished there, and its manager Workload
    finished; ``at_once`` runs in flight."""
    limiter = anyio.CapacityLimiter(at_once)

    async def one(name: str) -> None:
        async with limiter:
            wl_name = await s.run_to_the_end(name, "worker1")
            done = await s.wait(s.workloads("manager"), wl_name, _finished, f"{name} finished", timeout=120)
            assert done["status"]["clusterName"] == s.names["worker1"]

    async with anyio.create_task_group() as tg:
        for name in names:
            tg.start_soon(one, name)


def _finished(workload: Any) -> bool:
    conditions = (workload or {}).get("status", {}).get("conditions") or []
    return [c["type"] for c in conditions if c["status"] == "True"].count("Finished") == 1


async def test_a_short_token_is_renewed_under_load_without_a_reconnect_and_the_old_one_is_let_go(
    scenario: Scenario,
) -> None:
    s = scenario
    await _grant(s, renewal=True)
    try:
        first, connection = await _connect_with_a_short_token(s, bound_to="first-token-anchor")
        workloads, api = connection.workloads, connection.api
        assert workloads is not None
        lists = workloads.relists
        await _opt_in(s)

        # 120 runs dispatched and finished while the token is renewed (every ~6 s here) underneath them.
        async with anyio.create_task_group() as tg:
            tg.start_soon(_runs_finish_on_worker1, s, [f"load-{i:03d}" for i in range(120)])
            renewed = await eventually(lambda: _secret_token(s), until=lambda t: t != first, timeout=60,
                                       what="a new token in worker1's Secret")  # fmt: skip
        fresh = service_account_token(renewed)
        assert fresh is not None
        assert (fresh.namespace, fresh.name, fresh.lifetime) == (s.namespace, ACCOUNT, 600)
        # The dispatcher renews it: no person's deadline, so the expiry alert (renewable="false") stays quiet.
        assert s.manager is not None
        samples = [x for metric in s.manager.metrics.credentials_expiry.collect() for x in metric.samples]
        assert any(x.labels == {"cluster": s.names["worker1"], "renewable": "true"} for x in samples), samples
        # Renewed again and again (every ~6 s here), each told on the MultiKueueCluster; the runs may end first.
        renewals = await eventually(lambda: _cluster_events(s, "TokenRenewed"), until=lambda es: len(es) >= 2,
                                    timeout=30, what="a second renewal")  # fmt: skip
        assert len(renewals) >= 2

        # The same connection throughout: its informers never listed again; only its credential changed.
        assert _reconciler(s).connections[s.names["worker1"]] is connection
        assert (connection.workloads, connection.api, connection.workloads.relists) == (workloads, api, lists)
        assert connection.connected
        current = connection.api.access.token if connection.api else None
        assert current != first

        # The first token stops working (its anchor gone); the dispatcher no longer uses it: more runs finish.
        await k8s_client.CoreV1Api(k8s(s.api["worker1"])).delete_namespaced_secret("first-token-anchor", s.namespace)
        cluster = s.bed.cluster("worker1")
        old = ApiClient(access_from_kubeconfig(kubeconfig_document("old", cluster.url, ca_pem=cluster.ca_pem,
                                                                   user={"token": first})))  # fmt: skip
        try:

            async def refused() -> bool:
                try:
                    await old.request("GET", "/api/v1/namespaces/kube-system")
                except Unauthorized:
                    return True
                return False

            await eventually(refused, until=bool, timeout=30, what="the first token refused by worker1")
        finally:
            await old.close()
        await _runs_finish_on_worker1(s, [f"after-{i:02d}" for i in range(10)])
        assert _reconciler(s).connections[s.names["worker1"]] is connection
        assert connection.workloads is workloads
        assert workloads.relists == lists
        for name in [f"load-{i:03d}" for i in range(120)] + [f"after-{i:02d}" for i in range(10)]:
            assert await s.runs("worker2").get(name, s.namespace) is None, f"{name} ran on worker2 too"
    finally:
        await _ungrant(s)


async def test_a_refused_renewal_is_told_on_the_multikueuecluster_and_the_connection_keeps_working(
    scenario: Scenario,
) -> None:
    s = scenario
    await _grant(s, renewal=False)  # the dispatch rules, but no token for itself
    try:
        first, connection = await _connect_with_a_short_token(s)
        await _opt_in(s)
        clusters = Objects(s.api["manager"], MULTIKUEUE_CLUSTERS)

        def told(cluster: Any) -> bool:
            conditions = (cluster or {}).get("status", {}).get("conditions") or []
            active: dict[str, Any] = next((c for c in conditions if c["type"] == "Active"), {})
            return active.get("status") == "True" and "token renewal failed" in active.get("message", "")

        cluster = await eventually(lambda: clusters.get(s.names["worker1"]), until=told, timeout=60,
                                   what="the refusal in worker1's Active condition")  # fmt: skip
        message = next(c for c in cluster["status"]["conditions"] if c["type"] == "Active")["message"]
        assert f"ServiceAccount {s.namespace}/{ACCOUNT}: HTTP 403 Forbidden" in message, message
        warnings = await eventually(lambda: _cluster_events(s, "TokenRenewalFailed"), until=bool, timeout=30,
                                    what="a TokenRenewalFailed Event")  # fmt: skip
        assert warnings[0].type == "Warning"
        assert warnings[0].message.startswith(f"worker {s.names['worker1']}: token renewal failed")
        assert f"ServiceAccount {s.namespace}/{ACCOUNT}: HTTP 403" in warnings[0].message
        # Retried with backoff, told once per distinct problem; the old token kept, and still working.
        assert await _secret_token(s) == first
        assert _reconciler(s).connections[s.names["worker1"]] is connection
        await _runs_finish_on_worker1(s, ["still-works"])
        assert len(await _cluster_events(s, "TokenRenewalFailed")) == 1
        failing = _reconciler(s).renewer.failing
        await wait_until(lambda: failing[s.names["worker1"]].failures >= 2, timeout=30, what="a second try")
        assert len(await _cluster_events(s, "TokenRenewalFailed")) == 1
        # While renewals fail the token is a person's deadline again: the expiry alert (renewable="false") sees it.
        assert s.manager is not None
        metrics = s.manager.metrics

        def renewable() -> set[str]:
            samples = [x for metric in metrics.credentials_expiry.collect() for x in metric.samples]
            return {x.labels["renewable"] for x in samples if x.labels["cluster"] == s.names["worker1"]}

        await wait_until(lambda: renewable() == {"false"}, timeout=30, what='renewable="false" while it fails')
    finally:
        await _ungrant(s)
