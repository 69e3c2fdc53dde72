"""PodsReady, as Kueue's jobframework writes it: the condition from the Workload and the object's readiness."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.config import ConfigError, PodsReady, Predicate, parse_configuration
from multikueue.integration.lifecycle import Step, decide, pods_ready, pods_ready_condition, pods_ready_status
from multikueue.kube.addresses import GroupVersionKind
from multikueue.labels import QUEUE_NAME_LABEL

JOBSET = GroupVersionKind("jobset.x-k8s.io", "v1alpha2", "JobSet")
COUNTS = PodsReady.model_validate({
    "readyCounts": [".status.replicatedJobsStatus[*].ready", ".status.replicatedJobsStatus[*].succeeded"],
    "expectedCounts": [".spec.replicatedJobs[*].replicas"],
})  # fmt: skip


def jobset(*ready: tuple[int, int], replicas: tuple[int, ...] = (1, 2)) -> dict[str, Any]:
    statuses = [{"name": f"r{i}", "ready": r, "succeeded": s} for i, (r, s) in enumerate(ready)]
    jobs = [{"name": f"r{i}", "replicas": n} for i, n in enumerate(replicas)]
    return {
        "metadata": {"name": "js", "namespace": "ns", "uid": "u", "labels": {QUEUE_NAME_LABEL: "q"},
                     "annotations": {"multikueue.x-k8s.io/suspended-for-queue": "true"}},
        "spec": {"suspend": False, "replicatedJobs": jobs},
        "status": {"replicatedJobsStatus": statuses},
    }  # fmt: skip


def workload(*conditions: tuple[str, str, str], pods: int = 3) -> dict[str, Any]:
    rows = [{"type": t, "status": s, "reason": r, "message": "m"} for t, s, r in conditions]
    refs = [{"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet", "name": "js", "uid": "u", "controller": True}]
    return {"metadata": {"name": "w", "namespace": "ns", "generation": 2, "ownerReferences": refs},
            "spec": {"queueName": "q", "podSets": [{"name": "a", "count": 1}, {"name": "b", "count": pods - 1}]},
            "status": {"conditions": rows}}  # fmt: skip


ADMITTED = ("Admitted", "True", "Admitted")


def test_counts_sum_every_path_and_reach_the_expected_sum() -> None:
    assert not pods_ready(jobset((1, 0), (1, 0)), workload(), COUNTS), "2 of 3 replicated jobs"
    assert pods_ready(jobset((1, 0), (1, 1)), workload(), COUNTS), "ready and succeeded both count"
    assert not pods_ready(jobset(), workload(), COUNTS), "no status yet: nothing ready"
    by_pods = PodsReady.model_validate({"readyCounts": [".status.ready"]})  # expected: the Workload's pod count
    assert not pods_ready({"status": {"ready": 2}}, workload(pods=3), by_pods)
    assert pods_ready({"status": {"ready": 3}}, workload(pods=3), by_pods)
    when = PodsReady(when=Predicate.model_validate({"path": ".status.state", "equals": "ready"}))
    assert pods_ready({"status": {"state": "ready"}}, workload(), when)


@pytest.mark.parametrize(
    ("conditions", "ready", "expected"),
    [
        ((), True, ("False", "WaitForStart")),  # not admitted: waiting, whatever the pods say
        ((ADMITTED,), False, ("False", "WaitForStart")),
        ((ADMITTED,), True, ("True", "Started")),
        ((ADMITTED, ("PodsReady", "True", "Started")), False, ("False", "WaitForRecovery")),
        ((ADMITTED, ("PodsReady", "False", "WaitForRecovery")), False, ("False", "WaitForRecovery")),
        ((ADMITTED, ("PodsReady", "False", "WaitForRecovery")), True, ("True", "Recovered")),
        ((ADMITTED, ("PodsReady", "True", "Recovered")), True, ("True", "Recovered")),
        ((ADMITTED, ("PodsReady", "False", "WaitForStart")), False, ("False", "WaitForStart")),
        ((ADMITTED, ("PodsReady", "False", "PodsReady")), False, ("False", "WaitForStart")),  # Kueue's old reason
    ],
)
def test_the_condition_is_kueues(conditions: tuple[tuple[str, str, str], ...], ready: bool,
                                 expected: tuple[str, str]) -> None:  # fmt: skip
    condition = pods_ready_condition(workload(*conditions), ready)
    assert (condition["type"], condition["status"], condition["reason"]) == ("PodsReady", *expected)


ADAPTER = parse_configuration("""
multiKueue: {externalFrameworks: [{name: JobSet.v1alpha2.jobset.x-k8s.io}]}
dispatcher:
  adapters:
  - name: JobSet.v1alpha2.jobset.x-k8s.io
    integration:
      suspend: {path: .spec.suspend, value: true, runValue: false}
      podSets: [{name: main, count: 3}]
      podsReady:
        readyCounts: ['.status.replicatedJobsStatus[*].ready', '.status.replicatedJobsStatus[*].succeeded']
        expectedCounts: ['.spec.replicatedJobs[*].replicas']
""").adapter(JOBSET)


def test_the_decision_writes_the_condition_only_when_status_or_reason_changes() -> None:
    running = jobset((1, 0), (2, 0))
    decision = decide(running, workload(ADMITTED), ADAPTER)
    assert decision.step is Step.SET_PODS_READY
    assert decision.condition is not None
    assert (decision.condition["status"], decision.condition["reason"]) == ("True", "Started")
    status = pods_ready_status(workload(ADMITTED), decision.condition)
    assert status["conditions"][-1]["observedGeneration"] == 2
    written = workload(ADMITTED, ("PodsReady", "True", "Started"))
    assert decide(running, written, ADAPTER).step is not Step.SET_PODS_READY
    waiting = decide(jobset((1, 0), (2, 0)), workload(), ADAPTER)  # not admitted yet: WaitForStart first
    assert (waiting.step, waiting.condition and waiting.condition["reason"]) == (Step.SET_PODS_READY, "WaitForStart")


def test_without_pods_ready_configured_no_condition_is_written() -> None:
    adapter = parse_configuration("""
multiKueue: {externalFrameworks: [{name: JobSet.v1alpha2.jobset.x-k8s.io}]}
dispatcher:
  adapters:
  - name: JobSet.v1alpha2.jobset.x-k8s.io
    integration: {suspend: {path: .spec.suspend, value: true, runValue: false}, podSets: [{name: main, count: 3}]}
""").adapter(JOBSET)
    assert decide(jobset((1, 0), (2, 0)), workload(ADMITTED), adapter).step is not Step.SET_PODS_READY


@pytest.mark.parametrize(
    ("pods_ready_text", "message"),
    [
        ("{}", "podsReady.when: give either when"),
        ("{when: {path: .status.x, exists: true}, readyCounts: [.status.y]}", "give either when"),
        ("{when: {path: .status.x, exists: true}, expectedCounts: [.spec.y]}", "expectedCounts: only with"),
        ("{readyCounts: ['.status[']}", "podsReady.readyCounts"),
    ],
)
def test_bad_pods_ready_options_name_the_field(pods_ready_text: str, message: str) -> None:
    text = f"""
multiKueue: {{externalFrameworks: [{{name: JobSet.v1alpha2.jobset.x-k8s.io}}]}}
dispatcher:
  adapters:
  - name: JobSet.v1alpha2.jobset.x-k8s.io
    integration: {{suspend: {{path: .spec.suspend, value: true}}, podSets: [{{}}], podsReady: {pods_ready_text}}}
"""
    with pytest.raises(ConfigError) as error:
        parse_configuration(text)
    assert message in str(error.value)
