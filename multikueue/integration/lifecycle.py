"""What to do next for a queued object and its Workload: Kueue's jobframework reconcile, as a pure decision.

One step per reconcile; the write it leads to comes back as a watch event and the next step follows. The
differences from Kueue's ``ReconcileGenericJob`` are deliberate:
- a suspension this controller did not make (no ``HELD_ANNOTATION``) is the user's, and is never undone: the
  Workload is deactivated instead, and re-activated once the user clears it (tekton-kueue#540);
- a value at the suspend field that is neither suspended, stopping nor running (a PipelineRun's ``Cancelled``) is
  the user's instruction to the kind's own controller, and is left alone.
"""

from __future__ import annotations

import copy
import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import jsonpatch

from multikueue import jsonpaths
from multikueue.config import Adapter, Integration, PodsReady, Predicate
from multikueue.integration.podsetinfo import InvalidPodSetInfo, PodSetInfo, apply
from multikueue.integration.workload_spec import (
    InvalidObject,
    controller_uid,
    equivalent,
    pod_sets,
    prebuilt_workload,
    queue_name,
    templates,
)
from multikueue.kube.conditions import find, is_true, set_condition
from multikueue.labels import ADMITTED, EVICTED, FINISHED, HELD_ANNOTATION, PODS_READY, QUOTA_RESERVED
from multikueue.mergepatch import apply_merge_patch
from multikueue.predicates import holds

Object = dict[str, Any]


class State(enum.Enum):
    """Where the object stands, read from its suspend field and whose hold it is."""

    HELD = "held"  # suspended by this controller: released on admission
    USER_HELD = "user-held"  # suspended by its user: never released here
    STOPPING = "stopping"  # the stop value (StoppedRunFinally): winding down after an eviction
    RUNNING = "running"  # the run value, or the field absent
    OTHER = "other"  # any other value: the user's instruction to the kind's controller (Cancelled)


def state(obj: Object, integration: Integration) -> State:
    suspend = integration.suspend
    value = jsonpaths.first(obj, suspend.path)
    held = HELD_ANNOTATION in (obj["metadata"].get("annotations") or {})
    if value == suspend.value:
        if held or not suspend.honor_user_suspend:
            return State.HELD
        return State.USER_HELD
    if value == suspend.stop:
        return State.STOPPING
    if value in (None, "", suspend.run_value):
        return State.RUNNING
    return State.OTHER


class Step(enum.Enum):
    NOTHING = "nothing"
    WAIT_FOR_PREBUILT = "wait-for-prebuilt"  # a worker copy whose Workload MultiKueue has not made (yet)
    HOLD = "hold"  # set the suspend value and HELD_ANNOTATION
    MARK_HELD = "mark-held"  # suspended by someone else with Kueue's meaning: take the hold over
    STOP = "stop"  # set the stop value (and HELD_ANNOTATION when stopping is suspending)
    RUN = "run"  # set the run value, drop HELD_ANNOTATION
    CREATE_WORKLOAD = "create-workload"
    ADOPT = "adopt"  # a prebuilt Workload: controller owner reference to this object
    OUT_OF_SYNC = "out-of-sync"  # a prebuilt Workload whose pod sets differ: finished, reason OutOfSync
    FINISH = "finish"  # the object finished: Workload Finished (Succeeded or Failed)
    RELEASE = "release"  # after an eviction, with nothing running: quota reservation cleared, requeued
    ACTIVATE = "activate"
    DEACTIVATE = "deactivate"
    UPDATE_QUEUE = "update-queue"  # the queue-name label changed before admission
    REMOVE_FINALIZER = "remove-finalizer"  # the Workload is finished: Kueue's finalizer goes
    SET_PODS_READY = "set-pods-ready"  # the Workload's PodsReady condition, as Kueue's jobframework writes it


@dataclass(frozen=True)
class Decision:
    step: Step
    why: str
    succeeded: bool = True  # FINISH: Succeeded or Failed
    active: bool = True  # CREATE_WORKLOAD: false for an object its user holds
    condition: Object | None = None  # SET_PODS_READY: the condition to write


def admitted(workload: Object) -> bool:
    return is_true(workload, ADMITTED) and (workload.get("spec") or {}).get("active") is not False


def finished(obj: Object, adapter: Adapter) -> tuple[bool, bool]:
    """(finished, succeeded) from the adapter's ``finished``/``failed`` predicates, read on the object itself."""
    if adapter.finished is None or not holds(adapter.finished, obj):
        return False, False
    return True, adapter.failed is None or not holds(adapter.failed, obj)


def _active(obj: Object, integration: Integration, now: State) -> bool:
    predicate: Predicate | None = integration.active
    if predicate is None:
        return now not in (State.HELD, State.USER_HELD)
    return holds(predicate, obj)


def _started(obj: Object, integration: Integration) -> bool:
    """Known to have started (only an ``active`` predicate can say so): it can no longer simply be suspended."""
    return integration.active is not None and holds(integration.active, obj)


def decide(obj: Object, workload: Object | None, adapter: Adapter) -> Decision:
    integration = adapter.integration
    assert integration is not None
    prebuilt = prebuilt_workload(obj)
    if not queue_name(obj) and not prebuilt:
        return Decision(Step.NOTHING, "no queue-name label: not queued")
    now = state(obj, integration)
    done, succeeded = finished(obj, adapter)
    if workload is None:
        return _without_workload(obj, integration, now, done, prebuilt)
    rules: tuple[Callable[[], Decision | None], ...] = (
        lambda: _prebuilt(obj, workload, integration, prebuilt),
        lambda: _over(workload, done, succeeded),
        lambda: _pods_ready(obj, workload, integration.pods_ready),
        lambda: _evicted(obj, workload, integration, now),
        lambda: _held(obj, workload, now),
        lambda: _running(obj, workload, integration, now),
    )
    for rule in rules:
        decision = rule()
        if decision is not None:
            return decision
    return Decision(Step.NOTHING, f"{now.value} with an admitted Workload")


def _running(obj: Object, workload: Object, integration: Integration, now: State) -> Decision | None:
    """Running without admission: held for the queue (stopped once it has started, where stopping differs)."""
    if now is not State.RUNNING:
        return None
    if not is_true(workload, ADMITTED):
        if _started(obj, integration) and integration.suspend.stop != integration.suspend.value:
            return Decision(Step.STOP, "running but not admitted: stopped")
        return Decision(Step.HOLD, "not admitted: held for the queue")
    if not admitted(workload):
        # Deactivated while admitted: Kueue evicts it, and the eviction stops it (as Kueue's jobframework, which
        # reads only the Admitted condition here). Held now, it would look released by its user and be
        # activated again.
        return Decision(Step.NOTHING, "running, its Workload deactivated: waiting for Kueue's eviction")
    return None


def _without_workload(obj: Object, integration: Integration, now: State, done: bool, prebuilt: str
                      ) -> Decision:  # fmt: skip
    if done:
        return Decision(Step.NOTHING, "finished before it had a Workload")
    if now is State.RUNNING:
        if _started(obj, integration):
            # Started before it was queued (the webhook was absent): Kueue waits for it to end; so does this.
            return Decision(Step.NOTHING, "already running before it was queued: left alone")
        return Decision(Step.HOLD, "not admitted yet: held for the queue")
    if prebuilt:
        return Decision(Step.WAIT_FOR_PREBUILT, f"waiting for the prebuilt Workload {prebuilt}")
    if now is State.HELD:
        if HELD_ANNOTATION not in (obj["metadata"].get("annotations") or {}):
            return Decision(Step.MARK_HELD, "suspended for the queue")
        return Decision(Step.CREATE_WORKLOAD, "queued")
    if now is State.USER_HELD:
        return Decision(Step.CREATE_WORKLOAD, "suspended by its user: queued inactive", active=False)
    return Decision(Step.NOTHING, f"{now.value}: left to the kind's controller")


def _prebuilt(obj: Object, workload: Object, integration: Integration, prebuilt: str) -> Decision | None:
    """A worker copy and the Workload MultiKueue prebuilt for it: adopted, and kept to the same pod sets."""
    if not prebuilt:
        return None
    owner = controller_uid(workload)
    if owner is None:
        return Decision(Step.ADOPT, f"prebuilt Workload {prebuilt} adopted")
    if owner != obj["metadata"]["uid"]:
        return Decision(Step.NOTHING, f"prebuilt Workload {prebuilt} belongs to another object")
    if is_true(workload, FINISHED):
        return None
    try:
        in_sync = equivalent(workload, pod_sets(obj, integration))
    except InvalidObject:
        in_sync = False
    if not in_sync:
        return Decision(Step.OUT_OF_SYNC, f"prebuilt Workload {prebuilt} has other pod sets than the object")
    return None


def _over(workload: Object, done: bool, succeeded: bool) -> Decision | None:
    """The object or its Workload finished."""
    wl_finished = is_true(workload, FINISHED)
    finalizers = workload["metadata"].get("finalizers")
    if done:
        if not wl_finished:
            return Decision(Step.FINISH, "the object finished", succeeded=succeeded)
        return Decision(Step.REMOVE_FINALIZER, "finished") if finalizers else Decision(Step.NOTHING, "finished")
    if wl_finished:
        if finalizers:
            return Decision(Step.REMOVE_FINALIZER, "the Workload is finished")
        return Decision(Step.NOTHING, "the Workload is finished")
    return None


NOT_READY = "Not all pods are ready or succeeded"
WAITING_FOR_RECOVERY = "At least one pod has failed, waiting for recovery"
READY = "All pods reached readiness and the workload is running"


def pods_ready(obj: Object, workload: Object, spec: PodsReady) -> bool:
    """Whether every pod of the object is ready, by the configured predicate or counts."""
    if spec.when is not None:
        return holds(spec.when, obj)
    ready = _sum(obj, spec.ready_counts)
    if spec.expected_counts:
        expected = _sum(obj, spec.expected_counts)
    else:
        expected = sum(int(p.get("count", 0)) for p in (workload.get("spec") or {}).get("podSets") or [])
    return expected > 0 and ready >= expected


def _sum(obj: Object, paths: tuple[str, ...]) -> int:
    """The sum of the integers at ``paths`` (absent ones count 0, as an unset status counter does)."""
    return sum(v for path in paths for v in jsonpaths.find(obj, path) if isinstance(v, int) and not isinstance(v, bool))


def pods_ready_condition(workload: Object, ready: bool) -> Object:
    """The ``PodsReady`` condition the Workload should have (Kueue's ``generatePodsReadyCondition``): waiting for
    the start until admitted and ready; once ready, Started (Recovered after a recovery); a ready run that loses a
    pod waits for its recovery."""
    current = find((workload.get("status") or {}).get("conditions"), PODS_READY)
    reason, message = "WaitForStart", NOT_READY
    if not is_true(workload, ADMITTED):
        status = "False"
    elif ready:
        status, message = "True", READY
        reason = "Recovered" if current and current.get("reason") in ("WaitForRecovery", "Recovered") else "Started"
    else:
        status = "False"
        if current is not None and (current.get("status") == "True" or current.get("reason") == "WaitForRecovery"):
            reason, message = "WaitForRecovery", WAITING_FOR_RECOVERY
    return {"type": PODS_READY, "status": status, "reason": reason, "message": message}


def _pods_ready(obj: Object, workload: Object, spec: PodsReady | None) -> Decision | None:
    """With ``podsReady`` configured, the Workload's ``PodsReady`` condition kept current (step 5 of Kueue's
    reconcile, before eviction is handled); only a change of status or reason is written."""
    if spec is None:
        return None
    wanted = pods_ready_condition(workload, is_true(workload, ADMITTED) and pods_ready(obj, workload, spec))
    current = find((workload.get("status") or {}).get("conditions"), PODS_READY)
    if current is not None and (current.get("status"), current.get("reason")) == (wanted["status"], wanted["reason"]):
        return None
    return Decision(Step.SET_PODS_READY, f"PodsReady={wanted['status']} ({wanted['reason']})", condition=wanted)


def pods_ready_status(workload: Object, condition: Object) -> Object:
    generation = workload["metadata"].get("generation")
    rows = (workload.get("status") or {}).get("conditions")
    return {"conditions": set_condition(rows, {**condition, "observedGeneration": generation})}


def _evicted(obj: Object, workload: Object, integration: Integration, now: State) -> Decision | None:
    evicted = find((workload.get("status") or {}).get("conditions"), EVICTED)
    if evicted is None or evicted.get("status") != "True":
        return None
    if now is State.RUNNING:
        return Decision(Step.STOP, f"evicted: {evicted.get('message', '')}")
    if is_true(workload, QUOTA_RESERVED) and not _active(obj, integration, now):
        return Decision(Step.RELEASE, "evicted, and nothing runs: quota released for requeueing")
    return Decision(Step.NOTHING, "evicted: waiting for the run to stop")


def _held(obj: Object, workload: Object, now: State) -> Decision | None:
    """Suspended by its user (the Workload deactivated) or for the queue (run once admitted)."""
    spec = workload.get("spec") or {}
    if now is State.USER_HELD:
        if spec.get("active") is not False:
            return Decision(Step.DEACTIVATE, "suspended by its user: the Workload is deactivated")
        return Decision(Step.NOTHING, "suspended by its user")
    if now is not State.HELD:
        return None
    if HELD_ANNOTATION not in (obj["metadata"].get("annotations") or {}):
        return Decision(Step.MARK_HELD, "suspended for the queue")
    if spec.get("active") is False:
        return Decision(Step.ACTIVATE, "released by its user: queued again")
    if admitted(workload):
        return Decision(Step.RUN, "admitted")
    if not is_true(workload, QUOTA_RESERVED) and spec.get("queueName") != queue_name(obj) and queue_name(obj):
        return Decision(Step.UPDATE_QUEUE, f"queue-name changed to {queue_name(obj)}")
    return Decision(Step.NOTHING, "waiting for admission")


def _nested(path: str, value: Any) -> Object:
    """``.spec.status`` and a value → ``{"spec": {"status": value}}`` (a merge patch; ``None`` deletes)."""
    keys = path.lstrip("$").strip(".").split(".")
    patch: Any = value
    for key in reversed(keys):
        patch = {key: patch}
    return dict(patch)


def _merge(a: Object, b: Object) -> Object:
    out = dict(a)
    for key, value in b.items():
        out[key] = _merge(out[key], value) if isinstance(out.get(key), dict) and isinstance(value, dict) else value
    return out


def suspend_patch(integration: Integration, step: Step) -> Object:
    """The merge patch on the object for HOLD, MARK_HELD, STOP and RUN."""
    suspend = integration.suspend
    held = {"metadata": {"annotations": {HELD_ANNOTATION: "true"}}}
    if step is Step.HOLD:
        return _merge(_nested(suspend.path, suspend.value), held)
    if step is Step.MARK_HELD:
        return held
    if step is Step.STOP:
        stop = _nested(suspend.path, suspend.stop)
        return _merge(stop, held) if suspend.stop == suspend.value else stop
    if step is Step.RUN:
        return _merge(_nested(suspend.path, suspend.run_value), {"metadata": {"annotations": {HELD_ANNOTATION: None}}})
    raise ValueError(f"no object patch for {step}")


def changed_object(obj: Object, integration: Integration, step: Step, infos: Sequence[PodSetInfo] | None) -> Object:
    """The object after HOLD, MARK_HELD, STOP or RUN: the suspend field and the hold annotation, and with ``infos``
    the pod templates: merged on RUN (Kueue's ``RunWithPodSetsInfo``), restored otherwise (``RestorePodSetsInfo``,
    passed over when the pod sets no longer match, as Kueue does). ``InvalidPodSetInfo`` when RUN cannot write."""
    changed: Object = apply_merge_patch(copy.deepcopy(obj), suspend_patch(integration, step))
    if infos is None:
        return changed
    found = templates(changed, integration, write_defaults=step is Step.RUN)
    if len(found) != len(infos):
        if step is Step.RUN:
            raise InvalidPodSetInfo(f"invalid podset infos: expecting {len(found)} podset, got {len(infos)}")
        return changed
    apply(found, infos, restoring=step is not Step.RUN)
    return changed


def object_patch(before: Object, after: Object) -> list[Object]:
    """The JSON patch from ``before`` to ``after``, valid only on the version it was computed from."""
    guard = {"op": "test", "path": "/metadata/resourceVersion", "value": before["metadata"]["resourceVersion"]}
    operations: list[Object] = jsonpatch.make_patch(before, after).patch
    return [guard, *operations]


def _pointer(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def admission_patch(obj: Object, integration: Integration) -> list[Object]:
    """The JSON patch the webhook answers a CREATE with: suspended and marked held, touching nothing else.

    Only the suspend field and one annotation change (tekton-kueue#319: a defaulter that round-trips the whole
    object leaks empty fields into it). An object created suspended is held for the queue too, unless
    ``honorUserSuspend`` makes that suspension its user's own.
    """
    if not queue_name(obj) and not prebuilt_workload(obj):
        return []
    suspend = integration.suspend
    if jsonpaths.first(obj, suspend.path) == suspend.value and suspend.honor_user_suspend:
        return []
    ops: list[Object] = []
    keys = suspend.path.lstrip("$").strip(".").split(".")
    node: Any = obj
    for depth, key in enumerate(keys):
        pointer = "/" + "/".join(_pointer(k) for k in keys[: depth + 1])
        if depth == len(keys) - 1 or not isinstance(node.get(key), dict):
            ops.append({"op": "add", "path": pointer, "value": _nested(".".join(keys[depth + 1 :]), suspend.value)
                        if depth < len(keys) - 1 else suspend.value})  # fmt: skip
            break
        node = node[key]
    annotations = obj["metadata"].get("annotations")
    if annotations is None:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {HELD_ANNOTATION: "true"}})
    else:
        ops.append({"op": "add", "path": f"/metadata/annotations/{_pointer(HELD_ANNOTATION)}", "value": "true"})
    return ops


def finished_message(obj: Object, integration: Integration) -> str:
    """The first text at the ``finishedMessage`` paths ("" if none)."""
    for path in integration.finished_message:
        found = jsonpaths.first(obj, path)
        if isinstance(found, str) and found:
            return found
    return ""


def finished_status(workload: Object, reason: str, message: str) -> Object:
    """The Workload's status with ``Finished=True`` (Kueue's ``workloadfinish.Finish``)."""
    rows = (workload.get("status") or {}).get("conditions")
    generation = workload["metadata"].get("generation")
    new = {"type": FINISHED, "status": "True", "reason": reason, "message": message,
           "observedGeneration": generation}  # fmt: skip
    return {"conditions": set_condition(rows, new)}


def released_status(workload: Object) -> Object:
    """After an eviction with nothing left running: quota reservation cleared, Requeued set (the jobframework's
    ``UnsetQuotaReservationWithCondition`` + ``SetRequeuedCondition``, with Kueue's default feature gates)."""
    status = workload.get("status") or {}
    generation = workload["metadata"].get("generation")
    evicted = find(status.get("conditions"), EVICTED) or {}
    message, reason = evicted.get("message", ""), evicted.get("reason", "")
    requeued = "True" if reason in ("Preempted", "NodeFailures") else "False"
    checks_ready = all(c.get("state") == "Ready" for c in status.get("admissionChecks") or [])
    admitted_reason, admitted_message = (
        ("NoReservation", "The workload has no reservation") if checks_ready
        else ("NoReservationUnsatisfiedChecks", "The workload has no reservation and not all checks ready")
    )  # fmt: skip
    rows = status.get("conditions")
    for new in (
        {"type": "Requeued", "status": requeued, "reason": reason, "message": message},
        {"type": QUOTA_RESERVED, "status": "False", "reason": "Pending", "message": message},
        {"type": ADMITTED, "status": "False", "reason": admitted_reason, "message": admitted_message},
    ):
        rows = set_condition(rows, {**new, "observedGeneration": generation})
    return {"conditions": rows, "admission": None}
