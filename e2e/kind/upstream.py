"""Tekton's own example PipelineRuns (``examples/v1/pipelineruns`` of the Tekton Pipelines module the suite runs),
read at test time and submitted on the manager as a team would: in its namespace, with the queue-name label and
``spec.managedBy``, every image they name replaced by the one built here. What an example keeps beside its run
(a Task, a Pipeline, a Secret) is applied on each worker, as a team keeps its catalog there: MultiKueue copies the
run, not what it refers to."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import yaml

from e2e.kind.components import EXAMPLE_STEP_IMAGE
from e2e.kind.scene import NAMESPACE, QUEUE
from multikueue_testbed import crds

# Each example and what a team uses that it exercises. A volumeClaimTemplate's claim is bound by the workers' default
# StorageClass, local-path-provisioner's (e2e/kind/components.py), as on any kind cluster. Left out: those resolving
# remote bundles or git (no network), and alpha features.
EXAMPLES = {
    "pipelinerun-results-with-params.yaml": "a result passed to the next task as a param",
    "pipeline-object-results.yaml": "object results, whole and by key",
    "pipelinerun-array-results-substitution.yaml": "array results",
    "pipelinerun-task-execution-status.yaml": "when (a skipped task); finally reading the tasks' status",
    "6139-regression.yaml": "when on params; finally; pipeline results",
    "using_context_variables.yaml": "retries declared; context variables",
    "beta/pipelinerun-with-matrix.yaml": "matrix (include, onError, retries) with a Task kept on each worker",
    "pipelinerun-with-task-timeout-override.yaml": "timeouts, with a Pipeline and Tasks kept on each worker",
    "using-optional-workspaces-in-when-expressions.yaml": "a workspace on a ConfigMap; an optional one; when",
    "workspace-from-volumeclaimtemplate.yaml": "a workspace on a volumeClaimTemplate, written then read",
    "pipelinerun-with-parallel-tasks-using-pvc.yaml": "tasks in parallel sharing a volumeClaimTemplate workspace",
    "pipelinerun-using-different-subpaths-of-workspace.yaml": "subPaths of a volumeClaimTemplate workspace",
    "propagating-workspaces.yaml": "workspaces propagated: a volumeClaimTemplate, a ConfigMap, a Secret",
    "pipelinerun-with-when-expressions.yaml": "when on params and results, over a volumeClaimTemplate workspace",
}
# Also left out: stepaction-params.yaml (StepAction's CRD converts through Tekton's webhook, not installed here), and
# beta/isolated-workspaces.yaml. Its step's workspace `mountpath` (so spelt) is not read by Tekton's
# controller here, the Secret is mounted at the default path, and the step fails, as it does with no dispatcher.
WAVE = 3  # examples submitted at once: more starting pods at a time meet this host's cgroup v1 freezer ("unable to
#           freeze" from runc), which fails a pod's start and with it the task, as it would with no dispatcher; a run
#           whose worker's Events show that is submitted once more (test_kind.py)


def _images(value: Any) -> Any:
    """Every ``image`` field replaced by the step image built here."""
    if isinstance(value, dict):
        return {k: EXAMPLE_STEP_IMAGE if k == "image" and isinstance(v, str) else _images(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_images(v) for v in value]
    return value


def run_name(example: str) -> str:
    stem = example.rsplit("/", 1)[-1].removesuffix(".yaml").replace("_", "-").lower()
    return f"ex-{stem}"[:50].rstrip("-")


def load(example: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The example's PipelineRun ready for the manager, and what it keeps beside it."""
    path = crds.TEKTON.directory() / "examples" / "v1" / "pipelineruns" / example
    documents = [_images(d) for d in yaml.safe_load_all(path.read_text()) if d]
    [run] = [d for d in documents if d["kind"] == "PipelineRun"]
    metadata = run["metadata"]
    metadata.pop("generateName", None)
    metadata.update(name=run_name(example), namespace=NAMESPACE)
    metadata.setdefault("labels", {})["kueue.x-k8s.io/queue-name"] = QUEUE
    run["spec"]["managedBy"] = "kueue.x-k8s.io/multikueue"
    beside = [d for d in documents if d["kind"] != "PipelineRun"]
    for document in beside:
        document["metadata"]["namespace"] = NAMESPACE
    return run, beside


def all_examples() -> Iterator[tuple[str, dict[str, Any], list[dict[str, Any]]]]:
    for example in EXAMPLES:
        yield (example, *load(example))
