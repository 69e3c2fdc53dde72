"""Which certificates the webhook's replicas serve now, asked where the API servers call them: every endpoint of the
configuration's Service (ready or not: one not ready now may be later), or its URL, several times over.

The old CA leaves the caBundle only once every replica serves a certificate the new CA issued: a replica of an
earlier release never reloads its certificate, and a rollout can be paused for as long as anyone likes.
"""

from __future__ import annotations

import ssl
from typing import Any
from urllib.parse import urlsplit

import anyio
from anyio.streams.tls import TLSAttribute
from cryptography import x509

from multikueue.kube import core
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import KubeError

Object = dict[str, Any]
PROBES_PER_URL = 8  # a URL may front several replicas (a load balancer): asked this many times
TIMEOUT = 2.0  # seconds for one handshake


async def served(api: ApiClient, configuration: Object) -> list[x509.Certificate] | None:
    """The certificate each address the configuration's webhooks call serves; ``None`` when one cannot be told
    (an address that does not answer, a Service or its endpoints that cannot be read)."""
    try:
        found = await addresses(api, configuration)
    except KubeError:
        return None
    # No endpoint at all tells nothing: a Service deleted and made again (a GitOps prune) has none for a moment.
    return await certificates_at(found) if found else None


async def addresses(api: ApiClient, configuration: Object) -> list[tuple[str, int]]:
    """Where the configuration's webhooks are called: each endpoint of a Service, or a URL ``PROBES_PER_URL`` times."""
    return [a for webhook in configuration.get("webhooks") or [] for a in await _addresses(api, webhook)]


async def certificates_at(found: list[tuple[str, int]]) -> list[x509.Certificate] | None:
    """The certificate served at each address; ``None`` if one does not answer with one."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # what it serves is the question, not whether it verifies
    certificates: list[x509.Certificate] = []
    for host, port in found:
        try:
            with anyio.fail_after(TIMEOUT):
                stream = await anyio.connect_tcp(host, port, ssl_context=context, tls_standard_compatible=False)
                async with stream:
                    der = stream.extra(TLSAttribute.peer_certificate_binary)
        except (OSError, TimeoutError, anyio.BrokenResourceError, ssl.SSLError):
            return None
        if der is None:
            return None
        certificates.append(x509.load_der_x509_certificate(der))
    return certificates


async def _addresses(api: ApiClient, webhook: Object) -> list[tuple[str, int]]:
    client = webhook.get("clientConfig") or {}
    if url := client.get("url"):
        parts = urlsplit(url)
        return [(parts.hostname or "", parts.port or 443)] * PROBES_PER_URL
    service = client.get("service") or {}
    namespace, name, port = service.get("namespace", ""), service.get("name", ""), int(service.get("port") or 443)
    ports = (await core.read_service(api, namespace, name)).get("spec", {}).get("ports") or []
    port_name = next((p.get("name") or "" for p in ports if p.get("port") == port), "")
    found = []
    for endpoint_slice in await core.endpoint_slices(api, namespace, name):
        target = next((p.get("port") for p in endpoint_slice.get("ports") or [] if (p.get("name") or "") == port_name),
                      None)  # fmt: skip
        if target is None:
            continue
        found += [(address, int(target)) for e in endpoint_slice.get("endpoints") or [] for address in e["addresses"]]
    return found
