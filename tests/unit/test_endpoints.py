"""The metrics listener's TLS: a certificate from --metrics-cert-dir, served again after it is rotated, and the last
good one kept while the files do not load. Real TLS handshakes on 127.0.0.1 (no API server is asked: no token)."""

from __future__ import annotations

import os
import ssl
import tempfile
from pathlib import Path

import anyio
import anyio.streams.tls
import pytest
from cryptography import x509

from multikueue import tls
from multikueue.endpoints import Endpoints, Serving, ServingError
from multikueue.kube.client import ApiClient
from multikueue.kube.kubeconfig import ClusterAccess
from multikueue.metrics import Metrics
from multikueue.pki import CertificateAuthority


async def _served_certificate(port: int, ca_pem: bytes) -> x509.Certificate:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    async with await anyio.connect_tcp("127.0.0.1", port, ssl_context=context, tls_hostname="localhost") as tls:
        der = tls.extra(anyio.streams.tls.TLSAttribute.peer_certificate_binary)
    assert der is not None
    return x509.load_der_x509_certificate(der)


def _write(directory: Path, ca: CertificateAuthority, name: str) -> None:
    pair = ca.issue(name, dns_names=("localhost",), server=True)
    # as the kubelet updates a mounted Secret: new files swapped in whole
    for stem, data in (("tls.crt", pair.cert_pem), ("tls.key", pair.key_pem)):
        (directory / f".{stem}").write_bytes(data)
        (directory / f".{stem}").rename(directory / stem)


def name(certificate: x509.Certificate) -> str:
    return certificate.subject.rfc4514_string()


@pytest.fixture
def api() -> ApiClient:
    return ApiClient(ClusterAccess(server="https://127.0.0.1:1"))


async def test_a_rotated_certificate_is_served_and_a_broken_one_is_not(
    tmp_path: Path, api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tls, "CHECK_INTERVAL", 0.0)
    ca = CertificateAuthority("metrics-test-ca")
    _write(tmp_path, ca, "first")
    served = Endpoints(Serving(metrics=("127.0.0.1", 0), cert_dir=tmp_path), Metrics(), lambda: True, api)
    await served.start()
    try:
        assert served.metrics_port is not None
        assert served.ca_pem is None
        assert name(await _served_certificate(served.metrics_port, ca.cert_pem)) == "CN=first"
        _write(tmp_path, ca, "second")
        assert name(await _served_certificate(served.metrics_port, ca.cert_pem)) == "CN=second"
        (tmp_path / "tls.key").write_bytes(b"half-written")
        assert name(await _served_certificate(served.metrics_port, ca.cert_pem)) == "CN=second", "last good kept"
    finally:
        await served.stop()


async def test_without_a_cert_dir_a_certificate_is_generated_for_the_loopback(
    api: ApiClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # where a scratch directory would go
    served = Endpoints(Serving(metrics=("127.0.0.1", 0)), Metrics(), lambda: True, api)
    await served.start()
    try:
        # The generated key is in memory only: nothing of it stays on disk (a process killed would leave it there).
        assert os.listdir(tmp_path) == []
        assert served.metrics_port is not None
        assert served.ca_pem is not None
        context = ssl.create_default_context(cadata=served.ca_pem.decode())
        # verified against the generated CA, host name checked against the IP address connected to
        async with await anyio.connect_tcp("127.0.0.1", served.metrics_port, ssl_context=context):
            pass
    finally:
        await served.stop()


async def test_a_cert_dir_without_the_files_is_one_line(tmp_path: Path, api: ApiClient) -> None:
    served = Endpoints(Serving(metrics=("127.0.0.1", 0), cert_dir=tmp_path), Metrics(), lambda: True, api)
    with pytest.raises(ServingError, match=r"--metrics-cert-dir .*: no tls.crt or tls.key there"):
        await served.start()
