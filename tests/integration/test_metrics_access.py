"""/metrics served as Kueue serves it, against a real API server: HTTPS, a bearer token the API server
authenticates (TokenReview), an identity RBAC allows get on /metrics (SubjectAccessReview, the shipped
multikueue-metrics-reader ClusterRole); the probes plain and open on their own port."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from pathlib import Path

import aiohttp
import pytest
from kubernetes_asyncio import client as k8s_client

from multikueue.endpoints import Durations, Endpoints, Serving
from multikueue.kube.client import ApiClient, api_client_from_kubeconfig
from multikueue.metrics import Metrics
from multikueue_testbed import TestBed
from multikueue_testbed.accounts import bind_cluster_role, mint_service_account_kubeconfig, service_account_token
from multikueue_testbed.client import k8s
from multikueue_testbed.scrape import METRICS_READER, get, install_metrics_reader_role
from multikueue_testbed.testbed import free_port
from multikueue_testbed.waiting import eventually

# A denial is cached for 30 s in production (controller-runtime's time); one second here, so a binding made in the
# test is seen within its deadline.
QUICK = Durations(denied=1.0)


@pytest.fixture
async def served(manager_api: ApiClient) -> AsyncIterator[Endpoints]:
    """The dispatcher's endpoints as ``multikueue run`` serves them, reviewing with the manager cluster's client."""
    endpoints = Endpoints(Serving(metrics=("127.0.0.1", 0), health=("127.0.0.1", 0)), Metrics(), lambda: True,
                          manager_api, QUICK)  # fmt: skip
    await endpoints.start()
    yield endpoints
    await endpoints.stop()


def _counted(text: str, code: int) -> float:
    found = re.search(rf'^multikueue_metrics_requests_total{{code="{code}"}} (\S+)$', text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def test_metrics_need_a_token_that_rbac_allows_and_the_probes_do_not(
    served: Endpoints, manager_api: ApiClient, namespace: str
) -> None:
    url = f"https://127.0.0.1:{served.metrics_port}/metrics"
    # (a) No token, or one the API server does not recognise: 401. TLS is verified against the generated CA.
    assert (await get(url, ca_pem=served.ca_pem))[0] == 401
    assert (await get(url, token="not-a-token", ca_pem=served.ca_pem))[0] == 401
    with pytest.raises(aiohttp.ClientError):  # no plain HTTP on the metrics port
        await get(f"http://127.0.0.1:{served.metrics_port}/metrics")

    # (b) A real ServiceAccount token (TokenRequest): authenticated, but no binding allows it: 403.
    token = await service_account_token(manager_api, namespace=namespace, name="scraper")
    status, text = await get(url, token=token, ca_pem=served.ca_pem)
    assert status == 403, (status, text)
    assert f"system:serviceaccount:{namespace}:scraper" in text
    assert "multikueue-metrics-reader" in text
    assert "multikueue_" not in text

    # (c) The shipped multikueue-metrics-reader bound to it: 200 with the metrics.
    await install_metrics_reader_role(manager_api)
    binding = await bind_cluster_role(manager_api, METRICS_READER, namespace=namespace, name="scraper")
    try:
        status, text = await eventually(lambda: get(url, token=token, ca_pem=served.ca_pem),
                                        until=lambda answer: answer[0] == 200, timeout=30,
                                        what="the binding seen")  # fmt: skip
    finally:
        await k8s_client.RbacAuthorizationV1Api(k8s(manager_api)).delete_cluster_role_binding(binding)
    assert "# TYPE multikueue_workloads_dispatched_total counter" in text
    assert _counted(text, 401) == 2
    assert _counted(text, 403) >= 1
    assert _counted(text, 200) == 1

    # (d) The probes: plain HTTP, no token, on their own port; /metrics is not there.
    health = f"http://127.0.0.1:{served.health_port}"
    assert [await get(health + path) for path in ("/healthz", "/readyz")] == [(200, "ok"), (200, "ok")]
    assert (await get(health + "/metrics"))[0] == 404


async def test_a_review_the_controller_may_not_make_is_500_and_an_unreachable_api_server_503(
    testbed: TestBed, manager_api: ApiClient, namespace: str, tmp_path: Path
) -> None:
    """The controller's identity without create on tokenreviews (the shipped ClusterRole's rule missing), or no API
    server answering: the scraper gets a server error, never a 200, never a traceback."""
    token = await service_account_token(manager_api, namespace=namespace, name="scraper")
    no_rights = await mint_service_account_kubeconfig(manager_api, testbed.cluster("manager"), namespace=namespace,
                                                      name="no-review-rights")  # fmt: skip
    gone = {**testbed.cluster("manager").kubeconfig}
    gone["clusters"] = [{**c, "cluster": {**c["cluster"], "server": f"https://127.0.0.1:{free_port()}"}}
                        for c in gone["clusters"]]  # fmt: skip
    for kubeconfig, expected in ((no_rights, 500), (gone, 503)):
        async with await api_client_from_kubeconfig(kubeconfig, temp_dir=tmp_path) as api:
            endpoints = Endpoints(Serving(metrics=("127.0.0.1", 0)), Metrics(), lambda: True, api, QUICK)
            await endpoints.start()
            try:
                status, text = await get(f"https://127.0.0.1:{endpoints.metrics_port}/metrics", token=token,
                                         ca_pem=endpoints.ca_pem)  # fmt: skip
            finally:
                await endpoints.stop()
        assert status == expected, (status, text)
        assert "TokenReview" in text
        assert "Traceback" not in text
        assert "multikueue_" not in text
