"""``multikueue status KIND NAMESPACE/NAME``: one run seen across clusters, and why it waits, in words or as a
``RunStatus`` document (``-o json``).

``gather`` reads (through ``kube/``, with the user's own credentials on the manager) the manager object, its
Workload, the workers it is nominated to or placed on and, on each, the Workload copy, the object copy and their
Events; a worker is read with the kubeconfig Secret of its MultiKueueCluster, only if the user may read that
Secret. What cannot be read degrades where it is: a worker's line, or one manager line (Workloads, Events), never
the whole command; only the run itself must be readable. The verdicts (``run_view``), the document
(``run_document``) and the text (``run_text``) are pure.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

from multikueue import owners
from multikueue.clusters.worker_kubeconfig import KubeconfigNotYaml, KubeconfigRejected, validate_kubeconfig
from multikueue.commands.run_document import document
from multikueue.commands.run_text import status_text
from multikueue.commands.run_view import RunView, WorkerView, finished, why, workers_of
from multikueue.dispatch.placement_record import avoided, placement_record
from multikueue.kube import core
from multikueue.kube.addresses import MULTIKUEUE_CLUSTERS, WORKLOADS, GroupVersionKind
from multikueue.kube.client import ApiClient, api_client_from_kubeconfig
from multikueue.kube.discovery import KindUnavailable, discover_resource
from multikueue.kube.errors import NO_ANSWER, ApiError, KubeconfigError, KubeError, describe
from multikueue.kube.kubeconfig import access_from_kubeconfig
from multikueue.kube.resources import Objects

__all__ = ["RunView", "WorkerView", "as_json", "finished", "gather", "render", "why", "worker_kubeconfig",
           "workers_of"]  # fmt: skip

Object = dict[str, Any]
SECRET_KEY = "kubeconfig"  # the key Kueue reads in a MultiKueueCluster's Secret
NOT_READ = "not read by `multikueue explain` (`multikueue status` reads the workers)"


# ---------------------------------------------------------------------------------------------- reading


async def gather(api: ApiClient, gvk: GroupVersionKind, namespace: str, name: str, secrets_namespace: str,
                 worker_kubeconfigs: Mapping[str, Object] | None = None, *,
                 read_workers: bool = True) -> RunView:  # fmt: skip
    """Everything ``status`` shows; a worker that cannot be read says why instead. ``worker_kubeconfigs``: the
    user's own access to some workers, used instead of their Secrets (whose servers may be addresses only the
    manager's pods reach). ``read_workers=False`` (``explain``): the manager only, each worker marked not read."""
    view = RunView(gvk, namespace, name)
    try:
        resource = await discover_resource(api, gvk)
    except KindUnavailable as e:
        raise LookupError(f"{gvk.kind}.{gvk.version}.{gvk.group}: {e} on the manager") from None
    view.obj = await Objects(api, resource).get(name, namespace)
    if view.obj is None:
        return view
    view.placement, view.avoided = placement_record(view.obj), avoided(view.obj)
    names = {name} | await _workload(api, view)
    try:
        view.events = await core.events_about(api, namespace, names)
    except ApiError as e:
        view.unreadable["Events"] = f"with your credentials ({describe(e)})"
    for worker in workers_of(view):
        if not read_workers:
            view.workers.append(WorkerView(worker, unreadable=NOT_READ))
            continue
        given = (worker_kubeconfigs or {}).get(worker)
        view.workers.append(await _worker(api, worker, view, names, secrets_namespace, given))
    return view


async def _workload(api: ApiClient, view: RunView) -> set[str]:
    """The run's Workload on the manager, if the user may list them; its name, to find its Events."""
    uid = (view.obj or {})["metadata"]["uid"]
    try:
        mine = [w for w in await Objects(api, WORKLOADS).items(view.namespace) if uid in owners.owner_uids(w)]
    except ApiError as e:
        view.unreadable["Workloads"] = f"with your credentials ({describe(e)})"
        return set()
    view.workload = mine[0] if mine else None
    return {view.workload["metadata"]["name"]} if view.workload else set()


async def _worker(api: ApiClient, name: str, view: RunView, names: set[str], secrets_namespace: str,
                  given: Object | None) -> WorkerView:  # fmt: skip
    result = WorkerView(name)
    kubeconfig = given if given is not None else await worker_kubeconfig(api, result, secrets_namespace)
    if kubeconfig is None:
        return result
    try:
        async with await api_client_from_kubeconfig(kubeconfig) as worker:
            await _read_worker(worker, result, view, names)
    except NO_ANSWER as e:
        server = access_from_kubeconfig(kubeconfig).server
        result.unreadable = (f"cannot be reached at {server}: {describe(e)}; if only the manager's pods reach that "
                             f"address, give your own access: --worker-kubeconfig {name}=PATH")  # fmt: skip
    except KubeError as e:  # refused, or no credential from the kubeconfig: one line
        result.unreadable = f"cannot be read: {describe(e)}"
    except KubeconfigError as e:  # one worker's unusable kubeconfig: said there, the others still read
        result.unreadable = f"its kubeconfig cannot be used: {e}"
    return result


async def _read_worker(worker: ApiClient, result: WorkerView, view: RunView, names: set[str]) -> None:
    if view.workload is not None:
        result.workload = await Objects(worker, WORKLOADS).get(view.workload["metadata"]["name"], view.namespace)
    try:
        resource = await discover_resource(worker, view.gvk)
        result.copy = await Objects(worker, resource).get(view.name, view.namespace)
    except KindUnavailable as e:
        result.unreadable = f"{view.gvk.kind} is not served there ({e})"
    result.events = await core.events_about(worker, view.namespace, names)


async def worker_kubeconfig(api: ApiClient, result: WorkerView, secrets_namespace: str) -> Object | None:
    """The worker's kubeconfig from its MultiKueueCluster's Secret, read with the user's own credentials; ``None``
    with ``result.unreadable`` saying why, in one line, when it cannot be had."""
    name = result.name
    try:
        cluster = await Objects(api, MULTIKUEUE_CLUSTERS).get(name)
    except ApiError as e:  # e.g. a user who may read runs but not MultiKueueClusters: this worker's line says so
        result.unreadable = f"cannot read its MultiKueueCluster with your credentials ({describe(e)})"
        return None
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
    where = f"{secrets_namespace}/{ref['location']}"
    try:
        secret = await core.read_secret(api, secrets_namespace, str(ref["location"]))
    except ApiError as e:
        result.unreadable = f"cannot read its Secret {where} with your credentials ({describe(e)})"
        return None
    return _kubeconfig_in(secret, where, result)


def _kubeconfig_in(secret: Object, where: str, result: WorkerView) -> Object | None:
    data = (secret.get("data") or {}).get(SECRET_KEY)
    if not data:
        result.unreadable = f"its Secret {where} has no key {SECRET_KEY}"
        return None
    try:
        return validate_kubeconfig(base64.b64decode(data, validate=True))
    except KubeconfigNotYaml as e:
        result.unreadable = f"kubeconfig Secret {where} key {SECRET_KEY} is not YAML: {e.problem}"
    except KubeconfigRejected as e:
        result.unreadable = f"its Secret {where} holds no usable kubeconfig: {e}"
    except binascii.Error as e:
        result.unreadable = f"its Secret {where} key {SECRET_KEY} is not base64: {e}"
    return None


# ------------------------------------------------------------------------------------------------- output


def as_json(view: RunView) -> Object:
    """``-o json``: the ``RunStatus`` document."""
    return document(view)


def render(view: RunView) -> str:
    """The text, rendered from the same document ``-o json`` prints."""
    return status_text(document(view))
