"""The inventory controller (``multikueue_inventory``): makes and keeps what ``clusters/inventory.py`` decides.

Two kinds of keys: ``(MultiKueueCluster, name)``, the MultiKueueCluster of a ClusterProfile (``dispatcher.inventory.
clusterProfiles``), and ``(MultiKueueConfig, name)``, a MultiKueueConfig kept by selector (``multiKueueConfigs``).
It runs in a manager generation, so on the leader only, and writes only through ``kube/``. What it makes is then
reconciled as if written by hand: the connection by ``clusters/reconciler.py``, the lists by Kueue and the dispatch.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import structlog

from multikueue.clusters.admissioncheck import multikueue_config_name
from multikueue.clusters.inventory import (
    ANY_CLUSTER,
    FROM_PROFILE,
    ConfigPlan,
    ConfigStep,
    CreateCluster,
    CreateConfig,
    DeleteCluster,
    DeleteConfig,
    KeepForRuns,
    NameTaken,
    PatchConfig,
    UpdateCluster,
    cluster_step,
    config_step,
    listed,
    made_here,
    plan_clusters,
    recorded_cluster,
    reports,
    selector,
    under_config,
)
from multikueue.clusters.inventory_config import Inventory
from multikueue.kube import events
from multikueue.kube.addresses import CLUSTER_PROFILES, MULTIKUEUE_CLUSTERS, MULTIKUEUE_CONFIGS
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue.runtime.controller import Result
from multikueue.runtime.informer import Informer, ObjectKey
from multikueue.runtime.watches import Change, Watch

log = structlog.get_logger(__name__)
Object = dict[str, Any]
Key = tuple[str, str]  # (MULTIKUEUE_CLUSTER or MULTIKUEUE_CONFIG, name)
MULTIKUEUE_CLUSTER, MULTIKUEUE_CONFIG = MULTIKUEUE_CLUSTERS.kind, MULTIKUEUE_CONFIGS.kind
BY_RECORDED_CLUSTER = "recorded-cluster"
"""Index of manager Workloads by their recorded worker (``status.clusterName``)."""
KEPT_RECHECK = 60.0  # seconds: a list holding a cluster for its runs is looked at again this often, besides events


def _name(change: Change) -> str:
    return str(change.obj["metadata"]["name"])


class InventoryReconciler:
    def __init__(
        self,
        inventory: Inventory,
        api: ApiClient,
        namespace: str,
        *,
        clusters: Informer,
        configs: Informer,
        checks: Informer,
        workloads: Informer,
        profiles: Informer | None,
        batch: Callable[[], float],
        component: str,
        placed_on: Callable[[str], bool] = lambda _: False,
    ) -> None:
        self.placed_on = placed_on  # whether a Direct-mode run is placed on that worker (and not finished)
        self.namespace = namespace  # the ClusterProfiles' (Kueue reads clusterProfileRef from its own namespace)
        self.api = api
        self.cluster_objects = Objects(api, MULTIKUEUE_CLUSTERS)
        self.config_objects = Objects(api, MULTIKUEUE_CONFIGS)
        self.clusters, self.configs, self.checks, self.workloads = clusters, configs, checks, workloads
        self.profiles = profiles if inventory.cluster_profiles is not None else None
        self.profile_selector = selector(inventory.cluster_profiles.selector) if inventory.cluster_profiles else None
        self.kept = {c.name: c.cluster_selector for c in inventory.multi_kueue_configs}
        self.matchers = {name: selector(spec) for name, spec in self.kept.items()}
        self.batch = batch
        self.component = component
        self.told: dict[tuple[str, str, str], str] = {}  # (kind, object, reason) -> the last message recorded
        self.kept_for_runs: dict[str, tuple[str, ...]] = {}  # MultiKueueConfig -> clusters listed only for runs
        self.clusters_kept: set[str] = set()  # MultiKueueClusters made here kept only for the runs recorded there
        workloads.add_index(BY_RECORDED_CLUSTER, recorded_cluster)

    def watches(self) -> list[Watch[Key]]:
        found: list[Watch[Key]] = []
        if self.profiles is not None:
            found += [
                Watch("ClusterProfiles (dispatcher.namespace): the MultiKueueCluster of that name", self.profiles,
                      lambda c: [(MULTIKUEUE_CLUSTER, _name(c))]),
                Watch("ClusterProfiles listed at last: every profile's MultiKueueCluster", self.profiles.connectivity,
                      lambda _: self._every_cluster()),
                Watch("MultiKueueClusters: the one of that name (made from a profile, or in one's way)", self.clusters,
                      lambda c: [(MULTIKUEUE_CLUSTER, _name(c))]),
                Watch("manager Workloads, while a MultiKueueCluster is kept for its runs: that MultiKueueCluster",
                      self.workloads, lambda _: [(MULTIKUEUE_CLUSTER, n) for n in sorted(self.clusters_kept)],
                      delay=self.batch),
            ]  # fmt: skip
        if self.kept:
            found += [
                Watch("MultiKueueClusters (their labels): every MultiKueueConfig kept by selector", self.clusters,
                      lambda _: self._every_config()),
                Watch("MultiKueueConfigs kept by selector", self.configs,
                      lambda c: [(MULTIKUEUE_CONFIG, _name(c))] if _name(c) in self.kept else []),
                Watch("manager Workloads, while a cluster is listed only for its runs: that MultiKueueConfig",
                      self.workloads, lambda _: self._keeping_for_runs(), delay=self.batch),
            ]  # fmt: skip
        return found

    def _every_cluster(self) -> list[Key]:
        assert self.profiles is not None
        names = {p["metadata"]["name"] for p in self.profiles.items()}
        names |= {c["metadata"]["name"] for c in self.clusters.items() if made_here(c, FROM_PROFILE)}
        return [(MULTIKUEUE_CLUSTER, n) for n in sorted(names)]

    def _every_config(self) -> list[Key]:
        return [(MULTIKUEUE_CONFIG, n) for n in self.kept]

    def _keeping_for_runs(self) -> list[Key]:
        return [(MULTIKUEUE_CONFIG, n) for n, kept in self.kept_for_runs.items() if kept]

    async def reconcile(self, key: Key) -> Result:
        kind, name = key
        if kind == MULTIKUEUE_CLUSTER:
            return await self._cluster(name)
        return await self._config(name)

    # ------------------------------------------------------------------------------- MultiKueueClusters

    async def _cluster(self, name: str) -> Result:
        if self.profiles is None or self.profile_selector is None:
            return Result()
        if not self.profiles.synced.is_set():
            return Result()  # nothing is judged before the profiles are listed; their first list enqueues every key
        profile = self.profiles.get(ObjectKey(self.namespace, name))
        existing = self.clusters.get(ObjectKey("", name))
        held = bool(self._recorded_on(name)) or self.placed_on(name)
        step = cluster_step(name, profile, existing, self.profile_selector, held=held)
        told = ("Warning", step.message) if isinstance(step, NameTaken) else None
        if profile is not None:
            await self._tell(self._profile(profile), "MultiKueueClusterExists", told)
        else:  # gone: nothing more to tell about it
            self.told.pop((CLUSTER_PROFILES.kind, f"{self.namespace}/{name}", "MultiKueueClusterExists"), None)
        match step:
            case CreateCluster(body=body):
                self.clusters.remember_created(await self.cluster_objects.create(body))
                log.info("MultiKueueCluster made from its ClusterProfile", cluster=name, namespace=self.namespace)
            case UpdateCluster(patch=patch) if existing is not None:
                metadata = {**patch.get("metadata", {}), "resourceVersion": existing["metadata"]["resourceVersion"]}
                self.clusters.remember(await self.cluster_objects.patch(name, {**patch, "metadata": metadata}))
                log.info("MultiKueueCluster follows its ClusterProfile", cluster=name, patch=patch)
            case DeleteCluster(uid=uid):
                await self.cluster_objects.delete(name, uid=uid or None)
                log.info("MultiKueueCluster deleted: its ClusterProfile is gone or no longer selected", cluster=name)
            case KeepForRuns():
                self.clusters_kept.add(name)  # a Workload's change looks again: deleted once no run is recorded there
                log.info("MultiKueueCluster kept while runs are recorded there", cluster=name)
                return Result(requeue_after=KEPT_RECHECK)
        self.clusters_kept.discard(name)
        return Result()

    @staticmethod
    def _profile(profile: Object) -> Object:
        """A cached ClusterProfile with its kind said (what an Event names)."""
        return {**profile, "apiVersion": CLUSTER_PROFILES.api_version, "kind": CLUSTER_PROFILES.kind}

    # ------------------------------------------------------------------------------- MultiKueueConfigs

    async def _config(self, name: str) -> Result:
        if name not in self.kept:
            return Result()
        existing = self.configs.get(ObjectKey("", name))
        current = listed(existing)
        holding = [c for c in current if self._runs_recorded(c, name)]
        plan = plan_clusters(self.clusters.items(), self.matchers[name], current, holding)
        step = config_step(name, plan, existing)
        self.kept_for_runs[name] = plan.draining
        written = await self._write_config(name, step, plan, existing)
        if written is not None:
            about = {**written, "apiVersion": MULTIKUEUE_CONFIGS.api_version, "kind": MULTIKUEUE_CONFIGS.kind}
            for reason, told in reports(plan, step, self.kept[name].text()).items():
                await self._tell(about, reason, told)
        return Result(requeue_after=KEPT_RECHECK if plan.draining else None)

    async def _write_config(self, name: str, step: ConfigStep | None, plan: ConfigPlan,
                            existing: Object | None) -> Object | None:  # fmt: skip
        """Carry out ``step``; the MultiKueueConfig as it now is (None once deleted or not made)."""
        match step:
            case CreateConfig(body=body):
                created = await self.config_objects.create(body)
                self.configs.remember_created(created)
                log.info("MultiKueueConfig made from its clusterSelector", config=name, clusters=plan.clusters)
                return created
            case PatchConfig(clusters=clusters) if existing is not None:
                patch = {"metadata": {"resourceVersion": existing["metadata"]["resourceVersion"]},
                         "spec": {"clusters": list(clusters)}}  # fmt: skip
                result = await self.config_objects.patch(name, patch)
                self.configs.remember(result)
                log.info("MultiKueueConfig follows its clusterSelector", config=name, clusters=clusters,
                         before=listed(existing), kept_for_runs=plan.draining)  # fmt: skip
                return result
            case DeleteConfig(uid=uid):
                await self.config_objects.delete(name, uid=uid or None)
                log.info("MultiKueueConfig deleted: no MultiKueueCluster matches its clusterSelector", config=name)
                return None
        return existing

    def _recorded_on(self, cluster: str) -> list[ObjectKey]:
        """The Workloads recorded on ``cluster``, and the MultiKueue runs whose eviction is under way
        (``ANY_CLUSTER``: a Workload with no MultiKueue check holds nothing)."""
        evicting = [k for k in self.workloads.by_index(BY_RECORDED_CLUSTER, ANY_CLUSTER) if self._dispatched(k)]
        return [*self.workloads.by_index(BY_RECORDED_CLUSTER, cluster), *evicting]

    def _dispatched(self, key: ObjectKey) -> bool:
        """Whether one of the Workload's admission checks takes its workers from a MultiKueueConfig."""
        checks = ((self.workloads.get(key) or {}).get("status") or {}).get("admissionChecks") or []
        return any(self._config_of_check(str(c.get("name", ""))) is not None for c in checks)

    def _runs_recorded(self, cluster: str, config: str) -> bool:
        """Whether a manager Workload taking its workers from ``config`` is recorded on ``cluster``."""
        for key in self._recorded_on(cluster):
            workload = self.workloads.get(key)
            if workload is not None and under_config(workload, config, self._config_of_check):
                return True
        return False

    def _config_of_check(self, check: str) -> str | None:
        found = self.checks.get(ObjectKey("", check))
        if found is None:
            return None
        try:
            return multikueue_config_name(found)
        except ValueError:
            return None

    # ------------------------------------------------------------------------------- where users look

    async def _tell(self, obj: Object, reason: str, told: tuple[str, str] | None) -> None:
        """An Event on ``obj`` when what it says changes (each reconcile would say it again otherwise)."""
        key = (str(obj.get("kind")), str(ObjectKey.of(obj)), reason)
        if told is None:
            self.told.pop(key, None)
            return
        type_, message = told
        if self.told.get(key) == message:
            return
        self.told[key] = message
        log.info("told", reason=reason, kind=key[0], object=key[1], type=type_, message=message)
        await events.record(self.api, obj, type_=type_, reason=reason, message=message, component=self.component)
