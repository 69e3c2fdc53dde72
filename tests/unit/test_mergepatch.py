"""RFC 7386 merge patches: the diff the status mirror writes, its application, and the fields a server pruned."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.mergepatch import SAME, apply_merge_patch, merge_diff, pruned_paths, without_paths


def test_null_in_a_patch_removes_the_key_and_a_removed_key_diffs_to_null() -> None:
    target = {"phase": "Running", "reason": "Started", "keep": {"x": 1}}
    assert apply_merge_patch(target, {"reason": None}) == {"phase": "Running", "keep": {"x": 1}}
    assert apply_merge_patch(target, {"absent": None}) == target, "removing what is not there changes nothing"
    assert merge_diff(target, {"phase": "Running", "keep": {"x": 1}}) == {"reason": None}
    assert target == {"phase": "Running", "reason": "Started", "keep": {"x": 1}}, "the target is not modified"


def test_a_nested_diff_names_only_what_changed_and_replaces_lists_whole() -> None:
    old = {"status": {"phase": "Running", "conditions": [{"type": "A"}], "counts": {"ok": 1, "failed": 0}}}
    new = {"status": {"phase": "Running", "conditions": [{"type": "A"}, {"type": "B"}], "counts": {"ok": 2}}}
    assert merge_diff(old, new) == {
        "status": {"conditions": [{"type": "A"}, {"type": "B"}], "counts": {"ok": 2, "failed": None}}
    }


def test_equal_values_diff_to_the_sentinel_not_to_an_empty_patch() -> None:
    assert merge_diff({"a": {"b": [1]}}, {"a": {"b": [1]}}) is SAME
    assert merge_diff({"a": 1}, {"a": None}) == {"a": None}, "a value set to null is a change"


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ({"a": 1}, {"a": 2}),
        ({"a": {"b": 1, "c": 2}}, {"a": {"b": 1}}),
        ({"a": [1, 2]}, {"a": [2]}),
        ({}, {"a": {"b": {"c": 1}}}),
        ({"a": 1, "b": 2}, {}),
        (None, {"a": 1}),
    ],
)
def test_merge_diff_round_trips(old: Any, new: Any) -> None:
    assert apply_merge_patch(old, merge_diff(old, new)) == new


def test_pruned_paths_names_what_the_written_object_lacks_removals_aside() -> None:
    sent = {"phase": "Done", "extra": {"deep": 1}, "nested": {"kept": 1, "dropped": 2}, "gone": None}
    kept = {"phase": "Done", "nested": {"kept": 1}}
    assert pruned_paths(sent, kept, "status") == ["status.extra", "status.nested.dropped"]
    assert pruned_paths({"a": 1}, {"a": 1}) == []
    assert pruned_paths({"a": {"b": 1}}, {"a": "scalar"}) == ["a"], "a map written back as a scalar: all of it"
    items = pruned_paths({"items": [{"x": 1, "y": 2}, {"x": 3, "z": 4}]}, {"items": [{"x": 1}, {"x": 3}]})
    assert items == ["items[].y", "items[].z"]


def test_without_paths_drops_those_fields_from_a_copy_only() -> None:
    obj = {"status": {"phase": "Done", "extra": 1, "items": [{"x": 1, "y": 2}, {"x": 3}]}}
    assert without_paths(obj, frozenset({"status.extra", "status.items[].y", "status.absent"})) == {
        "status": {"phase": "Done", "items": [{"x": 1}, {"x": 3}]}
    }
    assert obj["status"]["extra"] == 1, "the original keeps its fields"
