"""What the dispatch code may know and do about one worker: a narrow view of its ``WorkerConnection``.

Reads come from the connection's caches (which hold only this manager's objects: they are label-selected by its
origin); writes go through ``Objects`` bound to the worker's client and rate limit. Nothing here keeps state of its
own: the view reads through to the connection, so it stays right across reconnects and kubeconfig rotations.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from multikueue.kube.addresses import CLUSTER_QUEUES, WORKLOADS, GroupVersionKind
from multikueue.kube.resources import Objects
from multikueue.runtime.informer import ObjectKey

if TYPE_CHECKING:
    from multikueue.clusters.connections import WorkerConnection

Object = dict[str, Any]


class KindNotServed(LookupError):
    """The worker does not serve the kind (or it is not discovered there yet): nothing of it can be written."""


class Worker:
    def __init__(self, connection: WorkerConnection) -> None:
        self._connection = connection

    @property
    def name(self) -> str:
        return self._connection.name

    @property
    def connected(self) -> bool:
        """Connected, its caches listed and its kinds discovered: what is read from it is current."""
        return self._connection.connected and self._connection.api is not None

    def serves(self, gvk: GroupVersionKind) -> bool | None:
        """Whether it serves the kind; ``None`` while unknown (never to be read as "absent")."""
        return self._connection.serves(gvk)

    @property
    def lost_since(self) -> float | None:
        """Monotonic time the current outage began; ``None`` while connected."""
        return self._connection.disconnected_since

    # ------------------------------------------------------------------------------------- cached reads

    def workload(self, key: ObjectKey) -> Object | None:
        """This manager's Workload copy ``key`` on the worker, as cached."""
        workloads = self._connection.workloads
        return workloads.get(key) if workloads is not None else None

    def workloads(self) -> list[Object]:
        workloads = self._connection.workloads
        return workloads.items() if workloads is not None else []

    def copy(self, gvk: GroupVersionKind, key: ObjectKey) -> Object | None:
        """This manager's copy of an object of the kind, as cached."""
        informer = self._connection.objects.get(gvk)
        return informer.get(key) if informer is not None else None

    def holds(
        self, gvk: GroupVersionKind, key: ObjectKey, run: Callable[[Object], bool] = lambda _: True
    ) -> bool | None:
        """Whether this manager's copy of the object, made for ``run`` (a same-named copy of an earlier run is not
        it), is there; ``None`` while its cache of the kind has not listed yet (a moment after connecting). A kind not
        discovered there has no cache: no copy is known there."""
        listed = self.listed(gvk)
        if not listed:
            return listed
        found = self.copy(gvk, key)
        return found is not None and run(found)

    def listed(self, gvk: GroupVersionKind) -> bool | None:
        """Whether the cache of the kind has listed (what it lacks is then absent); ``None`` while it has not, ``False``
        when the kind has no cache there (not discovered: no copy is known there)."""
        informer = self._connection.objects.get(gvk)
        if informer is None:
            return False
        return True if informer.synced.is_set() else None

    def copies(self, gvk: GroupVersionKind) -> list[Object]:
        informer = self._connection.objects.get(gvk)
        return informer.items() if informer is not None else []

    def kinds(self) -> list[GroupVersionKind]:
        """The kinds whose copies are cached (the configured kinds it serves)."""
        return list(self._connection.objects)

    def warnings_about(self, workload: ObjectKey) -> tuple[tuple[str, str], ...]:
        """The worker's recent Warning Events (reason, message) about a Workload's copy or its object. Read, not
        taken: a pass that fails after reading them finds them again on its retry."""
        return tuple(self._connection.warnings.get(workload, ()))

    def forget(self, workload: ObjectKey) -> None:
        """The Workload is gone: drop what was kept about it."""
        self._connection.warnings.pop(workload, None)

    def last_change(self, kind: str, key: ObjectKey) -> float | None:
        """Monotonic time its copy's latest change was seen (for the status-sync lag)."""
        return self._connection.observed.get((kind, key.namespace, key.name))

    def remember_copy(self, gvk: GroupVersionKind, obj: Object) -> bool:
        """A copy read live, kept in the cache when newer than what it holds; whether it was."""
        informer = self._connection.objects.get(gvk)
        if informer is None:
            return False
        key = ObjectKey.of(obj)
        before = informer.get(key)
        informer.remember(obj)
        return informer.get(key) is not before

    def remember_created(self, gvk: GroupVersionKind | None, obj: Object) -> None:
        """A copy (``gvk`` ``None``: a Workload copy) this process just created: read as cached until its watch
        event comes, so the next pass does not create it again."""
        informer = self._connection.workloads if gvk is None else self._connection.objects.get(gvk)
        if informer is not None:
            informer.remember_created(obj)

    # ----------------------------------------------------------------------------------------- writers

    def objects(self, gvk: GroupVersionKind) -> Objects:
        """Writes to the kind on the worker; ``KindNotServed`` (with the reason) when it cannot take them."""
        connection = self._connection
        resource = connection.resources.get(gvk)
        if resource is None or connection.api is None:
            reason = connection.kind_errors.get(gvk, "not discovered yet" if connection.api else "not connected")
            raise KindNotServed(f"{gvk.kind} is unavailable on worker {self.name}: {reason}")
        return Objects(connection.api, resource)

    def cluster_queues(self) -> Objects:
        """The worker Kueue's ClusterQueues (read for the fleet metrics)."""
        if self._connection.api is None:
            raise KindNotServed(f"ClusterQueue is unavailable on worker {self.name}: not connected")
        return Objects(self._connection.api, CLUSTER_QUEUES)

    def workload_objects(self) -> Objects:
        """Writes to Workloads on the worker."""
        if self._connection.api is None:
            raise KindNotServed(f"Workload is unavailable on worker {self.name}: not connected")
        return Objects(self._connection.api, WORKLOADS)
