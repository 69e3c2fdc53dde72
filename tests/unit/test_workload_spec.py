"""The Workload a queued object gets (integration/workload_spec.py): Kueue's name, pod sets and their requests, the
metadata Kueue's jobframework writes, from the shipped example and the README's lines."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from multikueue import owners
from multikueue.config import parse_configuration
from multikueue.integration import workload_spec
from multikueue.kube.addresses import GroupVersionKind
from tests.unit.test_lifecycle import PR, _adapter, _run


def test_the_workload_name_is_kueues() -> None:
    # Kueue: sha1("PipelineRun\ntekton.dev\nbuild\nu-1")[:5], after "<kind lowercased>-<name>".
    name = owners.workload_name("build", "u-1", PR)
    assert name.startswith("pipelinerun-build-")
    assert len(name) == len("pipelinerun-build-") + 5
    long = owners.workload_name("x" * 300, "u-1", PR)
    assert len(long) == 253


def test_pod_sets_take_constant_and_annotation_requests() -> None:
    adapter = _adapter()
    assert adapter.integration is not None
    obj = _run(annotations={"kueue.konflux-ci.dev/requests-cpu": "500m", "kueue.konflux-ci.dev/requests-memory": "1Gi"})
    [pod_set] = workload_spec.pod_sets(obj, adapter.integration)
    assert pod_set["name"] == "pod-set-1"
    assert pod_set["count"] == 1
    requests = pod_set["template"]["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {"tekton.dev/pipelineruns": "1", "cpu": "500m", "memory": "1Gi"}


def test_a_bad_quantity_in_an_annotation_names_the_annotation_and_value() -> None:
    adapter = _adapter()
    assert adapter.integration is not None
    obj = _run(annotations={"kueue.konflux-ci.dev/requests-cpu": "lots"})
    with pytest.raises(workload_spec.InvalidObject, match=r"annotation kueue.konflux-ci.dev/requests-cpu: .*'lots'"):
        workload_spec.pod_sets(obj, adapter.integration)


def test_a_template_pod_set_counts_from_the_object() -> None:
    config = parse_configuration("""
multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    integration:
      suspend: {path: .spec.suspend, value: true, runValue: false}
      podSets: [{name: workers, countPath: .spec.parallelism, template: .spec.template}]
""")
    integration = config.adapter(PR).integration
    assert integration is not None
    template = {"spec": {"containers": [{"name": "c", "image": "i", "resources": {"requests": {"cpu": "2"}}}]}}
    obj = _run()
    obj["spec"].update(parallelism=4, template=template)
    [pod_set] = workload_spec.pod_sets(obj, integration)
    # As Kueue's Go structs write it: the ObjectMeta always, empty maps and lists never.
    assert (pod_set["count"], pod_set["template"]) == (4, {"metadata": {}, **template})
    obj["spec"]["template"] = {"metadata": {"labels": {}}, "spec": {**template["spec"], "tolerations": []}}
    assert workload_spec.pod_sets(obj, integration)[0]["template"] == {"metadata": {}, **template}
    obj["spec"]["parallelism"] = "four"
    with pytest.raises(
        workload_spec.InvalidObject,
        match=r"pod set workers: \.spec\.parallelism must be a non-negative integer, got 'four'",
    ):
        workload_spec.pod_sets(obj, integration)


def test_the_built_workload_has_kueues_metadata() -> None:
    adapter = _adapter()
    assert adapter.integration is not None
    body = workload_spec.build(_run(held=True), PR, adapter.integration, active=True,
                           priority=workload_spec.Priority("high", 100))  # fmt: skip
    meta = body["metadata"]
    assert meta["labels"] == {"kueue.x-k8s.io/job-uid": "u-1"}
    assert meta["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]
    assert meta["ownerReferences"][0] | {"controller": True} == meta["ownerReferences"][0]
    assert body["spec"]["queueName"] == "q"
    assert body["spec"]["priorityClassRef"] == {"group": "kueue.x-k8s.io", "kind": "WorkloadPriorityClass",
                                                "name": "high"}  # fmt: skip
    assert body["spec"]["priority"] == 100
    assert "active" not in body["spec"]


def test_the_shipped_example_parses_and_makes_tekton_kueues_workload() -> None:
    from pathlib import Path

    text = (Path(__file__).parents[2] / "examples" / "tekton" / "integration-config.yaml").read_text()
    config = parse_configuration(text)
    integration = config.integrations[PR]
    obj = _run(annotations={"kueue.konflux-ci.dev/requests-cpu": "1"})
    body = workload_spec.build(obj, PR, integration, active=True, priority=None)
    [pod_set] = body["spec"]["podSets"]
    container = pod_set["template"]["spec"]["containers"][0]
    assert (pod_set["name"], pod_set["count"], container["name"], container["image"]) == ("pod-set-1", 1, "dummy",
                                                                                          "dummy")  # fmt: skip
    assert container["resources"]["requests"] == {"tekton.dev/pipelineruns": "1", "cpu": "1"}
    assert config.dispatcher.webhook is not None


def test_the_readmes_integration_lines_parse_and_count_as_kueue_counts_a_job() -> None:
    readme = (Path(__file__).parents[2] / "README.md").read_text()
    lines = readme.split("For a Job-like kind", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    widget = GroupVersionKind("examples.multikueue.x-k8s.io", "v1", "Widget")
    document = {"multiKueue": {"externalFrameworks": [{"name": "Widget.v1.examples.multikueue.x-k8s.io"}]},
                "dispatcher": {"adapters": [{"name": "Widget.v1.examples.multikueue.x-k8s.io",
                                             **yaml.safe_load(lines)}]}}  # fmt: skip
    integration = parse_configuration(yaml.safe_dump(document)).adapter(widget).integration
    assert integration is not None
    template = {"spec": {"containers": [{"name": "c", "image": "i"}]}}
    counts = [({"parallelism": 4, "completions": 3}, 3), ({"parallelism": 4}, 4), ({"completions": 5}, 1), ({}, 1)]
    for spec, expected in counts:
        [pod_set] = workload_spec.pod_sets(
            {"metadata": {"name": "w"}, "spec": {**spec, "template": template}}, integration
        )
        assert pod_set["count"] == expected, spec


@pytest.mark.parametrize("queues", ["manager.yaml", "worker.yaml"])
def test_the_example_queues_cover_every_resource_the_shipped_recipe_requests(queues: str) -> None:
    """A run's Workload asks for the recipe's per-run token (tekton.dev/pipelineruns, as tekton-kueue's does): a
    ClusterQueue that does not cover it can never admit one ("resource ... unavailable in ClusterQueue")."""
    tekton = Path(__file__).parents[2] / "examples" / "tekton"
    integration = parse_configuration((tekton / "integration-config.yaml").read_text()).integrations[PR]
    requested = {name for pod_set in integration.pod_sets for name in pod_set.requests}
    assert "tekton.dev/pipelineruns" in requested
    [queue] = [d for d in yaml.safe_load_all((tekton / queues).read_text()) if d and d["kind"] == "ClusterQueue"]
    covered = {name for group in queue["spec"]["resourceGroups"] for name in group["coveredResources"]}
    assert requested <= covered, f"{queues}'s ClusterQueue does not cover {sorted(requested - covered)}"
    for group in queue["spec"]["resourceGroups"]:
        for flavor in group["flavors"]:
            assert {r["name"] for r in flavor["resources"]} == set(group["coveredResources"]), "a quota for each"
