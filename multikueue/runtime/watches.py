"""What a controller watches, declared next to its reconciler, as controller-runtime's ``For``/``Owns``/``Watches``.

Each reconciler returns its ``Watch`` list from ``watches()``: a source (an informer, or a ``Signal`` another part of
the process emits), the keys an event concerns, and whether they are queued at once or after a batch period.
``install`` wires them to the reconciler's controller. Adding a trigger is then one ``Watch`` in the reconciler's
own file.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from multikueue.kube.addresses import GroupVersionKind
from multikueue.runtime.controller import Controller
from multikueue.runtime.informer import Informer
from multikueue.runtime.signal import Signal

Object = dict[str, Any]
K = TypeVar("K")


@dataclass(frozen=True)
class Change:
    """One informer event: ADDED, MODIFIED, DELETED, or "" (an object looked at again: a relist, a late handler).
    ``bulk``: told of with every other object (a first list), not because it changed: queued at low priority."""

    type: str
    obj: Object
    bulk: bool = False


@dataclass(frozen=True)
class KindChange:
    """An event of a configured kind's manager informer (kinds are watched as the manager serves them, some late)."""

    gvk: GroupVersionKind
    change: Change


@dataclass(frozen=True)
class Watch(Generic[K]):
    """One trigger of a controller. An informer's events arrive as ``Change``; a signal's as it emits them."""

    what: str  # what is watched, in words (the trigger table in docs/architecture.md)
    source: Informer | Signal[Any]
    keys: Callable[[Any], Iterable[K]]  # the keys the event concerns
    delay: Callable[[], float] | None = None  # coalesced over this many seconds (eventsBatchPeriod); None: at once
    record: Callable[[Any], None] | None = None  # bookkeeping that must see every event, done before its keys
    low: bool = False  # keys queued at low priority: a bulk look (every Workload), behind changes someone made


def install(controller: Controller[K], watches: Iterable[Watch[K]]) -> None:
    """Subscribe ``controller`` to every watch: each event's keys go to its queue."""
    for watch in watches:
        handle: Callable[[Any], None] = functools.partial(_handle, controller, watch)
        if isinstance(watch.source, Informer):
            watch.source.add_handler(functools.partial(_from_informer, watch.source, handle))
        else:
            watch.source.subscribe(handle)


def _from_informer(informer: Informer, handle: Callable[[Any], None], kind: str, obj: Object) -> None:
    handle(Change(kind, obj, bulk=informer.initial))


def bulk(event: Any) -> bool:
    """Whether an event tells of an object in bulk (``Change.bulk``, also inside a ``KindChange``)."""
    change = event.change if isinstance(event, KindChange) else event
    return isinstance(change, Change) and change.bulk


def _handle(controller: Controller[K], watch: Watch[K], event: Any) -> None:
    if watch.record is not None:
        watch.record(event)
    keys = watch.keys(event)
    if watch.delay is None:
        low = watch.low or bulk(event)
        for key in keys:
            controller.enqueue(key, low=low)
        return
    delay = watch.delay()
    for key in keys:
        controller.queue.add_after(key, delay)
