"""The shipped manifests: accepted by a real API server, and their RBAC is exactly enough to dispatch a run."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anyio
import yaml
from kubernetes_asyncio import client as k8s_client

from multikueue.config import Configuration, parse_configuration
from multikueue.endpoints import Serving
from multikueue.kube.addresses import MULTIKUEUE_CLUSTERS, WORKLOADS, GroupVersionKind, Resource
from multikueue.kube.client import ApiClient, api_client_from_kubeconfig
from multikueue.kube.events import record
from multikueue.kube.resources import Objects
from multikueue.labels import WORKER_IDENTITY_ANNOTATION
from multikueue.owners import workload_name
from multikueue.process import LeaderElectionSettings, Process
from multikueue.reload import ConfigSource, load_configuration
from multikueue_testbed import TestBed, kueue, scrape
from multikueue_testbed.accounts import mint_service_account_kubeconfig
from multikueue_testbed.client import k8s
from multikueue_testbed.objects import pipelinerun, running_status
from multikueue_testbed.testbed import free_port
from multikueue_testbed.waiting import eventually, wait_until

CONFIG = Path(__file__).parents[2] / "config"
SYSTEM = "multikueue-system"
PIPELINERUNS = Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun")


async def kubectl(bed: TestBed, cluster: str, *args: str) -> str:
    assert bed.binaries.kubectl is not None, "kubectl is part of the test bed's binaries"
    argv = [str(bed.binaries.kubectl), "--kubeconfig", str(bed.kubeconfig_path), "--context", cluster, *args]
    result = await anyio.run_process(argv, check=False)
    output = result.stdout.decode() + result.stderr.decode()
    assert result.returncode == 0, f"kubectl {' '.join(args)} failed:\n{output}"
    return output


@contextlib.asynccontextmanager
async def _as_the_shipped_controller(
    bed: TestBed, manager_api: ApiClient, tmp_path: Path
) -> AsyncIterator[tuple[ApiClient, Configuration, ConfigSource]]:
    """A client acting as the shipped ``multikueue-controller`` ServiceAccount, and the configuration it reads."""
    controller = await mint_service_account_kubeconfig(
        manager_api, bed.cluster("manager"), namespace=SYSTEM, name="multikueue-controller"
    )
    async with await api_client_from_kubeconfig(controller, temp_dir=tmp_path) as restricted:
        source = ConfigSource(SYSTEM, "multikueue-config", "controller_manager_config.yaml")
        yield restricted, await load_configuration(restricted, source.namespace, source.name, source.key), source


async def test_the_manifests_pass_server_side_dry_run(testbed: TestBed) -> None:
    # A dry run persists nothing, so the namespace the other objects live in must exist for real first.
    for cluster, kustomization in (
        ("manager", "manager"),
        ("worker1", "worker"),
        ("manager", "integration"),
        ("worker2", "worker-integration"),
    ):
        await kubectl(testbed, cluster, "apply", "--server-side", "-f", str(CONFIG / "manager" / "namespace.yaml"))
        output = await kubectl(
            testbed, cluster, "apply", "--server-side", "--dry-run=server", "-k", str(CONFIG / kustomization)
        )
        assert "(server dry run)" in output
    # The optional Role for token renewal (its Secrets named by the operator), beside the manager's objects.
    output = await kubectl(testbed, "manager", "apply", "--server-side", "--dry-run=server", "-f",
                           str(CONFIG / "manager" / "token-renewal.yaml"))  # fmt: skip
    assert "role.rbac.authorization.k8s.io/multikueue-controller-token-renewal serverside-applied" in output, output
    manager_objects = await kubectl(testbed, "manager", "kustomize", str(CONFIG / "manager"))
    kinds = sorted(d["kind"] for d in yaml.safe_load_all(manager_objects) if d)
    assert kinds == sorted(
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRole",  # multikueue-metrics-reader
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
            "ConfigMap",
            "Deployment",
            "PodDisruptionBudget",  # a drain evicts one replica at a time
            "Service",
        ]
    )


async def test_the_shipped_rbac_is_exactly_enough_to_dispatch(
    testbed: TestBed,
    namespace: str,
    manager_api: ApiClient,
    worker1_api: ApiClient,
    worker2_api: ApiClient,
    tmp_path: Path,
) -> None:
    await kubectl(testbed, "manager", "apply", "--server-side", "-k", str(CONFIG / "manager"))
    workers = {}
    for worker, api in (("worker1", worker1_api), ("worker2", worker2_api)):
        await kubectl(testbed, worker, "apply", "--server-side", "-k", str(CONFIG / "worker"))
        workers[worker] = await mint_service_account_kubeconfig(
            api, testbed.cluster(worker), namespace=SYSTEM, name="multikueue-dispatcher"
        )
    names = await kueue.multikueue_setup(
        manager_api,
        namespace=SYSTEM,
        prefix=namespace,
        workers=workers,
        controller_name="multikueue.x-k8s.io/external-dispatcher",
    )
    try:
        async with (
            _as_the_shipped_controller(testbed, manager_api, tmp_path) as (restricted, config, source),
            anyio.create_task_group() as tg,
        ):
            # Everything below runs as the shipped ServiceAccounts: the ConfigMap, the Lease, the Secrets, the
            # manager's objects, and (through the minted kubeconfigs) both workers.
            manager = Process(restricted, config, temp_dir=tmp_path / "certs", config_source=source,
                                  serving=Serving(metrics=("127.0.0.1", 0)))  # fmt: skip
            election = LeaderElectionSettings(SYSTEM, "multikueue-dispatcher", f"rbac-{namespace}", 15, 10, 2)
            tg.start_soon(manager.run_as_leader, election)
            with anyio.fail_after(60):
                await manager.started.wait()
            await _dispatch_one(testbed, namespace, names, manager_api, worker2_api)
            await _invalid_edit_is_reported(manager_api, source)
            # /metrics as the shipped identity serves it: it may review a scraper's token and access (a 500
            # without the rules), and the shipped multikueue-metrics-reader lets a bound scraper in.
            assert manager.endpoints is not None
            assert manager.endpoints.metrics_port is not None
            token = await scrape.metrics_reader_token(manager_api, namespace=namespace)
            assert "multikueue_workloads_dispatched_total" in await scrape.metrics(
                manager.endpoints.metrics_port, token
            )
            tg.cancel_scope.cancel()
    finally:
        await kueue.multikueue_teardown(manager_api, names)
        # A managedBy PipelineRun left behind would be placed by a later test's direct-mode controller.
        await k8s_client.CustomObjectsApi(k8s(manager_api)).delete_collection_namespaced_custom_object(
            "tekton.dev", "v1", namespace, "pipelineruns"
        )


async def test_a_worker_identity_the_controller_may_not_write_yet_is_written_once_it_may(
    testbed: TestBed, namespace: str, manager_api: ApiClient, worker1_api: ApiClient, tmp_path: Path
) -> None:
    """The identity write is retried with the pass until it lands. Seen on kind: a first write that met a
    conflict was never made again, as it was only tried when the connection was made. Here the first writes are
    refused by RBAC (the shipped ClusterRole without ``patch`` on MultiKueueClusters), then allowed."""
    await kubectl(testbed, "manager", "apply", "--server-side", "-k", str(CONFIG / "manager"))
    await kubectl(testbed, "worker1", "apply", "--server-side", "-k", str(CONFIG / "worker"))
    worker = await mint_service_account_kubeconfig(
        worker1_api, testbed.cluster("worker1"), namespace=SYSTEM, name="multikueue-dispatcher"
    )
    rbac: Any = k8s_client.RbacAuthorizationV1Api(k8s(manager_api))
    role = await rbac.read_cluster_role("multikueue-controller")
    for rule in role.rules:
        if "multikueueclusters" in (rule.resources or []):
            rule.verbs = [v for v in rule.verbs if v != "patch"]
    await rbac.replace_cluster_role("multikueue-controller", role)
    names = await kueue.multikueue_setup(manager_api, namespace=SYSTEM, prefix=namespace, workers={"worker1": worker},
                                         controller_name="multikueue.x-k8s.io/external-dispatcher")  # fmt: skip
    clusters = Objects(manager_api, MULTIKUEUE_CLUSTERS)
    try:
        async with (
            _as_the_shipped_controller(testbed, manager_api, tmp_path) as (restricted, config, _),
            anyio.create_task_group() as tg,
        ):
            manager = Process(restricted, config, temp_dir=tmp_path / "certs")
            tg.start_soon(manager.run)
            with anyio.fail_after(60):
                await manager.started.wait()

            def connected() -> bool:
                reconciler = manager.generation.cluster_reconciler
                connection = reconciler.connections.get(names["worker1"]) if reconciler else None
                return bool(connection and connection.connected and connection.identity)

            await wait_until(connected, timeout=60, what="worker1 connected")
            await _restore_rbac(testbed)  # allowed now
            recorded = await eventually(
                lambda: clusters.get(names["worker1"]),
                until=lambda c: WORKER_IDENTITY_ANNOTATION in ((c or {}).get("metadata", {}).get("annotations") or {}),
                timeout=60,
                what="the worker's identity recorded once the write is allowed",
            )
            kube_system = await k8s_client.CoreV1Api(k8s(worker1_api)).read_namespace("kube-system")
            assert recorded is not None
            assert recorded["metadata"]["annotations"][WORKER_IDENTITY_ANNOTATION] == kube_system.metadata.uid
            tg.cancel_scope.cancel()
    finally:
        await _restore_rbac(testbed)
        await kueue.multikueue_teardown(manager_api, names)


async def _restore_rbac(bed: TestBed) -> None:
    """The shipped ClusterRole again (taking the rules back from the test's own edit)."""
    await kubectl(bed, "manager", "apply", "--server-side", "--force-conflicts", "-k", str(CONFIG / "manager"))


async def _invalid_edit_is_reported(manager_api: ApiClient, source: ConfigSource) -> None:
    """The ConfigMap watch works as the shipped ServiceAccount: an invalid edit is reported on the ConfigMap."""
    core = k8s_client.CoreV1Api(k8s(manager_api))
    original = (await core.read_namespaced_config_map(source.name, source.namespace)).data[source.key]
    await core.patch_namespaced_config_map(source.name, source.namespace, {"data": {source.key: "multiKueue: []"}})
    try:
        await eventually(
            lambda: core.list_namespaced_event(source.namespace, field_selector=f"involvedObject.name={source.name}"),
            until=lambda e: any(x.reason == "InvalidConfiguration" for x in e.items),
            timeout=60,
            what="InvalidConfiguration on the ConfigMap",
        )
    finally:
        await core.patch_namespaced_config_map(source.name, source.namespace, {"data": {source.key: original}})


async def _dispatch_one(
    bed: TestBed, namespace: str, names: dict[str, str], manager_api: ApiClient, worker2_api: ApiClient
) -> None:
    runs, workloads = Objects(manager_api, PIPELINERUNS), Objects(manager_api, WORKLOADS)
    body = pipelinerun("least-privilege")
    body["spec"]["managedBy"] = kueue.MANAGED_BY
    run = await runs.create(body, namespace)
    workload = await workloads.create(kueue.workload_for(run), namespace)
    wl_name = workload["metadata"]["name"]
    await kueue.reserve_quota(manager_api, wl_name, namespace, checks=[names["check"]])

    async def copy_on_worker2() -> Any:
        return await Objects(worker2_api, WORKLOADS).get(wl_name, namespace)

    await eventually(copy_on_worker2, timeout=60, what="copy on worker2")
    await kueue.admit(worker2_api, wl_name, namespace)
    worker_runs = Objects(worker2_api, PIPELINERUNS)
    remote = await eventually(lambda: worker_runs.get("least-privilege", namespace), timeout=60, what="run on worker2")
    # The worker's Warning Events reach the manager object through the shipped worker RBAC (list, watch events).
    await record(worker2_api, remote, type_="Warning", reason="Throttled", message="slow down", component="test")
    await eventually(
        lambda: k8s_client.CoreV1Api(k8s(manager_api)).list_namespaced_event(
            namespace, field_selector="involvedObject.name=least-privilege"
        ),
        until=lambda e: any(x.message == 'worker "' + names["worker2"] + '": Throttled: slow down' for x in e.items),
        timeout=60,
        what="the worker's warning on the manager PipelineRun",
    )
    await worker_runs.patch_status("least-privilege", {"status": running_status("least-privilege")}, namespace)
    await eventually(
        lambda: runs.get("least-privilege", namespace),
        until=lambda r: r is not None and "status" in r,
        timeout=60,
        what="mirrored",
    )
    await kueue.finish(worker2_api, wl_name, namespace)
    finished = await eventually(
        lambda: workloads.get(wl_name, namespace),
        until=lambda w: w is not None and any(c["type"] == "Finished" for c in w["status"]["conditions"]),
        timeout=60,
        what="finished on the manager",
    )
    assert finished is not None
    state = next(c for c in finished["status"]["admissionChecks"] if c["name"] == names["check"])
    assert state["state"] == "Ready"
    await eventually(
        lambda: worker_runs.get("least-privilege", namespace),
        until=lambda r: r is None,
        timeout=60,
        what="run removed from worker2",
    )


async def test_the_shipped_integration_rbac_is_exactly_enough_to_queue(
    testbed: TestBed, namespace: str, worker1_api: ApiClient, tmp_path: Path
) -> None:
    """config/integration applied for real (on worker1, as ``--role worker`` would run there); the webhook's
    certificate Secret and caBundle, the Workload's life and the object's patches all as the shipped account."""
    await kubectl(testbed, "worker1", "apply", "--server-side", "-k", str(CONFIG / "integration"))
    admission: Any = k8s_client.AdmissionregistrationV1Api(k8s(worker1_api))
    port = free_port()
    # The shipped webhook points at a Service (no pods here): aim it at this process, for this test's namespace only.
    aimed = {"webhooks": [{
        "name": "hold.multikueue.x-k8s.io",
        "clientConfig": {"url": f"https://127.0.0.1:{port}/mutate", "service": None},
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}]}  # fmt: skip
    await admission.patch_mutating_webhook_configuration(
        "multikueue-mutating-webhook", aimed, _content_type="application/strategic-merge-patch+json"
    )
    account = await mint_service_account_kubeconfig(
        worker1_api, testbed.cluster("worker1"), namespace=SYSTEM, name="multikueue-controller"
    )
    text = (CONFIG.parent / "examples" / "tekton" / "integration-config.yaml").read_text()
    document = yaml.safe_load(text)
    document["dispatcher"]["webhook"] = {"host": "127.0.0.1", "port": port, "hosts": ["127.0.0.1"]}
    config = parse_configuration(yaml.safe_dump(document))
    runs, workloads = Objects(worker1_api, PIPELINERUNS), Objects(worker1_api, WORKLOADS)
    try:
        async with (
            await api_client_from_kubeconfig(account, temp_dir=tmp_path) as restricted,
            anyio.create_task_group() as tg,
        ):
            manager = Process(restricted, config, role="worker")
            tg.start_soon(manager.run)
            with anyio.fail_after(60):
                await manager.started.wait()
            body = pipelinerun("queued", labels={"kueue.x-k8s.io/queue-name": "user-queue"})
            created = await eventually(lambda: runs.create(body, namespace), timeout=60, what="admitted by the webhook")
            assert created["spec"]["status"] == "PipelineRunPending"
            name = workload_name("queued", created["metadata"]["uid"], GroupVersionKind("tekton.dev", "v1",
                                                                                     "PipelineRun"))  # fmt: skip
            await eventually(lambda: workloads.get(name, namespace), timeout=60, what="its Workload")
            await kueue.admit(worker1_api, name, namespace)
            await eventually(lambda: runs.get("queued", namespace), until=lambda r: r is not None
                             and "status" not in r["spec"], timeout=60, what="released")  # fmt: skip
            await runs.delete("queued", namespace)
            await eventually(lambda: workloads.get(name, namespace), until=lambda w: w is None, timeout=60,
                             what="its Workload deleted")  # fmt: skip
            tg.cancel_scope.cancel()
    finally:
        await admission.delete_mutating_webhook_configuration("multikueue-mutating-webhook")
