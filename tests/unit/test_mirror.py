"""The status mirror's memory of pruned fields (dispatch/mirror.py): the fields a manager's schema drops are named,
told once per object, remembered per kind and left out of the next comparison."""

from __future__ import annotations

from multikueue.config import Adapter
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.mirror import PrunedFields
from multikueue.kube.addresses import GroupVersionKind
from multikueue.mergepatch import pruned_paths, without_paths
from multikueue.runtime.informer import ObjectKey

PIPELINERUN = GroupVersionKind("tekton.dev", "v1", "PipelineRun")


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
