"""A fleet that mixes kinds (#47), in both modes: PipelineRun served by both workers, and a second kind whose CRD is on
the manager and worker1 (worker2 gets it later, or loses it). Runs of the second kind go to worker1 alone while
worker2 lacks it, and what the user reads says why; its CRD installed on worker2 later is picked up without a restart;
removed again, new runs stop going there; ``multikueue workers`` says which kinds each worker serves. The tests play
Kueue (Kueue mode) and the kinds' controllers on the workers.

Each test has a second kind of its own (a CRD deleted by another test may still be going away), in a group no other
test installs: the bed is shared."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.client.exceptions import ApiException

from multikueue.clusters import reconciler
from multikueue.kube.addresses import MULTIKUEUE_CLUSTERS, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue_testbed import crds, kueue
from multikueue_testbed.client import k8s
from multikueue_testbed.objects import pipelinerun, widget, widget_crd
from multikueue_testbed.waiting import eventually
from tests.integration.scenario import Scenario

GROUP = "mixed.multikueue.x-k8s.io"
PIPELINERUN = "PipelineRun.v1.tekton.dev"
SUCCEEDED = '.status.conditions[?type=="Succeeded"].status'
WORKER, PHASE = "multikueue.x-k8s.io/worker", "multikueue.x-k8s.io/phase"
RECORD = "multikueue.x-k8s.io/placement"
NOTICED = 15  # seconds the dispatcher gets to notice a CRD removed from a worker


@dataclass(frozen=True)
class Fleet:
    """One test's second kind, its mode, and whether worker2 serves it from the start."""

    kind: str
    mode: str
    on_worker2: bool = False

    @property
    def framework(self) -> str:
        return f"{self.kind}.v1.{GROUP}"

    @property
    def resource(self) -> Resource:
        return Resource(GROUP, "v1", f"{self.kind.lower()}s", self.kind)

    def crd(self) -> dict[str, Any]:
        return widget_crd(strict_status=False, group=GROUP, kind=self.kind)

    def body(self, name: str) -> dict[str, Any]:
        body = widget(name)
        body["apiVersion"], body["kind"] = f"{GROUP}/v1", self.kind
        if self.mode == "Kueue":
            body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "user-queue"}
        return body

    def config(self) -> str:
        frameworks = [{"name": PIPELINERUN}, {"name": self.framework}]
        document: dict[str, Any] = {
            "multiKueue": {"gcInterval": "2s", "workerLostTimeout": "10s", "externalFrameworks": frameworks}
        }
        if self.mode == "Direct":
            document["dispatcher"] = {"adapters": [
                {"name": PIPELINERUN, "mode": "Direct", "finished": {"path": SUCCEEDED, "notIn": ["Unknown"]}},
                # One at a time per worker: a second run has to wait, or to go to worker2.
                {"name": self.framework, "mode": "Direct", "finished": {"path": ".status.phase", "equals": "Done"},
                 "placement": {"maxPerWorker": 1}},
            ]}  # fmt: skip
        return yaml.safe_dump(document)


def mixed(fleet: Fleet) -> pytest.MarkDecorator:
    """Run the test with this fleet and its configuration."""
    return pytest.mark.parametrize(("fleet", "multikueue_config"), [pytest.param(fleet, fleet.config(), id=fleet.mode)],
                                   indirect=["fleet"])  # fmt: skip


@pytest.fixture
async def fleet(
    request: pytest.FixtureRequest,
    manager_api: ApiClient,
    worker1_api: ApiClient,
    worker2_api: ApiClient,
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[Fleet]:
    """The second kind's CRD on the manager and worker1 (and worker2 where the fleet says) before the dispatcher
    starts (a test names it before ``scenario``); removed everywhere after. A worker lacking a kind is looked at
    again every second instead of every 30 s, to keep the test short."""
    chosen: Fleet = request.param
    monkeypatch.setattr(reconciler, "KIND_RETRY_SECONDS", 1.0)
    for api in (manager_api, worker1_api, *([worker2_api] if chosen.on_worker2 else [])):
        await crds.install_crds(api, [chosen.crd()])
    yield chosen
    for api in (manager_api, worker1_api, worker2_api):
        await crds.remove_crd(api, chosen.crd())


# ------------------------------------------------------------------------------------------------ helpers


def notes(obj: Any) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


async def discovered(api: ApiClient, fleet: Fleet) -> bool:
    """Whether the cluster's discovery lists the kind now (the test bed's own client, not the dispatcher's)."""
    try:
        listed = await k8s_client.CustomObjectsApi(k8s(api)).get_api_resources(GROUP, "v1")
    except ApiException as e:
        if e.status == 404:
            return False
        raise
    return any(r.kind == fleet.kind for r in listed.resources)


async def active_message(s: Scenario, worker: str) -> str:
    """The message of the worker's MultiKueueCluster ``Active`` condition, as the dispatcher wrote it."""
    cluster = await Objects(s.api["manager"], MULTIKUEUE_CLUSTERS).get(s.names[worker]) or {}
    active = [c for c in (cluster.get("status") or {}).get("conditions") or [] if c["type"] == "Active"]
    return str(active[0]["message"]) if active else ""


def unavailable(fleet: Fleet) -> str:
    return f"Connected; unavailable kinds: {fleet.framework}: "


async def command(s: Scenario, tmp_path: Path, fleet: Fleet, *argv: str) -> str:
    """A ``multikueue`` command as a user runs it against the manager; its output (exit 0 asserted)."""
    kubeconfig, config = tmp_path / "kubeconfig.yaml", tmp_path / "config.yaml"
    kubeconfig.write_text(yaml.safe_dump(s.bed.cluster("manager").kubeconfig))
    config.write_text(fleet.config())
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, "-m", "multikueue", *argv, "--kubeconfig", str(kubeconfig)], check=False
        )
    assert done.returncode == 0, done.stderr.decode()
    return done.stdout.decode()


async def workers_say(s: Scenario, tmp_path: Path, fleet: Fleet, *, worker2: bool) -> None:
    """``multikueue workers``: worker1 serves both kinds; worker2 PipelineRun, and the second kind if ``worker2``."""
    out = await command(s, tmp_path, fleet, "workers", "--secrets-namespace", s.namespace,
                        "--config-file", str(tmp_path / "config.yaml"))  # fmt: skip
    shown, worker = {}, ""
    for line in out.splitlines():
        if line.startswith("worker "):
            worker = line.split()[1].rstrip(":")
        elif line.startswith("  kinds: "):
            shown[worker] = line.removeprefix("  kinds: ")
    both = f"{PIPELINERUN}, {fleet.framework}"
    expected = {s.names["worker1"]: both, s.names["worker2"]: both + ("" if worker2 else " (not served)")}
    assert shown == expected, out


async def lacking_on_worker2(s: Scenario, fleet: Fleet) -> None:
    """worker2's MultiKueueCluster: connected, and the kind it lacks named (written once the dispatcher connects)."""
    await eventually(lambda: active_message(s, "worker2"), until=lambda m: m.startswith(unavailable(fleet)),
                     what="worker2 connected, lacking the kind")  # fmt: skip


async def install_on_worker2(s: Scenario, fleet: Fleet) -> None:
    await crds.install_crds(s.api["worker2"], [fleet.crd()])
    await eventually(lambda: active_message(s, "worker2"), until=lambda m: m == "Connected",
                     what="the dispatcher saying worker2 serves every kind, with no restart")  # fmt: skip


async def remove_from_worker2(s: Scenario, tmp_path: Path, fleet: Fleet) -> None:
    """The CRD deleted on worker2 (gone from its discovery); ``workers`` and the dispatcher say so."""
    await crds.remove_crd(s.api["worker2"], fleet.crd())
    await eventually(lambda: discovered(s.api["worker2"], fleet), until=lambda d: not d, what="the CRD gone")
    await workers_say(s, tmp_path, fleet, worker2=False)
    await eventually(lambda: active_message(s, "worker2"), until=lambda m: m.startswith(unavailable(fleet)),
                     timeout=NOTICED, what="the dispatcher saying worker2 no longer serves the kind")  # fmt: skip


# ---------------------------------------------------------------------------------------------- Kueue mode


async def submit(s: Scenario, fleet: Fleet, name: str) -> str:
    """A run of the second kind and the Workload its integration would create, quota reserved; the Workload's name."""
    _, workload = await s.submit_object(fleet.resource, fleet.body(name))
    return str(workload["metadata"]["name"])


async def nominated(s: Scenario, wl_name: str, *workers: str) -> Any:
    """The Workload nominated to exactly ``workers``, with its copies there; the manager's Workload."""
    expected = sorted(s.names[w] for w in workers)
    workload = await s.wait(s.workloads("manager"), wl_name,
                            lambda w: sorted((w.get("status") or {}).get("nominatedClusterNames") or []) == expected,
                            f"{wl_name} nominated to {workers}")  # fmt: skip
    await s.copied(wl_name, *workers)
    return workload


async def not_on_worker2(s: Scenario, wl_name: str) -> None:
    """Nominated to worker1 alone (the copies are made after the nominations are written): no copy on worker2."""
    await nominated(s, wl_name, "worker1")
    assert await s.workloads("worker2").get(wl_name, s.namespace) is None


async def runs_on(s: Scenario, fleet: Fleet, wl_name: str, name: str, worker: str) -> None:
    """The worker's Kueue admits the copy: the run is created there."""
    await kueue.admit(s.api[worker], wl_name, s.namespace)
    await s.wait(s.objects(worker, fleet.resource), name, lambda o: o is not None, f"{name} on {worker}")


@mixed(Fleet("Render", "Kueue"))
async def test_kueue_mode_a_kind_goes_only_where_it_is_served_and_to_worker2_once_installed(
    fleet: Fleet, scenario: Scenario, tmp_path: Path
) -> None:
    s = scenario
    assert not await discovered(s.api["worker2"], fleet)
    await lacking_on_worker2(s, fleet)
    await eventually(lambda: active_message(s, "worker1"), until=lambda m: m == "Connected", what="worker1 Connected")
    await workers_say(s, tmp_path, fleet, worker2=False)

    # PipelineRun: both workers serve it, both are nominated, and worker2's Kueue may win.
    _, pipeline = await s.submit("pr-1")
    await nominated(s, pipeline["metadata"]["name"], "worker1", "worker2")
    await kueue.admit(s.api["worker2"], pipeline["metadata"]["name"], s.namespace)
    await s.wait(s.runs("worker2"), "pr-1", lambda o: o is not None, "pr-1 on worker2")

    # The second kind: worker1 alone.
    first = await submit(s, fleet, "r-1")
    await not_on_worker2(s, first)
    await runs_on(s, fleet, first, "r-1", "worker1")
    waiting = await submit(s, fleet, "r-2")  # its copy on worker1 not admitted: it still waits
    await not_on_worker2(s, waiting)

    # worker2 gets the CRD: the waiting run and new ones go there too, with no restart.
    await install_on_worker2(s, fleet)
    await workers_say(s, tmp_path, fleet, worker2=True)
    await nominated(s, waiting, "worker1", "worker2")
    await runs_on(s, fleet, waiting, "r-2", "worker2")
    await nominated(s, await submit(s, fleet, "r-3"), "worker1", "worker2")


@mixed(Fleet("Brush", "Kueue"))
async def test_kueue_mode_the_check_says_why_a_worker_is_not_nominated_for_a_kind_it_lacks(
    fleet: Fleet, scenario: Scenario
) -> None:
    """Where the user of a waiting run looks (the check's message): worker2 left out, and the kind it lacks."""
    s = scenario
    wl_name = await submit(s, fleet, "b-1")
    await not_on_worker2(s, wl_name)
    workload = await eventually(
        lambda: s.workloads("manager").get(wl_name, s.namespace),
        until=lambda w: s.names["worker2"] in _check_message(s, w) and fleet.kind in _check_message(s, w),
        timeout=10,
        what="the check naming worker2 and the kind it lacks",
    )
    assert _check_message(s, workload), workload


def _check_message(s: Scenario, workload: Any) -> str:
    checks = ((workload or {}).get("status") or {}).get("admissionChecks") or []
    return str(next((c.get("message") or "" for c in checks if c["name"] == s.names["check"]), ""))


@mixed(Fleet("Ink", "Kueue", on_worker2=True))
async def test_kueue_mode_a_kind_removed_from_worker2_stops_new_runs_going_there(
    fleet: Fleet, scenario: Scenario, tmp_path: Path
) -> None:
    s = scenario
    await workers_say(s, tmp_path, fleet, worker2=True)
    await nominated(s, await submit(s, fleet, "r-1"), "worker1", "worker2")

    await remove_from_worker2(s, tmp_path, fleet)
    await not_on_worker2(s, await submit(s, fleet, "r-2"))


# ---------------------------------------------------------------------------------------------- Direct mode


async def create(s: Scenario, fleet: Fleet, name: str) -> None:
    await s.objects("manager", fleet.resource).create(fleet.body(name), s.namespace)


async def create_pipelinerun(s: Scenario, name: str) -> None:
    body = pipelinerun(name)
    body["spec"]["managedBy"] = kueue.MANAGED_BY
    await s.runs("manager").create(body, s.namespace)


def record(obj: Any) -> dict[str, Any]:
    """The placement record: the ``MultiKueuePlacement`` condition, or its annotation where the kind's status has
    no ``conditions`` (the second kind's)."""
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    condition = next((c for c in conditions if c["type"] == "MultiKueuePlacement"), None)
    return dict(condition or json.loads(notes(obj).get(RECORD) or "{}"))


async def placed_on(s: Scenario, objects: Objects, name: str) -> str:
    """The worker (worker1 or worker2) a run is placed on, once its record says so; its copy there."""
    run = await s.wait(objects, name, lambda o: bool(notes(o).get(WORKER)) and record(o).get("reason") == "Placed",
                       f"{name} placed")  # fmt: skip
    worker = next(w for w in ("worker1", "worker2") if s.names[w] == notes(run)[WORKER])
    copies = Objects(s.api[worker], objects.resource)
    await s.wait(copies, name, lambda o: o is not None, f"{name}'s copy on {worker}")
    return worker


async def waits(s: Scenario, fleet: Fleet, name: str) -> str:
    """A run no worker fits now: not placed; its record's message, every worker's verdict."""
    run = await s.wait(s.objects("manager", fleet.resource), name,
                       lambda o: record(o).get("reason") == "NoWorkerFits", f"{name} waiting")  # fmt: skip
    assert WORKER not in notes(run)
    return str(record(run)["message"])


@mixed(Fleet("Sketch", "Direct"))
async def test_direct_mode_a_kind_goes_only_where_it_is_served_and_to_worker2_once_installed(
    fleet: Fleet, scenario: Scenario, tmp_path: Path
) -> None:
    s = scenario
    w1, w2 = s.names["worker1"], s.names["worker2"]
    sketches = s.objects("manager", fleet.resource)
    await lacking_on_worker2(s, fleet)
    await workers_say(s, tmp_path, fleet, worker2=False)

    # PipelineRun: both workers serve it, so both fit (which one takes it depends on their load, and the bed is
    # shared: an earlier test's leftovers may be placed too).
    await create_pipelinerun(s, "pr-1")
    await placed_on(s, s.runs("manager"), "pr-1")
    message = str(record(await s.runs("manager").get("pr-1", s.namespace))["message"])
    assert f"{w1}: fits (" in message, message
    assert f"{w2}: fits (" in message, message

    # The second kind: worker1 alone. With worker1 full, the next one waits rather than go to worker2, and says why.
    await create(s, fleet, "s-1")
    assert await placed_on(s, sketches, "s-1") == "worker1"
    await create(s, fleet, "s-2")
    message = await waits(s, fleet, "s-2")
    assert f"{w1}: rejected: full (1/1 running)" in message, message
    assert f"{w2}: rejected: does not serve this kind" in message, message
    shown = await command(s, tmp_path, fleet, "explain", "--kind", fleet.framework, f"{s.namespace}/s-2")
    assert f"{fleet.kind} {s.namespace}/s-2\n" in shown, shown
    assert f"\n    {w2}: rejected: does not serve this kind\n" in shown, shown

    # worker2 gets the CRD: the waiting run goes there, with no restart.
    await install_on_worker2(s, fleet)
    await workers_say(s, tmp_path, fleet, worker2=True)
    assert await placed_on(s, sketches, "s-2") == "worker2"


@mixed(Fleet("Paint", "Direct", on_worker2=True))
async def test_direct_mode_a_kind_removed_from_worker2_stops_new_runs_going_there(
    fleet: Fleet, scenario: Scenario, tmp_path: Path
) -> None:
    s = scenario
    w1, w2 = s.names["worker1"], s.names["worker2"]
    paints = s.objects("manager", fleet.resource)
    await create(s, fleet, "s-1")
    assert await placed_on(s, paints, "s-1") == "worker1"
    await create(s, fleet, "s-2")
    assert await placed_on(s, paints, "s-2") == "worker2"
    # s-2 ends (its copy goes), so the CRD's removal takes no live copy with it; s-1 keeps worker1 full.
    await s.objects("worker2", fleet.resource).patch_status("s-2", {"status": {"phase": "Done"}}, s.namespace)
    await s.wait(paints, "s-2", lambda o: notes(o).get(PHASE) == "Finished", "s-2 finished")
    await s.wait(s.objects("worker2", fleet.resource), "s-2", lambda o: o is None, "s-2's copy removed")

    await remove_from_worker2(s, tmp_path, fleet)
    await create(s, fleet, "s-3")
    message = await waits(s, fleet, "s-3")
    assert f"{w1}: rejected: full (1/1 running)" in message, message
    assert f"{w2}: rejected: does not serve this kind" in message, message
