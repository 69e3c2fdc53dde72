"""Integration-test parts for the admission webhook: a webhook configuration calling a replica for every create of a
labelled ConfigMap in one namespace (failurePolicy Fail), replicas run in this process, and a paced stream of
creates that counts every refusal."""

from __future__ import annotations

import base64
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from cryptography import x509
from kubernetes_asyncio import client as k8s_client

from multikueue.config import Webhook
from multikueue.integration.webhook import WebhookServer
from multikueue.kube.client import ApiClient
from multikueue.metrics import Metrics
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.waiting import eventually

LABEL = "multikueue-test/through-the-webhook"
SECRET = "multikueue-webhook-cert"  # the generated certificate's Secret, as configured by default


@dataclass
class Stream:
    """Creates of labelled ConfigMaps, paced, each answered or refused (a refusal is a failed admission call)."""

    answered: int = 0
    refused: list[str] = field(default_factory=list)


async def _stream(api: ApiClient, namespace: str, stream: Stream) -> None:
    core: Any = k8s_client.CoreV1Api(k8s(api))
    for i in range(10_000):  # bounded: the caller cancels it long before
        body = {"metadata": {"name": f"s-{i}", "labels": {LABEL: "yes"}}}
        try:
            with anyio.fail_after(10):
                await core.create_namespaced_config_map(namespace, raw_body(body))
        except Exception as e:  # every refusal counts, whatever its kind
            stream.refused.append(f"s-{i}: {type(e).__name__}: {str(e)[:300]}")
        else:
            stream.answered += 1
        await anyio.sleep(0.05)  # pacing: about ten creates a second


@asynccontextmanager
async def streaming(api: ApiClient, namespace: str) -> AsyncIterator[Stream]:
    stream = Stream()
    async with anyio.create_task_group() as tg:
        tg.start_soon(_stream, api, namespace, stream)
        await eventually(lambda: answered(stream), until=lambda n: n >= 5, what="creates flow")
        yield stream
        tg.cancel_scope.cancel()
    sys.stderr.write(f"\n[webhook] {stream.answered + len(stream.refused)} creates answered, {len(stream.refused)} "
                     "refused\n")  # fmt: skip


async def answered(stream: Stream) -> int:
    return stream.answered + len(stream.refused)


def configuration(name: str, namespace: str, url: str, ca_bundle: bytes | None) -> dict[str, Any]:
    client: dict[str, Any] = {"url": url} | ({"caBundle": base64.b64encode(ca_bundle).decode()} if ca_bundle else {})
    return {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "hold.multikueue.x-k8s.io", "clientConfig": client,
            "rules": [{"apiGroups": [""], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["configmaps"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "objectSelector": {"matchExpressions": [{"key": LABEL, "operator": "Exists"}]},
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 5,
        }],
    }  # fmt: skip


@asynccontextmanager
async def webhook_configuration(api: ApiClient, body: dict[str, Any]) -> AsyncIterator[Any]:
    admission: Any = k8s_client.AdmissionregistrationV1Api(k8s(api))
    await admission.create_mutating_webhook_configuration(raw_body(body))
    try:
        yield admission
    finally:
        await admission.delete_mutating_webhook_configuration(body["metadata"]["name"])


async def configured_cas(admission: Any, name: str) -> list[x509.Certificate]:
    found = await admission.read_mutating_webhook_configuration(name)
    bundle = found.webhooks[0].client_config.ca_bundle
    return x509.load_pem_x509_certificates(base64.b64decode(bundle)) if bundle else []


async def secret_cas(api: ApiClient, namespace: str) -> list[x509.Certificate]:
    secret = await k8s_client.CoreV1Api(k8s(api)).read_namespaced_secret(SECRET, namespace)
    return x509.load_pem_x509_certificates(base64.b64decode(secret.data["ca.crt"]))


@asynccontextmanager
async def serving_replica(api: ApiClient, namespace: str, options: Webhook, metrics: Metrics | None = None,
                   warn: Any = None) -> AsyncIterator[WebhookServer]:  # fmt: skip
    server = WebhookServer(options, dict, metrics=metrics, warn=warn)
    await server.start(api, namespace)
    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.keep)
            yield server
            tg.cancel_scope.cancel()
    finally:
        await server.stop()


async def lease_holder(api: ApiClient, namespace: str, name: str = "multikueue-dispatcher") -> str | None:
    lease = await k8s_client.CoordinationV1Api(k8s(api)).read_namespaced_lease(name, namespace)
    return lease.spec.holder_identity if lease.spec else None


async def generated_ca(api: ApiClient, namespace: str) -> bytes:
    """The generated Secret's CA bundle, as a caller of the webhook trusts it."""
    secret = await k8s_client.CoreV1Api(k8s(api)).read_namespaced_secret(SECRET, namespace)
    return base64.b64decode(secret.data["ca.crt"])


async def events_about(api: ApiClient, namespace: str, name: str) -> list[Any]:
    listed = await k8s_client.CoreV1Api(k8s(api)).list_namespaced_event(namespace)
    return [e for e in listed.items if e.involved_object.name == name]
