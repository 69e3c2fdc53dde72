"""The status mirror (dispatch/mirror.py): its decision (``status_to_write``, pure: held, no status yet, or in sync
once a patch is written), and its memory of pruned fields: the fields a manager's schema drops are named, told once
per object, remembered per kind and left out of the next comparison."""

from __future__ import annotations

from typing import Any

from multikueue.config import Adapter, parse_configuration
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.mirror import PrunedFields, status_to_write
from multikueue.kube.addresses import GroupVersionKind
from multikueue.mergepatch import apply_merge_patch, pruned_paths, without_paths
from multikueue.runtime.informer import ObjectKey
from multikueue_testbed.objects import pipelinerun, running_status

PIPELINERUN = GroupVersionKind("tekton.dev", "v1", "PipelineRun")
MANAGED = "kueue.x-k8s.io/multikueue"
OWN = "MultiKueuePlacement"
ADAPTER = GenericAdapter(
    PIPELINERUN,
    MANAGED,
    parse_configuration("""
multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    suspended: {path: .spec.status, equals: PipelineRunPending}
""").adapter(PIPELINERUN),
)


def manager_run(**spec: Any) -> dict[str, Any]:
    run = pipelinerun("hello", managedBy=MANAGED, **spec)
    run["metadata"].update(namespace="team-a", uid="u-1")
    return run


def worker_copy(status: dict[str, Any] | None) -> dict[str, Any]:
    copy = pipelinerun("hello")
    if status is not None:
        copy["status"] = status
    return copy


def test_a_suspended_object_is_held_with_what_would_be_written() -> None:
    state, patch = status_to_write(
        ADAPTER, manager_run(status="PipelineRunPending"), worker_copy(running_status("hello")), frozenset()
    )
    assert state == "held"
    assert patch is not None
    assert patch["status"]["startTime"] == "2026-08-01T10:00:01Z"
    # Nothing to hold back: the caller says nothing.
    assert status_to_write(ADAPTER, manager_run(status="PipelineRunPending"), worker_copy(None), frozenset()) == (
        "held",
        None,
    )


def test_a_copy_without_status_is_in_sync_with_nothing_to_write() -> None:
    """A kind's ``finished`` predicate may read the copy's spec: a copy without status is read, not waited for."""
    assert status_to_write(ADAPTER, manager_run(), worker_copy(None), frozenset()) == (
        "in-sync",
        None,
    )


def test_in_sync_once_the_patch_is_written_and_nothing_to_write_after() -> None:
    obj, copy = manager_run(), worker_copy(running_status("hello"))
    state, patch = status_to_write(ADAPTER, obj, copy, frozenset())
    assert state == "in-sync"
    assert patch is not None
    written = apply_merge_patch(obj, patch)
    assert written["status"] == copy["status"]
    assert status_to_write(ADAPTER, written, copy, frozenset()) == ("in-sync", None)


def test_the_dispatchers_own_condition_is_kept_whatever_the_copy_says() -> None:
    mine = {"type": OWN, "status": "True", "reason": "Placed", "message": "on worker1"}
    obj = {**manager_run(), "status": {"conditions": [mine]}}
    status = running_status("hello")
    status["conditions"].append({"type": OWN, "status": "False", "reason": "Other", "message": "from the worker"})
    state, patch = status_to_write(ADAPTER, obj, worker_copy(status), frozenset(), keep_conditions=frozenset({OWN}))
    assert state == "in-sync"
    assert patch is not None
    conditions = apply_merge_patch(obj, patch)["status"]["conditions"]
    assert [c["type"] for c in conditions] == ["Succeeded", OWN]
    assert conditions[1] == mine
    # Without it, the copy's own condition of that type would overwrite the manager's.
    _, plain = status_to_write(ADAPTER, obj, worker_copy(status), frozenset())
    assert plain is not None
    assert apply_merge_patch(obj, plain)["status"]["conditions"][1]["reason"] == "Other"


def test_fields_the_manager_drops_are_not_compared_again() -> None:
    obj, copy = manager_run(), worker_copy({**running_status("hello"), "newField": {"x": 1}})
    _, patch = status_to_write(ADAPTER, obj, copy, frozenset())
    assert patch is not None
    answer = apply_merge_patch(obj, patch)
    del answer["status"]["newField"]  # what an older manager CRD does without an error
    pruned = PrunedFields()
    assert pruned.learn(PIPELINERUN, ObjectKey("team-a", "hello"), patch, answer) == ["status.newField"]
    assert status_to_write(ADAPTER, answer, copy, pruned.of(PIPELINERUN)) == ("in-sync", None)


def test_pruned_fields_are_named_and_left_out_of_the_next_comparison() -> None:
    sent = {"status": {"phase": "Running", "newField": {"a": 1}, "items": [{"x": 1, "y": 2}], "gone": None}}
    kept = {"status": {"phase": "Running", "items": [{"x": 1}]}}
    assert pruned_paths(sent["status"], kept["status"], "status") == ["status.newField", "status.items[].y"]
    worker_obj = {"status": {"phase": "Done", "newField": {"a": 2}, "items": [{"x": 1, "y": 3}]}}
    assert without_paths(worker_obj, frozenset({"status.newField", "status.items[].y"})) == {
        "status": {"phase": "Done", "items": [{"x": 1}]}
    }
    adapter = GenericAdapter(PIPELINERUN, "m", Adapter.defaults(PIPELINERUN))
    manager = {"status": {"phase": "Done", "items": [{"x": 1}]}}
    assert adapter.status_patch(manager, worker_obj) is not None  # without the memory: a write on every pass
    assert adapter.status_patch(manager, worker_obj, frozenset({"status.newField", "status.items[].y"})) is None


def test_pruned_fields_are_told_once_per_object_and_remembered_per_kind() -> None:
    pruned = PrunedFields()
    patch, answer = {"status": {"a": 1, "b": 2}}, {"status": {"a": 1}}
    assert pruned.learn(PIPELINERUN, ObjectKey("ns", "one"), patch, answer) == ["status.b"]
    assert pruned.learn(PIPELINERUN, ObjectKey("ns", "one"), patch, answer) == []
    assert pruned.learn(PIPELINERUN, ObjectKey("ns", "two"), patch, answer) == ["status.b"]
    assert pruned.of(PIPELINERUN) == {"status.b"}
    assert pruned.learn(PIPELINERUN, ObjectKey("ns", "three"), {"status": {"a": 2}}, {"status": {"a": 2}}) == []
