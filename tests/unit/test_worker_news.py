"""A worker's Warning Events reach the manager object even when the pass that first read them fails."""

from __future__ import annotations

from collections import deque
from typing import Any

import pytest

from multikueue.clusters.connections import WorkerConnection
from multikueue.config import parse_configuration
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.reconciler import WorkloadReconciler
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.client import ApiClient
from multikueue.kube.kubeconfig import ClusterAccess
from multikueue.runtime.informer import Informer, ObjectKey

PIPELINERUN = GroupVersionKind("tekton.dev", "v1", "PipelineRun")


class _Nowhere:
    description = "nowhere"

    async def list(self, *, limit: int, continue_token: str | None) -> dict[str, Any]:
        raise AssertionError("not listed in this test")

    def watch(self, *, resource_version: str, timeout_seconds: int) -> Any:
        raise AssertionError("not watched in this test")


async def test_a_warning_read_by_a_failed_pass_is_told_by_the_next_one_and_only_once() -> None:
    config = parse_configuration("{}")
    connection = WorkerConnection("w1", {}, origin="mk", gvks=(), timeout=1, on_state_change=lambda: None)
    key = ObjectKey("ns", "pipelinerun-hello")
    connection.warnings[key] = deque([("FailedCreate", "quota exceeded")])
    api = ApiClient(ClusterAccess(server="http://127.0.0.1:1"))
    reconciler = WorkloadReconciler(
        config, api, Informer(_Nowhere()), Informer(_Nowhere()), Informer(_Nowhere()),
        lambda: {"w1": connection.worker}, {},
    )  # fmt: skip
    told: list[str] = []
    failures = iter([ConnectionResetError("the manager's API server went away")])

    async def object_event(adapter: Any, obj: Any, type_: str, message: str, *, reason: str = "") -> None:
        if (failure := next(failures, None)) is not None:
            raise failure
        told.append(f"{reason}: {message}")

    reconciler.status.object_event = object_event  # type: ignore[method-assign]
    local = {"metadata": {"name": key.name, "namespace": key.namespace}}
    adapter = GenericAdapter(PIPELINERUN, "mk", config.adapter(PIPELINERUN))
    obj = {"metadata": {"name": "hello", "namespace": "ns"}}
    try:
        with pytest.raises(ConnectionResetError):
            await reconciler.news.surface(local, adapter, obj, {"w1": connection.worker}, {})
        for _ in range(2):  # the retry tells it; a later pass does not tell it again
            await reconciler.news.surface(local, adapter, obj, {"w1": connection.worker}, {})
        assert told == ['WorkerWarning: worker "w1": FailedCreate: quota exceeded']
        reconciler._forget(key, [connection.worker])
        assert connection.worker.warnings_about(key) == (), "a deleted Workload's news are dropped"
    finally:
        await api.close()
