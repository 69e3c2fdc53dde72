"""The test bed is real: real kube-apiservers, real CRDs, real RBAC, real watch semantics and real failures."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from multikueue.kube.addresses import Resource
from multikueue.kube.client import ApiClient, Timeouts, api_client_from_kubeconfig
from multikueue.kube.errors import Conflict, Gone, NotFound, Unreachable
from multikueue.kube.resources import Objects
from multikueue_testbed import KUBERNETES_VERSION, TestBed
from multikueue_testbed.accounts import mint_service_account_kubeconfig
from multikueue_testbed.client import k8s
from multikueue_testbed.objects import PIPELINERUN, pipelinerun, running_status
from multikueue_testbed.waiting import eventually

MERGE_PATCH = "application/merge-patch+json"


async def test_three_separate_clusters_at_the_pinned_version(
    namespace: str, manager_api: ApiClient, worker1_api: ApiClient, worker2_api: ApiClient
) -> None:
    for api in (manager_api, worker1_api, worker2_api):
        version = await k8s_client.VersionApi(k8s(api)).get_code()
        assert version.git_version == f"v{KUBERNETES_VERSION}"

    await k8s_client.CoreV1Api(k8s(worker1_api)).create_namespaced_config_map(
        namespace, {"metadata": {"name": "only-on-worker1"}}
    )
    for api in (manager_api, worker2_api):
        with pytest.raises(NotFound) as e:  # kube/'s client raises what the code means
            await api.request("GET", f"/api/v1/namespaces/{namespace}/configmaps/only-on-worker1")
        assert e.value.status == 404
    runs = Objects(worker1_api, Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun"))
    await runs.create(pipelinerun("twice"), namespace)
    with pytest.raises(Conflict):
        await runs.create(pipelinerun("twice"), namespace)


async def test_real_pipelinerun_crd_prunes_unknown_spec_fields(namespace: str, worker1_api: ApiClient) -> None:
    co = k8s_client.CustomObjectsApi(k8s(worker1_api))
    body = pipelinerun("pruned", notAField="dropped by the structural schema")
    body["spec"]["taskRunTemplate"] = {"serviceAccountName": "default", "alsoNotAField": True}
    await co.create_namespaced_custom_object(**PIPELINERUN, namespace=namespace, body=body)

    stored = await co.get_namespaced_custom_object(**PIPELINERUN, namespace=namespace, name="pruned")
    assert "notAField" not in stored["spec"]
    assert stored["spec"]["taskRunTemplate"] == {"serviceAccountName": "default"}
    assert stored["spec"]["pipelineSpec"]["tasks"][0]["name"] == "echo"
    # Only the storage version is served: there is no conversion webhook to translate v1beta1.
    with pytest.raises(ApiException) as e:
        await co.get_namespaced_custom_object("tekton.dev", "v1beta1", namespace, "pipelineruns", "pruned")
    assert e.value.status == 404


async def test_status_merge_patch_goes_through_the_status_subresource(namespace: str, worker1_api: ApiClient) -> None:
    co = k8s_client.CustomObjectsApi(k8s(worker1_api))
    await co.create_namespaced_custom_object(**PIPELINERUN, namespace=namespace, body=pipelinerun("run"))

    # A status sent to the main resource is ignored once the CRD has a status subresource.
    await co.patch_namespaced_custom_object(  # type: ignore[call-arg]  # _content_type: the library's documented merge patch
        **PIPELINERUN,
        namespace=namespace,
        name="run",
        body={"status": {"startTime": "2026-01-01T00:00:00Z"}},
        _content_type=MERGE_PATCH,
    )
    assert "status" not in await co.get_namespaced_custom_object(**PIPELINERUN, namespace=namespace, name="run")

    await co.patch_namespaced_custom_object_status(  # type: ignore[call-arg]  # _content_type: the library's documented merge patch
        **PIPELINERUN,
        namespace=namespace,
        name="run",
        body={"status": running_status("run")},
        _content_type=MERGE_PATCH,
    )
    stored = await co.get_namespaced_custom_object(**PIPELINERUN, namespace=namespace, name="run")
    assert stored["status"]["conditions"][0]["reason"] == "Running"
    assert stored["status"]["childReferences"][0]["name"] == "run-echo"
    generation = stored["metadata"]["generation"]

    # null deletes a key in a merge patch; the status write does not bump the generation.
    await co.patch_namespaced_custom_object_status(  # type: ignore[call-arg]  # _content_type: the library's documented merge patch
        **PIPELINERUN,
        namespace=namespace,
        name="run",
        body={"status": {"childReferences": None}},
        _content_type=MERGE_PATCH,
    )
    stored = await co.get_namespaced_custom_object(**PIPELINERUN, namespace=namespace, name="run")
    assert "childReferences" not in stored["status"]
    assert stored["status"]["startTime"] == "2026-08-01T10:00:01Z"
    assert stored["metadata"]["generation"] == generation

    # The client pitfall this project guards against: a dict body without an explicit content type
    # goes out as a JSON Patch, which the server refuses.
    with pytest.raises(ApiException) as e:
        await co.patch_namespaced_custom_object_status(
            **PIPELINERUN, namespace=namespace, name="run", body={"status": {"startTime": None}}
        )
    assert e.value.status in (400, 422)


async def test_watch_from_a_list_resource_version_delivers_changes_and_bookmarks(
    namespace: str, worker1_api: ApiClient
) -> None:
    co = k8s_client.CustomObjectsApi(k8s(worker1_api))
    selector = "watched=yes"
    listed = await co.list_namespaced_custom_object(**PIPELINERUN, namespace=namespace, label_selector=selector)
    list_rv = listed["metadata"]["resourceVersion"]
    # Created after the list and before the watch: a watch from the list's RV must not miss it.
    await co.create_namespaced_custom_object(
        **PIPELINERUN, namespace=namespace, body=pipelinerun("seen", labels={"watched": "yes"})
    )

    events: list[dict[str, Any]] = []
    first_event = anyio.Event()
    unseen_rv = 0

    async def change_things() -> None:
        nonlocal unseen_rv
        with anyio.fail_after(5):
            await first_event.wait()
        await co.patch_namespaced_custom_object_status(  # type: ignore[call-arg]  # _content_type: the library's documented merge patch
            **PIPELINERUN,
            namespace=namespace,
            name="seen",
            body={"status": running_status("seen")},
            _content_type=MERGE_PATCH,
        )
        # An object outside the selector moves the cache forward without an event for this watch:
        # a bookmark is how the server tells the client about that progress.
        other = await co.create_namespaced_custom_object(**PIPELINERUN, namespace=namespace, body=pipelinerun("unseen"))
        unseen_rv = int(other["metadata"]["resourceVersion"])

    async with anyio.create_task_group() as tg:
        tg.start_soon(change_things)
        async with watch.Watch() as w:
            stream = w.stream(
                co.list_namespaced_custom_object,
                **PIPELINERUN,
                namespace=namespace,
                label_selector=selector,
                resource_version=list_rv,
                allow_watch_bookmarks=True,
                timeout_seconds=6,
                _request_timeout=(5, 20),
            )
            async for event in stream:
                events.append(event)
                first_event.set()

    kinds = [(e["type"], e["raw_object"]["metadata"].get("name")) for e in events]
    assert kinds[:2] == [("ADDED", "seen"), ("MODIFIED", "seen")], kinds
    assert ("ADDED", "unseen") not in kinds
    bookmarks = [int(e["raw_object"]["metadata"]["resourceVersion"]) for e in events if e["type"] == "BOOKMARK"]
    assert bookmarks, f"no bookmark in {kinds}"
    assert max(bookmarks) >= unseen_rv


async def _watch_once(co: k8s_client.CustomObjectsApi, namespace: str, rv: str) -> list[dict[str, Any]]:
    async with watch.Watch() as w:
        stream = w.stream(
            co.list_namespaced_custom_object,
            **PIPELINERUN,
            namespace=namespace,
            resource_version=rv,
            allow_watch_bookmarks=True,
            timeout_seconds=2,
            _request_timeout=(5, 10),
        )
        return [e async for e in stream]


async def _gone_then_relist(bed: TestBed, cluster: str, restart: bool) -> None:
    namespace = f"compaction-{int(time.time() * 1000)}"
    async with await api_client_from_kubeconfig(bed.cluster(cluster).kubeconfig) as api:
        co = k8s_client.CustomObjectsApi(k8s(api))
        await k8s_client.CoreV1Api(k8s(api)).create_namespace({"metadata": {"name": namespace}})
        old_rv = (await co.list_namespaced_custom_object(**PIPELINERUN, namespace=namespace))["metadata"][
            "resourceVersion"
        ]
        for i in range(3):
            await co.create_namespaced_custom_object(**PIPELINERUN, namespace=namespace, body=pipelinerun(f"r{i}"))
        compacted = bed.compact_etcd()
        assert compacted > int(old_rv)
        if restart:
            bed.stop_apiserver(cluster)
            bed.start_apiserver(cluster)

        with pytest.raises(ApiException) as gone:
            await _watch_once(co, namespace, old_rv)
        assert gone.value.status == 410
        source = Objects(api, Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun")).source(namespace=namespace)
        with pytest.raises(Gone):  # what the informer relists on, from kube/'s source
            async for _ in source.watch(resource_version=old_rv, timeout_seconds=2):
                pass

        # Recovery is a fresh list (the state now) and a watch from the list's resourceVersion.
        relisted = await co.list_namespaced_custom_object(**PIPELINERUN, namespace=namespace)
        assert sorted(i["metadata"]["name"] for i in relisted["items"]) == ["r0", "r1", "r2"]
        await co.create_namespaced_custom_object(**PIPELINERUN, namespace=namespace, body=pipelinerun("after"))
        events = await _watch_once(co, namespace, relisted["metadata"]["resourceVersion"])
        assert [(e["type"], e["raw_object"]["metadata"]["name"]) for e in events if e["type"] != "BOOKMARK"] == [
            ("ADDED", "after")
        ]


@pytest.fixture(scope="module")
def uncached_bed() -> Any:
    """One cluster whose apiserver serves watches straight from etcd, so compaction alone expires them."""
    from multikueue_testbed import crds

    with TestBed(clusters=("uncached",), apiserver_args=["--watch-cache=false"]) as bed:

        async def install() -> None:
            async with await api_client_from_kubeconfig(bed.cluster("uncached").kubeconfig) as api:
                await crds.install_crds(api, crds.tekton_crds())

        anyio.run(install)
        yield bed


async def test_watch_expired_by_etcd_compaction_recovers_by_relisting(uncached_bed: TestBed) -> None:
    await _gone_then_relist(uncached_bed, "uncached", restart=False)


async def test_watch_expired_after_compaction_and_apiserver_restart_recovers_by_relisting(
    testbed: TestBed,
) -> None:
    # With the watch cache on (the production default) history survives compaction in memory, until the
    # apiserver restarts: then the cache starts after the compacted revision and old watches get 410.
    await _gone_then_relist(testbed, "worker2", restart=True)


async def test_worker_apiserver_lost_then_back(testbed: TestBed, namespace: str, tmp_path: Any) -> None:
    worker2 = testbed.cluster("worker2")
    timeout = Timeouts(total=3, connect=2)
    async with await api_client_from_kubeconfig(worker2.kubeconfig, timeout=timeout, temp_dir=tmp_path) as api:
        survivor_path = f"/api/v1/namespaces/{namespace}/configmaps/survivor"
        await api.request("POST", f"/api/v1/namespaces/{namespace}/configmaps", body={"metadata": {"name": "survivor"}})

        # Hung (SIGSTOP, like a partition): the client's default timeout ends the request, no hang.
        testbed.pause_apiserver("worker2")
        try:
            with anyio.fail_after(10):
                with pytest.raises(Unreachable):
                    await api.request("GET", survivor_path)
        finally:
            testbed.resume_apiserver("worker2")

        # Crashed (SIGKILL): connections are refused at once.
        testbed.stop_apiserver("worker2", kill=True)
        with anyio.fail_after(10):
            with pytest.raises(Unreachable, match="Connection refused"):
                await api.request("GET", survivor_path)

        testbed.start_apiserver("worker2", wait=False)
        survivor = await eventually(lambda: api.request("GET", survivor_path), timeout=120, what="worker2 back")
        assert survivor["metadata"]["name"] == "survivor"  # state lives in etcd, not in the apiserver
    # Left as the next test expects a worker: custom resources served again too (their storage answers 429
    # "storage is (re)initializing" for a while after the core ones).
    await eventually(lambda: anyio.to_thread.run_sync(worker2.ready), until=bool, timeout=120, what="worker2 ready")


async def test_restricted_service_account_gets_only_what_rbac_grants(
    testbed: TestBed, namespace: str, worker1_api: ApiClient, tmp_path: Any
) -> None:
    kubeconfig = await mint_service_account_kubeconfig(
        worker1_api, testbed.cluster("worker1"), namespace=namespace, name="reader"
    )
    async with await api_client_from_kubeconfig(kubeconfig, temp_dir=tmp_path) as restricted:
        with pytest.raises(ApiException) as e:
            await k8s_client.CoreV1Api(k8s(restricted)).list_namespaced_config_map(namespace)
        assert e.value.status == 403

        rbac = k8s_client.RbacAuthorizationV1Api(k8s(worker1_api))
        await rbac.create_namespaced_role(
            namespace,
            {
                "metadata": {"name": "configmap-reader"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
            },
        )
        await rbac.create_namespaced_role_binding(
            namespace,
            {
                "metadata": {"name": "reader"},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "configmap-reader",
                },
                "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
            },
        )
        await eventually(lambda: k8s_client.CoreV1Api(k8s(restricted)).list_namespaced_config_map(namespace))
        with pytest.raises(ApiException) as e:
            await k8s_client.CoreV1Api(k8s(restricted)).list_namespaced_secret(namespace)
        assert e.value.status == 403

    # Each cluster has its own token issuer: worker1's token means nothing to worker2.
    foreign = {
        **kubeconfig,
        "clusters": [
            {
                **kubeconfig["clusters"][0],
                "cluster": {**kubeconfig["clusters"][0]["cluster"], "server": testbed.cluster("worker2").url},
            }
        ],
    }
    async with await api_client_from_kubeconfig(foreign, temp_dir=tmp_path) as stranger:
        with pytest.raises(ApiException) as e:
            await k8s_client.CoreV1Api(k8s(stranger)).list_namespaced_config_map(namespace)
        assert e.value.status == 401


def test_an_api_server_port_taken_before_it_binds_moves_to_another(monkeypatch: pytest.MonkeyPatch) -> None:
    """``free_port`` hands out a port nothing listens on, and another process may take it before the API server
    binds it (seen once in CI: a client's ephemeral port). At start the bed then moves that server to another
    port. Here the first port handed out is one this test holds."""
    import socket

    from multikueue_testbed import testbed as module

    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    taken = int(holder.getsockname()[1])
    real = module.free_port
    handed: list[int] = []

    def taken_first() -> int:
        port = taken if not handed else real()
        handed.append(port)
        return port

    monkeypatch.setattr(module, "free_port", taken_first)
    try:
        with TestBed(clusters=("solo",), progress=lambda message: None) as bed:
            solo = bed.cluster("solo")
            assert solo.port != taken
            assert solo.ready()
    finally:
        holder.close()
    assert handed[0] == taken
