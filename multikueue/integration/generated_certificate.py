"""The generated webhook certificate, carried out: the shared Secret and the webhook configuration watched, the
step ``certificates`` decides written, the certificate a replica may serve put in place, the caBundle kept equal to
the Secret's bundle, and whatever fails said where an operator looks (the gauge, a Warning Event).

Every replica runs one; each write is guarded (the resourceVersion read, and the bundle's stamp for the caBundle),
so replicas converge instead of overwriting each other, and one whose watch is behind writes nothing older.
"""

from __future__ import annotations

import datetime
import ssl
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
import structlog
from cryptography import x509

from multikueue.config import Webhook
from multikueue.integration import ca_bundle, certificates, webhook_probe
from multikueue.kube import core
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import TRANSIENT, ApiError, Busy, Conflict, KubeError, NotFound, describe
from multikueue.pki import KeyPair
from multikueue.runtime.informer import Informer
from multikueue.tls import ServingCertificate

log = structlog.get_logger(__name__)
Object = dict[str, Any]
Warn = Callable[[str, str], Awaitable[None]]
RECHECK = 5.0  # seconds between looks without news: a CA settling in the caBundle, a certificate coming due
PROBE_INTERVAL = 30.0  # seconds between asking every replica what it serves, while an old CA waits to go
CLEAN_ROUNDS = 3  # rounds in a row in which no replica serves an old CA's certificate before that CA goes
START_ATTEMPTS = 6
UNSYNCED_GRACE = 30.0  # seconds a watch may take to list before it counts as failing (RBAC, an old Role)
NOT_WRITTEN, BUNDLE_NOT_WRITTEN = "WebhookCertificateNotWritten", "WebhookCABundleNotWritten"
UNUSABLE, NOT_WATCHED = "WebhookCertificateUnusable", "WebhookCertificateNotWatched"


_AGAIN: tuple[type[KubeError], ...] = (Conflict, Busy, *TRANSIENT)


class StartFailed(Exception):
    """The certificate cannot be had at start: one line."""


class GeneratedCertificate:
    """The serving certificate from the Secret ``options.secret_name``, kept current (``keep``)."""

    def __init__(self, api: ApiClient, namespace: str, options: Webhook, directory: Path, *,
                 expiry: Callable[[x509.Certificate], None], in_sync: Callable[[bool], None],
                 warn: Warn | None) -> None:  # fmt: skip
        self.api, self.namespace, self.options, self.directory = api, namespace, options, directory
        self.expiry, self.in_sync, self.warn = expiry, in_sync, warn
        self.certificate: ServingCertificate | None = None
        self.served: x509.Certificate | None = None
        self.ready = options.configuration_name is None  # no caBundle to keep: nothing to wait for
        self._files: tuple[Path, Path] | None = None
        self._secret: Informer | None = None
        self._configuration: Informer | None = None
        self._trusted: dict[x509.Certificate, float] = {}  # each CA of the caBundle, and when first seen there
        self._told: dict[str, str] = {}  # each problem's reason, with what was last said of it
        self._next_probe = 0.0
        self._clean_rounds = 0
        self.old_ca_kept = 0  # drops put off because a replica still served an old CA's certificate (or was silent)
        self._wake = anyio.Event()

    async def start(self) -> ServingCertificate:
        """The Secret's certificate, made first if it is missing or due (another replica may write it meanwhile)."""
        for attempt in range(START_ATTEMPTS):
            try:
                return await self._start_once()
            except _AGAIN as e:  # another replica wrote first, or no answer: read again
                log.info("webhook certificate not had yet; trying again", error=describe(e), attempt=attempt + 1)
                await anyio.sleep(min(2.0**attempt, 5.0) if not isinstance(e, Conflict) else 0)
        raise StartFailed(f"Secret {self.namespace}/{self.options.secret_name}: the webhook certificate could not be "
                          f"had in {START_ATTEMPTS} attempts")  # fmt: skip

    async def _start_once(self) -> ServingCertificate:
        try:
            secret: Object | None = await core.read_secret(self.api, self.namespace, self.options.secret_name)
        except NotFound:
            secret = None
        ours = bool(self.options.configuration_name)
        configuration = await self._read_configuration() if ours else None
        material = certificates.read(secret)
        configured = ca_bundle.configured_cas(configuration) if ours else None
        step = certificates.next_step(material, self.options.hosts, _now(), configured)
        if material is not None and isinstance(step, certificates.Keep | certificates.Drop):
            return self._serve(material)
        written = certificates.read(await self._write_secret(secret, step, material, configuration))
        if written is None:
            raise StartFailed(f"Secret {self.namespace}/{self.options.secret_name}: what was written does not read")
        return self._serve(written)

    @property
    def watching(self) -> bool:
        """The Secret (and the webhook configuration) listed and watched."""
        informers = [i for i in (self._secret, self._configuration) if i is not None]
        return bool(informers) and all(i.synced.is_set() for i in informers)

    async def _read_configuration(self) -> Object | None:
        """The webhook configuration; ``None`` if there is none. Any other failure raises: a Secret made anew
        without the CAs the caBundle trusts would have every running replica refused."""
        assert self.options.configuration_name
        try:
            return await core.read_webhook_configuration(self.api, self.options.configuration_name)
        except NotFound:
            return None

    async def keep(self) -> None:
        """Follow the Secret and the webhook configuration for as long as the webhook serves."""
        wake = lambda *_: self._wake.set()  # noqa: E731
        self._secret = Informer(core.secret_named_source(self.api, self.namespace, self.options.secret_name),
                                on_event=wake)  # fmt: skip
        informers = [self._secret]
        if self.options.configuration_name:
            source = core.webhook_configuration_source(self.api, self.options.configuration_name)
            self._configuration = Informer(source, on_event=wake)
            informers.append(self._configuration)
        started = time.monotonic()
        async with anyio.create_task_group() as tg:
            for informer in informers:
                tg.start_soon(informer.run)
            while True:
                with anyio.move_on_after(RECHECK):
                    await self._wake.wait()
                self._wake = anyio.Event()
                if all(i.synced.is_set() for i in informers):
                    await self._safe_pass()
                elif time.monotonic() - started > UNSYNCED_GRACE:
                    await self._unsynced(informers)

    async def _safe_pass(self) -> None:
        try:
            await self._pass()
        except KubeError as e:  # no answer: the next pass (a watch event, or RECHECK) tries again
            log.warning("webhook certificate check failed; tried again shortly", error=describe(e))
        except (ssl.SSLError, OSError, ValueError) as e:  # the last good certificate stays in use
            where = f"Secret {self.namespace}/{self.options.secret_name}"
            await self._problem(UNUSABLE, f"the webhook certificate in {where} cannot be served: {e}; the last good "
                                "one stays in use")  # fmt: skip

    async def _unsynced(self, informers: list[Informer]) -> None:
        failing = [i for i in informers if not i.synced.is_set()]
        errors = "; ".join(f"{i.source.description}: {describe(i.last_error) if i.last_error else 'no answer'}"
                           for i in failing)  # fmt: skip
        if self._configuration is not None:
            self.in_sync(False)
        await self._problem(NOT_WATCHED, f"cannot watch what the webhook certificate needs ({errors}): its renewal "
                            "and the caBundle are not kept (RBAC: config/integration/rbac.yaml)")  # fmt: skip

    async def _pass(self) -> None:
        """One look at the Secret and the webhook configuration as cached: write what is due, serve what may be."""
        assert self._secret is not None
        self._solved(NOT_WATCHED)
        secret = next(iter(self._secret.items()), None)
        configuration = next(iter(self._configuration.items()), None) if self._configuration else None
        configured = self._note_trusted(configuration) if self._configuration is not None else None
        material = certificates.read(secret)
        step = certificates.next_step(material, self.options.hosts, _now(), configured)
        due = not isinstance(step, certificates.Keep) and await self._due(step, configuration)
        if due and await self._write(secret, step, material, configuration):
            return  # its watch event brings the next pass
        if material is None:
            return
        if certificates.may_serve(material.leaf, self.served, self._trusted if configured is not None else None,
                                  time.monotonic()):  # fmt: skip
            self._serve(material)
            self._solved(UNUSABLE)
        await self._keep_bundle(configuration, material)
        self.ready = self._trusted_long_enough(configured)

    async def _due(self, step: certificates.Step, configuration: Object | None) -> bool:
        """A step is written now; an old CA goes only once every replica serves the new CA's certificate (one of an
        earlier release, or paused in a rollout, would be refused), or once it has expired."""
        if not isinstance(step, certificates.Drop) or all(ca.not_valid_after_utc <= _now() for ca in step.cas):
            return True
        if self._configuration is None:
            return True  # no caBundle of ours: no configuration says where the replicas are
        if configuration is None or time.monotonic() < self._next_probe:
            return False
        self._next_probe = time.monotonic() + PROBE_INTERVAL
        found = await webhook_probe.served(self.api, configuration)
        old = [leaf for leaf in found or [] if certificates.issuer_in(step.cas, leaf) is not None]
        # Several clean rounds in a row: a URL's balancer (or an endpoint list being rebuilt) may miss a replica once.
        self._clean_rounds = 0 if found is None or old else self._clean_rounds + 1
        if found is None or old:
            log.info("an old webhook CA stays in the caBundle: a replica still serves its certificate (or one did not "
                     "answer)", replicas=len(found or []), old=len(old))  # fmt: skip
        if self._clean_rounds < CLEAN_ROUNDS:
            self.old_ca_kept += 1
            return False
        return True

    async def _write(self, secret: Object | None, step: certificates.Step, material: certificates.Material | None,
                     configuration: Object | None) -> bool:  # fmt: skip
        """Write the step; whether it was written (or another replica's write won: its event follows)."""
        assert self._secret is not None
        try:
            written = await self._write_secret(secret, step, material, configuration)
        except Conflict:
            return True
        except ApiError as e:
            await self._problem(NOT_WRITTEN, f"cannot write the webhook certificate to Secret {self.namespace}/"
                                f"{self.options.secret_name}: {describe(e)}")  # fmt: skip
            return False
        self._secret.remember(written)
        self._solved(NOT_WRITTEN)
        self._wake.set()
        return True

    async def _write_secret(self, secret: Object | None, step: certificates.Step,
                            material: certificates.Material | None,
                            configuration: Object | None) -> Object:  # fmt: skip
        assert not isinstance(step, certificates.Keep)
        stamp = ca_bundle.stamp_of(configuration) if configuration else 0
        data, annotations = certificates.render(step, material, self.options.hosts, _now(), configured_stamp=stamp)
        meta: Object = {"name": self.options.secret_name, "namespace": self.namespace}
        if secret is not None:
            old = secret.get("metadata") or {}
            meta |= {"resourceVersion": old["resourceVersion"], "labels": old.get("labels") or {},
                     "annotations": (old.get("annotations") or {}) | annotations}  # fmt: skip
        else:
            meta["annotations"] = annotations
        body = {"metadata": meta, "type": "kubernetes.io/tls", "data": data}
        written = await core.write_secret(self.api, self.namespace, body, replace=secret is not None)
        log.info("webhook certificate written", secret=f"{self.namespace}/{self.options.secret_name}",
                 step=type(step).__name__, why=getattr(step, "why", ""), hosts=list(self.options.hosts))  # fmt: skip
        return written

    def _serve(self, material: certificates.Material) -> ServingCertificate:
        """Serve the Secret's certificate from the next handshake on (``ssl.SSLError``/``OSError``: it stays)."""
        if self.certificate is not None and material.leaf == self.served:
            return self.certificate
        stem = f"tls-{certificates.fingerprint(material.leaf)[:16]}"
        cert, key = KeyPair(material.leaf_pem, material.key_pem).write(self.directory, stem)
        if self.certificate is None:
            self.certificate = ServingCertificate(cert, key, watch=False, what="webhook")
        else:
            self.certificate.use(cert, key)
            log.info("webhook serving certificate changed", issuer=material.leaf.issuer.rfc4514_string(),
                     expires=material.leaf.not_valid_after_utc.isoformat())  # fmt: skip
        if self._files is not None and self._files != (cert, key):  # loaded: the old pair is not needed on disk
            for path in self._files:
                path.unlink(missing_ok=True)
        self._files, self.served = (cert, key), material.leaf
        self.expiry(material.leaf)
        return self.certificate

    def _note_trusted(self, configuration: Object | None) -> tuple[x509.Certificate, ...]:
        configured = ca_bundle.configured_cas(configuration)
        now = time.monotonic()
        self._trusted = {ca: self._trusted.get(ca, now) for ca in configured}
        return configured

    def _trusted_long_enough(self, configured: tuple[x509.Certificate, ...] | None) -> bool:
        """Ready: the API servers trust what this replica serves (the caBundle has for ``SETTLE``: every one of them
        reads it from a watch), or there is no caBundle of ours, or no configuration to call it at all."""
        found = self._configuration.items() if self._configuration is not None else []
        if configured is None or not found or not found[0].get("webhooks"):
            return True
        if self.served is None:
            return False
        ca = certificates.issuer_in(configured, self.served)
        return ca is not None and time.monotonic() - self._trusted[ca] >= certificates.SETTLE

    async def _keep_bundle(self, configuration: Object | None, material: certificates.Material) -> None:
        if self._configuration is None:
            return
        name = self.options.configuration_name
        if configuration is None:
            self.in_sync(False)
            await self._problem(BUNDLE_NOT_WRITTEN, f"MutatingWebhookConfiguration {name} not found: no create of a "
                                "configured kind passes through the webhook")  # fmt: skip
            return
        verdict = ca_bundle.judge(configuration, material)
        self.in_sync(verdict.in_sync)
        if verdict.in_sync:
            self._solved(BUNDLE_NOT_WRITTEN)
        if not verdict.write:
            return
        annotations = {certificates.BUNDLE_STAMP_ANNOTATION: str(material.stamp)}
        try:
            written = await core.write_ca_bundle(self.api, configuration, ca_bundle.wanted_bundle(material),
                                                 annotations)  # fmt: skip
        except Conflict:
            return  # changed meanwhile: its watch event brings a new pass
        except ApiError as e:
            problem = f"cannot write the caBundle of MutatingWebhookConfiguration {name}: {describe(e)}"
            await self._problem(BUNDLE_NOT_WRITTEN, f"{problem}; the API servers may refuse every create")
            return
        self._configuration.remember(written)
        log.info("webhook caBundle written", configuration=name, cas=len(material.bundle))
        self._wake.set()

    async def _problem(self, reason: str, message: str) -> None:
        """Said once (an Event on the configuration's ConfigMap, a log line) until solved or changed."""
        if self._told.get(reason) == message:
            return
        self._told[reason] = message
        log.warning(message, reason=reason)
        if self.warn is not None:
            await self.warn(reason, message)

    def _solved(self, reason: str) -> None:
        if self._told.pop(reason, None) is not None:
            log.info("webhook problem solved", reason=reason)


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
