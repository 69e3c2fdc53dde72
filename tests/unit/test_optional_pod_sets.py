"""Pod sets present only when a predicate holds, default templates and added containers: what Kueue's RayJob
integration does with KubeRay's submitter, written as configuration (the recipe in docs/integration.md)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from multikueue.config import ConfigError, Integration, Predicate, parse_configuration
from multikueue.integration import lifecycle, workload_spec
from multikueue.integration.podsetinfo import PodSetInfo
from multikueue.kube.addresses import GroupVersionKind
from multikueue.predicates import holds

RAYJOB = GroupVersionKind("ray.io", "v1", "RayJob")
POD = {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.9"}]}}
# KubeRay's GetDefaultSubmitterContainer, as Kueue v0.19.2 puts it in the submitter pod set.
SUBMITTER_RESOURCES = {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}
DEFAULT_SUBMITTER = {"metadata": {}, "spec": {"restartPolicy": "Never", "containers": [
    {"name": "ray-job-submitter", "image": "rayproject/ray:2.9", "resources": SUBMITTER_RESOURCES}]}}  # fmt: skip


def recipe() -> dict[str, Any]:
    text = (Path(__file__).parents[2] / "docs" / "integration.md").read_text()
    block = text.split("### RayJob, as Kueue's own RayJob integration shapes it", 1)[1]
    [adapter] = yaml.safe_load(block.split("```yaml\n", 1)[1].split("```", 1)[0])
    return dict(adapter)


def configure(adapter: dict[str, Any]) -> str:
    return yaml.safe_dump({"multiKueue": {"externalFrameworks": [{"name": adapter["name"]}]},
                           "dispatcher": {"adapters": [adapter]}})  # fmt: skip


def integration() -> Integration:
    found = parse_configuration(configure(recipe())).adapter(RAYJOB).integration
    assert found is not None
    return found


def rayjob(mode: str | None = None, submitter: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"rayClusterSpec": {"headGroupSpec": {"template": copy.deepcopy(POD)},
                                               "workerGroupSpecs": [{"groupName": "w", "replicas": 2,
                                                                     "template": copy.deepcopy(POD)}]}}  # fmt: skip
    if mode is not None:
        spec["submissionMode"] = mode
    if submitter is not None:
        spec["submitterPodTemplate"] = submitter
    return {"metadata": {"name": "r", "namespace": "ns", "uid": "u"}, "spec": spec}


def by_name(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in workload_spec.pod_sets(obj, integration())}


def test_null_in_an_in_list_holds_when_the_path_has_no_value_and_only_then() -> None:
    predicate = Predicate.model_validate({"path": ".spec.mode", "in": ["K8sJobMode", None]})
    assert holds(predicate, {"spec": {}})
    assert holds(predicate, {"spec": {"mode": "K8sJobMode"}})
    assert not holds(predicate, {"spec": {"mode": "HTTPMode"}})
    without_null = Predicate.model_validate({"path": ".spec.mode", "in": ["K8sJobMode"]})
    assert not holds(without_null, {"spec": {}})


def test_the_submitter_is_kubeRays_default_in_k8s_job_mode_written_or_not() -> None:
    for mode in (None, "K8sJobMode"):
        pod_sets = by_name(rayjob(mode))
        assert list(pod_sets) == ["head", "submitter", "w"]
        assert pod_sets["submitter"] == {"name": "submitter", "count": 1, "template": DEFAULT_SUBMITTER}
        assert pod_sets["head"]["template"] == {"metadata": {}, **POD}


def test_a_submitter_template_in_the_object_is_used_as_it_is() -> None:
    mine = {"spec": {"containers": [{"name": "s", "image": "x", "resources": {"requests": {"cpu": "2"}}}]}}
    assert by_name(rayjob("K8sJobMode", mine))["submitter"]["template"] == {"metadata": {}, **mine}


def test_no_submitter_pod_set_without_a_submitter_job() -> None:
    for mode in ("HTTPMode", "InteractiveMode", "SidecarMode"):
        pod_sets = workload_spec.pod_sets(rayjob(mode, copy.deepcopy(POD)), integration())
        assert [p["name"] for p in pod_sets] == ["head", "w"], mode
        # templates() lines up with the pod sets: admission writes each pod set's info into its own template.
        assert len(workload_spec.templates(rayjob(mode), integration())) == 2


def test_sidecar_mode_counts_the_submitter_container_in_the_head_pod_set_only() -> None:
    obj = rayjob("SidecarMode")
    containers = by_name(obj)["head"]["template"]["spec"]["containers"]
    assert containers == [POD["spec"]["containers"][0], {"name": "ray-job-submitter", "resources": SUBMITTER_RESOURCES}]
    assert obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"] == POD  # the object is not touched
    assert len(by_name(rayjob("HTTPMode"))["head"]["template"]["spec"]["containers"]) == 1


def test_a_fill_without_a_value_in_the_object_leaves_the_field_out() -> None:
    obj = rayjob()
    del obj["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["image"]
    [container] = by_name(obj)["submitter"]["template"]["spec"]["containers"]
    assert "image" not in container


def test_admission_keeps_the_default_template_it_wrote_into_and_a_stop_adds_none() -> None:
    obj = {**rayjob(), "metadata": {"name": "r", "namespace": "ns", "uid": "u", "resourceVersion": "1"}}
    infos = [PodSetInfo(name, labels={"kueue.x-k8s.io/podset": name}, node_selector={"zone": "a"})
             for name in ("head", "submitter", "w")]  # fmt: skip
    ran = lifecycle.changed_object(obj, integration(), lifecycle.Step.RUN, infos)
    written = ran["spec"]["submitterPodTemplate"]
    assert written["spec"]["nodeSelector"] == {"zone": "a"}
    assert written["metadata"]["labels"] == {"kueue.x-k8s.io/podset": "submitter"}
    assert written["spec"]["containers"] == DEFAULT_SUBMITTER["spec"]["containers"]
    assert "submitterPodTemplate" not in obj["spec"]  # the object handed in is not changed
    stopped = lifecycle.changed_object(obj, integration(), lifecycle.Step.STOP, infos)
    assert "submitterPodTemplate" not in stopped["spec"]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda s: s["defaultTemplate"]["template"]["spec"]["containers"][0]["resources"]["requests"].update(
                cpu="lots"
            ),
            "podSets[1].defaultTemplate.template: spec.containers[0].resources.requests."
            "cpu must be a non-negative resource quantity such as 500m, 2Gi or 1, got 'lots'",
        ),
        (
            lambda s: s["defaultTemplate"]["fill"][0].update(path=".spec.containers[3].image"),
            "podSets[1].defaultTemplate.fill: [0].path '.spec.containers[3].image' is not inside the template",
        ),
        (
            lambda s: s["defaultTemplate"]["fill"][0].update(path="spec containers"),
            "must be a field path such as .spec.containers[0].image, got 'spec containers'",
        ),
        (
            lambda s: s["defaultTemplate"].update(template={"spec": {}}),
            "podSets[1].defaultTemplate.template: must be a pod template with spec.containers",
        ),
        (
            lambda s: s.update(template='.spec.pods[?name=="x"]'),
            "podSets[1].template: with defaultTemplate, a plain field path",
        ),
        (lambda s: s.pop("template"), "podSets[1].defaultTemplate: only with template"),
        (lambda s: s.update(when={"path": ".spec.submissionMode"}), "podSets[1].when.path: needs exactly one of"),
    ],
)
def test_a_bad_optional_pod_set_is_one_line_naming_the_field_and_value(change: Any, message: str) -> None:
    adapter = recipe()
    change(adapter["integration"]["podSets"][1])
    with pytest.raises(ConfigError) as error:
        parse_configuration(configure(adapter))
    assert message in str(error.value), str(error.value)


def test_an_added_container_is_checked_as_a_templates_are() -> None:
    adapter = recipe()
    head = adapter["integration"]["podSets"][0]
    head["addContainers"][0]["container"]["resources"]["limits"]["memory"] = "-1Gi"
    with pytest.raises(ConfigError, match=r"podSets\[0\]\.addContainers\[0\]\.container: .*limits\.memory .*'-1Gi'"):
        parse_configuration(configure(adapter))
    head["addContainers"][0]["container"]["resources"]["limits"]["memory"] = "1Gi"
    head.pop("template")
    with pytest.raises(ConfigError, match=r"podSets\[0\]\.addContainers: only with template"):
        parse_configuration(configure(adapter))


def test_an_object_for_which_no_pod_set_is_present_is_refused_naming_why() -> None:
    only = {"name": "only", "when": {"path": ".spec.on", "equals": True}, "template": ".spec.template"}
    suspend = {"path": ".spec.suspend", "value": True}
    text = configure({"name": "RayJob.v1.ray.io", "integration": {"suspend": suspend, "podSets": [only]}})
    found = parse_configuration(text).adapter(RAYJOB).integration
    assert found is not None
    obj: dict[str, Any] = {"metadata": {"name": "x"}, "spec": {"template": POD}}
    with pytest.raises(workload_spec.InvalidObject, match="no pod sets: the `when` of every pod set"):
        workload_spec.pod_sets(obj, found)
    assert [p["name"] for p in workload_spec.pod_sets({**obj, "spec": {**obj["spec"], "on": True}}, found)] == ["only"]
