"""kubernetes_asyncio's generated APIs over the same cluster as one of our clients, for tests and the test bed.

The controller talks to the API through ``kube.client.ApiClient`` only. Tests also create, read and check
objects of every built-in kind (namespaces, RBAC, CRDs, Leases...) with an independent, complete client:
``k8s(api)`` is kubernetes_asyncio's ``ApiClient`` with ``api``'s server and credentials, made once per client and
closed with it.
"""

from __future__ import annotations

import tempfile
import weakref
from pathlib import Path
from typing import Any

from kubernetes_asyncio import client as k8s_client

from multikueue.kube.client import ApiClient

_twins: weakref.WeakKeyDictionary[ApiClient, k8s_client.ApiClient] = weakref.WeakKeyDictionary()


def _configuration(api: ApiClient, files: Path) -> k8s_client.Configuration:
    """kubernetes_asyncio reads certificates from files only: they are written under ``files``."""
    access = api.access
    configuration = k8s_client.Configuration(host=access.server)
    configuration.verify_ssl = not access.insecure
    configuration.tls_server_name = access.tls_server_name
    configuration.proxy = api.proxy
    if access.ca:
        (files / "ca.crt").write_text(access.ca)
        configuration.ssl_ca_cert = str(files / "ca.crt")
    if access.client_certificate and access.client_key:
        (files / "tls.crt").write_bytes(access.client_certificate)
        (files / "tls.key").write_bytes(access.client_key)
        configuration.cert_file, configuration.key_file = str(files / "tls.crt"), str(files / "tls.key")
    if access.token:
        configuration.api_key = {"BearerToken": f"Bearer {access.token}"}
    return configuration


def k8s(api: ApiClient) -> k8s_client.ApiClient:
    """kubernetes_asyncio's client for ``api``'s cluster (closed when ``api`` is)."""
    twin = _twins.get(api)
    if twin is not None:
        return twin
    files = tempfile.TemporaryDirectory(prefix="multikueue-k8s-")
    twin = k8s_client.ApiClient(_configuration(api, Path(files.name)))
    _twins[api] = twin
    close = api.close

    async def close_both() -> None:
        _twins.pop(api, None)
        await twin.close()
        files.cleanup()
        await close()

    setattr(api, "close", close_both)  # noqa: B010 - this instance only
    return twin


def raw_body(obj: dict[str, Any]) -> Any:
    """Pass a plain dict as a request body: kubernetes_asyncio sends it as-is, while its stubs ask for models."""
    return obj
