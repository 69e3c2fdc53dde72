"""Writes to several workers in one pass, side by side, none waiting on a hung worker.

A worker that accepts connections but never answers holds a write until the client's timeout (15 s by default).
Written one after another, the writes of one pass would make every other worker wait that long: a run admitted at
once on a healthy worker would be Ready only after the hung one timed out. Here each pass starts its writes
together and waits for them only ``patience`` seconds; a write still running then carries on in the background,
is never started twice, and when it ends it brings its key back to the work queue, with its failure kept for that
next pass to report.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import anyio
import anyio.abc

from multikueue.kube.errors import Refused, describe, outcome_unknown, status_of

Write = Callable[[], Awaitable[None]]

PATIENCE = 0.5
"""Seconds a pass waits for its writes before leaving the slow ones to finish on their own."""


@dataclass
class _Running:
    done: anyio.Event = field(default_factory=anyio.Event)
    error: BaseException | None = None
    detached: bool = False


K = TypeVar("K", bound=Hashable)


class WorkerWrites(Generic[K]):
    def __init__(self, enqueue: Callable[[K], None], *, patience: float = PATIENCE) -> None:
        self.enqueue = enqueue
        self.patience = patience
        self._group: anyio.abc.TaskGroup | None = None
        self._running: dict[tuple[str, K], _Running] = {}
        self._failed: dict[tuple[str, K], BaseException] = {}

    async def run(self) -> None:
        """Own the background writes (until cancelled, which cancels them too)."""
        async with anyio.create_task_group() as group:
            self._group = group
            try:
                await anyio.sleep_forever()
            finally:
                self._group = None

    def busy(self, worker: str, key: K) -> bool:
        """A write for ``key`` to ``worker`` is still running from an earlier pass."""
        return (worker, key) in self._running

    def take_failures(self, key: K) -> dict[str, BaseException]:
        """Failures of background writes for ``key`` that ended since the last pass, per worker."""
        taken = {w: e for (w, k), e in self._failed.items() if k == key}
        for worker in taken:
            del self._failed[(worker, key)]
        return taken

    async def each(self, key: K, writes: Mapping[str, Write]) -> dict[str, BaseException]:
        """Run one write per worker at once; the failures of those that ended within ``patience``, per worker.
        A worker whose earlier write for ``key`` is still running is skipped."""
        todo = {w: write for w, write in writes.items() if not self.busy(w, key)}
        if self._group is None:  # no background owner (not started): the pass waits for every write
            async with anyio.create_task_group() as group:
                started = {w: self._start(group, w, key, write) for w, write in todo.items()}
        else:
            started = {w: self._start(self._group, w, key, write) for w, write in todo.items()}
            with anyio.move_on_after(self.patience):
                for running in started.values():
                    await running.done.wait()
        failures: dict[str, BaseException] = {}
        for worker, running in started.items():
            if not running.done.is_set():
                running.detached = True
            elif running.error is not None:
                failures[worker] = running.error
        return failures

    def _start(self, group: anyio.abc.TaskGroup, worker: str, key: K, write: Write) -> _Running:
        running = _Running()
        self._running[(worker, key)] = running

        async def attempt() -> None:
            try:
                await write()
            except Exception as e:  # reported by the pass that reads it, never lost
                running.error = e
            finally:
                del self._running[(worker, key)]
                running.done.set()
                if running.detached:
                    if running.error is not None:
                        self._failed[(worker, key)] = running.error
                    self.enqueue(key)

        group.start_soon(attempt)
        return running


class WorkerWriteFailed(Exception):
    """A write to a worker failed: what, where and the API's answer, in one line without headers. Carries the log
    fields (``cluster``, ``kind``, ``namespace``, ``name``, ``code``) for the controller's log line."""

    def __init__(self, worker: str, action: str, kind: str, namespace: str, name: str, error: BaseException) -> None:
        unknown = " (no answer: it may have been done)" if outcome_unknown(error) else ""
        super().__init__(f'worker "{worker}": cannot {action} {kind} {namespace}/{name}: {describe(error)}{unknown}')
        self.worker = worker
        self.action = action
        self.error = error
        self.refused = isinstance(error, Refused)  # the worker will not take this write as it is
        self.code = status_of(error)
        self.log_fields = {"cluster": worker, "kind": kind, "namespace": namespace, "name": name,
                           "code": str(self.code or "")}  # fmt: skip


def raise_first(failures: Mapping[str, BaseException]) -> None:
    """Retry the pass (with the key's backoff) if a write failed; every write was tried first."""
    for _, error in sorted(failures.items()):
        raise error
