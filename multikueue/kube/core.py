"""Built-in (non-custom) API calls the controllers make, so that only ``kube/`` talks to the API: the server's
version (a liveness probe), ConfigMaps and Secrets read, written and watched, Warning Events watched, pods and
their logs, a Service's EndpointSlices, and a MutatingWebhookConfiguration watched and its caBundle written. Errors
are ``kube.errors.ApiError`` subclasses."""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator
from typing import Any

from multikueue.kube.client import MERGE_PATCH, STRATEGIC_MERGE_PATCH, ApiClient, Timeouts
from multikueue.kube.listwatch import ApiListSource

Object = dict[str, Any]
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"


def _path(namespace: str, plural: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{namespace}/{plural}" + (f"/{name}" if name else "")


async def server_version(api: ApiClient) -> None:
    """``GET /version``: answers when the API server serves, whoever asks."""
    await api.send("GET", "/version")


async def read_config_map(api: ApiClient, namespace: str, name: str) -> Object:
    config_map: Object = await api.request("GET", _path(namespace, "configmaps", name))
    return config_map


async def config_map_data(api: ApiClient, namespace: str, name: str) -> dict[str, str]:
    return dict((await read_config_map(api, namespace, name)).get("data") or {})


def config_map_source(api: ApiClient, namespace: str, name: str, *, description: str) -> ApiListSource:
    """One ConfigMap, listed and watched by a field selector on its name."""
    query = {"fieldSelector": f"metadata.name={name}"}
    return ApiListSource(api, _path(namespace, "configmaps"), description=description, query=query)


def secret_source(api: ApiClient, namespace: str) -> ApiListSource:
    return ApiListSource(api, _path(namespace, "secrets"), description=f"secrets in {namespace}")


def warning_event_source(api: ApiClient, *, description: str) -> ApiListSource:
    """Warning Events in every namespace."""
    return ApiListSource(api, "/api/v1/events", description=description, query={"fieldSelector": "type=Warning"})


async def read_secret(api: ApiClient, namespace: str, name: str) -> Object:
    """The Secret as a plain dict (``data`` values still base64); ``NotFound`` when there is none."""
    result: Object = await api.request("GET", _path(namespace, "secrets", name))
    return result


async def events_about(api: ApiClient, namespace: str, names: set[str]) -> list[Object]:
    """The Events in ``namespace`` whose object is one of ``names``, as plain dicts."""
    listed = await api.request("GET", _path(namespace, "events"))
    return [e for e in listed.get("items") or [] if (e.get("involvedObject") or {}).get("name") in names]


async def pods(api: ApiClient, namespace: str, selector: str) -> list[Object]:
    """The pods in ``namespace`` matching the label ``selector``, as plain dicts, oldest first."""
    listed = await api.request("GET", _path(namespace, "pods"), query={"labelSelector": selector})
    found: list[Object] = list(listed.get("items") or [])
    return sorted(found, key=lambda p: (p["metadata"].get("creationTimestamp") or "", p["metadata"]["name"]))


async def pod_log(api: ApiClient, namespace: str, pod: str, container: str, *, follow: bool) -> AsyncIterator[str]:
    """One container's log, line by line; with ``follow``, until the container ends (or the caller stops)."""
    path = _path(namespace, "pods", pod) + "/log"
    timeout = Timeouts(connect=10)
    async with api.stream(path, query={"container": container, "follow": follow}, timeout=timeout) as lines:
        async for line in lines:
            yield line.decode(errors="replace").rstrip("\n")


async def write_secret(api: ApiClient, namespace: str, body: Object, *, replace: bool) -> Object:
    """Create the Secret, or replace it (``body`` then carries the resourceVersion it replaces); as written."""
    written: Object
    if replace:
        written = await api.request("PUT", _path(namespace, "secrets", body["metadata"]["name"]), body=body)
    else:
        written = await api.request("POST", _path(namespace, "secrets"), body=body)
    return written


async def patch_secret_data(api: ApiClient, namespace: str, name: str, resource_version: str, key: str,
                            value: bytes) -> Object:  # fmt: skip
    """Replace one key of the Secret, only if it is still at ``resource_version`` (``Conflict`` otherwise): a
    change made meanwhile (an operator's rotation) is never overwritten. The Secret as written."""
    body = {"metadata": {"resourceVersion": resource_version}, "data": {key: base64.b64encode(value).decode()}}
    result: Object = await api.request("PATCH", _path(namespace, "secrets", name), body=body,
                                       content_type=MERGE_PATCH)  # fmt: skip
    return result


def secret_named_source(api: ApiClient, namespace: str, name: str) -> ApiListSource:
    """One Secret, listed and watched by a field selector on its name (RBAC allows it by that name)."""
    query = {"fieldSelector": f"metadata.name={name}"}
    return ApiListSource(api, _path(namespace, "secrets"), description=f"Secret {namespace}/{name}", query=query)


def webhook_configuration_source(api: ApiClient, name: str) -> ApiListSource:
    """One MutatingWebhookConfiguration, listed and watched by a field selector on its name."""
    query = {"fieldSelector": f"metadata.name={name}"}
    return ApiListSource(api, WEBHOOKS, description=f"MutatingWebhookConfiguration {name}", query=query)


async def read_service(api: ApiClient, namespace: str, name: str) -> Object:
    found: Object = await api.request("GET", _path(namespace, "services", name))
    return found


async def endpoint_slices(api: ApiClient, namespace: str, service: str) -> list[Object]:
    """The EndpointSlices of a Service: where it sends its callers, ready or not."""
    path = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
    listed = await api.request("GET", path, query={"labelSelector": f"kubernetes.io/service-name={service}"})
    return list(listed.get("items") or [])


async def read_webhook_configuration(api: ApiClient, name: str) -> Object:
    found: Object = await api.request("GET", f"{WEBHOOKS}/{name}")
    return found


async def write_ca_bundle(api: ApiClient, configuration: Object, bundle: str, annotations: dict[str, str]) -> Object:
    """Set ``caBundle`` (base64) on every webhook of the MutatingWebhookConfiguration as read, and ``annotations``,
    only if it is still at the resourceVersion read (``Conflict`` otherwise); the configuration as written."""
    meta = configuration["metadata"]
    webhooks = [{"name": w["name"], "clientConfig": {"caBundle": bundle}} for w in configuration.get("webhooks") or []]
    body = {"metadata": {"resourceVersion": meta["resourceVersion"], "annotations": annotations}, "webhooks": webhooks}
    # A strategic merge patch keyed by webhook name: only caBundle and the annotations change.
    written: Object = await api.request("PATCH", f"{WEBHOOKS}/{meta['name']}", body=body,
                                        content_type=STRATEGIC_MERGE_PATCH)  # fmt: skip
    return written
