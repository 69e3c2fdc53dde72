"""The mutating admission webhook: a queued object is suspended from its first instant (HTTPS, AdmissionReview v1).

Without it the controller still holds a new object on first sight (the fallback), but the kind's own controller
may start it first; on a MultiKueue manager the object carries ``managedBy`` and nothing else runs it, so the
fallback is exact there. See docs/integration.md for failurePolicy and timeout.
"""

from __future__ import annotations

import base64
import datetime
import json
import ssl
import tempfile
from pathlib import Path
from typing import Any

import structlog
from aiohttp import web
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.client.exceptions import ApiException

from multikueue.config import GroupVersionKind, Integration, Webhook
from multikueue.integration.lifecycle import admission_patch
from multikueue.kube.client import ApiClient, raw_body
from multikueue.pki import CertificateAuthority

log = structlog.get_logger(__name__)
Object = dict[str, Any]
PATH = "/mutate"


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


def _app(integrations: dict[GroupVersionKind, Integration]) -> web.Application:
    async def mutate(request: web.Request) -> web.Response:
        try:
            document = await request.json()
        except ValueError:
            return web.json_response({"error": "the body is not JSON"}, status=400)
        return web.json_response(review(document, integrations))

    app = web.Application(client_max_size=8 * 1024 * 1024)
    app.router.add_post(PATH, mutate)
    return app


def serving_material(options: Webhook, work_dir: Path) -> tuple[Path, Path, bytes | None]:
    """(certificate, key, generated CA or None): supplied files from ``certDir``, else generated for ``hosts``."""
    if options.cert_dir is not None:
        directory = Path(options.cert_dir)
        cert, key = directory / "tls.crt", directory / "tls.key"
        missing = [str(p) for p in (cert, key) if not p.is_file()]
        if missing:
            raise FileNotFoundError(f"dispatcher.webhook.certDir: missing {', '.join(missing)}")
        return cert, key, None
    ca = CertificateAuthority("multikueue-webhook-ca", validity=datetime.timedelta(days=365))
    ips = tuple(h for h in options.hosts if h.replace(".", "").isdigit() or ":" in h)
    dns = tuple(h for h in options.hosts if h not in ips)
    pair = ca.issue(dns[0] if dns else ips[0], dns_names=dns, ip_addresses=ips, server=True)
    cert_path, key_path = pair.write(work_dir, "webhook")
    return cert_path, key_path, ca.cert_pem


async def inject_ca_bundle(api: ApiClient, name: str, ca_pem: bytes) -> None:
    """Write the generated CA into every webhook of the MutatingWebhookConfiguration ``name``."""
    admission: Any = k8s_client.AdmissionregistrationV1Api(api)
    try:
        current = await admission.read_mutating_webhook_configuration(name)
    except ApiException as e:
        log.warning("webhook configuration not found; its caBundle is not set (the fallback holds objects)",
                    name=name, error=f"HTTP {e.status}")  # fmt: skip
        return
    bundle = base64.b64encode(ca_pem).decode()
    webhooks = [{"name": w.name, "clientConfig": {"caBundle": bundle}} for w in current.webhooks or []]
    # A strategic merge patch keyed by webhook name: only caBundle changes.
    await admission.patch_mutating_webhook_configuration(
        name, raw_body({"webhooks": webhooks}), _content_type="application/strategic-merge-patch+json"
    )
    log.info("webhook CA bundle written", configuration=name, webhooks=len(webhooks))


class WebhookServer:
    def __init__(self, options: Webhook, integrations: dict[GroupVersionKind, Integration]) -> None:
        self.options = options
        self.integrations = integrations
        self.port: int | None = None
        self.ca_pem: bytes | None = None
        self._runner: web.AppRunner | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="multikueue-webhook-")

    async def start(self, api: ApiClient | None = None) -> None:
        cert, key, self.ca_pem = serving_material(self.options, Path(self._dir.name))
        context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(cert, key)
        self._runner = web.AppRunner(_app(self.integrations), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.options.host, self.options.port, ssl_context=context)
        await site.start()
        self.port = self._runner.addresses[0][1]
        log.info("admission webhook serving", address=f"{self.options.host}:{self.port}", path=PATH,
                 kinds=[str(g) for g in self.integrations])  # fmt: skip
        if api is not None and self.ca_pem is not None and self.options.configuration_name:
            await inject_ca_bundle(api, self.options.configuration_name, self.ca_pem)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._dir.cleanup()
