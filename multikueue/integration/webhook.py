"""The mutating admission webhook: a queued object is suspended from its first instant (HTTPS, AdmissionReview v1).

Without it the controller still holds a new object on first sight (the fallback), but the kind's own controller
may start it first; on a MultiKueue manager the object carries ``managedBy`` and nothing else runs it, so the
fallback is exact there. See docs/integration.md for failurePolicy and timeout.
"""

from __future__ import annotations

import base64
import contextlib
import json
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import structlog
from aiohttp import web
from cryptography import x509

from multikueue.config import Integration, Webhook
from multikueue.integration.generated_certificate import RECHECK, GeneratedCertificate
from multikueue.integration.lifecycle import admission_patch
from multikueue.kube.addresses import GroupVersionKind
from multikueue.kube.client import ApiClient
from multikueue.metrics import Metrics
from multikueue.tls import ServingCertificate

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


Warn = Callable[[str, str], Awaitable[None]]


class WebhookServer:
    """Serves ``/mutate`` with whatever ``integrations()`` returns now (a configuration reload changes it), with a
    certificate kept current for as long as it serves (``keep``): the files of ``certDir`` read again when they
    change (cert-manager renews them), or the generated Secret followed (``generated_certificate``).

    ``ready``: the API servers trust the certificate served, so the Service may send them here.
    """

    def __init__(self, options: Webhook, integrations: Callable[[], dict[GroupVersionKind, Integration]], *,
                 metrics: Metrics | None = None, warn: Warn | None = None) -> None:  # fmt: skip
        self.options = options
        self.integrations = integrations
        self.metrics = metrics if metrics is not None else Metrics()
        self.warn = warn
        self.port: int | None = None
        self.draining = False  # shutting down: answer, but let no connection be reused
        self._runner: web.AppRunner | None = None
        self._dir = tempfile.TemporaryDirectory(prefix="multikueue-webhook-")
        self._files: ServingCertificate | None = None  # certDir's
        self._generated: GeneratedCertificate | None = None

    @property
    def ready(self) -> bool:
        return self._generated is None or self._generated.ready

    @property
    def watching(self) -> bool:
        """What keeps the generated certificate current is watched (always, with ``certDir``)."""
        return self._generated is None or self._generated.watching

    @property
    def old_ca_kept(self) -> int:
        """How often an old CA's drop was put off because a replica still served its certificate."""
        return self._generated.old_ca_kept if self._generated is not None else 0

    @property
    def served(self) -> x509.Certificate | None:
        """The generated certificate served now (``None`` with ``certDir``)."""
        return self._generated.served if self._generated is not None else None

    async def start(self, api: ApiClient | None, namespace: str) -> None:
        if self.options.cert_dir is not None:
            directory = Path(self.options.cert_dir)
            cert, key = directory / "tls.crt", directory / "tls.key"
            missing = [str(p) for p in (cert, key) if not p.is_file()]
            if missing:
                raise FileNotFoundError(f"dispatcher.webhook.certDir: missing {', '.join(missing)}")
            certificate = self._files = ServingCertificate(cert, key, watch=True, what="webhook")
            self._expiry(x509.load_pem_x509_certificate(cert.read_bytes()))
        else:
            if api is None:
                raise ValueError("dispatcher.webhook: without certDir the certificate is kept in a Secret: a client "
                                 "is needed")  # fmt: skip
            self._generated = GeneratedCertificate(
                api,
                namespace,
                self.options,
                Path(self._dir.name),
                expiry=self._expiry,
                in_sync=self._in_sync,
                warn=self.warn,
            )
            certificate = await self._generated.start()
        self._runner = web.AppRunner(
            _app(self.integrations, lambda: self.draining), access_log=None, shutdown_timeout=SHUTDOWN_TIMEOUT
        )
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.options.host, self.options.port, ssl_context=certificate.listener)
        await site.start()
        self.port = self._runner.addresses[0][1]
        log.info("admission webhook serving", address=f"{self.options.host}:{self.port}", path=PATH,
                 kinds=[str(g) for g in self.integrations()])  # fmt: skip

    async def keep(self) -> None:
        """Keep the certificate (and the caBundle) current, for as long as the webhook serves."""
        if self._generated is not None:
            await self._generated.keep()
        loads = self._files.loads if self._files is not None else 0
        while self._files is not None:  # the handshakes look too; this also reloads a webhook nobody calls
            await anyio.sleep(RECHECK)
            self._files.look()
            if self._files.loads != loads:  # loaded here or by a handshake: the gauge says what is served now
                loads = self._files.loads
                with contextlib.suppress(OSError, ValueError):
                    self._expiry(x509.load_pem_x509_certificate(self._files.cert.read_bytes()))

    def _expiry(self, leaf: x509.Certificate) -> None:
        source = "certDir" if self.options.cert_dir is not None else "generated"
        self.metrics.webhook_certificate_expiry_seconds.labels(source).set(leaf.not_valid_after_utc.timestamp())

    def _in_sync(self, value: bool) -> None:
        if self.options.configuration_name:
            self.metrics.webhook_ca_bundle_ok.labels(self.options.configuration_name).set(1 if value else 0)

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        self._dir.cleanup()
