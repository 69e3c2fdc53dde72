"""The in-memory API server of the component tests (tests/component/memory_worker.py) answers as a real kube-apiserver
does, for what the copy-outcome table relies on: one script of calls, run through ``kube.resources.Objects`` against
worker1's real server and through ``MemoryObjects``, gives the same transcript (answers and errors by type, and the
changes of uid, resourceVersion, generation, status, finalizers and deletionTimestamp they show)."""

from __future__ import annotations

from typing import Any

from multikueue.clusters.worker import LiveObjects
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import KubeError
from multikueue.kube.resources import Objects
from tests.component.memory_worker import MemoryObjects, resource_of

PIPELINERUN = GroupVersionKind("tekton.dev", "v1", "PipelineRun")
FINALIZER = "results.tekton.dev/pipelinerun"
STARTED = "2026-08-01T10:00:01Z"
Object = dict[str, Any]


class Transcript:
    """What each call answered, without what differs between two servers by nature (uids, times, counters)."""

    def __init__(self) -> None:
        self.lines: list[tuple[str, Any]] = []
        self.last: Object | None = None

    async def call(self, what: str, answer: Any) -> Any:
        try:
            result = await answer
        except KubeError as e:
            self.lines.append((what, type(e).__name__))
            return None
        self.lines.append((what, self.shape(result)))
        return result

    def shape(self, result: Any) -> Any:
        if not isinstance(result, dict):
            return result  # get's None, delete's bool
        meta = result["metadata"]
        before = (self.last or {}).get("metadata") or {}
        shape = {
            "same uid": bool(before) and meta.get("uid") == before.get("uid"),
            "new version": meta.get("resourceVersion") != before.get("resourceVersion"),
            "generation": meta.get("generation"),
            "status": result.get("status"),
            "labels": meta.get("labels"),
            "finalizers": meta.get("finalizers"),
            "deleting": bool(meta.get("deletionTimestamp")),
        }
        self.last = result
        return shape


async def script(objects: LiveObjects, ns: str) -> list[tuple[str, Any]]:
    t = Transcript()
    body: Object = {"apiVersion": "tekton.dev/v1", "kind": "PipelineRun",
                    "metadata": {"name": "run", "labels": {"a": "1"}},
                    "spec": {"pipelineRef": {"name": "p"}}, "status": {"written": "on create"}}  # fmt: skip
    created = await t.call("create, its status dropped", objects.create(body, ns))
    assert created is not None
    uid, version = created["metadata"]["uid"], created["metadata"]["resourceVersion"]
    await t.call("create again: the name is taken", objects.create(body, ns))
    with_version = {**body, "metadata": {**body["metadata"], "name": "other", "resourceVersion": version}}
    await t.call("create carrying a resourceVersion", objects.create(with_version, ns))
    await t.call("get", objects.get("run", ns))
    await t.call("get: none of that name", objects.get("absent", ns))
    change = {"spec": {"timeouts": {"pipeline": "1h"}}, "status": {"ignored": "on the object's endpoint"}}
    await t.call("patch the spec (the status ignored)", objects.patch("run", change, ns))
    await t.call("the same patch: nothing changes", objects.patch("run", change, ns))
    stale = {"metadata": {"resourceVersion": version, "labels": {"b": "2"}}}
    await t.call("patch on a stale resourceVersion", objects.patch("run", stale, ns))
    await t.call("patch nothing there", objects.patch("absent", {"metadata": {"labels": {"b": "2"}}}, ns))
    running = [{"type": "Succeeded", "status": "Unknown", "reason": "Running"}]
    status = {"metadata": {"labels": {"c": "3"}}, "status": {"startTime": STARTED, "conditions": running}}
    await t.call("patch the status (the labels ignored)", objects.patch_status("run", status, ns))
    done = [{"type": "Succeeded", "status": "True", "reason": "Succeeded"}]
    await t.call("a merge patch: null removes, lists replaced", objects.patch_status(
        "run", {"status": {"startTime": None, "conditions": done}}, ns))  # fmt: skip
    await t.call("add a finalizer, remove a label", objects.patch(
        "run", {"metadata": {"finalizers": [FINALIZER], "labels": {"a": None}}}, ns))  # fmt: skip
    await t.call("delete another UID", objects.delete("run", ns, uid="00000000-0000-0000-0000-000000000000"))
    await t.call("get", objects.get("run", ns))
    await t.call("delete this UID", objects.delete("run", ns, uid=uid))
    await t.call("held by its finalizer", objects.get("run", ns))
    await t.call("delete again", objects.delete("run", ns, uid=uid))
    await t.call("get", objects.get("run", ns))
    await t.call("no new finalizer while deleting", objects.patch(
        "run", {"metadata": {"finalizers": [FINALIZER, "x.io/more"]}}, ns))  # fmt: skip
    await t.call("status while deleting", objects.patch_status("run", {"status": {"completionTime": STARTED}}, ns))
    await t.call("the last finalizer lifted", objects.patch("run", {"metadata": {"finalizers": None}}, ns))
    await t.call("gone", objects.get("run", ns))
    await t.call("delete: none of that name", objects.delete("run", ns))
    await t.call("list", objects.items(ns))
    return t.lines


async def test_the_in_memory_server_answers_as_a_real_one(worker1_api: ApiClient, namespace: str) -> None:
    real = await script(Objects(worker1_api, resource_of(PIPELINERUN)), namespace)
    memory = await script(MemoryObjects(resource_of(PIPELINERUN)), namespace)
    assert memory == real
    assert ("create again: the name is taken", "Conflict") in real, "the script ran its course"
