"""One script of raw API calls whose transcript the simulated server (tests/sim/apiserver.py) must share with a real
kube-apiserver: what the dispatcher's correctness rests on beyond ``tests/integration/test_memory_fidelity.py``'s
script (which runs on both too): UID and resourceVersion preconditions on patches and deletes, an unconditional PUT
of a custom resource, the status endpoint ignoring metadata, a namespace that does not exist, discovery, and watches
(replayed from a resourceVersion, filtered by a label selector whose match an object gains and loses, and 410 Gone
from before the kind's history)."""

from __future__ import annotations

import json
from typing import Any, Protocol

import anyio

from multikueue.kube.client import JSON_PATCH, MERGE_PATCH
from multikueue.kube.errors import KubeError

Object = dict[str, Any]
PIPELINERUNS = "/apis/tekton.dev/v1/namespaces/{ns}/pipelineruns"
STARTED, DONE = "2026-08-01T10:00:01Z", "2026-08-01T10:05:00Z"  # status fields the PipelineRun schema keeps


class Api(Protocol):
    """``request`` and ``stream`` as ``kube.client.ApiClient`` offers them (the real one, or the simulated one)."""

    async def request(self, method: str, path: str, *, query: Any = None, body: Any = None, content_type: str = ...,
                      timeout: Any = None) -> Any: ...  # fmt: skip

    def stream(self, path: str, *, query: Any = None, timeout: Any = None) -> Any: ...


def shape(result: Any) -> Any:
    """What two servers share of an answer: no uids, times or counters."""
    if not isinstance(result, dict):
        return result
    if result.get("kind") == "APIResourceList":
        return sorted(r["name"] for r in result["resources"] if r["name"].startswith("pipelineruns"))
    if "items" in result:
        return sorted(item["metadata"]["name"] for item in result["items"])
    meta = result.get("metadata") or {}
    return {
        "name": meta.get("name"),
        "generation": meta.get("generation"),
        "labels": meta.get("labels"),
        "status": result.get("status"),
        "finalizers": meta.get("finalizers"),
        "deleting": bool(meta.get("deletionTimestamp")),
    }


async def script(api: Api, ns: str) -> list[tuple[str, Any]]:
    lines: list[tuple[str, Any]] = []

    async def call(what: str, method: str, path: str, **kwargs: Any) -> Any:
        try:
            result = await api.request(method, path, **kwargs)
        except KubeError as e:
            lines.append((what, type(e).__name__))
            return None
        lines.append((what, shape(result)))
        return result

    runs = PIPELINERUNS.format(ns=ns)
    listed = await api.request("GET", runs)
    start = listed["metadata"]["resourceVersion"]
    body: Object = {
        "apiVersion": "tekton.dev/v1",
        "kind": "PipelineRun",
        "metadata": {"name": "a", "labels": {"sel": "yes"}},
        "spec": {"pipelineRef": {"name": "p"}},
    }
    a = await call("create a", "POST", runs, body=body)
    assert a is not None
    uid, version = a["metadata"]["uid"], a["metadata"]["resourceVersion"]
    await call("create in a namespace that does not exist", "POST", PIPELINERUNS.format(ns=f"{ns}-none"), body=body)
    other_uid = {"metadata": {"uid": "00000000-0000-4000-a000-000000000000", "labels": {"x": "1"}}}
    await call("merge patch naming another uid", "PATCH", f"{runs}/a", body=other_uid, content_type=MERGE_PATCH)
    same_uid = {"metadata": {"uid": uid, "resourceVersion": version, "labels": {"x": "1"}}}
    await call("merge patch naming its uid and version", "PATCH", f"{runs}/a", body=same_uid, content_type=MERGE_PATCH)
    status_uid = {"metadata": {"uid": "00000000-0000-4000-a000-000000000000"}, "status": {"startTime": STARTED}}
    await call(
        "status patch naming another uid", "PATCH", f"{runs}/a/status", body=status_uid, content_type=MERGE_PATCH
    )
    stale_status = {"metadata": {"resourceVersion": version}, "status": {"completionTime": STARTED}}
    await call(
        "status patch on a stale version", "PATCH", f"{runs}/a/status", body=stale_status, content_type=MERGE_PATCH
    )
    await call(
        "status patch with its uid",
        "PATCH",
        f"{runs}/a/status",
        content_type=MERGE_PATCH,
        body={"metadata": {"uid": uid, "labels": {"ignored": "1"}}, "status": {"completionTime": DONE}},
    )
    test_fails = [
        {"op": "test", "path": "/metadata/uid", "value": "nope"},
        {"op": "add", "path": "/spec/x", "value": 1},
    ]
    await call("json patch whose test fails", "PATCH", f"{runs}/a", body=test_fails, content_type=JSON_PATCH)
    current = await call("get a", "GET", f"{runs}/a")
    assert current is not None
    unconditional = {**current, "metadata": {k: v for k, v in current["metadata"].items() if k != "resourceVersion"}}
    await call("PUT without a resourceVersion", "PUT", f"{runs}/a", body=unconditional)
    await call("PUT with it, a new spec", "PUT", f"{runs}/a", body={**current, "spec": {"x": 2}})
    await call(
        "unselected by a label change",
        "PATCH",
        f"{runs}/a",
        body={"metadata": {"labels": {"sel": "no"}}},
        content_type=MERGE_PATCH,
    )
    await call(
        "selected again", "PATCH", f"{runs}/a", body={"metadata": {"labels": {"sel": "yes"}}}, content_type=MERGE_PATCH
    )
    await call(
        "create b, not selected", "POST", runs, body={**body, "metadata": {"name": "b", "labels": {"sel": "no"}}}
    )
    await call(
        "delete a, other version precondition",
        "DELETE",
        f"{runs}/a",
        body={"kind": "DeleteOptions", "apiVersion": "v1", "preconditions": {"resourceVersion": version}},
    )
    await call("delete a", "DELETE", f"{runs}/a")
    await call("list selected", "GET", runs, query={"labelSelector": "sel=yes"})
    await call("list by name", "GET", runs, query={"fieldSelector": "metadata.name=b"})
    await call("discovery", "GET", "/apis/tekton.dev/v1")
    await call("discovery of a version not served", "GET", "/apis/tekton.dev/v9")
    await call("a kind not served", "GET", f"/apis/tekton.dev/v1/namespaces/{ns}/nothings")
    lines.append(("watch from the start, selected", await _watch(api, runs, start, "sel=yes")))
    lines.append(("watch from before the kind's history", await _watch(api, runs, "1", "")))
    return lines


async def _watch(api: Api, path: str, since: str, selector: str) -> Any:
    query: dict[str, Any] = {"watch": True, "resourceVersion": since, "timeoutSeconds": 2}
    if selector:
        query["labelSelector"] = selector
    events: list[tuple[str, str, Any]] = []
    try:
        with anyio.move_on_after(3):
            async with api.stream(path, query=query) as lines:
                async for line in lines:
                    event = json.loads(line)
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        events.append(("ERROR", str(obj.get("code")), obj.get("reason")))
                        break
                    events.append((event["type"], obj["metadata"]["name"], (obj["metadata"].get("labels") or {})))
    except KubeError as e:
        return type(e).__name__
    return events
