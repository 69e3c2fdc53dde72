"""What a worker copy's spec is compared by (``specdigest``): equal specs, equal digests; priority apart."""

from __future__ import annotations

from typing import Any

from multikueue import specdigest

SPEC: dict[str, Any] = {
    "queueName": "q",
    "priority": 5,
    "priorityClassRef": {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass", "name": "high"},
    "podSets": [{"name": "main", "count": 1, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}],
}


def workload(spec: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "wl", "namespace": "ns"}, "spec": spec, "status": {"conditions": []}}


def test_a_summary_keeps_the_priority_fields_and_a_digest_of_the_rest() -> None:
    whole = workload(dict(SPEC))
    summary = specdigest.summarized(whole)
    assert summary["spec"] == {
        specdigest.DIGEST: specdigest.digest(SPEC),
        "priority": 5,
        "priorityClassRef": SPEC["priorityClassRef"],
    }
    assert (summary["metadata"], summary["status"]) == (whole["metadata"], whole["status"])
    assert whole["spec"] == SPEC, "the object given is not changed"
    assert specdigest.summarized(summary) is summary, "a summary is not summarized again"


def test_a_summary_compares_as_the_whole_spec_does() -> None:
    whole = workload(dict(SPEC))
    summary = specdigest.summarized(workload(dict(SPEC)))
    assert specdigest.compared(summary) == specdigest.compared(whole)
    reordered = workload({k: SPEC[k] for k in reversed(list(SPEC))})
    assert specdigest.compared(reordered) == specdigest.compared(whole), "key order does not count"


def test_only_the_priority_differs_or_the_rest_does() -> None:
    digest, priority = specdigest.compared(specdigest.summarized(workload(dict(SPEC))))
    higher = specdigest.compared(workload({**SPEC, "priority": 6}))
    assert (higher[0], higher[1] == priority) == (digest, False)
    other = specdigest.compared(workload({**SPEC, "podSets": [{"name": "main", "count": 2}]}))
    assert (other[0] == digest, other[1]) == (False, priority)


def test_the_managers_preemption_gates_are_not_compared() -> None:
    gated = workload({**SPEC, "preemptionGates": [{"name": "g"}]})
    assert specdigest.compared(gated) == specdigest.compared(workload(dict(SPEC)))


def test_a_workload_without_a_spec_is_kept_as_it_is() -> None:
    bare = {"metadata": {"name": "wl"}}
    assert specdigest.summarized(bare) is bare
