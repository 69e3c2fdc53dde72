"""MultiKueueCluster → a live worker connection and its ``Active`` condition (Kueue's clustersReconciler).

Triggers: the MultiKueueCluster itself, its kubeconfig Secret (rotation needs no restart), and the
connection's own health changes.
"""

from __future__ import annotations

import base64
import contextlib
import datetime
import time
from pathlib import Path
from typing import Any

import structlog
from anyio.abc import TaskGroup

from multikueue.clusters.connections import (
    ConnectionFailed,
    WorkerConnection,
    fingerprint,
    retry_after,
)
from multikueue.clusters.outages import WorkerOutages
from multikueue.clusters.profiles import BAD_CLUSTER_PROFILE, kubeconfig_from_profile, profile_name
from multikueue.clusters.renewer import TokenRenewer
from multikueue.clusters.signals import WorkerSignals
from multikueue.clusters.worker_kubeconfig import BAD_KUBECONFIG, KubeconfigRejected, validate_kubeconfig
from multikueue.config import Configuration
from multikueue.kube import conditions
from multikueue.kube.addresses import CLUSTER_PROFILES, MULTIKUEUE_CLUSTERS, GroupVersionKind
from multikueue.kube.discovery import KIND_RETRY_SECONDS
from multikueue.kube.errors import NotFound, describe
from multikueue.kube.resources import Objects
from multikueue.labels import CREDENTIALS_EXPIRY_ANNOTATION, WORKER_IDENTITY_ANNOTATION
from multikueue.metrics import Metrics
from multikueue.runtime.controller import Result
from multikueue.runtime.informer import Informer, ObjectKey
from multikueue.runtime.watches import Watch

ACTIVE = "Active"
SECRET_KEY = "kubeconfig"
log = structlog.get_logger(__name__)
Object = dict[str, Any]


PROFILES_LISTING_RETRY = 1.0  # seconds: the ClusterProfiles' first list, under way


class ProfilesListing(Exception):
    """The ClusterProfiles are being listed for the first time: too early to say anything about a profile."""


def access_source(cluster: Object) -> str:
    """Where a MultiKueueCluster's access comes from, for messages: 'Secret "x"' or 'ClusterProfile "y"'."""
    profile = profile_name(cluster)
    return f'ClusterProfile "{profile}"' if profile else f'Secret "{kubeconfig_secret_name(cluster)}"'


def kubeconfig_secret_name(cluster: Object) -> str | None:
    source = (cluster.get("spec") or {}).get("clusterSource") or {}
    ref = source.get("kubeConfig") or {}
    if ref.get("locationType", "Secret") == "Secret":
        location = ref.get("location")
        return str(location) if location else None
    return None


def _connected_message(connection: WorkerConnection, renewal_problem: str | None) -> str:
    message = "Connected"
    if connection.kind_errors:
        unavailable = "; ".join(
            f"{gvk.kind}.{gvk.version}.{gvk.group}: {e}" for gvk, e in connection.kind_errors.items()
        )
        message = f"Connected; unavailable kinds: {unavailable}"
    return f"{message}; {renewal_problem}" if renewal_problem else message


class ClusterReconciler:
    def __init__(
        self,
        config: Configuration,
        manager: Objects,
        clusters: Informer,
        secrets: Informer,
        task_group: TaskGroup,
        *,
        temp_dir: Path | None = None,
        metrics: Metrics | None = None,
        profiles: Informer | None = None,
        outages: WorkerOutages | None = None,
    ) -> None:
        assert manager.resource == MULTIKUEUE_CLUSTERS
        self.config = config
        self.manager = manager
        self.clusters = clusters
        self.secrets = secrets
        self.profiles = profiles  # the ClusterProfiles of the config namespace; watched only with access providers
        self.task_group = task_group
        self.signals = WorkerSignals()  # what the dispatch controllers watch of the workers
        # Last (connected, kinds served, settled) per worker: ``signals.changed`` only when that changes.
        self._was: dict[str, tuple[bool, frozenset[GroupVersionKind], bool]] = {}
        self.temp_dir = temp_dir
        self.metrics = metrics
        self.connections: dict[str, WorkerConnection] = {}
        self.tried: set[str] = set()  # clusters a pass has looked at (and so tried to connect to) in this process
        # Since when each worker without a usable connection has been so: the process's, kept across reloads.
        self.outages = outages if outages is not None else WorkerOutages()
        # Kubeconfigs refused for leading to another cluster: (current, refused fingerprint, recorded identity) and why
        self.refused: dict[str, tuple[tuple[str, str, str | None], tuple[str, str]]] = {}
        dispatcher = config.dispatcher
        self.renewer = TokenRenewer(dispatcher.token_renewal, manager.api, secrets, dispatcher.namespace,
                                    dispatcher.controller_name)  # fmt: skip

    def clusters_using_secret(self, secret_name: str) -> list[str]:
        return [c["metadata"]["name"] for c in self.clusters.items() if kubeconfig_secret_name(c) == secret_name]

    def clusters_using_profile(self, profile: str | None = None) -> list[str]:
        """The MultiKueueClusters naming ``profile`` (any ClusterProfile when None)."""
        return [
            c["metadata"]["name"]
            for c in self.clusters.items()
            if (named := profile_name(c)) is not None and profile in (None, named)
        ]

    def watches(self) -> list[Watch[str]]:
        found = [
            Watch("MultiKueueClusters", self.clusters, lambda c: [c.obj["metadata"]["name"]]),
            Watch("kubeconfig Secrets (dispatcher.namespace)", self.secrets,
                  lambda c: self.clusters_using_secret(c.obj["metadata"]["name"])),
            Watch("its worker connection's attempts", self.signals.attempted, lambda name: [name]),
        ]  # fmt: skip
        if self.profiles is not None:  # watched only with access providers configured
            found += [
                Watch("ClusterProfiles (dispatcher.namespace)", self.profiles,
                      lambda c: self.clusters_using_profile(c.obj["metadata"]["name"])),
                Watch("ClusterProfiles listed at last (their CRD installed)", self.profiles.connectivity,
                      lambda _: self.clusters_using_profile()),
            ]  # fmt: skip
        return found

    def _connection_changed(self, name: str) -> None:
        """An attempt made (the condition's attempt count), and, when the worker's state changed, ``changed``:
        the runs that wait on a worker, or on a kind on it, are looked at again."""
        self.signals.attempted.emit(name)
        connection = self.connections.get(name)
        state = (connection.connected if connection else False, frozenset(connection.resources if connection else ()),
                 self.settled(name))  # fmt: skip
        if state[0]:
            self.outages.connected(name)
        if self._was.get(name) != state:
            self._was[name] = state
            self.signals.changed.emit(name)

    def lost_since(self, name: str) -> float | None:
        """Monotonic time since which the worker has not been connected (``None`` while it is): its connection's
        outage, else since its connection was dropped, else since this process started (a worker whose kubeconfig
        never worked here, or a MultiKueueCluster that does not exist)."""
        connection = self.connections.get(name)
        if connection is not None and connection.connected:
            return None
        since = [t for t in (self.outages.since(name), connection.disconnected_since if connection else None) if t]
        return min(since, default=self.outages.started_at)

    def settled(self, name: str) -> bool:
        """Whether the cluster's state is known: it was tried (connected or not), or there is no such cluster. A
        replica that just took over must not read "not connected yet" as "holds nothing"."""
        if not self.clusters.synced.is_set():
            return False
        return name in self.tried or self.clusters.get(ObjectKey("", name)) is None

    async def reconcile(self, name: str) -> Result:
        listing = False
        try:
            return await self._reconcile(name)
        except ProfilesListing:
            listing = True  # not tried yet: a worker reached through a profile is not "unreachable" at start
            return Result(requeue_after=PROFILES_LISTING_RETRY)
        finally:
            if name not in self.tried and not listing:
                self.tried.add(name)
                # Its first attempt has ended, connected or not: the runs that waited to know whether it holds them
                # (a replica that took over) are looked at again.
                self._connection_changed(name)

    async def _reconcile(self, name: str) -> Result:
        cluster = self.clusters.get(ObjectKey("", name))
        if cluster is None or cluster["metadata"].get("deletionTimestamp"):
            await self.drop(name)
            return Result()
        try:
            kubeconfig = self._load_kubeconfig(cluster)
        except KubeconfigRejected as e:
            await self.drop(name)
            await self._set_active(cluster, False, e.reason, f"load client config failed: {e}")
            return Result()  # the Secret's watch triggers the next attempt

        connection = self.connections.get(name)
        if (connection is not None and connection.fingerprint != fingerprint(kubeconfig)
                and not await connection.renew_credentials(kubeconfig)):  # fmt: skip
            refused = await self._rotate(name, cluster, connection, kubeconfig)
            if refused is not None:
                await self._set_active(cluster, False, *refused)
                current = self.connections[name]
                if not current.started:  # the new kubeconfig's first attempt failed: retried on Kueue's schedule
                    return Result(requeue_after=retry_after(current.attempts))
                return Result()  # the next change of the Secret or the MultiKueueCluster looks again
            connection = self.connections.get(name)
            cluster = self.clusters.get(ObjectKey("", name)) or cluster
        if connection is None:
            connection = self._new_connection(name, kubeconfig)
            self.connections[name] = connection
        if not connection.started:
            started = await self._start(name, cluster, connection)
            if isinstance(started, Result):
                return started
            cluster = started

        if not connection.connected:
            await self._set_active(cluster, False, "ClientConnectionFailed", connection.failure_message())
            # The informers retry by themselves and report back when connected; the token must not lapse meanwhile.
            renewal = await self.renewer.check(cluster, connection, kubeconfig_secret_name(cluster))
            return Result(requeue_after=renewal.next_check)
        # On every pass until written: a first write that failed (a conflict, RBAC) is retried with the pass.
        cluster = await self._record_identity(cluster, connection)
        cluster = await self._record_expiry(cluster, connection)
        renewal = await self.renewer.check(cluster, connection, kubeconfig_secret_name(cluster))
        if connection.kinds_in_doubt():
            before = set(connection.resources)
            await connection.refresh_kinds()
            if set(connection.resources) != before:
                self._connection_changed(name)  # a kind came or went: the runs waiting on it are looked at again
        await self._set_active(cluster, True, "Active", _connected_message(connection, renewal.problem))
        retries = [
            t for t in (KIND_RETRY_SECONDS if connection.kind_errors else None, renewal.next_check) if t is not None
        ]
        return Result(requeue_after=min(retries, default=None))

    async def _start(self, name: str, cluster: Object, connection: WorkerConnection) -> Object | Result:
        """Connect (on Kueue's retry schedule) and check the worker's identity; the MultiKueueCluster as it now is,
        or the ``Result`` to return when the connection cannot be used yet."""
        if connection.next_attempt_at is not None and time.monotonic() < connection.next_attempt_at:
            return Result(requeue_after=connection.next_attempt_at - time.monotonic())
        try:
            await connection.connect(self.task_group)
        except ConnectionFailed:
            await self._set_active(cluster, False, "ClientConnectionFailed", connection.failure_message())
            return Result(requeue_after=retry_after(connection.attempts))
        refused = self._identity_problem(name, cluster, connection)
        if refused is not None:
            await connection.close()
            await self._set_active(cluster, False, *refused)
            return Result(requeue_after=retry_after(7))  # looked at again if the cause goes away
        connection.vetted = True
        self._connection_changed(name)
        return cluster

    def _new_connection(self, name: str, kubeconfig: Object) -> WorkerConnection:
        worker_client = self.config.dispatcher.worker_client
        gvks = self.config.multi_kueue.gvks
        on_request, on_error = self.metrics.requests_to(name) if self.metrics is not None else (None, None)
        return WorkerConnection(
            name,
            kubeconfig,
            origin=self.config.multi_kueue.origin,
            gvks=gvks,
            timeout=worker_client.timeout,
            probe_interval=worker_client.probe_interval,
            qps=worker_client.qps,
            burst=worker_client.burst,
            max_connections=worker_client.max_connections,
            on_state_change=lambda: self._connection_changed(name),
            on_worker_event=lambda worker, key: self.signals.workload.emit((worker, key)),
            on_worker_object=lambda worker, gvk, key: self.signals.object.emit((worker, gvk, key)),
            on_api_request=on_request,
            on_api_error=on_error,
            temp_dir=self.temp_dir,
            watch_warnings=any(self.config.adapter(g).worker_events for g in gvks),
            spec_synced=frozenset(g for g in gvks if self.config.adapter(g).spec_sync),
        )

    async def _rotate(
        self, name: str, cluster: Object, current: WorkerConnection, kubeconfig: Object
    ) -> tuple[str, str] | None:
        """A changed kubeconfig: followed only if it leads to the same cluster. One that leads elsewhere (a rotation
        mistake) is refused, and the connection made with the previous one kept, so runs there stay reachable;
        (reason, message) for the ``Active`` condition then."""
        recorded = (cluster["metadata"].get("annotations") or {}).get(WORKER_IDENTITY_ANNOTATION)
        seen = self.refused.get(name)
        if seen is not None and seen[0] == (current.fingerprint, fingerprint(kubeconfig), recorded):
            return seen[1]  # refused already; nothing changed since
        log.info("kubeconfig changed, reconnecting", cluster=name)
        candidate = self._new_connection(name, kubeconfig)
        try:
            await candidate.connect(self.task_group)
        except ConnectionFailed:
            await self.drop(name)  # the new kubeconfig is the configured one: its failure is what is reported
            self.connections[name] = candidate
            return "ClientConnectionFailed", candidate.failure_message()
        refused = self._identity_problem(name, cluster, candidate, kept=True)
        if refused is not None:
            self.refused[name] = ((current.fingerprint, candidate.fingerprint, recorded), refused)
            await candidate.close()
            log.warning("kubeconfig refused", cluster=name, reason=refused[0], message=refused[1])
            return refused
        candidate.vetted = True
        await self.drop(name)
        self.connections[name] = candidate
        await self._record_identity(cluster, candidate)  # the next pass reads the MultiKueueCluster afresh
        self._connection_changed(name)
        return None

    def _identity_problem(
        self, name: str, cluster: Object, connection: WorkerConnection, *, kept: bool = False
    ) -> tuple[str, str] | None:
        """Why a connection must not be used: it leads to another cluster than the one this MultiKueueCluster was
        connected to, or to the same cluster as another MultiKueueCluster (runs would be dispatched to one cluster
        under two names)."""
        identity = connection.identity
        recorded = (cluster["metadata"].get("annotations") or {}).get(WORKER_IDENTITY_ANNOTATION)
        source = access_source(cluster)
        if recorded and identity != recorded:
            still = "the connection made with the previous kubeconfig is kept" if kept else "nothing is sent there"
            return "ClusterIdentityChanged", (
                f"the kubeconfig in {source} leads to another cluster (kube-system namespace UID {identity}, "
                f"not {recorded}): refused, and {still}. If the worker was replaced on purpose, remove the annotation "
                f"{WORKER_IDENTITY_ANNOTATION} from this MultiKueueCluster"
            )
        for other, connected in self.connections.items():
            if other != name and connected.started and connected.identity == identity:
                return "DuplicateCluster", (
                    f'the kubeconfig in {source} leads to the cluster MultiKueueCluster "{other}" already '
                    f"connects to (kube-system namespace UID {identity}): refused, so no run goes to one cluster "
                    "under two names"
                )
        return None

    async def _record_identity(self, cluster: Object, connection: WorkerConnection) -> Object:
        """Write the worker's identity on its MultiKueueCluster the first time (it outlives this process); the
        MultiKueueCluster as it now is."""
        meta = cluster["metadata"]
        if connection.identity is None or (meta.get("annotations") or {}).get(WORKER_IDENTITY_ANNOTATION):
            return cluster
        patch = {"metadata": {"annotations": {WORKER_IDENTITY_ANNOTATION: connection.identity},
                              "resourceVersion": meta["resourceVersion"]}}  # fmt: skip
        result = await self.manager.patch(meta["name"], patch)
        self.clusters.remember(result)
        return result

    async def _record_expiry(self, cluster: Object, connection: WorkerConnection) -> Object:
        """When the worker's credential stops working, where an operator looks: the MultiKueueCluster's annotation
        (written when it changes) and the metric; the MultiKueueCluster as it now is."""
        if connection.api is None:
            return cluster
        credentials, meta = connection.api.credentials, cluster["metadata"]
        expires = credentials.expiry()
        if self.metrics is not None:
            self._forget_expiry(meta["name"])
            if expires is not None:
                renewable = credentials.renewable or self.renewer.renews(cluster, credentials.access.token)
                self.metrics.credentials_expiry.labels(meta["name"], str(renewable).lower()).set(expires)
        text = (
            None
            if expires is None
            else datetime.datetime.fromtimestamp(expires, datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        )
        if (meta.get("annotations") or {}).get(CREDENTIALS_EXPIRY_ANNOTATION) == text:
            return cluster
        patch = {"metadata": {"annotations": {CREDENTIALS_EXPIRY_ANNOTATION: text},
                              "resourceVersion": meta["resourceVersion"]}}  # fmt: skip
        result = await self.manager.patch(meta["name"], patch)
        self.clusters.remember(result)
        return result

    def _forget_expiry(self, name: str) -> None:
        assert self.metrics is not None
        for renewable in ("true", "false"):
            with contextlib.suppress(KeyError):
                self.metrics.credentials_expiry.remove(name, renewable)

    async def drop(self, name: str) -> None:
        if self.metrics is not None:
            with contextlib.suppress(KeyError):
                self.metrics.worker_connected.remove(name)
            self._forget_expiry(name)
        self.renewer.forget(name)
        connection = self.connections.pop(name, None)
        if connection is not None:
            # The outage of the runs recorded there starts now (or earlier, if it was already down).
            self.outages.dropped(name, connection.disconnected_since if not connection.connected else None)
            await connection.close()
            self._connection_changed(name)

    async def close(self) -> None:
        # Every outage recorded first: closing one connection may hang past the generation's close timeout.
        for name, connection in self.connections.items():
            self.outages.dropped(name, connection.disconnected_since if not connection.connected else None)
        for name in list(self.connections):
            await self.drop(name)

    # ------------------------------------------------------------------------------------- internals

    def _load_kubeconfig(self, cluster: Object) -> Object:
        source = (cluster.get("spec") or {}).get("clusterSource") or {}
        if source.get("clusterProfileRef"):
            return self._load_profile(profile_name(cluster) or "")
        ref = source.get("kubeConfig") or {}
        if ref.get("locationType", "Secret") != "Secret":
            raise KubeconfigRejected(
                BAD_KUBECONFIG,
                f"locationType {ref.get('locationType')!r} is not supported by this controller, use Secret",
            )
        secret_name = ref.get("location", "")
        namespace = self.config.dispatcher.namespace
        secret = self.secrets.get(ObjectKey(namespace, secret_name))
        if secret is None:
            raise KubeconfigRejected(BAD_KUBECONFIG, f'Secret "{secret_name}" not found')
        data = (secret.get("data") or {}).get(SECRET_KEY)
        if not data:
            raise KubeconfigRejected(BAD_KUBECONFIG, f'key "{SECRET_KEY}" not found in secret "{secret_name}"')
        try:
            raw = base64.b64decode(data)
        except ValueError as e:
            raise KubeconfigRejected(BAD_KUBECONFIG, f'key "{SECRET_KEY}" in secret "{secret_name}": {e}') from None
        return validate_kubeconfig(raw)

    def _load_profile(self, name: str) -> Object:
        """The kubeconfig a ClusterProfile and the configured access providers make (``KubeconfigRejected`` with
        Kueue's reasons when they cannot)."""
        cluster_profile = self.config.multi_kueue.cluster_profile
        providers = cluster_profile.providers if cluster_profile is not None else ()
        if self.profiles is None or not providers:
            return kubeconfig_from_profile({"metadata": {"name": name}}, providers)  # says none is configured
        if not self.profiles.synced.is_set():
            error = self.profiles.last_error
            if isinstance(error, NotFound):
                raise KubeconfigRejected(
                    BAD_CLUSTER_PROFILE,
                    f"the ClusterProfile API ({CLUSTER_PROFILES}) is not served by the manager cluster: install the "
                    "CRD from sigs.k8s.io/cluster-inventory-api",
                )
            if error is None:
                raise ProfilesListing  # the first list is under way: looked at again shortly, nothing said
            raise KubeconfigRejected(BAD_CLUSTER_PROFILE, f"ClusterProfiles cannot be read: {describe(error)}")
        profile = self.profiles.get(ObjectKey(self.config.dispatcher.namespace, name))
        if profile is None:
            kind = f"{CLUSTER_PROFILES.plural}.{CLUSTER_PROFILES.group}"  # the API's own NotFound wording
            raise KubeconfigRejected(BAD_CLUSTER_PROFILE, f'{kind} "{name}" not found')
        return kubeconfig_from_profile(profile, providers)

    async def _set_active(self, cluster: Object, active: bool, reason: str, message: str) -> None:
        if self.metrics is not None:
            self.metrics.worker_connected.labels(cluster["metadata"]["name"]).set(1 if active else 0)
        new = {
            "type": ACTIVE,
            "status": "True" if active else "False",
            "reason": reason,
            "message": message,
            "observedGeneration": cluster["metadata"].get("generation"),
        }
        current = (cluster.get("status") or {}).get("conditions") or []
        if conditions.same_state(conditions.find(current, ACTIVE), new):
            return
        updated = conditions.set_condition(current, new)
        patch = {
            "metadata": {"resourceVersion": cluster["metadata"]["resourceVersion"]},
            "status": {"conditions": updated},
        }
        result = await self.manager.patch_status(cluster["metadata"]["name"], patch)
        self.clusters.remember(result)  # read-your-writes for the next pass, never older than the watch's
        log.info(
            "cluster condition", cluster=cluster["metadata"]["name"], active=active, reason=reason, message=message
        )
