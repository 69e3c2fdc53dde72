"""Direct mode against the real API servers: no Workload, placement by this controller, explanations, limits,
spill-over, lost-worker policies and restarts. The tests play only Tekton on the workers (its status writes)."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest

from multikueue.kube import discovery
from multikueue.kube.addresses import Resource
from multikueue.kube.client import ApiClient
from multikueue_testbed import crds, kueue
from multikueue_testbed.client import k8s
from multikueue_testbed.objects import pipelinerun, widget, widget_crd
from multikueue_testbed.waiting import eventually
from tests.integration.scenario import Scenario

WORKER, PHASE, AVOID = "multikueue.x-k8s.io/worker", "multikueue.x-k8s.io/phase", "multikueue.x-k8s.io/avoid"
SUCCEEDED = '.status.conditions[?type=="Succeeded"].status'


def direct(placement: str = "{}", lost_timeout: str = "5s") -> str:
    return f"""
multiKueue: {{gcInterval: 2s, workerLostTimeout: {lost_timeout}}}
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    mode: Direct
    finished: {{path: '{SUCCEEDED}', notIn: [Unknown]}}
    placement: {placement}
"""


def notes(obj: Any) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


def placement_condition(obj: Any) -> Any:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == "MultiKueuePlacement"), None)


async def submit(s: Scenario, name: str, **annotations: str) -> Any:
    body = pipelinerun(name)
    body["spec"]["managedBy"] = kueue.MANAGED_BY
    if annotations:
        body["metadata"]["annotations"] = annotations
    return await s.runs("manager").create(body, s.namespace)


async def placed(s: Scenario, name: str, timeout: float = 60) -> str:
    """The worker chosen, once the decision is recorded: the annotation first, then the condition saying why."""

    def recorded(run: Any) -> bool:
        return bool(notes(run).get(WORKER)) and (placement_condition(run) or {}).get("reason") == "Placed"

    run = await s.wait(s.runs("manager"), name, recorded, f"{name} placed", timeout)
    return str(notes(run)[WORKER])


async def succeed(s: Scenario, worker: str, name: str) -> None:
    status = {"conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "done"}]}
    await s.runs(worker).patch_status(name, {"status": status}, s.namespace)


def worker_key(s: Scenario, cluster: str) -> str:
    return next(k for k, v in s.names.items() if v == cluster)


async def names_on(s: Scenario, worker: str) -> list[str]:
    from kubernetes_asyncio import client as k8s_client

    listed = await k8s_client.CustomObjectsApi(k8s(s.api[worker])).list_namespaced_custom_object(
        "tekton.dev", "v1", s.namespace, "pipelineruns"
    )
    return sorted(i["metadata"]["name"] for i in listed["items"])


@pytest.mark.parametrize("multikueue_config", [direct()])
async def test_a_run_is_placed_mirrored_finished_and_explained_with_no_workload(scenario: Scenario) -> None:
    s = scenario
    await submit(s, "direct")
    cluster = await placed(s, "direct")
    worker = worker_key(s, cluster)
    run = await s.get(s.runs("manager"), "direct")
    condition = placement_condition(run)
    assert condition["status"] == "True", condition
    assert condition["reason"] == "Placed"
    for name in (s.names["worker1"], s.names["worker2"]):  # every worker is in the explanation
        assert f"{name}: fits (0 running, score 0.00)" in condition["message"], condition["message"]
    assert condition["message"].startswith(f"placed on {cluster}; ")
    events = await eventually(lambda: s.events("direct"), until=lambda e: any(x.reason == "Placed" for x in e))
    assert next(x for x in events if x.reason == "Placed").message == condition["message"]

    # The same explanation, as a user sees it from the command line.
    kubeconfig = s.bed.cluster("manager").kubeconfig_path
    shown = await anyio.run_process(
        [sys.executable, "-m", "multikueue", "explain", "--kubeconfig", str(kubeconfig),
         "--kind", "PipelineRun.v1.tekton.dev", f"{s.namespace}/direct"],
        check=False,
    )  # fmt: skip
    stdout = shown.stdout.decode()
    assert shown.returncode == 0, shown.stderr.decode()
    assert f"  worker: {cluster}    phase: Placed" in stdout
    assert "  MultiKueuePlacement: True Placed" in stdout
    for name in (s.names["worker1"], s.names["worker2"]):
        assert f"    {name}: fits (0 running, score 0.00)" in stdout, stdout

    remote = await s.wait(s.runs(worker), "direct", lambda r: r is not None, "the copy")
    assert "managedBy" not in remote["spec"]
    assert "kueue.x-k8s.io/prebuilt-workload-name" not in notes(remote)
    assert await s.workloads("manager").get("pipelinerun-direct", s.namespace) is None

    await succeed(s, worker, "direct")
    done = await s.wait(s.runs("manager"), "direct", lambda r: notes(r).get(PHASE) == "Finished", "Finished")
    types = {c["type"]: c["status"] for c in done["status"]["conditions"]}
    assert types == {"Succeeded": "True", "MultiKueuePlacement": "True"}, "the worker's status and our condition"
    await s.wait(s.runs(worker), "direct", lambda r: r is None, "the copy deleted after the final status")
    # Every guarded write carried the resourceVersion of the object as it then was: none was refused (the final
    # status mirror and the Finished annotation used to cost a 409 and a retry per run).
    assert s.manager is not None
    errors = {"cluster": "manager", "code": "409"}
    assert s.manager.metrics.registry.get_sample_value("multikueue_api_errors_total", errors) is None


@pytest.mark.parametrize("multikueue_config", [direct("{workerSelector: 'pool in (batch, gpu)'}")])
async def test_placement_follows_worker_labels_the_kinds_selector_and_the_objects_selector(scenario: Scenario) -> None:
    s = scenario
    await s.label("worker1", pool="batch")
    await s.label("worker2", pool="gpu", accelerator="a100")
    await submit(s, "needs-gpu", **{"multikueue.x-k8s.io/worker-selector": "accelerator=a100"})
    assert await placed(s, "needs-gpu") == s.names["worker2"]
    message = placement_condition(await s.get(s.runs("manager"), "needs-gpu"))["message"]
    assert (
        f"{s.names['worker1']}: rejected: labels do not match the object's worker-selector (accelerator in (a100))"
        in message
    )
    await s.label("worker2", pool="interactive")
    await submit(s, "anywhere")
    assert await placed(s, "anywhere") == s.names["worker1"], "worker2 left the kind's pools"
    await submit(s, "impossible", **{"multikueue.x-k8s.io/worker-selector": "accelerator=a100"})
    waiting = await s.wait(
        s.runs("manager"), "impossible", lambda r: placement_condition(r) is not None, "told why it waits"
    )
    condition = placement_condition(waiting)
    assert (condition["status"], condition["reason"]) == ("False", "NoWorkerFits")
    assert f"{s.names['worker2']}: rejected: labels do not match the kind's workerSelector" in condition["message"]


@pytest.mark.parametrize("multikueue_config", [direct("{maxPerWorker: 10}")])
async def test_a_burst_of_50_respects_the_limits_balances_and_waits_for_room(scenario: Scenario) -> None:
    s = scenario
    names = [f"burst-{i:02d}" for i in range(50)]
    for name in names:
        await submit(s, name)

    async def census() -> tuple[set[str], set[str], int]:
        """Runs placed (and not finished) on each worker by the manager's record, once their copies match it; and
        how many wait, saying why."""
        placed_on: dict[str, set[str]] = {s.names["worker1"]: set(), s.names["worker2"]: set()}
        waiting = 0
        for name in names:
            run = await s.runs("manager").get(name, s.namespace)
            if notes(run).get(PHASE) == "Placed":
                placed_on[notes(run)[WORKER]].add(name)
            elif (placement_condition(run) or {}).get("reason") == "NoWorkerFits":
                waiting += 1
        on1, on2 = placed_on[s.names["worker1"]], placed_on[s.names["worker2"]]
        copies = (set(await names_on(s, "worker1")), set(await names_on(s, "worker2")))
        return (on1, on2, waiting) if copies == (on1, on2) else (set(), set(), -1)

    on1, on2, _ = await eventually(
        census, until=lambda c: len(c[0]) == 10 and len(c[1]) == 10 and c[2] == 30, timeout=120, what="10 + 10 + 30"
    )
    for name in sorted(on1)[:5]:  # room frees on worker1: five of the waiting go there, the least loaded
        await succeed(s, "worker1", name)
    after = await eventually(
        census, until=lambda c: len(c[0]) == 10 and c[2] == 25, timeout=120, what="five more on worker1"
    )
    assert after[1] == on2, "worker2 was full: nothing moved there"
    assert len(after[0] & on1) == 5, "the five still running stayed"


@pytest.mark.parametrize("multikueue_config", [direct("{tiers: ['cost=cheap', 'cost=dear'], maxPerWorker: 1}")])
async def test_spill_over_goes_to_the_dear_tier_only_when_the_cheap_one_is_full(scenario: Scenario) -> None:
    s = scenario
    await s.label("worker1", cost="dear")
    await s.label("worker2", cost="cheap")
    await submit(s, "first")
    assert await placed(s, "first") == s.names["worker2"]
    message = placement_condition(await s.get(s.runs("manager"), "first"))["message"]
    assert f"{s.names['worker1']}: rejected: in spill-over tier 2, used only when tier 1 has no room" in message
    await submit(s, "second")
    assert await placed(s, "second") == s.names["worker1"]
    await submit(s, "third")
    await s.wait(
        s.runs("manager"),
        "third",
        lambda r: (placement_condition(r) or {}).get("reason") == "NoWorkerFits",
        "third waits",
    )
    await s.wait(s.runs("worker2"), "first", lambda r: r is not None, "first's copy")
    await succeed(s, "worker2", "first")
    assert await placed(s, "third") == s.names["worker2"], "the cheap tier has room again"


async def _lose_the_placed_worker(s: Scenario, name: str, *, pause: bool = False) -> str:
    """``name`` placed on worker1, then worker1's API server killed (or, with ``pause``, stopped: SIGSTOP)."""
    await s.label("worker1", only="yes")
    await submit(s, name, **{"multikueue.x-k8s.io/worker-selector": "only=yes"})
    assert await placed(s, name) == s.names["worker1"]
    await s.wait(s.runs("worker1"), name, lambda r: r is not None, "copy on worker1")
    await s.label("worker2", only="yes")  # worker2 can take it now, if the policy allows
    if pause:
        await anyio.to_thread.run_sync(s.bed.pause_apiserver, "worker1")
    else:
        s.bed.stop_apiserver("worker1", kill=True)
    return name


@pytest.mark.parametrize("multikueue_config", [direct()])
async def test_at_least_once_dispatches_again_elsewhere_and_removes_the_stale_copy(scenario: Scenario) -> None:
    s = scenario
    try:
        await _lose_the_placed_worker(s, "again")
        await s.wait(
            s.runs("manager"), "again", lambda r: notes(r).get(WORKER) == s.names["worker2"], "moved", timeout=90
        )
        await s.wait(s.runs("worker2"), "again", lambda r: r is not None, "copy on worker2")
        run = await s.get(s.runs("manager"), "again")
        assert s.names["worker1"] in json.loads(notes(run)[AVOID])
        # While it was waited for, the object said so.
        unreachable = f"worker {s.names['worker1']} is unreachable: the run is waited for up to workerLostTimeout"
        await eventually(
            lambda: s.events("again"),
            until=lambda e: any(x.reason == "WorkerUnreachable" and x.message.startswith(unreachable) for x in e),
            what="a WorkerUnreachable Event",
        )
    finally:
        s.bed.start_apiserver("worker1")
    await s.wait(s.runs("worker1"), "again", lambda r: r is None, "the stale copy removed", timeout=90)
    assert await names_on(s, "worker2") == ["again"]


PAUSED_WORKER = direct(lost_timeout="10m") + "  workerClient: {timeout: 3s, probeInterval: 1s}\n"


@pytest.mark.parametrize("multikueue_config", [PAUSED_WORKER])
async def test_a_run_whose_worker_stops_answering_waits_for_it_and_says_so(scenario: Scenario) -> None:
    """Within workerLostTimeout a placed run stays where it is, even when another worker could take it (#27)."""
    s = scenario
    await _lose_the_placed_worker(s, "paused", pause=True)
    try:
        waiting = await s.wait(
            s.runs("manager"),
            "paused",
            lambda r: (placement_condition(r) or {}).get("reason") == "WorkerUnreachable",
            "the object saying it waits for worker1",
        )
        condition = placement_condition(waiting)
        assert condition["status"] == "Unknown"
        assert condition["message"] == (
            f"worker {s.names['worker1']} is unreachable: the run is waited for up to workerLostTimeout (600s), "
            "then placed again elsewhere"
        )
        assert notes(waiting)[WORKER] == s.names["worker1"]
        assert await names_on(s, "worker2") == []
    finally:
        await anyio.to_thread.run_sync(lambda: s.bed.resume_apiserver("worker1", wait=True))
    back = await s.wait(
        s.runs("manager"),
        "paused",
        lambda r: (placement_condition(r) or {}).get("reason") == "Placed",
        "placed again on worker1's return",
        timeout=90,
    )
    assert placement_condition(back)["message"] == f"worker {s.names['worker1']} is reachable again"
    await succeed(s, "worker1", "paused")
    await s.wait(s.runs("manager"), "paused", lambda r: notes(r).get(PHASE) == "Finished", "finished on worker1")
    assert await names_on(s, "worker2") == []


@pytest.mark.parametrize("multikueue_config", [direct("{lostWorkerPolicy: AtMostOnce}")])
async def test_at_most_once_marks_the_run_failed_and_never_starts_a_second_copy(scenario: Scenario) -> None:
    s = scenario
    try:
        await _lose_the_placed_worker(s, "once")
        failed = await s.wait(
            s.runs("manager"),
            "once",
            # The phase is recorded first, then the condition saying why: wait for both.
            lambda r: notes(r).get(PHASE) == "Failed" and (placement_condition(r) or {}).get("reason") == "WorkerLost",
            "Failed, and why",
            timeout=90,
        )
        condition = placement_condition(failed)
        assert (condition["status"], condition["reason"]) == ("False", "WorkerLost")
        assert "AtMostOnce" in condition["message"]
        assert await names_on(s, "worker2") == []
    finally:
        s.bed.start_apiserver("worker1")
    await s.wait(s.runs("worker1"), "once", lambda r: r is None, "the copy of a failed run removed", timeout=90)
    assert await names_on(s, "worker2") == []


@pytest.mark.parametrize("multikueue_config", [direct()])
async def test_a_controller_restart_mid_burst_dispatches_every_object_exactly_once(scenario: Scenario) -> None:
    s = scenario
    names = [f"restart-{i:02d}" for i in range(20)]
    for name in names[:10]:
        await submit(s, name)
    await placed(s, names[0])
    s.stop_manager()
    for name in names[10:]:
        await submit(s, name)
    await s.start_manager()

    async def copies() -> list[str]:
        return await names_on(s, "worker1") + await names_on(s, "worker2")

    everywhere = await eventually(copies, until=lambda c: len(c) >= 20, timeout=120, what="20 copies")
    assert sorted(everywhere) == names, "each object exactly once"
    for name in names:
        run = await s.get(s.runs("manager"), name)
        assert name in await names_on(s, worker_key(s, notes(run)[WORKER]))


LATE_GROUP = "late.multikueue.x-k8s.io"
GADGETS = Resource(LATE_GROUP, "v1", "gadgets", "Gadget")
LATE_KIND = f"""
multiKueue: {{gcInterval: 2s, workerLostTimeout: 5s, externalFrameworks: [{{name: Gadget.v1.{LATE_GROUP}}}]}}
dispatcher:
  adapters:
  - name: Gadget.v1.{LATE_GROUP}
    mode: Direct
    finished: {{path: .status.phase, equals: Done}}
"""


def gadget_crd() -> dict[str, Any]:
    """The Widget CRD under another name: a kind no other test installs, so the manager cannot serve it at start."""
    return widget_crd(strict_status=False, group=LATE_GROUP, kind="Gadget")


@pytest.fixture
async def gadgets_on_the_workers_only(
    manager_api: ApiClient, worker1_api: ApiClient, worker2_api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[None]:
    monkeypatch.setattr(discovery, "KIND_RETRY_SECONDS", 1.0)  # the manager looks again every second
    for api in (worker1_api, worker2_api):
        await crds.install_crds(api, [gadget_crd()])
    yield
    for api in (manager_api, worker1_api, worker2_api):
        await crds.remove_crd(api, gadget_crd())


@pytest.mark.parametrize("multikueue_config", [LATE_KIND])
async def test_a_kind_installed_on_the_manager_after_start_is_dispatched_without_a_restart(
    gadgets_on_the_workers_only: None, scenario: Scenario
) -> None:
    s = scenario
    assert s.manager is not None
    assert not s.manager.generation.direct_reconciler.kinds  # started without the CRD: nothing to watch yet
    await crds.install_crds(s.api["manager"], [gadget_crd()])
    body = widget("g1")
    body["apiVersion"], body["kind"] = f"{LATE_GROUP}/v1", "Gadget"
    await s.objects("manager", GADGETS).create(body, s.namespace)

    def placed(obj: Any) -> bool:
        return bool(notes(obj).get(WORKER))

    worker = str(notes(await s.wait(s.objects("manager", GADGETS), "g1", placed, "g1 placed", timeout=60))[WORKER])
    cluster = next(c for c, name in s.names.items() if name == worker)
    copy = await s.wait(s.objects(cluster, GADGETS), "g1", lambda o: o is not None, f"g1 created on {cluster}")
    assert "managedBy" not in copy["spec"]
    await s.objects(cluster, GADGETS).patch_status("g1", {"status": {"phase": "Done"}}, s.namespace)
    done = await s.wait(s.objects("manager", GADGETS), "g1", lambda o: notes(o).get(PHASE) == "Finished",
                        "g1 finished on the manager")  # fmt: skip
    assert done["status"]["phase"] == "Done"
    await s.wait(s.objects(cluster, GADGETS), "g1", lambda o: o is None, f"the copy removed from {cluster}")


GIVING_UP = direct("{maxPerWorker: 1}") + "  inadmissibleTimeout: 3s\n"


@pytest.mark.parametrize("multikueue_config", [GIVING_UP])
async def test_a_run_no_worker_can_ever_fit_fails_with_the_reasons_and_one_waiting_for_room_waits(
    scenario: Scenario,
) -> None:
    s = scenario
    for name in ("first", "second"):  # one slot per worker: both taken
        await submit(s, name)
        await placed(s, name)
    await submit(s, "waits-for-room")
    await submit(s, "needs-gpu", **{"multikueue.x-k8s.io/worker-selector": "accelerator=a100"})
    # The phase is written first, then the condition: both are waited for.
    failed = await s.wait(s.runs("manager"), "needs-gpu", lambda r: notes(r).get(PHASE) == "Failed"
                          and (placement_condition(r) or {}).get("reason") == "NoWorkerCanRun",
                          "marked Failed after inadmissibleTimeout, and said why")  # fmt: skip
    condition = placement_condition(failed)
    assert (condition["status"], condition["reason"]) == ("False", "NoWorkerCanRun")
    assert condition["message"].startswith("no worker can run it (for 3s, inadmissibleTimeout): no worker fits; ")
    assert f"{s.names['worker1']}: rejected: labels do not match the object's worker-selector" in condition["message"]
    assert WORKER not in notes(failed)
    events = await s.events("needs-gpu")
    assert any(e.reason == "NoWorkerCanRun" and e.type == "Warning" for e in events), events
    waiting = placement_condition(await s.get(s.runs("manager"), "waits-for-room"))
    assert (waiting["status"], waiting["reason"]) == ("False", "NoWorkerFits"), "busy workers: it waits"
    assert notes(await s.get(s.runs("manager"), "waits-for-room")).get(PHASE) is None
