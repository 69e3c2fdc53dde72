"""Edges of a mixed fleet and of workers kept from the inventory, from an adversarial read of 85b3fd6 and 3266950,
against the test bed's real API servers: each test is a sequence that left a run stuck, ran it twice, or told
something false, and failed on those commits for that reason (its docstring says which).
tests/component/test_fleet_edges.py shows the decisions behind some of them without a bed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from aiohttp import web

from multikueue.clusters.inventory import INVENTORY_LABEL
from multikueue.dispatch.decision import NONE_OPEN
from multikueue.kube.addresses import MULTIKUEUE_CONFIGS
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue_testbed import TestBed, crds, kueue
from multikueue_testbed.apiproxy import ApiProxy
from multikueue_testbed.objects import running_status
from multikueue_testbed.profiles import profile_status, put_cluster_profile
from multikueue_testbed.waiting import eventually, wait_until
from tests.integration import test_inventory
from tests.integration.scenario import Scenario
from tests.integration.test_cluster_profiles import PROVIDER, plugin
from tests.integration.test_inventory import WORKERS, _all_in_pool, _fleet, _told, apis
from tests.integration.test_mixed_fleet import (
    GROUP,
    PHASE,
    Fleet,
    active_message,
    create,
    discovered,
    fleet,
    mixed,
    notes,
    placed_on,
    record,
    submit,
    unavailable,
)

__all__ = ["apis", "fleet", "plugin"]  # fixtures, used by name

Object = dict[str, Any]


def _check(s: Scenario, workload: Any) -> dict[str, Any]:
    """This scenario's admission check on the manager Workload (state and message)."""
    checks = ((workload or {}).get("status") or {}).get("admissionChecks") or []
    return next((c for c in checks if c["name"] == s.names["check"]), {})


def _finished(workload: Any) -> str | None:
    """The message of the Workload's ``Finished`` condition (None while it is not finished)."""
    conditions = ((workload or {}).get("status") or {}).get("conditions") or []
    return next((str(c.get("message")) for c in conditions if c["type"] == "Finished" and c["status"] == "True"), None)


async def _ended_while_running(s: Scenario, wl: str, run: str, worker: str, seconds: float) -> str | None:
    """Watch for ``seconds`` (bounded) for what must not happen: the run's Workload retried (Retry: admitted again
    elsewhere) or finished while its copy is still on ``worker``. What was seen when it happened, else None."""
    with anyio.move_on_after(seconds):
        while True:
            workload = await s.workloads("manager").get(wl, s.namespace)
            state, there = _check(s, workload).get("state"), await s.runs(worker).get(run, s.namespace)
            if there is not None and (state == "Retry" or _finished(workload) is not None):
                return (f"{run} still runs on {worker} and its Workload is {state} ("
                        f"{_check(s, workload).get('message')!r}), finished: {_finished(workload)!r}")  # fmt: skip
            await anyio.sleep(0.2)
    return None


# ------------------------------------------------------------------------------------------------- 85b3fd6


@dataclass(frozen=True)
class SlowEvents(Fleet):
    """The mixed fleet, worker events batched over 2 s (``dispatcher.eventsBatchPeriod``; Kueue's own is 1 s): the
    pass a copy's deletion brings comes after the dispatcher has looked the kind up again, as it does for most runs
    on a worker holding many (each pass reads the worker, at its client's rate)."""

    def config(self) -> str:
        document = yaml.safe_load(super().config())
        document.setdefault("dispatcher", {})["eventsBatchPeriod"] = "2s"
        return str(yaml.safe_dump(document))


@mixed(SlowEvents("Stroke", "Direct", on_worker2=True))
async def test_direct_mode_a_run_whose_crd_is_removed_from_its_worker_ends_or_is_told(
    fleet: Fleet, scenario: Scenario
) -> None:
    """A Direct-mode run placed on worker2 and running there (its status mirrored); the kind's CRD is removed from
    worker2, its copy with it. 85b3fd6 stops the kind's informer there and drops its resource about a second later;
    every pass over the run after that raises ``KindNotServed`` from ``copies.sync`` before anything is decided or
    written: the run stays ``Placed`` on worker2 with its last status (``Running``) for ever, nothing said, the
    controller retrying up to every 300 s. A pass that came before the drop read the copy gone (404): ``Gone``,
    Failed with ``CopyDeleted``, as every pass did before 85b3fd6. The wait covers workerLostTimeout (10 s), so a fix
    that first waits for the kind to come back passes too."""
    s = scenario
    strokes = s.objects("manager", fleet.resource)
    await create(s, fleet, "s-1")
    assert await placed_on(s, strokes, "s-1") == "worker1"  # worker1 full (maxPerWorker: 1)
    await create(s, fleet, "s-2")
    assert await placed_on(s, strokes, "s-2") == "worker2"
    await s.objects("worker2", fleet.resource).patch_status("s-2", {"status": {"phase": "Running"}}, s.namespace)
    await s.wait(strokes, "s-2", lambda o: (o.get("status") or {}).get("phase") == "Running", "s-2's status mirrored")

    await crds.remove_crd(s.api["worker2"], fleet.crd())
    await eventually(lambda: discovered(s.api["worker2"], fleet), until=lambda d: not d, what="the CRD gone")
    await eventually(lambda: active_message(s, "worker2"), until=lambda m: m.startswith(unavailable(fleet)),
                     timeout=15, what="the dispatcher noticing worker2 no longer serves the kind")  # fmt: skip
    await eventually(lambda: strokes.get("s-2", s.namespace), timeout=25,
                     until=lambda o: notes(o).get(PHASE) != "Placed" or record(o).get("reason") != "Placed",
                     what="s-2 ended, moved or told after its kind left worker2")  # fmt: skip


@dataclass(frozen=True)
class Incremental(Fleet):
    """The mixed fleet in Kueue mode with Kueue's Incremental dispatcher (rounds of three workers, config order)."""

    def config(self) -> str:
        document = yaml.safe_load(super().config())
        document["multiKueue"]["dispatcherName"] = "kueue.x-k8s.io/multikueue-dispatcher-incremental"
        return str(yaml.safe_dump(document))


@mixed(Incremental("Smudge", "Kueue"))
async def test_kueue_incremental_a_worker_lacking_the_kind_is_not_nominated_and_cannot_win(
    fleet: Fleet, scenario: Scenario
) -> None:
    """worker2 lacks the kind. AllAtOnce leaves it out; Incremental nominates it all the same (``_next_round`` and
    ``_copies_for`` never read ``serving``) and copies the Workload there, while the check says 85b3fd6's
    ``Not nominated: worker2: does not serve ...``: false. worker2's Kueue admits that copy (a prebuilt Workload needs
    no CRD) and ``_the_winner`` takes it: recorded on worker2 (``clusterName`` cannot change but through an
    eviction), its create raising ``KindNotServed`` on every pass, told nowhere: stuck for ever, quota held."""
    s = scenario
    w2 = s.names["worker2"]
    wl = await submit(s, fleet, "m-1")
    workload = await s.wait(s.workloads("manager"), wl, lambda w: bool(_check(s, w).get("message")), "a message")
    nominated = (workload.get("status") or {}).get("nominatedClusterNames") or []
    message = str(_check(s, workload).get("message"))
    assert not (message.startswith(f"Not nominated: {w2}") and w2 in nominated), (message, nominated)
    assert await s.workloads("worker2").get(wl, s.namespace) is None, "copied to a worker that cannot run it"


class CountingProxy(ApiProxy):
    """The bed's proxy, counting the held requests whose callers still wait for them (a caller that gives up closes
    its connection, and the proxy's handler ends with it)."""

    waiting = 0

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        held = self._held
        counted = (held is not None and request.method == held[0] and request.path.endswith(held[1])
                   and request.query.get("watch") not in ("true", "1"))  # fmt: skip
        self.waiting += counted
        try:
            return await super()._forward(request)
        finally:
            self.waiting -= counted


class TestAKindBackAfterAFailedLookUp:
    """worker2 reached through the bed's proxy (``multikueue_testbed.apiproxy``), whose ``hold`` keeps the kind's
    discovery request unanswered: a look-up that fails for another reason than the kind being absent."""

    @pytest.fixture
    async def proxy(self, testbed: TestBed) -> AsyncIterator[CountingProxy]:
        proxy = CountingProxy(testbed.cluster("worker2"))
        async with proxy:
            yield proxy

    @pytest.fixture
    def worker_kubeconfigs(self, proxy: CountingProxy) -> dict[str, Any]:
        return {"worker2": proxy.kubeconfig}

    @mixed(Fleet("Dab", "Direct", on_worker2=True))
    async def test_the_worker_says_it_serves_the_kind_again_once_its_informer_lists_it(
        self, fleet: Fleet, scenario: Scenario, proxy: CountingProxy
    ) -> None:
        """The CRD removed from worker2: its list answers 404, so 85b3fd6 looks the kind up again, and that look-up
        fails (no answer: a timeout, a 503), which ``refresh_kinds`` records in ``kind_errors`` while the informer
        stays. The CRD comes back and the informer lists it again by itself; from then on ``refresh_kinds`` skips the
        kind (watched, not 404) before the line that clears ``kind_errors``: the MultiKueueCluster says ``unavailable
        kinds: Dab...`` for ever (and the reconciler keeps looking every 30 s) while worker2 serves and runs it."""
        s = scenario
        name = s.names["worker2"]
        await eventually(lambda: active_message(s, "worker2"), until=lambda m: m == "Connected", what="Connected")
        proxy.hold("GET", f"/apis/{GROUP}/v1")
        await crds.remove_crd(s.api["worker2"], fleet.crd())
        await eventually(lambda: active_message(s, "worker2"), until=lambda m: m.startswith(unavailable(fleet)),
                         timeout=20, what="the failed look-up said on worker2's MultiKueueCluster")  # fmt: skip
        await crds.install_crds(s.api["worker2"], [fleet.crd()])
        assert s.manager is not None
        connection = s.manager.generation.cluster_reconciler.connections[name]
        informers = [i for g, i in connection.objects.items() if g.kind == fleet.kind]
        assert informers, "the kind's informer was kept through the failed look-up"
        await wait_until(lambda: informers[0].connected, timeout=40, what="the kind listed again on worker2")
        # Let go once no held look-up waits any more (each has given up): a look-up answered now would hide the case.
        await wait_until(lambda: proxy.waiting == 0, timeout=10, what="the held look-ups given up")
        proxy.release()
        await eventually(lambda: active_message(s, "worker2"), until=lambda m: m == "Connected", timeout=15,
                         what="worker2 said to serve the kind again")  # fmt: skip


# ------------------------------------------------------------------------------------------------- 3266950


async def _admitted_on(f: test_inventory.Fleet, name: str, worker: str, *, mirrored: bool = False) -> str:
    """A run dispatched to both workers, admitted on ``worker`` and running there (its status mirrored when
    ``mirrored``); its Workload's name."""
    s = f.s
    _, workload = await s.submit(name)
    wl: str = workload["metadata"]["name"]
    await s.copied(wl, *WORKERS)
    await kueue.admit(s.api[worker], wl, s.namespace)
    await s.check_state(wl, state="Ready", message=f'The workload was admitted on "{f.cluster_name(worker)}"')
    await s.wait(s.runs(worker), name, lambda r: r is not None, f"{name} on {worker}")
    if mirrored:
        await s.runs(worker).patch_status(name, {"status": running_status(name)}, s.namespace)
        await s.wait(s.runs("manager"), name, lambda r: "status" in r, f"{name}'s status mirrored")
    return wl


async def test_a_cluster_kept_listed_for_a_run_leaves_the_list_once_that_run_has_finished(
    testbed: TestBed, namespace: str, apis: dict[str, ApiClient], plugin: tuple[Path, Path], tmp_path: Path
) -> None:
    """worker2 leaves the pool while a run is recorded there: kept listed (right). The run finishes; its manager
    Workload stays (Kueue keeps finished Workloads by default, its object until pruned) with ``status.clusterName``
    still worker2, and ``recorded_cluster``/``_runs_recorded`` count it: worker2 stays listed for as long as that
    finished Workload exists, and keeps being nominated to new runs, though no run is on it any more."""
    async with _fleet(testbed, namespace, apis, plugin, tmp_path) as f:
        s = f.s
        await _all_in_pool(f, namespace)
        await f.listed(*WORKERS)
        wl = await _admitted_on(f, "drains", "worker2", mirrored=True)

        await f.label("worker2", pool="gpu")  # out of the pool; its MultiKueueCluster stays
        await _told(f.api, "default", f.config_name, "ClustersKeptForRuns")
        await f.listed(*WORKERS)

        await kueue.finish(s.api["worker2"], wl, namespace)
        await s.wait(s.workloads("manager"), wl, lambda w: _finished(w) is not None, "finished on the manager")
        await s.wait(s.runs("worker2"), "drains", lambda r: r is None, "its copy removed from worker2")
        await f.listed("worker1", timeout=15)


async def test_a_profile_no_longer_selected_does_not_drop_a_worker_whose_run_still_runs_there(
    testbed: TestBed, namespace: str, apis: dict[str, ApiClient], plugin: tuple[Path, Path], tmp_path: Path
) -> None:
    """worker1's ClusterProfile loses the selected label (a pool change; the cluster is healthy, its profile still
    there) while a run runs on it. 3266950 deletes the MultiKueueCluster at once, so its connection goes; the list
    keeps it for the run, which waits workerLostTimeout as for a lost worker, then Retry: Kueue admits it again
    elsewhere while its copy still runs on worker1, and with no connection left to worker1 that copy is never
    deleted (no garbage collection there): the run runs twice."""
    async with _fleet(testbed, namespace, apis, plugin, tmp_path) as f:
        s = f.s
        await _all_in_pool(f, namespace)
        await f.listed(*WORKERS)
        wl = await _admitted_on(f, "runs-on", "worker1")

        await f.label("worker1", **{"inventory-test": None})
        seen = await _ended_while_running(s, wl, "runs-on", "worker1", test_inventory.LOST_TIMEOUT + 10)
    assert seen is None, seen


def _active(cluster: Object) -> Object | None:
    return next((c for c in (cluster.get("status") or {}).get("conditions") or [] if c["type"] == "Active"), None)


async def test_a_profile_made_again_for_another_cluster_under_its_name_does_not_take_over_its_runs(
    testbed: TestBed, namespace: str, apis: dict[str, ApiClient], plugin: tuple[Path, Path], tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:  # fmt: skip
    """worker1's profile is deleted and made again under the same name for another cluster (the bed's worker2; a
    cluster replaced under its inventory name). A hand-written MultiKueueCluster keeps the identity annotation and
    refuses that (``ClusterIdentityChanged``); the inventory deletes and remakes its MultiKueueCluster, annotation and
    all, so the new one connects and the run recorded under that name is judged on the other cluster: its copy is
    not there, so it is finished Failed as "deleted there (not by this dispatcher)" (its status was mirrored), while
    it still runs on worker1."""
    monkeypatch.setattr(test_inventory, "LOST_TIMEOUT", 60.0)  # the remade worker is back long before it
    async with _fleet(testbed, namespace, apis, plugin, tmp_path) as f:
        s = f.s
        await _all_in_pool(f, namespace)
        wl = await _admitted_on(f, "replaced", "worker1", mirrored=True)
        name = f.cluster_name("worker1")

        # worker2's own worker goes (else the remade one is refused as a second name for worker2's cluster).
        await f.profiles.delete(f.cluster_name("worker2"), namespace)
        await f.profiles.delete(name, namespace)
        await f.cluster("worker2", lambda c: c is None, "worker2's MultiKueueCluster deleted (no run there)")
        status = profile_status(PROVIDER, testbed.cluster("worker2"),
                                extension={"credentials": str(f.credentials["worker2"])})  # fmt: skip
        await put_cluster_profile(f.api, namespace, name, status)
        await f.label("worker1", **{"inventory-test": namespace, "pool": "batch"})
        # Kept for its run, worker1's MultiKueueCluster keeps the identity it recorded: the other cluster is refused.
        refused = "ClusterIdentityChanged"
        await f.cluster("worker1", lambda c: c is not None and (_active(c) or {}).get("reason") == refused,
                        "kept, refusing another cluster under its name")  # fmt: skip
        seen = await _ended_while_running(s, wl, "replaced", "worker1", 10)
    assert seen is None, seen


async def test_a_cluster_that_leaves_the_list_takes_a_waiting_runs_copy_with_it(
    testbed: TestBed, namespace: str, apis: dict[str, ApiClient], plugin: tuple[Path, Path], tmp_path: Path
) -> None:
    """A run waits with its Workload copy on both workers (nominated, admitted nowhere yet); worker2 leaves the pool,
    so the list made here drops it at once (no run is recorded there). The dispatcher read only the listed clusters:
    the copy on worker2 was neither removed nor looked at again (the garbage collector keeps a copy while its manager
    Workload exists), so worker2's Kueue would admit it and hold its quota for a run that can never be recorded there
    (Kueue's own check does the same for a list edited by hand). The run still waits on worker1 and runs there."""
    async with _fleet(testbed, namespace, apis, plugin, tmp_path) as f:
        s = f.s
        await _all_in_pool(f, namespace)
        await f.listed(*WORKERS)
        _, workload = await s.submit("waits")
        wl = workload["metadata"]["name"]
        await s.copied(wl, *WORKERS)

        await f.label("worker2", pool="gpu")
        await f.listed("worker1")
        await s.wait(s.workloads("worker2"), wl, lambda w: w is None, "the copy on worker2 removed", timeout=10)
        assert await s.workloads("worker1").get(wl, namespace) is not None, "worker1's copy kept"
        await kueue.admit(s.api["worker1"], wl, namespace)
        await s.check_state(wl, state="Ready", message=f'The workload was admitted on "{f.cluster_name("worker1")}"')
        await s.wait(s.runs("worker1"), "waits", lambda r: r is not None, "waits on worker1")


async def _absent_for(s: Scenario, worker: str, wl: str, seconds: float) -> Any:
    """Watch for ``seconds`` (bounded) for what must not happen: the Workload copy ``wl`` on ``worker``. What was
    seen, else None."""
    with anyio.move_on_after(seconds):
        while True:
            if (there := await s.workloads(worker).get(wl, s.namespace)) is not None:
                return there["metadata"]
            await anyio.sleep(0.2)
    return None


async def test_a_cluster_kept_listed_only_for_its_runs_takes_no_new_run_and_keeps_no_waiting_copy(
    testbed: TestBed, namespace: str, apis: dict[str, ApiClient], plugin: tuple[Path, Path], tmp_path: Path
) -> None:
    """worker2 leaves the pool while a run runs there: it stays listed for that run (``ClustersKeptForRuns``), with
    its labels. Read as any listed cluster, it kept a waiting run's copy and was nominated for every new run, so a
    deselected cluster stayed busy for as long as runs kept coming. Now the run there carries on, the waiting run's
    copy there goes, and a new run is copied to worker1 only."""
    async with _fleet(testbed, namespace, apis, plugin, tmp_path) as f:
        s = f.s
        await _all_in_pool(f, namespace)
        await f.listed(*WORKERS)
        running = await _admitted_on(f, "stays", "worker2")
        _, waiting = await s.submit("waits")
        waits = waiting["metadata"]["name"]
        await s.copied(waits, *WORKERS)

        await f.label("worker2", pool="gpu")
        await _told(f.api, "default", f.config_name, "ClustersKeptForRuns")
        await f.listed(*WORKERS)
        await s.wait(s.workloads("worker2"), waits, lambda w: w is None, "the waiting run's copy on worker2 removed")
        _, new = await s.submit("new")
        await s.copied(new["metadata"]["name"], "worker1")
        seen = await _absent_for(s, "worker2", new["metadata"]["name"], 3)
        assert seen is None, f"a new run copied to worker2, kept only for its runs: {seen}"
        assert await s.runs("worker2").get("stays", namespace) is not None, "the run on worker2 carries on"
        assert await s.workloads("worker2").get(running, namespace) is not None, "its Workload copy with it"
        assert await s.workloads("worker1").get(waits, namespace) is not None, "the waiting run waits on worker1"


async def test_a_recorded_worker_dropped_from_a_hand_edited_list_runs_its_run_to_its_end(scenario: Scenario) -> None:
    """The MultiKueueConfig's list edited by hand to drop worker2 while a run runs there, its status mirrored. The
    run's workers were the list alone: worker2 read as neither connected nor lost, so the run read as deleted there
    and was finished Failed at once while its PipelineRun still ran on worker2 (fc7582b's adversarial read). Its
    recorded worker is now always read: the run goes on there, and its final status comes back."""
    s = scenario
    _, workload = await s.submit("kept")
    wl = workload["metadata"]["name"]
    await s.copied(wl, "worker1", "worker2")
    await kueue.admit(s.api["worker2"], wl, s.namespace)
    await s.check_state(wl, state="Ready", message=f'The workload was admitted on "{s.names["worker2"]}"')
    await s.wait(s.runs("worker2"), "kept", lambda r: r is not None, "kept on worker2")
    await s.runs("worker2").patch_status("kept", {"status": running_status("kept")}, s.namespace)
    await s.wait(s.runs("manager"), "kept", lambda r: "status" in r, "its status mirrored")

    await Objects(s.api["manager"], MULTIKUEUE_CONFIGS).patch(s.names["config"],
                                                              {"spec": {"clusters": [s.names["worker1"]]}})  # fmt: skip
    seen = await _ended_while_running(s, wl, "kept", "worker2", 5)  # well within workerLostTimeout (10 s)
    assert seen is None, seen
    await kueue.finish(s.api["worker2"], wl, s.namespace)
    await s.wait(s.workloads("manager"), wl, lambda w: _finished(w) is not None, "finished from worker2")


@pytest.mark.parametrize("by_hand", [False, True], ids=["made-here", "written-by-hand"])
async def test_a_list_left_with_only_a_cluster_kept_for_its_runs_takes_no_new_run_and_says_why(
    testbed: TestBed,
    namespace: str,
    apis: dict[str, ApiClient],
    plugin: tuple[Path, Path],
    tmp_path: Path,
    by_hand: bool,
) -> None:
    """worker2 kept for its run, then worker1 leaves the pool too (no run there: dropped at once): the list holds
    worker2 alone. A new run read that list whole (33a1ed9's fallback; 508894c's for a MultiKueueConfig written by
    hand and kept by selector, the ordinary way to make one beside its AdmissionCheck) and was copied to worker2,
    which ``ClustersKeptForRuns`` says takes no new run. Now it waits nominated nowhere, and its check says why."""
    async with _fleet(testbed, namespace, apis, plugin, tmp_path) as f:
        s = f.s
        await _all_in_pool(f, namespace)
        await f.listed(*WORKERS)
        if by_hand:
            configs = Objects(s.api["manager"], MULTIKUEUE_CONFIGS)
            await configs.patch(f.config_name, {"metadata": {"labels": {INVENTORY_LABEL: None}}})
        await _admitted_on(f, "stays", "worker2")
        await f.label("worker2", pool="gpu")
        await _told(f.api, "default", f.config_name, "ClustersKeptForRuns")
        await f.label("worker1", pool="gpu")
        await f.listed("worker2")

        _, new = await s.submit("new")
        name = new["metadata"]["name"]
        await s.wait(s.workloads("manager"), name, lambda w: _check(s, w).get("message", "").startswith(NONE_OPEN),
                     "the new run's check saying no worker takes it")  # fmt: skip
        seen = await _absent_for(s, "worker2", name, 3)
        assert seen is None, f"a new run copied to worker2, a cluster kept listed only for its runs: {seen}"


async def _released(s: Scenario, wl: str) -> None:
    """Kueue's core answering Retry by evicting: quota released, checks Pending, clusterName cleared."""
    current = await s.get(s.workloads("manager"), wl)
    conditions = [{**c, "status": "False", "reason": "Pending"} if c["type"] == "QuotaReserved" else c
                  for c in current["status"]["conditions"]]  # fmt: skip
    checks = [{**c, "state": "Pending", "message": 'Reset to Pending after eviction. Previously: "Retry"'}
              for c in current["status"]["admissionChecks"]]  # fmt: skip
    status = {"conditions": conditions, "admissionChecks": checks, "admission": None, "clusterName": None}
    await s.workloads("manager").patch_status(wl, {"status": status}, s.namespace)


async def test_a_run_evicted_from_a_deselected_worker_leaves_nothing_there(
    testbed: TestBed, namespace: str, apis: dict[str, ApiClient], plugin: tuple[Path, Path], tmp_path: Path
) -> None:
    """A run on worker2 when worker2 leaves the pool (kept listed for it); worker2's Kueue preempts it, Kueue's core
    evicts it on the manager (clusterName cleared) and the list drops worker2. The stray removal skipped worker2
    because it held the run's object, an earlier admission's (33a1ed9): its copy and PipelineRun stayed there for
    as long as the manager Workload existed, while the run ran again on worker1."""
    async with _fleet(testbed, namespace, apis, plugin, tmp_path) as f:
        s = f.s
        await _all_in_pool(f, namespace)
        await f.listed(*WORKERS)
        wl = await _admitted_on(f, "evicted", "worker2")
        await f.label("worker2", pool="gpu")
        await _told(f.api, "default", f.config_name, "ClustersKeptForRuns")

        await kueue.evict(s.api["worker2"], wl, namespace)
        await s.check_state(wl, state="Retry")
        await _released(s, wl)
        await f.listed("worker1")
        await kueue.reserve_quota(s.api["manager"], wl, namespace, checks=[s.names["check"]])
        await s.wait(s.workloads("worker1"), wl, lambda w: w is not None, "the copy on worker1")
        await kueue.admit(s.api["worker1"], wl, namespace)
        await s.check_state(wl, state="Ready", message=f'The workload was admitted on "{f.cluster_name("worker1")}"')
        await s.wait(s.runs("worker1"), "evicted", lambda r: r is not None, "the run on worker1")

        await s.wait(s.runs("worker2"), "evicted", lambda r: r is None, "the earlier admission's run gone from worker2")
        await s.wait(s.workloads("worker2"), wl, lambda w: w is None, "its Workload copy gone from worker2")
        assert await s.runs("worker1").get("evicted", namespace) is not None, "the run on worker1 carries on"


async def test_a_run_preempted_on_the_manager_is_stopped_on_the_deselected_worker_it_runs_on(
    testbed: TestBed, namespace: str, apis: dict[str, ApiClient], plugin: tuple[Path, Path], tmp_path: Path
) -> None:
    """worker2, deselected, is kept listed for the run on it; Kueue preempts the run on the manager, clearing
    ``clusterName`` in that write while the quota stays reserved. The run's workers were then its list less worker2
    (recorded nowhere any more): its copy there was never asked to stop (``DeactivationTarget``), and the inventory,
    seeing no run recorded there, deleted worker2's MultiKueueCluster and its connection: nothing could stop or
    remove the run there (fc7582b/33a1ed9's third adversarial read). Now worker2 is read while it holds the run's
    object of this admission, and kept until the quota is released; then the copies there go."""
    async with _fleet(testbed, namespace, apis, plugin, tmp_path) as f:
        s = f.s
        await _all_in_pool(f, namespace)
        await f.listed(*WORKERS)
        wl = await _admitted_on(f, "preempted", "worker2")
        await f.label("worker2", pool="gpu")
        await _told(f.api, "default", f.config_name, "ClustersKeptForRuns")

        await kueue.evict(s.api["manager"], wl, namespace, message="Preempted to accommodate a workload")
        await s.wait(s.workloads("worker2"), wl, lambda w: _true(w, "DeactivationTarget"),
                     "worker2's copy asked to stop (DeactivationTarget)")  # fmt: skip
        assert await f.clusters.get(f.cluster_name("worker2")) is not None, "worker2's MultiKueueCluster kept"
        await _released(s, wl)
        await s.wait(s.runs("worker2"), "preempted", lambda r: r is None, "the run gone from worker2")
        await s.wait(s.workloads("worker2"), wl, lambda w: w is None, "its Workload copy gone from worker2")


def _true(obj: Any, kind: str) -> bool:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == kind and c["status"] == "True" for c in conditions)
