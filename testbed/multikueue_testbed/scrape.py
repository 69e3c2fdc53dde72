"""Reading a dispatcher's endpoints as a scraper does: ``/metrics`` over HTTPS with a bearer token allowed by the
shipped ``multikueue-metrics-reader`` ClusterRole, ``/healthz`` and ``/readyz`` in plain HTTP."""

from __future__ import annotations

import ssl
from pathlib import Path

import aiohttp
import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.client.exceptions import ApiException

from multikueue.kube.client import ApiClient
from multikueue_testbed.accounts import bind_cluster_role, service_account_token
from multikueue_testbed.client import k8s, raw_body

METRICS_READER = "multikueue-metrics-reader"
# The checkout's manifest (this file is testbed/multikueue_testbed/scrape.py in it).
METRICS_READER_ROLE = Path(__file__).resolve().parents[2] / "config" / "manager" / "metrics_reader_role.yaml"


async def install_metrics_reader_role(api: ApiClient) -> None:
    """The shipped ClusterRole (config/manager/metrics_reader_role.yaml), created if absent."""
    role = yaml.safe_load(METRICS_READER_ROLE.read_text())
    try:
        await k8s_client.RbacAuthorizationV1Api(k8s(api)).create_cluster_role(raw_body(role))
    except ApiException as e:
        if e.status != 409:
            raise


async def metrics_reader_token(api: ApiClient, *, namespace: str, name: str = "metrics-reader") -> str:
    """A token for a ServiceAccount bound to the shipped ``multikueue-metrics-reader`` (role and binding made)."""
    await install_metrics_reader_role(api)
    token = await service_account_token(api, namespace=namespace, name=name)
    await bind_cluster_role(api, METRICS_READER, namespace=namespace, name=name)
    return token


def tls_trusting(ca_pem: bytes | None) -> ssl.SSLContext:
    """TLS that trusts ``ca_pem`` (the dispatcher's generated CA), or checks nothing when there is none."""
    if ca_pem is None:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        return context
    return ssl.create_default_context(cadata=ca_pem.decode())


async def get(url: str, *, token: str | None = None, ca_pem: bytes | None = None) -> tuple[int, str]:
    """(status, body) of a GET, with ``Authorization: Bearer token`` when given."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    context = tls_trusting(ca_pem) if url.startswith("https:") else None
    async with (
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=15)) as http,
        http.get(url, headers=headers, ssl=context if context is not None else True) as response,
    ):
        return response.status, await response.text()


async def metrics(port: int, token: str, *, ca_pem: bytes | None = None) -> str:
    """The exposition text of ``https://127.0.0.1:port/metrics``; an ``AssertionError`` when not 200."""
    status, text = await get(f"https://127.0.0.1:{port}/metrics", token=token, ca_pem=ca_pem)
    assert status == 200, (status, text)
    return text
