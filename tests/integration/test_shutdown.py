"""A replica told to stop (SIGTERM, as a Pod's deletion does) keeps answering the admission webhook, unready, for
its shutdown delay, gives its Lease up at once, and only then closes and exits 0: the API server's calls made while
the endpoint is leaving the Service are answered, not refused."""

from __future__ import annotations

import subprocess
import time
import uuid
from pathlib import Path

import aiohttp
import anyio
import pytest

from multikueue.kube.client import ApiClient
from multikueue_testbed import TestBed, scrape
from multikueue_testbed.testbed import free_port
from multikueue_testbed.waiting import eventually
from tests.integration.controller import run_argv
from tests.integration.webhooks import generated_ca, lease_holder

DELAY = 4.0  # --shutdown-delay: long enough to probe many times, short for the suite


async def _mutate(port: int, ca_pem: bytes) -> tuple[int, str]:
    """One AdmissionReview on a connection of its own: (status, the Connection header)."""
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
              "request": {"uid": str(uuid.uuid4()), "operation": "CREATE", "kind": {"group": "tekton.dev",
                          "version": "v1", "kind": "PipelineRun"}, "object": {"metadata": {"name": "x"}}}}  # fmt: skip
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5)) as http,
        http.post(f"https://127.0.0.1:{port}/mutate", json=review, ssl=scrape.tls_trusting(ca_pem)) as response,
    ):
        answer = await response.json()
        assert answer["response"]["allowed"] is True
        return response.status, response.headers.get("Connection", "")


async def test_after_sigterm_the_webhook_answers_through_the_delay_then_the_process_exits_cleanly(
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
                    "--shutdown-delay", str(DELAY))  # fmt: skip
    readyz = f"http://127.0.0.1:{health}/readyz"
    with (tmp_path / "replica.log").open("w") as log:
        process = await anyio.open_process(argv, stdout=log, stderr=subprocess.STDOUT)
        try:
            await eventually(lambda: lease_holder(manager_api, namespace), until=lambda h: h == "a", what="a leads")
            await eventually(lambda: scrape.get(readyz), until=lambda r: r[0] == 200, what="ready")
            ca_pem = await generated_ca(manager_api, namespace)
            assert (await _mutate(webhook, ca_pem))[0] == 200

            process.terminate()
            signalled = time.monotonic()
            await eventually(lambda: scrape.get(readyz), until=lambda r: r == (503, "not ready: shutting down"),
                             timeout=2, what="unready at once")  # fmt: skip
            await eventually(lambda: lease_holder(manager_api, namespace), until=lambda h: h == "", timeout=3,
                             what="the Lease given up, not left to expire (15 s)")  # fmt: skip
            answered = 0
            while time.monotonic() - signalled < DELAY - 1:  # bounded by the delay; every call must be answered
                assert await _mutate(webhook, ca_pem) == (200, "close"), "answered, and no connection kept"
                answered += 1
                await anyio.sleep(0.1)  # pacing the calls, not waiting for an outcome
            assert answered >= 10
            assert process.returncode is None, "still running within its delay"

            with anyio.fail_after(DELAY + 15):
                assert await process.wait() == 0
            assert time.monotonic() - signalled >= DELAY
            with pytest.raises(aiohttp.ClientConnectionError):
                await _mutate(webhook, ca_pem)
        finally:
            if process.returncode is None:
                process.kill()
                with anyio.fail_after(30):
                    await process.wait()
