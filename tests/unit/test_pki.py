from __future__ import annotations

import ipaddress

import pytest
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from multikueue.pki import CertificateAuthority, signing_key


def test_serving_certificate_is_issued_by_the_ca_for_its_addresses() -> None:
    ca = CertificateAuthority()
    pair = ca.issue("apiserver", dns_names=("localhost",), ip_addresses=("127.0.0.1",), server=True)
    cert = x509.load_pem_x509_certificate(pair.cert_pem)
    cert.verify_directly_issued_by(x509.load_pem_x509_certificate(ca.cert_pem))
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == ["localhost"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    usages = cert.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert list(usages) == [ExtendedKeyUsageOID.SERVER_AUTH]


def test_client_certificate_carries_user_and_groups() -> None:
    pair = CertificateAuthority().issue("admin", organizations=("system:masters",), client=True)
    subject = x509.load_pem_x509_certificate(pair.cert_pem).subject
    assert subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value == "admin"
    assert subject.get_attributes_for_oid(NameOID.ORGANIZATION_NAME)[0].value == "system:masters"


def test_misuse_is_refused_with_a_reason() -> None:
    ca = CertificateAuthority()
    with pytest.raises(ValueError, match="server, a client"):
        ca.issue("nobody")
    with pytest.raises(ValueError, match="needs a DNS name"):
        ca.issue("nameless", server=True)


def test_signing_key_is_a_public_private_pair() -> None:
    pair = signing_key()
    assert pair.cert_pem.startswith(b"-----BEGIN PUBLIC KEY-----")
    assert pair.key_pem.startswith(b"-----BEGIN PRIVATE KEY-----")
