"""Pure pieces of the off-the-happy-path fixes: error descriptions, retry delays, the placement record, what a copy
must not carry, and writes to several workers at once (pruned fields: test_mirror.py; the offline check's wording:
test_adapter_check.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Hashable
from typing import Any

import anyio
import anyio.lowlevel

from multikueue.config import Adapter
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.direct import placement_record
from multikueue.dispatch.writes import WorkerWriteFailed, WorkerWrites
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.errors import (
    ApiError,
    BadRequest,
    Busy,
    Conflict,
    Forbidden,
    Gone,
    Invalid,
    NotFound,
    Refused,
    Unauthorized,
    describe,
    refused,
)
from multikueue.labels import PLACEMENT_PHASE, PLACEMENT_RECORD, PLACEMENT_WORKER
from multikueue.runtime.controller import Controller
from multikueue.runtime.informer import retry_delay
from multikueue.runtime.workqueue import Backoff
from multikueue_testbed.objects import pipelinerun

PIPELINERUN = GroupVersionKind("tekton.dev", "v1", "PipelineRun")


def api_exception(status: int, reason: str, body: Any = None, headers: dict[str, str] | None = None) -> ApiError:
    """An API error as kube/ raises it from an HTTP answer, typed by its code."""
    return refused(status, reason, json.dumps(body or {}).encode(), headers)


def test_api_errors_are_raised_as_what_their_code_means_with_the_answer_kept() -> None:
    expected = {400: BadRequest, 401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 410: Gone,
                422: Invalid, 429: Busy, 503: Busy, 500: ApiError}  # fmt: skip
    for code, kind in expected.items():
        error = api_exception(code, "r", {"message": "m"}, {"Retry-After": "2"})
        assert type(error) is kind, code
        headers: dict[str, str] = dict(error.headers or {})
        assert (error.status, headers.get("Retry-After"), describe(error)) == (code, "2", f"HTTP {code} r: m")
    assert all(issubclass(k, Refused) for k in (BadRequest, Forbidden, NotFound, Invalid))
    assert not any(issubclass(k, Refused) for k in (Unauthorized, Conflict, Gone, Busy))


def test_an_api_error_is_one_line_with_code_reason_and_message_and_no_headers() -> None:
    status = {"kind": "Status", "reason": "NotFound", "message": 'namespaces "team-a" not found', "code": 404}
    error = api_exception(404, "Not Found", status, headers={"Audit-Id": "abc", "Content-Type": "application/json"})
    assert "Audit-Id" in str(error)  # what the error's own text keeps, for debugging
    assert describe(error) == 'HTTP 404 NotFound: namespaces "team-a" not found'
    assert describe(TimeoutError()) == "TimeoutError"


def test_a_worker_write_failure_names_worker_object_and_reason_and_carries_log_fields() -> None:
    status = {"reason": "Forbidden", "message": "pipelineruns.tekton.dev is forbidden: User x cannot create"}
    failure = WorkerWriteFailed(
        "w2", "create", "PipelineRun", "team-a", "hello", api_exception(403, "Forbidden", status)
    )
    assert str(failure) == (
        'worker "w2": cannot create PipelineRun team-a/hello: HTTP 403 Forbidden: '
        "pipelineruns.tekton.dev is forbidden: User x cannot create"
    )
    assert failure.log_fields == {"cluster": "w2", "kind": "PipelineRun", "namespace": "team-a", "name": "hello",
                                  "code": "403"}  # fmt: skip


def test_a_busy_server_is_asked_again_when_it_says_not_after_the_grown_backoff() -> None:
    backoff = Backoff(base=0.5, factor=2, cap=30)
    starting = api_exception(429, "Too Many Requests", {"message": "storage is (re)initializing"}, {"Retry-After": "1"})
    assert retry_delay(starting, 12, backoff) == 1.0
    assert retry_delay(api_exception(503, "Service Unavailable"), 12, backoff) == 1.0
    assert retry_delay(api_exception(429, "", None, {"Retry-After": "120"}), 1, backoff) == 5.0
    assert retry_delay(api_exception(500, "Internal"), 12, backoff) >= 24  # the streak's backoff, jittered
    assert retry_delay(ConnectionError(), 12, backoff) >= 24


def test_the_placement_record_is_the_condition_or_else_the_annotation() -> None:
    condition = {"type": "MultiKueuePlacement", "status": "False", "reason": "NoWorkerFits", "message": "none"}
    assert placement_record({"metadata": {}, "status": {"conditions": [condition]}}) == condition
    annotated = {"metadata": {"annotations": {PLACEMENT_RECORD: json.dumps(condition)}}}
    assert placement_record(annotated) == condition
    assert placement_record({"metadata": {"annotations": {PLACEMENT_RECORD: "{not json"}}}) is None


def test_a_copy_carries_neither_kubectls_last_applied_nor_the_managers_placement_notes() -> None:
    run = pipelinerun("hello", managedBy="kueue.x-k8s.io/multikueue")
    run["metadata"].update(namespace="ns", uid="u")
    run["metadata"]["annotations"] = {
        "kubectl.kubernetes.io/last-applied-configuration": json.dumps(run),
        PLACEMENT_WORKER: "w1",
        PLACEMENT_PHASE: "Placed",
        PLACEMENT_RECORD: "{}",
        "team": "kept",
    }
    adapter = GenericAdapter(PIPELINERUN, "kueue.x-k8s.io/multikueue", Adapter.defaults(PIPELINERUN))
    notes = adapter.build_copy(run, workload_name=None, origin="o")["metadata"]["annotations"]
    assert notes["team"] == "kept"
    assert not {"kubectl.kubernetes.io/last-applied-configuration", PLACEMENT_WORKER, PLACEMENT_PHASE} & set(notes)
    assert PLACEMENT_RECORD not in notes


async def test_writes_to_workers_run_side_by_side_and_a_hung_one_finishes_in_the_background() -> None:
    woken: list[Hashable] = []
    enqueued = anyio.Event()

    def enqueue(key: Hashable) -> None:
        woken.append(key)
        enqueued.set()

    writes = WorkerWrites(enqueue, patience=0.2)
    release = anyio.Event()
    healthy: list[str] = []

    async def hung() -> None:
        await release.wait()
        raise TimeoutError("no answer")

    async def fine() -> None:
        healthy.append("w1")

    async with anyio.create_task_group() as tg:
        tg.start_soon(writes.run)
        await anyio.lowlevel.checkpoint()
        began = time.monotonic()
        failures = await writes.each("key", {"w1": fine, "w2": hung})
        assert failures == {}
        assert healthy == ["w1"]
        assert time.monotonic() - began < 5  # bounded by the patience, not by the hung write
        assert writes.busy("w2", "key")
        assert await writes.each("key", {"w2": fine}) == {}  # never started twice
        release.set()
        with anyio.fail_after(5):
            await enqueued.wait()
        assert woken == ["key"]
        taken = writes.take_failures("key")
        assert isinstance(taken["w2"], TimeoutError)
        assert writes.take_failures("key") == {}
        tg.cancel_scope.cancel()


async def test_a_failed_reconcile_is_counted_for_its_controller() -> None:
    failed: list[str] = []
    counted = anyio.Event()

    class Observer:
        def started(self, controller: str, waited: float, depth: int) -> None:
            pass

        def failed(self, controller: str) -> None:
            failed.append(controller)
            counted.set()

    async def reconcile(key: str) -> None:
        raise RuntimeError("boom")

    controller: Controller[str] = Controller("c", reconcile, backoff=Backoff(base=10, cap=10), observe=Observer())
    async with anyio.create_task_group() as tg:
        tg.start_soon(controller.run)
        controller.enqueue("k")
        with anyio.fail_after(5):
            await counted.wait()
        tg.cancel_scope.cancel()
    assert failed == ["c"]
