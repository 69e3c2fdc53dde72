"""One configuration's controllers: built whole from one valid configuration, run, and stopped as a whole.

A generation holds everything that depends on the configuration: the informers, the reconcilers, the controllers,
the routes from an informer's event to a controller's key (each reconciler's ``watches()``, kept in ``triggers``),
and the runnables beside them (the garbage collector, the gauges, the manager's schemas: objects with an
``async def run``, each in the module named after what it owns). This module only wires: each is built in
``__init__``, none is optional, and ``start`` starts them in the generation's task group. A reload stops one
generation and builds the next (``process.Process``); what lives as long as the process (the endpoints, the
webhook, the Lease, the configuration watch) is not here.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable
from pathlib import Path
from typing import Any, TypeVar

import anyio
import anyio.abc
import structlog

from multikueue import owners
from multikueue.clusters.admissioncheck import AdmissionCheckReconciler
from multikueue.clusters.garbage import GarbageCollection
from multikueue.clusters.gauges import WaitingGauge, WorkerQueuesGauge
from multikueue.clusters.inventory_reconciler import InventoryReconciler
from multikueue.clusters.inventory_reconciler import Key as InventoryKey
from multikueue.clusters.outages import WorkerOutages
from multikueue.clusters.queues import WorkerQueues
from multikueue.clusters.reconciler import ClusterReconciler
from multikueue.clusters.schema_heal import SchemaHeal, Warn
from multikueue.clusters.worker import Worker
from multikueue.config import Configuration
from multikueue.dispatch.direct import DirectKey, DirectReconciler, waits_for_a_fit
from multikueue.dispatch.garbage import GarbageCollector
from multikueue.dispatch.reconciler import WorkloadReconciler
from multikueue.integration.reconciler import IntegrationKey, IntegrationReconciler
from multikueue.kube import core
from multikueue.kube.addresses import (
    ADMISSION_CHECKS,
    CLUSTER_PROFILES,
    MULTIKUEUE_CLUSTERS,
    MULTIKUEUE_CONFIGS,
    WORKLOADS,
    GroupVersionKind,
    Resource,
)
from multikueue.kube.client import ApiClient
from multikueue.kube.discovery import KindUnavailable, discover_later, discover_resource
from multikueue.kube.errors import ApiError
from multikueue.kube.resources import Objects
from multikueue.metrics import Metrics
from multikueue.runtime.controller import Controller, Result
from multikueue.runtime.informer import Informer, ObjectKey
from multikueue.runtime.shared import SharedInformers
from multikueue.runtime.signal import Signal
from multikueue.runtime.watches import Change, KindChange, Watch, install

log = structlog.get_logger(__name__)
Object = dict[str, Any]
CLOSE_TIMEOUT = 10.0  # seconds a stopping generation gives its worker connections to close
Kinds = dict[GroupVersionKind, tuple[Informer, Resource]]
Served = dict[GroupVersionKind, Resource]
Triggers = dict[str, list[Watch[Any]]]  # controller name -> the watches installed on it (docs' trigger table)
K = TypeVar("K", bound=Hashable)


def _install(triggers: Triggers, controller: Controller[K], watches: list[Watch[K]]) -> None:
    """The watches wired to the controller, and kept by its name (what the trigger table is checked against)."""
    install(controller, watches)
    triggers[controller.name] = list(watches)


async def discover_kinds(api: ApiClient, gvks: Iterable[GroupVersionKind]) -> tuple[Served, list[GroupVersionKind]]:
    """The resource of each kind the cluster serves, and the kinds it does not serve yet."""
    served: Served = {}
    missing: list[GroupVersionKind] = []
    for gvk in gvks:
        try:
            served[gvk] = await discover_resource(api, gvk)
        except (KindUnavailable, ApiError) as e:
            log.warning("kind not served yet; looked for again periodically", kind=str(gvk), error=str(e))
            missing.append(gvk)
    return served, missing


class ServedKinds:
    """The configured kinds a cluster serves, each watched by one shared informer, and their events from one source
    (``changes``). A kind served late (its CRD installed after start) joins every view when found: no restart."""

    def __init__(self, informers: SharedInformers, selector_of: Callable[[GroupVersionKind], str]) -> None:
        self.informers = informers
        self.selector_of = selector_of  # the label selector a kind's informer lists with
        self.all: Kinds = {}
        self.changes: Signal[KindChange] = Signal("an object of a configured kind")
        self._views: list[tuple[frozenset[GroupVersionKind], Kinds]] = []

    def view(self, gvks: Iterable[GroupVersionKind]) -> Kinds:
        """The served kinds among ``gvks``: a dict a reconciler holds, kept up to date as kinds are served."""
        wanted = frozenset(gvks)
        kinds = {gvk: found for gvk, found in self.all.items() if gvk in wanted}
        self._views.append((wanted, kinds))
        return kinds

    def serve(self, gvk: GroupVersionKind, resource: Resource) -> Informer:
        informer = self.informers.of(resource, label_selector=self.selector_of(gvk))
        informer.add_handler(
            lambda kind, obj: self.changes.emit(KindChange(gvk, Change(kind, obj, bulk=informer.initial)))
        )
        self.all[gvk] = (informer, resource)
        for wanted, kinds in self._views:
            if gvk in wanted:
                kinds[gvk] = (informer, resource)
        return informer


class ManagerGeneration:
    """The dispatcher (and the integration, if configured) on the manager cluster, for one configuration."""

    def __init__(
        self,
        api: ApiClient,
        config: Configuration,
        served: Served,
        task_group: anyio.abc.TaskGroup,
        *,
        metrics: Metrics,
        temp_dir: Path | None,
        warn: Warn,
        outages: WorkerOutages | None = None,
    ) -> None:
        self.api, self.config, self.metrics, self.warn = api, config, metrics, warn
        self.task_group = task_group
        concurrency = config.dispatcher.concurrency
        # Several workers connect side by side: one that hangs does not hold back the others' first connection.
        self.cluster_controller: Controller[str] = Controller(
            "multikueue_cluster", self._reconcile_cluster, concurrency=concurrency, observe=metrics
        )
        self.workload_controller: Controller[ObjectKey] = Controller(
            "multikueue_workload", self._reconcile_workload, concurrency=concurrency, observe=metrics
        )
        self.direct_controller: Controller[DirectKey] = Controller(
            "multikueue_direct", self._reconcile_direct, concurrency=concurrency, observe=metrics
        )
        self.check_controller: Controller[str] = Controller(
            "multikueue_admissioncheck", self._reconcile_check, observe=metrics
        )
        self.inventory_controller: Controller[InventoryKey] = Controller(
            "multikueue_inventory", self._reconcile_inventory, observe=metrics
        )
        # One informer per manager resource, shared by the dispatcher and the integration (one cache, one watch).
        self.informers = SharedInformers(api)
        # The configured kinds the manager serves, with their informers, and their events (``kinds.changes``).
        self.kinds = ServedKinds(self.informers, self._selector_of)
        self.direct_kinds = self.kinds.view(g for g in config.multi_kueue.gvks if config.adapter(g).mode == "Direct")
        self.manager_resources: dict[GroupVersionKind, Resource] = {}  # others are discovered on first use
        self.owners: dict[GroupVersionKind, Informer] = {}
        self.triggers: Triggers = {}

        clusters = self.informers.of(MULTIKUEUE_CLUSTERS)
        checks = self.informers.of(ADMISSION_CHECKS)
        configs = self.informers.of(MULTIKUEUE_CONFIGS)
        self.manager_workloads = self.informers.of(WORKLOADS)
        self.manager_workloads.add_indexes(owners.INDEXES)
        namespace = config.dispatcher.namespace  # the kubeconfig Secrets: only this namespace's, not shared
        secrets = Informer(core.secret_source(api, namespace))
        profiles = self._profiles(namespace)
        # Not shared: waited for (the Secrets) or not (the ClusterProfiles: a manager without the CRD still starts).
        self.own_informers = [secrets] + ([profiles] if profiles is not None else [])
        self.secrets = secrets

        self.check_reconciler = AdmissionCheckReconciler(
            config.dispatcher.controller_name, Objects(api, ADMISSION_CHECKS), checks, configs, clusters
        )
        self.cluster_reconciler = ClusterReconciler(
            config, Objects(api, MULTIKUEUE_CLUSTERS), clusters, secrets, task_group, temp_dir=temp_dir,
            metrics=metrics, profiles=profiles, outages=outages,
        )  # fmt: skip
        self.workload_reconciler = WorkloadReconciler(
            config, api, self.manager_workloads, checks, configs, self._connections,
            self.manager_resources,  # others are discovered on first use
            metrics, owners=self.owners,
            settled=self.cluster_reconciler.settled, clusters=clusters, lost_since=self.cluster_reconciler.lost_since,
        )  # fmt: skip
        self.direct_reconciler = DirectReconciler(config, api, self.direct_kinds, clusters, self._connections, metrics,
                                                  lost_since=self.cluster_reconciler.lost_since,
                                                  settled=self.cluster_reconciler.settled)  # fmt: skip
        self.integration, self.integration_controller = _integration(api, config, self.kinds, self.manager_workloads,
                                                                     metrics, self.triggers)  # fmt: skip
        # Wired only when configured (``dispatcher.inventory``): it creates and deletes MultiKueueClusters.
        self.inventory = _inventory(config, api, clusters, configs, checks, self.manager_workloads, profiles,
                                    self.direct_reconciler.holds_runs)  # fmt: skip
        if self.inventory is not None:
            _install(self.triggers, self.inventory_controller, self.inventory.watches())
        workers, changes = self.cluster_reconciler.signals, self.kinds.changes
        _install(self.triggers, self.cluster_controller, self.cluster_reconciler.watches())
        _install(self.triggers, self.check_controller, self.check_reconciler.watches())
        _install(self.triggers, self.workload_controller, self.workload_reconciler.watches(changes, workers))
        _install(self.triggers, self.direct_controller, self.direct_reconciler.watches(changes, workers))
        for gvk, resource in served.items():
            self._watch_kind(gvk, resource)

        # The runnables beside the controllers, each owning its loop, its interval and its errors.
        dispatchers = (self.workload_reconciler, self.direct_reconciler)
        self.worker_queues = WorkerQueues(self._connections)  # polled for the fleet metrics
        self.queues_gauge = WorkerQueuesGauge(metrics, self.worker_queues)
        self.waiting = WaitingGauge(metrics, kueue=self.workload_reconciler.waiting_for_a_fit,
                                    direct_kinds=self.direct_kinds, waits=waits_for_a_fit)  # fmt: skip
        # One collector for both modes (dispatch/garbage.py), each mode's rules from its reconciler.
        self.collector = GarbageCollector(self._connections, [self.workload_reconciler.garbage, self.direct_reconciler])
        self.garbage = GarbageCollection([self.collector], every=config.multi_kueue.gc_interval)
        self.schemas = SchemaHeal(api, config, kinds=self.kinds.all, changes=changes,
                                  mirrors=[r.mirror for r in dispatchers], warn=warn)  # fmt: skip

    def _selector_of(self, gvk: GroupVersionKind) -> str:
        """A shard's Direct-mode objects are selected by the API server: the others are not even cached here."""
        return self.config.dispatcher.shard.object_selector if self.config.adapter(gvk).mode == "Direct" else ""

    def _profiles(self, namespace: str) -> Informer | None:
        """The ClusterProfiles of the configuration's namespace, read only when access is configured (as Kueue)."""
        cluster_profile = self.config.multi_kueue.cluster_profile
        if cluster_profile is None or not cluster_profile.providers:
            return None
        return Informer(Objects(self.api, CLUSTER_PROFILES).source(namespace=namespace))

    def _watch_kind(self, gvk: GroupVersionKind, resource: Resource) -> None:
        """Every configured kind is watched on the manager: owners are read from this cache, not fetched on every
        reconcile; a change to an owner (a cancel to carry over) reaches its Workload at once; and in Direct mode
        the objects themselves are what this controller places."""
        self.owners[gvk] = self.kinds.serve(gvk, resource)
        self.manager_resources[gvk] = resource

    async def start(self, missing: list[GroupVersionKind]) -> None:
        """Start every informer, controller and runnable in the generation's task group; return once the caches are
        synced and the controllers run."""
        tg, config = self.task_group, self.config
        tg.start_soon(self.workload_reconciler.writes.run)
        tg.start_soon(self.waiting.run)
        tg.start_soon(self.queues_gauge.run)
        self.informers.start(tg)
        for informer in self.own_informers:
            tg.start_soon(informer.run)
        await self.informers.synced()
        await self.secrets.synced.wait()
        if any(config.adapter(g).mode == "Direct" for g in config.multi_kueue.gvks):
            tg.start_soon(self.direct_controller.run)
        if missing:  # watched (and dispatched) from when the manager serves them; the first list enqueues all

            def served(gvk: GroupVersionKind, resource: Resource) -> None:
                self._watch_kind(gvk, resource)
                self.informers.start(tg)

            tg.start_soon(discover_later, self.api, missing, served)
        if config.integrations:
            tg.start_soon(self.integration_controller.run)
        tg.start_soon(self.cluster_controller.run)
        tg.start_soon(self.check_controller.run)
        tg.start_soon(self.workload_controller.run)
        if self.inventory is not None:
            tg.start_soon(self.inventory_controller.run)
        tg.start_soon(self.garbage.run)
        tg.start_soon(self.schemas.run)
        log.info("manager started", controller_name=config.dispatcher.controller_name,
                 kinds=[str(g) for g in config.multi_kueue.gvks])  # fmt: skip

    async def close(self) -> None:
        """Close every worker connection (the generation's tasks have stopped)."""
        await self.cluster_reconciler.close()

    def _connections(self) -> dict[str, Worker]:
        """The workers as the dispatch code sees them (``clusters.worker.Worker``), by MultiKueueCluster name."""
        return {name: connection.worker for name, connection in self.cluster_reconciler.connections.items()}

    async def _reconcile_workload(self, key: ObjectKey) -> Result | None:
        return await self.workload_reconciler.reconcile(key)

    async def _reconcile_direct(self, key: DirectKey) -> Result | None:
        return await self.direct_reconciler.reconcile(key)

    async def _reconcile_cluster(self, name: str) -> Result | None:
        return await self.cluster_reconciler.reconcile(name)

    async def _reconcile_check(self, name: str) -> Result | None:
        return await self.check_reconciler.reconcile(name)

    async def _reconcile_inventory(self, key: InventoryKey) -> Result | None:
        return await self.inventory.reconcile(key) if self.inventory is not None else None


def _inventory(config: Configuration, api: ApiClient, clusters: Informer, configs: Informer, checks: Informer,
               workloads: Informer, profiles: Informer | None,
               placed_on: Callable[[str], bool]) -> InventoryReconciler | None:  # fmt: skip
    """The inventory's reconciler, when ``dispatcher.inventory`` is configured."""
    inventory = config.dispatcher.inventory
    if inventory is None:
        return None
    return InventoryReconciler(
        inventory, api, config.dispatcher.namespace, clusters=clusters, configs=configs, checks=checks,
        workloads=workloads, profiles=profiles, batch=lambda: config.dispatcher.events_batch_period,
        component=config.dispatcher.controller_name, placed_on=placed_on,
    )  # fmt: skip


def _integration(api: ApiClient, config: Configuration, kinds: ServedKinds, workloads: Informer, metrics: Metrics,
                 triggers: Triggers) -> tuple[IntegrationReconciler, Controller[IntegrationKey]]:  # fmt: skip
    """The integration's reconciler over the integrated kinds and its controller, wired when some kind is
    integrated (else its watches would look at every Workload event for nothing)."""
    reconciler = IntegrationReconciler(config, api, kinds.view(config.integrations), workloads)
    controller: Controller[IntegrationKey] = Controller(
        "multikueue_integration", reconciler.reconcile, concurrency=config.dispatcher.concurrency, observe=metrics
    )
    if config.integrations:
        _install(triggers, controller, reconciler.watches(kinds.changes))
    return reconciler, controller


class WorkerGeneration:
    """``--role worker``: only the integration, which adopts the Workloads MultiKueue prebuilds on this worker and
    releases each copy on admission (so workers need no per-kind Kueue integration)."""

    def __init__(self, api: ApiClient, config: Configuration, served: Served, *, metrics: Metrics) -> None:
        self.api, self.config = api, config
        self.informers = SharedInformers(api)
        self.kinds = ServedKinds(self.informers, lambda _: "")
        self.triggers: Triggers = {}
        workloads = self.informers.of(WORKLOADS)
        workloads.add_indexes(owners.INDEXES)
        self.integration, self.integration_controller = _integration(api, config, self.kinds, workloads, metrics,
                                                                     self.triggers)  # fmt: skip
        for gvk, resource in served.items():
            self.kinds.serve(gvk, resource)

    async def start(self, task_group: anyio.abc.TaskGroup, missing: list[GroupVersionKind]) -> None:
        if not self.config.integrations:
            log.warning("role worker, but no adapter has an integration section: nothing to do")
            return
        self.informers.start(task_group)
        await self.informers.synced()
        task_group.start_soon(self.integration_controller.run)
        if missing:  # a CRD installed after start: its objects are integrated from then on, no restart

            def served(gvk: GroupVersionKind, resource: Resource) -> None:
                self.kinds.serve(gvk, resource)
                self.informers.start(task_group)

            task_group.start_soon(discover_later, self.api, missing, served)
        log.info("integration started", kinds=[str(g) for g in self.kinds.all])


Generation = ManagerGeneration | WorkerGeneration


async def serve_manager(
    api: ApiClient,
    config: Configuration,
    *,
    metrics: Metrics,
    temp_dir: Path | None,
    warn: Warn,
    outages: WorkerOutages | None = None,
    task_status: anyio.abc.TaskStatus[ManagerGeneration] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Build and run one manager generation until cancelled; ``task_status`` gets it once it runs."""
    served, missing = await discover_kinds(api, config.multi_kueue.gvks)
    generation: ManagerGeneration | None = None
    try:
        async with anyio.create_task_group() as tg:
            generation = ManagerGeneration(api, config, served, tg, metrics=metrics, temp_dir=temp_dir, warn=warn,
                                           outages=outages)  # fmt: skip
            await generation.start(missing)
            task_status.started(generation)
            await anyio.sleep_forever()
    finally:
        # After the tasks have stopped, shielded so a cancellation (SIGTERM, lost Lease, reload) still closes every
        # worker client; bounded so a hung worker cannot keep the process alive past its grace period.
        if generation is not None:
            with anyio.move_on_after(CLOSE_TIMEOUT, shield=True):
                await generation.close()


async def serve_worker(
    api: ApiClient,
    config: Configuration,
    *,
    metrics: Metrics,
    task_status: anyio.abc.TaskStatus[WorkerGeneration] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Build and run one worker generation until cancelled."""
    served, missing = await discover_kinds(api, config.integrations)
    generation = WorkerGeneration(api, config, served, metrics=metrics)
    async with anyio.create_task_group() as tg:
        await generation.start(tg, missing)
        task_status.started(generation)
        await anyio.sleep_forever()
