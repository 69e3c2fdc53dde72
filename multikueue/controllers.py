"""Process wiring: the informers, reconcilers and controllers one process runs for its role, in one task group."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.abc
import structlog

from multikueue import owners
from multikueue.clusters.admissioncheck import AdmissionCheckReconciler
from multikueue.clusters.reconciler import ClusterReconciler
from multikueue.clusters.worker import Worker
from multikueue.config import Configuration
from multikueue.dispatch.direct import DirectKey, DirectReconciler, waits_for_a_fit
from multikueue.dispatch.reconciler import WorkloadReconciler
from multikueue.endpoints import Endpoints, Serving, ServingError
from multikueue.integration.reconciler import IntegrationController
from multikueue.kube import core, leader, openapi
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
from multikueue.kube.errors import TRANSIENT, ApiError, describe
from multikueue.kube.resources import Objects
from multikueue.manager_schemas import managed_by_problems, published_kinds
from multikueue.metrics import Metrics
from multikueue.reload import ConfigReloads, ConfigSource, StartupError, check_kinds
from multikueue.runtime.controller import Controller, Result
from multikueue.runtime.informer import DELETED, Informer, ObjectKey
from multikueue.runtime.shared import SharedInformers

if TYPE_CHECKING:
    from multikueue.integration.webhook import WebhookServer

log = structlog.get_logger(__name__)
RELEASE_TIMEOUT = 5.0  # seconds a stopping leader tries to give its Lease up; past that, the Lease just expires
Object = dict[str, Any]


@dataclass(frozen=True)
class LeaderElectionSettings:
    """A coordination.k8s.io Lease: only its holder reconciles; a standby takes over after ``lease_duration``."""

    namespace: str
    name: str
    identity: str
    lease_duration: int = 15  # whole seconds: the Lease's spec.leaseDurationSeconds
    renew_deadline: float = 10.0
    retry_period: float = 2.0


async def preflight(api: ApiClient, role: str) -> None:
    """Fail at start, in one line, when the API server cannot be reached or this identity may not read what the
    controller needs; the informers would otherwise retry forever with warnings nobody reads."""
    what = "GET /version"
    try:
        await core.server_version(api)
        if role == "manager":
            what = "list Workloads"
            await Objects(api, WORKLOADS).source().list(limit=1, continue_token=None)
    except ApiError as e:
        raise StartupError(f"the manager cluster refused {what}: {describe(e)}") from None
    except TRANSIENT as e:
        raise StartupError(f"cannot reach the manager cluster ({what}): {describe(e)}") from None


class Controllers:
    """Every controller of one ``multikueue run`` process, for its role: on the manager cluster the dispatcher (and
    the integration, if configured); with ``--role worker`` only the integration. Restarted as a whole when a valid
    new configuration appears; with leader election, run only while holding the Lease."""

    def __init__(
        self,
        api: ApiClient,
        config: Configuration,
        *,
        temp_dir: Path | None = None,
        serving: Serving | None = None,
        config_source: ConfigSource | None = None,
        role: Literal["manager", "worker"] = "manager",
    ) -> None:
        self.api = api
        # A worker runs only the integration: it adopts the Workloads MultiKueue prebuilds there and releases each
        # copy on admission, so workers need no per-kind Kueue integration.
        self.role = role
        self.config = config
        self.config_source = config_source  # watched: a valid change restarts the controllers with it
        self._generation: anyio.CancelScope | None = None
        self.temp_dir = temp_dir
        self.metrics = Metrics()
        check = functools.partial(check_kinds, api) if role == "manager" else None
        self.reloads = (
            ConfigReloads(api, config_source, config, metrics=self.metrics, check=check) if config_source else None
        )
        if isinstance(api, ApiClient) and api.on_request is None:
            requests, errors = self.metrics.api_requests, self.metrics.api_errors
            api.on_request = lambda method: requests.labels("manager", method).inc()
            api.on_error = lambda code: errors.labels("manager", code).inc()
        self.endpoint_options = serving  # /metrics (HTTPS, authorised) and /healthz, /readyz; None: neither served
        self.endpoints: Endpoints | None = None
        self.standby = False  # waiting for the leader lease: healthy and ready, reconciling nothing
        self.draining = False  # told to stop: unready, yet still answering the webhook (multikueue/shutdown.py)
        # Last (connected, kinds served) per worker: Workloads are re-examined only when that changes.
        self._was_connected: dict[str, tuple[bool, frozenset[GroupVersionKind], bool]] = {}
        self.started = anyio.Event()
        self.cluster_reconciler: ClusterReconciler | None = None
        self.workload_reconciler: WorkloadReconciler | None = None
        self.direct_reconciler: DirectReconciler | None = None
        self.check_reconciler: AdmissionCheckReconciler | None = None
        self.integration: IntegrationController | None = None
        self.webhook: WebhookServer | None = None
        # Per generation of controllers (made anew by ``_new_generation`` for each configuration in force).
        self.cluster_controller: Controller[str] = Controller("multikueue_cluster", self._reconcile_cluster)
        self.workload_controller: Controller[ObjectKey] = Controller("multikueue_workload", self._reconcile_workload)
        self.direct_controller: Controller[DirectKey] = Controller("multikueue_direct", self._reconcile_direct)
        self.check_controller: Controller[str] = Controller("multikueue_admissioncheck", self._reconcile_check)
        self.manager_workloads: Informer | None = None
        # One informer per manager resource, shared by the dispatcher and the integration (one cache, one watch).
        self.informers = SharedInformers(api)
        # The kinds the manager serves, with their informers; shared with the reconcilers.
        self.kinds: dict[GroupVersionKind, tuple[Informer, Resource]] = {}
        self._schema_digests: dict[GroupVersionKind, str] = {}  # each kind's published schema, as last seen
        self.direct_kinds: dict[GroupVersionKind, tuple[Informer, Resource]] = {}
        self.manager_resources: dict[GroupVersionKind, Resource] = {}
        self.owners: dict[GroupVersionKind, Informer] = {}

    async def run(self) -> None:
        """Run the controllers; with a ``config_source``, restart them whenever a valid new configuration appears.

        A restart closes every worker connection and relists everything: reconciles are level-triggered and
        idempotent (they survive a SIGKILL at any point), so cancelling them mid-way loses nothing. An invalid
        change (one that does not parse, or names a misspelt kind) restarts nothing: ``ConfigReloads`` refuses it.
        """
        if self.role == "manager":
            try:
                await check_kinds(self.api, self.config)  # a misspelt kind at start ends the process, in one line
            except TRANSIENT as e:
                raise StartupError(f"cannot check the configured kinds on the manager cluster: {describe(e)}") from None
        async with self.serving(), anyio.create_task_group() as outer:
            if self.reloads is not None:
                outer.start_soon(self.reloads.watch)
                outer.start_soon(self._apply_reloads, self.reloads)
            while True:
                with anyio.CancelScope() as self._generation:
                    await self._run_controllers()
                log.info("configuration reloaded; controllers restarted", source=str(self.config_source))

    async def _apply_reloads(self, reloads: ConfigReloads) -> None:
        while True:
            self.config = await reloads.next_valid()
            if self._generation is not None:
                self._generation.cancel()

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """The endpoints and the webhook for as long as the block runs; each is started once, and stopped by the
        block that started it: the outermost, so a caller may keep them answering after the controllers stop."""
        runner = await self._serve_http()
        webhook = None
        try:
            webhook = await self._serve_webhook()
            yield
        finally:
            with anyio.CancelScope(shield=True):
                if webhook is not None:
                    await webhook.stop()
                    self.webhook = None
                if runner is not None:
                    await runner.stop()
                    self.endpoints = None

    async def drain(self, delay: float) -> None:
        """Keep answering (the webhook above all) for ``delay`` seconds while unready, then return.

        Readiness already fails (``draining``, set when the signal came); the webhook asks the API server to close
        each connection after its answer, so its next request opens a new one, to a replica still in the Service.
        """
        self.draining = True
        if self.webhook is not None:
            self.webhook.draining = True
        log.info("shutting down: still serving while this replica leaves the Service", seconds=delay)
        await anyio.sleep(delay)

    async def _run_controllers(self) -> None:
        """One generation of controllers, for the configuration now in force (a reload cancels and restarts it)."""
        config = self.config
        self.informers = SharedInformers(self.api)
        self.integration = None
        if config.integrations:
            self.integration = IntegrationController(config, self.api, self.informers, observe=self.metrics)
        if self.role == "worker":
            await self._run_worker_role()
            return
        self._new_generation()
        missing = await self._watch_kinds()
        informers = self._manager_informers()
        try:
            async with anyio.create_task_group() as tg:
                self._make_reconcilers(tg, informers)
                self.informers.start(tg)
                tg.start_soon(informers["secrets"].run)
                if "profiles" in informers:  # not waited for: a manager without the CRD still starts
                    tg.start_soon(informers["profiles"].run)
                await self.informers.synced()
                await informers["secrets"].synced.wait()
                await self._start_controllers(tg, missing)
                tg.start_soon(openapi.watch_changes, self.api, self._schemas_changed)
                tg.start_soon(self._say_schema_problems)
                log.info("manager started", controller_name=config.dispatcher.controller_name,
                         kinds=[str(g) for g in config.multi_kueue.gvks])  # fmt: skip
                self.started.set()
                await anyio.sleep_forever()
        finally:
            # Shielded so a cancellation (SIGTERM, lost Lease) still closes every worker client; bounded so a hung
            # worker cannot keep the process alive past its grace period.
            with anyio.move_on_after(10, shield=True):
                if self.cluster_reconciler is not None:
                    await self.cluster_reconciler.close()

    async def _run_worker_role(self) -> None:
        """A worker runs only the integration (it adopts the Workloads MultiKueue prebuilds there)."""
        integration = self.integration
        if integration is None:
            log.warning("role worker, but no adapter has an integration section: nothing to do")
            self.started.set()
            await anyio.sleep_forever()
            return
        async with anyio.create_task_group() as tg:
            tg.start_soon(integration.run)
            await integration.started.wait()
            self.started.set()

    def _new_generation(self) -> None:
        """Fresh controllers and per-configuration state; the reconcilers come once the task group exists."""
        concurrency = self.config.dispatcher.concurrency
        # Several workers connect side by side: one that hangs does not hold back the others' first connection.
        self.cluster_controller = Controller("multikueue_cluster", self._reconcile_cluster, concurrency=concurrency,
                                             observe=self.metrics)  # fmt: skip
        self.workload_controller = Controller("multikueue_workload", self._reconcile_workload,
                                              concurrency=concurrency, observe=self.metrics)  # fmt: skip
        self.direct_controller = Controller("multikueue_direct", self._reconcile_direct, concurrency=concurrency,
                                            observe=self.metrics)  # fmt: skip
        self.check_controller = Controller("multikueue_admissioncheck", self._reconcile_check, observe=self.metrics)
        self.kinds, self.direct_kinds, self.manager_resources, self.owners = {}, {}, {}, {}
        self.check_reconciler = self.cluster_reconciler = None
        self.workload_reconciler = self.direct_reconciler = None

    async def _watch_kinds(self) -> list[GroupVersionKind]:
        """An informer per configured kind the manager serves; returns the kinds it does not serve yet."""
        missing: list[GroupVersionKind] = []
        for gvk in self.config.multi_kueue.gvks:
            try:
                self._watch_kind(gvk, await discover_resource(self.api, gvk))
            except (KindUnavailable, ApiError) as e:
                log.warning("kind not served by the manager yet; looked for again periodically", kind=str(gvk),
                            error=str(e))  # fmt: skip
                missing.append(gvk)
        return missing

    def _watch_kind(self, gvk: GroupVersionKind, resource: Resource) -> Informer:
        """Every configured kind is watched on the manager: owners are read from this cache, not fetched on every
        reconcile; a change to an owner (a cancel to carry over) reaches its Workload at once; and in Direct mode
        the objects themselves are what this controller places. The reconcilers share these dicts, so a kind whose
        CRD appears after start (found by ``discover_later``) reaches them without a restart."""
        direct = self.config.adapter(gvk).mode == "Direct"
        # A shard's Direct-mode objects are selected by the API server: the others are not even cached here.
        selector = self.config.dispatcher.shard.object_selector if direct else ""
        informer = self.informers.of(resource, label_selector=selector)
        informer.add_handler(functools.partial(self._on_object, gvk, direct))
        self.kinds[gvk] = (informer, resource)
        self.manager_resources[gvk], self.owners[gvk] = resource, informer
        if direct:
            self.direct_kinds[gvk] = (informer, resource)
        return informer

    def _manager_informers(self) -> dict[str, Informer]:
        """The manager's informers, each with this process's handler (the shared ones may have the integration's
        too); the Workloads indexed by their owner, for the dispatcher and the integration alike."""
        shared = {
            "clusters": (MULTIKUEUE_CLUSTERS, self._on_cluster),
            "checks": (ADMISSION_CHECKS, lambda _, o: self.check_controller.enqueue(o["metadata"]["name"])),
            "configs": (MULTIKUEUE_CONFIGS, self._on_config),
            "workloads": (WORKLOADS, self._on_workload),
        }
        informers: dict[str, Informer] = {}
        for name, (resource, handler) in shared.items():
            informers[name] = self.informers.of(resource)
            informers[name].add_handler(handler)
        informers["workloads"].add_indexes(owners.INDEXES)
        namespace = self.config.dispatcher.namespace  # the kubeconfig Secrets: only this namespace's, not shared
        informers["secrets"] = Informer(core.secret_source(self.api, namespace), on_event=self._on_secret)
        cluster_profile = self.config.multi_kueue.cluster_profile
        if cluster_profile is not None and cluster_profile.providers:  # as Kueue: read only when access is configured
            informers["profiles"] = Informer(
                Objects(self.api, CLUSTER_PROFILES).source(namespace=namespace),
                on_event=self._on_profile,
                on_state=lambda _: self._on_profile("", None),  # listed at last (its CRD installed): look again
            )
        return informers

    def _make_reconcilers(self, tg: anyio.abc.TaskGroup, informers: dict[str, Informer]) -> None:
        api, config = self.api, self.config
        clusters, checks, configs = informers["clusters"], informers["checks"], informers["configs"]
        self.manager_workloads = informers["workloads"]
        self.check_reconciler = AdmissionCheckReconciler(
            config.dispatcher.controller_name, Objects(api, ADMISSION_CHECKS), checks, configs, clusters
        )
        self.cluster_reconciler = ClusterReconciler(
            config, Objects(api, MULTIKUEUE_CLUSTERS), clusters, informers["secrets"], tg,
            on_connection_change=self._connection_changed, on_worker_event=self._on_worker_change,
            on_worker_object=self._on_worker_object, temp_dir=self.temp_dir, metrics=self.metrics,
            profiles=informers.get("profiles"),
        )  # fmt: skip
        self.workload_reconciler = WorkloadReconciler(
            config, api, self.manager_workloads, checks, configs, self._connections,
            self.manager_resources,  # others are discovered on first use
            self.metrics, owners=self.owners, enqueue=self.workload_controller.enqueue,
            settled=self.cluster_reconciler.settled,
        )  # fmt: skip
        tg.start_soon(self.workload_reconciler.writes.run)
        self.direct_reconciler = DirectReconciler(config, api, self.direct_kinds, clusters, self._connections,
                                                  self.direct_controller.enqueue, self.metrics)  # fmt: skip
        self.metrics.waiting.count = self._waiting_for_a_worker

    async def _start_controllers(self, tg: anyio.abc.TaskGroup, missing: list[GroupVersionKind]) -> None:
        config = self.config
        if any(config.adapter(g).mode == "Direct" for g in config.multi_kueue.gvks):
            tg.start_soon(self.direct_controller.run)
        if missing:  # watched (and dispatched) from when the manager serves them; the first list enqueues all

            def served(gvk: GroupVersionKind, resource: Resource) -> None:
                self._watch_kind(gvk, resource)
                self.informers.start(tg)

            tg.start_soon(discover_later, self.api, missing, served)
        if self.integration is not None:
            tg.start_soon(self.integration.run)
            await self.integration.started.wait()
        tg.start_soon(self.cluster_controller.run)
        tg.start_soon(self.check_controller.run)
        tg.start_soon(self.workload_controller.run)
        if config.multi_kueue.gc_interval > 0:
            tg.start_soon(self._collect_garbage_forever)

    def _waiting_for_a_worker(self) -> dict[str, int]:
        """Runs no worker can take now, by mode (the ``multikueue_runs_waiting_for_a_worker`` gauge)."""
        kueue = self.workload_reconciler.waiting_for_a_fit() if self.workload_reconciler is not None else 0
        direct = sum(
            waits_for_a_fit(obj) for informer, _ in self.direct_kinds.values() for obj in informer.items()
        )  # fmt: skip
        return {"Kueue": kueue, "Direct": direct}

    def _connections(self) -> dict[str, Worker]:
        """The workers as the dispatch code sees them (``clusters.worker.Worker``), by MultiKueueCluster name."""
        connections = self.cluster_reconciler.connections if self.cluster_reconciler else {}
        return {name: connection.worker for name, connection in connections.items()}

    # ------------------------------------------------------------------------- what each event enqueues

    def _on_workload(self, kind: str, obj: Object) -> None:
        if kind == DELETED and self.workload_reconciler is not None:
            self.workload_reconciler.remember_deleted(obj)
        self.workload_controller.enqueue(ObjectKey.of(obj))

    def _on_object(self, gvk: GroupVersionKind, direct: bool, kind: str, obj: Object, *, observe: bool = True) -> None:
        """A manager object of a configured kind: placed itself in Direct mode, else its Workload looked at."""
        if direct:
            if observe and self.direct_reconciler is not None:
                self.direct_reconciler.observe(gvk, kind, obj)
            self.direct_controller.enqueue((gvk, ObjectKey.of(obj)))
        elif self.manager_workloads is not None:
            for workload in self.manager_workloads.by_index(owners.BY_OWNER_UID, obj["metadata"].get("uid", "")):
                self.workload_controller.enqueue(workload)

    async def _schemas_changed(self, group_versions: set[str]) -> None:
        """A configured kind's published schema changed on the manager (its CRD upgraded): status fields it once
        dropped are mirrored again, for every object of the kind. Another kind's change in the same group version
        changes nothing."""
        kinds = [g for g in self.kinds if openapi.group_version_path(g.group, g.version) in group_versions]
        for gvk, schema in (await published_kinds(self.api, kinds)).items():
            if self._schema_digests.get(gvk) == schema.digest:
                continue
            self._schema_digests[gvk] = schema.digest
            informer = self.kinds[gvk][0]
            reconcilers = (self.workload_reconciler, self.direct_reconciler)
            forgot = [r.mirror.forget_kind(gvk) for r in reconcilers if r is not None]  # both, not the first
            if any(forgot):
                log.info("the kind's schema changed on the manager: dropped status fields tried again", kind=str(gvk))
                direct = gvk in self.direct_kinds
                for obj in informer.items():
                    self._on_object(gvk, direct, "", obj, observe=False)

    async def _say_schema_problems(self) -> None:
        """What the manager's schemas make impossible (a managedByPath they drop), where the configuration is."""
        schemas = await published_kinds(self.api, self.config.multi_kueue.gvks)
        self._schema_digests = {gvk: schema.digest for gvk, schema in schemas.items()}
        for problem in managed_by_problems(self.config, schemas):
            log.warning("configuration cannot work with the manager's schema", problem=problem)
            if self.reloads is not None:
                await self.reloads.warn("ManagedByPathPruned", problem)

    def _on_worker_change(self, cluster: str, key: ObjectKey) -> None:
        """Bursts from workers coalesce over the batch period."""
        self.workload_controller.queue.add_after(key, self.config.dispatcher.events_batch_period)

    def _on_worker_object(self, cluster: str, gvk: GroupVersionKind, key: ObjectKey) -> None:
        if gvk in self.direct_kinds:
            self.direct_controller.queue.add_after((gvk, key), self.config.dispatcher.events_batch_period)

    def _all_checks(self) -> None:
        if self.check_reconciler is not None:
            for name in self.check_reconciler.ours():
                self.check_controller.enqueue(name)

    def _on_cluster(self, kind: str, obj: Object) -> None:
        self.cluster_controller.enqueue(obj["metadata"]["name"])
        self._all_checks()
        if self.direct_reconciler is not None:  # a worker's labels may now fit runs that wait for one
            for gvk in self.direct_reconciler.waiting:
                self.direct_reconciler.wake(gvk)

    def _on_secret(self, kind: str, obj: Object) -> None:
        if self.cluster_reconciler is not None:
            for name in self.cluster_reconciler.clusters_using_secret(obj["metadata"]["name"]):
                self.cluster_controller.enqueue(name)

    def _on_profile(self, kind: str, obj: Object | None) -> None:
        if self.cluster_reconciler is not None:
            name = obj["metadata"]["name"] if obj is not None else None
            for cluster in self.cluster_reconciler.clusters_using_profile(name):
                self.cluster_controller.enqueue(cluster)

    def _on_config(self, kind: str, obj: Object) -> None:
        self._all_checks()
        if self.manager_workloads is not None:  # clusters of a config changed: look at every Workload
            for workload in self.manager_workloads.items():
                self.workload_controller.enqueue(ObjectKey.of(workload))

    async def _serve_http(self) -> Endpoints | None:
        """Start the endpoints once; returns them if this call started them (its owner stops them)."""
        if self.endpoint_options is None or self.endpoints is not None:
            return None
        ready = lambda: self.standby or self.started.is_set()  # noqa: E731 - a standby is ready by design
        endpoints = Endpoints(self.endpoint_options, self.metrics, ready, self.api, draining=lambda: self.draining)
        try:
            await endpoints.start()
        except ServingError as e:
            raise StartupError(str(e)) from None
        self.endpoints = endpoints
        return endpoints

    async def _serve_webhook(self) -> WebhookServer | None:
        """Start the admission webhook once, if configured; returns it if this call started it.

        Every replica serves it, leader or standby: the Service sends admission requests to any of them, and the
        answer needs only the configuration, not the caches.
        """
        options = self.config.dispatcher.webhook
        if options is None or self.webhook is not None:
            return None
        # Imported here: the webhook's certificates need cryptography (~10 MiB resident), which a dispatcher
        # serving no webhook never loads.
        from multikueue.integration.webhook import WebhookServer

        self.webhook = WebhookServer(options, lambda: self.config.integrations)
        await self.webhook.start(self.api, self.config.dispatcher.namespace)
        return self.webhook

    async def run_as_leader(self, election: LeaderElectionSettings) -> None:
        """Reconcile only while holding the Lease; return when it is lost (the process should then exit).

        The election's "started leading" callback only signals, and the manager runs inside this function's own
        task group, so losing the Lease or a cancellation (SIGTERM) stops it cleanly. A Lease held is then given
        up, once the reconciles have stopped: the next leader starts at once instead of waiting it out.
        """
        self.standby = True
        lease = f"{election.namespace}/{election.name}"
        acquired = anyio.Event()
        log.info("waiting for the leader lease", lease=lease, identity=election.identity)
        async with self.serving():
            try:
                await self._lead(election, acquired)
            finally:
                if acquired.is_set():
                    with anyio.CancelScope(shield=True), anyio.move_on_after(RELEASE_TIMEOUT):
                        if await leader.release(self.api, namespace=election.namespace, name=election.name,
                                                identity=election.identity):  # fmt: skip
                            log.info("leader lease released", lease=lease, identity=election.identity)

    async def _lead(self, election: LeaderElectionSettings, acquired: anyio.Event) -> None:
        lease = f"{election.namespace}/{election.name}"

        async def lead() -> None:
            acquired.set()

        async def stopped() -> None:
            log.warning("leader lease lost", lease=lease, identity=election.identity)

        async with anyio.create_task_group() as tg:

            async def elect() -> None:
                await leader.contend(
                    self.api, namespace=election.namespace, name=election.name, identity=election.identity,
                    lease_duration=election.lease_duration, renew_deadline=election.renew_deadline,
                    retry_period=election.retry_period, on_acquired=lead, on_lost=stopped,
                )  # fmt: skip
                tg.cancel_scope.cancel()  # a held Lease could not be renewed

            tg.start_soon(elect)
            await acquired.wait()
            self.standby = False
            log.info("leader lease acquired", lease=lease, identity=election.identity)
            await self.run()

    def _connection_changed(self, name: str) -> None:
        self.cluster_controller.enqueue(name)  # every failed retry updates the condition's attempt count
        connections = self.cluster_reconciler.connections if self.cluster_reconciler else {}
        connection = connections.get(name)
        settled = self.cluster_reconciler.settled(name) if self.cluster_reconciler else True
        state = (connection.connected if connection else False, frozenset(connection.resources if connection else ()),
                 settled)  # fmt: skip
        if self._was_connected.get(name) == state:
            return
        self._was_connected[name] = state
        if self.direct_reconciler is not None:  # and at every direct-mode object
            for gvk, (informer, _) in self.direct_reconciler.kinds.items():
                for obj in informer.items():
                    self.direct_controller.enqueue((gvk, ObjectKey.of(obj)))
        if self.workload_reconciler is not None:  # a worker (or a kind on it) came or went: look at every Workload
            for workload in self.workload_reconciler.workloads.items():
                self.workload_controller.enqueue(ObjectKey.of(workload))

    async def _collect_garbage_forever(self) -> None:
        while True:
            await anyio.sleep(self.config.multi_kueue.gc_interval)
            for reconciler in (self.workload_reconciler, self.direct_reconciler):
                if reconciler is None:
                    continue
                try:
                    await reconciler.collect_garbage()
                except Exception as e:
                    log.warning("garbage collection failed", error=f"{type(e).__name__}: {e}")

    async def _reconcile_workload(self, key: ObjectKey) -> Result | None:
        assert self.workload_reconciler is not None
        return await self.workload_reconciler.reconcile(key)

    async def _reconcile_direct(self, key: DirectKey) -> Result | None:
        assert self.direct_reconciler is not None
        return await self.direct_reconciler.reconcile(key)

    async def _reconcile_cluster(self, name: str) -> Result | None:
        assert self.cluster_reconciler is not None
        return await self.cluster_reconciler.reconcile(name)

    async def _reconcile_check(self, name: str) -> Result | None:
        assert self.check_reconciler is not None
        return await self.check_reconciler.reconcile(name)
