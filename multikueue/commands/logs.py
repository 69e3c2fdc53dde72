"""``multikueue logs KIND NAMESPACE/NAME``: a run's pod logs, read from the worker it runs on.

The worker and the way to it come from ``status.gather`` (the Workload's cluster, or a direct-mode placement; the
MultiKueueCluster's Secret, read with the user's own credentials, or the user's own kubeconfig for that worker);
the run's pods from the kind's ``podSelector``. Every way it cannot answer is a ``LogsUnavailable`` saying why.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from multikueue.commands.status import RunView, WorkerView, finished, why, worker_kubeconfig
from multikueue.kube import core
from multikueue.kube.client import ApiClient, api_client_from_kubeconfig
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


def selector_for(template: str, namespace: str, name: str) -> str:
    return template.replace("{name}", name).replace("{namespace}", namespace)


def containers(pod: Object, only: str | None) -> list[str]:
    """The pod's containers (not its init containers), or ``only`` if the pod has it."""
    names = [c["name"] for c in (pod.get("spec") or {}).get("containers") or []]
    return [only] if only is not None and only in names else ([] if only is not None else names)


async def stream(api: ApiClient, view: RunView, request: Request, out: Callable[[str], None],
                 worker_kubeconfigs: Mapping[str, Object], secrets_namespace: str) -> None:  # fmt: skip
    """Write every line of the run's containers to ``out`` (as ``[pod/container] line`` when there are several)."""
    worker = _worker(view)
    kubeconfig = worker_kubeconfigs.get(worker.name) or await worker_kubeconfig(api, worker, secrets_namespace)
    if kubeconfig is None:
        raise LogsUnavailable(f"worker {worker.name} {worker.unreadable}")
    selector = selector_for(request.selector, request.namespace, request.name)
    async with await api_client_from_kubeconfig(kubeconfig) as client:
        found = await core.pods(client, request.namespace, selector)
        targets = [(p["metadata"]["name"], c) for p in found for c in containers(p, request.container)]
        if not targets:
            what = f"container {request.container} in " if request.container and found else ""
            if not found and finished(view):
                raise LogsUnavailable(f"{why(view)}; its pods on worker {worker.name} are gone (the kind's retention "
                                      "keeps a finished run's object, and its pods, for a while)")  # fmt: skip
            raise LogsUnavailable(f"no {what}pods of {view.gvk.kind} {request.namespace}/{request.name} on worker "
                                  f"{worker.name} (selector {selector}): {why(view)}")  # fmt: skip
        async with anyio.create_task_group() as tg:
            for pod, container in targets:
                tg.start_soon(_one, client, request, pod, container, out, len(targets) > 1)


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
