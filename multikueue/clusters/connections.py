"""One connection per worker: an API client, the informers on its origin-labelled objects, and its health.

Connected means the worker's Workload watch is established and the worker answers a periodic probe. A configured
kind whose CRD the worker lacks makes only that kind unavailable there (Kueue fails the whole worker instead, issue
#3582); it is looked up again on later reconciles, so installing the CRD heals it without a restart.

The dispatch code sees a connection only through its ``ConnectedWorker``, this module's ``clusters.worker.Worker``.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import structlog
from anyio.abc import TaskGroup

from multikueue import specdigest
from multikueue.clusters.worker import KindNotServed, Worker
from multikueue.kube import core
from multikueue.kube.addresses import CLUSTER_QUEUES, WORKLOADS, GroupVersionKind, Resource
from multikueue.kube.client import (
    DEFAULT_MAX_CONNECTIONS,
    ApiClient,
    Timeouts,
    api_client_from_kubeconfig,
    rate_limit,
)
from multikueue.kube.credentials import header_only_change
from multikueue.kube.discovery import KindUnavailable, cluster_identity, discover_resource
from multikueue.kube.errors import KubeconfigError, KubeError, NotFound, describe
from multikueue.kube.kubeconfig import access_from_kubeconfig
from multikueue.kube.resources import Objects
from multikueue.labels import ORIGIN_LABEL, prebuilt_workload_of
from multikueue.runtime.informer import DELETED, Informer, ObjectKey

log = structlog.get_logger(__name__)

Object = dict[str, Any]
WorkerEventHandler = Callable[[str, ObjectKey], None]  # (worker, the manager Workload the change concerns)
# (worker, kind, the manager object a direct-mode copy mirrors: same namespace and name)
WorkerObjectHandler = Callable[[str, GroupVersionKind, ObjectKey], None]


def retry_after(failed_attempts: int) -> float:
    """Kueue's reconnect schedule: 5 s doubling per failed attempt, capped at 320 s."""
    return float(5 * 2 ** (min(max(failed_attempts, 1), 7) - 1))


def fingerprint(kubeconfig: Object) -> str:
    return hashlib.sha256(json.dumps(kubeconfig, sort_keys=True).encode()).hexdigest()


class ConnectionFailed(Exception):
    pass


class WorkerConnection:
    def __init__(
        self,
        name: str,
        kubeconfig: Object,
        *,
        origin: str,
        gvks: tuple[GroupVersionKind, ...],
        timeout: float,
        probe_interval: float = 10.0,
        qps: float = 50.0,
        burst: int = 100,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
        on_state_change: Callable[[], None],
        on_worker_event: WorkerEventHandler | None = None,
        on_worker_object: WorkerObjectHandler | None = None,
        on_api_error: Callable[[str], None] | None = None,
        on_api_request: Callable[[str], None] | None = None,
        temp_dir: Path | None = None,
        watch_warnings: bool = True,
        spec_synced: frozenset[GroupVersionKind] = frozenset(),
    ) -> None:
        self.name = name
        self.spec_synced = spec_synced  # kinds whose copies' spec is compared (specSync)
        self.watch_warnings = watch_warnings
        # Recent Warning Events per manager Workload (reason, message), taken by the Workload reconciler.
        self.warnings: dict[ObjectKey, deque[tuple[str, str]]] = {}
        self.kubeconfig = kubeconfig
        self.fingerprint = fingerprint(kubeconfig)
        self.origin = origin
        self.gvks = gvks
        self.timeout = timeout
        self.probe_interval = probe_interval
        self.limiter = rate_limit(qps, burst)  # one bucket per worker, shared by every call to it
        self.max_connections = max_connections
        self.on_state_change = on_state_change
        self.on_worker_event = on_worker_event
        self.on_worker_object = on_worker_object
        self.temp_dir = temp_dir
        self.on_api_error = on_api_error
        self.on_api_request = on_api_request
        # When each worker object's latest change was seen, for the status-sync lag metric.
        self.observed: dict[tuple[str, str, str], float] = {}
        # A new connection counts as lost since its creation, so a worker down across a controller restart
        # still reaches the worker-lost timeout (Kueue does the same).
        self.created_at = time.monotonic()
        self.attempts = 0
        self.next_attempt_at: float | None = None
        self.last_error: str | None = None
        self.unreachable_since: float | None = None  # the start of the first failed probe of an outage
        self.probe_error: str | None = None
        self.api: ApiClient | None = None
        self.identity: str | None = None  # the worker's kube-system namespace UID, read on connect
        self.workloads: Informer | None = None
        self.objects: dict[GroupVersionKind, Informer] = {}
        self._kind_scopes: dict[GroupVersionKind, anyio.CancelScope] = {}  # each kind's informer, stopped alone
        self.resources: dict[GroupVersionKind, Resource] = {}
        self.kind_errors: dict[GroupVersionKind, str] = {}
        self.unserved: set[GroupVersionKind] = set()  # discovery said no (404): not a transient error
        self._kinds_checked = False  # `connected` waits for the first discovery: "no kinds yet" is not "no kinds"
        # `connected` waits for the owner to check where the connection leads (the cluster's identity): until then
        # no pass reads its caches (those of another cluster, a moment before it is refused, would say the runs
        # recorded there are gone).
        self.vetted = False
        self._scope: anyio.CancelScope | None = None
        self._stopped = anyio.Event()
        self._informers: TaskGroup | None = None
        self.worker = ConnectedWorker(self)  # what the dispatch code sees of this connection

    # ------------------------------------------------------------------------------------------ state

    @property
    def started(self) -> bool:
        return self._scope is not None

    @property
    def connected(self) -> bool:
        return (self.workloads is not None and self.workloads.connected and self.unreachable_since is None
                and self._kinds_checked and self.vetted)  # fmt: skip

    def serves(self, gvk: GroupVersionKind) -> bool | None:
        """Whether the worker serves the kind: ``None`` while unknown (not discovered yet, or discovery failed for a
        reason other than the kind being absent), which must never be read as "absent"."""
        if gvk in self.resources:
            return True
        return False if gvk in self.unserved else None

    @property
    def disconnected_since(self) -> float | None:
        """Monotonic time of the first drop of the current outage; ``None`` while connected."""
        if self.connected:
            return None
        if self.workloads is not None and self.workloads.synced.is_set():
            drops = [t for t in (self.workloads.disconnected_since, self.unreachable_since) if t is not None]
            return min(drops, default=time.monotonic())
        return self.created_at

    @property
    def selector(self) -> str:
        return f"{ORIGIN_LABEL}={self.origin}"

    def failure_message(self) -> str:
        error = (
            self.last_error
            or self.probe_error
            or (
                describe(self.workloads.last_error) if self.workloads and self.workloads.last_error else "not connected"
            )
        )
        attempts = self.attempts if not self.started else (self.workloads.failures if self.workloads else 0)
        message = f"{error}; connection attempts: {attempts}"
        if self.next_attempt_at is not None and not self.started:
            wall = datetime.datetime.now(datetime.UTC) + datetime.timedelta(
                seconds=max(0.0, self.next_attempt_at - time.monotonic())
            )
            message += f", next connection attempt: {wall.strftime('%Y-%m-%dT%H:%M:%SZ')}"
        return message

    # ------------------------------------------------------------------------------------- lifecycle

    async def connect(self, task_group: TaskGroup) -> None:
        """One attempt: build the client, check the server answers, start the informers. Raises ``ConnectionFailed``."""
        timeout = Timeouts(total=self.timeout, connect=min(5.0, self.timeout))
        try:
            api = await api_client_from_kubeconfig(
                self.kubeconfig,
                timeout=timeout,
                temp_dir=self.temp_dir,
                limiter=self.limiter,
                max_connections=self.max_connections,
                on_error=self.on_api_error,
                on_request=self.on_api_request,
            )
        except KubeconfigError as e:  # its TLS material cannot be used (a CA that is not a certificate)
            self._attempt_failed(str(e))
            raise ConnectionFailed(self.last_error) from None
        step = ""
        try:
            await core.server_version(api)
            step = "cannot read the worker's identity (namespace kube-system): "
            self.identity = await cluster_identity(api)
        except KubeError as e:
            await api.close()
            self._attempt_failed(step + describe(e))
            raise ConnectionFailed(self.last_error) from None
        self.api = api
        self.workloads = Informer(
            Objects(api, WORKLOADS).source(label_selector=self.selector),
            on_event=self._event_handler(workloads=True),
            transform=specdigest.summarized,  # a copy's spec is only compared with the manager's
        )
        self.workloads.connectivity.subscribe(lambda _: self.on_state_change())  # its watch up or down
        await task_group.start(self._run)
        assert self._informers is not None
        self._informers.start_soon(self.workloads.run)
        workloads = self.workloads
        await self.refresh_kinds()
        self._kinds_checked = True
        with anyio.move_on_after(self.timeout):
            await workloads.synced.wait()
        if not workloads.synced.is_set():
            error = describe(workloads.last_error) if workloads.last_error else "Workloads not listed in time"
            await self.close()
            self._attempt_failed(error)
            raise ConnectionFailed(self.last_error)
        self.attempts = 0
        self.next_attempt_at = None
        self.last_error = None
        self._informers.start_soon(self._probe, api)
        if self.watch_warnings:
            # Warning Events of the worker, mapped to the manager Workload they concern: why a run waits or
            # fails there, surfaced on the manager object. Event-driven: no per-Workload polling of the worker.
            warnings = Informer(
                core.warning_event_source(api, description=f"warning events on {self.name}"),
                on_event=self._warning_handler,
            )
            self._informers.start_soon(warnings.run)

    async def renew_credentials(self, kubeconfig: Object) -> bool:
        """Use a kubeconfig whose only change is the credential (a renewed token) in the live client: no reconnect,
        so no informer lists again and no run notices. Checked first with a client of its own: the worker accepts
        it and is the same cluster. ``False`` when it cannot be used so (anything else changed, or the check
        failed): the caller then reconnects, which reports why."""
        if self.api is None or not self.started:
            return False
        try:
            access = access_from_kubeconfig(kubeconfig)
        except KubeconfigError:
            return False
        if not header_only_change(self.api.access, access):
            return False
        trial = ApiClient(access, timeout=Timeouts(total=self.timeout), temp_dir=self.temp_dir,
                          on_error=self.on_api_error, on_request=self.on_api_request)  # fmt: skip
        try:
            identity = await cluster_identity(trial)
        except KubeError as e:
            log.warning("renewed credential refused by the worker; reconnecting", cluster=self.name, error=describe(e))
            return False
        finally:
            await trial.close()
        if identity != self.identity:
            return False
        self.api.access, self.api.credentials = access, self.api.credentials.with_header_of(access)
        self.kubeconfig, self.fingerprint = kubeconfig, fingerprint(kubeconfig)
        log.info("worker credential renewed in place", cluster=self.name)
        return True

    async def _run(self, *, task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Own this connection's informers in one task group, cancelled as a whole by ``close``."""
        stopped = self._stopped = anyio.Event()
        try:
            with anyio.CancelScope() as scope:
                self._scope = scope
                async with anyio.create_task_group() as informers:
                    self._informers = informers
                    task_status.started()
                    await anyio.sleep_forever()
        finally:
            self._informers = None
            stopped.set()

    async def _probe(self, api: ApiClient) -> None:
        """GET /version every ``probe_interval``: an open but silent watch socket does not mean a live worker."""
        while True:
            await anyio.sleep(self.probe_interval)
            began = time.monotonic()
            error = None
            try:
                with anyio.fail_after(self.timeout):
                    await core.server_version(api)
            except TimeoutError:
                error = f"health probe: no answer within {self.timeout:g}s"
            except KubeError as e:
                error = f"health probe: {describe(e)}"
            if (error is None) == (self.unreachable_since is None):
                continue  # no change
            if error is None:
                log.info("worker reachable again", cluster=self.name)
                self.unreachable_since, self.probe_error = None, None
                for informer in (self.workloads, *self.objects.values()):
                    if informer is not None:
                        informer.wake()  # not left in a backoff grown while the worker was away
            else:
                log.warning("worker unreachable", cluster=self.name, error=error)
                self.unreachable_since, self.probe_error = began, error
            self.on_state_change()

    def kinds_in_doubt(self) -> bool:
        """Whether a kind's standing may have changed: one not served (or not discovered) yet, or one served whose
        list the worker now answers with 404 (its CRD removed)."""
        return bool(self.kind_errors) or any(self._removed(gvk) for gvk in self.objects)

    def _removed(self, gvk: GroupVersionKind) -> bool:
        informer = self.objects.get(gvk)
        return informer is not None and isinstance(informer.last_error, NotFound)

    async def refresh_kinds(self) -> None:
        """Start an informer for each configured kind the worker serves; record the ones it does not, and stop the
        informer of a kind whose CRD was removed there (discovery no longer lists it)."""
        assert self.api is not None
        for gvk in self.gvks:
            if gvk in self.objects and not self._removed(gvk):
                self.kind_errors.pop(gvk, None)  # its informer lists it: a failed look-up since says nothing
                continue
            try:
                resource = await discover_resource(self.api, gvk)
            except KindUnavailable as e:
                self._unserved(gvk, str(e))
                continue
            except KubeError as e:
                self.kind_errors[gvk] = describe(e)
                continue
            self.kind_errors.pop(gvk, None)
            self.unserved.discard(gvk)
            if gvk in self.objects and self.resources.get(gvk) == resource:
                self.objects[gvk].wake()  # served all along (or again, unchanged): its informer lists again now
                continue
            self._stop_kind(gvk)
            self.resources[gvk] = resource
            self._watch_kind(gvk, resource)

    def _unserved(self, gvk: GroupVersionKind, error: str) -> None:
        if self.kind_errors.get(gvk) != error:
            log.warning("kind unavailable on worker", cluster=self.name, kind=str(gvk), error=error)
        self.kind_errors[gvk] = error
        self.unserved.add(gvk)
        self._stop_kind(gvk)

    def _watch_kind(self, gvk: GroupVersionKind, resource: Resource) -> None:
        assert self.api is not None
        assert self._informers is not None
        informer = Informer(
            Objects(self.api, resource).source(label_selector=self.selector),
            on_event=self._event_handler(workloads=False, gvk=gvk),
            # The copy's spec is read back only to carry specSync fields; without any, it is not kept.
            drop=() if gvk in self.spec_synced else ("spec",),
        )
        # A 404 from its list or watch may be the CRD removed: the cluster reconciler looks the kind up again.
        informer.connectivity.subscribe(
            lambda up: None if up or not isinstance(informer.last_error, NotFound) else self.on_state_change()
        )
        scope = self._kind_scopes[gvk] = anyio.CancelScope()
        self.objects[gvk] = informer

        async def run() -> None:
            with scope:
                await informer.run()

        self._informers.start_soon(run)

    def _stop_kind(self, gvk: GroupVersionKind) -> None:
        """Forget a kind's informer and cache (its CRD removed there, or changed): its copies went with the CRD."""
        scope = self._kind_scopes.pop(gvk, None)
        if scope is not None:
            scope.cancel()
        self.objects.pop(gvk, None)
        self.resources.pop(gvk, None)

    async def close(self) -> None:
        if self._scope is not None:
            self._scope.cancel()
            self._scope = None
            # Every informer ends before the client closes: one started a moment ago and not yet run would
            # otherwise meet a closed session, which is not a cancellation and would fail the whole manager.
            with anyio.move_on_after(10, shield=True):
                await self._stopped.wait()
        if self.api is not None:
            await self.api.close()
            self.api = None
        self.workloads = None
        self.objects.clear()
        self._kind_scopes.clear()
        self.resources.clear()
        self.unserved.clear()
        self._kinds_checked = False
        self.vetted = False
        self.unreachable_since, self.probe_error = None, None
        self.warnings.clear()

    # ------------------------------------------------------------------------------------- internals

    def _attempt_failed(self, error: str) -> None:
        self.attempts += 1
        self.last_error = error
        self.next_attempt_at = time.monotonic() + retry_after(self.attempts)

    def _event_handler(self, *, workloads: bool, gvk: GroupVersionKind | None = None) -> Callable[[str, Object], None]:
        """Map a worker change to the manager Workload it concerns: a Workload copy has the same name; an object
        names its Workload in the prebuilt-workload annotation (or label)."""

        def handle(kind: str, obj: Object) -> None:
            meta = obj.get("metadata") or {}
            namespace = meta.get("namespace", "")
            seen = (obj.get("kind", ""), namespace, meta.get("name", ""))
            if kind == DELETED:
                self.observed.pop(seen, None)
            else:
                self.observed[seen] = time.monotonic()
            name = meta.get("name") if workloads else prebuilt_workload_of(obj)
            if name and self.on_worker_event is not None:
                self.on_worker_event(self.name, ObjectKey(namespace, name))
            elif not name and gvk is not None and self.on_worker_object is not None:  # a direct-mode copy
                self.on_worker_object(self.name, gvk, ObjectKey(namespace, meta.get("name", "")))

        return handle

    def _warning_handler(self, kind: str, event: Object) -> None:
        if kind == DELETED:
            return
        involved = event.get("involvedObject") or {}
        namespace, name = involved.get("namespace") or "", involved.get("name") or ""
        key: ObjectKey | None = None
        if involved.get("kind") == "Workload":
            key = (
                ObjectKey(namespace, name)
                if self.workloads and self.workloads.get(ObjectKey(namespace, name))
                else None
            )
        else:
            for gvk, informer in self.objects.items():
                if gvk.kind == involved.get("kind") and (obj := informer.get(ObjectKey(namespace, name))) is not None:
                    workload = prebuilt_workload_of(obj)
                    key = ObjectKey(namespace, workload) if workload else None
                    break
        if key is None:
            return  # not about anything this manager sent here
        recent = self.warnings.setdefault(key, deque(maxlen=10))
        entry = (str(event.get("reason") or ""), str(event.get("message") or ""))
        if entry not in recent:
            recent.append(entry)
            if self.on_worker_event is not None:
                self.on_worker_event(self.name, key)


class ConnectedWorker(Worker):
    """The dispatch code's view of one ``WorkerConnection`` (the ``Worker`` Protocol). It keeps no state of its own:
    it reads through to the connection, so it stays right across reconnects and kubeconfig rotations."""

    def __init__(self, connection: WorkerConnection) -> None:
        self._connection = connection

    @property
    def name(self) -> str:
        return self._connection.name

    @property
    def connected(self) -> bool:
        return self._connection.connected and self._connection.api is not None

    def serves(self, gvk: GroupVersionKind) -> bool | None:
        return self._connection.serves(gvk)

    @property
    def lost_since(self) -> float | None:
        return self._connection.disconnected_since

    # ------------------------------------------------------------------------------------- cached reads

    def workload(self, key: ObjectKey) -> Object | None:
        workloads = self._connection.workloads
        return workloads.get(key) if workloads is not None else None

    def workloads(self) -> list[Object]:
        workloads = self._connection.workloads
        return workloads.items() if workloads is not None else []

    def copy(self, gvk: GroupVersionKind, key: ObjectKey) -> Object | None:
        informer = self._connection.objects.get(gvk)
        return informer.get(key) if informer is not None else None

    def listed(self, gvk: GroupVersionKind) -> bool | None:
        informer = self._connection.objects.get(gvk)
        if informer is None:
            return False
        return True if informer.synced.is_set() else None

    def copies(self, gvk: GroupVersionKind) -> list[Object]:
        informer = self._connection.objects.get(gvk)
        return informer.items() if informer is not None else []

    def kinds(self) -> list[GroupVersionKind]:
        return list(self._connection.objects)

    def warnings_about(self, workload: ObjectKey) -> tuple[tuple[str, str], ...]:
        return tuple(self._connection.warnings.get(workload, ()))

    def forget(self, workload: ObjectKey) -> None:
        self._connection.warnings.pop(workload, None)

    def last_change(self, kind: str, key: ObjectKey) -> float | None:
        return self._connection.observed.get((kind, key.namespace, key.name))

    def remember_copy(self, gvk: GroupVersionKind, obj: Object) -> bool:
        informer = self._connection.objects.get(gvk)
        if informer is None:
            return False
        key = ObjectKey.of(obj)
        before = informer.get(key)
        informer.remember(obj)
        return informer.get(key) is not before

    def remember_created(self, gvk: GroupVersionKind | None, obj: Object) -> None:
        informer = self._connection.workloads if gvk is None else self._connection.objects.get(gvk)
        if informer is not None:
            informer.remember_created(obj)

    # ----------------------------------------------------------------------------------------- writers

    def objects(self, gvk: GroupVersionKind) -> Objects:
        connection = self._connection
        resource = connection.resources.get(gvk)
        if resource is None or connection.api is None:
            reason = connection.kind_errors.get(gvk, "not discovered yet" if connection.api else "not connected")
            raise KindNotServed(f"{gvk.kind} is unavailable on worker {self.name}: {reason}")
        return Objects(connection.api, resource)

    def cluster_queues(self) -> Objects:
        if self._connection.api is None:
            raise KindNotServed(f"ClusterQueue is unavailable on worker {self.name}: not connected")
        return Objects(self._connection.api, CLUSTER_QUEUES)

    def workload_objects(self) -> Objects:
        if self._connection.api is None:
            raise KindNotServed(f"Workload is unavailable on worker {self.name}: not connected")
        return Objects(self._connection.api, WORKLOADS)
