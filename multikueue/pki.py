"""A small PKI: one CA issuing serving and client certificates (the test bed's clusters, the admission webhook).

ECDSA P-256 everywhere: key generation is instant, and kube-apiserver accepts EC keys for serving, client
authentication and service-account token signing alike.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=7)
_CLOCK_SKEW = datetime.timedelta(minutes=5)


@dataclass(frozen=True)
class KeyPair:
    """A PEM certificate (empty for a bare signing key) and its PEM private key."""

    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, stem: str) -> tuple[Path, Path]:
        cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
        cert_path.write_bytes(self.cert_pem)
        key_path.write_bytes(self.key_pem)
        key_path.chmod(0o600)
        return cert_path, key_path


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates."""

    def __init__(self, common_name: str = "multikueue-testbed-ca", *, validity: datetime.timedelta = _VALIDITY,
                 now: datetime.datetime | None = None) -> None:  # fmt: skip
        self._key = _new_key()
        self.validity = validity
        now = now or datetime.datetime.now(datetime.UTC)
        name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + self.validity)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(self._key, hashes.SHA256())
        )

    @classmethod
    def load(cls, cert_pem: bytes, key_pem: bytes) -> CertificateAuthority:
        """A CA kept elsewhere (a Secret), to issue more certificates from; ``ValueError`` if they do not load."""
        key = serialization.load_pem_private_key(key_pem, password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError("the CA key is not an EC private key")
        ca = cls.__new__(cls)
        ca._key, ca._cert = key, x509.load_pem_x509_certificate(cert_pem)
        ca.validity = ca._cert.not_valid_after_utc - ca._cert.not_valid_before_utc
        return ca

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    @property
    def key_pem(self) -> bytes:
        return _key_pem(self._key)

    def issue(
        self,
        common_name: str,
        *,
        organizations: tuple[str, ...] = (),
        dns_names: tuple[str, ...] = (),
        ip_addresses: tuple[str, ...] = (),
        server: bool = False,
        client: bool = False,
        validity: datetime.timedelta | None = None,
        now: datetime.datetime | None = None,
    ) -> KeyPair:
        """Issue a leaf certificate (valid as long as the CA unless ``validity`` says); ``server`` needs at least
        one DNS name or IP address."""
        if not (server or client):
            raise ValueError("a certificate must be for a server, a client, or both")
        if server and not (dns_names or ip_addresses):
            raise ValueError(f"serving certificate {common_name!r} needs a DNS name or an IP address")
        key = _new_key()
        now = now or datetime.datetime.now(datetime.UTC)
        attributes = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        attributes.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = [ExtendedKeyUsageOID.SERVER_AUTH] if server else []
        usages += [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(attributes))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _CLOCK_SKEW)
            .not_valid_after(now + (validity or self.validity))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns_names]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _key_pem(key))


def signing_key() -> KeyPair:
    """A bare key pair for service-account token signing: ``cert_pem`` holds the PEM public key."""
    key = _new_key()
    public = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    return KeyPair(public, _key_pem(key))
