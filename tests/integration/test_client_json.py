"""kube/'s JSON codec (orjson) against a real API server: what the client writes (UTF-8, not ``\\u`` escapes) is
taken as written, and what it reads back (an answer, a list, a watch event) is the object the standard library's
``json`` makes of the same document (tests/unit/test_kube_json.py compares the two codecs without a server)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client as k8s_client

from multikueue.kube.addresses import Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue_testbed import crds
from multikueue_testbed.client import k8s
from multikueue_testbed.objects import widget_crd

GROUP = "codec.examples.multikueue.x-k8s.io"
DOCUMENTS = Resource(GROUP, "v1", "documents", "Document")
TEXT = 'é ü 日本 🚀 \u2028 "quoted" back\\slash\ttab\n</script>'
# Numbers the API server keeps as they are (integers within int64, floats that are not whole: Go writes 1.0 as 1).
SPEC: dict[str, Any] = {
    "text": TEXT,
    "ключ": "значение",
    "int64": [9223372036854775807, -9223372036854775808, 0, -1],
    "floats": [0.1, 1.5e-10, 2.5e300],
    "nested": {"empty": {}, "list": [], "bools": [True, False], "deep": [[{"a": [1]}]]},
}


async def first(events: AsyncIterator[dict[str, Any]]) -> dict[str, Any]:
    async for event in events:
        return event
    raise AssertionError("the watch ended with no event")


@pytest.fixture
async def documents(worker1_api: ApiClient) -> Objects:
    await crds.install_crds(worker1_api, [widget_crd(strict_status=False, group=GROUP, kind="Document")])
    return Objects(worker1_api, DOCUMENTS)


async def test_what_the_client_writes_is_read_back_as_written_and_as_json_reads_it(
    namespace: str, worker1_api: ApiClient, documents: Objects
) -> None:
    source = documents.source(namespace=namespace)
    before = await source.list(limit=10, continue_token=None)
    assert before["items"] == []
    body = {"apiVersion": f"{GROUP}/v1", "kind": "Document", "metadata": {"name": "doc"}, "spec": SPEC}
    created = await documents.create(body, namespace)
    with anyio.fail_after(30):  # a watch from before the create: its first event is the create
        added = await first(source.watch(resource_version=before["metadata"]["resourceVersion"], timeout_seconds=20))
    patched = await documents.patch_status("doc", {"status": {"message": TEXT, "ready": 2**40}}, namespace)
    fetched = await documents.get("doc", namespace)
    listed = (await source.list(limit=10, continue_token=None))["items"]

    assert added["type"] == "ADDED"
    for seen in (created, added["object"], patched, fetched, *listed):
        assert seen["spec"] == SPEC
    assert fetched is not None
    assert fetched["status"] == {"message": TEXT, "ready": 2**40}
    # kubernetes_asyncio decodes with the standard library's json: the same object from the same server.
    as_json_reads_it = await k8s_client.CustomObjectsApi(k8s(worker1_api)).get_namespaced_custom_object(
        GROUP, "v1", namespace, "documents", "doc"
    )
    assert fetched == as_json_reads_it
    assert listed == [as_json_reads_it]
