"""With real Kueue on the manager and both workers and the real Tekton controller on the workers, whose TaskRun pods
kube-scheduler binds to a kwok node that runs them: quota, admission checks and worker admission are Kueue's own,
runs are Tekton's own, and Workloads are made by this project's integration (the documented stand-in for
tekton-kueue, which is not built here). The tests only submit, cancel and look."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import anyio
import pytest
import yaml
from kubernetes_asyncio import client as k8s_client

from e2e.interop.conftest import ACCESS_PROVIDER, Fleet
from multikueue.kube.addresses import CLUSTER_PROFILES, MULTIKUEUE_CLUSTERS, WORKLOADS, GroupVersionKind, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue.owners import workload_name
from multikueue_testbed import kueue
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.dispatcher import running
from multikueue_testbed.interop import KUEUE_NAMESPACE, start_tekton_kueue_controller
from multikueue_testbed.objects import pipelinerun
from multikueue_testbed.profiles import profile_status, put_cluster_profile, requests_logged
from multikueue_testbed.waiting import eventually, wait_until

CONTROLLER = "multikueue.x-k8s.io/external-dispatcher"
WORKER_SELECTOR = "multikueue.x-k8s.io/worker-selector"
PR = GroupVersionKind("tekton.dev", "v1", "PipelineRun")
PIPELINERUNS = Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun")
KUEUE_API = "kueue.x-k8s.io/v1beta2"
EXAMPLES = Path(__file__).parents[2] / "examples" / "tekton"
CONFIG = (EXAMPLES / "integration-config.yaml").read_text()
EXAMPLE = EXAMPLES / "pipelinerun.yaml"
QUEUE = yaml.safe_load(EXAMPLE.read_text())["metadata"]["labels"]["kueue.x-k8s.io/queue-name"]
DONE = {"startTime": "2026-08-01T10:00:01Z", "completionTime": "2026-08-01T10:05:00Z",
        "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded",
                        "message": "Tasks Completed: 1 (Failed: 0, Cancelled 0), Skipped: 0",
                        "lastTransitionTime": "2026-08-01T10:05:00Z"}]}  # fmt: skip


def _config(integration: str, *, access_provider: dict[str, Any] | None = None) -> str:
    document = yaml.safe_load(CONFIG)
    if access_provider is not None:  # the manager's Kueue's own access provider, word for word
        document["multiKueue"]["clusterProfile"] = {"accessProviders": [access_provider]}
    if integration == "tekton-kueue":  # tekton-kueue makes the Workloads, here and on the workers
        del document["dispatcher"]["adapters"][0]["integration"]
    document["dispatcher"].pop("webhook")  # the manager object is managedBy: held on first sight, exactly
    # Kueue's own MultiKueueCluster controller reconciles every MultiKueueCluster and reads kubeconfig Secrets from
    # its namespace: this controller reads the same ones there, so the two agree on each cluster's Active condition.
    document["dispatcher"]["namespace"] = KUEUE_NAMESPACE
    document["multiKueue"].update(gcInterval="2s", workerLostTimeout="30s")
    document["dispatcher"]["inadmissibleTimeout"] = "5s"  # a run every worker's Kueue refuses gives up
    return yaml.safe_dump(document)


async def _queues(api: ApiClient, namespace: str, *, check: str | None) -> None:
    """A flavor, a ClusterQueue covering the synthetic requests (with the admission check on the manager), and
    the example's LocalQueue. Cluster-scoped names carry the namespace, so tests do not share quota."""
    await kueue.queues(api, namespace, local_queue=QUEUE, cluster_queue=f"{namespace}-cq",
                       flavor=f"{namespace}-default", check=check,
                       quota={"cpu": "8", "memory": "16Gi", "tekton.dev/pipelineruns": "5"},
                       namespace_selector={"matchLabels": {"kubernetes.io/metadata.name": namespace}})  # fmt: skip


def _controller(api: ApiClient, text: str, role: Literal["manager", "worker"], tmp: Path) -> Any:
    return running(api, text, role=role, temp_dir=tmp)


@pytest.fixture
async def namespace(clients: dict[str, ApiClient]) -> str:
    name = f"interop-{uuid.uuid4().hex[:6]}"
    for api in clients.values():
        await k8s_client.CoreV1Api(k8s(api)).create_namespace(raw_body({"metadata": {"name": name}}))
    return name


@pytest.fixture(params=["integration", "tekton-kueue"])
async def dispatching(request: pytest.FixtureRequest, clients: dict[str, ApiClient], namespace: str, fleet: Fleet,
                      tmp_path: Path) -> AsyncIterator[str]:  # fmt: skip
    """Queues on every cluster, the MultiKueue objects on the manager, and this controller on the manager; the
    PipelineRun integration on all three clusters is either this project's (``--role worker`` on the workers) or
    tekton-kueue's controller. Yields which."""
    async with _dispatching(clients, namespace, fleet, tmp_path, request.param):
        yield request.param


@pytest.fixture
async def dispatching_through_profiles(
    clients: dict[str, ApiClient], namespace: str, fleet: Fleet, tmp_path: Path
) -> AsyncIterator[str]:
    """As ``dispatching`` with this project's integration, but each worker's MultiKueueCluster names a ClusterProfile
    (in Kueue's namespace) that the manager's Kueue and this controller both reach through the same access
    provider."""
    sources = {}
    for worker in ("worker1", "worker2"):
        profile = f"{namespace}-{worker}"
        status = profile_status(ACCESS_PROVIDER, fleet.bed.cluster(worker),
                                extension={"credentials": str(fleet.credentials[worker])})  # fmt: skip
        await put_cluster_profile(clients["manager"], KUEUE_NAMESPACE, profile, status)
        sources[worker] = {"clusterProfileRef": {"name": profile}}
    async with _dispatching(clients, namespace, fleet, tmp_path, "integration", sources=sources):
        yield "integration"
    for worker in ("worker1", "worker2"):
        await Objects(clients["manager"], CLUSTER_PROFILES).delete(f"{namespace}-{worker}", KUEUE_NAMESPACE)


@contextlib.asynccontextmanager
async def _dispatching(
    clients: dict[str, ApiClient], namespace: str, fleet: Fleet, tmp_path: Path, integration: str,
    *, sources: dict[str, Any] | None = None,
) -> AsyncIterator[None]:  # fmt: skip
    bed = fleet.bed
    names = await kueue.multikueue_setup(
        clients["manager"], namespace=KUEUE_NAMESPACE, prefix=namespace, controller_name=CONTROLLER,
        workers={w: bed.cluster(w).kubeconfig for w in ("worker1", "worker2")}, sources=sources,
    )  # fmt: skip
    await _queues(clients["manager"], namespace, check=names["check"])
    for worker in ("worker1", "worker2"):
        await _queues(clients[worker], namespace, check=None)
    text = _config(integration, access_provider=fleet.access_provider if sources else None)
    async with contextlib.AsyncExitStack() as stack:
        manager = await stack.enter_async_context(_controller(clients["manager"], text, "manager", tmp_path / "m"))
        if integration == "tekton-kueue":
            for runtime in fleet.runtimes.values():
                stack.callback(start_tekton_kueue_controller(runtime, fleet.tekton_kueue).stop)
        else:
            for worker in ("worker1", "worker2"):
                await stack.enter_async_context(_controller(clients[worker], text, "worker", tmp_path / worker))
        connections = manager.generation.cluster_reconciler.connections
        for worker in ("worker1", "worker2"):
            await wait_until(lambda w=worker: bool(connections.get(names[w]) and connections[names[w]].connected),  # type: ignore[misc]
                             timeout=60, what=f"{worker} connected")  # fmt: skip
        await _agreed_active(clients["manager"], names)
        yield
        await _agreed_active(clients["manager"], names)
    # Cluster-scoped: left behind, the next test's controller would find two MultiKueueClusters per worker.
    await kueue.multikueue_teardown(clients["manager"], names)


async def _agreed_active(api: ApiClient, names: dict[str, str]) -> None:
    """Both controllers write each MultiKueueCluster's Active condition (Kueue's for every cluster, this one's for
    those its checks use): with the same Secrets they agree, so the condition is True, with Kueue's own reason."""
    for worker in ("worker1", "worker2"):
        cluster = await eventually(lambda w=worker: Objects(api, MULTIKUEUE_CLUSTERS).get(names[w]),  # type: ignore[misc]
                                   until=lambda c: _condition(c, "Active").get("status") == "True", timeout=60,
                                   what=f"{worker} Active")  # fmt: skip
        assert _condition(cluster, "Active")["reason"] == "Active"


def _condition(obj: Any, kind: str) -> dict[str, Any]:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


async def _get(api: ApiClient, resource: Resource, name: str, namespace: str) -> Any:
    return await Objects(api, resource).get(name, namespace)


async def _submit(clients: dict[str, ApiClient], namespace: str, name: str, integration: str) -> tuple[Any, str]:
    """The Tekton example (examples/tekton/pipelinerun.yaml) on the manager, under ``name`` in ``namespace``."""
    body = yaml.safe_load(EXAMPLE.read_text())
    body["metadata"].update(name=name, namespace=namespace)
    if integration == "tekton-kueue":  # what tekton-kueue's webhook (multiKueueOverride) would have set
        body["spec"]["status"] = "PipelineRunPending"
    created = await Objects(clients["manager"], PIPELINERUNS).create(body, namespace)
    return created, workload_name(name, created["metadata"]["uid"], PR)


async def _running_on_a_worker(clients: dict[str, ApiClient], namespace: str, name: str, wl: str) -> str:
    """Real Kueue reserves quota on the manager; the copies race on both workers' real Kueue; one wins."""

    async def winner() -> str | None:
        for worker in ("worker1", "worker2"):
            run = await _get(clients[worker], PIPELINERUNS, name, namespace)
            if run is not None and "status" not in run["spec"]:
                return worker  # the copy, released by that worker's integration on its Kueue's admission
        return None

    worker = await eventually(winner, timeout=90, what=f"{name} released on a worker")
    assert worker is not None
    admitted = await eventually(lambda: _get(clients[worker], WORKLOADS, wl, namespace),
                                until=lambda w: bool(w["metadata"].get("ownerReferences")), timeout=60,
                                what="the prebuilt Workload adopted by the worker's integration")  # fmt: skip
    assert _condition(admitted, "Admitted")["status"] == "True"  # by that worker's Kueue
    assert admitted["metadata"]["ownerReferences"][0]["kind"] == "PipelineRun"
    listed = await k8s_client.CustomObjectsApi(k8s(clients[worker])).list_namespaced_custom_object(
        "kueue.x-k8s.io", "v1beta2", namespace, "workloads")  # fmt: skip
    assert [w["metadata"]["name"] for w in listed["items"]] == [wl]  # adopted, not a second one of its own
    manager_run = await eventually(lambda: _get(clients["manager"], PIPELINERUNS, name, namespace),
                                   until=lambda r: "status" not in r["spec"], timeout=90,
                                   what="the manager run released once Kueue admits its Workload")  # fmt: skip
    assert manager_run["spec"]["managedBy"] == kueue.MANAGED_BY
    return worker


async def _pods(api: ApiClient, namespace: str) -> list[Any]:
    return list((await k8s_client.CoreV1Api(k8s(api)).list_namespaced_pod(namespace)).items)


async def test_a_pipelinerun_runs_through_real_kueue_and_tekton_and_comes_back_finished(
    clients: dict[str, ApiClient], namespace: str, dispatching: str
) -> None:
    created, wl = await _submit(clients, namespace, "hello", dispatching)
    workload = await eventually(lambda: _get(clients["manager"], WORKLOADS, wl, namespace),
                                until=lambda w: _condition(w, "QuotaReserved").get("status") == "True", timeout=90,
                                what="quota reserved by the manager's Kueue")  # fmt: skip
    assert workload["status"]["admission"]["podSetAssignments"][0]["resourceUsage"]["cpu"] == "1"  # its annotation
    worker = await _running_on_a_worker(clients, namespace, "hello", wl)
    other = "worker2" if worker == "worker1" else "worker1"
    await eventually(lambda: _get(clients[other], WORKLOADS, wl, namespace), until=lambda w: w is None, timeout=60,
                     what="the losing copy removed")  # fmt: skip

    # Tekton on the winner: a TaskRun, its pod bound by kube-scheduler to the kwok node, which runs it.
    listed = await eventually(
        lambda: k8s_client.CustomObjectsApi(k8s(clients[worker])).list_namespaced_custom_object(
            "tekton.dev", "v1", namespace, "taskruns"),
        until=lambda found: bool(found["items"]), timeout=90, what="Tekton's TaskRun")  # fmt: skip
    assert [t["metadata"]["ownerReferences"][0]["name"] for t in listed["items"]] == ["hello"]
    scheduled = await eventually(lambda: _pods(clients[worker], namespace), timeout=90,
                                 until=lambda ps: bool(ps) and all(p.spec.node_name for p in ps),
                                 what="the TaskRun's pod, scheduled")  # fmt: skip
    assert {p.spec.node_name for p in scheduled} == {"kwok-node-0"}

    done = await eventually(lambda: _get(clients["manager"], PIPELINERUNS, "hello", namespace),
                            until=lambda r: _condition(r, "Succeeded").get("status") == "True", timeout=120,
                            what="Tekton's Succeeded on the manager object")  # fmt: skip
    assert _condition(done, "Succeeded")["reason"] == "Succeeded"
    assert done["status"]["childReferences"][0]["kind"] == "TaskRun"
    finished = await eventually(lambda: _get(clients["manager"], WORKLOADS, wl, namespace),
                                until=lambda w: _condition(w, "Finished").get("status") == "True", timeout=90,
                                what="the manager Workload finished")  # fmt: skip
    assert _condition(finished, "Finished")["reason"] == "Succeeded"
    for cluster in ("worker1", "worker2"):
        await eventually(lambda c=cluster: _get(clients[c], PIPELINERUNS, "hello", namespace),  # type: ignore[misc]
                         until=lambda r: r is None, timeout=90, what=f"nothing left on {cluster}")  # fmt: skip
        await eventually(lambda c=cluster: _get(clients[c], WORKLOADS, wl, namespace),  # type: ignore[misc]
                         until=lambda w: w is None, timeout=90, what=f"no Workload left on {cluster}")  # fmt: skip
    assert created["metadata"]["uid"] == done["metadata"]["uid"]


async def test_workers_reached_through_clusterprofiles_serve_real_kueue_and_this_dispatcher_alike(
    clients: dict[str, ApiClient], namespace: str, dispatching_through_profiles: str, fleet: Fleet
) -> None:
    # Both controllers connected through the profiles (``_agreed_active``: Kueue's reason on each cluster, True); a
    # run goes the whole way through them.
    _, wl = await _submit(clients, namespace, "profiled", dispatching_through_profiles)
    worker = await _running_on_a_worker(clients, namespace, "profiled", wl)
    done = await eventually(lambda: _get(clients["manager"], PIPELINERUNS, "profiled", namespace),
                            until=lambda r: _condition(r, "Succeeded").get("status") == "True", timeout=120,
                            what="Tekton's Succeeded on the manager object")  # fmt: skip
    assert done["status"]["childReferences"][0]["kind"] == "TaskRun"
    await eventually(lambda: _get(clients["manager"], WORKLOADS, wl, namespace),
                     until=lambda w: _condition(w, "Finished").get("status") == "True", timeout=90,
                     what="the manager Workload finished")  # fmt: skip
    # The one plugin ran for both controllers, with each profile's cluster and extension.
    log = Path(str(fleet.access_provider["execConfig"]["env"][0]["value"]))  # type: ignore[index]
    requests = requests_logged(log)
    assert fleet.bed.cluster(worker).url in {r["spec"]["cluster"]["server"] for r in requests}
    runners = {r["runBy"] for r in requests}
    assert "kueue" in runners, runners  # the manager's Kueue connected through the profiles itself
    assert any(r.startswith("python") for r in runners), runners  # and so did this controller


async def test_a_cancel_on_the_manager_cancels_the_run_on_its_worker(
    clients: dict[str, ApiClient], namespace: str, dispatching: str
) -> None:
    _, wl = await _submit(clients, namespace, "stop-me", dispatching)
    worker = await _running_on_a_worker(clients, namespace, "stop-me", wl)
    await eventually(lambda: _get(clients["manager"], PIPELINERUNS, "stop-me", namespace),
                     until=lambda r: _condition(r, "Succeeded").get("reason") == "Running", timeout=90,
                     what="Tekton running it, mirrored to the manager")  # fmt: skip
    copies = Objects(clients[worker], PIPELINERUNS)
    # The copy is short-lived once cancelled (the run ends and it is cleaned up within a second on a quiet bed), so
    # every version of it is read from a watch rather than polled.
    since = (await copies.source(namespace=namespace).list(limit=1, continue_token=None))["metadata"]["resourceVersion"]
    carried = anyio.Event()

    async def watch_the_copy() -> None:
        async for event in copies.source(namespace=namespace).watch(resource_version=since, timeout_seconds=90):
            obj = event["object"]
            if obj.get("metadata", {}).get("name") == "stop-me" and obj.get("spec", {}).get("status") == "Cancelled":
                carried.set()
                return

    async with anyio.create_task_group() as tg:
        tg.start_soon(watch_the_copy)
        await Objects(clients["manager"], PIPELINERUNS).patch("stop-me", {"spec": {"status": "Cancelled"}}, namespace)
        with anyio.fail_after(60):
            await carried.wait()  # Cancelled carried to the worker's copy
    cancelled = await eventually(lambda: _get(clients["manager"], PIPELINERUNS, "stop-me", namespace),
                                 until=lambda r: _condition(r, "Succeeded").get("reason") == "Cancelled", timeout=90,
                                 what="Tekton's Cancelled on the manager object")  # fmt: skip
    assert _condition(cancelled, "Succeeded")["status"] == "False"
    finished = await eventually(lambda: _get(clients["manager"], WORKLOADS, wl, namespace),
                                until=lambda w: _condition(w, "Finished").get("status") == "True", timeout=90,
                                what="the manager Workload finished")  # fmt: skip
    assert _condition(finished, "Finished")["reason"] == "Failed"
    await eventually(lambda: _get(clients[worker], PIPELINERUNS, "stop-me", namespace), until=lambda r: r is None,
                     timeout=90, what=f"the cancelled copy cleaned up on {worker}")  # fmt: skip


PRIORITY_CLASSES = Resource("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", "WorkloadPriorityClass",
                            namespaced=False)  # fmt: skip


async def test_the_integration_makes_the_workload_tekton_kueue_makes(
    clients: dict[str, ApiClient], namespace: str, fleet: Fleet, tmp_path: Path
) -> None:
    """The same PipelineRun on worker1 under tekton-kueue v0.3.0 and on worker2 under this project's integration
    (each object as its own webhook leaves it): the two Workloads, field by field."""
    priority = f"high-{namespace}"
    for worker in ("worker1", "worker2"):
        await Objects(clients[worker], PRIORITY_CLASSES).create(
            {"apiVersion": KUEUE_API, "kind": "WorkloadPriorityClass", "metadata": {"name": priority}, "value": 50}
        )
    labels = {"kueue.x-k8s.io/queue-name": "user-queue", "kueue.x-k8s.io/priority-class": priority,
              "kueue.x-k8s.io/max-exec-time-seconds": "600"}  # fmt: skip
    annotations = {"kueue.konflux-ci.dev/requests-cpu": "500m", "kueue.konflux-ci.dev/requests-memory": "1Gi"}
    made = {}
    try:
        async with contextlib.AsyncExitStack() as stack:
            stack.callback(start_tekton_kueue_controller(fleet.runtimes["worker1"], fleet.tekton_kueue).stop)
            await stack.enter_async_context(_controller(clients["worker2"], _config("integration"), "worker",
                                                        tmp_path / "w2"))  # fmt: skip
            for worker, held in (("worker1", {}), ("worker2", {"multikueue.x-k8s.io/suspended-for-queue": "true"})):
                body = pipelinerun("same", labels=labels, status="PipelineRunPending")
                body["metadata"]["annotations"] = {**annotations, **held}
                run = await Objects(clients[worker], PIPELINERUNS).create(body, namespace)
                name = workload_name("same", run["metadata"]["uid"], PR)
                made[worker] = (run, await eventually(lambda w=worker, n=name: _get(clients[w], WORKLOADS, n,  # type: ignore[misc]
                                                                                   namespace), timeout=60,
                                                      what=f"the Workload on {worker}"))  # fmt: skip
    finally:
        for worker in ("worker1", "worker2"):
            await Objects(clients[worker], PRIORITY_CLASSES).delete(priority)
    (theirs_run, theirs), (ours_run, ours) = made["worker1"], made["worker2"]

    def normalised(workload: Any, run: Any) -> dict[str, Any]:
        meta = workload["metadata"]
        uid = run["metadata"]["uid"]
        return {
            "name": meta["name"] == workload_name("same", uid, PR),  # the same naming function
            "labels": {k: (v == uid if k == "kueue.x-k8s.io/job-uid" else v) for k, v in
                       (meta.get("labels") or {}).items()},
            "annotations": meta.get("annotations") or {},
            "finalizers": meta.get("finalizers"),
            "ownerReferences": [{**r, "uid": r["uid"] == uid} for r in meta.get("ownerReferences") or []],
            "spec": workload["spec"],
        }  # fmt: skip

    assert normalised(ours, ours_run) == normalised(theirs, theirs_run)


async def _nominate(api: ApiClient, wl: str, namespace: str, clusters: list[str]) -> None:
    """What an external dispatcher does: the Workload's nominated workers."""
    await Objects(api, WORKLOADS).patch_status(wl, {"status": {"nominatedClusterNames": clusters}}, namespace)


async def _hold(api: ApiClient, namespace: str, policy: str | None) -> None:
    """A ClusterQueue on hold admits nothing new (Kueue's ``stopPolicy: Hold``); ``None`` lets it admit again."""
    await Objects(api, kueue.CLUSTER_QUEUES).patch(f"{namespace}-cq", {"spec": {"stopPolicy": policy}})


async def test_a_winner_outside_the_recorded_nominations_is_nominated_before_its_cluster_name_is_set(
    clients: dict[str, ApiClient], namespace: str, fleet: Fleet, tmp_path: Path
) -> None:
    """A replica that takes over nominates the workers it has connected so far, and a worker it has not connected
    yet may admit the copy it already holds. Kueue's webhook takes a ``clusterName`` only from the nominations
    already recorded, so the winner is nominated first (seen on kind: a leader Pod deleted mid-dispatch left runs
    on a worker with their Workloads Pending, forever). Played here with an external dispatcher (the test writes
    the nominations) and the dispatcher stopped while the nominations shrink and worker2 admits its copy."""
    workers = ("worker1", "worker2")
    names = await kueue.multikueue_setup(
        clients["manager"], namespace=KUEUE_NAMESPACE, prefix=namespace, controller_name=CONTROLLER,
        workers={w: fleet.bed.cluster(w).kubeconfig for w in workers},
    )  # fmt: skip
    try:
        await _queues(clients["manager"], namespace, check=names["check"])
        for worker in workers:
            await _queues(clients[worker], namespace, check=None)
            await _hold(clients[worker], namespace, "Hold")
        document = yaml.safe_load(_config("tekton-kueue"))
        document["multiKueue"]["dispatcherName"] = "example.com/external-dispatcher"
        text = yaml.safe_dump(document)
        async with _controller(clients["manager"], text, "manager", tmp_path / "first"):
            await _agreed_active(clients["manager"], names)  # the check Active: the ClusterQueue admits
            created, _ = await _submit(clients, namespace, "late-winner", "integration")
            body = kueue.workload_for(created, queue=QUEUE)
            wl = (await Objects(clients["manager"], WORKLOADS).create(body, namespace))["metadata"]["name"]
            await eventually(lambda: _get(clients["manager"], WORKLOADS, wl, namespace),
                             until=lambda w: _condition(w, "QuotaReserved").get("status") == "True", timeout=90,
                             what="quota reserved by the manager's Kueue")  # fmt: skip
            await _nominate(clients["manager"], wl, namespace, [names[w] for w in workers])
            for worker in workers:
                await eventually(lambda w=worker: _get(clients[w], WORKLOADS, wl, namespace), timeout=60,  # type: ignore[misc]
                                 what=f"the copy on {worker}")  # fmt: skip
        await _nominate(clients["manager"], wl, namespace, [names["worker1"]])
        await _hold(clients["worker2"], namespace, None)
        await eventually(lambda: _get(clients["worker2"], WORKLOADS, wl, namespace),
                         until=lambda w: _condition(w, "Admitted").get("status") == "True", timeout=60,
                         what="worker2's Kueue admitting its copy")  # fmt: skip
        async with _controller(clients["manager"], text, "manager", tmp_path / "second"):
            admitted = await eventually(
                lambda: _get(clients["manager"], WORKLOADS, wl, namespace),
                until=lambda w: (w.get("status") or {}).get("clusterName") == names["worker2"], timeout=60,
                what="the manager Workload admitted on worker2, accepted by Kueue's webhook")  # fmt: skip
        state = next(s for s in admitted["status"]["admissionChecks"] if s["name"] == names["check"])
        assert (state["state"], state["message"]) == ("Ready", f'The workload was admitted on "{names["worker2"]}"')
        assert not admitted["status"].get("nominatedClusterNames")
    finally:
        await kueue.multikueue_teardown(clients["manager"], names)


@pytest.mark.parametrize("dispatching", ["integration"], indirect=True)
async def test_a_run_that_selects_a_worker_is_admitted_by_that_workers_kueue_only(
    clients: dict[str, ApiClient], namespace: str, dispatching: str
) -> None:
    """Narrowing the race is compatible with real Kueue: the manager's Kueue accepts the nominations and the winner
    (its webhook takes a clusterName only from the nominations), and only the selected worker's Kueue sees a copy.
    A run no worker matches waits with its check saying so, quota held, until a worker is labelled to match."""
    clusters = Objects(clients["manager"], MULTIKUEUE_CLUSTERS)
    for worker, region in (("worker1", "eu"), ("worker2", "us")):
        await clusters.patch(f"{namespace}-{worker}", {"metadata": {"labels": {"region": region}}})
    runs = {"picky": "region=us", "stranded": "region=asia"}
    workloads = {}
    for name, selector in runs.items():
        body = yaml.safe_load(EXAMPLE.read_text())
        body["metadata"].update(name=name, namespace=namespace, annotations={WORKER_SELECTOR: selector})
        created = await Objects(clients["manager"], PIPELINERUNS).create(body, namespace)
        workloads[name] = workload_name(name, created["metadata"]["uid"], PR)

    assert await _running_on_a_worker(clients, namespace, "picky", workloads["picky"]) == "worker2"
    assert await _get(clients["worker1"], WORKLOADS, workloads["picky"], namespace) is None

    stranded = await eventually(lambda: _get(clients["manager"], WORKLOADS, workloads["stranded"], namespace),
                                until=lambda w: "No worker matches" in str(w.get("status")), timeout=90,
                                what="the stranded run's check saying why")  # fmt: skip
    assert _condition(stranded, "QuotaReserved")["status"] == "True"
    for worker in ("worker1", "worker2"):
        assert await _get(clients[worker], WORKLOADS, workloads["stranded"], namespace) is None
    await clusters.patch(f"{namespace}-worker1", {"metadata": {"labels": {"region": "asia"}}})
    assert await _running_on_a_worker(clients, namespace, "stranded", workloads["stranded"]) == "worker1"


@pytest.mark.parametrize("dispatching", ["integration"], indirect=True)
async def test_a_run_no_workers_kueue_can_admit_gives_up_and_frees_the_managers_quota(
    clients: dict[str, ApiClient], namespace: str, dispatching: str
) -> None:
    """Real Kueue on the workers, with the run's LocalQueue missing there: each says so (QuotaReserved=False), the
    check is Rejected with both reasons after ``inadmissibleTimeout``, and the manager's Kueue takes that as Kueue
    takes any rejection: the Workload deactivated, its quota released, the copies gone."""
    for worker in ("worker1", "worker2"):
        await Objects(clients[worker], kueue.LOCAL_QUEUES).delete(QUEUE, namespace)
    _, wl = await _submit(clients, namespace, "nowhere", dispatching)
    # Kueue resets a Rejected check to Pending as soon as it has deactivated the Workload, so the lasting record of
    # the rejection, and what a user reads, is the deactivated Workload's Evicted condition quoting the check.
    deactivated = await eventually(lambda: _get(clients["manager"], WORKLOADS, wl, namespace),
                                   until=lambda w: w is not None and w["spec"].get("active") is False
                                   and _condition(w, "Evicted").get("reason") == "DeactivatedDueToAdmissionCheck",
                                   timeout=120, what="the Workload deactivated for the Rejected check")  # fmt: skip
    message = _condition(deactivated, "Evicted")["message"]
    assert "No worker's Kueue can admit the workload: " in message, message
    for worker in ("worker1", "worker2"):
        assert f'worker "{namespace}-{worker}": ' in message
        assert f"LocalQueue {QUEUE} doesn't exist" in message
    await eventually(lambda: _get(clients["manager"], WORKLOADS, wl, namespace),
                     until=lambda w: _condition(w, "QuotaReserved").get("status") != "True", timeout=60,
                     what="the manager's quota released by its Kueue")  # fmt: skip
    for worker in ("worker1", "worker2"):
        await eventually(lambda c=worker: _get(clients[c], WORKLOADS, wl, namespace),  # type: ignore[misc]
                         until=lambda w: w is None, timeout=60, what=f"the copy gone from {worker}")  # fmt: skip
