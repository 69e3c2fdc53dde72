"""What lives as long as one ``multikueue run`` process: the endpoints, the webhook, the Lease and the
configuration watch; and, in turn, one generation of controllers per valid configuration (generation.py)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import anyio
import anyio.abc
import structlog

from multikueue.clusters.outages import WorkerOutages
from multikueue.config import Configuration
from multikueue.endpoints import Endpoints, Serving, ServingError
from multikueue.generation import Generation, ManagerGeneration, serve_manager, serve_worker
from multikueue.kube import core, leader
from multikueue.kube.addresses import WORKLOADS
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import TRANSIENT, ApiError, describe
from multikueue.kube.resources import Objects
from multikueue.metrics import Metrics
from multikueue.reload import ConfigReloads, ConfigSource, StartupError, check_kinds

if TYPE_CHECKING:
    from multikueue.integration.reconciler import IntegrationReconciler
    from multikueue.integration.webhook import WebhookServer

log = structlog.get_logger(__name__)
RELEASE_TIMEOUT = 5.0  # seconds a stopping leader tries to give its Lease up; past that, the Lease just expires


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


@contextlib.asynccontextmanager
async def _beside(task: Callable[[], Coroutine[Any, Any, None]] | None) -> AsyncIterator[None]:
    """Run ``task`` (which handles its own failures) while the block runs. The block's own exception comes out as
    itself, not wrapped in the task group's ExceptionGroup, as it would without the task."""
    if task is None:
        yield
        return
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(task)
            yield
            tg.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            raise group.exceptions[0] from None
        raise


class Process:
    """One ``multikueue run`` process, for its role: on the manager cluster the dispatcher (and the integration, if
    configured); with ``--role worker`` only the integration. Each valid new configuration replaces the generation
    of controllers as a whole; with leader election, controllers run only while the Lease is held.

    The manager client's requests are counted in ``metrics`` only if the client was built with its hooks
    (``Metrics.requests_to("manager")``, as ``multikueue run`` does): the process never changes a client it is given.
    """

    def __init__(
        self,
        api: ApiClient,
        config: Configuration,
        *,
        temp_dir: Path | None = None,
        serving: Serving | None = None,
        config_source: ConfigSource | None = None,
        role: Literal["manager", "worker"] = "manager",
        metrics: Metrics | None = None,
    ) -> None:
        self.api = api
        self.role = role
        self.config = config  # the configuration in force
        self.config_source = config_source  # watched: a valid change replaces the generation
        self.temp_dir = temp_dir
        # The caller's, when it counts the manager client's requests into them (``Metrics.requests_to``).
        self.metrics = metrics if metrics is not None else Metrics()
        self.reloads = (
            ConfigReloads(api, config_source, config, metrics=self.metrics,
                          check=(lambda c: check_kinds(api, c)) if role == "manager" else None)
            if config_source else None
        )  # fmt: skip
        self.endpoint_options = serving  # /metrics (HTTPS, authorised) and /healthz, /readyz; None: neither served
        self.endpoints: Endpoints | None = None
        self.webhook: WebhookServer | None = None
        self.standby = False  # waiting for the leader lease: healthy and ready, reconciling nothing
        self.draining = False  # told to stop: unready, yet still answering the webhook (multikueue/shutdown.py)
        self.started = anyio.Event()  # the first generation runs (readiness; kept across reloads)
        self._generation: Generation | None = None
        # The worker-lost clocks, kept across the generations a reload replaces; started anew when this process
        # begins to reconcile (a standby's wait for the lease is no outage of anything).
        self.outages = WorkerOutages()
        self._watching_config = False  # the ConfigMap's watch runs (a standby starts it; the leader keeps it)
        self._following: anyio.CancelScope | None = None  # a standby following the ConfigMap

    @property
    def generation(self) -> ManagerGeneration:
        """The manager generation now running; ``LookupError`` between two, before the first, or as a worker."""
        if not isinstance(self._generation, ManagerGeneration):
            raise LookupError("no manager generation is running")
        return self._generation

    @property
    def integration(self) -> IntegrationReconciler:
        """The running generation's integration, in either role; ``LookupError`` between generations."""
        if self._generation is None:
            raise LookupError("no generation is running")
        return self._generation.integration

    async def run(self) -> None:
        """Run one generation after another: each valid new configuration replaces the running one.

        A new generation closes every worker connection and relists everything: reconciles are level-triggered
        and idempotent (they survive a SIGKILL at any point), so cancelling them mid-way loses nothing. An invalid
        change (one that does not parse, or names a misspelt kind) replaces nothing: ``ConfigReloads`` refuses it.
        """
        self.outages = WorkerOutages()
        if self.role == "manager":
            try:
                await check_kinds(self.api, self.config)  # a misspelt kind at start ends the process, in one line
            except TRANSIENT as e:
                raise StartupError(f"cannot check the configured kinds on the manager cluster: {describe(e)}") from None
        async with self.serving(), anyio.create_task_group() as outer:
            if self.reloads is not None and not self._watching_config:
                self._watching_config = True
                outer.start_soon(self.reloads.watch)
            while True:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(self._serve, self.config)
                    self.config = await self._changed(await self._next_config())  # may come while it still starts
                    tg.cancel_scope.cancel()
                self._generation = None  # the old generation has stopped before the next is built
                log.info("configuration reloaded; controllers restarted", source=str(self.config_source))

    async def _serve(self, config: Configuration) -> None:
        async with anyio.create_task_group() as tg:
            self._generation = await tg.start(self._run_generation, config)
            self.started.set()

    async def _run_generation(self, config: Configuration, *, task_status: anyio.abc.TaskStatus[Generation]) -> None:
        if self.role == "worker":
            await serve_worker(self.api, config, metrics=self.metrics, task_status=task_status)
        else:
            await serve_manager(self.api, config, metrics=self.metrics, temp_dir=self.temp_dir, warn=self._warn,
                                outages=self.outages, task_status=task_status)  # fmt: skip

    async def _next_config(self) -> Configuration:
        """The next valid configuration, different from the one in force; never, without a ConfigMap to watch."""
        while self.reloads is None:
            await anyio.sleep_forever()
        return await self.reloads.next_valid()

    async def _changed(self, config: Configuration) -> Configuration:
        """The configuration to put in force; a webhook whose own options changed is said to need a restart (its
        listener, certificate and Secret are the process's, not a generation's)."""
        if self.webhook is not None and config.dispatcher.webhook != self.config.dispatcher.webhook:
            message = ("dispatcher.webhook changed: this replica's webhook keeps serving with the options it started "
                       "with until it restarts (kubectl rollout restart the Deployment)")  # fmt: skip
            log.warning(message, serving=self.webhook.options.model_dump(), wanted=str(config.dispatcher.webhook))
            await self._warn("WebhookRestartNeeded", message)
        return config

    async def _warn(self, reason: str, message: str) -> None:
        if self.reloads is not None:
            await self.reloads.warn(reason, message)

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[None]:
        """The endpoints and the webhook for as long as the block runs; each is started once, and stopped by the
        block that started it: the outermost, so a caller may keep them answering after the controllers stop."""
        runner = await self._serve_http()
        webhook = None
        try:
            webhook = await self._serve_webhook()
            async with _beside(webhook.keep if webhook is not None else None):
                yield  # the webhook's certificate and caBundle kept current meanwhile
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

    async def _serve_http(self) -> Endpoints | None:
        """Start the endpoints once; returns them if this call started them (its owner stops them)."""
        if self.endpoint_options is None or self.endpoints is not None:
            return None
        ready = lambda: (self.standby or self.started.is_set()) and self._webhook_trusted()  # noqa: E731
        endpoints = Endpoints(self.endpoint_options, self.metrics, ready, self.api, draining=lambda: self.draining)
        try:
            await endpoints.start()
        except ServingError as e:
            raise StartupError(str(e)) from None
        self.endpoints = endpoints
        return endpoints

    def _webhook_trusted(self) -> bool:
        """A standby is ready by design (it answers the webhook); a webhook is ready once the API servers trust the
        certificate it serves, so the Service never sends them to a replica they would refuse."""
        return self.webhook is None or self.webhook.ready

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
        from multikueue.integration.generated_certificate import StartFailed
        from multikueue.integration.webhook import WebhookServer

        webhook = WebhookServer(options, lambda: self.config.integrations, metrics=self.metrics, warn=self._warn)
        try:
            await webhook.start(self.api, self.config.dispatcher.namespace)
        except (StartFailed, FileNotFoundError, ValueError, OSError) as e:  # ssl.SSLError is an OSError
            await webhook.stop()
            raise StartupError(f"the admission webhook cannot serve: {e}") from None
        except ApiError as e:
            await webhook.stop()
            raise StartupError(f"the admission webhook's certificate: {describe(e)}") from None
        self.webhook = webhook
        return webhook

    async def run_as_leader(self, election: LeaderElectionSettings) -> None:
        """Reconcile only while holding the Lease; return when it is lost (the process should then exit).

        The election's "started leading" callback only signals, and the controllers run inside this function's own
        task group, so losing the Lease or a cancellation (SIGTERM) stops them cleanly. A Lease held is then given
        up, once the reconciles have stopped: the next leader starts at once instead of waiting it out.
        """
        self.standby = True
        lease = f"{election.namespace}/{election.name}"
        acquired = anyio.Event()
        log.info("waiting for the leader lease", lease=lease, identity=election.identity)
        async with self.serving(), anyio.create_task_group() as standby:
            if self.reloads is not None:  # a standby's webhook serves the configuration in force, as the leader's
                self._watching_config = True
                standby.start_soon(self.reloads.watch)
                self._following = await standby.start(self._follow_config)
            try:
                await self._lead(election, acquired)
            finally:
                standby.cancel_scope.cancel()
                if acquired.is_set():
                    with anyio.CancelScope(shield=True), anyio.move_on_after(RELEASE_TIMEOUT):
                        if await leader.release(self.api, namespace=election.namespace, name=election.name,
                                                identity=election.identity):  # fmt: skip
                            log.info("leader lease released", lease=lease, identity=election.identity)

    async def _follow_config(self, *, task_status: anyio.abc.TaskStatus[anyio.CancelScope]) -> None:
        """While standing by, each valid change becomes the configuration in force, judged and refused as the
        leader judges it; the leader's ``run`` takes over from this once the Lease is held."""
        assert self.reloads is not None
        with anyio.CancelScope() as scope:
            task_status.started(scope)
            while True:
                self.config = await self._changed(await self.reloads.next_valid())
                log.info("configuration changed; this standby's webhook serves it", source=str(self.reloads))

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
            if self._following is not None and self.reloads is not None:
                self._following.cancel()  # from here on the leader's run follows the ConfigMap
                self.config = self.reloads.current  # the last valid change, even one judged as the standby stopped
                self.reloads.offer_again()  # a change it was judging when stopped is judged again by the leader
            self.standby = False
            log.info("leader lease acquired", lease=lease, identity=election.identity)
            await self.run()
