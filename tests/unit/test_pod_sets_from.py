"""Pod sets derived from an array, and pod counts computed as Kueue's integrations compute them."""

from __future__ import annotations

import json
from typing import Any

import pytest

from multikueue.config import ConfigError, CountConst, CountOp, CountPath, Topology, parse_configuration, parse_count
from multikueue.integration import workload_spec
from multikueue.kube.addresses import GroupVersionKind

JOBSET = GroupVersionKind("jobset.x-k8s.io", "v1alpha2", "JobSet")
JOB_COUNT = {"min": [{"path": ".template.spec.parallelism", "default": 1},
                     {"path": ".template.spec.completions", "default": {"path": ".template.spec.parallelism",
                                                                        "default": 1}}]}  # fmt: skip
"""Kueue's count of a Job's pods: parallelism (default 1), or completions when fewer."""
CONFIG = """
multiKueue: {externalFrameworks: [{name: JobSet.v1alpha2.jobset.x-k8s.io}]}
dispatcher:
  adapters:
  - name: JobSet.v1alpha2.jobset.x-k8s.io
    integration:
      suspend: {path: .spec.suspend, value: true, runValue: false}
      podSetsFrom:
      - path: .spec.replicatedJobs[*]
        name: .name
        count: {product: [{path: .replicas, default: 1}, JOB_COUNT]}
        template: .template.spec.template
""".replace("JOB_COUNT", json.dumps(JOB_COUNT))
TEMPLATE = {"spec": {"containers": [{"name": "c", "image": "i"}]}}


def jobset(*jobs: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "js", "namespace": "ns", "uid": "u"}, "spec": {"replicatedJobs": list(jobs)}}


def job(name: str, *, replicas: int | None = None, **spec: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"name": name, "template": {"spec": {**spec, "template": TEMPLATE}}}
    if replicas is not None:
        item["replicas"] = replicas
    return item


def integration() -> Any:
    found = parse_configuration(CONFIG).adapter(JOBSET).integration
    assert found is not None
    return found


def test_one_pod_set_per_replicated_job_whatever_their_names_and_number() -> None:
    two = workload_spec.pod_sets(
        jobset(job("driver", replicas=1), job("workers", replicas=3, parallelism=2)), integration()
    )
    assert [(p["name"], p["count"]) for p in two] == [("driver", 1), ("workers", 6)]
    assert two[1]["template"] == {"metadata": {}, **TEMPLATE}
    three = jobset(job("a", replicas=2, parallelism=4, completions=3), job("b"), job("c", replicas=2, completions=5))
    assert [(p["name"], p["count"]) for p in workload_spec.pod_sets(three, integration())] == [
        ("a", 6),  # completions < parallelism: 2 x min(4, 3)
        ("b", 1),  # nothing given: Kueue's defaults, 1 x 1
        ("c", 2),  # no parallelism: 1 pod at a time, completions notwithstanding
    ]


def test_a_count_never_guesses_a_missing_value() -> None:
    expression = parse_count({"product": [".replicas", ".template.spec.parallelism"]})
    with pytest.raises(workload_spec.InvalidObject, match=r"js-x: \.template\.spec\.parallelism has no value"):
        workload_spec.count(expression, job("x", replicas=2), "js-x")
    assert workload_spec.count(expression, job("x", replicas=2, parallelism=3), "js-x") == 6


def test_bad_items_are_named_with_their_place_in_the_array() -> None:
    with pytest.raises(workload_spec.InvalidObject, match=r"\.spec\.replicatedJobs\[1\]\.name: a pod set name must be"):
        workload_spec.pod_sets(jobset(job("ok"), job("Not_A_Label")), integration())
    with pytest.raises(workload_spec.InvalidObject, match=r"no items in the object"):
        workload_spec.pod_sets(jobset(), integration())
    with pytest.raises(workload_spec.InvalidObject, match=r"pod set names repeat"):
        workload_spec.pod_sets(jobset(job("a"), job("a")), integration())
    with pytest.raises(workload_spec.InvalidObject, match=r"Kueue takes at most 8"):
        workload_spec.pod_sets(jobset(*(job(f"j{i}") for i in range(9))), integration())
    with pytest.raises(
        workload_spec.InvalidObject, match=r"pod set b \(\.spec\.replicatedJobs\[1\]\): \.replicas must be"
    ):
        workload_spec.pod_sets(jobset(job("a"), {**job("b"), "replicas": "two"}), integration())


def test_count_expressions_parse_to_a_tree_and_bad_ones_name_the_field() -> None:
    assert parse_count(3) == CountConst(3)
    assert parse_count({"max": [".a", {"path": ".b", "default": 0}]}) == CountOp(
        "max", (CountPath(".a"), CountPath(".b", CountConst(0)))
    )
    for bad, message in (
        ("{avg: [.a]}", "a count is a number, a path"),
        ("{min: []}", "min: a list of counts"),
        ("{path: .a, fallback: 1}", "takes path and default, got ['fallback']"),
        ("-1", "must not be negative"),
    ):
        text = CONFIG.replace("count: {product", f"count: {bad}\n        countWas: {{product")
        text = text.split("\n        countWas:")[0] + "\n        template: .template.spec.template\n"
        with pytest.raises(ConfigError) as error:
            parse_configuration(text)
        assert "podSetsFrom[0].count" in str(error.value), str(error.value)
        assert message in str(error.value)


def test_count_path_keeps_working_and_its_default_is_only_what_is_written() -> None:
    text = """
multiKueue: {externalFrameworks: [{name: JobSet.v1alpha2.jobset.x-k8s.io}]}
dispatcher:
  adapters:
  - name: JobSet.v1alpha2.jobset.x-k8s.io
    integration:
      suspend: {path: .spec.suspend, value: true}
      podSets: [{name: a, countPath: .spec.parallelism, template: .spec.template},
                {name: b, countPath: .spec.parallelism, count: 2, template: .spec.template}]
"""
    found = parse_configuration(text).adapter(JOBSET).integration
    assert found is not None
    obj: dict[str, Any] = {"metadata": {"name": "x"}, "spec": {"template": TEMPLATE}}
    with pytest.raises(workload_spec.InvalidObject, match=r"pod set a: \.spec\.parallelism has no value"):
        workload_spec.pod_sets(obj, found)
    obj["spec"]["parallelism"] = 5
    assert [p["count"] for p in workload_spec.pod_sets(obj, found)] == [5, 5]
    found_b = found.model_copy(update={"pod_sets": found.pod_sets[1:]})
    del obj["spec"]["parallelism"]
    assert [p["count"] for p in workload_spec.pod_sets(obj, found_b)] == [2], "an explicit count is countPath's default"


@pytest.mark.parametrize(
    ("annotations", "expected"),
    [
        ({}, None),
        ({"kueue.x-k8s.io/podset-required-topology": "rack"}, {"required": "rack"}),
        ({"kueue.x-k8s.io/podset-required-topology": "rack", "kueue.x-k8s.io/podset-preferred-topology": "block"},
         {"required": "rack"}),  # Kueue's order: required first
        ({"kueue.x-k8s.io/podset-preferred-topology": "block", "kueue.x-k8s.io/podset-group-name": "g"},
         {"preferred": "block", "podSetGroupName": "g"}),
        ({"kueue.x-k8s.io/podset-unconstrained-topology": "true", "kueue.x-k8s.io/podset-group-name": "g"},
         {"unconstrained": True}),  # a group name only with required or preferred
        ({"kueue.x-k8s.io/podset-slice-required-topology": "host", "kueue.x-k8s.io/podset-slice-size": "4"},
         {"podSetSliceRequiredTopology": "host", "podSetSliceSize": 4}),
        ({"kueue.x-k8s.io/podset-slice-required-topology": "host"}, None),  # a slice needs its size
    ],
)  # fmt: skip
def test_topology_requests_are_read_from_the_template_as_kueue_reads_them(
    annotations: dict[str, str], expected: dict[str, Any] | None
) -> None:
    template = {"metadata": {"annotations": annotations}, "spec": TEMPLATE["spec"]}
    assert workload_spec.topology_request(template, None, {}, "pod set p") == expected


def test_index_labels_and_group_counts_come_from_the_configuration() -> None:
    topology = Topology.model_validate({"podIndexLabel": "batch.kubernetes.io/job-completion-index",
                                        "subGroupIndexLabel": "jobset.sigs.k8s.io/job-index",
                                        "subGroupCount": ".replicas"})  # fmt: skip
    request = workload_spec.topology_request(TEMPLATE, topology, {"replicas": 3}, "pod set p")
    assert request == {"podIndexLabel": "batch.kubernetes.io/job-completion-index", "subGroupCount": 3,
                       "subGroupIndexLabel": "jobset.sigs.k8s.io/job-index"}  # fmt: skip
    bad = {"metadata": {"annotations": {"kueue.x-k8s.io/podset-unconstrained-topology": "maybe"}}}
    with pytest.raises(workload_spec.InvalidObject, match="podset-unconstrained-topology must be a boolean"):
        workload_spec.topology_request(bad, None, {}, "pod set p")


def test_the_finished_message_is_the_first_text_at_the_configured_paths() -> None:
    from multikueue.integration.lifecycle import finished_message

    recipe = integration().model_copy(update={"finished_message": (
        '.status.conditions[?type=="Completed" && status=="True"].message',
        '.status.conditions[?type=="Failed" && status=="True"].message',
    )})  # fmt: skip
    failed = {"status": {"conditions": [
        {"type": "StartupPolicyCompleted", "status": "True", "message": "not this one"},
        {"type": "Completed", "status": "False", "message": "nor this"},
        {"type": "Failed", "status": "True", "message": "jobset failed: job x failed"}]}}  # fmt: skip
    assert finished_message(failed, recipe) == "jobset failed: job x failed"
    assert finished_message({"status": {}}, recipe) == "", "none found: the caller's default"
    assert finished_message(failed, integration()) == "", "none configured"
