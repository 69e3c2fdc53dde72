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
    """The status Tekton writes once a run has started (tekton-and-client.md §1.6)."""
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
