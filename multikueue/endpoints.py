"""The process's two listeners, as a kubebuilder controller has them: ``/metrics`` over HTTPS for callers the
cluster authenticates and RBAC allows (``multikueue-metrics-reader``), and ``/healthz`` ``/readyz`` in plain HTTP
on a port of their own for the kubelet's probes.

The metrics name every ClusterQueue, worker and kind and their rates, so they are not for whoever reaches the pod:
a bearer token is reviewed by the API server (TokenReview), the identity then checked for ``get`` on the
non-resource URL ``/metrics`` (SubjectAccessReview), both verdicts cached briefly (controller-runtime's times).
The certificate comes from ``--metrics-cert-dir`` (``tls.crt``, ``tls.key``; read again when they change, as
controller-runtime's certwatcher does) or is generated at start, self-signed.
"""

from __future__ import annotations

import datetime
import hashlib
import socket
import ssl
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import anyio
import structlog
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST

from multikueue.access import Answer, ReviewFailed, after_access_review, after_token_review, bearer_token
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import ApiError, Busy, describe
from multikueue.kube.reviews import AccessDecision, UserInfo, review_access, review_token
from multikueue.metrics import Metrics
from multikueue.tls import ServingCertificate
from multikueue.ttlcache import TTLCache

log = structlog.get_logger(__name__)

# controller-runtime's (pkg/metrics/filters): a token's verdict for a minute, an allowed identity for five, a denied
# one for thirty seconds (a binding just created works soon); each review given ten seconds.
TOKEN_TTL = 60.0
ALLOWED_TTL = 300.0
DENIED_TTL = 30.0
REVIEW_TIMEOUT = 10.0
CACHE_SIZE = 1024
REVIEWS_IN_FLIGHT = 4
_SELF_SIGNED_VALIDITY = datetime.timedelta(days=365)


class ServingError(Exception):
    """An endpoint cannot be served as configured: one line naming the flag and value."""


Address = tuple[str, int]


@dataclass(frozen=True)
class Serving:
    """Where the endpoints listen (``None``: not served) and how ``/metrics`` is protected."""

    metrics: Address | None = None
    health: Address | None = None
    secure: bool = True  # False: /metrics in plain HTTP to anyone (local development only)
    cert_dir: Path | None = None  # tls.crt and tls.key; None: a self-signed certificate generated at start


@dataclass(frozen=True)
class Durations:
    token: float = TOKEN_TTL
    allowed: float = ALLOWED_TTL
    denied: float = DENIED_TTL
    review_timeout: float = REVIEW_TIMEOUT


class MetricsAccess:
    """Carries out ``access``'s decisions: the reviews, their cache, and a log line for each fresh verdict."""

    def __init__(self, api: ApiClient, durations: Durations = Durations(), size: int = CACHE_SIZE) -> None:
        self.api = api
        self.durations = durations
        self._tokens: TTLCache[bytes, tuple[UserInfo | None]] = TTLCache(size)  # by the token's SHA-256
        self._access: TTLCache[tuple[UserInfo, str, str], AccessDecision] = TTLCache(size)
        # Reviews in flight at once: anyone who reaches the port can send tokens never seen before, and each costs a
        # request on the manager's client, which reconciles and the leader Lease need. Beyond this: 503 at once.
        self._reviews = anyio.Semaphore(REVIEWS_IN_FLIGHT)

    async def check(self, authorization: str | None, verb: str, path: str) -> Answer:
        token = bearer_token(authorization)
        verdict = after_token_review(None if token is None else await self._authenticate(token))
        if isinstance(verdict, Answer):
            return verdict
        return after_access_review(verdict, verb, path, await self._authorize(verdict, verb, path))

    async def _authenticate(self, token: str) -> UserInfo | ReviewFailed | None:
        key = hashlib.sha256(token.encode()).digest()
        if (cached := self._tokens.get(key)) is not None:
            return cached[0]
        if self._reviews.value == 0:
            return ReviewFailed("TokenReview", f"more than {REVIEWS_IN_FLIGHT} reviews in flight", answered=False)
        try:
            async with self._reviews:
                user = await review_token(self.api, token, timeout=self.durations.review_timeout)
        except Exception as e:  # any failure is an answer to the scraper, never a traceback in its face
            return _failure("TokenReview", e)
        self._tokens.put(key, (user,), self.durations.token)
        if user is None:
            log.debug("metrics: a token the API server does not authenticate")
        return user

    async def _authorize(self, user: UserInfo, verb: str, path: str) -> AccessDecision | ReviewFailed:
        key = (user, verb, path)
        if (cached := self._access.get(key)) is not None:
            return cached
        if self._reviews.value == 0:
            return ReviewFailed("SubjectAccessReview", f"more than {REVIEWS_IN_FLIGHT} reviews in flight",
                                answered=False)  # fmt: skip
        try:
            async with self._reviews:
                decision = await review_access(self.api, user, path, verb, timeout=self.durations.review_timeout)
        except Exception as e:
            return _failure("SubjectAccessReview", e)
        self._access.put(key, decision, self.durations.allowed if decision.allowed else self.durations.denied)
        if not decision.allowed:
            log.info("metrics: read refused (not allowed by RBAC; bind multikueue-metrics-reader)",
                     user=user.username, verb=verb, path=path)  # fmt: skip
        return decision


def _failure(review: str, error: Exception) -> ReviewFailed:
    # The API server's own error needs an operator (500); no answer, or an API server too busy, passes (503).
    failure = ReviewFailed(
        review, describe(error), answered=isinstance(error, ApiError) and not isinstance(error, Busy)
    )
    log.warning("metrics: a review failed; the scrape is refused", review=review, error=failure.detail)
    return failure


def _certificate_files(cert_dir: Path | None, work_dir: Path, host: str) -> tuple[Path, Path, bytes | None]:
    """(certificate, key, generated CA or None): the directory's files, or a self-signed pair written to work_dir."""
    if cert_dir is not None:
        cert, key = cert_dir / "tls.crt", cert_dir / "tls.key"
        missing = [p.name for p in (cert, key) if not p.is_file()]
        if missing:
            raise ServingError(f"--metrics-cert-dir {cert_dir}: no {' or '.join(missing)} there")
        return cert, key, None
    # Imported here: cryptography (~10 MiB resident) only for a process that generates its certificate.
    from multikueue.pki import CertificateAuthority

    # As client-go's self-signed serving certificates: a CA of its own and a leaf for the names a caller may use;
    # scrapers skip verification (insecureSkipVerify) or are given the CA.
    ca = CertificateAuthority(f"multikueue-metrics-ca@{int(time.time())}", validity=_SELF_SIGNED_VALIDITY)
    ips = {"127.0.0.1", "::1"} | ({host} if _is_ip(host) and host not in ("0.0.0.0", "::") else set())
    pair = ca.issue("multikueue-metrics", dns_names=("localhost", socket.gethostname()),
                    ip_addresses=tuple(sorted(ips)), server=True)  # fmt: skip
    cert, key = work_dir / "tls.crt", work_dir / "tls.key"
    cert.write_bytes(pair.cert_pem + ca.cert_pem)
    key.write_bytes(pair.key_pem)
    key.chmod(0o600)
    return cert, key, ca.cert_pem


def _is_ip(host: str) -> bool:
    try:
        socket.inet_pton(socket.AF_INET6 if ":" in host else socket.AF_INET, host)
    except OSError:
        return False
    return True


def health_app(ready: Callable[[], bool], draining: Callable[[], bool] = lambda: False) -> web.Application:
    """``/healthz`` (the event loop answers); ``/readyz`` (caches synced, controllers running, not shutting down)."""

    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok")

    async def readyz(_: web.Request) -> web.Response:
        if draining():
            return web.Response(status=503, text="not ready: shutting down")
        return web.Response(text="ok") if ready() else web.Response(status=503, text="not ready: caches syncing")

    app = web.Application()
    app.add_routes([web.get("/healthz", healthz), web.get("/readyz", readyz)])
    return app


def metrics_app(metrics: Metrics, access: MetricsAccess | None) -> web.Application:
    """``/metrics``, for callers ``access`` lets in (everyone when it is ``None``)."""

    async def serve_metrics(request: web.Request) -> web.Response:
        if access is not None:
            answer = await access.check(request.headers.get("Authorization"), request.method.lower(), request.path)
            metrics.metrics_requests.labels(str(answer.status)).inc()
            if answer.status != 200:
                return web.Response(status=answer.status, text=answer.text + "\n")
        else:
            metrics.metrics_requests.labels("200").inc()
        return web.Response(body=metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.add_routes([web.get("/metrics", serve_metrics, allow_head=False)])
    return app


class Endpoints:
    """Both listeners of one process; ``start`` raises ``ServingError`` (one line) when one cannot be served."""

    def __init__(self, serving: Serving, metrics: Metrics, ready: Callable[[], bool], api: ApiClient,
                 durations: Durations = Durations(), draining: Callable[[], bool] = lambda: False) -> None:  # fmt: skip
        self.serving = serving
        self.metrics = metrics
        self.ready = ready
        self.draining = draining
        self.access = MetricsAccess(api, durations) if serving.secure else None
        self.metrics_port: int | None = None
        self.health_port: int | None = None
        self.ca_pem: bytes | None = None  # the generated CA, when no --metrics-cert-dir was given
        self._runners: list[web.AppRunner] = []

    async def start(self) -> None:
        try:
            if self.serving.health is not None:
                self.health_port = await self._serve(health_app(self.ready, self.draining), self.serving.health,
                                                     "--health-probe-bind-address", None)  # fmt: skip
            if self.serving.metrics is not None:
                self.metrics_port = await self._serve(metrics_app(self.metrics, self.access), self.serving.metrics,
                                                      "--metrics-bind-address", self._tls())  # fmt: skip
        except BaseException:
            await self.stop()
            raise
        if self.serving.metrics is not None:
            where = f"https://{self.serving.metrics[0]}:{self.metrics_port}/metrics"
            if self.access is None:
                where = f"http://{self.serving.metrics[0]}:{self.metrics_port}/metrics"
                log.warning("metrics served in plain HTTP to anyone (--metrics-secure=false): local use only")
            log.info("serving metrics", url=where, authentication="TokenReview+SubjectAccessReview"
                     if self.access else "none")  # fmt: skip
        if self.serving.health is not None:
            log.info("serving /healthz and /readyz", address=f"{self.serving.health[0]}:{self.health_port}")

    def _tls(self) -> ssl.SSLContext | None:
        if not self.serving.secure:
            return None
        assert self.serving.metrics is not None
        # A generated key is on disk only while it is loaded (a SIGKILLed process would leave it in /tmp); files
        # from --metrics-cert-dir are read again on rotation, those stay where they are.
        with tempfile.TemporaryDirectory(prefix="multikueue-metrics-") as scratch:
            cert, key, self.ca_pem = _certificate_files(self.serving.cert_dir, Path(scratch), self.serving.metrics[0])
            try:
                return ServingCertificate(cert, key, watch=self.serving.cert_dir is not None, what="metrics").listener
            except (OSError, ssl.SSLError) as e:
                where = self.serving.cert_dir
                raise ServingError(f"--metrics-cert-dir {where}: cannot load tls.crt and tls.key: {e}") from None

    async def _serve(self, app: web.Application, address: Address, flag: str, context: ssl.SSLContext | None) -> int:
        host, port = address
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        self._runners.append(runner)
        try:
            await web.TCPSite(runner, host, port, ssl_context=context).start()
        except OSError as e:
            raise ServingError(f"cannot serve {flag} {host}:{port}: {e.strerror or e}") from None
        return int(runner.addresses[0][1])

    async def stop(self) -> None:
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()
