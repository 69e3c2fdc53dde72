"""``multikueue status KIND NAMESPACE/NAME``: one run seen across clusters, and why it waits, in words.

``gather`` reads (through ``kube/``, with the user's own credentials on the manager) the manager object, its
Workload, the workers it is nominated to or placed on and, on each, the Workload copy, the object copy and their
Events; a worker is read with the kubeconfig Secret of its MultiKueueCluster, only if the user may read that
Secret. ``why`` and ``render`` are pure: the verdict and the text, from what was gathered.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from multikueue import owners
from multikueue.clusters.worker_kubeconfig import validate_kubeconfig
from multikueue.dispatch.placement import NO_WORKER_MATCHES
from multikueue.kube import core
from multikueue.kube.addresses import MULTIKUEUE_CLUSTERS, WORKLOADS, GroupVersionKind
from multikueue.kube.client import ApiClient, api_client_from_kubeconfig
from multikueue.kube.conditions import find
from multikueue.kube.discovery import KindUnavailable, discover_resource
from multikueue.kube.errors import NO_ANSWER, ApiError, CredentialsUnavailable, describe
from multikueue.kube.kubeconfig import access_from_kubeconfig
from multikueue.kube.resources import Objects
from multikueue.labels import ADMITTED, EVICTED, FINISHED, PLACEMENT_PHASE, PLACEMENT_WORKER, QUOTA_RESERVED

Object = dict[str, Any]
SECRET_KEY = "kubeconfig"  # the key Kueue reads in a MultiKueueCluster's Secret
EVENTS_SHOWN = 20


@dataclass
class WorkerView:
    name: str
    unreadable: str = ""  # why the worker could not be read ("" when it was)
    workload: Object | None = None  # this run's Workload copy there
    copy: Object | None = None  # this run's object there
    events: list[Object] = field(default_factory=list)


@dataclass
class RunView:
    gvk: GroupVersionKind
    namespace: str
    name: str
    obj: Object | None = None
    workload: Object | None = None
    workers: list[WorkerView] = field(default_factory=list)
    events: list[Object] = field(default_factory=list)  # the manager's, about the object and its Workload


# ---------------------------------------------------------------------------------------------- reading


async def gather(api: ApiClient, gvk: GroupVersionKind, namespace: str, name: str, secrets_namespace: str,
                 worker_kubeconfigs: Mapping[str, Object] | None = None) -> RunView:  # fmt: skip
    """Everything ``status`` shows; a worker that cannot be read says why instead. ``worker_kubeconfigs``: the
    user's own access to some workers, used instead of their Secrets (whose servers may be addresses only the
    manager's pods reach)."""
    view = RunView(gvk, namespace, name)
    try:
        resource = await discover_resource(api, gvk)
    except KindUnavailable as e:
        raise LookupError(f"{gvk.kind}.{gvk.version}.{gvk.group}: {e} on the manager") from None
    view.obj = await Objects(api, resource).get(name, namespace)
    if view.obj is None:
        return view
    uid = view.obj["metadata"]["uid"]
    mine = [w for w in await Objects(api, WORKLOADS).items(namespace) if uid in owners.owner_uids(w)]
    view.workload = mine[0] if mine else None
    names = {name} | ({view.workload["metadata"]["name"]} if view.workload else set())
    view.events = await core.events_about(api, namespace, names)
    for worker in workers_of(view):
        given = (worker_kubeconfigs or {}).get(worker)
        view.workers.append(await _worker(api, worker, view, names, secrets_namespace, given))
    return view


def workers_of(view: RunView) -> list[str]:
    """The workers the run is on or may go to: the one it runs on, else those nominated, else (direct mode) the
    one its placement names."""
    status = (view.workload or {}).get("status") or {}
    if status.get("clusterName"):
        return [str(status["clusterName"])]
    if status.get("nominatedClusterNames"):
        return [str(c) for c in status["nominatedClusterNames"]]
    placed = ((view.obj or {}).get("metadata", {}).get("annotations") or {}).get(PLACEMENT_WORKER)
    return [placed] if placed else []


async def _worker(api: ApiClient, name: str, view: RunView, names: set[str], secrets_namespace: str,
                  given: Object | None) -> WorkerView:  # fmt: skip
    result = WorkerView(name)
    kubeconfig = given if given is not None else await worker_kubeconfig(api, result, secrets_namespace)
    if kubeconfig is None:
        return result
    try:
        async with await api_client_from_kubeconfig(kubeconfig) as worker:
            if view.workload is not None:
                result.workload = await Objects(worker, WORKLOADS).get(
                    view.workload["metadata"]["name"], view.namespace
                )
            try:
                resource = await discover_resource(worker, view.gvk)
                result.copy = await Objects(worker, resource).get(view.name, view.namespace)
            except KindUnavailable as e:
                result.unreadable = f"{view.gvk.kind} is not served there ({e})"
            result.events = await core.events_about(worker, view.namespace, names)
    except ApiError as e:
        result.unreadable = f"cannot be read: {describe(e)}"
    except CredentialsUnavailable as e:
        result.unreadable = f"cannot be read: {describe(e)}"
    except NO_ANSWER as e:
        server = access_from_kubeconfig(kubeconfig).server
        result.unreadable = (f"cannot be reached at {server}: {describe(e)}; if only the manager's pods reach that "
                             f"address, give your own access: --worker-kubeconfig {name}=PATH")  # fmt: skip
    return result


async def worker_kubeconfig(api: ApiClient, result: WorkerView, secrets_namespace: str) -> Object | None:
    """The worker's kubeconfig from its MultiKueueCluster's Secret, read with the user's own credentials; ``None``
    with ``result.unreadable`` saying why when it cannot be had."""
    name = result.name
    cluster = await Objects(api, MULTIKUEUE_CLUSTERS).get(name)
    source = ((cluster or {}).get("spec") or {}).get("clusterSource") or {}
    ref = source.get("kubeConfig") or {}
    profile = (source.get("clusterProfileRef") or {}).get("name")
    if profile:  # the dispatcher's access provider is its own configuration, not something to run for a user
        result.unreadable = (f"reached through ClusterProfile {profile} by the dispatcher's access provider: give "
                             f"your own access: --worker-kubeconfig {name}=PATH")  # fmt: skip
        return None
    if not ref.get("location"):
        result.unreadable = f"no MultiKueueCluster {name} with a kubeconfig Secret on the manager"
        return None
    where = f"Secret {secrets_namespace}/{ref['location']}"
    try:
        secret = await core.read_secret(api, secrets_namespace, str(ref["location"]))
        return validate_kubeconfig(base64.b64decode((secret.get("data") or {}).get(SECRET_KEY) or ""))
    except ApiError as e:
        result.unreadable = f"cannot read its {where} with your credentials ({describe(e)})"
    except ValueError as e:  # KubeconfigRejected, bad base64
        result.unreadable = f"its {where} holds no usable kubeconfig: {e}"
    return None


# ----------------------------------------------------------------------------------------- the verdict


def _condition(obj: Object | None, kind: str) -> Object:
    return find(((obj or {}).get("status") or {}).get("conditions"), kind) or {}


def _is(obj: Object | None, kind: str) -> bool:
    return _condition(obj, kind).get("status") == "True"


def finished(view: RunView) -> bool:
    """The run is over (Kueue mode: its Workload finished; Direct mode: its phase)."""
    notes = ((view.obj or {}).get("metadata") or {}).get("annotations") or {}
    return _is(view.workload, FINISHED) or notes.get(PLACEMENT_PHASE) in ("Finished", "Failed")


def why(view: RunView) -> str:
    """Where the run stands, in one sentence a user can act on."""
    if view.obj is None:
        return f"{view.gvk.kind} {view.namespace}/{view.name} does not exist on the manager"
    if view.workload is None:
        return _without_workload(view)
    workload = view.workload
    if _is(workload, FINISHED):
        finished = _condition(workload, FINISHED)
        return f"finished ({finished.get('reason')}): {finished.get('message')}"
    if _is(workload, EVICTED):
        return (
            f"evicted ({_condition(workload, EVICTED).get('reason')}): {_condition(workload, EVICTED).get('message')}"
        )
    if not _is(workload, QUOTA_RESERVED):
        reserved = _condition(workload, QUOTA_RESERVED)
        return f"waiting for quota on the manager: {reserved.get('message') or 'not looked at by Kueue yet'}"
    status = workload.get("status") or {}
    if status.get("clusterName"):
        return _running(view, str(status["clusterName"]))
    return _waiting_for_a_worker(view)


def _without_workload(view: RunView) -> str:
    notes = (view.obj or {}).get("metadata", {}).get("annotations") or {}
    if notes.get(PLACEMENT_WORKER):
        return f"placed on {notes[PLACEMENT_WORKER]} (direct mode), {notes.get(PLACEMENT_PHASE) or 'being created'}"
    if notes.get(PLACEMENT_PHASE):  # ended before any placement: no worker could ever run it
        return f"{notes[PLACEMENT_PHASE]} without a worker (direct mode); `multikueue explain` tells why"
    return ("no Workload: not queued (no kueue.x-k8s.io/queue-name label), not managed by Kueue, or not looked at "
            "yet; `multikueue explain` tells a direct-mode placement")  # fmt: skip


def _running(view: RunView, worker: str) -> str:
    where = next((w for w in view.workers if w.name == worker), WorkerView(worker))
    if where.unreadable:
        return f"admitted on {worker}; that worker {where.unreadable}"
    if where.copy is None:
        return f"admitted on {worker}; its copy is not created there yet"
    return f"admitted on {worker}, running there: {_state(where.copy)}"


def _waiting_for_a_worker(view: RunView) -> str:
    checks = ((view.workload or {}).get("status") or {}).get("admissionChecks") or []
    blocking = [c for c in checks if c.get("state") in ("Retry", "Rejected")]
    if blocking:
        return "; ".join(f"admission check {c.get('name')} is {c.get('state')}: {c.get('message')}" for c in blocking)
    unmatched = next((m for c in checks if (m := str(c.get("message") or "")).startswith(NO_WORKER_MATCHES)), None)
    if unmatched:
        return f"sent to no worker: {unmatched}"
    if not view.workers:
        pending = [
            f"{c.get('name')}: {c.get('message') or c.get('state')}" for c in checks if c.get("state") != "Ready"
        ]
        return "waiting to be sent to a worker" + (f" ({'; '.join(pending)})" if pending else "")
    return "waiting for a worker's Kueue to admit it: " + "; ".join(_worker_wait(w) for w in view.workers)


def _worker_wait(worker: WorkerView) -> str:
    if worker.unreadable:
        return f"{worker.name} {worker.unreadable}"
    if worker.workload is None:
        return f"{worker.name}: its Workload copy is not there yet"
    reserved = _condition(worker.workload, QUOTA_RESERVED)
    if reserved.get("status") == "True" and not _is(worker.workload, ADMITTED):
        return f"{worker.name}: quota reserved, waiting for its admission checks"
    return f"{worker.name}: {reserved.get('message') or 'not looked at by its Kueue yet'}"


def _state(obj: Object) -> str:
    """The object's own conditions, as ``type=status (reason)``; its kind decides what they mean."""
    rows = ((obj.get("status") or {}).get("conditions")) or []
    return ", ".join(f"{c.get('type')}={c.get('status')} ({c.get('reason')})" for c in rows) or "no conditions yet"


# ------------------------------------------------------------------------------------------------- text


def render(view: RunView) -> str:
    lines = [f"{view.gvk.kind} {view.namespace}/{view.name}", f"  why: {why(view)}"]
    if view.obj is None:
        return "\n".join(lines)
    lines.append(f"  manager object: {_state(view.obj)}")
    if view.workload is not None:
        lines.extend(_workload_lines(view.workload))
    for worker in view.workers:
        lines.extend(_worker_lines(worker))
    lines.extend(_event_lines(view))
    return "\n".join(lines)


def _quota(workload: Object) -> str:
    reserved = _condition(workload, QUOTA_RESERVED)
    if not reserved:
        return "not looked at by Kueue yet"
    return f"{reserved.get('status')} {reserved.get('reason')}: {reserved.get('message', '')}"


def _workload_lines(workload: Object) -> list[str]:
    status = workload.get("status") or {}
    queue = (workload.get("spec") or {}).get("queueName")
    cluster_queue = (status.get("admission") or {}).get("clusterQueue") or "-"
    lines = [f"  Workload {workload['metadata']['name']}: queue {queue}, ClusterQueue {cluster_queue}",
             f"    quota: {_quota(workload)}"]  # fmt: skip
    checks = status.get("admissionChecks") or []
    lines.extend(
        f"    check {c.get('name')}: {c.get('state')}" + (f": {c['message']}" if c.get("message") else "")
        for c in checks
    )
    if status.get("nominatedClusterNames"):
        lines.append(f"    nominated: {', '.join(status['nominatedClusterNames'])}")
    if status.get("clusterName"):
        lines.append(f"    admitted on: {status['clusterName']}")
    return lines


def _worker_lines(worker: WorkerView) -> list[str]:
    if worker.unreadable:
        return [f"  worker {worker.name}: {worker.unreadable}"]
    lines = [f"  worker {worker.name}:"]
    if worker.workload is None:
        lines.append("    Workload copy: not there")
    else:
        admitted = "admitted" if _is(worker.workload, ADMITTED) else "not admitted"
        lines.append(f"    Workload copy: {admitted}; quota: {_quota(worker.workload)}")
    lines.append(f"    object: {_state(worker.copy) if worker.copy is not None else 'not created'}")
    return lines


def _event_lines(view: RunView) -> list[str]:
    rows = [("manager", e) for e in view.events] + [(w.name, e) for w in view.workers for e in w.events]
    rows.sort(key=lambda row: _event_time(row[1]))
    if not rows:
        return []
    lines = ["  events (oldest first):"]
    for where, event in rows[-EVENTS_SHOWN:]:
        involved = event.get("involvedObject") or {}
        lines.append(f"    {_event_time(event)} {where} {involved.get('kind')}/{involved.get('name')} "
                     f"{event.get('type')} {event.get('reason')}: {event.get('message')}")  # fmt: skip
    return lines


def _event_time(event: Object) -> str:
    return str(event.get("lastTimestamp") or event.get("eventTime") or event.get("firstTimestamp") or "")
