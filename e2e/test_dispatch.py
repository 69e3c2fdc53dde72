"""The product, end to end, on whichever provider runs: the Tekton example from the manager to a worker and back,
a lost worker, and a dispatcher killed mid-dispatch. Only the Kubernetes API is used; where no Kueue or Tekton
controller runs (``env.plays_kueue``), the test writes the status they would, as the demo does."""

from __future__ import annotations

import copy
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client as k8s_client

from e2e.providers import Environment
from e2e.wiring import CHECK
from multikueue.kube.addresses import MULTIKUEUE_CLUSTERS, WORKLOADS, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue.labels import ORIGIN_LABEL
from multikueue_testbed import kueue
from multikueue_testbed.client import k8s
from multikueue_testbed.waiting import eventually

ROOT = Path(__file__).resolve().parents[1]
PIPELINERUNS = Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun")
NAMESPACE, QUEUE = "team-a", "pipelines-queue"
EXAMPLE = yaml.safe_load((ROOT / "examples" / "tekton" / "pipelinerun.yaml").read_text())
Object = dict[str, Any]


def _condition(obj: Object | None, kind: str) -> Object | None:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), None)


def _tekton_status(status: str, reason: str, *, done: bool = False) -> Object:
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    body: Object = {
        "startTime": now,
        "conditions": [{"type": "Succeeded", "status": status, "reason": reason, "lastTransitionTime": now}],
    }
    if done:
        body["completionTime"] = now
    return body


async def _submit(env: Environment, api: dict[str, ApiClient], name: str) -> str:
    """The example PipelineRun under another name, and the Workload tekton-kueue would create for it."""
    body = copy.deepcopy(EXAMPLE)
    body["metadata"]["name"] = name
    run = await Objects(api["manager"], PIPELINERUNS).create(body, NAMESPACE)
    workload = await Objects(api["manager"], WORKLOADS).create(kueue.workload_for(run, queue=QUEUE), NAMESPACE)
    wl: str = workload["metadata"]["name"]
    if env.plays_kueue:
        await kueue.reserve_quota(api["manager"], wl, NAMESPACE, checks=[CHECK], queue="pipelines")
    return wl


async def _copied(env: Environment, api: dict[str, ApiClient], wl: str, *workers: str) -> None:
    for worker in workers:
        await eventually(
            lambda w=worker: Objects(api[w], WORKLOADS).get(wl, NAMESPACE),  # type: ignore[misc]
            timeout=90,
            what=f"the Workload copied to {worker}\n{env.dispatcher_log()}",
        )


async def _names_on(api: ApiClient, resource: Resource) -> list[str]:
    listed = await k8s_client.CustomObjectsApi(k8s(api)).list_namespaced_custom_object(
        resource.group, resource.version, NAMESPACE, resource.plural
    )
    return sorted(item["metadata"]["name"] for item in listed["items"])


async def _finish_on(env: Environment, api: ApiClient, wl: str, run: str) -> None:
    """Tekton marks the run Succeeded and Kueue finishes its Workload on the worker."""
    if env.plays_kueue:
        runs = Objects(api, PIPELINERUNS)
        await runs.patch_status(run, {"status": _tekton_status("True", "Succeeded", done=True)}, NAMESPACE)
        await kueue.finish(api, wl, NAMESPACE, reason="Succeeded", message="PipelineRun finished")


async def _gone_everywhere(env: Environment, api: dict[str, ApiClient], wl: str, run: str) -> None:
    for worker in ("worker1", "worker2"):
        for resource, name in ((PIPELINERUNS, run), (WORKLOADS, wl)):
            await eventually(
                lambda r=resource, n=name, w=worker: Objects(api[w], r).get(n, NAMESPACE),  # type: ignore[misc]
                until=lambda found: found is None,
                timeout=90,
                what=f"{resource.kind} {name} removed from {worker}\n{env.dispatcher_log()}",
            )


async def _finished_on_manager(env: Environment, api: dict[str, ApiClient], wl: str) -> Object:
    finished = await eventually(
        lambda: Objects(api["manager"], WORKLOADS).get(wl, NAMESPACE),
        until=lambda w: (_condition(w, "Finished") or {}).get("status") == "True",
        timeout=120,
        what=f"manager Workload {wl} Finished\n{env.dispatcher_log()}",
    )
    assert finished is not None
    return finished


async def test_the_example_runs_on_a_worker_and_its_status_comes_back(
    env: Environment, api: dict[str, ApiClient]
) -> None:
    wl = await _submit(env, api, "e2e-hello")
    await _copied(env, api, wl, "worker1", "worker2")
    if env.plays_kueue:
        await kueue.admit(api["worker1"], wl, NAMESPACE, queue="pipelines")

    admitted = await eventually(
        lambda: Objects(api["manager"], WORKLOADS).get(wl, NAMESPACE),
        until=lambda w: bool(((w or {}).get("status") or {}).get("clusterName")),
        timeout=90,
        what=f"admission on a worker\n{env.dispatcher_log()}",
    )
    assert admitted is not None
    winner = admitted["status"]["clusterName"]
    other = "worker2" if winner == "worker1" else "worker1"
    state = next(s for s in admitted["status"]["admissionChecks"] if s["name"] == CHECK)
    assert state["state"] == "Ready"
    assert state["message"] == f'The workload was admitted on "{winner}"'

    remote = await eventually(
        lambda: Objects(api[winner], PIPELINERUNS).get("e2e-hello", NAMESPACE),
        timeout=90,
        what=f"the PipelineRun on {winner}\n{env.dispatcher_log()}",
    )
    assert remote is not None
    assert "managedBy" not in remote["spec"]
    assert remote["spec"]["params"] == EXAMPLE["spec"]["params"]
    assert remote["metadata"]["labels"][ORIGIN_LABEL] == "multikueue"
    assert not remote["metadata"].get("ownerReferences")
    await eventually(
        lambda: Objects(api[other], WORKLOADS).get(wl, NAMESPACE),
        until=lambda w: w is None,
        timeout=90,
        what=f"the losing copy removed from {other}",
    )
    assert await _names_on(api[other], PIPELINERUNS) == []

    if env.plays_kueue:
        await Objects(api[winner], PIPELINERUNS).patch_status(
            "e2e-hello", {"status": _tekton_status("Unknown", "Running")}, NAMESPACE
        )
    await eventually(
        lambda: Objects(api["manager"], PIPELINERUNS).get("e2e-hello", NAMESPACE),
        until=lambda r: (_condition(r, "Succeeded") or {}).get("reason") == "Running",
        timeout=90,
        what="the worker's Running status mirrored to the manager's PipelineRun",
    )
    await _finish_on(env, api[winner], wl, "e2e-hello")
    finished = await _finished_on_manager(env, api, wl)
    assert (_condition(finished, "Finished") or {}).get("reason") == "Succeeded"
    manager_run = await Objects(api["manager"], PIPELINERUNS).get("e2e-hello", NAMESPACE)
    assert (_condition(manager_run, "Succeeded") or {}).get("status") == "True", manager_run
    await _gone_everywhere(env, api, wl, "e2e-hello")


async def test_a_lost_worker_is_reported_and_runs_go_to_the_other(env: Environment, api: dict[str, ApiClient]) -> None:
    clusters = Objects(api["manager"], MULTIKUEUE_CLUSTERS)
    env.lose_worker("worker2")
    try:
        lost = await eventually(
            lambda: clusters.get("worker2"),
            until=lambda c: (_condition(c, "Active") or {}).get("status") == "False",
            timeout=120,
            what=f"worker2 Active=False\n{env.dispatcher_log()}",
        )
        assert (_condition(lost, "Active") or {}).get("reason") == "ClientConnectionFailed"
        wl = await _submit(env, api, "e2e-lost")
        await _copied(env, api, wl, "worker1")
        if env.plays_kueue:
            await kueue.admit(api["worker1"], wl, NAMESPACE, queue="pipelines")
        await eventually(
            lambda: Objects(api["worker1"], PIPELINERUNS).get("e2e-lost", NAMESPACE),
            timeout=90,
            what=f"the PipelineRun on worker1 while worker2 is away\n{env.dispatcher_log()}",
        )
    finally:
        env.restore_worker("worker2")
    await eventually(
        lambda: clusters.get("worker2"),
        until=lambda c: (_condition(c, "Active") or {}).get("status") == "True",
        timeout=120,
        what=f"worker2 Active again\n{env.dispatcher_log()}",
    )
    assert await _names_on(api["worker2"], PIPELINERUNS) == []
    await _finish_on(env, api["worker1"], wl, "e2e-lost")
    await _finished_on_manager(env, api, wl)
    await _gone_everywhere(env, api, wl, "e2e-lost")


async def test_a_dispatcher_killed_mid_dispatch_neither_duplicates_nor_loses_the_run(
    env: Environment, api: dict[str, ApiClient]
) -> None:
    wl = await _submit(env, api, "e2e-restart")
    await _copied(env, api, wl, "worker1", "worker2")
    env.stop_dispatcher(kill=True)
    if env.plays_kueue:  # worker2 admits while no dispatcher runs
        await kueue.admit(api["worker2"], wl, NAMESPACE, queue="pipelines")
    env.start_dispatcher()  # the same identity and configuration, as a restarted pod
    admitted = await eventually(
        lambda: Objects(api["manager"], WORKLOADS).get(wl, NAMESPACE),
        until=lambda w: bool(((w or {}).get("status") or {}).get("clusterName")),
        timeout=120,
        what=f"admission after the restart\n{env.dispatcher_log()}",
    )
    winner = admitted["status"]["clusterName"] if admitted else None
    other = "worker1" if winner == "worker2" else "worker2"
    await eventually(
        lambda: Objects(api[str(winner)], PIPELINERUNS).get("e2e-restart", NAMESPACE),
        timeout=90,
        what=f"the PipelineRun on {winner} after the restart\n{env.dispatcher_log()}",
    )
    await eventually(
        lambda: Objects(api[other], WORKLOADS).get(wl, NAMESPACE),
        until=lambda w: w is None,
        timeout=90,
        what=f"the losing copy removed from {other}",
    )
    assert await _names_on(api[str(winner)], PIPELINERUNS) == ["e2e-restart"]
    assert "e2e-restart" not in await _names_on(api[other], PIPELINERUNS)
    await _finish_on(env, api[str(winner)], wl, "e2e-restart")
    await _finished_on_manager(env, api, wl)
    await _gone_everywhere(env, api, wl, "e2e-restart")
