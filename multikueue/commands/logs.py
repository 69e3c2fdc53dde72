"""``multikueue logs KIND NAMESPACE/NAME``: a run's pod logs, read from the worker it runs on.

The worker and the way to it come from ``status.gather`` (the Workload's cluster, or a direct-mode placement; the
MultiKueueCluster's Secret, read with the user's own credentials, or the user's own kubeconfig for that worker);
the run's pods from the kind's ``podSelector``. Every way it cannot answer is a ``LogsUnavailable`` saying why.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

import anyio

from multikueue import logs_order
from multikueue.commands.status import RunView, WorkerView, finished, why, worker_kubeconfig
from multikueue.config import LogsShape
from multikueue.kube import core
from multikueue.kube.client import ApiClient, api_client_from_kubeconfig
from multikueue.kube.errors import BadRequest, NotFound
from multikueue.labels import PLACEMENT_WORKER

Object = dict[str, Any]


class LogsUnavailable(LookupError):
    """The logs cannot be read; the message says why, in the user's terms."""


@dataclass(frozen=True)
class Request:
    namespace: str
    name: str
    selector: str  # with {name} and {namespace} still to fill in
    container: str | None = None
    follow: bool = False
    shape: LogsShape | None = None  # the kind's ``logs``: its pods part by part, in the run's order
    part: str | None = None  # ``--task``: that part's pods only (with a shape)
    prefix: bool | None = None  # None: as the shape says, or ``[pod/container]`` when there are several


POLL_SECONDS = 1.0  # following a shaped run: how often its pods are listed again for parts that started since
MAX_POLLS = 7 * 24 * 3600  # a week of following at most


def selector_for(template: str, namespace: str, name: str) -> str:
    return template.replace("{name}", name).replace("{namespace}", namespace)


def containers(pod: Object, only: str | None) -> list[str]:
    """The pod's containers (not its init containers), or ``only`` if the pod has it."""
    names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    return [only] if only is not None and only in names else ([] if only is not None else names)


async def stream(api: ApiClient, view: RunView, request: Request, out: Callable[[str], None],
                 worker_kubeconfigs: Mapping[str, Object], secrets_namespace: str,
                 refresh: Callable[[], Awaitable[RunView]] | None = None) -> None:  # fmt: skip
    """Write every line of the run's containers to ``out``: with the kind's ``logs`` shape, part after part in the
    run's order (``refresh`` reads the run again while following); else all at once, as ``[pod/container] line``
    when there are several."""
    worker = _worker(view)
    kubeconfig = worker_kubeconfigs.get(worker.name) or await worker_kubeconfig(api, worker, secrets_namespace)
    if kubeconfig is None:
        raise LogsUnavailable(f"worker {worker.name} {worker.unreadable}")
    selector = selector_for(request.selector, request.namespace, request.name)
    async with await api_client_from_kubeconfig(kubeconfig) as client:
        if request.shape is not None:
            await _shaped(client, view, request, out, refresh or _same(view))
            return
        found = await core.pods(client, request.namespace, selector)
        targets = [(p["metadata"]["name"], c) for p in found for c in containers(p, request.container)]
        if not targets:
            _nothing_to_read(view, request, found, selector)
        async with anyio.create_task_group() as tg:
            for pod, container in targets:
                prefixed = len(targets) > 1 if request.prefix is None else request.prefix
                tg.start_soon(_one, client, request, pod, container, out, prefixed)


def _same(view: RunView) -> Callable[[], Awaitable[RunView]]:
    async def same() -> RunView:
        return view

    return same


async def _shaped(client: ApiClient, view: RunView, request: Request, out: Callable[[str], None],
                  refresh: Callable[[], Awaitable[RunView]]) -> None:  # fmt: skip
    """The kind's own tool's shape: each part's containers one after the other, in the run's order; following, the
    parts that start later too, until the run is over and every pod it left has been read."""
    assert request.shape is not None
    selector = selector_for(request.selector, request.namespace, request.name)
    read: set[tuple[str, str]] = set()
    for _ in range(MAX_POLLS):
        pods = await core.pods(client, request.namespace, selector)
        order = logs_order.part_order(view.obj, request.shape)
        todo = [t for t in logs_order.targets(pods, order, request.shape, part=request.part,
                                              container=request.container, prefixed=request.prefix is not False)
                if (t.pod, t.container) not in read]  # fmt: skip
        if not todo and not read:
            _none_found(view, request, pods, selector)
        for target in todo:
            if not request.follow and not logs_order.started(_pod(pods, target.pod), target.container):
                continue  # nothing to read yet, and not waiting for it
            await _read(client, request, target, out)
            read.add((target.pod, target.container))
        if not request.follow or (finished(view) and not todo):
            return
        await anyio.sleep(POLL_SECONDS)
        view = await refresh()


def _pod(pods: list[Object], name: str) -> Object:
    return next(p for p in pods if p["metadata"]["name"] == name)


def _none_found(view: RunView, request: Request, pods: list[Object], selector: str) -> None:
    """Nothing to read at all: why, in one line (a follower waits for the first part instead, unless it is over)."""
    if request.follow and not finished(view):
        return
    _nothing_to_read(view, request, pods, selector)


def _nothing_to_read(view: RunView, request: Request, pods: list[Object], selector: str) -> NoReturn:
    """Why there is nothing to read, in one line: the pods gone with a finished run, or none (of that part or
    container) there."""
    worker = _worker(view).name
    if not pods and finished(view):
        raise LogsUnavailable(f"{why(view)}; its pods on worker {worker} are gone (the kind's retention keeps a "
                              "finished run's object, and its pods, for a while)")  # fmt: skip
    narrowed = [f"part {request.part}" if request.part else "", f"container {request.container}"
                if request.container else ""]  # fmt: skip
    what = f"{' and '.join(n for n in narrowed if n)} in " if any(narrowed) and pods else ""
    raise LogsUnavailable(f"no {what}pods of {view.gvk.kind} {request.namespace}/{request.name} on worker {worker} "
                          f"(selector {selector}): {why(view)}")  # fmt: skip


START_POLLS = 600  # a followed container not started yet (its pod still starting): looked at again, a second apart


async def _read(client: ApiClient, request: Request, target: logs_order.Target, out: Callable[[str], None]) -> None:
    """One container's lines, prefixed; following, once it has started (a pod still starting has no log yet)."""
    for _ in range(START_POLLS):
        try:
            async for line in core.pod_log(client, request.namespace, target.pod, target.container,
                                           follow=request.follow):  # fmt: skip
                out(f"{target.prefix}{line}")
            return
        except BadRequest:  # "waiting to start": its pod is still starting
            if not request.follow:
                raise
        except NotFound:  # the pod went between its listing and its log (a finished run's copy removed)
            return
        await anyio.sleep(POLL_SECONDS)


async def _one(client: ApiClient, request: Request, pod: str, container: str, out: Callable[[str], None],
               prefixed: bool) -> None:  # fmt: skip
    async for line in core.pod_log(client, request.namespace, pod, container, follow=request.follow):
        out(f"[{pod}/{container}] {line}" if prefixed else line)


def _worker(view: RunView) -> WorkerView:
    """The one worker the run is on; ``LogsUnavailable`` when it is not on one yet."""
    if view.obj is None:
        raise LogsUnavailable(why(view))
    status = (view.workload or {}).get("status") or {}
    placed = status.get("clusterName") or ((view.obj.get("metadata") or {}).get("annotations") or {}).get(
        PLACEMENT_WORKER)  # fmt: skip
    if not placed:
        raise LogsUnavailable(f"not running on a worker yet: {why(view)}")
    return next((w for w in view.workers if w.name == placed), WorkerView(str(placed)))
