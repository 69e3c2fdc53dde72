"""``multikueue logs`` in a kind's own shape (tkn's for PipelineRun): which containers, in which order, prefixed how."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from multikueue.config import LogsShape, parse_configuration
from multikueue.kube.addresses import GroupVersionKind
from multikueue.logs_order import Target, part_order, started, targets

ROOT = Path(__file__).resolve().parents[2]

TEKTON = LogsShape(group_label="tekton.dev/pipelineTask", container_prefix="step-",
                   order=(".status.pipelineSpec.tasks[*].name", ".status.pipelineSpec.finally[*].name"))  # fmt: skip


def pod(name: str, task: str, created: str, steps: list[str]) -> dict[str, Any]:
    containers = [{"name": "prepare"}] + [{"name": f"step-{s}"} for s in steps]
    return {"metadata": {"name": name, "creationTimestamp": created, "labels": {"tekton.dev/pipelineTask": task}},
            "spec": {"initContainers": [{"name": "place-scripts"}], "containers": containers}}  # fmt: skip


RUN = {"status": {"pipelineSpec": {"tasks": [{"name": "fetch"}, {"name": "build"}, {"name": "test"}],
                                   "finally": [{"name": "report"}]}}}  # fmt: skip
PODS = [  # as listed: oldest first, finally's pod before a late task's, a retry after its first attempt
    pod("r-report-pod", "report", "2026-11-26T10:00:09Z", ["send"]),
    pod("r-build-pod", "build", "2026-11-26T10:00:03Z", ["compile", "package"]),
    pod("r-fetch-pod", "fetch", "2026-11-26T10:00:01Z", ["clone"]),
    pod("r-test-pod-retry1", "test", "2026-11-26T10:00:07Z", ["unit"]),
    pod("r-test-pod", "test", "2026-11-26T10:00:05Z", ["unit"]),
]


def test_tasks_come_in_the_pipelines_order_finally_last_retries_oldest_first_steps_as_they_run() -> None:
    order = part_order(RUN, TEKTON)
    assert order == ["fetch", "build", "test", "report"]
    assert [(t.pod, t.prefix) for t in targets(PODS, order, TEKTON)] == [
        ("r-fetch-pod", "[fetch : clone] "),
        ("r-build-pod", "[build : compile] "),
        ("r-build-pod", "[build : package] "),
        ("r-test-pod", "[test : unit] "),
        ("r-test-pod-retry1", "[test : unit] "),
        ("r-report-pod", "[report : send] "),
    ]


def test_a_task_a_container_and_bare_lines_narrow_and_strip() -> None:
    order = part_order(RUN, TEKTON)
    assert targets(PODS, order, TEKTON, part="build", container="package", prefixed=False) == [
        Target("r-build-pod", "step-package", "")]  # fmt: skip
    assert targets(PODS, order, TEKTON, part="build", container="step-compile") == [
        Target("r-build-pod", "step-compile", "[build : compile] ")]  # fmt: skip
    assert targets(PODS, order, TEKTON, part="deploy") == []


def test_parts_the_run_does_not_name_yet_come_last_oldest_first() -> None:
    """A run whose status has no pipelineSpec yet (or a pod without the label): by creation time, after the rest."""
    unlabelled = {"metadata": {"name": "stray", "creationTimestamp": "2026-11-26T10:00:00Z"},
                  "spec": {"containers": [{"name": "step-x"}]}}  # fmt: skip
    assert [t.pod for t in targets([*PODS[:3], unlabelled], [], TEKTON)] == [
        "stray", "r-fetch-pod", "r-build-pod", "r-build-pod", "r-report-pod"]  # fmt: skip
    assert [t.prefix for t in targets([unlabelled], ["fetch"], TEKTON)] == ["[stray : x] "]


def test_a_container_has_a_log_once_running_or_ended() -> None:
    def status(state: dict[str, Any]) -> dict[str, Any]:
        return {"status": {"containerStatuses": [{"name": "step-a", "state": state}]}}

    assert started(status({"running": {}}), "step-a")
    assert started(status({"terminated": {"exitCode": 0}}), "step-a")
    assert not started(status({"waiting": {"reason": "PodInitializing"}}), "step-a")
    assert not started({}, "step-a")


def test_every_shipped_pipelinerun_configuration_shows_logs_as_tkn_does() -> None:
    gvk = GroupVersionKind.parse("PipelineRun.v1.tekton.dev")
    for path in ("config/manager/config.yaml", "examples/tekton/adapter-config.yaml",
                 "examples/tekton/integration-config.yaml"):  # fmt: skip
        text = (ROOT / path).read_text()
        assert parse_configuration(text).adapter(gvk).logs == TEKTON, path
    chart = yaml.safe_load((ROOT / "charts/multikueue/values.yaml").read_text())
    assert parse_configuration(chart["managerConfig"]["controllerManagerConfigYaml"]).adapter(gvk).logs == TEKTON
