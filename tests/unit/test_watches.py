"""How a controller's watches queue their keys: a change someone made ahead of a bulk look at every object."""

from __future__ import annotations

from typing import Any

from multikueue.kube.addresses import GroupVersionKind
from multikueue.runtime.controller import Controller
from multikueue.runtime.informer import ADDED, MODIFIED, Informer
from multikueue.runtime.signal import Signal
from multikueue.runtime.watches import Change, KindChange, Watch, install


class NoSource:
    description = "none"


def obj(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": "1"}}


async def test_bulk_events_and_low_watches_queue_behind_changes() -> None:
    async def reconcile(key: str) -> None:
        return None

    controller: Controller[str] = Controller("test", reconcile)
    informer = Informer(NoSource())
    every: Signal[str] = Signal("every object")
    kinds: Signal[KindChange] = Signal("kind changes")
    gvk = GroupVersionKind("tekton.dev", "v1", "PipelineRun")
    install(controller, [
        Watch("objects", informer, lambda c: [c.obj["metadata"]["name"]]),
        Watch("every object", every, lambda _: ["every-1", "every-2"], low=True),
        Watch("a kind's objects", kinds, lambda e: [e.change.obj["metadata"]["name"]]),
    ])  # fmt: skip
    informer.initial = True  # the informer's first list
    informer._notify(ADDED, obj("listed"))
    informer.initial = False
    every.emit("a worker is back")
    kinds.emit(KindChange(gvk, Change("", obj("looked-again"), bulk=True)))
    informer._notify(MODIFIED, obj("cancelled"))  # a watch event: someone's change
    kinds.emit(KindChange(gvk, Change(MODIFIED, obj("changed"))))
    assert controller.queue.waiting_low == 4
    order = [await controller.queue.get() for _ in range(6)]
    assert order == ["cancelled", "changed", "listed", "every-1", "every-2", "looked-again"]
    assert len(controller.queue) == 0
