"""``multikueue workers``: the fleet at a glance. Each worker's MultiKueueCluster (connection, credential expiry,
labels), the configured kinds it serves, and its Kueue's ClusterQueues (usage against nominal quota per flavor and
resource, Workloads pending and admitted), read from the workers with the user's own access to their Secrets, as
``status`` reads them. What cannot be read is said on that worker's line, in one line, and the others are still
shown; MultiKueueClusters the user may not list leave only the workers given with ``--worker-kubeconfig``.
``render`` and ``as_json`` are pure."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from multikueue.clusterqueues import Queue, queue_of
from multikueue.commands.run_document import API_VERSION
from multikueue.commands.run_text import one_line
from multikueue.commands.status import WorkerView, worker_kubeconfig
from multikueue.kube.addresses import CLUSTER_QUEUES, MULTIKUEUE_CLUSTERS, GroupVersionKind
from multikueue.kube.client import api_client_from_kubeconfig
from multikueue.kube.discovery import KindUnavailable, discover_resource
from multikueue.kube.errors import NO_ANSWER, ApiError, CredentialsUnavailable, KubeconfigError, describe
from multikueue.kube.resources import Objects
from multikueue.labels import CREDENTIALS_EXPIRY_ANNOTATION

Object = dict[str, Any]


@dataclass
class Fleet:
    name: str
    connected: str  # the MultiKueueCluster's Active condition: "True", "False" or "Unknown"
    reason: str = ""
    message: str = ""
    credentials_expire: str | None = None  # as the dispatcher recorded it on the MultiKueueCluster
    labels: dict[str, str] = field(default_factory=dict)
    kinds: dict[str, bool] = field(default_factory=dict)  # configured kind -> served there
    queues: list[Queue] = field(default_factory=list)
    unreadable: str = ""  # why the worker itself could not be read ("" when it was)
    cluster_unreadable: str = ""  # why its MultiKueueCluster could not be read ("" when it was)


async def gather(api: Any, secrets_namespace: str, kinds: list[GroupVersionKind],
                 given: dict[str, Object] | None = None) -> list[Fleet]:  # fmt: skip
    """Every MultiKueueCluster on the manager and, read with the user's access, its worker. ``LookupError`` (one
    line) when MultiKueueClusters cannot be listed and no worker is given."""
    fleet = []
    for entry in await _entries(api, given or {}):
        view = WorkerView(entry.name)
        kubeconfig = (given or {}).get(entry.name) or await worker_kubeconfig(api, view, secrets_namespace)
        if kubeconfig is None:
            entry.unreadable = view.unreadable
        else:
            await _read_worker(entry, kubeconfig, kinds)
        fleet.append(entry)
    return fleet


async def _entries(api: Any, given: dict[str, Object]) -> list[Fleet]:
    try:
        clusters = await Objects(api, MULTIKUEUE_CLUSTERS).items()
    except ApiError as e:
        why = f"MultiKueueClusters cannot be listed with your credentials ({describe(e)})"
        if not given:
            raise LookupError(f"{why}; give your own access to workers: --worker-kubeconfig WORKER=PATH") from None
        return [Fleet(name, "Unknown", cluster_unreadable=why) for name in sorted(given)]
    return [from_cluster(c) for c in sorted(clusters, key=lambda c: c["metadata"]["name"])]


def from_cluster(cluster: Object) -> Fleet:
    meta = cluster["metadata"]
    conditions = (cluster.get("status") or {}).get("conditions") or []
    active: Object = next((c for c in conditions if c.get("type") == "Active"), {})
    return Fleet(meta["name"], str(active.get("status") or "Unknown"), str(active.get("reason") or ""),
                 str(active.get("message") or ""), (meta.get("annotations") or {}).get(CREDENTIALS_EXPIRY_ANNOTATION),
                 dict(meta.get("labels") or {}))  # fmt: skip


async def _read_worker(entry: Fleet, kubeconfig: Object, kinds: list[GroupVersionKind]) -> None:
    try:
        async with await api_client_from_kubeconfig(kubeconfig) as worker:
            for gvk in kinds:
                try:
                    await discover_resource(worker, gvk)
                    entry.kinds[f"{gvk.kind}.{gvk.version}.{gvk.group}"] = True
                except KindUnavailable:
                    entry.kinds[f"{gvk.kind}.{gvk.version}.{gvk.group}"] = False
            try:
                queues = await Objects(worker, CLUSTER_QUEUES).items()
            except ApiError as e:
                entry.unreadable = f"ClusterQueues cannot be read: {describe(e)}"
                return
            entry.queues = [queue_of(q) for q in sorted(queues, key=lambda q: q["metadata"]["name"])]
    except (ApiError, CredentialsUnavailable, *NO_ANSWER) as e:  # type: ignore[misc]
        entry.unreadable = f"cannot be read: {describe(e)}"
    except KubeconfigError as e:  # one worker's unusable kubeconfig: said there, the fleet still shown
        entry.unreadable = f"its kubeconfig cannot be used: {e}"


def render(fleet: list[Fleet]) -> str:
    if not fleet:
        return "no MultiKueueClusters on the manager"
    lines: list[str] = []
    for worker in fleet:
        lines.extend(_worker_lines(worker))
    return "\n".join(lines)


def _worker_lines(worker: Fleet) -> list[str]:
    connection = f"Active={worker.connected}" + (f" {worker.reason}" if worker.reason else "")
    said = worker.cluster_unreadable or worker.message  # another controller's message may span lines: one here
    lines = [f"worker {worker.name}: {connection}" + (f": {one_line(said)}" if said else "")]
    if worker.labels:
        lines.append("  labels: " + ", ".join(f"{k}={v}" for k, v in sorted(worker.labels.items())))
    lines.append(f"  credentials expire: {worker.credentials_expire or 'not known (no expiry recorded)'}")
    if worker.unreadable:
        return [*lines, f"  worker: {one_line(worker.unreadable)}"]
    if worker.kinds:
        served = [f"{k}{'' if ok else ' (not served)'}" for k, ok in worker.kinds.items()]
        lines.append("  kinds: " + ", ".join(served))
    if not worker.queues:
        lines.append("  ClusterQueues: none")
    for queue in worker.queues:
        lines.append(f"  ClusterQueue {queue.name}: {queue.pending} pending, {queue.reserving} reserving, "
                     f"{queue.admitted} admitted")  # fmt: skip
        lines.extend(f"    {u.flavor} {u.resource}: {u.used} of {u.nominal}" for u in queue.usage)
    return lines


def as_json(fleet: list[Fleet]) -> dict[str, Any]:
    """``-o json``: a List-shaped document, one item per worker, as scripts read kubectl's."""
    return {"apiVersion": API_VERSION, "kind": "WorkerList", "items": [asdict(worker) for worker in fleet]}
