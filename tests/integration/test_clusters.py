"""Worker connections through MultiKueueCluster + kubeconfig Secrets, and the Active conditions Kueue shows."""

from __future__ import annotations

import base64
import datetime
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from cryptography import x509
from kubernetes_asyncio import client as k8s_client

from multikueue.kube.client import ApiClient
from multikueue.process import Process
from multikueue.reload import ConfigSource, load_configuration
from multikueue_testbed import TestBed
from multikueue_testbed.accounts import mint_service_account_kubeconfig
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.waiting import eventually
from tests.integration.clusters import Harness

CONTROLLER = "multikueue.x-k8s.io/external-dispatcher"


async def test_a_reachable_worker_becomes_active(testbed: TestBed, harness: Any) -> None:
    h = await harness()
    await h.put_secret("w1", testbed.cluster("worker1").kubeconfig)
    await h.add_cluster("worker1", "w1")
    condition = await h.active("worker1", status="True", reason="Active", message="Connected")
    assert condition["message"] == "Connected"
    assert condition["observedGeneration"] == 1


async def test_a_missing_secret_is_reported_and_its_creation_connects(testbed: TestBed, harness: Any) -> None:
    h = await harness()
    await h.add_cluster("worker1", "late")
    condition = await h.active("worker1", status="False", reason="BadKubeConfig")
    assert condition["message"] == 'load client config failed: Secret "late" not found'

    await h.put_secret("late", "apiVersion: v1\nkind: Config\n")
    await h.active("worker1", status="False", reason="BadKubeConfig",
                   message="load client config failed: invalid configuration")  # fmt: skip
    await h.put_secret("late", testbed.cluster("worker1").kubeconfig)
    await h.active("worker1", status="True", reason="Active")


def _insecure(
    kubeconfig: dict[str, Any], *, cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None
) -> Any:
    doc = yaml.safe_load(yaml.safe_dump(kubeconfig))
    doc["clusters"][0]["cluster"].update(cluster or {})
    if user is not None:
        doc["users"][0]["user"] = user
    return doc


@pytest.mark.parametrize(
    ("cluster", "user", "message"),
    [
        (None, {"tokenFile": "/var/run/secrets/token"}, "tokenFile is not allowed"),
        ({"insecure-skip-tls-verify": True}, None, "insecure TLS verification is not allowed for cluster"),
        ({"certificate-authority": "/etc/ca.crt"}, None, "certificate-authority file paths are not allowed"),
        (None, {"exec": {"apiVersion": "client.authentication.k8s.io/v1", "command": "/bin/true"}},
         "exec plugins are not allowed"),
        (None, {"username": "admin", "password": "admin"}, "basic auth is not allowed"),
    ],
)  # fmt: skip
async def test_insecure_kubeconfigs_are_refused(
    testbed: TestBed, harness: Any, cluster: dict[str, Any] | None, user: dict[str, Any] | None, message: str
) -> None:
    h = await harness()
    await h.put_secret("bad", _insecure(testbed.cluster("worker1").kubeconfig, cluster=cluster, user=user))
    await h.add_cluster("worker1", "bad")
    await h.active(
        "worker1", status="False", reason="InsecureKubeConfig", message=f"load client config failed: {message}"
    )


async def test_a_rotated_secret_is_picked_up_without_a_restart(testbed: TestBed, harness: Any) -> None:
    h = await harness()
    good = testbed.cluster("worker1").kubeconfig
    await h.put_secret("w1", good)
    await h.add_cluster("worker1", "w1")
    await h.active("worker1", status="True")

    broken = _insecure(good, cluster={"server": "https://127.0.0.1:1"})  # nothing listens there
    await h.put_secret("w1", broken)
    condition = await h.active("worker1", status="False", reason="ClientConnectionFailed")
    assert "connection attempts: 1, next connection attempt: " in condition["message"]

    await h.put_secret("w1", good)
    await h.active("worker1", status="True", reason="Active", message="Connected")


async def test_a_lost_worker_goes_inactive_and_comes_back(testbed: TestBed, harness: Any) -> None:
    h = await harness()
    await h.put_secret("w2", testbed.cluster("worker2").kubeconfig)
    await h.add_cluster("worker2", "w2")
    await h.active("worker2", status="True")
    testbed.stop_apiserver("worker2", kill=True)
    try:
        await h.active("worker2", status="False", reason="ClientConnectionFailed")
    finally:
        testbed.start_apiserver("worker2")
    await h.active("worker2", status="True", reason="Active", message="Connected")


async def test_a_partitioned_worker_is_noticed_by_the_probe_and_comes_back(testbed: TestBed, harness: Any) -> None:
    # SIGSTOP keeps the worker's sockets open but silent, as a network partition does: no watch ends, no
    # connection is refused; only the periodic probe can tell.
    h = await harness(worker_client="{timeout: 2s, probeInterval: 1s}")
    await h.put_secret("w2", testbed.cluster("worker2").kubeconfig)
    await h.add_cluster("worker2", "w2")
    await h.active("worker2", status="True")
    testbed.pause_apiserver("worker2")
    try:
        lost = await h.active("worker2", status="False", reason="ClientConnectionFailed")
        assert lost["message"].startswith("health probe: no answer within 2s"), lost["message"]
    finally:
        testbed.resume_apiserver("worker2")
    await h.active("worker2", status="True", reason="Active", message="Connected")


async def test_a_kind_missing_on_one_worker_leaves_the_worker_usable(testbed: TestBed, harness: Any) -> None:
    h = await harness(
        "multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}, {name: Missing.v1.example.com}]}"
    )
    await h.put_secret("w1", testbed.cluster("worker1").kubeconfig)
    await h.add_cluster("worker1", "w1")
    condition = await h.active("worker1", status="True", reason="Active")
    assert condition["message"] == (
        "Connected; unavailable kinds: Missing.v1.example.com: "
        'no matches for kind "Missing" in version "example.com/v1"'
    )
    connection = h.manager.generation.cluster_reconciler.connections[h.name("worker1")]
    assert [g.kind for g in connection.objects] == ["PipelineRun"]


async def test_admission_check_active_follows_its_clusters(testbed: TestBed, harness: Any) -> None:
    h = await harness()
    await h.checks.create({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": h.name("ac")},
        "spec": {"controllerName": CONTROLLER,
                 "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": h.name("config")}},
    })  # fmt: skip
    condition = await h.check_active("ac", status="False", reason="BadConfig")
    assert condition["message"] == (
        f'Cannot load the AdmissionChecks parameters: multikueueconfigs.kueue.x-k8s.io "{h.name("config")}" not found'
    )

    await h.configs.create({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig", "metadata": {"name": h.name("config")},
        "spec": {"clusters": [h.name("worker1"), h.name("worker2")]},
    })  # fmt: skip
    condition = await h.check_active("ac", status="False", reason="NoUsableClusters")
    assert condition["message"] == f"Missing clusters: [{h.name('worker1')} {h.name('worker2')}]"

    await h.put_secret("w1", testbed.cluster("worker1").kubeconfig)
    await h.add_cluster("worker1", "w1")
    await h.add_cluster("worker2", "nowhere")
    condition = await h.check_active("ac", status="True", reason="SomeActiveClusters")
    assert condition["message"] == f"Inactive clusters: [{h.name('worker2')}]"

    await h.put_secret("nowhere", testbed.cluster("worker2").kubeconfig)
    condition = await h.check_active("ac", status="True", reason="Active")
    assert condition["message"] == "The admission check is active"


async def test_admission_checks_of_other_controllers_are_left_alone(harness: Any) -> None:
    h = await harness()
    await h.checks.create({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": h.name("kueues")},
        "spec": {"controllerName": "kueue.x-k8s.io/multikueue",
                 "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": "x"}},
    })  # fmt: skip
    ours = h.name("ours")
    await h.checks.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": ours},
                           "spec": {"controllerName": CONTROLLER}})  # fmt: skip
    await h.check_active("ours", status="False", reason="BadConfig")  # ours was processed after theirs was seen
    theirs = await h.checks.get(h.name("kueues"))
    assert theirs is not None
    assert "conditions" not in (theirs.get("status") or {})


async def test_a_configmap_change_applies_without_a_restart_and_a_bad_one_keeps_the_last_good(
    testbed: TestBed, manager_api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    core = k8s_client.CoreV1Api(k8s(manager_api))

    def document(*kinds: str, lost_timeout: str = "15m") -> dict[str, Any]:
        frameworks = [{"name": k} for k in ("PipelineRun.v1.tekton.dev", *kinds)]
        text = yaml.safe_dump({
            "multiKueue": {"workerLostTimeout": lost_timeout, "externalFrameworks": frameworks},
            "dispatcher": {"namespace": namespace, "workerClient": {"timeout": "3s"}},
        })  # fmt: skip
        return {"data": {"config.yaml": text}}

    await core.create_namespaced_config_map(namespace, {"metadata": {"name": "mk"}, **document()})
    source = ConfigSource(namespace, "mk", "config.yaml")
    config = await load_configuration(manager_api, source.namespace, source.name, source.key)
    h = Harness(testbed, manager_api, namespace)
    manager = Process(manager_api, config, temp_dir=tmp_path / "certs", config_source=source)

    async def message() -> str:
        cluster: dict[str, Any] = await h.clusters.get(h.name("worker1")) or {}
        active = [c for c in (cluster.get("status") or {}).get("conditions") or [] if c["type"] == "Active"]
        return str(active[0]["message"]) if active else ""

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(manager.run)
            with anyio.fail_after(30):
                await manager.started.wait()
            await h.put_secret("w1", testbed.cluster("worker1").kubeconfig)
            await h.add_cluster("worker1", "w1")
            await eventually(message, until=lambda m: m == "Connected", timeout=60, what="Connected")

            # A valid change: a new kind, unknown to the worker, shows in the condition with no restart.
            await core.patch_namespaced_config_map("mk", namespace, document("Missing.v1.example.com"))
            await eventually(
                message,
                until=lambda m: m.startswith("Connected; unavailable kinds: Missing.v1.example.com"),
                timeout=60,
                what="the new kind in use",
            )

            # An invalid change: reported on the ConfigMap, naming field and value; the last good one keeps running.
            await core.patch_namespaced_config_map("mk", namespace, document(lost_timeout="soon"))
            events = await eventually(
                lambda: core.list_namespaced_event(namespace, field_selector="involvedObject.name=mk"),
                until=lambda e: any(x.reason == "InvalidConfiguration" for x in e.items),
                what="InvalidConfiguration event",
            )
            warning = next(x for x in events.items if x.reason == "InvalidConfiguration")
            assert warning.type == "Warning"
            assert "multiKueue.workerLostTimeout: not a duration like 30s, 1m or 1h30m: 'soon'" in warning.message
            assert manager.metrics.config_valid._value.get() == 0
            assert (await message()).startswith("Connected; unavailable kinds: Missing.v1.example.com")

            # And a valid one after it still applies.
            await core.patch_namespaced_config_map("mk", namespace, document())
            await eventually(message, until=lambda m: m == "Connected", timeout=60, what="back to one kind")
            assert manager.metrics.config_valid._value.get() == 1

            # A kind the manager serves under another spelling is refused like an invalid change, before anything
            # restarts: the worker connection in use stays the same object, and nothing counts as applied.
            connection = manager.generation.cluster_reconciler.connections[h.name("worker1")]
            applied = manager.metrics.config_reloads.labels("applied")._value.get()
            await core.patch_namespaced_config_map("mk", namespace, document("pipelinerun.v1.tekton.dev"))
            events = await eventually(
                lambda: core.list_namespaced_event(namespace, field_selector="involvedObject.name=mk"),
                until=lambda e: any("case-sensitive" in (x.message or "") for x in e.items),
                what="the misspelt kind refused",
            )
            refused = next(x for x in events.items if "case-sensitive" in (x.message or ""))
            assert 'did you mean "PipelineRun.v1.tekton.dev"? (the running configuration is kept)' in refused.message
            assert manager.metrics.config_valid._value.get() == 0
            assert [str(g) for g in manager.config.multi_kueue.gvks] == ["tekton.dev/v1, Kind=PipelineRun"]
            assert await message() == "Connected"
            assert manager.generation.cluster_reconciler.connections[h.name("worker1")] is connection
            assert manager.metrics.config_reloads.labels("applied")._value.get() == applied
            tg.cancel_scope.cancel()
    finally:
        await h.clusters.delete(h.name("worker1"))


async def test_a_kubeconfig_that_leads_to_another_cluster_is_refused_and_the_connection_kept(
    testbed: TestBed, harness: Any
) -> None:
    """A rotation mistake (worker2's kubeconfig put in worker1's Secret) is not followed: the MultiKueueCluster says
    why, the connection to the real worker1 stays (its runs stay reachable), and fixing the Secret heals it."""
    h = await harness()
    await h.put_secret("w1", testbed.cluster("worker1").kubeconfig)
    await h.add_cluster("worker1", "w1")
    await h.active("worker1", status="True")
    first = await h.clusters.get(h.name("worker1"))
    assert first is not None
    identity = first["metadata"]["annotations"]["multikueue.x-k8s.io/worker-identity"]
    kube_system = await k8s_client.CoreV1Api(k8s(h.api)).read_namespace("kube-system")  # the manager's own
    assert identity != kube_system.metadata.uid

    await h.put_secret("w1", testbed.cluster("worker2").kubeconfig)
    refused = await h.active("worker1", status="False", reason="ClusterIdentityChanged")
    assert f"(kube-system namespace UID {identity})" not in refused["message"]
    assert (
        f"not {identity}): refused, and the connection made with the previous kubeconfig is kept"
        in (refused["message"])
    )
    assert h.manager is not None
    kept = h.manager.generation.cluster_reconciler.connections[h.name("worker1")]
    assert kept.identity == identity
    assert kept.connected, "the connection to the real worker1 is kept"

    await h.put_secret("w1", testbed.cluster("worker1").kubeconfig)
    await h.active("worker1", status="True", reason="Active", message="Connected")


async def test_two_multikueueclusters_for_one_worker_are_refused(testbed: TestBed, harness: Any) -> None:
    # With a kind configured, a connection starts informers up to its last moment (the worker's Warning Events):
    # refusing it at once must not fail the controller (it once met a closed session there).
    h = await harness(extra="multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}")
    await h.put_secret("w1", testbed.cluster("worker1").kubeconfig)
    await h.add_cluster("worker1", "w1")
    await h.active("worker1", status="True")
    await h.add_cluster("worker1-again", "w1")
    refused = await h.active("worker1-again", status="False", reason="DuplicateCluster")
    assert f'leads to the cluster MultiKueueCluster "{h.name("worker1")}" already connects to' in refused["message"]
    await h.active("worker1", status="True", reason="Active")


async def test_when_a_workers_credential_expires_is_on_its_multikueuecluster_and_in_the_metric(
    testbed: TestBed, harness: Any, worker1_api: ApiClient, namespace: str
) -> None:
    """A ServiceAccount token (the TokenRequest API's, as connect-worker.sh mints it) and a client certificate: each
    worker's MultiKueueCluster carries when its credential stops working, as the credential says, and so does the
    metric, marked not renewable (fixed in the Secret until someone replaces it)."""
    h = await harness()
    minted = await mint_service_account_kubeconfig(worker1_api, testbed.cluster("worker1"), namespace=namespace,
                                                   name="dispatcher", expiration_seconds=7200)  # fmt: skip
    rbac: Any = k8s_client.RbacAuthorizationV1Api(k8s(worker1_api))
    binding = f"{namespace}-dispatcher"
    await rbac.create_cluster_role_binding(raw_body({
        "metadata": {"name": binding},
        "subjects": [{"kind": "ServiceAccount", "name": "dispatcher", "namespace": namespace}],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
    }))  # fmt: skip
    try:
        await h.put_secret("w1", minted)
        await h.add_cluster("worker1", "w1")
        await h.put_secret("w2", testbed.cluster("worker2").kubeconfig)
        await h.add_cluster("worker2", "w2")
        token = minted["users"][0]["user"]["token"]
        claims = json.loads(base64.urlsafe_b64decode(token.split(".")[1] + "=="))
        certificate = x509.load_pem_x509_certificate(testbed.cluster("worker2").admin.cert_pem)
        expected = {
            "worker1": float(claims["exp"]),
            "worker2": certificate.not_valid_after_utc.replace(microsecond=0).timestamp(),
        }
        for short, expires in expected.items():
            await h.active(short, status="True")
            text = datetime.datetime.fromtimestamp(expires, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            await eventually(
                lambda s=short: h.clusters.get(h.name(s)),  # type: ignore[misc]
                until=lambda c, t=text: (
                    (c["metadata"].get("annotations") or {}).get(  # type: ignore[misc]
                        "multikueue.x-k8s.io/credentials-expire-at"
                    )
                    == t
                ),
                what=f"{short}'s expiry on its MultiKueueCluster",
            )
            assert h.manager is not None
            sample = h.manager.metrics.registry.get_sample_value(
                "multikueue_worker_credentials_expiry_timestamp_seconds",
                {"cluster": h.name(short), "renewable": "false"},
            )
            assert sample == expires, (short, sample, expires)
    finally:
        await rbac.delete_cluster_role_binding(binding)
