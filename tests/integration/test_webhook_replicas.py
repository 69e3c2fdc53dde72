"""Every replica serving the admission webhook answers it as the configuration in force says, for as long as it may
be called: a leader that loses its Lease drains its webhook (unready at once, answering through its shutdown delay)
before it exits, as a SIGTERM'd one does; a standby follows the configuration ConfigMap as the leader does, so a
kind added later is held, and a kind removed let through, by whichever replica the API server calls."""

from __future__ import annotations

import base64
import datetime
import functools
import json
import subprocess
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import anyio.abc
import pytest
import yaml
from kubernetes_asyncio import client as k8s_client

from multikueue.kube.client import ApiClient
from multikueue.labels import HELD_ANNOTATION, QUEUE_NAME_LABEL
from multikueue_testbed import TestBed, scrape
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.dispatcher import run_argv as dispatcher_argv
from multikueue_testbed.testbed import free_port
from multikueue_testbed.waiting import eventually
from tests.integration.controller import run_argv
from tests.integration.webhooks import events_about, generated_ca, lease_holder

DELAY = 4.0  # --shutdown-delay: long enough to probe many times, short for the suite
RETRY, RENEW = 1.0, 3.0  # --retry-period, --renew-deadline: a lost Lease is noticed within RETRY + RENEW seconds
LEASE = "multikueue-dispatcher"
PIPELINERUN = {"group": "tekton.dev", "version": "v1", "kind": "PipelineRun"}
WIDGET = {"group": "example.com", "version": "v1", "kind": "Widget"}  # served by no cluster: the webhook needs none
WIDGET_ADAPTER = {
    "name": "Widget.v1.example.com",
    "integration": {
        "suspend": {"path": ".spec.suspend", "value": True, "runValue": False},
        "podSets": [{"name": "workers", "countPath": ".spec.parallelism", "template": ".spec.template"}],
    },
}
HELD = [{"op": "add", "path": "/spec/suspend", "value": True},
        {"op": "add", "path": "/metadata/annotations", "value": {HELD_ANNOTATION: "true"}}]  # fmt: skip


@dataclass(frozen=True)
class Answer:
    status: int
    connection: str  # the Connection header: "close" while draining
    patch: list[Any] | None  # the JSON patch answered, if any


async def _mutate(port: int, ca_pem: bytes, kind: dict[str, str] = PIPELINERUN, obj: dict[str, Any] | None = None
                  ) -> Answer:  # fmt: skip
    """One AdmissionReview CREATE on a connection of its own."""
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": str(uuid.uuid4()), "operation": "CREATE", "kind": kind,
                          "object": obj if obj is not None else {"metadata": {"name": "x"}}}}  # fmt: skip
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http,
        http.post(f"https://127.0.0.1:{port}/mutate", json=review, ssl=scrape.tls_trusting(ca_pem)) as response,
    ):
        answer = (await response.json())["response"]
        assert answer["allowed"] is True
        patch = json.loads(base64.b64decode(answer["patch"])) if "patch" in answer else None
        return Answer(response.status, response.headers.get("Connection", ""), patch)


@asynccontextmanager
async def _replica(argv: list[str], log: Path) -> AsyncIterator[anyio.abc.Process]:
    """The controller as its own process, its output in ``log``; killed when the block ends, however it ends."""
    with log.open("w") as out:
        process = await anyio.open_process(argv, stdout=out, stderr=subprocess.STDOUT)
        try:
            yield process
        finally:
            if process.returncode is None:
                process.kill()
                with anyio.fail_after(30, shield=True):
                    await process.wait()


async def _take_lease(api: ApiClient, namespace: str) -> None:
    """Write the Lease as a competing replica that won it would: another holder, freshly acquired and renewed."""
    leases = k8s_client.CoordinationV1Api(k8s(api))

    async def take() -> str | None:
        lease = await leases.read_namespaced_lease(LEASE, namespace)
        now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": LEASE, "namespace": namespace,
                             "resourceVersion": lease.metadata.resource_version},
                "spec": {"holderIdentity": "intruder", "leaseDurationSeconds": 60, "acquireTime": now,
                         "renewTime": now, "leaseTransitions": (lease.spec.lease_transitions or 0) + 1}}  # fmt: skip
        written = await leases.replace_namespaced_lease(LEASE, namespace, raw_body(body))
        return written.spec.holder_identity if written.spec else None

    # A renewal between the read and the write is a Conflict: read again and retry.
    await eventually(take, until=lambda h: h == "intruder", timeout=10, what="the Lease taken by another holder")


async def test_a_leader_that_loses_its_lease_drains_its_webhook_before_it_exits(
    testbed: TestBed, namespace: str, manager_api: ApiClient, tmp_path: Path
) -> None:
    webhook, health = free_port(), free_port()
    config = (
        "multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}\n"
        f"dispatcher: {{namespace: {namespace}, webhook: {{host: 127.0.0.1, port: {webhook}, hosts: [127.0.0.1], "
        "configurationName: null}}\n"
    )
    argv = run_argv(testbed, tmp_path, config, "--health-probe-bind-address", f"127.0.0.1:{health}",
                    "--leader-elect", "--leader-elect-namespace", namespace, "--leader-elect-identity", "a",
                    "--retry-period", str(RETRY), "--renew-deadline", str(RENEW),
                    "--shutdown-delay", str(DELAY))  # fmt: skip
    readyz = f"http://127.0.0.1:{health}/readyz"
    log = tmp_path / "replica.log"
    async with _replica(argv, log) as process:
        await eventually(lambda: lease_holder(manager_api, namespace), until=lambda h: h == "a", what="a leads")
        await eventually(lambda: scrape.get(readyz), until=lambda r: r[0] == 200, what="ready")
        ca_pem = await generated_ca(manager_api, namespace)
        before = await _mutate(webhook, ca_pem)
        assert (before.status, before.connection) == (200, ""), "answered, the connection kept while leading"

        await _take_lease(manager_api, namespace)
        # Unready as soon as the loss is noticed (renewals refused for RENEW seconds), not once the process is gone.
        await eventually(lambda: scrape.get(readyz), until=lambda r: r == (503, "not ready: shutting down"),
                         timeout=RETRY + RENEW + 3, interval=0.05, what="unready once the Lease is lost")  # fmt: skip
        unready = time.monotonic()
        answered = 0
        while time.monotonic() - unready < DELAY - 1:  # bounded by the delay; every call must be answered
            answer = await _mutate(webhook, ca_pem)
            assert (answer.status, answer.connection) == (200, "close"), "answered, and no connection kept"
            answered += 1
            await anyio.sleep(0.1)  # pacing the calls, not waiting for an outcome
        assert answered >= 10
        assert process.returncode is None, "still running within its delay"

        with anyio.fail_after(DELAY + 15):
            assert await process.wait() == 1, "a lost Lease exits 1"
        with pytest.raises(aiohttp.ClientConnectionError):
            await _mutate(webhook, ca_pem)
        assert await lease_holder(manager_api, namespace) == "intruder", "the Lease left to its new holder"
    assert "leader lease lost; exiting" in log.read_text()


def _configuration(namespace: str, *adapters: dict[str, Any], hosts: tuple[str, ...] = ("127.0.0.1",)
                   ) -> dict[str, str]:  # fmt: skip
    """The ConfigMap's data: PipelineRun (let through: it has no integration) and ``adapters``' kinds; the webhook
    on a free port of its own in each replica (``port: 0``), sharing the generated certificate."""
    frameworks = [{"name": "PipelineRun.v1.tekton.dev"}, *({"name": a["name"]} for a in adapters)]
    webhook = {"host": "127.0.0.1", "port": 0, "hosts": list(hosts), "configurationName": None}
    dispatcher = {"namespace": namespace, "adapters": list(adapters), "webhook": webhook}
    text = yaml.safe_dump({"multiKueue": {"externalFrameworks": frameworks}, "dispatcher": dispatcher})
    return {"controller_manager_config.yaml": text}


async def _webhook_port(log: Path) -> int:
    """The port a replica's webhook took, from its "admission webhook serving" log line."""

    async def port() -> int | None:
        for line in (await anyio.Path(log).read_text()).splitlines():
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("event") == "admission webhook serving":
                return int(str(entry["address"]).rsplit(":", 1)[1])
        return None

    found = await eventually(port, until=lambda p: p is not None, timeout=60, what=f"the webhook's port in {log}")
    assert found is not None
    return found


async def test_a_standby_webhook_serves_a_kind_added_to_the_configmap(
    testbed: TestBed, namespace: str, manager_api: ApiClient, tmp_path: Path
) -> None:
    core = k8s_client.CoreV1Api(k8s(manager_api))
    await core.create_namespaced_config_map(
        namespace, raw_body({"metadata": {"name": "multikueue-config"}, "data": _configuration(namespace)})
    )
    kubeconfig = tmp_path / "manager.kubeconfig"
    kubeconfig.write_text(yaml.safe_dump(testbed.cluster("manager").kubeconfig))
    health = {"a": free_port(), "b": free_port()}

    def argv(identity: str) -> list[str]:
        return dispatcher_argv(kubeconfig, "--config-namespace", namespace, "--log-format", "json",
                               "--metrics-bind-address", "127.0.0.1:0",
                               "--health-probe-bind-address", f"127.0.0.1:{health[identity]}",
                               "--leader-elect", "--leader-elect-namespace", namespace,
                               "--leader-elect-identity", identity)  # fmt: skip

    widget = {"apiVersion": "example.com/v1", "kind": "Widget",
              "metadata": {"name": "w", "namespace": namespace, "labels": {QUEUE_NAME_LABEL: "q"}},
              "spec": {"parallelism": 1}}  # fmt: skip
    async with (
        _replica(argv("a"), tmp_path / "a.log") as a,
        _replica(argv("b"), tmp_path / "b.log") as b,
    ):
        leader = await eventually(lambda: lease_holder(manager_api, namespace), until=lambda h: h in ("a", "b"),
                                  timeout=60, what="a leader")  # fmt: skip
        assert leader is not None
        standby = "b" if leader == "a" else "a"
        for identity, port in health.items():
            readyz = functools.partial(scrape.get, f"http://127.0.0.1:{port}/readyz")
            await eventually(readyz, until=lambda r: r[0] == 200, timeout=60, what=f"{identity} ready")
        webhook = await _webhook_port(tmp_path / f"{standby}.log")
        ca_pem = await generated_ca(manager_api, namespace)
        assert (await _mutate(webhook, ca_pem, WIDGET, widget)).patch is None, "not configured yet: let through"

        await core.patch_namespaced_config_map(
            "multikueue-config", namespace, {"data": _configuration(namespace, WIDGET_ADAPTER)}
        )
        held = await eventually(lambda: _mutate(webhook, ca_pem, WIDGET, widget), until=lambda r: r.patch is not None,
                                timeout=30, what="the added kind held by the standby's webhook")  # fmt: skip
        assert held.patch == HELD

        await core.patch_namespaced_config_map("multikueue-config", namespace, {"data": _configuration(namespace)})
        await eventually(lambda: _mutate(webhook, ca_pem, WIDGET, widget), until=lambda r: r.patch is None,
                         timeout=30, what="the removed kind let through by the standby's webhook")  # fmt: skip

        # The webhook's own options are the process's: a change is said to need a restart, not silently kept.
        changed = _configuration(namespace, hosts=("127.0.0.1", "multikueue-webhook.elsewhere.svc"))
        await core.patch_namespaced_config_map("multikueue-config", namespace, {"data": changed})
        said = await eventually(lambda: events_about(manager_api, namespace, "multikueue-config"),
                                until=lambda es: any(e.reason == "WebhookRestartNeeded" for e in es), timeout=30,
                                what="a Warning Event: the webhook's options need a restart")  # fmt: skip
        assert all(e.type == "Warning" for e in said if e.reason == "WebhookRestartNeeded")

        assert await lease_holder(manager_api, namespace) == leader, "the standby answered as a standby throughout"
        assert a.returncode is None, "a replica that lost the Lease would have exited"
        assert b.returncode is None, "a replica that lost the Lease would have exited"
