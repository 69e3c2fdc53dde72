"""A server that does not answer, against real API servers: the client raises ``kube.errors`` types only, saying in
one line which server and why, and whether the request may have been carried out (``maybe_done``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from multikueue.kube import events
from multikueue.kube.client import Timeouts, api_client_from_kubeconfig
from multikueue.kube.errors import StreamBroken, Unreachable, outcome_unknown
from multikueue.kube.listwatch import ApiListSource
from multikueue.runtime.informer import Informer, ObjectKey
from multikueue.runtime.workqueue import Backoff
from multikueue_testbed import TestBed
from multikueue_testbed.apiproxy import ApiProxy
from multikueue_testbed.testbed import free_port
from multikueue_testbed.waiting import wait_until

QUICK = Timeouts(total=3, connect=1)


def _config_map(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}}


async def test_a_closed_port_is_unreachable_and_the_request_never_went_out(testbed: TestBed, tmp_path: Path) -> None:
    kubeconfig = testbed.cluster("worker1").kubeconfig
    port = free_port()
    kubeconfig["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    async with await api_client_from_kubeconfig(kubeconfig, timeout=QUICK, temp_dir=tmp_path) as api:
        with anyio.fail_after(10), pytest.raises(Unreachable) as raised:
            await api.request("POST", "/api/v1/namespaces/default/configmaps", body=_config_map("never"))
    assert str(raised.value) == f"cannot connect to 127.0.0.1:{port}: Connection refused"
    assert raised.value.maybe_done is False
    assert not outcome_unknown(raised.value)


async def test_a_paused_server_is_unreachable_and_a_sent_request_may_have_been_done(
    testbed: TestBed, namespace: str, tmp_path: Path
) -> None:
    cluster = testbed.cluster("worker2")
    host = cluster.url.removeprefix("https://")
    path = f"/api/v1/namespaces/{namespace}/configmaps"
    async with (
        await api_client_from_kubeconfig(cluster.kubeconfig, timeout=QUICK, temp_dir=tmp_path) as warm,
        await api_client_from_kubeconfig(cluster.kubeconfig, timeout=QUICK, temp_dir=tmp_path) as cold,
    ):
        await warm.request("GET", "/version")  # a connection in the pool: the next request goes out on it
        testbed.pause_apiserver("worker2")
        try:
            with anyio.fail_after(10), pytest.raises(Unreachable) as sent:
                await warm.request("POST", path, body=_config_map("sent"))
            with anyio.fail_after(10), pytest.raises(Unreachable) as not_sent:
                await cold.request("POST", path, body=_config_map("not-sent"))  # the TLS handshake never ends
        finally:
            testbed.resume_apiserver("worker2", wait=True)
    assert str(sent.value) == f"{host} did not answer in time"
    assert sent.value.maybe_done is True, "the request reached the server's socket: it may be carried out"
    assert outcome_unknown(sent.value)
    assert str(not_sent.value) == f"cannot connect to {host}: no connection within the connect timeout"
    assert not_sent.value.maybe_done is False


async def test_a_watch_cut_mid_body_is_a_broken_stream_and_the_informer_resumes(
    testbed: TestBed, namespace: str, tmp_path: Path
) -> None:
    async with (
        ApiProxy(testbed.cluster("worker1")) as proxy,
        await api_client_from_kubeconfig(proxy.kubeconfig, temp_dir=tmp_path) as api,
        anyio.create_task_group() as tg,
    ):
        path = f"/api/v1/namespaces/{namespace}/configmaps"
        source = ApiListSource(api, path, description="config maps")
        listed = await source.list(limit=10, continue_token=None)
        watch = source.watch(resource_version=listed["metadata"]["resourceVersion"], timeout_seconds=60)
        await api.send("POST", path, body=_config_map("first"))
        with anyio.fail_after(10):
            first = await anext(watch)
            assert first["object"]["metadata"]["name"] == "first"
            assert proxy.cut() == 1
            with pytest.raises(StreamBroken) as raised:
                await anext(watch)
        assert str(raised.value).startswith(f"the answer from 127.0.0.1:{proxy.port} was cut short")

        informer = Informer(source, backoff=Backoff(base=0.1, cap=0.5))
        failed: list[BaseException] = []
        record = informer._failed

        def spy(error: BaseException) -> None:
            failed.append(error)
            record(error)

        informer._failed = spy  # type: ignore[method-assign]
        tg.start_soon(informer.run)
        with anyio.fail_after(10):
            await informer.synced.wait()
        await wait_until(lambda: proxy.cut() == 1, what="the informer's watch under way")
        await wait_until(lambda: len(failed) == 1, what="the cut watch seen as failed")
        assert isinstance(failed[0], StreamBroken), failed
        await api.send("POST", path, body=_config_map("after"))
        await wait_until(lambda: ObjectKey(namespace, "after") in informer.store, what="the informer resumed")
        assert informer.connected
        assert len(failed) == 1, failed
        tg.cancel_scope.cancel()


async def test_an_event_to_an_unreachable_server_is_not_fatal(testbed: TestBed, tmp_path: Path) -> None:
    """Events are best effort: one that cannot be sent (no answer, not only an API error) is logged, not raised into
    the task that reported it (a generation's task group would end)."""
    kubeconfig = testbed.cluster("worker1").kubeconfig
    kubeconfig["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    about = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "default", "uid": "u"}}
    async with await api_client_from_kubeconfig(kubeconfig, timeout=QUICK, temp_dir=tmp_path) as api:
        with anyio.fail_after(10):
            await events.record(api, about, type_="Warning", reason="Test", message="m", component="tests")
