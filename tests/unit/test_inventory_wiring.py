"""The inventory controller in a manager generation: wired only when ``dispatcher.inventory`` is configured, and each
event routed to the keys it concerns (without an API server: nothing is started)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import anyio
import pytest

from multikueue.clusters.inventory import FROM_PROFILE, INVENTORY_LABEL
from multikueue.clusters.inventory_reconciler import MULTIKUEUE_CLUSTER, MULTIKUEUE_CONFIG
from multikueue.config import parse_configuration
from multikueue.generation import ManagerGeneration
from multikueue.kube.addresses import MULTIKUEUE_CLUSTERS, MULTIKUEUE_CONFIGS, WORKLOADS, GroupVersionKind
from multikueue.kube.client import ApiClient
from multikueue.kube.kubeconfig import ClusterAccess
from multikueue.metrics import Metrics
from multikueue.runtime.informer import ADDED, MODIFIED, Informer, ObjectKey
from tests.unit.test_generation import deliver, drain, unwarned

PIPELINERUN = GroupVersionKind("tekton.dev", "v1", "PipelineRun")
CONFIG = """
multiKueue:
  clusterProfile:
    accessProviders:
    - {name: fleet, execConfig: {apiVersion: client.authentication.k8s.io/v1, command: /plugin, interactiveMode: Never}}
dispatcher:
  namespace: kueue-system
  eventsBatchPeriod: 10ms
  inventory:
    clusterProfiles: {selector: {matchLabels: {fleet: "yes"}}}
    multiKueueConfigs: [{name: fleet, clusterSelector: {}}, {name: gpu, clusterSelector: {matchLabels: {gpu: "1"}}}]
"""


def generation(tg: anyio.abc.TaskGroup, text: str = CONFIG) -> ManagerGeneration:
    api = ApiClient(ClusterAccess(server="http://127.0.0.1:1"))
    return ManagerGeneration(api, parse_configuration(text), {}, tg, metrics=Metrics(), temp_dir=None, warn=unwarned)


def named(name: str, namespace: str | None = None, **labels: str) -> dict[str, Any]:
    meta = {"name": name, "uid": f"uid-{name}", "labels": labels} | ({"namespace": namespace} if namespace else {})
    return {"metadata": meta}


def profiles_of(g: ManagerGeneration) -> Informer:
    informers = [i for i in g.own_informers if "clusterprofiles" in i.source.description]
    assert len(informers) == 1, [i.source.description for i in g.own_informers]
    return informers[0]


async def test_without_the_section_nothing_is_wired() -> None:
    async with anyio.create_task_group() as tg:
        g = generation(tg, "")
        assert g.inventory is None
        assert "multikueue_inventory" not in g.triggers
        tg.cancel_scope.cancel()


async def test_profiles_clusters_configs_and_runs_reach_the_keys_they_concern() -> None:
    async with anyio.create_task_group() as tg:
        g = generation(tg)
        assert g.inventory is not None
        queue = g.inventory_controller.queue

        deliver(profiles_of(g), ADDED, named("east", "kueue-system", fleet="yes"))
        assert await drain(queue) == [(MULTIKUEUE_CLUSTER, "east")]

        # A MultiKueueCluster: the one of its name (a profile's, or in one's way), and every list kept by selector.
        deliver(g.informers.of(MULTIKUEUE_CLUSTERS), MODIFIED, named("east"))
        assert await drain(queue) == [(MULTIKUEUE_CLUSTER, "east"), (MULTIKUEUE_CONFIG, "fleet"),
                                      (MULTIKUEUE_CONFIG, "gpu")]  # fmt: skip

        deliver(g.informers.of(MULTIKUEUE_CONFIGS), MODIFIED, named("gpu"))
        deliver(g.informers.of(MULTIKUEUE_CONFIGS), MODIFIED, named("someone-elses"))
        assert await drain(queue) == [(MULTIKUEUE_CONFIG, "gpu")]

        # The profiles listed at last (their CRD installed late): every profile and every cluster made from one.
        made = named("west", **{INVENTORY_LABEL: FROM_PROFILE})
        g.informers.of(MULTIKUEUE_CLUSTERS).store[ObjectKey("", "west")] = made
        g.informers.of(MULTIKUEUE_CLUSTERS).store[ObjectKey("", "by-hand")] = named("by-hand")
        profiles_of(g).store[ObjectKey("kueue-system", "east")] = named("east", "kueue-system")
        profiles_of(g).connectivity.emit(True)
        assert await drain(queue) == [(MULTIKUEUE_CLUSTER, "east"), (MULTIKUEUE_CLUSTER, "west")]

        # Workloads matter only while a list keeps a cluster for its runs; then after the batch period.
        workloads = g.informers.of(WORKLOADS)
        deliver(workloads, MODIFIED, named("wl", "ns"))
        assert await drain(queue) == []
        assert queue.delayed == 0
        g.inventory.kept_for_runs["fleet"] = ("gone",)
        deliver(workloads, MODIFIED, named("wl", "ns"))
        with anyio.fail_after(5):
            assert await queue.get() == (MULTIKUEUE_CONFIG, "fleet")
        tg.cancel_scope.cancel()


async def test_lists_by_selector_need_no_profiles() -> None:
    text = "dispatcher: {inventory: {multiKueueConfigs: [{name: fleet, clusterSelector: {}}]}}"
    async with anyio.create_task_group() as tg:
        g = generation(tg, text)
        whats = [w.what for w in g.triggers["multikueue_inventory"]]
        assert not any("ClusterProfiles" in w for w in whats), whats
        deliver(g.informers.of(MULTIKUEUE_CLUSTERS), ADDED, named("east"))
        assert await drain(g.inventory_controller.queue) == [(MULTIKUEUE_CONFIG, "fleet")]
        tg.cancel_scope.cancel()


async def test_a_worker_with_direct_mode_runs_placed_on_it_is_held_for_them() -> None:
    """The inventory keeps a MultiKueueCluster while a Direct-mode run is placed on its worker, as for a Workload
    recorded there: it asks the Direct reconciler, which counts the runs placed on each worker and not finished."""
    async with anyio.create_task_group() as tg:
        g = generation(tg)
        assert g.inventory is not None
        assert not g.inventory.placed_on("east")
        g.direct_reconciler._load = {PIPELINERUN: Counter({"east": 1})}
        assert g.inventory.placed_on("east")
        assert not g.inventory.placed_on("west")
        tg.cancel_scope.cancel()


def _evicting(name: str, *checks: str) -> dict[str, Any]:
    """A Workload preempted on the manager, its quota not yet released (Kueue waits for its job to stop)."""
    conditions = [{"type": kind, "status": "True"} for kind in ("QuotaReserved", "Admitted", "Evicted")]
    pending = [{"name": c, "state": "Pending"} for c in checks]
    return {"metadata": {"name": name, "namespace": "team-a", "uid": f"u-{name}"},
            "status": {"conditions": conditions, "admissionChecks": pending}}  # fmt: skip


async def test_an_eviction_under_way_holds_a_deselected_cluster_only_for_a_multikueue_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An eviction under way clears ``clusterName`` while the run may still run on its worker: the inventory keeps
    every cluster it would drop until the quota is released. A Workload with no MultiKueue check (a local job on
    the manager) held them too, for as long as its eviction lasted (its pods' termination, for ever on a dead node):
    now it holds nothing; a MultiKueue run's does (its check's AdmissionCheck names a MultiKueueConfig)."""
    async with anyio.create_task_group() as tg:
        g = generation(tg)
        inventory = g.inventory
        assert inventory is not None
        g.informers.of(MULTIKUEUE_CLUSTERS).store[ObjectKey("", "east")] = named(
            "east", **{INVENTORY_LABEL: FROM_PROFILE}
        )
        profiles_of(g).synced.set()
        deleted: list[str] = []

        async def delete(name: str, namespace: str | None = None, **_: Any) -> bool:
            deleted.append(name)
            return True

        monkeypatch.setattr(inventory.cluster_objects, "delete", delete)
        monkeypatch.setattr(inventory, "_config_of_check", {"mk": "fleet"}.get)  # only "mk" is MultiKueue's
        workloads = g.informers.of(WORKLOADS)
        local = _evicting("local")
        workloads._put(ObjectKey.of(local), local)
        await inventory._cluster("east")
        assert deleted == ["east"], f"kept for a local Workload: {sorted(inventory.clusters_kept)}"

        deleted.clear()
        run = _evicting("run", "mk")
        workloads._put(ObjectKey.of(run), run)
        await inventory._cluster("east")
        assert deleted == [], "a MultiKueue run's eviction under way lets its worker's MultiKueueCluster go"
        assert "east" in inventory.clusters_kept
        tg.cancel_scope.cancel()
