"""What a worker says about a run, told on the run's manager object: the worker's Warning Events about its copy or
object, and its copy's pending reason (``QuotaReserved=False``), each prefixed with the worker's name. Each message
once per run, and at most ``NEWS_BURST`` per ``NEWS_WINDOW`` seconds per run (the worker keeps its news, so what
the limit holds back is told on a later pass)."""

from __future__ import annotations

import time
from typing import Any

from multikueue.clusters.worker import Worker
from multikueue.dispatch import workload_state as wl
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.check_status import CheckStatus
from multikueue.runtime.informer import ObjectKey

Object = dict[str, Any]
NEWS_BURST, NEWS_WINDOW = 5, 60.0  # worker news surfaced per run: at most 5 Events a minute


class WorkerNews:
    def __init__(self, status: CheckStatus) -> None:
        self.status = status
        self.surfaced: dict[ObjectKey, set[str]] = {}  # worker news already told, per Workload
        self.surfaced_at: dict[ObjectKey, list[float]] = {}  # when, for the rate limit

    def forget(self, key: ObjectKey) -> None:
        self.surfaced.pop(key, None)
        self.surfaced_at.pop(key, None)

    async def surface(
        self,
        workload: Object,
        adapter: GenericAdapter,
        obj: Object,
        connected: dict[str, Worker],
        present: dict[str, Object],
    ) -> None:
        """Tell the manager object's user why the run waits or fails on a worker: each worker's Warning Events
        about its copy or object, and its copy's pending reason (QuotaReserved=False), prefixed with the worker's
        name. Each message once per run, and at most ``NEWS_BURST`` per ``NEWS_WINDOW`` seconds per run."""
        key = ObjectKey.of(workload)
        news: list[tuple[str, str, str]] = []
        for cluster, worker in connected.items():
            for reason, message in worker.warnings_about(key):
                news.append(("Warning", "WorkerWarning", f'worker "{cluster}": {reason}: {message}'))
            reserved = wl.condition(present[cluster], wl.QUOTA_RESERVED) if cluster in present else None
            if reserved is not None and reserved.get("status") == "False" and reserved.get("message"):
                news.append(("Normal", "WorkerPending", f'worker "{cluster}": {reserved["message"]}'))
        if not news:
            return
        said = self.surfaced.setdefault(key, set())
        now = time.monotonic()
        recent = self.surfaced_at.setdefault(key, [])
        recent[:] = [t for t in recent if now - t < NEWS_WINDOW]
        for type_, reason, message in news:
            if message in said or len(recent) >= NEWS_BURST:
                continue  # told already; or, past the burst, told on a later pass (the worker's news are kept)
            await self.status.object_event(adapter, obj, type_, message, reason=reason)
            said.add(message)
            recent.append(now)
