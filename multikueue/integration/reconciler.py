"""The integration's controller: per queued object, one ``lifecycle.decide`` step carried out against the API.

It runs on whichever cluster the objects are on: the manager (Workloads for Kueue and its MultiKueue) and, with
``multikueue run --role worker``, each worker (adopting the Workloads MultiKueue prebuilds there).
"""

from __future__ import annotations

import contextlib
from typing import Any

import structlog

from multikueue import owners
from multikueue.config import Configuration, Integration
from multikueue.integration import podsetinfo, workload_spec
from multikueue.integration.lifecycle import (
    Decision,
    Step,
    changed_object,
    decide,
    finished_message,
    finished_status,
    object_patch,
    pods_ready_status,
    released_status,
)
from multikueue.kube import events
from multikueue.kube.addresses import KUEUE, RESOURCE_FLAVORS, WORKLOADS, GroupVersionKind, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import ApiError, Conflict, NotFound, describe
from multikueue.kube.resources import Objects
from multikueue.labels import PRIORITY_CLASS_LABEL, RESOURCE_IN_USE_FINALIZER
from multikueue.runtime.controller import Result
from multikueue.runtime.informer import DELETED, Informer, ObjectKey
from multikueue.runtime.signal import Signal
from multikueue.runtime.watches import KindChange, Watch

log = structlog.get_logger(__name__)
Object = dict[str, Any]
IntegrationKey = tuple[GroupVersionKind, ObjectKey]

WORKLOAD_PRIORITY_CLASSES = Resource(KUEUE, "v1beta2", "workloadpriorityclasses", "WorkloadPriorityClass",
                                     namespaced=False)  # fmt: skip
FAILED_TO_START = "FailedToStart"  # Kueue's Finished reason when an admission cannot be written into the job
PREBUILT_RECHECK = 30.0  # a copy whose prebuilt Workload is late: looked at again (its creation wakes it first)


class IntegrationReconciler:
    def __init__(self, config: Configuration, api: ApiClient, kinds: dict[GroupVersionKind, tuple[Informer, Resource]],
                 workload_informer: Informer) -> None:  # fmt: skip
        self.config = config
        self.api = api
        self.kinds = kinds  # the integrated kinds served so far
        self.integrated = frozenset(config.integrations)
        self.workload_informer = workload_informer
        self.workloads = Objects(api, WORKLOADS)
        self.priorities = Objects(api, WORKLOAD_PRIORITY_CLASSES)
        self.flavors = Objects(api, RESOURCE_FLAVORS)
        self._said: dict[IntegrationKey, str] = {}  # the last composition error said on an object: said once
        self._awaiting: dict[
            ObjectKey, IntegrationKey
        ] = {}  # a prebuilt Workload not made yet -> the copy that names it

    def watches(self, kinds: Signal[KindChange]) -> list[Watch[IntegrationKey]]:
        """What brings an integrated object to this controller (``kinds``: the configured kinds' events)."""
        return [
            Watch("objects of integrated kinds", kinds,
                  lambda e: [(e.gvk, ObjectKey.of(e.change.obj))] if e.gvk in self.integrated else []),
            Watch("Workloads: the object controlling one, or a copy waiting for the prebuilt one it names",
                  self.workload_informer, lambda c: self.keys_of(c.type, c.obj)),
        ]  # fmt: skip

    def keys_of(self, kind: str, workload: Object) -> list[IntegrationKey]:
        """The keys of the objects a Workload event concerns: its controller owner, and a copy waiting for it."""
        key = ObjectKey.of(workload)
        keys: list[IntegrationKey] = []
        if kind != DELETED and (waiting := self._awaiting.pop(key, None)) is not None:
            keys.append(waiting)  # the copy that was waiting for this prebuilt Workload: at once, not at the recheck
        for ref in owners.controller_refs(workload):
            api_group = ref.get("apiVersion", "").split("/")[0]
            owned = ObjectKey(key.namespace, ref.get("name", ""))
            keys.extend((g, owned) for g in self.kinds if (g.kind, g.group) == (ref.get("kind", ""), api_group))
        return keys

    def _owned_by(self, gvk: GroupVersionKind, key: ObjectKey) -> list[ObjectKey]:
        return self.workload_informer.by_index(owners.BY_OWNER_NAME, (key.namespace, gvk.kind, key.name))

    def _workload_for(self, gvk: GroupVersionKind, obj: Object) -> Object | None:
        prebuilt = workload_spec.prebuilt_workload(obj)
        namespace = obj["metadata"]["namespace"]
        if prebuilt:
            return self.workload_informer.get(ObjectKey(namespace, prebuilt))
        for key in self.workload_informer.by_index(owners.BY_OWNER_UID, obj["metadata"]["uid"]):
            if key.namespace == namespace:
                return self.workload_informer.get(key)
        return None

    async def reconcile(self, key: IntegrationKey) -> Result | None:
        gvk, object_key = key
        informer, resource = self.kinds[gvk]
        obj = informer.get(object_key)
        if obj is None and await Objects(self.api, resource).get(object_key.name, object_key.namespace) is not None:
            # Not cached yet, yet there: a Workload's event can overtake its object's (two watches). The object's
            # own event brings it here again; "not in the cache" is never taken for "deleted".
            return None
        if obj is None or obj["metadata"].get("deletionTimestamp"):
            await self._object_gone(gvk, object_key)
            return None
        obj = {**obj, "apiVersion": gvk.api_version, "kind": gvk.kind}
        adapter = self.config.adapter(gvk)
        workload = self._workload_for(gvk, obj)
        decision = decide(obj, workload, adapter)
        if decision.step is not Step.NOTHING:
            log.info("integration step", kind=gvk.kind, object=str(object_key), step=decision.step.value,
                     why=decision.why, workload=workload["metadata"]["name"] if workload else None)  # fmt: skip
        return await self._carry_out(gvk, resource, obj, workload, decision)

    async def _carry_out(self, gvk: GroupVersionKind, resource: Resource, obj: Object, workload: Object | None,
                         decision: Decision) -> Result | None:  # fmt: skip
        step, meta = decision.step, obj["metadata"]
        integration = self.config.adapter(gvk).integration
        assert integration is not None
        if step is Step.NOTHING:
            return None
        if step is Step.WAIT_FOR_PREBUILT:
            self._awaiting[ObjectKey(meta["namespace"], workload_spec.prebuilt_workload(obj))] = (
                gvk,
                ObjectKey.of(obj),
            )
            return Result(requeue_after=PREBUILT_RECHECK)
        if step in (Step.HOLD, Step.MARK_HELD, Step.STOP, Step.RUN):
            await self._suspend_or_run((gvk, ObjectKey.of(obj)), resource, obj, workload, decision, integration)
            return None
        if step is Step.CREATE_WORKLOAD:
            return await self._create(gvk, obj, active=decision.active)
        assert workload is not None
        await self._change_workload(gvk, obj, workload, decision, integration)
        return None

    async def _change_workload(self, gvk: GroupVersionKind, obj: Object, workload: Object, decision: Decision,
                               integration: Integration) -> None:  # fmt: skip
        """The steps that write the Workload, each guarded by the version decided on."""
        step, wl_meta = decision.step, workload["metadata"]
        name, namespace = wl_meta["name"], wl_meta["namespace"]
        guard = {"resourceVersion": wl_meta["resourceVersion"]}
        if step is Step.ADOPT:
            refs = [r for r in wl_meta.get("ownerReferences") or [] if not r.get("controller")]
            patch = {"metadata": {**guard, "ownerReferences": [*refs, workload_spec.owner_reference(obj, gvk)],
                                  "labels": workload_spec.job_uid_labels(obj["metadata"]["uid"])}}  # fmt: skip
            await self.workloads.patch(name, patch, namespace)
        elif step in (Step.ACTIVATE, Step.DEACTIVATE, Step.UPDATE_QUEUE):
            spec = {"queueName": workload_spec.queue_name(obj)} if step is Step.UPDATE_QUEUE else {
                "active": step is Step.ACTIVATE}  # fmt: skip
            await self.workloads.patch(name, {"metadata": guard, "spec": spec}, namespace)
        elif step is Step.REMOVE_FINALIZER:
            await self._remove_finalizer(workload)
        elif step in (Step.FINISH, Step.OUT_OF_SYNC):
            if step is Step.OUT_OF_SYNC:
                reason, message = "OutOfSync", "The prebuilt workload is out of sync with its user job"
            else:
                reason = "Succeeded" if decision.succeeded else "Failed"
                message = finished_message(obj, integration) or f"{gvk.kind} {obj['metadata']['name']} finished"
            status = finished_status(workload, reason, message)
            await self.workloads.patch_status(name, {"metadata": guard, "status": status}, namespace)
            await self._event(obj, "Normal", "FinishedWorkload", f"Workload '{namespace}/{name}' is declared finished")
        elif step is Step.RELEASE:
            await self.workloads.patch_status(name, {"metadata": guard, "status": released_status(workload)}, namespace)
        elif step is Step.SET_PODS_READY:
            assert decision.condition is not None
            status = pods_ready_status(workload, decision.condition)
            await self.workloads.patch_status(name, {"metadata": guard, "status": status}, namespace)
        else:
            raise AssertionError(f"unhandled step {step}")

    async def _suspend_or_run(self, key: IntegrationKey, resource: Resource, obj: Object, workload: Object | None,
                              decision: Decision, integration: Integration) -> None:  # fmt: skip
        """HOLD, MARK_HELD, STOP or RUN in one write: the suspend field, and the pod templates (the admission merged
        into them on RUN, restored from the Workload when a running object is stopped or held)."""
        step, meta = decision.step, obj["metadata"]
        infos = None
        if workload is not None and step is Step.RUN:
            try:
                flavors = await self._flavors(workload)
            except (LookupError, ApiError) as e:  # retried; said once on the object
                why = describe(e) if isinstance(e, ApiError) else str(e)
                await self._say_once(key, obj, "FlavorUnavailable", f"admitted, but cannot start: {why}")
                raise
            infos = podsetinfo.on_admission(workload, flavors)
        elif workload is not None and step in (Step.STOP, Step.HOLD):
            infos = podsetinfo.from_workload(workload)
        try:
            changed = changed_object(obj, integration, step, infos)
        except podsetinfo.InvalidPodSetInfo as e:
            assert workload is not None
            await self._failed_to_start(obj, workload, str(e))
            return
        await Objects(self.api, resource).json_patch(meta["name"], object_patch(obj, changed), meta["namespace"])
        self._said.pop(key, None)
        reasons = {Step.HOLD: "Suspended", Step.MARK_HELD: "Suspended", Step.STOP: "Stopped", Step.RUN: "Started"}
        await self._event(obj, "Normal", reasons[step], decision.why)

    async def _say_once(self, key: IntegrationKey, obj: Object, reason: str, message: str) -> None:
        """A Warning on the object, not repeated while the same problem stays (retries would flood its Events)."""
        if self._said.get(key) != message:
            self._said[key] = message
            await self._event(obj, "Warning", reason, message)

    async def _flavors(self, workload: Object) -> dict[str, Object]:
        """The ResourceFlavors the admission names (a missing one fails the pass: retried, as Kueue does)."""
        found = {}
        for name in podsetinfo.flavors_of(workload):
            flavor = await self.flavors.get(name)
            if flavor is None:
                raise LookupError(f"ResourceFlavor {name!r} of Workload {ObjectKey.of(workload)} not found")
            found[name] = flavor
        return found

    async def _failed_to_start(self, obj: Object, workload: Object, message: str) -> None:
        """Kueue's answer to an admission that cannot be written into the object: the Workload finished."""
        meta = workload["metadata"]
        status = finished_status(workload, FAILED_TO_START, message)
        await self.workloads.patch_status(meta["name"], {"metadata": {"resourceVersion": meta["resourceVersion"]},
                                                         "status": status}, meta["namespace"])  # fmt: skip
        await self._event(obj, "Warning", FAILED_TO_START, message)

    async def _create(self, gvk: GroupVersionKind, obj: Object, *, active: bool) -> Result | None:
        key = (gvk, ObjectKey.of(obj))
        integration = self.config.adapter(gvk).integration
        assert integration is not None
        priority = None
        class_name = (obj["metadata"].get("labels") or {}).get(PRIORITY_CLASS_LABEL)
        try:
            if class_name:
                found = await self.priorities.get(class_name)
                if found is None:
                    raise workload_spec.InvalidObject(
                        f"label {PRIORITY_CLASS_LABEL}: no WorkloadPriorityClass named {class_name!r}"
                    )
                priority = workload_spec.Priority(class_name, int(found.get("value", 0)))
            body = workload_spec.build(obj, gvk, integration, active=active, priority=priority)
        except workload_spec.InvalidObject as e:
            # Kueue's UnretryableError: said once on the object; a change to the object brings it back here.
            message = f"cannot make a Workload: {e}"
            await self._say_once(key, obj, "ErrWorkloadCompose", message)
            log.warning("no Workload for the object", kind=gvk.kind, object=str(key[1]), error=str(e))
            return None
        self._said.pop(key, None)
        try:
            await self.workloads.create(body, obj["metadata"]["namespace"])
        except Conflict:
            return None  # made by an earlier attempt whose answer was lost: the informer brings it
        name = f"{obj['metadata']['namespace']}/{body['metadata']['name']}"
        await self._event(obj, "Normal", "CreatedWorkload", f"Created Workload: {name}")
        return None

    async def _remove_finalizer(self, workload: Object) -> None:
        meta = workload["metadata"]
        kept = [f for f in meta.get("finalizers") or [] if f != RESOURCE_IN_USE_FINALIZER]
        if kept == (meta.get("finalizers") or []):
            return
        patch = {"metadata": {"resourceVersion": meta["resourceVersion"], "finalizers": kept or None}}
        with contextlib.suppress(NotFound):  # gone already
            await self.workloads.patch(meta["name"], patch, meta["namespace"])

    async def _object_gone(self, gvk: GroupVersionKind, key: ObjectKey) -> None:
        """The object is deleted (or being deleted): its Workloads go too (Kueue's finalizer first)."""
        self._said.pop((gvk, key), None)
        for workload_key in self._owned_by(gvk, key):
            workload = self.workload_informer.get(workload_key)
            if workload is None:
                continue
            await self._remove_finalizer(workload)
            await self.workloads.delete(workload_key.name, workload_key.namespace)
            log.info("Workload deleted with its object", kind=gvk.kind, object=str(key), workload=str(workload_key))

    async def _event(self, obj: Object, type_: str, reason: str, message: str) -> None:
        await events.record(self.api, obj, type_=type_, reason=reason, message=message,
                            component=self.config.dispatcher.controller_name)  # fmt: skip
