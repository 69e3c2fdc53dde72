"""What each request to a cluster presents: the TLS context (CA, client certificate) and the Authorization header.

Tokens from a file are re-read once a minute (a projected service-account token rotates, as client-go re-reads
it); an exec plugin runs when there is no credential yet, when its ``expirationTimestamp`` has passed, or after the
server answered 401, as client-go's exec authenticator does.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import functools
import json
import os
import re
import ssl
import tempfile
import time
from pathlib import Path

import anyio

from multikueue.kube import expiry
from multikueue.kube.errors import CredentialsUnavailable, KubeconfigError
from multikueue.kube.kubeconfig import ClusterAccess, ExecPlugin

TOKEN_FILE_REFRESH = 60.0
EXEC_TIMEOUT = 60.0


def _load_chain(context: ssl.SSLContext, certificate: bytes, key: bytes, temp_dir: Path | None) -> None:
    """``load_cert_chain`` reads files only: the PEMs go through anonymous in-memory files (Linux ``memfd``), or
    elsewhere through a private temporary directory removed at once."""
    if hasattr(os, "memfd_create"):
        fds = [os.memfd_create("client-certificate"), os.memfd_create("client-key")]
        try:
            for fd, data in zip(fds, (certificate, key), strict=True):
                os.write(fd, data)
            context.load_cert_chain(f"/proc/self/fd/{fds[0]}", f"/proc/self/fd/{fds[1]}")
        finally:
            for fd in fds:
                os.close(fd)
        return
    with tempfile.TemporaryDirectory(dir=temp_dir) as private:  # pragma: no cover - not Linux
        cert, key_file = Path(private, "tls.crt"), Path(private, "tls.key")
        cert.write_bytes(certificate)
        key_file.write_bytes(key)
        context.load_cert_chain(str(cert), str(key_file))


def ssl_reason(error: ssl.SSLError) -> str:
    """The SSL error's own words, without OpenSSL's source position (``reason`` is None for some, such as CA data
    that holds no certificate)."""
    text = error.reason or error.strerror or str(error)
    return re.sub(r"\s*\(_ssl\.c:\d+\)$", "", str(text))


def ssl_context(access: ClusterAccess, certificate: bytes | None, key: bytes | None, temp_dir: Path | None = None
                ) -> ssl.SSLContext | None:  # fmt: skip
    """The TLS context for ``access`` (``None`` for plain HTTP). Only the given CA is trusted when there is one: the
    system bundle is not loaded (it costs ~0.8 MiB per context)."""
    if not access.tls:
        return None
    try:
        context = ssl.create_default_context(cadata=access.ca) if access.ca else ssl.create_default_context()
        if access.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if certificate and key:
            _load_chain(context, certificate, key, temp_dir)
    except ssl.SSLError as e:
        reason = ssl_reason(e)
        raise KubeconfigError(f"kubeconfig: the certificates of {access.server} cannot be used: {reason}") from None
    return context


class Credentials:
    """The current TLS context and Authorization header of one cluster's access."""

    def __init__(self, access: ClusterAccess, temp_dir: Path | None = None) -> None:
        self.access = access
        self._temp_dir = temp_dir
        self.ssl = ssl_context(access, access.client_certificate, access.client_key, temp_dir)
        self._header: str | None = None
        if access.token:
            self._header = f"Bearer {access.token}"
        elif access.basic:
            self._header = "Basic " + base64.b64encode(":".join(access.basic).encode()).decode()
        self._expires = float("inf") if self._header or not (access.token_file or access.exec) else 0.0
        self._lock = anyio.Lock()
        self._fetched_expiry: float | None = None  # of the credential a tokenFile or an exec plugin gave last

    def expiry(self) -> float | None:
        """When the credential in use stops working (seconds since the epoch), ``None`` if it does not say."""
        return expiry.earliest(self._kubeconfig_expiry, self._fetched_expiry)

    @functools.cached_property
    def _kubeconfig_expiry(self) -> float | None:
        """Of the token and client certificate written in the kubeconfig: read once, when first asked."""
        return expiry.earliest(
            expiry.token_expiry(self.access.token) if self.access.token else None,
            expiry.certificate_expiry(self.access.client_certificate) if self.access.client_certificate else None,
        )

    @property
    def renewable(self) -> bool:
        """Whether the credential is fetched again on its own (a tokenFile rotated by its writer, an exec plugin),
        rather than fixed in the kubeconfig until someone replaces it."""
        return bool(self.access.token_file or self.access.exec)

    def with_header_of(self, access: ClusterAccess) -> Credentials:
        """Credentials presenting ``access``'s token (or basic auth) over this one's TLS context: for a kubeconfig
        whose only change is that credential (``header_only_change``), so pooled connections stay usable."""
        renewed = Credentials(dataclasses.replace(access, client_certificate=None, client_key=None), self._temp_dir)
        renewed.access, renewed.ssl = access, self.ssl
        return renewed

    def expire(self) -> None:
        """The server answered 401: a file or plugin credential is read again before the next request."""
        if self.access.token_file or self.access.exec:
            self._expires = 0.0

    async def authorization(self) -> str | None:
        if time.monotonic() < self._expires:
            return self._header
        async with self._lock:
            if time.monotonic() >= self._expires:
                await self._refresh()
        return self._header

    async def _refresh(self) -> None:
        if self.access.token_file:
            try:
                token = (await anyio.Path(self.access.token_file).read_text()).strip()
            except OSError as e:
                raise CredentialsUnavailable(
                    f"tokenFile {self.access.token_file!r} cannot be read: {e.strerror}"
                ) from None
            self._header, self._expires = f"Bearer {token}", time.monotonic() + TOKEN_FILE_REFRESH
            self._fetched_expiry = expiry.token_expiry(token)
        elif self.access.exec:
            await self._run_plugin(self.access.exec)

    async def _run_plugin(self, plugin: ExecPlugin) -> None:
        spec: dict[str, object] = {"interactive": False}
        if plugin.cluster_info is not None:
            spec["cluster"] = json.loads(plugin.cluster_info)
        info = {"apiVersion": plugin.api_version, "kind": "ExecCredential", "spec": spec}
        env = {**os.environ, **dict(plugin.env), "KUBERNETES_EXEC_INFO": json.dumps(info)}
        hint = f" ({plugin.install_hint})" if plugin.install_hint else ""
        try:
            with anyio.fail_after(EXEC_TIMEOUT):
                done = await anyio.run_process([plugin.command, *plugin.args], env=env, check=False)
        except (OSError, TimeoutError) as e:
            raise CredentialsUnavailable(f"exec plugin {plugin.command!r} cannot run: {e}{hint}") from None
        if done.returncode != 0:
            detail = done.stderr.decode(errors="replace").strip().splitlines()[-1:] or [f"exit {done.returncode}"]
            raise CredentialsUnavailable(f"exec plugin {plugin.command!r} failed: {detail[0]}")
        status = _exec_status(done.stdout, plugin.command)
        if status.get("clientCertificateData") and status.get("clientKeyData"):
            cert, key = str(status["clientCertificateData"]).encode(), str(status["clientKeyData"]).encode()
            try:
                self.ssl = ssl_context(self.access, cert, key, self._temp_dir)
            except KubeconfigError as e:  # the plugin's certificate this time, not the kubeconfig
                raise CredentialsUnavailable(f"exec plugin {plugin.command!r}: {e}") from None
        self._header = f"Bearer {status['token']}" if status.get("token") else None
        self._expires = _expiry(status.get("expirationTimestamp"))
        certificate = str(status.get("clientCertificateData") or "").encode()
        self._fetched_expiry = expiry.earliest(
            expiry.timestamp_expiry(status.get("expirationTimestamp")),
            expiry.token_expiry(str(status["token"])) if status.get("token") else None,
            expiry.certificate_expiry(certificate) if certificate else None,
        )


def _exec_status(stdout: bytes, command: str) -> dict[str, object]:
    try:
        credential = json.loads(stdout)
        status = credential["status"]
        if not isinstance(status, dict):
            raise TypeError
    except (ValueError, KeyError, TypeError):
        raise CredentialsUnavailable(f"exec plugin {command!r} did not print an ExecCredential with a status") from None
    if not status.get("token") and not status.get("clientCertificateData"):
        raise CredentialsUnavailable(f"exec plugin {command!r} returned neither a token nor a client certificate")
    return status


def _expiry(timestamp: object) -> float:
    """A monotonic deadline from an RFC 3339 ``expirationTimestamp`` (none: the credential does not expire)."""
    if not timestamp:
        return float("inf")
    try:
        when = datetime.datetime.fromisoformat(str(timestamp).replace("Z", "+00:00"))
    except ValueError:
        return 0.0  # unreadable: ask again next time rather than trust it forever
    left = (when - datetime.datetime.now(datetime.UTC)).total_seconds()
    return time.monotonic() + left


def header_only_change(old: ClusterAccess, new: ClusterAccess) -> bool:
    """Whether two accesses differ at most in the credential sent as the Authorization header (a token, a token
    file, basic auth): same server, CA, TLS settings, proxy, client certificate, impersonation, and no exec plugin
    (whose answer may carry a client certificate)."""
    if old.exec is not None or new.exec is not None:
        return False
    unchanged = {"token": None, "token_file": None, "basic": None}
    return dataclasses.replace(old, **unchanged) == dataclasses.replace(new, **unchanged)  # type: ignore[arg-type]
