"""An in-memory ``Worker`` and ``LiveObjects`` (multikueue/clusters/worker.py) for table tests of the dispatch code.

For the branch matrix only: every behaviour keeps its test against real API servers (tests/integration/), which
stays the proof. What is kept here is what the dispatch code can tell of an API server and of its own caches.

``MemoryObjects``, one resource of one cluster (a worker's kind, its Workloads, or the manager's kind): a uid and a
new resourceVersion (one counter per cluster, as etcd's revision) on every change and none on a patch that changes
nothing; 409 on a create of an existing name, on a stale ``metadata.resourceVersion`` in a patch and on a delete
whose UID precondition names another object; finalizers holding a deleted object (``deletionTimestamp`` set) until
they are lifted; JSON merge patches (RFC 7386, ``mergepatch.apply_merge_patch``), the status subresource taking only
the status and the object's endpoint all but it; fields a schema prunes (``prunes``). Failures are injected per
verb (``fail``): a refusal (the ``ApiError`` its code means), no answer (``Unreachable``, nothing done), a lost answer
(done, then ``Unreachable``). Every call is recorded (``requests``).

``MemoryWorker`` adds the caches the dispatcher reads, as ``ConnectedWorker``'s informers hold them: label-selected
by the origin (a foreign object is never in them), per kind listed or not yet, following each change at once (a
watch) or, with ``watching`` off, lagging behind the store until ``deliver``; remembering what the dispatcher
created or read live. Kinds are served, not served (``unserved``, a reason) or not discovered yet (``undiscovered``).
"""

from __future__ import annotations

import copy
import datetime
import json
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import anyio.lowlevel

from multikueue.clusters.worker import KindNotServed, LiveObjects, Worker
from multikueue.kube.addresses import CLUSTER_QUEUES, WORKLOADS, GroupVersionKind, Resource
from multikueue.kube.errors import ApiError, Unreachable, refused
from multikueue.labels import ORIGIN_LABEL
from multikueue.mergepatch import apply_merge_patch, without_paths
from multikueue.runtime.informer import ObjectKey

Object = dict[str, Any]
Verb = Literal["get", "items", "create", "patch", "patch_status", "delete"]
T = TypeVar("T")

_REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 409: "Conflict", 422: "Invalid",
            500: "InternalError"}  # fmt: skip
# What the API server keeps whatever a patch says (deletionTimestamp: only a delete sets it).
_IDENTITY = ("name", "namespace", "uid", "resourceVersion", "generation", "creationTimestamp", "deletionTimestamp")


@dataclass(frozen=True)
class Refuse:
    """The server answers ``code`` and does nothing: the ``ApiError`` the code means (``kube.errors.refused``: a
    ``Refused`` for 400, 403, 404 and 422, a ``Conflict`` for 409), with a Status body carrying ``message``."""

    code: int
    message: str = "refused by the test"


@dataclass(frozen=True)
class NoAnswer:
    """No answer, and nothing done (the request timed out before the server took it)."""


@dataclass(frozen=True)
class LostAnswer:
    """Done by the server, its answer lost on the way back: ``Unreachable`` all the same."""


Failure = Refuse | NoAnswer | LostAnswer


@dataclass(frozen=True)
class Request:
    """One call that reached ``MemoryObjects`` (failed or not): the verb, the object, and a delete's UID
    precondition."""

    verb: Verb
    key: ObjectKey
    uid: str | None = None


def api_error(code: int, message: str, reason: str = "") -> ApiError:
    """An error answer as kube/'s client raises it: the type the code means, with a Status body."""
    reason = reason or _REASONS.get(code, "")
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": reason, "message": message,
            "code": code}  # fmt: skip
    return refused(code, reason, json.dumps(body))


def resource_of(gvk: GroupVersionKind, *, status_subresource: bool = True) -> Resource:
    return Resource(gvk.group, gvk.version, f"{gvk.kind.lower()}s", gvk.kind, status_subresource=status_subresource)


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


class Cluster:
    """One cluster's counters: its revision (each write's resourceVersion, as etcd's) and the uids it gave."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.revision = 0
        self.made = 0

    def next_version(self) -> str:
        self.revision += 1
        return str(self.revision)

    def new_uid(self) -> str:
        self.made += 1
        return str(uuid.uuid5(uuid.NAMESPACE_URL, f"{self.name}/{self.made}"))


Watcher = Callable[[ObjectKey, Object | None], None]  # (key, the object now or None once deleted)


class MemoryObjects(LiveObjects):
    def __init__(
        self, resource: Resource, cluster: Cluster | None = None, *, prunes: frozenset[str] = frozenset()
    ) -> None:
        self.resource = resource
        self.cluster = cluster or Cluster(resource.plural)
        self.prunes = prunes  # paths (as ``mergepatch.pruned_paths`` names them) the schema drops on every write
        self.objects: dict[ObjectKey, Object] = {}
        self.requests: list[Request] = []
        self.watchers: list[Watcher] = []
        self._failures: dict[Verb, deque[Failure]] = {}

    # ----------------------------------------------------------------------------------- the test's side

    def fail(self, verb: Verb, *failures: Failure) -> None:
        """The next calls of ``verb`` fail so, one failure each, in order."""
        self._failures.setdefault(verb, deque()).extend(failures)

    def put(self, obj: Object) -> Object:
        """Store ``obj`` as another client made it (its status, uid and deletionTimestamp kept as given; a new
        resourceVersion); neither recorded nor failed."""
        stored = copy.deepcopy(obj)
        meta = stored["metadata"]
        meta.setdefault("uid", self.cluster.new_uid())
        meta.setdefault("creationTimestamp", now())
        meta["resourceVersion"] = self.cluster.next_version()
        return self._commit(self._key(meta["name"], meta.get("namespace")), stored)

    def edit(self, name: str, patch: Object, namespace: str | None = None, *, status: bool = False) -> Object | None:
        """Another client's merge patch, on ``/status`` with ``status`` (a controller lifting its finalizer, or
        writing the run's status); neither recorded nor failed."""
        return self._patch(self._key(name, namespace), patch, status=status and self.resource.status_subresource)

    def peek(self, name: str, namespace: str | None = None) -> Object | None:
        """The stored object (a copy), read outside the recorded calls."""
        found = self.objects.get(self._key(name, namespace))
        return copy.deepcopy(found) if found is not None else None

    def sent(self, verb: Verb) -> list[Request]:
        return [r for r in self.requests if r.verb == verb]

    # --------------------------------------------------------------------------------- LiveObjects

    async def get(self, name: str, namespace: str | None = None) -> Object | None:
        key = self._key(name, namespace)
        return await self._answer("get", key, lambda: copy.deepcopy(self.objects.get(key)))

    async def items(self, namespace: str | None = None) -> list[Object]:
        def everything() -> list[Object]:
            return [copy.deepcopy(o) for k, o in self.objects.items() if not namespace or k.namespace == namespace]

        return await self._answer("items", ObjectKey(namespace or "", ""), everything)

    async def create(self, body: Object, namespace: str | None = None) -> Object:
        key = self._key(str((body.get("metadata") or {}).get("name") or ""), namespace)
        return await self._answer("create", key, lambda: self._create(key, body))

    async def patch(self, name: str, patch: Object, namespace: str | None = None) -> Object:
        key = self._key(name, namespace)
        return await self._answer("patch", key, lambda: self._found(self._patch(key, patch, status=False), key))

    async def patch_status(self, name: str, patch: Object, namespace: str | None = None) -> Object:
        key = self._key(name, namespace)
        on_status = self.resource.status_subresource  # else the object's endpoint, as ``Objects.patch_status``
        return await self._answer(
            "patch_status", key, lambda: self._found(self._patch(key, patch, status=on_status), key)
        )

    async def delete(self, name: str, namespace: str | None = None, *, uid: str | None = None) -> bool:
        key = self._key(name, namespace)
        return await self._answer("delete", key, lambda: self._delete(key, uid), uid=uid)

    # ----------------------------------------------------------------------------------- the server

    async def _answer(self, verb: Verb, key: ObjectKey, carry_out: Callable[[], T], uid: str | None = None) -> T:
        await anyio.lowlevel.checkpoint()  # a call yields, as a real one does
        self.requests.append(Request(verb, key, uid))
        queued = self._failures.get(verb)
        failure = queued.popleft() if queued else None
        if isinstance(failure, Refuse):
            raise api_error(failure.code, failure.message)
        if isinstance(failure, NoAnswer):
            raise Unreachable(f"{self.cluster.name}: {verb} {key}: no answer (injected)", maybe_done=True)
        result = carry_out()
        if isinstance(failure, LostAnswer):
            raise Unreachable(f"{self.cluster.name}: {verb} {key}: answer lost (injected)", maybe_done=True)
        return result

    def _key(self, name: str, namespace: str | None) -> ObjectKey:
        if self.resource.namespaced and not namespace:
            raise ValueError(f"{self.resource} is namespaced: a namespace is required")
        return ObjectKey((namespace or "") if self.resource.namespaced else "", name)

    def _found(self, obj: Object | None, key: ObjectKey) -> Object:
        if obj is None:
            raise api_error(404, f'{self.resource.plural} "{key.name}" not found')
        return obj

    def _create(self, key: ObjectKey, body: Object) -> Object:
        meta = body.get("metadata") or {}
        if meta.get("resourceVersion"):  # the storage layer's plain error: a 500
            raise api_error(500, "resourceVersion should not be set on objects to be created")
        if meta.get("namespace", key.namespace) != key.namespace:
            raise api_error(400, "the namespace of the provided object does not match the namespace sent on the "
                                 "request")  # fmt: skip
        if key in self.objects:
            raise api_error(409, f'{self.resource} "{key.name}" already exists', "AlreadyExists")
        obj = copy.deepcopy(body)
        if self.resource.status_subresource:
            obj.pop("status", None)  # only /status writes it
        obj["metadata"] = {**obj.get("metadata", {}), "uid": self.cluster.new_uid(), "generation": 1,
                           "resourceVersion": self.cluster.next_version(), "creationTimestamp": now()}  # fmt: skip
        if key.namespace:
            obj["metadata"]["namespace"] = key.namespace
        return self._commit(key, _omit_empty(obj))

    def _patch(self, key: ObjectKey, patch: Object, *, status: bool) -> Object | None:
        """The object after a merge patch on ``/status`` (``status``) or on the object's endpoint; ``None`` when
        there is none."""
        current = self.objects.get(key)
        if current is None:
            return None
        meta = current["metadata"]
        self._check_version(key, patch)
        updated = apply_merge_patch(current, self._part(patch, status=status))
        updated["metadata"] = {**{k: v for k, v in updated.get("metadata", {}).items() if k not in _IDENTITY},
                               **{k: meta[k] for k in _IDENTITY if k in meta}}  # fmt: skip
        added = set(updated["metadata"].get("finalizers") or ()) - set(meta.get("finalizers") or ())
        if meta.get("deletionTimestamp") and added:
            raise api_error(422, "Forbidden: no new finalizers can be added if the object is being deleted")
        updated = _omit_empty(without_paths(updated, self.prunes))
        if updated == current:
            return copy.deepcopy(current)  # nothing changed: nothing written, no new resourceVersion
        if meta.get("deletionTimestamp") and not updated["metadata"].get("finalizers"):
            return self._commit(key, updated)  # removed; the answer keeps the resourceVersion it had
        if updated.get("spec") != current.get("spec"):
            updated["metadata"]["generation"] = int(meta.get("generation") or 1) + 1
        updated["metadata"]["resourceVersion"] = self.cluster.next_version()
        return self._commit(key, updated)

    def _check_version(self, key: ObjectKey, patch: Object) -> None:
        """A ``metadata.resourceVersion`` in a patch is a precondition: 409 unless it is the object's."""
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != self.objects[key]["metadata"]["resourceVersion"]:
            raise api_error(409, f'Operation cannot be fulfilled on {self.resource} "{key.name}": the object has been '
                                 "modified; please apply your changes to the latest version and try again")  # fmt: skip

    def _part(self, patch: Object, *, status: bool) -> Object:
        """What an endpoint takes of a patch: ``/status`` the status only, the object's endpoint all but it (a kind
        without the subresource: everything, on the object's endpoint)."""
        if not self.resource.status_subresource:
            return patch
        if status:
            return {"status": patch["status"]} if "status" in patch else {}
        return {k: v for k, v in patch.items() if k != "status"}

    def _delete(self, key: ObjectKey, uid: str | None) -> bool:
        current = self.objects.get(key)
        if current is None:
            return False  # a 404: ``Objects.delete`` answers False
        meta = current["metadata"]
        if uid is not None and uid != meta["uid"]:
            raise api_error(409, f"Precondition failed: UID in precondition: {uid}, UID in object meta: {meta['uid']}")
        if not meta.get("finalizers"):
            self._store(key, None)
        elif not meta.get("deletionTimestamp"):  # held by its finalizers until they are lifted
            going = copy.deepcopy(current)
            going["metadata"].update(deletionTimestamp=now(), resourceVersion=self.cluster.next_version(),
                                     generation=int(meta.get("generation") or 1) + 1)  # fmt: skip
            self._commit(key, going)
        return True

    def _commit(self, key: ObjectKey, obj: Object) -> Object:
        """Store a new version (a deleted object whose last finalizer went is removed); what the server answers."""
        meta = obj["metadata"]
        self._store(key, None if meta.get("deletionTimestamp") and not meta.get("finalizers") else obj)
        return copy.deepcopy(obj)

    def _store(self, key: ObjectKey, obj: Object | None) -> None:
        if obj is None:
            self.objects.pop(key, None)
        else:
            self.objects[key] = obj
        for watcher in self.watchers:
            watcher(key, copy.deepcopy(obj))


def _omit_empty(obj: Object) -> Object:
    """Empty labels, annotations and finalizers are not kept (ObjectMeta's fields are ``omitempty``)."""
    meta = obj["metadata"]
    for field in ("labels", "annotations", "finalizers"):
        if field in meta and not meta[field]:
            del meta[field]
    return obj


def _newer(a: Object, b: Object) -> bool:
    """Whether ``a`` is a later version than ``b`` (resourceVersions compared as integers, as the informer does)."""
    return int(a["metadata"]["resourceVersion"]) > int(b["metadata"]["resourceVersion"])


class MemoryCache:
    """One informer's store as the dispatcher holds it: this origin's objects only, once listed."""

    def __init__(self, origin: str) -> None:
        self.origin = origin
        self.listed: bool | None = None  # None: not listed yet
        self.objects: dict[ObjectKey, Object] = {}
        self.created: dict[ObjectKey, Object] = {}  # remembered until the watch has its own word on them

    def get(self, key: ObjectKey) -> Object | None:
        found = self.objects.get(key)
        return found if found is not None else self.created.get(key)

    def seen(self, key: ObjectKey, obj: Object | None) -> None:
        """A watch event: the object now; ``None`` once it is deleted (or no longer carries the origin label)."""
        if not self.listed:
            return  # an informer watches from the end of its list
        self.created.pop(key, None)
        if obj is not None and (obj["metadata"].get("labels") or {}).get(ORIGIN_LABEL) == self.origin:
            self.objects[key] = obj
        else:
            self.objects.pop(key, None)

    def relist(self, objects: Mapping[ObjectKey, Object]) -> None:
        self.listed, self.created, self.objects = True, {}, {}
        for key, obj in objects.items():
            self.seen(key, copy.deepcopy(obj))

    def remember(self, obj: Object) -> bool:
        """``Informer.remember``: never over a newer version, never for an object the cache does not hold."""
        key = ObjectKey.of(obj)
        cached = self.objects.get(key)
        if cached is None or _newer(cached, obj):
            return False
        self.objects[key] = copy.deepcopy(obj)
        return True

    def remember_created(self, obj: Object) -> None:
        key = ObjectKey.of(obj)
        if key not in self.objects:
            self.created[key] = copy.deepcopy(obj)


class MemoryWorker(Worker):
    """A worker cluster and the dispatcher's caches of it, in memory; arranged through ``store(gvk)``,
    ``workload_store``, ``relist``/``unlist``, ``watching``/``deliver``, ``warn``, ``is_connected``,
    ``outage_began`` and ``closed``."""

    def __init__(
        self,
        name: str,
        *,
        origin: str,
        kinds: Iterable[GroupVersionKind] = (),
        unserved: Mapping[GroupVersionKind, str] | None = None,
        undiscovered: Mapping[GroupVersionKind, str] | None = None,
        status_subresource: bool = True,
        listed: bool = True,
    ) -> None:
        self._name = name
        self.origin = origin
        self.is_connected = True
        self.outage_began: float | None = None
        self.closed = False  # the connection closed: no client, nothing can be written
        self.watching = True  # False: the caches lag behind the stores until ``deliver``
        self.cluster = Cluster(name)
        self.unserved = dict(unserved or {})
        self.kind_errors = {**(undiscovered or {}), **self.unserved}
        self.stores = {g: MemoryObjects(resource_of(g, status_subresource=status_subresource), self.cluster)
                       for g in kinds}  # fmt: skip
        self.workload_store = MemoryObjects(WORKLOADS, self.cluster)
        self.queue_store = MemoryObjects(CLUSTER_QUEUES, self.cluster)
        self.caches = {gvk: MemoryCache(origin) for gvk in self.stores}
        self.workload_cache = MemoryCache(origin)
        self.warnings: dict[ObjectKey, list[tuple[str, str]]] = {}
        self.observed: dict[tuple[str, str, str], float] = {}
        for gvk, store in self.stores.items():
            store.watchers.append(self._watch(self.caches[gvk], store.resource.kind))
        self.workload_store.watchers.append(self._watch(self.workload_cache, "Workload"))
        if listed:
            self.relist()

    # ----------------------------------------------------------------------------------- the test's side

    def store(self, gvk: GroupVersionKind) -> MemoryObjects:
        return self.stores[gvk]

    def relist(self, gvk: GroupVersionKind | None = None) -> None:
        """The caches (one kind's, or all and the Workloads') list: they then hold what the stores hold."""
        for kind, cache in self.caches.items():
            if gvk is None or kind == gvk:
                cache.relist(self.stores[kind].objects)
        if gvk is None:
            self.workload_cache.relist(self.workload_store.objects)

    def unlist(self, gvk: GroupVersionKind) -> None:
        """The kind's cache starts over and has not listed yet (a moment after a reconnect, a failover, a reload)."""
        self.caches[gvk] = cache = MemoryCache(self.origin)
        self.stores[gvk].watchers[:] = [self._watch(cache, gvk.kind)]

    def deliver(self) -> None:
        """The lagging watches catch up: every listed cache holds what its store holds."""
        for gvk, cache in self.caches.items():
            if cache.listed:
                cache.relist(self.stores[gvk].objects)
        if self.workload_cache.listed:
            self.workload_cache.relist(self.workload_store.objects)

    def warn(self, workload: ObjectKey, reason: str, message: str) -> None:
        self.warnings.setdefault(workload, []).append((reason, message))

    def _watch(self, cache: MemoryCache, kind: str) -> Watcher:
        def event(key: ObjectKey, obj: Object | None) -> None:
            if not self.watching:
                return
            cache.seen(key, obj)
            seen = (kind, key.namespace, key.name)
            if obj is None:
                self.observed.pop(seen, None)
            else:
                self.observed[seen] = time.monotonic()

        return event

    # ------------------------------------------------------------------------------------- Worker

    @property
    def name(self) -> str:
        return self._name

    @property
    def connected(self) -> bool:
        return self.is_connected

    @property
    def lost_since(self) -> float | None:
        return self.outage_began

    def serves(self, gvk: GroupVersionKind) -> bool | None:
        if gvk in self.stores:
            return True
        return False if gvk in self.unserved else None

    def workload(self, key: ObjectKey) -> Object | None:
        return self.workload_cache.get(key)

    def workloads(self) -> list[Object]:
        return list(self.workload_cache.objects.values())

    def copy(self, gvk: GroupVersionKind, key: ObjectKey) -> Object | None:
        cache = self.caches.get(gvk)
        return cache.get(key) if cache is not None else None

    def listed(self, gvk: GroupVersionKind) -> bool | None:
        cache = self.caches.get(gvk)
        return False if cache is None else cache.listed

    def copies(self, gvk: GroupVersionKind) -> list[Object]:
        cache = self.caches.get(gvk)
        return list(cache.objects.values()) if cache is not None else []

    def kinds(self) -> list[GroupVersionKind]:
        return list(self.caches)

    def warnings_about(self, workload: ObjectKey) -> tuple[tuple[str, str], ...]:
        return tuple(self.warnings.get(workload, ()))

    def forget(self, workload: ObjectKey) -> None:
        self.warnings.pop(workload, None)

    def last_change(self, kind: str, key: ObjectKey) -> float | None:
        return self.observed.get((kind, key.namespace, key.name))

    def remember_copy(self, gvk: GroupVersionKind, obj: Object) -> bool:
        cache = self.caches.get(gvk)
        return cache.remember(obj) if cache is not None else False

    def remember_created(self, gvk: GroupVersionKind | None, obj: Object) -> None:
        cache = self.workload_cache if gvk is None else self.caches.get(gvk)
        if cache is not None:
            cache.remember_created(obj)

    def objects(self, gvk: GroupVersionKind) -> MemoryObjects:
        store = self.stores.get(gvk)
        if store is None or self.closed:
            reason = "not connected" if self.closed else self.kind_errors.get(gvk, "not discovered yet")
            raise KindNotServed(f"{gvk.kind} is unavailable on worker {self.name}: {reason}")
        return store

    def cluster_queues(self) -> MemoryObjects:
        if self.closed:
            raise KindNotServed(f"ClusterQueue is unavailable on worker {self.name}: not connected")
        return self.queue_store

    def workload_objects(self) -> MemoryObjects:
        if self.closed:
            raise KindNotServed(f"Workload is unavailable on worker {self.name}: not connected")
        return self.workload_store


def manager_objects(
    gvk: GroupVersionKind, *, prunes: frozenset[str] = frozenset(), status_subresource: bool = True
) -> MemoryObjects:
    """The manager's objects of the kind (``sync``'s ``manager``): a cluster of their own."""
    return MemoryObjects(resource_of(gvk, status_subresource=status_subresource), Cluster("manager"), prunes=prunes)
