"""The informer against real apiservers: list+watch, every change seen, recovery across a lost apiserver."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from kubernetes_asyncio import client as k8s_client

from multikueue.kube.addresses import Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.listwatch import ApiListSource
from multikueue.kube.resources import Objects
from multikueue.runtime.informer import Informer, ObjectKey
from multikueue.runtime.workqueue import Backoff
from multikueue_testbed import TestBed
from multikueue_testbed.client import k8s
from multikueue_testbed.objects import PIPELINERUN, pipelinerun, running_status
from multikueue_testbed.waiting import wait_until

MERGE_PATCH = "application/merge-patch+json"


def pipelinerun_source(api: ApiClient, namespace: str) -> ApiListSource:
    return Objects(api, Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun")).source(namespace=namespace)


@pytest.fixture
async def running() -> AsyncIterator[Any]:
    async with anyio.create_task_group() as tg:

        def start(informer: Informer) -> Informer:
            tg.start_soon(informer.run)
            return informer

        yield start
        tg.cancel_scope.cancel()


async def server_names(api: ApiClient, namespace: str) -> list[str]:
    listed = await k8s_client.CustomObjectsApi(k8s(api)).list_namespaced_custom_object(
        **PIPELINERUN, namespace=namespace
    )
    return sorted(i["metadata"]["name"] for i in listed["items"])


async def test_the_cache_follows_every_change(namespace: str, worker1_api: ApiClient, running: Any) -> None:
    co = k8s_client.CustomObjectsApi(k8s(worker1_api))
    await co.create_namespaced_custom_object(**PIPELINERUN, namespace=namespace, body=pipelinerun("before"))
    events: list[tuple[str, str]] = []
    informer = running(
        Informer(
            pipelinerun_source(worker1_api, namespace), on_event=lambda t, o: events.append((t, o["metadata"]["name"]))
        )
    )
    with anyio.fail_after(30):
        await informer.synced.wait()
    assert events == [("ADDED", "before")]

    await co.create_namespaced_custom_object(**PIPELINERUN, namespace=namespace, body=pipelinerun("after"))
    await co.patch_namespaced_custom_object_status(  # type: ignore[call-arg]  # _content_type: the library's documented merge patch
        **PIPELINERUN,
        namespace=namespace,
        name="after",
        body={"status": running_status("after")},
        _content_type=MERGE_PATCH,
    )
    await co.delete_namespaced_custom_object(**PIPELINERUN, namespace=namespace, name="before")

    await wait_until(lambda: len(events) >= 4, what="4 events")
    assert events == [("ADDED", "before"), ("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "before")]
    cached = informer.get(ObjectKey(namespace, "after"))
    assert cached is not None
    assert cached["status"]["conditions"][0]["reason"] == "Running"
    assert sorted(k.name for k in informer.store) == await server_names(worker1_api, namespace) == ["after"]


async def test_the_cache_recovers_after_the_apiserver_restarts_with_history_gone(
    testbed: TestBed, namespace: str, worker2_api: ApiClient, manager_api: ApiClient, running: Any
) -> None:
    co = k8s_client.CustomObjectsApi(k8s(worker2_api))
    for name in ("kept", "dropped"):
        await co.create_namespaced_custom_object(**PIPELINERUN, namespace=namespace, body=pipelinerun(name))
    informer = running(Informer(pipelinerun_source(worker2_api, namespace), backoff=Backoff(base=0.2, cap=2)))
    with anyio.fail_after(30):
        await informer.synced.wait()
    assert informer.relists == 1

    testbed.stop_apiserver("worker2", kill=True)
    await wait_until(lambda: not informer.connected, what="disconnected")
    assert informer.disconnected_since is not None
    # History moves on without this watch: other clusters write to the shared etcd, which is then compacted.
    await k8s_client.CoreV1Api(k8s(manager_api)).create_namespaced_config_map(namespace, {"metadata": {"name": "tick"}})
    testbed.compact_etcd()
    testbed.start_apiserver("worker2")

    await co.delete_namespaced_custom_object(**PIPELINERUN, namespace=namespace, name="dropped")
    await co.create_namespaced_custom_object(**PIPELINERUN, namespace=namespace, body=pipelinerun("new"))
    await wait_until(
        lambda: sorted(k.name for k in informer.store) == ["kept", "new"], timeout=60, what="cache equal to the server"
    )
    assert informer.connected
    assert informer.relists >= 2, "the old resourceVersion is gone: the informer must list again"
