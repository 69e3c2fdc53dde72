"""Which containers ``multikueue logs`` reads, in which order and under which prefix: a pure decision from the run's
pods and the kind's ``logs`` shape (``LogsShape``), as the kind's own tool would show them.

For a PipelineRun (tkn's shape): the TaskRuns' pods in the pipeline's task order (``finally`` last), a retried task's
pods oldest first, each pod's steps in the order they run, every line prefixed ``[task : step]``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from multikueue.config import LogsShape
from multikueue.jsonpaths import find

Object = dict[str, Any]


@dataclass(frozen=True)
class Target:
    pod: str
    container: str
    prefix: str  # "" when lines are shown bare


def part_order(run: Object | None, shape: LogsShape) -> list[str]:
    """The run's parts in its own order (each name once), from the paths the shape names."""
    names: list[str] = []
    for path in shape.order:
        for value in find(run or {}, path):
            if isinstance(value, str) and value not in names:
                names.append(value)
    return names


def part_of(pod: Object, shape: LogsShape) -> str:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return str(labels.get(shape.group_label) or pod["metadata"]["name"])


def ordered_pods(pods: Sequence[Object], order: Sequence[str], shape: LogsShape) -> list[Object]:
    """Pods of named parts in the run's order, then the others; within a part (a retry, a matrix) oldest first."""

    def key(pod: Object) -> tuple[int, str, str]:
        part = part_of(pod, shape)
        rank = order.index(part) if part in order else len(order)
        return rank, pod["metadata"].get("creationTimestamp") or "", pod["metadata"]["name"]

    return sorted(pods, key=key)


def targets(pods: Sequence[Object], order: Sequence[str], shape: LogsShape, *, part: str | None = None,
            container: str | None = None, prefixed: bool = True) -> list[Target]:  # fmt: skip
    """Every container to read, in order: the shape's containers of each pod (``part``: that part's pods only;
    ``container``: that one, by its name or as shown)."""
    found: list[Target] = []
    for pod in ordered_pods(pods, order, shape):
        name = part_of(pod, shape)
        if part is not None and name != part:
            continue
        for spec in (pod.get("spec") or {}).get("containers") or []:
            cname = str(spec["name"])
            shown = cname.removeprefix(shape.container_prefix) or cname
            if not cname.startswith(shape.container_prefix) or container not in (None, cname, shown):
                continue
            found.append(Target(pod["metadata"]["name"], cname, f"[{name} : {shown}] " if prefixed else ""))
    return found


def started(pod: Object, container: str) -> bool:
    """Whether the container has a log to read yet (running or ended), from the pod's status."""
    for status in (pod.get("status") or {}).get("containerStatuses") or []:
        if status.get("name") == container:
            state = status.get("state") or {}
            return "running" in state or "terminated" in state
    return False
