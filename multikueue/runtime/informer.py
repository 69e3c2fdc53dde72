"""List+watch into a local cache, as client-go's reflector does, for any list endpoint.

- List (paged), then watch from the list's resourceVersion with bookmarks; a watch that ends normally resumes
  from the last resourceVersion seen (events and bookmarks alike), without a relist.
- 410 Gone (an ERROR event or an HTTP status) means the history is gone: list again and diff the cache, so a
  deletion missed meanwhile is still reported.
- Every watch asks the server to end it after ``watch_timeout`` seconds, and the connection's read timeout is a
  little longer: a stream silent past that is dead (a half-open TCP connection), not idle.
- Other failures back off exponentially (capped) and retry; ``connected``/``last_error`` tell the owner.
"""

from __future__ import annotations

import random
import sys
import time
from collections.abc import AsyncIterator, Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import anyio
import structlog

from multikueue.kube.errors import ApiError, Busy, Gone, KubeError, Refused, describe
from multikueue.runtime.signal import Signal
from multikueue.runtime.workqueue import Backoff

Object = dict[str, Any]
log = structlog.get_logger(__name__)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"
CREATED_SECONDS = 30.0
"""How long an object this process created is read as cached while its watch event has not come."""
CREATED_SWEEP = 1024


@dataclass(frozen=True, order=True)
class ObjectKey:
    """Namespace ("" when cluster-scoped) and name."""

    namespace: str
    name: str

    @classmethod
    def of(cls, obj: Object) -> ObjectKey:
        meta = obj["metadata"]
        return cls(meta.get("namespace", ""), meta["name"])

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name}" if self.namespace else self.name


class ListWatchSource(Protocol):
    """Where an informer reads from: one resource on one cluster, maybe filtered by namespace and labels."""

    description: str

    async def list(self, *, limit: int, continue_token: str | None) -> Object: ...

    def watch(self, *, resource_version: str, timeout_seconds: int) -> AsyncIterator[Object]: ...


EventHandler = Callable[[str, Object], None]
IndexFunction = Callable[[Object], Iterable[Hashable]]
"""The values an object is found under in one index (client-go's ``IndexFunc``): e.g. its controller owner's UID."""
_RETRY = Backoff(base=0.5, factor=2, cap=30)
BUSY_RETRY_MAX = 5.0


def retry_delay(error: BaseException, failures: int, backoff: Backoff) -> float:
    """How long to wait before the next list/watch attempt. A busy server (429/503) is asked again when its
    ``Retry-After`` says (1 s if it says nothing, at most ``BUSY_RETRY_MAX``), not on the failure streak's growing
    backoff: an API server that just came back answers 429 while its caches fill, and waiting 30 s then would
    leave a returned worker unseen that long. Anything else backs off exponentially, jittered."""
    if isinstance(error, Busy):
        headers: Any = getattr(error, "headers", None) or {}
        header = headers.get("Retry-After")
        try:
            seconds = float(header) if header is not None else 1.0
        except ValueError:
            seconds = 1.0
        return min(max(seconds, 0.1), BUSY_RETRY_MAX)
    return backoff.delay(failures) * random.uniform(0.8, 1.2)


class Informer:
    """Keeps ``store`` equal to the server's objects; calls every handler with ``(type, object)`` for each change.

    Shared, as client-go's shared informers are: several controllers add their handlers to one informer (one watch,
    one cache per resource), and indexes answer "which objects have this value" without a scan."""

    def __init__(
        self,
        source: ListWatchSource,
        *,
        on_event: EventHandler | None = None,
        watch_timeout: int = 300,
        page_size: int = 500,
        backoff: Backoff = _RETRY,
        drop: tuple[str, ...] = (),
        transform: Callable[[Object], Object] | None = None,
    ) -> None:
        self.source = source
        self.drop = drop  # top-level fields the owner never reads (e.g. spec): not kept in the cache
        # What the cache keeps of each object, in place of the object (client-go's TransformFunc): e.g. a digest
        # of a part the owner only compares. Handlers and readers see the transformed object.
        self.transform = transform
        self.handlers: list[EventHandler] = [on_event] if on_event is not None else []
        self.connectivity: Signal[bool] = Signal("informer connected (listed) or disconnected")
        self.watch_timeout = watch_timeout
        self.page_size = page_size
        self.backoff = backoff
        self.store: dict[ObjectKey, Object] = {}
        self._index_functions: dict[str, IndexFunction] = {}
        self._indexes: dict[str, dict[Hashable, set[ObjectKey]]] = {}
        self.running = False
        self.synced = anyio.Event()
        self.connected = False
        self.disconnected_since: float | None = time.monotonic()
        self.last_error: BaseException | None = None
        self.resource_version: str | None = None
        self.relists = 0
        self.failures = 0
        # True while handlers are told of objects in bulk rather than of a change: the first list's objects, and
        # the cache replayed to a late handler (what controller-runtime queues at low priority).
        self.initial = False
        self._wake = anyio.Event()
        self._created: dict[ObjectKey, tuple[Object, float]] = {}  # created here, its watch event not yet in

    def get(self, key: ObjectKey) -> Object | None:
        obj = self.store.get(key)
        if obj is None and self._created:
            return self._just_created(key)
        return obj

    def items(self) -> list[Object]:
        return list(self.store.values())

    def add_handler(self, handler: EventHandler) -> None:
        """Call ``handler`` for every change from now on; the objects already cached come to it first as ADDED (as
        client-go does for a handler added late), so a reader that joins a running informer misses nothing."""
        self.handlers.append(handler)
        was, self.initial = self.initial, True
        try:
            for obj in list(self.store.values()):
                handler(ADDED, obj)
        finally:
            self.initial = was

    def add_index(self, name: str, values: IndexFunction) -> None:
        """Keep an index ``name``: each object is found under every value ``values(object)`` returns. Adding the same
        index again (another reader of a shared informer) changes nothing."""
        if self._index_functions.get(name) is values:
            return
        self._index_functions[name] = values
        self._indexes[name] = index = dict[Hashable, set[ObjectKey]]()
        for key, obj in self.store.items():
            for value in values(obj):
                index.setdefault(value, set()).add(key)

    def add_indexes(self, indexes: Mapping[str, IndexFunction]) -> None:
        for name, values in indexes.items():
            self.add_index(name, values)

    def by_index(self, name: str, value: Hashable) -> list[ObjectKey]:
        """The keys of the cached objects found under ``value`` in index ``name``, sorted."""
        return sorted(self._indexes[name].get(value, ()))

    async def run(self) -> None:
        """Run until cancelled (once: shared informers are started by whoever owns them, not by each reader)."""
        assert not self.running, f"informer {self.source.description} is already running"
        self.running = True
        try:
            await self._run()
        finally:
            self.running = False

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                if self.resource_version is None:
                    await self._relist()
                await self._watch()
                failures = 0
            except Gone as e:
                log.info("watch expired, relisting", source=self.source.description, reason=e.reason)
                self.resource_version = None
            except ApiError as e:
                failures += 1
                self._failed(e)
                if isinstance(e, Refused):  # a broken request will not heal by resuming the watch
                    self.resource_version = None
                failures = await self._pause(retry_delay(e, failures, self.backoff), failures)
            except KubeError as e:  # no answer, a stream cut short or garbled, no credential just now
                failures += 1
                self._failed(e)
                failures = await self._pause(retry_delay(e, failures, self.backoff), failures)

    def wake(self) -> None:
        """Try again now, from a fresh backoff: the owner knows the server is back (its health probe answered)."""
        self._wake.set()

    async def _pause(self, delay: float, failures: int) -> int:
        """Wait ``delay`` or until woken; the failure streak to go on with (reset when woken)."""
        with anyio.move_on_after(delay):
            await self._wake.wait()
        if self._wake.is_set():
            self._wake = anyio.Event()
            return 0
        return failures

    # --------------------------------------------------------------------------------------- internals

    async def _relist(self) -> None:
        items: dict[ObjectKey, Object] = {}
        continue_token: str | None = None
        resource_version = ""
        while True:
            page = await self.source.list(limit=self.page_size, continue_token=continue_token)
            metadata = page.get("metadata") or {}
            resource_version = resource_version or metadata.get("resourceVersion", "")
            for obj in page.get("items") or []:
                items[ObjectKey.of(obj)] = self._trimmed(obj)
            continue_token = metadata.get("continue")
            if not continue_token:
                break
        for key, cached in self.store.items():  # our own writes the list began before (``remember``) stay
            if key in items and _newer(cached, items[key]):
                items[key] = cached
        previous, self.store = self.store, items
        self._created.clear()  # the list is the truth now (a create it missed is found by its 409 at worst)
        self._reindex()
        self.resource_version = resource_version
        self.initial = self.relists == 0
        self.relists += 1
        self._mark_connected()
        try:
            self._notify_differences(previous, items)
        finally:
            self.initial = False
        self.synced.set()

    def _notify_differences(self, previous: dict[ObjectKey, Object], items: dict[ObjectKey, Object]) -> None:
        for key, obj in previous.items():
            if key not in items:
                self._notify(DELETED, obj)
        for key, obj in items.items():
            old = previous.get(key)
            if old is None:
                self._notify(ADDED, obj)
            elif old["metadata"].get("resourceVersion") != obj["metadata"].get("resourceVersion"):
                self._notify(MODIFIED, obj)

    async def _watch(self) -> None:
        assert self.resource_version is not None
        async for event in self.source.watch(
            resource_version=self.resource_version, timeout_seconds=self._jittered_timeout()
        ):
            self._mark_connected()
            kind, obj = event["type"], event["object"]
            rv = (obj.get("metadata") or {}).get("resourceVersion")
            if kind == "BOOKMARK":
                self.resource_version = rv or self.resource_version
                continue
            key = ObjectKey.of(obj)
            if kind == DELETED:
                self._put(key, None)
            elif kind in (ADDED, MODIFIED):
                cached = self.store.get(key)
                if cached is not None and _newer(cached, obj):
                    # An older version than a write of ours already remembered: the cache never goes back (a pass
                    # reading it would undo that write's step, e.g. create again a finished run's copy); the
                    # event of that write follows.
                    self.resource_version = rv or self.resource_version
                    continue
                obj = self._trimmed(obj)
                self._put(key, obj)
            else:
                log.warning("unexpected watch event", source=self.source.description, type=kind)
                continue
            self.resource_version = rv or self.resource_version
            self._notify(kind, obj)

    def remember(self, obj: Object) -> None:
        """Store an object this process just updated (its watch event follows), so the next read sees it.

        Never older than what the watch already delivered (its event may overtake the write's response; a
        regression would last until the object's next change, and every guarded write until then would fail),
        and never an object the watch has meanwhile seen deleted (a ghost would never leave)."""
        key = ObjectKey.of(obj)
        cached = self.store.get(key)
        if cached is None or _newer(cached, obj):
            return
        self._put(key, self._trimmed(obj))

    def remember_created(self, obj: Object, *, seconds: float = CREATED_SECONDS) -> None:
        """Read an object this process just created as cached until the watch delivers it (client-go's
        MutationCache layers a controller's own writes over its informer the same way). Without it, the next pass
        (often started by another event before this one's) finds no object and creates it again, to be answered
        409 and read back: one create and one read more per object. Kept ``seconds`` at most, so an object
        whose deletion the watch delivered before this call does not linger; any event for it, or a relist, ends
        the assumption."""
        key, now = ObjectKey.of(obj), time.monotonic()
        if len(self._created) >= CREATED_SWEEP:  # events that never came (a watch down meanwhile): bounded
            self._created = {k: v for k, v in self._created.items() if v[1] >= now}
        if key not in self.store:
            self._created[key] = (self._trimmed(obj), now + seconds)

    def _just_created(self, key: ObjectKey) -> Object | None:
        entry = self._created.get(key)
        if entry is None:
            return None
        if time.monotonic() > entry[1]:
            del self._created[key]
            return None
        return entry[0]

    def _put(self, key: ObjectKey, obj: Object | None) -> None:
        """Store (or, with ``None``, drop) one object, keeping the indexes in step."""
        self._created.pop(key, None)  # the watch has its own word on it now
        old = self.store.pop(key, None) if obj is None else self.store.get(key)
        for name, values in self._index_functions.items():
            index = self._indexes[name]
            for value in values(old) if old is not None else ():
                if (keys := index.get(value)) is not None:
                    keys.discard(key)
                    if not keys:
                        del index[value]
            for value in values(obj) if obj is not None else ():
                index.setdefault(value, set()).add(key)
        if obj is not None:
            self.store[key] = obj

    def _reindex(self) -> None:
        for name, values in list(self._index_functions.items()):
            del self._index_functions[name]
            self.add_index(name, values)

    def _trimmed(self, obj: Object) -> Object:
        """Without ``metadata.managedFields`` (nothing here reads them, and on objects many controllers write they
        are often the largest part; client-go's informers drop them too) and without the fields in ``drop``, as the
        owner's ``transform`` keeps it, its strings shared with every other cached object (``compact``)."""
        (obj.get("metadata") or {}).pop("managedFields", None)
        for name in self.drop:
            obj.pop(name, None)
        if self.transform is not None:
            obj = self.transform(obj)
        compacted: Object = compact(obj)
        return compacted

    def _notify(self, kind: str, obj: Object) -> None:
        for handler in self.handlers:
            handler(kind, obj)

    def _mark_connected(self) -> None:
        if not self.connected:
            self.connected = True
            self.disconnected_since = None
            self.last_error = None
            self.connectivity.emit(True)

    def _failed(self, error: BaseException) -> None:
        if self.connected or self.disconnected_since is None:
            self.disconnected_since = time.monotonic()  # the first drop, kept across failed retries
        self.connected = False
        self.last_error = error
        self.failures += 1
        self.connectivity.emit(False)
        log.warning("list/watch failed", source=self.source.description, error=describe(error))

    def _jittered_timeout(self) -> int:
        # Spread the reconnects of many watches over time, as client-go does (here 0.8x to 1x the timeout).
        return max(1, int(self.watch_timeout * random.uniform(0.8, 1.0)))


def _newer(a: Object, b: Object) -> bool:
    """Whether ``a`` is a later version than ``b``: resourceVersions are etcd revisions, comparable as integers
    (KEP-5504); one that is not an integer is taken as not newer."""
    try:
        return int(a["metadata"]["resourceVersion"]) > int(b["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):
        return False


SHARED_STRING_MAX = 64


def compact(value: Any) -> Any:
    """A copy whose keys and short strings are interned: the JSON decoder makes new strings for every object, so
    a cache of thousands repeats "metadata", "lastTransitionTime", "QuotaReserved", a queue's name... thousands of
    times. Sharing them makes a cached Workload ~40 % smaller (bench/results/README.md); interned strings are freed
    with their last user."""
    if isinstance(value, dict):
        return {sys.intern(k): compact(v) for k, v in value.items()}
    if isinstance(value, list):
        return [compact(v) for v in value]
    if isinstance(value, str) and len(value) <= SHARED_STRING_MAX:
        return sys.intern(value)
    return value
