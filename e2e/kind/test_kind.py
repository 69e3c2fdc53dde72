"""Scenarios on real kind clusters (provider ``kind``): real kubelets run the step pods, real Kueue admits on all
three clusters, real Tekton runs the PipelineRuns on the workers, and the dispatcher is the config/manager
Deployment (two replicas sharing a Lease). Nothing here writes a status on anyone's behalf.

The step image is the Debian base built here (no registry): the example's ``busybox`` cannot be pulled.
"""

from __future__ import annotations

import base64
import copy
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import anyio
import pytest
import yaml
from cryptography import x509
from kubernetes_asyncio import client as k8s_client

from e2e.kind import integration, tekton_kueue, upstream
from e2e.kind.components import STEP_IMAGE
from e2e.kind.scene import (
    NAMESPACE,
    PIPELINERUNS,
    QUEUE,
    TASKRUNS,
    Object,
    WorkerWatch,
    condition,
    dispatcher_pods,
    example,
    leader_pod,
    live_leader,
    restart,
    rolled_out,
    submit,
)  # fmt: skip
from e2e.providers import WORKERS, Environment
from e2e.providers.kind import ROOT, KindEnvironment
from e2e.wiring import CHECK, SYSTEM, kubectl
from multikueue.kube.addresses import MULTIKUEUE_CLUSTERS, WORKLOADS, GroupVersionKind, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue.labels import prebuilt_workload_of
from multikueue.owners import workload_name
from multikueue_testbed import kueue
from multikueue_testbed.client import k8s
from multikueue_testbed.waiting import eventually

PR = GroupVersionKind("tekton.dev", "v1", "PipelineRun")


@pytest.fixture
def kind(env: Environment) -> KindEnvironment:
    assert isinstance(env, KindEnvironment), "these scenarios run on the kind provider only"
    return env


async def _placed(kind: KindEnvironment, api: dict[str, ApiClient], wl: str) -> str:
    admitted = await eventually(
        lambda: Objects(api["manager"], WORKLOADS).get(wl, NAMESPACE),
        until=lambda w: bool(((w or {}).get("status") or {}).get("clusterName")),
        timeout=180,
        what=f"Workload {wl} admitted on a worker\n{kind.dispatcher_log()}",
    )
    assert admitted is not None
    return str(admitted["status"]["clusterName"])


async def _pods(kind: KindEnvironment, worker: str, run: str) -> list[Object]:
    selector = f"tekton.dev/pipelineRun={run}"
    argv = ("-n", NAMESPACE, "get", "pods", "-l", selector, "-o", "json")
    listed = await anyio.to_thread.run_sync(lambda: kind.run_kubectl(worker, *argv))
    items: list[Object] = json.loads(listed)["items"]
    return items


def _step_started(pods: list[Object]) -> bool:
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            if status["name"] == "step-echo" and ("running" in status["state"] or "terminated" in status["state"]):
                return True
    return False


async def _finished(kind: KindEnvironment, api: dict[str, ApiClient], wl: str, timeout: float = 240) -> Object:
    finished = await eventually(
        lambda: Objects(api["manager"], WORKLOADS).get(wl, NAMESPACE),
        until=lambda w: condition(w, "Finished").get("status") == "True",
        timeout=timeout,
        what=f"manager Workload {wl} Finished\n{kind.dispatcher_log()}",
    )
    assert finished is not None
    return finished


async def _nothing_left(kind: KindEnvironment, api: dict[str, ApiClient], wl: str, run: str) -> None:
    for worker in WORKERS:
        for resource, name in ((PIPELINERUNS, run), (WORKLOADS, wl)):
            await eventually(
                lambda r=resource, n=name, w=worker: Objects(api[w], r).get(n, NAMESPACE),  # type: ignore[misc]
                until=lambda found: found is None,
                timeout=120,
                what=f"{resource.kind} {name} removed from {worker}\n{kind.dispatcher_log()}",
            )
        await eventually(
            lambda w=worker: _pods(kind, w, run),  # type: ignore[misc]
            until=lambda pods: pods == [],
            timeout=120,
            what=f"the pods of {run} gone from {worker}",
        )


async def test_the_example_runs_its_step_on_a_worker_and_finishes_on_the_manager(
    kind: KindEnvironment, api: dict[str, ApiClient]
) -> None:
    run, wl = await submit(api, "kind-hello")
    winner = await _placed(kind, api, wl)
    started = await eventually(
        lambda: _pods(kind, winner, "kind-hello"),
        until=_step_started,
        timeout=180,
        interval=0.2,
        what=f"the step container of kind-hello started on {winner}",
    )
    pod = started[0]["metadata"]["name"]

    async def step_log() -> str:
        return await anyio.to_thread.run_sync(lambda: kind.run_kubectl(winner, "-n", NAMESPACE, "logs", pod,
                                                                         "-c", "step-echo"))  # fmt: skip

    printed = await eventually(step_log, timeout=60, interval=0.2, what=f"the step's output in {pod}'s log")
    assert printed.strip() == "Hello from the manager"

    finished = await _finished(kind, api, wl)
    assert condition(finished, "Finished").get("reason") == "Succeeded"
    manager_run = await Objects(api["manager"], PIPELINERUNS).get("kind-hello", NAMESPACE)
    assert manager_run is not None
    assert manager_run["metadata"]["uid"] == run["metadata"]["uid"]
    succeeded = condition(manager_run, "Succeeded")
    assert (succeeded.get("status"), succeeded.get("reason")) == ("True", "Succeeded"), manager_run["status"]
    # The worker's Tekton wrote these: its TaskRun's name and the run's completion time, mirrored.
    children = manager_run["status"].get("childReferences") or []
    assert [c["kind"] for c in children] == ["TaskRun"]
    assert children[0]["name"].startswith("kind-hello-echo")
    assert manager_run["status"].get("completionTime")
    await _nothing_left(kind, api, wl, "kind-hello")


async def _cli(kind: KindEnvironment, tmp_path: Path, *args: str, timeout: float = 60) -> tuple[int, str, str]:
    """``multikueue`` as a user on the host runs it: the manager through the suite's kubeconfig, each worker through
    the user's own kubeconfig (the Secrets' servers are addresses on the clusters' docker network)."""
    workers = []
    for worker in WORKERS:
        path = tmp_path / f"{worker}.kubeconfig"
        path.write_text(yaml.safe_dump(kind.kubeconfig(worker)))
        workers += ["--worker-kubeconfig", f"{worker}={path}"]
    argv = [sys.executable, "-m", "multikueue", *args, "--kubeconfig", str(kind.kubeconfig_path), "--context",
            "manager", "--secrets-namespace", SYSTEM, *workers]  # fmt: skip
    with anyio.fail_after(timeout):
        done = await anyio.run_process(argv, check=False, cwd=ROOT)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_status_and_logs_show_the_running_step_from_the_manager(
    kind: KindEnvironment, api: dict[str, ApiClient], tmp_path: Path
) -> None:
    """`multikueue status` and `multikueue logs` (the pod selector from the deployed ConfigMap) on a step that
    really runs: where it runs and its output, without a look at the worker; `logs -f` ends when the step does."""
    run = "kind-asked"
    _, wl = await submit(api, run, script='#!/bin/sh\necho "the step says hello"\nsleep 15\n')
    winner = await _placed(kind, api, wl)
    await eventually(lambda: _pods(kind, winner, run), until=_step_started, timeout=180, interval=0.2,
                     what=f"the step container of {run} started on {winner}")  # fmt: skip
    what = ("PipelineRun.v1.tekton.dev", f"{NAMESPACE}/{run}")
    code, out, err = await _cli(kind, tmp_path, "status", *what)
    assert code == 0, err
    assert f"  why: admitted on {winner}, running there: Succeeded=Unknown (Running)" in out, out
    assert f"  worker {winner}:\n    Workload copy: admitted; quota: True QuotaReserved" in out, out

    async def logs() -> str:
        code, out, err = await _cli(kind, tmp_path, "logs", *what, "--container", "step-echo")
        assert code == 0, err
        return out

    # The shipped configuration's logs shape: tkn's "[task : step]" prefix (task "echo", step "echo").
    assert (await eventually(logs, until=lambda out: "the step says hello" in out, timeout=60)).strip() == (
        "[echo : echo] the step says hello")  # fmt: skip
    code, out, err = await _cli(kind, tmp_path, "logs", *what, "-f", "--container", "step-echo", timeout=120)
    assert (code, out.strip()) == (0, "[echo : echo] the step says hello"), err
    finished = await _finished(kind, api, wl)
    assert condition(finished, "Finished").get("reason") == "Succeeded"
    code, out, err = await _cli(kind, tmp_path, "status", *what)
    assert "  why: finished (Succeeded)" in out, out
    await _nothing_left(kind, api, wl, run)


async def test_a_cancel_on_the_manager_stops_the_running_step_on_the_worker(
    kind: KindEnvironment, api: dict[str, ApiClient]
) -> None:
    _, wl = await submit(api, "kind-cancel", script="#!/bin/sh\necho started\nsleep 600\n")
    winner = await _placed(kind, api, wl)
    running = await eventually(
        lambda: _pods(kind, winner, "kind-cancel"),
        until=lambda pods: any((p.get("status") or {}).get("phase") == "Running" for p in pods),
        timeout=180,
        what=f"the step pod of kind-cancel Running on {winner}",
    )
    pod = running[0]["metadata"]["name"]
    await Objects(api["manager"], PIPELINERUNS).patch("kind-cancel", {"spec": {"status": "Cancelled"}}, NAMESPACE)

    await eventually(
        lambda: _pods(kind, winner, "kind-cancel"),
        until=lambda pods: all(p["metadata"]["name"] != pod or p["metadata"].get("deletionTimestamp") for p in pods),
        timeout=120,
        what=f"the running step pod {pod} stopped on {winner}\n{kind.dispatcher_log()}",
    )
    finished = await _finished(kind, api, wl)
    assert condition(finished, "Finished").get("reason") == "Failed"
    manager_run = await Objects(api["manager"], PIPELINERUNS).get("kind-cancel", NAMESPACE)
    succeeded = condition(manager_run, "Succeeded")
    assert (succeeded.get("status"), succeeded.get("reason")) == ("False", "Cancelled"), manager_run
    await _nothing_left(kind, api, wl, "kind-cancel")


async def test_a_worker_paused_and_resumed_keeps_its_run_which_then_finishes(
    kind: KindEnvironment, api: dict[str, ApiClient]
) -> None:
    """Within ``workerLostTimeout`` (15 min, config/manager) a lost worker keeps its runs: nothing is sent
    elsewhere, the check stays Ready, and the run carries on when the worker is back."""
    _, wl = await submit(api, "kind-paused", script="#!/bin/sh\necho started\nsleep 20\necho done\n")
    winner = await _placed(kind, api, wl)
    other = next(w for w in WORKERS if w != winner)
    await eventually(
        lambda: _pods(kind, winner, "kind-paused"),
        until=_step_started,
        timeout=180,
        what=f"the step of kind-paused started on {winner}",
    )
    clusters = Objects(api["manager"], MULTIKUEUE_CLUSTERS)
    kind.lose_worker(winner)
    try:
        lost = await eventually(
            lambda: clusters.get(winner),
            until=lambda c: condition(c, "Active").get("status") == "False",
            timeout=120,
            what=f"{winner} Active=False while its node is paused\n{kind.dispatcher_log()}",
        )
        assert condition(lost, "Active").get("reason") == "ClientConnectionFailed"
        held = await Objects(api["manager"], WORKLOADS).get(wl, NAMESPACE)
        assert held is not None
        assert held["status"]["clusterName"] == winner
        state = next(s for s in held["status"]["admissionChecks"] if s["name"] == CHECK)
        assert state["state"] == "Ready"
        assert await Objects(api[other], PIPELINERUNS).get("kind-paused", NAMESPACE) is None
    finally:
        kind.restore_worker(winner)
    await eventually(
        lambda: clusters.get(winner),
        until=lambda c: condition(c, "Active").get("status") == "True",
        timeout=180,
        what=f"{winner} Active again\n{kind.dispatcher_log()}",
    )
    finished = await _finished(kind, api, wl)
    assert condition(finished, "Finished").get("reason") == "Succeeded"
    assert finished["status"]["clusterName"] == winner
    await _nothing_left(kind, api, wl, "kind-paused")


async def test_the_leader_pod_deleted_mid_dispatch_loses_and_duplicates_no_run(
    kind: KindEnvironment, api: dict[str, ApiClient]
) -> None:
    leader = await leader_pod(api)
    names = [f"kind-leader-{i}" for i in range(4)]
    seen: dict[str, set[str]] = {name: set() for name in names}

    async def watch_workers() -> None:
        """Every worker each run was ever seen on (a duplicate would show as two)."""
        while True:
            for worker in WORKERS:
                listed = await k8s_client.CustomObjectsApi(k8s(api[worker])).list_namespaced_custom_object(
                    PIPELINERUNS.group, PIPELINERUNS.version, NAMESPACE, PIPELINERUNS.plural
                )
                for item in listed["items"]:
                    if item["metadata"]["name"] in seen:
                        seen[item["metadata"]["name"]].add(worker)
            await anyio.sleep(0.2)

    workloads: dict[str, str] = {}
    async with anyio.create_task_group() as group:
        group.start_soon(watch_workers)
        for name in names:
            _, workloads[name] = await submit(api, name, script="#!/bin/sh\nsleep 8\n")
        await anyio.to_thread.run_sync(
            lambda: kind.run_kubectl("manager", "-n", SYSTEM, "delete", "pod", leader, "--wait=false")
        )
        for name in names:
            finished = await _finished(kind, api, workloads[name])
            assert condition(finished, "Finished").get("reason") == "Succeeded", (name, finished["status"])
        group.cancel_scope.cancel()
    assert {name: len(workers) for name, workers in seen.items()} == dict.fromkeys(names, 1), seen
    new_leader = await eventually(
        lambda: leader_pod(api), until=lambda pod: bool(pod) and pod != leader, timeout=60, what="a new leader"
    )
    assert new_leader != leader
    rollout = ("-n", SYSTEM, "rollout", "status", "deployment/multikueue-controller", "--timeout=180s")
    await anyio.to_thread.run_sync(lambda: kind.run_kubectl("manager", *rollout, timeout=200))
    for name in names:
        await _nothing_left(kind, api, workloads[name], name)


async def test_the_helm_chart_installs_dispatches_and_uninstalls_leaving_nothing(
    kind: KindEnvironment, api: dict[str, ApiClient]
) -> None:
    """The chart in place of the kustomize deployment (the workers' Secrets and MultiKueueClusters stay): installed
    with Helm built from its module, a run dispatched and finished, uninstalled with nothing of it left."""
    from e2e.wiring import apply_manifests
    from multikueue_testbed.interop import helm_binary

    helm = [str(helm_binary()), "--kubeconfig", str(kind.kubeconfig_path), "--kube-context", "manager", "-n", SYSTEM]
    namespaced = ["deployment/multikueue-controller", "configmap/multikueue-config", "service/multikueue-metrics",
                  "serviceaccount/multikueue-controller", "role/multikueue-controller",
                  "rolebinding/multikueue-controller", "poddisruptionbudget/multikueue-controller"]  # fmt: skip
    cluster_wide = ["clusterrole/multikueue-controller", "clusterrolebinding/multikueue-controller",
                    "clusterrole/multikueue-metrics-reader"]  # fmt: skip

    async def run(*argv: str, timeout: float = 360) -> str:
        with anyio.fail_after(timeout):
            done = await anyio.run_process(list(argv), check=False, cwd=ROOT)
        assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout.decode()}{done.stderr.decode()}"
        return done.stdout.decode()

    await anyio.to_thread.run_sync(lambda: kind.run_kubectl("manager", "-n", SYSTEM, "delete", "--wait=true",
                                                            *namespaced, *cluster_wide))  # fmt: skip
    try:
        config = ROOT / "examples" / "tekton" / "adapter-config.yaml"
        await run(*helm, "install", "multikueue", str(ROOT / "charts" / "multikueue"), "--wait", "--timeout", "5m",
                  "--set-file", f"managerConfig.controllerManagerConfigYaml={config}")  # fmt: skip
        _, wl = await submit(api, "kind-helm")
        finished = await _finished(kind, api, wl)
        assert condition(finished, "Finished").get("reason") == "Succeeded"
        await _nothing_left(kind, api, wl, "kind-helm")
        await run(*helm, "uninstall", "multikueue", "--wait", "--timeout", "5m")
        query = ("-n", SYSTEM, "get", *namespaced, *cluster_wide, "--ignore-not-found", "-o", "name")
        left = await anyio.to_thread.run_sync(lambda: kind.run_kubectl("manager", *query))
        assert left.strip() == "", f"left behind by helm uninstall:\n{left}"
        pods = ("-n", SYSTEM, "get", "pods", "-l", "app.kubernetes.io/name=multikueue", "-o", "name")
        await eventually(lambda: anyio.to_thread.run_sync(lambda: kind.run_kubectl("manager", *pods)),
                         until=lambda out: out.strip() == "", timeout=120, what="the chart's pods gone")  # fmt: skip
    finally:  # the kustomize deployment back, as the suite's other scenarios expect it
        await anyio.to_thread.run_sync(lambda: apply_manifests(kind))
        await anyio.to_thread.run_sync(kind.start_dispatcher)


async def _configure(kind: KindEnvironment, api: dict[str, ApiClient], config: Path | None, stamp: str) -> None:
    """The ConfigMap's one key replaced as a user edits it (``config`` None: the suite's own text back), then the
    Deployment restarted and rolled out with it."""
    from e2e.wiring import apply_manifests

    if config is None:
        await anyio.to_thread.run_sync(lambda: apply_manifests(kind))
    else:
        configmap = kind.run_kubectl("manager", "-n", SYSTEM, "create", "configmap", "multikueue-config",
                                     f"--from-file=controller_manager_config.yaml={config}", "--dry-run=client",
                                     "-o", "yaml")  # fmt: skip
        await anyio.to_thread.run_sync(
            lambda: kubectl(kind, "manager", "apply", "--server-side", "-f", "-", stdin=configmap)
        )
    await restart(api, stamp)
    await rolled_out(kind, api, f"the dispatcher restarted ({stamp})")


def _pipeline(name: str) -> Object:
    """Three tasks as a team writes them: a result passed from one task to the next as a param, two steps in the
    first, and a ``finally`` task; every step on the local image, each printing one line."""
    body = example()
    body["metadata"]["name"] = name

    def step(step_name: str, script: str) -> Object:
        return {"name": step_name, "image": STEP_IMAGE, "script": f"#!/bin/sh\n{script}\n"}

    body["spec"]["pipelineSpec"] = {
        "tasks": [
            {"name": "make", "taskSpec": {"results": [{"name": "word"}], "steps": [
                step("choose", 'printf hello > "$(results.word.path)"; echo "chose hello"'),
                step("announce", 'sleep 2; echo "announced"')]}},
            {"name": "use", "runAfter": ["make"], "params": [{"name": "WORD", "value": "$(tasks.make.results.word)"}],
             "taskSpec": {"params": [{"name": "WORD"}], "steps": [step("say", 'echo "got $(params.WORD)"')]}},
        ],
        "finally": [{"name": "wrap", "taskSpec": {"steps": [step("done", 'echo "wrapped up"')]}}],
    }  # fmt: skip
    body["spec"].pop("params", None)
    return body


async def _tekton_records(api: dict[str, ApiClient], worker: str, run: str) -> list[str]:
    """What the worker's Tekton says ran, as ``[task : step]``: its TaskRuns in the pipeline's order (tasks, then
    finally), each one's steps in the order of its ``status.steps``."""
    copy = await Objects(api[worker], PIPELINERUNS).get(run, NAMESPACE)
    assert copy is not None
    spec = copy["status"]["pipelineSpec"]
    order = [t["name"] for t in spec["tasks"]] + [t["name"] for t in spec.get("finally") or []]
    by_task = {c["pipelineTaskName"]: c["name"] for c in copy["status"]["childReferences"]}
    records = []
    for task in order:
        taskrun = await Objects(api[worker], TASKRUNS).get(by_task[task], NAMESPACE)
        assert taskrun is not None
        records += [f"[{task} : {s['name']}]" for s in taskrun["status"]["steps"]]
    return records


def _prefixes(out: str) -> list[str]:
    return [line[: line.index("]") + 1] for line in out.strip().splitlines()]


async def test_logs_show_a_pipeline_as_tkn_does_and_retention_keeps_them_until_its_time_is_up(
    kind: KindEnvironment, api: dict[str, ApiClient], tmp_path: Path
) -> None:
    """``multikueue logs`` on a three-task pipeline that really runs, in tkn's shape: ``-f`` started as the run is
    placed follows every task as it starts, in the pipeline's order, until the run ends; its ``[task : step]``
    prefixes are what the worker's Tekton recorded (TaskRuns, their steps). The kind's ``retention`` (90 s here) keeps
    the finished copy and its pods on the worker, so ``logs`` still reads them after the run finished on the manager,
    while the worker's Workload copy goes at once (its Kueue holds no quota for it); once the time is up the copy and
    its pods go, and ``logs`` says so in one line."""
    assert kind.dispatcher_config is not None
    config = yaml.safe_load(kind.dispatcher_config.read_text())
    adapter = next(a for a in config["dispatcher"]["adapters"] if a["name"] == "PipelineRun.v1.tekton.dev")
    adapter["retention"] = "90s"
    kept = tmp_path / "retention-config.yaml"
    kept.write_text(yaml.safe_dump(config))
    run = "kind-tasks"
    await _configure(kind, api, kept, "retention-on")
    try:
        made = await Objects(api["manager"], PIPELINERUNS).create(_pipeline(run), NAMESPACE)
        workload = kueue.workload_for(made, queue=QUEUE)
        wl = (await Objects(api["manager"], WORKLOADS).create(workload, NAMESPACE))["metadata"]["name"]
        winner = await _placed(kind, api, wl)
        what = ("PipelineRun.v1.tekton.dev", f"{NAMESPACE}/{run}")
        code, followed, err = await _cli(kind, tmp_path, "logs", *what, "-f", timeout=300)
        assert code == 0, err
        finished = await _finished(kind, api, wl)
        assert condition(finished, "Finished").get("reason") == "Succeeded"
        await eventually(lambda: Objects(api[winner], WORKLOADS).get(wl, NAMESPACE), until=lambda w: w is None,
                         timeout=60, what=f"the Workload copy on {winner} removed at once")  # fmt: skip
        assert await _pods(kind, winner, run), f"the pods on {winner} were not kept\n{kind.dispatcher_log()}"

        shown = ["[make : choose] chose hello", "[make : announce] announced", "[use : say] got hello",
                 "[wrap : done] wrapped up"]  # fmt: skip
        assert followed.strip().splitlines() == shown, followed
        assert _prefixes(followed) == await _tekton_records(api, winner, run)
        code, out, err = await _cli(kind, tmp_path, "logs", *what)  # the finished run, read again while kept
        assert (code, out.strip().splitlines()) == (0, shown), err
        code, out, err = await _cli(kind, tmp_path, "logs", *what, "--task", "use", "--prefix=false")
        assert (code, out.strip()) == (0, "got hello"), err

        await _nothing_left(kind, api, wl, run)  # the retention's 90 s up: copy and pods removed by the dispatcher
        code, out, err = await _cli(kind, tmp_path, "logs", *what)
        assert code != 0
        assert err.strip().endswith(f"its pods on worker {winner} are gone (the kind's retention keeps a finished "
                                    "run's object, and its pods, for a while)"), err  # fmt: skip
        assert len(err.strip().splitlines()) == 1, err
    finally:
        await _configure(kind, api, None, "retention-off")


def _as_the_worker_wrote_it(manager_run: Object, copy: Object) -> None:
    """The manager's run ends with the status the worker's Tekton wrote on the copy: conditions, results, children,
    times."""
    for field in ("conditions", "results", "childReferences", "startTime", "completionTime"):
        assert manager_run["status"].get(field) == copy["status"].get(field), (field, manager_run["status"])


def _pipeline_with_result(name: str) -> Object:
    body = _pipeline(name)
    body["spec"]["pipelineSpec"]["results"] = [{"name": "word", "value": "$(tasks.make.results.word)"}]
    return body


async def _dispatched(kind: KindEnvironment, api: dict[str, ApiClient],
                      body: Object) -> tuple[Object, str, list[Object], list[Object]]:  # fmt: skip
    """``body`` created on the manager and followed until its Workload there is Finished (Succeeded): the object as
    created, its Workload's name, every version of its copy on the winning worker and of its Workload copy there."""
    watch = WorkerWatch(api)
    async with anyio.create_task_group() as group:
        await watch.start(group)
        made = await Objects(api["manager"], PIPELINERUNS).create(body, NAMESPACE)
        wl = workload_name(made["metadata"]["name"], made["metadata"]["uid"], PR)
        winner = await _placed(kind, api, wl)
        finished = await _finished(kind, api, wl)
        group.cancel_scope.cancel()
    assert condition(finished, "Finished").get("reason") == "Succeeded"
    return (
        made,
        wl,
        watch.versions(winner, "PipelineRun", made["metadata"]["name"]),
        watch.versions(winner, "Workload", wl),
    )


async def _came_back_as_the_workers_tekton_wrote_it(
    kind: KindEnvironment, api: dict[str, ApiClient], wl: str, copies: list[Object], copied_workloads: list[Object]
) -> None:
    """The copy carried MultiKueue's prebuilt Workload, was held by its worker's webhook, its Workload copy admitted
    by that worker's Kueue, and it was released there; the manager's run ended with the status the worker's Tekton
    wrote (its result, its three children); nothing left."""
    copy = copies[-1]
    run = copy["metadata"]["name"]
    assert prebuilt_workload_of(copy) == wl
    # Held from its creation. With the Tekton-aware adapter options (the tekton-kueue way) the dispatcher writes it
    # without spec.status (removeWhen), so only the worker's webhook can have held it.
    assert copies[0]["spec"].get("status") == "PipelineRunPending", "the copy was not held on its worker"
    assert any(condition(w, "Admitted").get("status") == "True" for w in copied_workloads)
    assert "status" not in copy["spec"], "the worker's integration did not release the copy"
    manager_run = await Objects(api["manager"], PIPELINERUNS).get(run, NAMESPACE)
    assert manager_run is not None
    succeeded = condition(manager_run, "Succeeded")
    assert (succeeded.get("status"), succeeded.get("reason")) == ("True", "Succeeded"), manager_run["status"]
    _as_the_worker_wrote_it(manager_run, copy)
    assert manager_run["status"]["results"] == [{"name": "word", "value": "hello"}]
    assert [c["pipelineTaskName"] for c in manager_run["status"]["childReferences"]] == ["make", "use", "wrap"]
    await _nothing_left(kind, api, wl, run)


async def test_the_integration_makes_every_workload_and_a_pipeline_comes_back_as_the_workers_tekton_wrote_it(
    kind: KindEnvironment, api: dict[str, ApiClient]
) -> None:
    """Nothing played: config/integration on the manager and ``multikueue run --role worker``
    (config/worker-integration) on each worker, all from examples/tekton/integration-config.yaml; the test only
    submits a PipelineRun and reads. The manager's webhook holds the run and its integration makes the Workload;
    each worker's webhook holds the copy and its integration adopts MultiKueue's prebuilt Workload and releases the
    copy once that worker's Kueue admits it; Tekton runs the three tasks on real pods. The run comes back on the
    manager with the final status the worker's Tekton wrote: conditions, results, ``childReferences``."""
    try:
        await integration.install(kind, api, workers=True)
        made, wl, copies, copied_workloads = await _dispatched(kind, api, _pipeline_with_result("kind-integrated"))
        assert made["spec"].get("status") == "PipelineRunPending", "not held by the manager's webhook"
        requests = copied_workloads[0]["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]
        assert requests["requests"]["tekton.dev/pipelineruns"] == "1", "the copy's Workload is not the integration's"
        await _came_back_as_the_workers_tekton_wrote_it(kind, api, wl, copies, copied_workloads)
    finally:
        await integration.remove(kind, api, workers=True)


async def test_tekton_kueue_makes_every_workload_and_a_pipeline_comes_back_as_the_workers_tekton_wrote_it(
    kind: KindEnvironment, api: dict[str, ApiClient]
) -> None:
    """Nothing played, and nothing of this project on the workers: tekton-kueue (its own ``config/default``,
    e2e/kind/tekton_kueue.py) on the manager and on each worker, beside the dispatcher alone (config/manager with
    the Tekton-aware adapter options). The PipelineRun names only its queue: tekton-kueue's webhook on the manager
    holds it and marks it ``managedBy`` MultiKueue (its ``multiKueueOverride``), its controller makes the Workload;
    on the winning worker its webhook holds the copy, its controller adopts the prebuilt Workload copy and releases
    the copy once that worker's Kueue admits it. The run comes back as the worker's Tekton wrote it."""
    body = _pipeline_with_result("kind-tekton-kueue")
    del body["spec"]["managedBy"]  # tekton-kueue's webhook sets it
    try:
        await anyio.to_thread.run_sync(lambda: tekton_kueue.install(kind))
        made, wl, copies, copied_workloads = await _dispatched(kind, api, body)
        held = (made["spec"].get("status"), made["spec"].get("managedBy"))
        assert held == ("PipelineRunPending", kueue.MANAGED_BY), "not held and marked by tekton-kueue's webhook"
        # its webhook's CEL rule (priority("tekton-kueue-default")): no other integration writes this label
        assert made["metadata"]["labels"].get(tekton_kueue.PRIORITY_LABEL) == tekton_kueue.priority_class()
        manager_workload = await Objects(api["manager"], WORKLOADS).get(wl, NAMESPACE)
        assert manager_workload is not None, "tekton-kueue's controller made no Workload on the manager"
        assert manager_workload["metadata"]["ownerReferences"][0]["uid"] == made["metadata"]["uid"]
        adopted = [o["uid"] for o in copied_workloads[-1]["metadata"].get("ownerReferences") or []]
        assert adopted == [copies[-1]["metadata"]["uid"]], "the worker's tekton-kueue did not adopt the copy"
        await _came_back_as_the_workers_tekton_wrote_it(kind, api, wl, copies, copied_workloads)
    finally:
        await anyio.to_thread.run_sync(lambda: tekton_kueue.remove(kind))


def _renamed(run: Object, suffix: str) -> Object:
    body = copy.deepcopy(run)
    body["metadata"]["name"] = run["metadata"]["name"][: 50 - len(suffix)] + suffix
    return body


async def _examples_in_waves(kind: KindEnvironment, api: dict[str, ApiClient], watch: WorkerWatch,
                             examples: list[tuple[str, Object, list[Object]]], workloads: dict[str, str],
                             outcomes: dict[str, tuple[str, str, str]]) -> None:  # fmt: skip
    """The runs submitted ``upstream.WAVE`` at a time, each waited for until finished on the manager; its outcome
    recorded once its status there is the one its worker's Tekton wrote."""
    for wave in range(0, len(examples), upstream.WAVE):
        for _, run, _ in examples[wave : wave + upstream.WAVE]:
            made = (await Objects(api["manager"], PIPELINERUNS).create(run, NAMESPACE))["metadata"]
            workloads[made["name"]] = workload_name(made["name"], made["uid"], PR)
        for file, run, _ in examples[wave : wave + upstream.WAVE]:
            name = run["metadata"]["name"]
            finished = await _finished(kind, api, workloads[name], timeout=300)
            manager_run = await Objects(api["manager"], PIPELINERUNS).get(name, NAMESPACE)
            assert manager_run is not None
            _as_the_worker_wrote_it(manager_run, watch.last(finished["status"]["clusterName"], "PipelineRun", name))
            succeeded = condition(manager_run, "Succeeded")
            outcomes[file] = (str(succeeded.get("status")), str(succeeded.get("reason")),
                                 str(succeeded.get("message")))  # fmt: skip


async def _claims(kind: KindEnvironment, worker: str) -> list[str]:
    """The claims in the scenarios' namespace and every volume (local-path's teardown removes them)."""
    claims = ("-n", NAMESPACE, "get", "persistentvolumeclaims", "-o", "name")
    volumes = ("get", "persistentvolumes", "-o", "name")
    found = [await anyio.to_thread.run_sync(lambda a=argv: kind.run_kubectl(worker, *a)) for argv in (claims, volumes)]  # type: ignore[misc]
    return " ".join(found).split()


def _on_workers(kind: KindEnvironment, *args: str, stdin: str) -> None:
    for worker in WORKERS:
        kubectl(kind, worker, *args, stdin=stdin)


async def test_tektons_own_examples_run_on_a_worker_and_come_back_as_its_tekton_wrote_them(
    kind: KindEnvironment, api: dict[str, ApiClient]
) -> None:
    """Tekton's example PipelineRuns (e2e/kind/upstream.py: params and results, object and array results, when,
    finally, matrix, retries, timeouts, workspaces on a ConfigMap and on volumeClaimTemplates), submitted three at a
    time on the manager with the integration making every Workload, each run on a worker's real pods: every one
    succeeds there, and comes back on the manager with the conditions, results and ``childReferences`` that worker's
    Tekton wrote. Their claims go with them."""
    watch = WorkerWatch(api)
    examples = list(upstream.all_examples())
    beside = yaml.safe_dump_all([d for _, _, kept in examples for d in kept])
    await integration.install(kind, api, workers=True)
    try:
        # what the runs refer to, kept on each worker as a team keeps its catalog
        await anyio.to_thread.run_sync(lambda: _on_workers(kind, "apply", "-f", "-", stdin=beside))
        workloads: dict[str, str] = {}
        outcomes: dict[str, tuple[str, str, str]] = {}
        async with anyio.create_task_group() as group:
            await watch.start(group)
            await _examples_in_waves(kind, api, watch, examples, workloads, outcomes)
            # A pod runc could not start for this host's cgroup v1 freezer fails its task, as it would with no
            # dispatcher. Such a run (its worker's Events say so) is submitted once more, under another name.
            again = [(e, _renamed(run, "-again"), kept) for e, run, kept in examples
                     if outcomes[e][0] != "True" and watch.froze(run["metadata"]["name"])]  # fmt: skip
            if again:
                sys.stderr.write(f"\n[kind] submitted again after 'unable to freeze': {[e for e, _, _ in again]}\n")
                await _examples_in_waves(kind, api, watch, again, workloads, outcomes)
            group.cancel_scope.cancel()
        sys.stderr.write("\n[kind] Tekton's examples:\n" + "".join(f"  {e}: {r} ({m})\n"
                                                             for e, (_, r, m) in outcomes.items()))  # fmt: skip
        # Succeeded=True: reason Succeeded, or Completed where a task was skipped by its `when`
        assert {e: s for e, (s, _, _) in outcomes.items()} == dict.fromkeys(upstream.EXAMPLES, "True"), outcomes
        for name, wl in workloads.items():
            await _nothing_left(kind, api, wl, name)
        for worker in WORKERS:  # the volumeClaimTemplates' claims went with their runs' copies
            await eventually(lambda w=worker: _claims(kind, w), until=lambda c: c == [], timeout=120,  # type: ignore[misc]
                             what=f"the examples' claims and volumes gone from {worker}")  # fmt: skip
    finally:
        removal = ("delete", "--ignore-not-found", "-f", "-")
        await anyio.to_thread.run_sync(lambda: _on_workers(kind, *removal, stdin=beside))
        await integration.remove(kind, api, workers=True)


def test_the_hosts_kernel_settings_are_unchanged(kind: KindEnvironment) -> None:
    """kubelet writes non-namespaced settings; the node image's guard keeps them inside the nodes. Last in this
    module: every scenario above has run kubelets on three nodes by now."""
    from e2e.kind.clusters import host_settings

    assert kind.host_settings_before, "the provider recorded the host's settings before the clusters started"
    assert host_settings() == kind.host_settings_before


async def test_no_create_is_refused_while_the_leader_pod_goes_and_the_deployment_rolls(
    kind: KindEnvironment, api: dict[str, ApiClient]
) -> None:
    """config/integration's webhook (failurePolicy Fail) answers through a graceful deletion of the leader Pod and
    a rolling restart: a stream of queued PipelineRun creates (5/s, bounded) sees no refusal, and every run
    created exists, held by the webhook. The queue named is one no LocalQueue serves: nothing is admitted or run."""
    runs = Objects(api["manager"], PIPELINERUNS)
    created: list[str] = []
    refused: list[str] = []

    def body(name: str) -> Object:
        run = example()
        run["metadata"]["name"] = name
        run["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "kind-rollout-nowhere"
        return run

    probes = iter(range(1000))

    async def held() -> bool:  # each attempt its own name: one admitted unheld must not turn into AlreadyExists
        made = await runs.create(body(f"kind-rollout-probe-{next(probes)}"), NAMESPACE)
        return bool(made["spec"].get("status") == "PipelineRunPending")

    async def stream(limit: int) -> None:
        for i in range(limit):
            name = f"kind-rollout-{i}"
            try:
                with anyio.fail_after(15):
                    made = await runs.create(body(name), NAMESPACE)
            except Exception as e:  # every refusal is recorded, whatever its kind
                refused.append(f"{name}: {type(e).__name__}: {e}")
            else:
                assert made["spec"].get("status") == "PipelineRunPending", f"{name} not held by the webhook"
                created.append(name)
            await anyio.sleep(0.2)  # pacing: 5 creates a second

    async def answered() -> int:
        return len(created) + len(refused)

    try:
        await integration.install(kind, api, workers=False)
        await eventually(held, timeout=120, interval=1, what="the webhook holds a create")

        async with anyio.create_task_group() as group:
            group.start_soon(stream, 600)  # ~120 s at most
            await eventually(answered, until=lambda n: n >= 10, what="creates flow")

            leader = await live_leader(api, timeout=60)
            await anyio.to_thread.run_sync(
                lambda: kind.run_kubectl("manager", "-n", SYSTEM, "delete", "pod", leader, "--wait=false")
            )
            await rolled_out(kind, api, "the leader's Pod replaced")
            await restart(api, "rolling")
            await rolled_out(kind, api, "the rolling restart complete")
            after = await answered()
            await eventually(answered, until=lambda n: n >= after + 10, what="creates after the last old Pod is gone")
            group.cancel_scope.cancel()

        sys.stderr.write(f"\n[kind] {len(created)} creates answered, {len(refused)} refused\n")
        assert refused == [], f"{len(refused)} of {len(created) + len(refused)} creates refused:\n" + "\n".join(
            refused[:10]
        )
        assert len(created) >= 30
        for name in created:
            stored = await runs.get(name, NAMESPACE)
            assert stored is not None, f"{name} was answered but does not exist"
            assert stored["spec"].get("status") == "PipelineRunPending"
    finally:
        await anyio.to_thread.run_sync(
            lambda: kind.run_kubectl(
                "manager",
                "-n",
                NAMESPACE,
                "delete",
                "pipelineruns",
                "-l",
                "kueue.x-k8s.io/queue-name=kind-rollout-nowhere",
                "--wait=false",
            )
        )
        await integration.remove(kind, api, workers=False)


WEBHOOK_SECRET, WEBHOOK_CONFIGURATION = "multikueue-webhook-cert", "multikueue-mutating-webhook"
SECRETS = Resource("", "v1", "secrets", "Secret")
MUTATING_WEBHOOKS = Resource("admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations",
                             "MutatingWebhookConfiguration", namespaced=False)  # fmt: skip
SERVING_CHANGED = "webhook serving certificate changed"  # logged by a replica that starts serving a new certificate


def _cas(text: str | None) -> tuple[x509.Certificate, ...]:
    """The certificates of a base64 PEM bundle (a Secret's ca.crt, a webhook's caBundle), in order."""
    return tuple(x509.load_pem_x509_certificates(base64.b64decode(text))) if text else ()


@dataclass(frozen=True)
class _Trust:
    secret: tuple[x509.Certificate, ...]  # the webhook Secret's ca.crt; empty while there is no Secret
    configured: tuple[tuple[x509.Certificate, ...], ...]  # each webhook's caBundle

    def agreed(self) -> bool:
        return bool(self.secret and self.configured) and all(cas == self.secret for cas in self.configured)


async def _trust(api: dict[str, ApiClient]) -> _Trust:
    secret = await Objects(api["manager"], SECRETS).get(WEBHOOK_SECRET, SYSTEM)
    configuration = await Objects(api["manager"], MUTATING_WEBHOOKS).get(WEBHOOK_CONFIGURATION)
    assert configuration is not None, f"no MutatingWebhookConfiguration {WEBHOOK_CONFIGURATION}"
    webhooks = configuration.get("webhooks") or []
    return _Trust(_cas(((secret or {}).get("data") or {}).get("ca.crt")),
                  tuple(_cas(w["clientConfig"].get("caBundle")) for w in webhooks))  # fmt: skip


async def _agreed(api: dict[str, ApiClient], what: str) -> _Trust:
    return await eventually(lambda: _trust(api), until=_Trust.agreed, timeout=60, interval=0.5,
                            what=f"the caBundle is the webhook Secret's bundle: {what}")  # fmt: skip


async def _rotated(api: dict[str, ApiClient], before: _Trust) -> x509.Certificate:
    """The new CA, once the Secret written anew and the caBundle agree on a bundle that keeps the one before."""
    rotated = await eventually(lambda: _trust(api), until=lambda t: t.agreed() and t.secret != before.secret,
                               timeout=60, interval=0.5,
                               what=f"a new CA in Secret {WEBHOOK_SECRET} and in the caBundle")  # fmt: skip
    new = [ca for ca in rotated.secret if ca not in before.secret]
    names = [ca.subject.rfc4514_string() for ca in rotated.secret]
    assert len(new) == 1, f"one new CA in the bundle: {names}"
    assert len(rotated.secret) == 2, f"the bundle keeps the CA trusted before beside the new one: {names}"
    return new[0]


async def _serving_changes(kind: KindEnvironment, api: dict[str, ApiClient]) -> dict[str, list[str]]:
    """For each running dispatcher Pod, the issuer of every certificate it changed to, as its (JSON) log says."""

    def issuers(pod: str) -> list[str]:
        found = []
        for line in kind.run_kubectl("manager", "-n", SYSTEM, "logs", pod, "-c", "controller").splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("event") == SERVING_CHANGED:
                found.append(str(entry.get("issuer")))
        return found

    pods = [p["metadata"]["name"] for p in await dispatcher_pods(api) if not p["metadata"].get("deletionTimestamp")]
    return {pod: await anyio.to_thread.run_sync(issuers, pod) for pod in pods}


async def _every_replica_serves(kind: KindEnvironment, api: dict[str, ApiClient], ca: x509.Certificate,
                                before: dict[str, list[str]]) -> None:  # fmt: skip
    """Each replica logged, since ``before``, one change of certificate: to the one ``ca`` issued."""
    issuer = ca.subject.rfc4514_string()

    def since(logged: dict[str, list[str]]) -> dict[str, list[str]]:
        return {pod: issuers[len(before.get(pod, [])) :] for pod, issuers in logged.items()}

    def switched(logged: dict[str, list[str]]) -> bool:
        return bool(logged) and all(issuer in changes for changes in since(logged).values())

    logged = await eventually(lambda: _serving_changes(kind, api), until=switched, timeout=90, interval=1,
                              what=f"every replica serving the certificate of {issuer}")  # fmt: skip
    assert set(logged) == set(before), f"the same replicas throughout: {sorted(before)}, now {sorted(logged)}"
    assert since(logged) == {pod: [issuer] for pod in logged}, f"one change per replica, to the new CA: {logged}"


async def _stored_and_held(runs: Objects, created: list[str]) -> None:
    stored = {r["metadata"]["name"]: r for r in await runs.items(NAMESPACE)}
    missing = [name for name in created if name not in stored]
    assert missing == [], f"{len(missing)} runs answered but not stored: {missing[:10]}"
    unheld = [name for name in created if stored[name]["spec"].get("status") != "PipelineRunPending"]
    assert unheld == [], f"{len(unheld)} runs stored not held: {unheld[:10]}"


async def test_no_create_is_refused_while_the_webhook_ca_rotates_and_the_manifests_are_applied_again(
    kind: KindEnvironment, api: dict[str, ApiClient]
) -> None:
    """The webhook's generated Secret deleted: a replica writes a new CA whose bundle keeps the CA the caBundle trusts,
    the caBundle follows, and every replica serves the new certificate only once it is trusted; then config/integration
    applied again, which leaves the controller's caBundle as it is. A stream of queued PipelineRun creates (10/s,
    bounded, at least 500) sees no refusal throughout, and every run created exists, held by the webhook. The queue
    named is one no LocalQueue serves: nothing is admitted or run."""
    runs = Objects(api["manager"], PIPELINERUNS)
    created: list[str] = []
    refused: list[str] = []

    def body(name: str) -> Object:
        run = example()
        run["metadata"]["name"] = name
        run["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] = "kind-rollout-nowhere"
        return run

    probes = iter(range(1000))

    async def held() -> bool:  # each attempt its own name: one admitted unheld must not turn into AlreadyExists
        made = await runs.create(body(f"kind-rotation-probe-{next(probes)}"), NAMESPACE)
        return bool(made["spec"].get("status") == "PipelineRunPending")

    async def stream(limit: int) -> None:  # names of their own: the rollout scenario's runs may still be going
        for i in range(limit):
            name = f"kind-rotation-{i}"
            try:
                with anyio.fail_after(15):
                    made = await runs.create(body(name), NAMESPACE)
            except Exception as e:  # every refusal is recorded, whatever its kind
                refused.append(f"{name}: {type(e).__name__}: {e}")
            else:
                assert made["spec"].get("status") == "PipelineRunPending", f"{name} not held by the webhook"
                created.append(name)
            await anyio.sleep(0.1)  # pacing: about 10 creates a second

    async def answered() -> int:
        return len(created) + len(refused)

    try:
        await integration.install(kind, api, workers=False)
        await eventually(held, timeout=120, interval=1, what="the webhook holds a create")
        before = await _agreed(api, "after the install")
        assert len(before.secret) == 1, "a fresh install's Secret holds one CA"
        logged = await _serving_changes(kind, api)

        async with anyio.create_task_group() as group:
            group.start_soon(stream, 800)  # ~90 s at most
            await eventually(answered, until=lambda n: n >= 10, what="creates flow")

            # (1) the Secret deleted: a new CA, whose bundle still carries the one the caBundle trusts
            await anyio.to_thread.run_sync(
                lambda: kind.run_kubectl("manager", "-n", SYSTEM, "delete", "secret", WEBHOOK_SECRET)
            )
            ca = await _rotated(api, before)
            await _every_replica_serves(kind, api, ca, logged)

            # (2) the manifests applied again: the caBundle stays the Secret's bundle (or is written back)
            await anyio.to_thread.run_sync(lambda: integration.apply_again(kind))
            assert ca in (await _agreed(api, "after the manifests applied again")).secret
            await rolled_out(kind, api, "the dispatcher after the manifests applied again")
            after = await answered()
            await eventually(answered, until=lambda n: n >= max(500, after + 10), timeout=240, interval=1,
                             what="500 creates, the last ones after the apply")  # fmt: skip
            group.cancel_scope.cancel()

        sys.stderr.write(f"\n[kind] {len(created) + len(refused)} creates answered, {len(refused)} refused\n")
        assert refused == [], f"{len(refused)} of {len(created) + len(refused)} creates refused:\n" + "\n".join(
            refused[:10]
        )
        assert len(created) >= 500
        await _stored_and_held(runs, created)
    finally:
        await anyio.to_thread.run_sync(
            lambda: kind.run_kubectl(
                "manager",
                "-n",
                NAMESPACE,
                "delete",
                "pipelineruns",
                "-l",
                "kueue.x-k8s.io/queue-name=kind-rollout-nowhere",
                "--wait=false",
            )
        )
        await integration.remove(kind, api, workers=False)
