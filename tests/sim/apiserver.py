"""An in-memory kube-apiserver for one cluster: what the dispatcher relies on, and no more.

For the simulation (issue #55) and nothing else: every behaviour modelled here is checked against the real
kube-apiserver by running one script on both and comparing their transcripts (tests/integration/test_sim_fidelity.py).

Kept, as the real server does it:
- identity: a UID per object (from the seeded ``random.Random`` the world hands in), one resourceVersion counter per
  cluster (etcd's revision) bumped by every change and by none on a write that changes nothing, ``generation``
  (1 at create, +1 when anything but metadata and status changes), ``creationTimestamp`` from the world's clock;
- the status subresource (a kind declared with one): a create and the object's endpoint keep the stored status, the
  ``/status`` endpoint takes the status only (metadata too is kept: the CRD status strategy);
- preconditions: a write whose ``metadata.resourceVersion`` differs from the stored one is a 409, one whose
  ``metadata.uid`` names another object (a 422 there: the UID is immutable; the status endpoint ignores a UID, as
  the real one does, so only a resourceVersion guards a status write); a delete's ``preconditions`` (uid,
  resourceVersion) are 409s; a custom resource deleted at once is answered with a ``Status``;
- finalizers: a delete of an object with finalizers sets ``deletionTimestamp`` and keeps it until the last one is
  lifted; no finalizer may be added to an object being deleted (422);
- JSON merge patches (RFC 7386), JSON patches (RFC 6902, a failed ``test`` a 422), strategic merge patches read as
  merge patches (the dispatcher sends them only for objects without lists it merges), PUT with its precondition;
- namespaces: an object in a namespace that does not exist is a 404;
- lists with their resourceVersion, label selectors (``multikueue.selectors``, apimachinery's grammar) and the
  ``metadata.name``/``metadata.namespace`` field selectors;
- watches from a resourceVersion: the events after it (ADDED, MODIFIED, DELETED; an object that starts or stops
  matching a selected watch is ADDED or DELETED, as the watch cache does), BOOKMARKs, and an ERROR event carrying
  410 Gone when the history asked for is compacted (``compact``); a watch's end (``timeoutSeconds``) is the world's to
  decide, through ``close_watches``;
- discovery (``/api/v1``, ``/apis/<group>/<version>``), ``/version`` and ``/readyz``.

Not kept: admission, validation by schema, defaulting, managedFields, pagination (``limit`` is ignored: every list is
one page, which the informer accepts), owner-reference garbage collection (the test bed has no controller-manager
either), server-side apply.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import jsonpatch

from multikueue import selectors
from multikueue.mergepatch import apply_merge_patch

Object = dict[str, Any]
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
_REASONS = {400: "BadRequest", 403: "Forbidden", 404: "NotFound", 405: "MethodNotAllowed", 409: "Conflict",
            410: "Expired", 422: "Invalid", 500: "InternalError"}  # fmt: skip


@dataclass(frozen=True)
class Kind:
    """A resource the server serves: core (``group`` empty) or a custom resource."""

    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    status_subresource: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version


NAMESPACES = Kind("", "v1", "namespaces", "Namespace", namespaced=False, status_subresource=True)
CORE = (
    NAMESPACES,
    Kind("", "v1", "configmaps", "ConfigMap", status_subresource=False),
    Kind("", "v1", "secrets", "Secret", status_subresource=False),
    Kind("", "v1", "events", "Event", status_subresource=False),
    Kind("coordination.k8s.io", "v1", "leases", "Lease", status_subresource=False),
)


class Failure(Exception):
    """An answer of ``code`` with a Status body, as the real server sends it."""

    def __init__(self, code: int, message: str, reason: str = "", details: Object | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.status: Object = {
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason or _REASONS.get(code, ""), "details": details or {}, "code": code,
        }  # fmt: skip


@dataclass
class Event:
    """One change, kept in the history watches are served from."""

    revision: int
    type: str  # ADDED, MODIFIED, DELETED
    kind: Kind
    obj: Object
    before: Object | None  # the object as it was, for a watch whose selector it stops (or starts) matching


@dataclass
class Watch:
    """One open watch: its filter, and the lines not yet read (``None`` ends it)."""

    kind: Kind
    namespace: str | None
    label_selector: selectors.Selector | None
    fields: dict[str, str]
    bookmarks: bool
    lines: list[bytes | None] = field(default_factory=list)
    wake: Callable[[], None] = lambda: None

    def matches(self, obj: Object | None) -> bool:
        if obj is None:
            return False
        meta = obj.get("metadata") or {}
        if self.namespace is not None and meta.get("namespace") != self.namespace:
            return False
        for key, value in self.fields.items():
            if str(meta.get(key.removeprefix("metadata."), "")) != value:
                return False
        return self.label_selector is None or self.label_selector.matches(meta.get("labels") or {})

    def push(self, line: bytes | None) -> None:
        self.lines.append(line)
        self.wake()


@dataclass(frozen=True)
class Route:
    """A request's path read against the served kinds."""

    kind: Kind | None  # None: discovery, /version, /readyz
    namespace: str | None
    name: str | None
    subresource: str | None
    raw: str


class SimApiServer:
    """One cluster's API server. ``handle`` answers one request as ``(code, body)``; ``watch`` opens a watch."""

    def __init__(self, name: str, rng: random.Random, clock: Callable[[], float], kinds: tuple[Kind, ...] = ()) -> None:
        self.name = name
        self._rng = rng
        self._clock = clock
        self.kinds: dict[tuple[str, str, str], Kind] = {}
        self._since: dict[Kind, int] = {}  # the revision a kind's watch cache starts at (older: 410 Gone)
        self._store: dict[tuple[str, str, str, str, str], Object] = {}  # (group, plural, namespace, name)
        self.revision = 1
        self.compacted = 0  # watches from a revision below this are answered 410 Gone
        self.history: list[Event] = []
        self.watches: list[Watch] = []
        self.on_commit: Callable[[], None] = lambda: None  # the world's invariants, after every stored change
        for kind in (*CORE, *kinds):
            self.serve(kind)
        self._put_raw(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
        self._put_raw(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-system"}})

    # -- what the world does to the server -------------------------------------------------------------------------

    def serve(self, kind: Kind) -> None:
        self.kinds[(kind.group, kind.version, kind.plural)] = kind
        self._since[kind] = self.revision

    def unserve(self, kind: Kind) -> None:
        """A CRD removed: its objects go with it (no events: the real server ends those watches)."""
        self.kinds.pop((kind.group, kind.version, kind.plural), None)
        for key in [k for k in self._store if k[:3] == (kind.group, kind.version, kind.plural)]:
            del self._store[key]
        for watch in [w for w in self.watches if w.kind == kind]:
            self.end(watch)

    def compact(self) -> None:
        """etcd's compaction: every change so far leaves the history (a watch from before it is 410 Gone)."""
        self.compacted = self.revision
        self.history.clear()

    def close_watches(self) -> None:
        for watch in list(self.watches):
            self.end(watch)

    def end(self, watch: Watch) -> None:
        if watch in self.watches:
            self.watches.remove(watch)
        watch.push(None)

    def bookmark(self) -> None:
        for watch in self.watches:
            if watch.bookmarks:
                obj = {"kind": watch.kind.kind, "apiVersion": watch.kind.api_version,
                       "metadata": {"resourceVersion": str(self.revision)}}  # fmt: skip
                watch.push(_line("BOOKMARK", obj))

    def objects(self, kind: Kind) -> list[Object]:
        prefix = (kind.group, kind.version, kind.plural)
        return [copy.deepcopy(obj) for key, obj in sorted(self._store.items()) if key[:3] == prefix]

    # -- requests --------------------------------------------------------------------------------------------------

    def handle(self, method: str, path: str, query: dict[str, str], body: Any, content_type: str) -> tuple[int, Any]:
        try:
            return self._handle(method, path, query, body, content_type)
        except Failure as e:
            return e.code, e.status

    def _handle(self, method: str, path: str, query: dict[str, str], body: Any, content_type: str) -> tuple[int, Any]:
        route = self.route(path)
        if route.kind is None:
            return self._meta(route.raw)
        kind = route.kind
        if method == "GET":
            if route.name is None:
                return 200, self._list(kind, route.namespace, query)
            return 200, copy.deepcopy(self._get(kind, route.namespace, route.name))
        if method == "POST" and route.name is None:
            return 201, self._create(kind, route.namespace, body)
        if method == "PUT" and route.name is not None:
            return 200, self._update(kind, route, lambda _: copy.deepcopy(body), put=True)
        if method == "PATCH" and route.name is not None:
            return 200, self._update(kind, route, lambda current: _patched(current, body, content_type))
        if method == "DELETE" and route.name is not None:
            return 200, self._delete(kind, route.namespace, route.name, body or {})
        raise Failure(405, f"the server does not allow this method on the requested resource ({method} {path})")

    def route(self, path: str) -> Route:
        parts = [unquote(p) for p in path.strip("/").split("/")]
        if parts[0] == "api" and len(parts) >= 2:
            group, version, rest = "", parts[1], parts[2:]
        elif parts[0] == "apis" and len(parts) >= 3:
            group, version, rest = parts[1], parts[2], parts[3:]
        else:
            return Route(None, None, None, None, path)
        if not rest:
            return Route(None, None, None, None, path)
        namespace = None
        if rest[0] == "namespaces" and len(rest) >= 3:
            namespace, rest = rest[1], rest[2:]
        kind = self.kinds.get((group, version, rest[0]))
        if kind is None:
            raise Failure(404, "the server could not find the requested resource", "NotFound")
        name = rest[1] if len(rest) > 1 else None
        subresource = rest[2] if len(rest) > 2 else None
        if subresource is not None and (subresource != "status" or not kind.status_subresource):
            raise Failure(404, "the server could not find the requested resource", "NotFound")
        if kind.namespaced and name is not None and namespace is None:
            raise Failure(404, "the server could not find the requested resource", "NotFound")
        return Route(kind, namespace, name, subresource, path)

    def _meta(self, path: str) -> tuple[int, Any]:
        parts = path.strip("/").split("/")
        if path.strip("/") == "version":
            return 200, {"major": "1", "minor": "35", "gitVersion": "v1.35.4-sim"}
        if path.strip("/") in ("readyz", "livez", "healthz"):
            return 200, "ok"
        if parts[0] == "api" and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[0] == "apis" and len(parts) == 3:
            group, version = parts[1], parts[2]
        else:
            raise Failure(404, "the server could not find the requested resource", "NotFound")
        served = [k for (g, v, _), k in sorted(self.kinds.items()) if (g, v) == (group, version)]
        if not served:
            raise Failure(404, "the server could not find the requested resource", "NotFound")
        resources: list[Object] = []
        for k in served:
            verbs = ["create", "delete", "get", "list", "patch", "update", "watch"]
            resources.append({"name": k.plural, "singularName": k.kind.lower(), "namespaced": k.namespaced,
                              "kind": k.kind, "verbs": verbs})  # fmt: skip
            if k.status_subresource:
                resources.append({"name": f"{k.plural}/status", "singularName": "", "namespaced": k.namespaced,
                                  "kind": k.kind, "verbs": ["get", "patch", "update"]})  # fmt: skip
        group_version = f"{group}/{version}" if group else version
        return 200, {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version,
                     "resources": resources}  # fmt: skip

    # -- the verbs -------------------------------------------------------------------------------------------------

    def _key(self, kind: Kind, namespace: str | None, name: str) -> tuple[str, str, str, str, str]:
        return (kind.group, kind.version, kind.plural, namespace or "", name)

    def _get(self, kind: Kind, namespace: str | None, name: str) -> Object:
        obj = self._store.get(self._key(kind, namespace, name))
        if obj is None:
            raise _not_found(kind, name)
        return obj

    def _list(self, kind: Kind, namespace: str | None, query: dict[str, str]) -> Object:
        selector = selectors.parse(query["labelSelector"]) if query.get("labelSelector") else None
        fields = _field_selector(query.get("fieldSelector", ""))
        probe = Watch(kind, namespace, selector, fields, bookmarks=False)
        items = [obj for obj in self.objects(kind) if probe.matches(obj)]
        return {"kind": f"{kind.kind}List", "apiVersion": kind.api_version,
                "metadata": {"resourceVersion": str(self.revision)}, "items": items}  # fmt: skip

    def _create(self, kind: Kind, namespace: str | None, body: Any) -> Object:
        if not isinstance(body, dict):
            raise Failure(400, "the body of the request was in an unknown format")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name") and meta.get("generateName"):
            meta["name"] = meta["generateName"] + "".join(self._rng.choice("bcdfghjklmnpqrstvwxz2456789")
                                                          for _ in range(5))  # fmt: skip
        name = meta.get("name")
        if not name:
            raise Failure(422, f"{kind.kind} \"\" is invalid: metadata.name: Required value: name or generateName "
                               "is required")  # fmt: skip
        if meta.get("resourceVersion"):
            raise Failure(500, "resourceVersion should not be set on objects to be created", "InternalError")
        if kind.namespaced:
            if namespace is None:
                raise Failure(404, "the server could not find the requested resource", "NotFound")
            self._namespace_exists(namespace)
            if meta.get("namespace") not in (None, "", namespace):
                raise Failure(400, "the namespace of the provided object does not match the namespace sent on the "
                                   "request")  # fmt: skip
            meta["namespace"] = namespace
        key = self._key(kind, namespace, name)
        if key in self._store:
            raise Failure(409, f'{_resource(kind)} "{name}" already exists', "AlreadyExists",
                          {"name": name, "group": kind.group, "kind": kind.plural})  # fmt: skip
        if kind.status_subresource and kind is not NAMESPACES:
            obj.pop("status", None)
        for dropped in ("deletionTimestamp", "deletionGracePeriodSeconds"):
            meta.pop(dropped, None)
        meta["uid"] = str(_uuid(self._rng))
        meta["generation"] = 1
        meta["creationTimestamp"] = _timestamp(self._clock())
        obj["apiVersion"], obj["kind"] = kind.api_version, kind.kind
        return copy.deepcopy(self._commit(kind, key, obj, "ADDED", None))

    def _update(self, kind: Kind, route: Route, change: Callable[[Object], Any], *, put: bool = False) -> Object:
        assert route.name is not None
        key = self._key(kind, route.namespace, route.name)
        current = self._store.get(key)
        if current is None:
            raise _not_found(kind, route.name)
        new = change(copy.deepcopy(current))
        if not isinstance(new, dict):
            raise Failure(400, "the body of the request was in an unknown format")
        meta = new.setdefault("metadata", {})
        old_meta = current["metadata"]
        if meta.get("name", route.name) != route.name:
            raise Failure(400, "the name of the object does not match the name on the URL")
        # The object's endpoint refuses another UID as a change of an immutable field; the status endpoint copies
        # the stored metadata over the write's first, so a UID there guards nothing (a resourceVersion does).
        if route.subresource is None and meta.get("uid") and meta["uid"] != old_meta["uid"]:
            raise Failure(422, f'{kind.kind} "{route.name}" is invalid: metadata.uid: Invalid value: '
                               f'"{meta["uid"]}": field is immutable', "Invalid")  # fmt: skip
        if put and kind not in CORE and not meta.get("resourceVersion"):  # custom resources: no unconditional PUT
            raise Failure(422, f'{kind.kind}.{kind.group} "{route.name}" is invalid: metadata.resourceVersion: '
                               "Invalid value: 0: must be specified for an update", "Invalid")  # fmt: skip
        if meta.get("resourceVersion") and meta["resourceVersion"] != old_meta["resourceVersion"]:
            raise Failure(409, f'Operation cannot be fulfilled on {_resource(kind)} "{route.name}": the object has '
                               "been modified; please apply your changes to the latest version and try again",
                          "Conflict", {"name": route.name, "group": kind.group, "kind": kind.plural})  # fmt: skip
        if route.subresource == "status":
            new = {**copy.deepcopy(current), "status": new["status"]} if "status" in new else _without_status(current)
        else:
            new = self._as_object_endpoint(kind, current, new)
        if old_meta.get("deletionTimestamp"):
            added = set(new["metadata"].get("finalizers") or []) - set(old_meta.get("finalizers") or [])
            if added:
                raise Failure(422, f'{kind.kind} "{route.name}" is invalid: metadata.finalizers: Forbidden: no new '
                                   "finalizers can be added if the object is being deleted", "Invalid")  # fmt: skip
        new["metadata"]["resourceVersion"] = old_meta["resourceVersion"]
        if new == current:
            return copy.deepcopy(current)
        if old_meta.get("deletionTimestamp") and not new["metadata"].get("finalizers"):
            self._remove(kind, key, new)
            return copy.deepcopy(new)  # the answer is the object as it last was, its version unchanged
        return copy.deepcopy(self._commit(kind, key, new, "MODIFIED", current))

    def _as_object_endpoint(self, kind: Kind, current: Object, new: Object) -> Object:
        """What the object's own endpoint keeps whatever the write says: identity, and the status where a
        subresource owns it; ``generation`` moves when anything but metadata and status changed."""
        meta, old_meta = new["metadata"], current["metadata"]
        for kept in ("uid", "creationTimestamp", "deletionTimestamp", "deletionGracePeriodSeconds", "generation",
                     "namespace", "name"):  # fmt: skip
            if kept in old_meta:
                meta[kept] = old_meta[kept]
            else:
                meta.pop(kept, None)
        if kind.status_subresource:
            if "status" in current:
                new["status"] = copy.deepcopy(current["status"])
            else:
                new.pop("status", None)
        new["apiVersion"], new["kind"] = kind.api_version, kind.kind
        if _spec_of(new) != _spec_of(current):
            meta["generation"] = int(old_meta.get("generation") or 1) + 1
        return new

    def _delete(self, kind: Kind, namespace: str | None, name: str, options: Object) -> Object:
        key = self._key(kind, namespace, name)
        current = self._store.get(key)
        if current is None:
            raise _not_found(kind, name)
        preconditions = options.get("preconditions") or {}
        meta = current["metadata"]
        if preconditions.get("uid") and preconditions["uid"] != meta["uid"]:
            raise Failure(409, f"Operation cannot be fulfilled on {_resource(kind)} \"{name}\": Precondition failed: "
                               f"UID in precondition: {preconditions['uid']}, UID in object meta: {meta['uid']}",
                          "Conflict")  # fmt: skip
        if preconditions.get("resourceVersion") and preconditions["resourceVersion"] != meta["resourceVersion"]:
            raise Failure(409, f"Operation cannot be fulfilled on {_resource(kind)} \"{name}\": Precondition failed: "
                               f"ResourceVersion in precondition: {preconditions['resourceVersion']}, "
                               f"ResourceVersion in object meta: {meta['resourceVersion']}", "Conflict")  # fmt: skip
        if meta.get("finalizers"):
            if meta.get("deletionTimestamp"):
                return copy.deepcopy(current)
            new = copy.deepcopy(current)
            new["metadata"]["deletionTimestamp"] = _timestamp(self._clock())
            new["metadata"]["deletionGracePeriodSeconds"] = 0
            new["metadata"]["generation"] = int(meta.get("generation") or 1) + 1  # the delete is a change of intent
            return copy.deepcopy(self._commit(kind, key, new, "MODIFIED", current))
        self._remove(kind, key, current)
        if kind in CORE:
            return copy.deepcopy(current)
        # A custom resource deleted at once is answered with a Status, not the object.
        return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                "details": {"name": name, "group": kind.group, "kind": kind.plural, "uid": meta["uid"]}}  # fmt: skip

    def _namespace_exists(self, namespace: str) -> None:
        if self._key(NAMESPACES, None, namespace) not in self._store:
            raise Failure(404, f'namespaces "{namespace}" not found', "NotFound",
                          {"name": namespace, "kind": "namespaces"})  # fmt: skip

    # -- changes and their events ----------------------------------------------------------------------------------

    def _put_raw(self, kind: Kind, obj: Object) -> None:
        meta = obj["metadata"]
        meta.update(uid=str(_uuid(self._rng)), generation=1, creationTimestamp=_timestamp(self._clock()))
        self._commit(kind, self._key(kind, meta.get("namespace"), meta["name"]), obj, "ADDED", None)

    def _commit(self, kind: Kind, key: tuple[str, str, str, str, str], obj: Object, type_: str,
                before: Object | None) -> Object:  # fmt: skip
        self.revision += 1
        meta = obj["metadata"]
        for omitted in ("labels", "annotations", "finalizers", "ownerReferences"):  # ObjectMeta's omitempty
            if omitted in meta and not meta[omitted]:
                del meta[omitted]
        meta["resourceVersion"] = str(self.revision)
        self._store[key] = obj
        self._publish(Event(self.revision, type_, kind, copy.deepcopy(obj), before))
        return obj

    def _remove(self, kind: Kind, key: tuple[str, str, str, str, str], last: Object) -> Object:
        self.revision += 1
        gone = copy.deepcopy(last)
        gone["metadata"]["resourceVersion"] = str(self.revision)
        del self._store[key]
        self._publish(Event(self.revision, "DELETED", kind, copy.deepcopy(gone), last))
        return gone

    def _publish(self, event: Event) -> None:
        self.history.append(event)
        self.on_commit()
        for watch in self.watches:
            if watch.kind == event.kind:
                line = _event_line(watch, event)
                if line is not None:
                    watch.push(line)

    def watch(self, path: str, query: dict[str, str]) -> Watch:
        """A watch from ``query['resourceVersion']``: the history after it at once, then every change; a revision
        older than the compacted history gets an ERROR event of 410 and the end of the watch."""
        route = self.route(path)
        if route.kind is None or route.name is not None:
            raise Failure(405, "watch is served on collections only")
        selector = selectors.parse(query["labelSelector"]) if query.get("labelSelector") else None
        watch = Watch(route.kind, route.namespace, selector, _field_selector(query.get("fieldSelector", "")),
                      bookmarks=query.get("allowWatchBookmarks") in ("true", "1", "True"))  # fmt: skip
        since = int(query.get("resourceVersion") or 0)
        if since == 0:  # "any": the current state as ADDED events, then changes
            for obj in self.objects(route.kind):
                if watch.matches(obj):
                    watch.push(_line("ADDED", obj))
        elif since < (oldest := max(self.compacted, self._since[route.kind])):
            watch.push(_line("ERROR", Failure(410, f"too old resource version: {since} ({oldest})",
                                              "Expired").status))  # fmt: skip
            watch.push(None)
            return watch
        else:
            for event in self.history:
                if event.revision > since and event.kind == route.kind:
                    line = _event_line(watch, event)
                    if line is not None:
                        watch.push(line)
        self.watches.append(watch)
        return watch


def _event_line(watch: Watch, event: Event) -> bytes | None:
    """The event as this watch sees it: an object that starts matching is ADDED, one that stops is DELETED."""
    now, was = watch.matches(event.obj), watch.matches(event.before)
    if event.type == "DELETED":
        return _line("DELETED", event.obj) if was else None
    if now and not was:
        return _line("ADDED", event.obj)
    if was and not now:  # the watch cache sends the object as it last matched
        assert event.before is not None
        return _line("DELETED", event.before)
    return _line(event.type, event.obj) if now else None


def _line(type_: str, obj: Object) -> bytes:
    return json.dumps({"type": type_, "object": obj}, separators=(",", ":")).encode() + b"\n"


def _patched(current: Object, body: Any, content_type: str) -> Any:
    if content_type in (MERGE_PATCH, STRATEGIC_MERGE_PATCH):
        if not isinstance(body, dict):
            raise Failure(400, "the body of the request was in an unknown format")
        return apply_merge_patch(current, body)
    if content_type == JSON_PATCH:
        try:
            return jsonpatch.apply_patch(current, body)
        except jsonpatch.JsonPatchTestFailed as e:
            raise Failure(422, f"the server rejected our request due to an error in our request: {e}") from None
        except (jsonpatch.JsonPatchException, jsonpatch.JsonPointerException) as e:
            raise Failure(422, f"the server rejected our request due to an error in our request: {e}") from None
    raise Failure(415, f"the body of the request was in an unknown format: {content_type}", "UnsupportedMediaType")


def _field_selector(text: str) -> dict[str, str]:
    fields: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, _, value = part.partition("=")
        fields[key.strip()] = value.strip().lstrip("=")
    return fields


def _spec_of(obj: Object) -> Object:
    return {k: v for k, v in obj.items() if k not in ("metadata", "status", "apiVersion", "kind")}


def _without_status(obj: Object) -> Object:
    new = copy.deepcopy(obj)
    new.pop("status", None)
    return new


def _resource(kind: Kind) -> str:
    return f"{kind.plural}.{kind.group}" if kind.group else kind.plural


def _not_found(kind: Kind, name: str) -> Failure:
    return Failure(404, f'{_resource(kind)} "{name}" not found', "NotFound",
                   {"name": name, "group": kind.group, "kind": kind.plural})  # fmt: skip


def _uuid(rng: random.Random) -> str:
    bits = rng.getrandbits(128)
    text = f"{bits:032x}"
    return f"{text[:8]}-{text[8:12]}-4{text[13:16]}-a{text[17:20]}-{text[20:32]}"


def _timestamp(seconds: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(int(seconds), tz=datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
