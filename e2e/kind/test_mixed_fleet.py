"""A fleet that mixes kinds (#47) on the kind clusters, in both modes (tests/integration/test_mixed_fleet.py shows the
same on the test bed). Beside PipelineRun, which both workers serve, two kinds of this scenario's own, whose CRDs are
on the manager and worker1 only: ``Render`` in Kueue mode (a Workload per run, made as its integration would make
it) and ``Sketch`` in Direct mode (one at a time per worker). They are added to the running dispatcher as a user
adds a kind: the CRDs, the RBAC config/manager and config/worker ask for per kind ("add yours"), and the ConfigMap
edited, which the dispatcher follows without a restart. Runs of either go to worker1 alone while worker2 lacks the
kind, and what the user reads says why (the check's message and Events; the placement condition and Events;
``multikueue workers``); the CRDs then installed on worker2 are picked up without a restart and a waiting run goes
there; removed again, new runs stop going there.

No controller runs these kinds: their copies wait on their worker until the runs are deleted on the manager. After
the first Render has gone to worker1, worker1's ClusterQueue is held (``stopPolicy: Hold``), so the next one waits
where its user looks. Everything is put back after: the runs, the CRDs on every cluster, the RBAC, the ConfigMap's
text, worker1's ClusterQueue.
"""

from __future__ import annotations

import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml

from e2e.kind.scene import NAMESPACE, QUEUE, WorkerWatch, condition, dispatcher_pods
from e2e.providers import WORKERS, Environment
from e2e.providers.kind import ROOT, KindEnvironment
from e2e.wiring import CHECK, SYSTEM, kubectl
from multikueue.kube.addresses import CLUSTER_QUEUES, MULTIKUEUE_CLUSTERS, WORKLOADS, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import NotFound
from multikueue.kube.resources import Objects
from multikueue.labels import PLACEMENT_CONDITION, PLACEMENT_WORKER
from multikueue_testbed import crds, kueue
from multikueue_testbed.objects import widget, widget_crd
from multikueue_testbed.waiting import eventually

GROUP = "mixed.e2e.multikueue.x-k8s.io"
PIPELINERUN = "PipelineRun.v1.tekton.dev"
RBAC = "multikueue-e2e-mixed-kinds"
HELD = "pipelines"  # worker1's ClusterQueue (examples/tekton/worker.yaml)
FOUND = 75  # seconds: a kind a worker lacks is looked for again every 30 s (KIND_RETRY_SECONDS)
NOTICED = 30  # seconds: a CRD removed from a worker is noticed at once (its list answers 404)
SERVED, LACKING = "Connected", "Connected; unavailable kinds: "  # the MultiKueueCluster's Active message
Object = dict[str, Any]


@dataclass(frozen=True)
class MixedKind:
    kind: str
    conditions: bool  # its status schema holds conditions: Direct mode's record is then a real condition

    @property
    def framework(self) -> str:
        return f"{self.kind}.v1.{GROUP}"

    @property
    def resource(self) -> Resource:
        return Resource(GROUP, "v1", f"{self.kind.lower()}s", self.kind)

    def crd(self) -> Object:
        crd = widget_crd(strict_status=False, group=GROUP, kind=self.kind)
        if self.conditions:
            status = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
            status["properties"]["conditions"] = {
                "type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}  # fmt: skip
        return crd

    def body(self, name: str) -> Object:
        body = widget(name)  # spec.managedBy: kueue.x-k8s.io/multikueue
        body["apiVersion"], body["kind"] = f"{GROUP}/v1", self.kind
        return body


RENDER = MixedKind("Render", conditions=False)  # Kueue mode
SKETCH = MixedKind("Sketch", conditions=True)  # Direct mode
KINDS = (RENDER, SKETCH)
LACKS = f"Not nominated: worker2: does not serve {RENDER.framework}"  # Render's check message while worker2 lacks it
NOT_SERVED = "worker2: rejected: does not serve this kind"  # worker2's verdict on a Sketch meanwhile
RENDERS = [f"kind-mixed-render-{i}" for i in (1, 2, 3)]
SKETCHES = [f"kind-mixed-sketch-{i}" for i in (1, 2, 3)]


@pytest.fixture
def kind(env: Environment) -> KindEnvironment:
    assert isinstance(env, KindEnvironment), "these scenarios run on the kind provider only"
    return env


# ------------------------------------------------------------------------------------- the kinds added, taken away


def mixed_config(suite: Path) -> str:
    """The suite's configuration with the two kinds added: Render in Kueue mode (the default), Sketch in Direct mode,
    finished when its phase is Done, one at a time per worker (a second one waits rather than go elsewhere)."""
    config = yaml.safe_load(suite.read_text())
    config["multiKueue"]["externalFrameworks"] += [{"name": k.framework} for k in KINDS]
    config["dispatcher"]["adapters"].append({
        "name": SKETCH.framework, "mode": "Direct", "placement": {"maxPerWorker": 1},
        "finished": {"path": ".status.phase", "equals": "Done"}})  # fmt: skip
    return yaml.safe_dump(config)


def configure(kind: KindEnvironment, config: Path) -> None:
    """The ConfigMap's one key replaced as the suite sets it (e2e/wiring.py); the dispatcher watches it: no restart."""
    configmap = kubectl(kind, "manager", "-n", SYSTEM, "create", "configmap", "multikueue-config",
                        f"--from-file=controller_manager_config.yaml={config}", "--dry-run=client",
                        "-o", "yaml")  # fmt: skip
    kubectl(kind, "manager", "apply", "--server-side", "-f", "-", stdin=configmap)


def rbac(cluster: str) -> str:
    """Per kind, what config/manager and config/worker grant PipelineRun: on the manager the dispatcher reads the
    runs and writes their status and (Direct mode) annotations; on a worker it makes, follows and removes copies."""
    plurals = [k.resource.plural for k in KINDS]
    if cluster == "manager":
        account = "multikueue-controller"
        rules = [{"apiGroups": [GROUP], "resources": plurals, "verbs": ["get", "list", "watch", "patch"]},
                 {"apiGroups": [GROUP], "resources": [f"{p}/status" for p in plurals], "verbs": ["patch"]}]  # fmt: skip
    else:
        account = "multikueue-dispatcher"
        rules = [{"apiGroups": [GROUP], "resources": plurals,
                  "verbs": ["create", "get", "list", "watch", "patch", "delete"]}]  # fmt: skip
    api = "rbac.authorization.k8s.io/v1"
    role = {"apiVersion": api, "kind": "ClusterRole", "metadata": {"name": RBAC}, "rules": rules}
    binding = {"apiVersion": api, "kind": "ClusterRoleBinding", "metadata": {"name": RBAC},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": RBAC},
               "subjects": [{"kind": "ServiceAccount", "name": account, "namespace": SYSTEM}]}  # fmt: skip
    return yaml.safe_dump_all([role, binding])


async def active_message(api: dict[str, ApiClient], worker: str) -> str:
    cluster = await Objects(api["manager"], MULTIKUEUE_CLUSTERS).get(worker)
    return str(condition(cluster, "Active").get("message"))


def lacking_both(message: str) -> bool:
    return message.startswith(LACKING) and all(f"{k.framework}: " in message for k in KINDS)


async def worker_says(kind: KindEnvironment, api: dict[str, ApiClient], worker: str, until: Callable[[str], bool],
                      what: str, timeout: float) -> None:  # fmt: skip
    await eventually(lambda: active_message(api, worker), until=until, timeout=timeout, interval=0.5,
                     what=f"the dispatcher saying {what}\n{kind.dispatcher_log()}")  # fmt: skip


async def add_kinds(kind: KindEnvironment, api: dict[str, ApiClient], config: Path) -> None:
    """The CRDs on the manager and worker1, the RBAC on every cluster, the kinds in the ConfigMap; in force once
    worker2's MultiKueueCluster names both kinds as unavailable there."""
    for cluster in ("manager", "worker1"):
        await crds.install_crds(api[cluster], [k.crd() for k in KINDS])
    for cluster in ("manager", *WORKERS):
        await anyio.to_thread.run_sync(lambda c=cluster: kubectl(kind, c, "apply", "--server-side", "-f", "-",  # type: ignore[misc]
                                                                 stdin=rbac(c)))  # fmt: skip
    await anyio.to_thread.run_sync(configure, kind, config)
    await worker_says(kind, api, "worker2", lacking_both, "worker2 lacks both kinds (the new configuration)", 120)


async def hold_worker1(api: dict[str, ApiClient], policy: str) -> None:
    """worker1's ClusterQueue held (``Hold``: nothing new admitted) or released (``None``), once its Kueue says so."""
    queues = Objects(api["worker1"], CLUSTER_QUEUES)
    await queues.patch(HELD, {"spec": {"stopPolicy": policy}})
    active = "False" if policy == "Hold" else "True"
    await eventually(lambda: queues.get(HELD), until=lambda q: condition(q, "Active").get("status") == active,
                     timeout=60, interval=0.5, what=f"worker1's ClusterQueue {HELD} stopPolicy {policy}")  # fmt: skip


async def _try_each(*steps: Callable[[], Awaitable[None]]) -> None:
    """Every step tried, even after one failed; the first failure raised at the end."""
    failures: list[Exception] = []
    for step in steps:
        try:
            await step()
        except Exception as e:  # each step cleans up something of its own: the others still run
            failures.append(e)
    if failures:
        raise failures[0]


async def _left(api: ApiClient, resource: Resource) -> list[str]:
    """The names of the kind's objects in the namespace; none where its CRD is not installed."""
    try:
        return [o["metadata"]["name"] for o in await Objects(api, resource).items(NAMESPACE)]
    except NotFound:
        return []


def workload_of(run: str) -> str:
    """The name of a Render's Workload (``kueue.workload_for``'s)."""
    return f"render-{run}"


async def _runs_gone(kind: KindEnvironment, api: dict[str, ApiClient]) -> None:
    """The runs deleted on the manager; their Workloads and every copy gone from all three clusters."""
    for k in KINDS:
        for name in await _left(api["manager"], k.resource):
            await Objects(api["manager"], k.resource).delete(name, NAMESPACE)

    async def left() -> list[str]:
        found = [f"{c} {k.kind} {n}" for c in api for k in KINDS for n in await _left(api[c], k.resource)]
        return found + [f"{c} Workload {wl}" for c in api for wl in map(workload_of, RENDERS)
                        if await Objects(api[c], WORKLOADS).get(wl, NAMESPACE) is not None]  # fmt: skip

    await eventually(left, until=lambda found: found == [], timeout=120, interval=1,
                     what=f"the runs and their copies gone\n{kind.dispatcher_log()}")  # fmt: skip


async def _config_back(kind: KindEnvironment, api: dict[str, ApiClient]) -> None:
    """The suite's ConfigMap text back; in force once no worker's MultiKueueCluster names an unavailable kind (worker2
    lacks both kinds by the end of the scenario)."""
    assert kind.dispatcher_config is not None
    await anyio.to_thread.run_sync(configure, kind, kind.dispatcher_config)
    for worker in WORKERS:
        await worker_says(kind, api, worker, lambda m: m == SERVED,
                          f"{worker} Connected, the kinds no longer configured", 120)  # fmt: skip


async def _crds_gone(api: dict[str, ApiClient]) -> None:
    for cluster in api:
        for k in KINDS:
            await crds.remove_crd(api[cluster], k.crd())
    await eventually(lambda: served_anywhere(api), until=lambda found: found == [], timeout=120, interval=1,
                     what="the kinds' CRDs gone from every cluster")  # fmt: skip


async def served_anywhere(api: dict[str, ApiClient]) -> list[str]:
    return [f"{c} {k.kind}" for c in api for k in KINDS if await discovered(api[c], k)]


async def discovered(api: ApiClient, k: MixedKind) -> bool:
    """Whether the cluster's discovery lists the kind now."""
    try:
        listed = await api.request("GET", f"/apis/{GROUP}/v1")
    except NotFound:
        return False
    return any(r.get("kind") == k.kind for r in listed.get("resources") or [])


async def put_back(kind: KindEnvironment, api: dict[str, ApiClient]) -> None:
    """What the scenario made, gone: the runs first (so no copy is left to a worker's CRD removal), worker1's queue
    released, the configuration back, then the CRDs and the RBAC."""

    async def no_rbac() -> None:
        for cluster in api:
            await anyio.to_thread.run_sync(lambda c=cluster: kubectl(kind, c, "delete", "--ignore-not-found", "-f", "-",  # type: ignore[misc]
                                                                     stdin=rbac(c)))  # fmt: skip

    await _try_each(lambda: _runs_gone(kind, api), lambda: hold_worker1(api, "None"),
                    lambda: _config_back(kind, api), lambda: _crds_gone(api), no_rbac)  # fmt: skip


# ----------------------------------------------------------------------------------------------- what users read


async def events(api: dict[str, ApiClient], obj: Object) -> list[tuple[str, str, str]]:
    """The Events on a manager object (``kubectl describe``'s): type, reason, message."""
    selector = f"involvedObject.uid={obj['metadata']['uid']}"
    listed = await api["manager"].request("GET", f"/api/v1/namespaces/{NAMESPACE}/events",
                                          query={"fieldSelector": selector})  # fmt: skip
    return [(e["type"], e["reason"], e["message"]) for e in listed["items"]]


async def told(api: dict[str, ApiClient], obj: Object, wanted: Callable[[tuple[str, str, str]], bool],
               what: str) -> None:  # fmt: skip
    await eventually(lambda: events(api, obj), until=lambda found: any(wanted(e) for e in found), timeout=30,
                     interval=0.5, what=f"an Event on {obj['kind']} {obj['metadata']['name']}: {what}")  # fmt: skip


async def workers_say(kind: KindEnvironment, tmp_path: Path) -> dict[str, str]:
    """``multikueue workers`` as a user on the host runs it (the suite's kubeconfig for the manager, the user's own
    for the workers; the configured kinds read from the deployed ConfigMap): each worker's ``kinds:`` line."""
    given = []
    for worker in WORKERS:
        path = tmp_path / f"{worker}.kubeconfig"
        path.write_text(yaml.safe_dump(kind.kubeconfig(worker)))
        given += ["--worker-kubeconfig", f"{worker}={path}"]
    argv = [sys.executable, "-m", "multikueue", "workers", "--kubeconfig", str(kind.kubeconfig_path), "--context",
            "manager", "--secrets-namespace", SYSTEM, *given]  # fmt: skip
    with anyio.fail_after(60):
        done = await anyio.run_process(argv, check=False, cwd=ROOT)
    out = done.stdout.decode()
    assert done.returncode == 0, done.stderr.decode()
    shown, worker = {}, ""
    for line in out.splitlines():
        if line.startswith("worker "):
            worker = line.split()[1].rstrip(":")
        elif line.startswith("  kinds: "):
            shown[worker] = line.removeprefix("  kinds: ")
    return shown


def kinds_line(*, served: bool) -> str:
    return ", ".join([PIPELINERUN, *(k.framework + ("" if served else " (not served)") for k in KINDS)])


async def workers_show(kind: KindEnvironment, tmp_path: Path, *, worker2: bool) -> None:
    shown = await workers_say(kind, tmp_path)
    assert shown == {"worker1": kinds_line(served=True), "worker2": kinds_line(served=worker2)}, shown


# ------------------------------------------------------------------------------------------------- Kueue mode


def check(workload: Object | None) -> Object:
    states = ((workload or {}).get("status") or {}).get("admissionChecks") or []
    return next((s for s in states if s["name"] == CHECK), {})


async def render(api: dict[str, ApiClient], name: str) -> tuple[Object, str]:
    """A Render on the manager and the Workload its integration would make; the run and its Workload's name."""
    body = RENDER.body(name)
    body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": QUEUE}
    run = await Objects(api["manager"], RENDER.resource).create(body, NAMESPACE)
    workload = await Objects(api["manager"], WORKLOADS).create(kueue.workload_for(run, queue=QUEUE), NAMESPACE)
    return run, str(workload["metadata"]["name"])


async def workload(kind: KindEnvironment, api: dict[str, ApiClient], name: str, until: Callable[[Object], bool],
                   what: str, timeout: float = 90) -> Object:  # fmt: skip
    found = await eventually(lambda: Objects(api["manager"], WORKLOADS).get(name, NAMESPACE),
                             until=lambda w: w is not None and until(w), timeout=timeout, interval=0.5,
                             what=f"Workload {name} {what}\n{kind.dispatcher_log()}")  # fmt: skip
    assert found is not None
    return found


def admitted_on(worker: str) -> Callable[[Object], bool]:
    return lambda w: (w.get("status") or {}).get("clusterName") == worker


async def copy_on(kind: KindEnvironment, api: dict[str, ApiClient], worker: str, k: MixedKind, name: str) -> None:
    await eventually(lambda: Objects(api[worker], k.resource).get(name, NAMESPACE), until=lambda o: o is not None,
                     timeout=60, interval=0.5,
                     what=f"{k.kind} {name}'s copy on {worker}\n{kind.dispatcher_log()}")  # fmt: skip


async def waits_for_worker1(kind: KindEnvironment, api: dict[str, ApiClient], name: str) -> None:
    """A Render run (worker1 held) nominated to worker1 alone, its copy there; the check Pending and saying why worker2
    is left out, as are the Warning Events on its Workload and on the Render."""
    run, wl = await render(api, name)
    waiting = await workload(kind, api, wl, lambda w: check(w).get("message") == LACKS
                             and (w.get("status") or {}).get("nominatedClusterNames") == ["worker1"],
                             "nominated to worker1 alone, its check saying why")  # fmt: skip
    assert check(waiting)["state"] == "Pending", check(waiting)
    await eventually(lambda: Objects(api["worker1"], WORKLOADS).get(wl, NAMESPACE), until=lambda w: w is not None,
                     timeout=30, interval=0.5, what=f"{wl}'s copy on worker1")  # fmt: skip
    assert await Objects(api["worker2"], WORKLOADS).get(wl, NAMESPACE) is None
    await told(api, waiting, lambda e: e[0] == "Warning" and e[2] == LACKS, LACKS)
    await told(api, run, lambda e: e == ("Warning", "WorkerLacksKind", LACKS), LACKS)


# ------------------------------------------------------------------------------------------------ Direct mode


async def sketch(kind: KindEnvironment, api: dict[str, ApiClient], name: str, reason: str) -> Object:
    """A Sketch created on the manager, once its placement condition's reason is ``reason``."""
    sketches = Objects(api["manager"], SKETCH.resource)
    await sketches.create(SKETCH.body(name), NAMESPACE)
    found = await eventually(lambda: sketches.get(name, NAMESPACE),
                             until=lambda o: condition(o, PLACEMENT_CONDITION).get("reason") == reason, timeout=90,
                             interval=0.5, what=f"Sketch {name}: {reason}\n{kind.dispatcher_log()}")  # fmt: skip
    assert found is not None
    return found


def placed_on(obj: Object) -> str | None:
    return (obj["metadata"].get("annotations") or {}).get(PLACEMENT_WORKER)


async def no_worker_fits(kind: KindEnvironment, api: dict[str, ApiClient], name: str) -> None:
    """A Sketch that waits: worker1 full, worker2 not serving the kind, in its condition and a Warning Event."""
    waiting = await sketch(kind, api, name, "NoWorkerFits")
    record = condition(waiting, PLACEMENT_CONDITION)
    assert record["status"] == "False"
    assert "worker1: rejected: full (1/1 running)" in record["message"], record
    assert NOT_SERVED in record["message"], record
    assert placed_on(waiting) is None
    await told(api, waiting, lambda e: e == ("Warning", "NoWorkerFits", record["message"]), record["message"])


# --------------------------------------------------------------------------------------------------- the scenario


async def lacking_on_worker2(kind: KindEnvironment, api: dict[str, ApiClient], tmp_path: Path) -> None:
    """worker2 lacks both kinds: their runs go to worker1 alone; a second one waits there, and says why."""
    await workers_show(kind, tmp_path, worker2=False)
    await render(api, RENDERS[0])
    await workload(kind, api, workload_of(RENDERS[0]), admitted_on("worker1"), "admitted on worker1")
    await copy_on(kind, api, "worker1", RENDER, RENDERS[0])
    await hold_worker1(api, "Hold")
    await waits_for_worker1(kind, api, RENDERS[1])

    placed = await sketch(kind, api, SKETCHES[0], "Placed")
    assert placed_on(placed) == "worker1"
    record = condition(placed, PLACEMENT_CONDITION)
    assert record["message"].startswith("placed on worker1; worker1: fits ("), record
    assert NOT_SERVED in record["message"], record
    await told(api, placed, lambda e: e == ("Normal", "Placed", record["message"]), record["message"])
    await copy_on(kind, api, "worker1", SKETCH, SKETCHES[0])
    await no_worker_fits(kind, api, SKETCHES[1])


async def _on_worker2(api: dict[str, ApiClient]) -> list[str]:
    """What of the scenario's runs worker2 holds: copies of either kind, Render Workload copies."""
    found = [f"{k.kind} {n}" for k in KINDS for n in await _left(api["worker2"], k.resource)]
    return found + [f"Workload {wl}" for wl in map(workload_of, RENDERS)
                    if await Objects(api["worker2"], WORKLOADS).get(wl, NAMESPACE) is not None]  # fmt: skip


async def installed_on_worker2(kind: KindEnvironment, api: dict[str, ApiClient], tmp_path: Path) -> None:
    """The CRDs installed on worker2: picked up without a restart, and the waiting runs go there. Then they are
    deleted on the manager, so no copy is left there for the CRDs' removal to take."""
    await crds.install_crds(api["worker2"], [k.crd() for k in KINDS])
    await worker_says(kind, api, "worker2", lambda m: m == SERVED, "worker2 serves every kind", FOUND)
    await workers_show(kind, tmp_path, worker2=True)
    went = await workload(kind, api, workload_of(RENDERS[1]), admitted_on("worker2"), "admitted on worker2")
    assert check(went).get("message") == 'The workload was admitted on "worker2"', check(went)
    await copy_on(kind, api, "worker2", RENDER, RENDERS[1])
    sketches = Objects(api["manager"], SKETCH.resource)
    placed = await eventually(lambda: sketches.get(SKETCHES[1], NAMESPACE),
                              until=lambda o: o is not None and placed_on(o) == "worker2", timeout=60, interval=0.5,
                              what=f"Sketch {SKETCHES[1]} placed on worker2\n{kind.dispatcher_log()}")  # fmt: skip
    assert condition(placed, PLACEMENT_CONDITION).get("reason") == "Placed"
    await copy_on(kind, api, "worker2", SKETCH, SKETCHES[1])

    await Objects(api["manager"], RENDER.resource).delete(RENDERS[1], NAMESPACE)
    await sketches.delete(SKETCHES[1], NAMESPACE)
    await eventually(lambda: _on_worker2(api), until=lambda left: left == [], timeout=60, interval=0.5,
                     what=f"the deleted runs' copies gone from worker2\n{kind.dispatcher_log()}")  # fmt: skip


async def removed_from_worker2(kind: KindEnvironment, api: dict[str, ApiClient], tmp_path: Path) -> None:
    """The CRDs deleted on worker2: noticed, and new runs no longer go there."""
    for k in KINDS:
        await crds.remove_crd(api["worker2"], k.crd())
    await worker_says(kind, api, "worker2", lacking_both, "worker2 lacks both kinds again", NOTICED)
    await workers_show(kind, tmp_path, worker2=False)
    await waits_for_worker1(kind, api, RENDERS[2])
    await no_worker_fits(kind, api, SKETCHES[2])


def restarts(pods: list[Object]) -> dict[str, int]:
    """Each dispatcher Pod and how often its containers restarted."""
    return {p["metadata"]["name"]: sum(s.get("restartCount", 0) for s in (p.get("status") or {}).get(
        "containerStatuses") or []) for p in pods}  # fmt: skip


async def test_a_second_kind_goes_only_where_it_is_served_and_follows_its_crd_in_both_modes(
    kind: KindEnvironment, api: dict[str, ApiClient], tmp_path: Path
) -> None:
    """The kinds added to the running dispatcher; worker2 without them, with them, without them again (the module's
    docstring tells the story). No Workload copy is ever made on a worker that lacks the kind, and neither the
    configuration change nor a CRD coming or going restarts the dispatcher."""
    assert kind.dispatcher_config is not None
    config = tmp_path / "mixed-config.yaml"
    config.write_text(mixed_config(kind.dispatcher_config))
    before = restarts(await dispatcher_pods(api))
    watch = WorkerWatch(api)  # every Workload copy the workers ever held
    try:
        await add_kinds(kind, api, config)
        async with anyio.create_task_group() as group:
            await watch.start(group)
            await lacking_on_worker2(kind, api, tmp_path)
            await installed_on_worker2(kind, api, tmp_path)
            await removed_from_worker2(kind, api, tmp_path)
            group.cancel_scope.cancel()
        copied = {run: bool(watch.versions("worker2", "Workload", workload_of(run))) for run in RENDERS}
        assert copied == {RENDERS[0]: False, RENDERS[1]: True, RENDERS[2]: False}, "Workload copies made on worker2"
        assert restarts(await dispatcher_pods(api)) == before, "the dispatcher was restarted"
    finally:
        await put_back(kind, api)
