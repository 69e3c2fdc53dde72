"""Run a level-triggered reconcile function over a work queue, controller-runtime style.

A reconcile receives a key, reads current state, converges, and returns a ``Result``:
- ``Result()``: done; the key's backoff is forgotten.
- ``Result(requeue_after=s)``: look again in ``s`` seconds (a timer, not an error).
- an exception: retried with the key's exponential backoff; ``TerminalError`` is logged and not retried.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass
from typing import Generic, Protocol, TypeVar

import anyio
import structlog

from multikueue.kube.errors import describe
from multikueue.runtime.workqueue import Backoff, ShutDown, WorkQueue

K = TypeVar("K", bound=Hashable)
log = structlog.get_logger(__name__)


@dataclass(frozen=True)
class Result:
    requeue_after: float | None = None


class TerminalError(Exception):
    """A failure that retrying cannot fix (it is logged, and should be surfaced as a condition)."""


def log_fields(error: BaseException) -> dict[str, str]:
    """What a failure says about where it happened (``cluster``, ``kind``, ``namespace``, ``name``...), for the log
    line: an exception may carry them as ``log_fields``."""
    fields = getattr(error, "log_fields", None)
    return dict(fields) if isinstance(fields, dict) else {}


Reconcile = Callable[[K], Awaitable[Result | None]]


class ControllerObserver(Protocol):
    """Where a controller reports queue wait, depth and failures (metrics, in production)."""

    def started(self, controller: str, waited: float, depth: int) -> None: ...

    def failed(self, controller: str) -> None: ...


class Controller(Generic[K]):
    def __init__(
        self,
        name: str,
        reconcile: Reconcile[K],
        *,
        concurrency: int = 1,
        backoff: Backoff | None = None,
        observe: ControllerObserver | None = None,
    ) -> None:
        self.name = name
        self.reconcile = reconcile
        self.concurrency = concurrency
        self.queue: WorkQueue[K] = WorkQueue(backoff=backoff or Backoff(base=0.1, cap=300))
        self.reconciles = 0
        self.errors = 0
        self.observe = observe

    def enqueue(self, key: K, *, low: bool = False) -> None:
        self.queue.add(key, low=low)

    async def run(self) -> None:
        """Run ``concurrency`` workers until cancelled or the queue is shut down."""
        async with anyio.create_task_group() as tg:
            for _ in range(self.concurrency):
                tg.start_soon(self._worker)

    async def _worker(self) -> None:
        while True:
            try:
                key = await self.queue.get()
            except ShutDown:
                return
            try:
                await self._process(key)
            finally:
                self.queue.done(key)

    def _failed(self) -> None:
        self.errors += 1
        if self.observe is not None:
            self.observe.failed(self.name)

    async def _process(self, key: K) -> None:
        self.reconciles += 1
        if self.observe is not None:
            self.observe.started(self.name, self.queue.wait_time(key), len(self.queue))
        with structlog.contextvars.bound_contextvars(
            controller=self.name, key=str(key), reconcile_id=uuid.uuid4().hex[:12]
        ):
            try:
                result = await self.reconcile(key) or Result()
            except TerminalError as e:
                self._failed()
                log.error("reconcile failed permanently", error=describe(e), **log_fields(e))
                self.queue.forget(key)
                return
            except Exception as e:
                self._failed()
                delay = self.queue.add_rate_limited(key)
                log.warning("reconcile failed, retrying", error=describe(e), retry_in=round(delay, 2), **log_fields(e))
                return
            self.queue.forget(key)
            if result.requeue_after is not None:
                self.queue.add_after(key, result.requeue_after)
