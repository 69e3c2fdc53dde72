"""The mutating admission webhook: a queued object is suspended from its first instant (HTTPS, AdmissionReview v1).

Without it the controller still holds a new object on first sight (the fallback), but the kind's own controller
may start it first; on a MultiKueue manager the object carries ``managedBy`` and nothing else runs it, so the
fallback is exact there. See docs/integration.md for failurePolicy and timeout.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
import json
import ssl
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web
from cryptography import x509

from multikueue.config import Integration, Webhook
from multikueue.integration.lifecycle import admission_patch
from multikueue.kube import core
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import ApiError, Conflict, NotFound, describe
from multikueue.pki import CertificateAuthority, KeyPair

log = structlog.get_logger(__name__)
Object = dict[str, Any]
PATH = "/mutate"
SHUTDOWN_TIMEOUT = 10.0  # seconds requests in flight have to finish when the server stops (answers take ms)


def review(request: Object, integrations: dict[GroupVersionKind, Integration]) -> Object:
    """The AdmissionReview answer: always allowed; a JSON patch on CREATE of a queued object of a configured kind."""
    body = request.get("request") or {}
    response: Object = {"uid": body.get("uid", ""), "allowed": True}
    kind = body.get("kind") or {}
    gvk = GroupVersionKind(kind.get("group", ""), kind.get("version", ""), kind.get("kind", ""))
    integration = integrations.get(gvk)
    obj = body.get("object")
    if body.get("operation") == "CREATE" and integration is not None and isinstance(obj, dict):
        obj.setdefault("metadata", {})
        ops = admission_patch(obj, integration)
        if ops:
            response["patchType"] = "JSONPatch"
            response["patch"] = base64.b64encode(json.dumps(ops).encode()).decode()
            meta = obj["metadata"]
            name = meta.get("name") or f"{meta.get('generateName', '')}(generated)"
            log.info("held for the queue on create", kind=str(gvk), object=f"{meta.get('namespace')}/{name}")
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": response}


def _app(integrations: Callable[[], dict[GroupVersionKind, Integration]], draining: Callable[[], bool]
         ) -> web.Application:  # fmt: skip
    async def mutate(request: web.Request) -> web.Response:
        try:
            document = await request.json()
        except ValueError:
            return web.json_response({"error": "the body is not JSON"}, status=400)
        response = web.json_response(review(document, integrations()))
        if draining():  # "Connection: close": the API server's next call opens a connection to a replica staying
            response.force_close()
        return response

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post(PATH, mutate)
    return app


_RENEW_BEFORE = datetime.timedelta(days=30)
HOSTS_ANNOTATION = "multikueue.x-k8s.io/webhook-hosts"


def _usable(secret: dict[str, Any], hosts: tuple[str, ...]) -> bool:
    """A generated Secret for these hosts, valid for more than ``_RENEW_BEFORE``."""
    data = secret.get("data") or {}
    if not all(k in data for k in ("ca.crt", "tls.crt", "tls.key")):
        return False
    if ((secret.get("metadata") or {}).get("annotations") or {}).get(HOSTS_ANNOTATION) != ",".join(hosts):
        return False
    cert = x509.load_pem_x509_certificate(base64.b64decode(data["tls.crt"]))
    return cert.not_valid_after_utc - datetime.datetime.now(datetime.UTC) > _RENEW_BEFORE


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _generate(hosts: tuple[str, ...]) -> dict[str, str]:
    ca = CertificateAuthority("multikueue-webhook-ca", validity=datetime.timedelta(days=365))
    ips = tuple(h for h in hosts if _is_ip(h))
    dns = tuple(h for h in hosts if h not in ips)
    pair = ca.issue(dns[0] if dns else ips[0], dns_names=dns, ip_addresses=ips, server=True)
    return {k: base64.b64encode(v).decode() for k, v in
            (("ca.crt", ca.cert_pem), ("tls.crt", pair.cert_pem), ("tls.key", pair.key_pem))}  # fmt: skip


async def generated_secret(api: ApiClient, namespace: str, options: Webhook) -> dict[str, bytes]:
    """The serving certificate every replica shares: read from the Secret, or generated once and stored there.

    Each replica generating its own would leave the caBundle trusting only the last one to start.
    """
    name = options.secret_name
    for _ in range(5):  # a conflict means another replica wrote it first: read theirs
        secret: dict[str, Any] | None
        try:
            secret = await core.read_secret(api, namespace, name)
        except NotFound:
            secret = None
        if secret is not None and _usable(secret, options.hosts):
            return {k: base64.b64decode(v) for k, v in secret["data"].items()}
        body: dict[str, Any] = {"metadata": {"name": name, "namespace": namespace,
                             "annotations": {HOSTS_ANNOTATION: ",".join(options.hosts)}},
                "type": "kubernetes.io/tls", "data": _generate(options.hosts)}  # fmt: skip
        if secret is not None:
            body["metadata"]["resourceVersion"] = secret["metadata"]["resourceVersion"]
        try:
            await core.write_secret(api, namespace, body, replace=secret is not None)
        except Conflict:
            continue
        log.info("webhook serving certificate generated", secret=f"{namespace}/{name}", hosts=list(options.hosts))
        return {k: base64.b64decode(v) for k, v in body["data"].items()}
    raise RuntimeError(f"Secret {namespace}/{name}: kept conflicting while writing the webhook certificate")


async def serving_material(options: Webhook, api: ApiClient | None, namespace: str, work_dir: Path
                           ) -> tuple[Path, Path, bytes | None]:  # fmt: skip
    """(certificate, key, CA to inject or None): files from ``certDir``, else the shared generated Secret."""
    if options.cert_dir is not None:
        directory = Path(options.cert_dir)
        cert, key = directory / "tls.crt", directory / "tls.key"
        missing = [str(p) for p in (cert, key) if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"dispatcher.webhook.certDir: missing {', '.join(missing)}")
        return cert, key, None
    if api is None:
        raise ValueError("dispatcher.webhook: without certDir the certificate is kept in a Secret: a client is needed")
    data = await generated_secret(api, namespace, options)
    cert_path, key_path = KeyPair(data["tls.crt"], data["tls.key"]).write(work_dir, "tls")
    return cert_path, key_path, data["ca.crt"]


async def inject_ca_bundle(api: ApiClient, name: str, ca_pem: bytes) -> None:
    """Write the generated CA into every webhook of the MutatingWebhookConfiguration ``name``."""
    try:
        count = await core.inject_mutating_ca_bundle(api, name, base64.b64encode(ca_pem).decode())
    except ApiError as e:
        log.warning("webhook configuration's caBundle not set (the fallback holds objects)", name=name,
                    error=describe(e))  # fmt: skip
        return
    log.info("webhook CA bundle written", configuration=name, webhooks=count)


class WebhookServer:
    """Serves ``/mutate`` with whatever ``integrations()`` returns now (a configuration reload changes it)."""

    def __init__(self, options: Webhook, integrations: Callable[[], dict[GroupVersionKind, Integration]]) -> None:
        self.options = options
        self.integrations = integrations
        self.port: int | None = None
        self.ca_pem: bytes | None = None
        self.draining = False  # shutting down: answer, but let no connection be reused
        self._runner: web.AppRunner | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="multikueue-webhook-")

    async def start(self, api: ApiClient | None, namespace: str) -> None:
        cert, key, self.ca_pem = await serving_material(self.options, api, namespace, Path(self._dir.name))
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert, key)
        self._runner = web.AppRunner(
            _app(self.integrations, lambda: self.draining), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.options.host, self.options.port, ssl_context=context)
        await site.start()
        self.port = self._runner.addresses[0][1]
        log.info("admission webhook serving", address=f"{self.options.host}:{self.port}", path=PATH,
                 kinds=[str(g) for g in self.integrations()])  # fmt: skip
        if api is not None and self.ca_pem is not None and self.options.configuration_name:
            await inject_ca_bundle(api, self.options.configuration_name, self.ca_pem)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._dir.cleanup()
