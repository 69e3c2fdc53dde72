"""This controller's writes to a manager Workload's status (its check's state and message, the recorded winner,
``Finished``) and the Events it records on the Workload and its object: one writer, shared by every step.

Every status write is a merge patch guarded by the Workload's resourceVersion (Kueue's ``WorkloadRequestUseMergePatch``
mode): a conflict fails the pass, whose retry starts from fresh state. The answer goes into the informer at once, so
the next pass reads its own write.
"""

from __future__ import annotations

from typing import Any

import structlog

from multikueue.dispatch import workload_state as wl
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.kube import events
from multikueue.kube.addresses import WORKLOADS
from multikueue.kube.client import ApiClient
from multikueue.kube.conditions import now_rfc3339, set_condition
from multikueue.kube.resources import Objects
from multikueue.metrics import Metrics
from multikueue.runtime.informer import Informer, ObjectKey

log = structlog.get_logger(__name__)
Object = dict[str, Any]
EVENT_REASON = "MultiKueue"
MESSAGE_LIMIT = 32768


class CheckStatus:
    def __init__(self, api: ApiClient, workloads: Informer, controller_name: str, metrics: Metrics | None,
                 *, routine_records: bool = True) -> None:  # fmt: skip
        self.api = api
        self.routine_records = routine_records  # the Normal Event of each admission (``dispatcher.routineRecords``)
        self.workloads = workloads  # the manager's Workloads: each write's answer is remembered there
        self.controller_name = controller_name
        self.metrics = metrics
        self._api = Objects(api, WORKLOADS)

    async def set_check(
        self, workload: Object, check_name: str, new_state: str, message: str, *, separator: str = ", "
    ) -> None:
        """Set this controller's check state; the message ends with the previous state, as Kueue's does."""
        current = wl.check_state(workload, check_name) or {}
        previous = current.get("state", wl.PENDING)
        full = f'{message}{separator}Previously: "{previous}"'[:MESSAGE_LIMIT]
        if current.get("state") == new_state and current.get("message") == full:
            return
        entry = {"name": check_name, "state": new_state, "message": full, "lastTransitionTime": now_rfc3339()}
        await self.patch(workload, {"admissionChecks": _with_check(workload, entry)})
        if new_state == wl.RETRY and self.metrics is not None:
            owner = wl.owner(workload)
            where = (workload.get("status") or {}).get("clusterName") or ""
            self.metrics.objects_redispatched.labels(owner[0].kind if owner else "", where).inc()
        log.info("admission check updated", workload=str(ObjectKey.of(workload)), state=new_state, message=full)

    async def set_message(self, workload: Object, check_name: str, message: str) -> bool:
        """Set this controller's check message, its state unchanged; whether it changed."""
        current = wl.check_state(workload, check_name) or {}
        message = message[:MESSAGE_LIMIT]
        if current.get("message", "") == message:
            return False
        entry = {**current, "name": check_name, "state": current.get("state", wl.PENDING), "message": message}
        entry.setdefault("lastTransitionTime", now_rfc3339())
        await self.patch(workload, {"admissionChecks": _with_check(workload, entry)})
        return True

    async def set_admitted(self, workload: Object, check_name: str, state: Object, cluster: str) -> Object:
        """Record the winner: the check ``Ready``, ``status.clusterName``, nominations cleared (as Kueue's
        ``syncAdmittingRemoteState``). Returns the Workload as written (unchanged when already recorded)."""
        status = workload.get("status") or {}
        if state.get("state") == wl.READY and status.get("clusterName") == cluster:
            return workload
        if status.get("clusterName") not in (None, "", cluster):
            raise RuntimeError(f"clusterName is already {status['clusterName']!r}, cannot record {cluster!r}")
        if not status.get("clusterName") and cluster not in (status.get("nominatedClusterNames") or []):
            # Kueue's webhook takes a clusterName only from the nominations already recorded, and a winner can lie
            # outside them (a replica that took over nominated before that worker was connected again): nominate
            # the winner alone first, as Kueue does for a worker its component Workloads already run on.
            workload = await self.patch(workload, {"nominatedClusterNames": [cluster]})
        message = admitted_message(cluster)
        entry = {"name": check_name, "state": wl.READY, "message": message, "lastTransitionTime": now_rfc3339()}
        workload = await self.patch(
            workload,
            {"admissionChecks": _with_check(workload, entry), "clusterName": cluster, "nominatedClusterNames": None},
        )
        if self.routine_records:
            await self.event(workload, "Normal", message)
        log.info("workload admitted on worker", workload=str(ObjectKey.of(workload)), cluster=cluster)
        if self.metrics is not None and state.get("state") != wl.READY:
            self.metrics.workloads_admitted.labels(cluster_queue(workload), cluster).inc()
        return workload

    async def finish(self, workload: Object, reason: str, message: str) -> None:
        condition = {"type": wl.FINISHED, "status": "True", "reason": reason or "Finished",
                     "message": message or "finished on the worker", "lastTransitionTime": now_rfc3339()}  # fmt: skip
        current = (workload.get("status") or {}).get("conditions") or []
        await self.patch(workload, {"conditions": set_condition(current, condition)})
        log.info("workload finished", workload=str(ObjectKey.of(workload)), reason=reason)

    async def patch(self, workload: Object, status: Object) -> Object:
        """A merge patch on the manager Workload's ``/status``, guarded by its resourceVersion.

        Lists go whole (rebuilt from the object just read), so the precondition is what keeps another writer's
        entries: a conflict (409) fails this reconcile and the retry starts from fresh state. This is Kueue's
        ``WorkloadRequestUseMergePatch`` mode; a server-side apply as ``kueue-admission`` with a partial status
        would instead drop every other field Kueue's core owns under that manager.
        """
        meta = workload["metadata"]
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"]}, "status": status}
        updated = await self._api.patch_status(meta["name"], patch, meta["namespace"])
        self.workloads.remember(updated)
        return updated

    async def object_event(
        self, adapter: GenericAdapter, obj: Object, type_: str, message: str, *, reason: str = EVENT_REASON
    ) -> None:
        """An Event on the manager object itself, where its user looks first."""
        target = {**obj, "apiVersion": adapter.gvk.api_version, "kind": adapter.gvk.kind}
        await events.record(self.api, target, type_=type_, reason=reason, message=message,
                            component=self.controller_name)  # fmt: skip

    async def event(self, workload: Object, type_: str, message: str) -> None:
        obj = {**workload, "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload"}
        await events.record(self.api, obj, type_=type_, reason=EVENT_REASON, message=message,
                            component=self.controller_name)  # fmt: skip


def admitted_message(cluster: str) -> str:
    """The check's message while the run is on its worker, as Kueue writes it."""
    return f'The workload was admitted on "{cluster}"'


def _with_check(workload: Object, entry: Object) -> list[Object]:
    """The Workload's admission-check states with ``entry`` replacing the one of the same name."""
    states = [dict(s) for s in (workload.get("status") or {}).get("admissionChecks") or []]
    for i, state in enumerate(states):
        if state.get("name") == entry["name"]:
            states[i] = {**state, **entry}
            return states
    return [*states, entry]


def cluster_queue(workload: Object) -> str:
    return str(((workload.get("status") or {}).get("admission") or {}).get("clusterQueue", ""))
