"""Built-in (non-custom) API calls the controllers make, so that only ``kube/`` talks to the API: the server's
version (a liveness probe), ConfigMaps and Secrets read, written and watched, Warning Events watched, and the
caBundle of a MutatingWebhookConfiguration. Errors are ``kube.errors.ApiError`` subclasses."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s_client

from multikueue.kube.client import ApiClient, raw_body
from multikueue.kube.errors import refused
from multikueue.kube.listwatch import ApiListSource

Object = dict[str, Any]


async def server_version(api: ApiClient) -> None:
    """``GET /version``: answers when the API server serves, whoever asks."""
    await k8s_client.VersionApi(api).get_code()


async def config_map_data(api: ApiClient, namespace: str, name: str) -> dict[str, str]:
    config_map = await k8s_client.CoreV1Api(api).read_namespaced_config_map(name, namespace)
    return dict(config_map.data or {})


def config_map_source(api: ApiClient, namespace: str, name: str, *, description: str) -> ApiListSource:
    """One ConfigMap, listed and watched by a field selector on its name."""
    method = k8s_client.CoreV1Api(api).list_namespaced_config_map
    return ApiListSource(method, namespace, description=description, field_selector=f"metadata.name={name}")


def secret_source(api: ApiClient, namespace: str) -> ApiListSource:
    method = k8s_client.CoreV1Api(api).list_namespaced_secret
    return ApiListSource(method, namespace, description=f"secrets in {namespace}")


def warning_event_source(api: ApiClient, *, description: str) -> ApiListSource:
    """Warning Events in every namespace."""
    method = k8s_client.CoreV1Api(api).list_event_for_all_namespaces
    return ApiListSource(method, description=description, field_selector="type=Warning")


async def read_secret(api: ApiClient, namespace: str, name: str) -> Object:
    """The Secret as a plain dict (``data`` values still base64); ``NotFound`` when there is none."""
    secret = await k8s_client.CoreV1Api(api).read_namespaced_secret(name, namespace)
    result: Object = api.sanitize_for_serialization(secret)
    return result


async def events_about(api: ApiClient, namespace: str, names: set[str]) -> list[Object]:
    """The Events in ``namespace`` whose object is one of ``names``, as plain dicts."""
    listed = await k8s_client.CoreV1Api(api).list_namespaced_event(namespace)
    return [api.sanitize_for_serialization(e) for e in listed.items if e.involved_object.name in names]


async def pods(api: ApiClient, namespace: str, selector: str) -> list[Object]:
    """The pods in ``namespace`` matching the label ``selector``, as plain dicts, oldest first."""
    listed = await k8s_client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=selector)
    found = [api.sanitize_for_serialization(p) for p in listed.items]
    return sorted(found, key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))


async def pod_log(api: ApiClient, namespace: str, pod: str, container: str, *, follow: bool) -> AsyncIterator[str]:
    """One container's log, line by line; with ``follow``, until the container ends (or the caller stops)."""
    core: Any = k8s_client.CoreV1Api(api)  # the stubs type the preloaded answer (str), not the raw response
    response = await core.read_namespaced_pod_log(
        pod, namespace, container=container, follow=follow, _preload_content=False,
        _request_timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
    )  # fmt: skip
    try:
        if response.status >= 400:
            body = await response.read()
            raise refused(response.status, body)
        async for line in response.content:
            yield line.decode(errors="replace").rstrip("\n")
    finally:
        response.release()


async def write_secret(api: ApiClient, namespace: str, body: Object, *, replace: bool) -> None:
    """Create the Secret, or replace it (``body`` then carries the resourceVersion it replaces)."""
    core = k8s_client.CoreV1Api(api)
    if replace:
        await core.replace_namespaced_secret(body["metadata"]["name"], namespace, raw_body(body))
    else:
        await core.create_namespaced_secret(namespace, raw_body(body))


async def inject_mutating_ca_bundle(api: ApiClient, name: str, bundle: str) -> int:
    """Set ``caBundle`` (base64) on every webhook of the MutatingWebhookConfiguration ``name``; returns how many."""
    admission: Any = k8s_client.AdmissionregistrationV1Api(api)
    current = await admission.read_mutating_webhook_configuration(name)
    webhooks = [{"name": w.name, "clientConfig": {"caBundle": bundle}} for w in current.webhooks or []]
    # A strategic merge patch keyed by webhook name: only caBundle changes.
    await admission.patch_mutating_webhook_configuration(
        name, raw_body({"webhooks": webhooks}), _content_type="application/strategic-merge-patch+json"
    )
    return len(webhooks)
