"""Kueue mode's snapshot of a run for one pass (``decision.Group``): read from the caches and clocks, no API calls.

Beside what ``decision`` reads of the Workload and its copies, it says which workers the run may go to: the kind's
``workerSelector`` and the object's (else its Workload's) ``multikueue.x-k8s.io/worker-selector`` annotation, read
against the MultiKueueClusters' labels, and never a worker holding an earlier run's copy of that name that a
finalizer keeps past ``workerLostTimeout`` (the run could not be created there).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from multikueue.clusters.worker import Worker
from multikueue.config import Configuration
from multikueue.dispatch import copies, decision
from multikueue.dispatch import workload_state as wl
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.memory import RunMemory
from multikueue.dispatch.placement import WORKER_SELECTOR_ANNOTATION, Selection, selection
from multikueue.runtime.informer import Informer, ObjectKey

Object = dict[str, Any]


class Snapshots:
    def __init__(
        self,
        config: Configuration,
        memory: RunMemory[ObjectKey],
        clusters: Informer | None,
        settled: Callable[[str], bool],
        lost_since: Callable[[str], float | None],
    ) -> None:
        self.config = config
        self.memory = memory  # its ``waiting``: the Workloads whose worker selection a label change may change
        self.clusters = clusters  # the MultiKueueClusters: their labels are what a run's worker selection reads
        self.settled = settled  # whether a worker's first connection attempt here has ended
        self.lost_since = lost_since

    def group(
        self,
        workload: Object,
        check: str,
        adapter: GenericAdapter,
        obj: Object,
        clusters: list[str],
        connected: dict[str, Worker],
        present: dict[str, Object],  # the Workload's copy on each connected worker that has one
    ) -> decision.Group:
        key = ObjectKey.of(workload)
        config = self.config.multi_kueue
        incremental = config.incremental_dispatcher_config
        run = copies.Run.of(obj, workload["metadata"]["name"], wl.attempt(workload))
        obj_key = ObjectKey.of(obj)
        stuck = _stuck(connected, adapter, obj_key, run, config.worker_lost_timeout)
        return decision.Group(
            workload=workload, check=check, clusters=tuple(clusters), connected=tuple(connected),
            worker_copies=present,
            serving={c: worker.serves(adapter.gvk) for c, worker in connected.items()},
            kind=f"{adapter.gvk.kind}.{adapter.gvk.version}.{adapter.gvk.group}",
            holding={c: worker.holds(adapter.gvk, obj_key, run) for c, worker in connected.items()},
            settling=tuple(c for c in clusters if c not in connected and not self.settled(c)),
            lost_since={c: self.lost_since(c) for c in clusters if c not in connected},
            now=time.monotonic(), lost_timeout=config.worker_lost_timeout, dispatcher=config.dispatcher_name,
            round_started=self.memory.rounds.get(key),
            round_length=self.config.dispatcher.incremental_round_timeout,
            step_size=incremental.step_size if incremental else 3,
            retained_for=wl.retained_for(workload, adapter.options.retention, datetime.datetime.now(datetime.UTC)),
            selection=self._selection(workload, adapter, obj, clusters, stuck),
            inadmissible_timeout=self.config.dispatcher.inadmissible_timeout,
            inadmissible_since=self.memory.unfit_since.get(key),
            ran_there=ran_there(workload, adapter, obj, present),
        )  # fmt: skip

    def _selection(
        self, workload: Object, adapter: GenericAdapter, obj: Object, clusters: list[str], stuck: dict[str, str]
    ) -> Selection:
        found = self._selected(workload, adapter, obj, clusters)
        if not stuck or (workload.get("status") or {}).get("clusterName"):
            return found
        return replace(found, excluded={**stuck, **found.excluded})

    def _selected(self, workload: Object, adapter: GenericAdapter, obj: Object, clusters: list[str]) -> Selection:
        key = ObjectKey.of(workload)
        own = _annotation(obj, WORKER_SELECTOR_ANNOTATION) or _annotation(workload, WORKER_SELECTOR_ANNOTATION)
        kind = adapter.options.placement.worker_selector
        waiting = not (workload.get("status") or {}).get("clusterName")
        if not (own or kind) or not waiting:
            self.memory.waiting.discard(key)
            return Selection()
        self.memory.waiting.add(key)
        labels = {}
        for name in clusters:
            cluster = self.clusters.get(ObjectKey("", name)) if self.clusters is not None else None
            labels[name] = dict(((cluster or {}).get("metadata") or {}).get("labels") or {})
        return selection(labels, kind, own)


def _stuck(
    connected: dict[str, Worker], adapter: GenericAdapter, obj_key: ObjectKey, run: copies.Run, timeout: float
) -> dict[str, str]:
    """The workers holding an earlier run's copy of the object's name that a finalizer has kept for longer than
    ``timeout``, each with why: the run cannot be created there."""
    stuck = {}
    for cluster, worker in connected.items():
        cached = worker.copy(adapter.gvk, obj_key)
        if cached is not None and not run.made(cached) and copies.going_for(cached) > timeout:
            stuck[cluster] = f"holds an earlier run's copy of {adapter.gvk.kind} {obj_key} that a finalizer keeps"
    return stuck


def ran_there(workload: Object, adapter: GenericAdapter, obj: Object, present: dict[str, Object]) -> bool:
    """Whether the run's object is known to have been on its recorded worker: that worker's Workload copy was
    adopted by it, or its status was mirrored to the manager object while the Workload was never evicted (so that
    status came from that worker). Such a run missing there was deleted there: it is never created again."""
    recorded = (workload.get("status") or {}).get("clusterName")
    if not recorded:
        return False
    if wl.adopted_by(present.get(recorded), adapter.gvk.kind, obj["metadata"]["name"]):
        return True
    return copies.has_mirrored_status(obj) and not wl.evicted_before(workload)


def _annotation(obj: Object, name: str) -> str | None:
    return ((obj.get("metadata") or {}).get("annotations") or {}).get(name) or None
