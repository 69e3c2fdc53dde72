"""What the dispatch code may know and do about one worker (``Worker``), and what it writes through (``LiveObjects``).

Both are Protocols. The dispatcher's worker is ``clusters.connections.ConnectedWorker``, a view over its
``WorkerConnection``: reads come from the connection's caches (which hold only this manager's objects: they are
label-selected by its origin), writes go through ``kube.resources.Objects`` bound to the worker's client and rate
limit. The component tests' is an in-memory one (tests/component/memory_worker.py), for the branch matrix only.
This module imports neither, so ``connections`` and ``worker`` no longer import each other.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from multikueue.kube.addresses import GroupVersionKind
from multikueue.runtime.informer import ObjectKey

Object = dict[str, Any]


class KindNotServed(LookupError):
    """The worker does not serve the kind (or it is not discovered there yet): nothing of it can be written."""


class LiveObjects(Protocol):
    """One resource of one cluster, read and written live (``kube.resources.Objects`` is one): what the dispatch
    code calls on it. ``get`` and ``delete`` treat a 404 as an answer; every failure is a ``kube.errors.KubeError``."""

    async def get(self, name: str, namespace: str | None = None) -> Object | None: ...

    async def items(self, namespace: str | None = None) -> list[Object]: ...

    async def create(self, body: Object, namespace: str | None = None) -> Object: ...

    async def patch(self, name: str, patch: Object, namespace: str | None = None) -> Object:
        """A JSON merge patch (RFC 7386); a ``metadata.resourceVersion`` in it is a precondition (409 if stale)."""
        ...

    async def patch_status(self, name: str, patch: Object, namespace: str | None = None) -> Object:
        """A JSON merge patch of the status (on ``/status`` where the kind has that subresource)."""
        ...

    async def delete(self, name: str, namespace: str | None = None, *, uid: str | None = None) -> bool:
        """Whether there was one to delete; ``uid``: only the object of that UID (another one of that name: 409)."""
        ...


class Worker(Protocol):
    """One worker as the dispatch code sees it. Nothing here is state of the dispatch code's own: what is read is
    the worker's (cached) state, right across reconnects and kubeconfig rotations."""

    @property
    def name(self) -> str: ...

    @property
    def connected(self) -> bool:
        """Connected, its caches listed and its kinds discovered: what is read from it is current."""
        ...

    @property
    def lost_since(self) -> float | None:
        """Monotonic time the current outage began; ``None`` while connected."""
        ...

    def serves(self, gvk: GroupVersionKind) -> bool | None:
        """Whether it serves the kind; ``None`` while unknown (never to be read as "absent")."""
        ...

    # ------------------------------------------------------------------------------------- cached reads

    def workload(self, key: ObjectKey) -> Object | None:
        """This manager's Workload copy ``key`` on the worker, as cached."""
        ...

    def workloads(self) -> list[Object]: ...

    def copy(self, gvk: GroupVersionKind, key: ObjectKey) -> Object | None:
        """This manager's copy of an object of the kind, as cached."""
        ...

    def listed(self, gvk: GroupVersionKind) -> bool | None:
        """Whether the cache of the kind has listed (what it lacks is then absent); ``None`` while it has not, ``False``
        when the kind has no cache there (not discovered: no copy is known there)."""
        ...

    def holds(
        self, gvk: GroupVersionKind, key: ObjectKey, run: Callable[[Object], bool] = lambda _: True
    ) -> bool | None:
        """Whether this manager's copy of the object, made for ``run`` (a same-named copy of an earlier run is not
        it), is there; ``None`` while its cache of the kind has not listed yet (a moment after connecting). A kind not
        discovered there has no cache: no copy is known there. (Shared by the implementations that subclass this.)"""
        listed = self.listed(gvk)
        if not listed:
            return listed
        found = self.copy(gvk, key)
        return found is not None and run(found)

    def copies(self, gvk: GroupVersionKind) -> list[Object]: ...

    def kinds(self) -> list[GroupVersionKind]:
        """The kinds whose copies are cached (the configured kinds it serves)."""
        ...

    def warnings_about(self, workload: ObjectKey) -> tuple[tuple[str, str], ...]:
        """The worker's recent Warning Events (reason, message) about a Workload's copy or its object. Read, not
        taken: a pass that fails after reading them finds them again on its retry."""
        ...

    def forget(self, workload: ObjectKey) -> None:
        """The Workload is gone: drop what was kept about it."""
        ...

    def last_change(self, kind: str, key: ObjectKey) -> float | None:
        """Monotonic time its copy's latest change was seen (for the status-sync lag)."""
        ...

    def remember_copy(self, gvk: GroupVersionKind, obj: Object) -> bool:
        """A copy read live, kept in the cache when newer than what it holds; whether it was."""
        ...

    def remember_created(self, gvk: GroupVersionKind | None, obj: Object) -> None:
        """A copy (``gvk`` ``None``: a Workload copy) this process just created: read as cached until its watch
        event comes, so the next pass does not create it again."""
        ...

    # ----------------------------------------------------------------------------------------- writers

    def objects(self, gvk: GroupVersionKind) -> LiveObjects:
        """Writes to the kind on the worker; ``KindNotServed`` (with the reason) when it cannot take them."""
        ...

    def cluster_queues(self) -> LiveObjects:
        """The worker Kueue's ClusterQueues (read for the fleet metrics); ``KindNotServed`` when not connected."""
        ...

    def workload_objects(self) -> LiveObjects:
        """Writes to Workloads on the worker; ``KindNotServed`` when not connected."""
        ...
