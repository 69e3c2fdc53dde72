"""Object bodies the tests, the demo and the benchmarks share."""

from __future__ import annotations

from typing import Any, TypedDict


class ResourceAddress(TypedDict):
    """The leading arguments of ``CustomObjectsApi`` calls; unpack with ``**``."""

    group: str
    version: str
    plural: str


PIPELINERUN = ResourceAddress(group="tekton.dev", version="v1", plural="pipelineruns")
"""Keyword arguments that address PipelineRuns through ``CustomObjectsApi``."""


def pipelinerun(name: str, *, labels: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """A valid Tekton v1 PipelineRun with an inline one-task pipeline; ``spec`` keys are merged in."""
    return {
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "metadata": {"name": name, "labels": dict(labels or {})},
        "spec": {
            "params": [{"name": "GREETING", "value": "Hello"}],
            "pipelineSpec": {
                "params": [{"name": "GREETING", "type": "string"}],
                "tasks": [
                    {
                        "name": "echo",
                        "params": [{"name": "MSG", "value": "$(params.GREETING)"}],
                        "taskSpec": {
                            "params": [{"name": "MSG", "type": "string"}],
                            "steps": [{"name": "echo", "image": "busybox", "script": "echo $(params.MSG)"}],
                        },
                    }
                ],
            },
            "timeouts": {"pipeline": "1h0m0s"},
            **spec,
        },
    }


def running_status(name: str) -> dict[str, Any]:
    """The status Tekton writes once a run has started."""
    return {
        "startTime": "2026-08-01T10:00:01Z",
        "conditions": [
            {
                "type": "Succeeded",
                "status": "Unknown",
                "reason": "Running",
                "message": "Tasks Completed: 0 (Failed: 0, Cancelled 0), Incomplete: 1, Skipped: 0",
                "lastTransitionTime": "2026-08-01T10:00:02Z",
            }
        ],
        "childReferences": [
            {
                "apiVersion": "tekton.dev/v1",
                "kind": "TaskRun",
                "name": f"{name}-echo",
                "pipelineTaskName": "echo",
            }
        ],
    }


WIDGET_GROUP = "examples.multikueue.x-k8s.io"


def widget_crd(*, strict_status: bool, group: str = WIDGET_GROUP, kind: str = "Widget") -> dict[str, Any]:
    """A small job-like kind of this project's own (tests only). ``strict_status`` limits ``status.phase`` to
    Pending/Running/Done, so a worker with the loose variant can report a status the manager refuses. Another
    ``group``/``kind`` gives the same shape under a name no other test installs."""
    plural = f"{kind.lower()}s"
    phase: dict[str, Any] = {"type": "string"}
    if strict_status:
        phase["enum"] = ["Pending", "Running", "Done"]
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower(), "listKind": f"{kind}List"},
            "versions": [{
                "name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                    "status": {"type": "object", "properties": {"phase": phase, "message": {"type": "string"},
                                                                "ready": {"type": "integer"}}},
                }}},
            }],
        },
    }  # fmt: skip


def widget(name: str, *, managed_by: str | None = "kueue.x-k8s.io/multikueue") -> dict[str, Any]:
    spec: dict[str, Any] = {"size": 3}
    if managed_by:
        spec["managedBy"] = managed_by
    return {"apiVersion": f"{WIDGET_GROUP}/v1", "kind": "Widget", "metadata": {"name": name}, "spec": spec}
