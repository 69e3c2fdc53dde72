"""The admission webhook's generated certificates: what the shared Secret holds next, and when a replica may serve
a certificate it finds there. Decisions are pure; ``render`` makes the keys a decision asks for.

The Secret (``kubernetes.io/tls``, shared by every replica) holds ``tls.crt``/``tls.key``, the serving certificate;
``ca.crt``, the CA bundle the webhook configuration's caBundle carries (one CA, two while one replaces the other);
and ``ca.key``, the key of the bundle's CA that issues serving certificates (the signer).

A serving certificate is renewed, or made for new hosts, by the same CA: the caBundle already trusts it, so a replica
serving the old one and a replica serving the new one are both trusted throughout. A CA is replaced only near its
end, years apart, in steps no replica can skip: the new CA joins the bundle and issues the new serving certificate;
each replica serves it only once the webhook configuration has trusted its CA for ``SETTLE`` (the API servers read
the configuration from a watch); the old CA leaves the bundle ``DROP_AFTER`` later, or when it expires.
"""

from __future__ import annotations

import base64
import datetime
import ipaddress
from dataclasses import dataclass
from typing import Any

from cryptography import x509
from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from multikueue.pki import CertificateAuthority, KeyPair

Object = dict[str, Any]
HOSTS_ANNOTATION = "multikueue.x-k8s.io/webhook-hosts"
# When ca.crt last changed (Unix milliseconds), carried to the webhook configuration with the bundle: a replica whose
# view of the Secret is older never writes its bundle over a newer one.
BUNDLE_STAMP_ANNOTATION = "multikueue.x-k8s.io/webhook-ca-bundle-stamp"
CA_VALIDITY = datetime.timedelta(days=5 * 365)
LEAF_VALIDITY = datetime.timedelta(days=365)
RENEW_LEAF_BEFORE = datetime.timedelta(days=30)
RENEW_CA_BEFORE = datetime.timedelta(days=400)  # longer than a serving certificate lives: none outlives its CA
DROP_AFTER = datetime.timedelta(minutes=15)  # every replica reads a changed Secret within seconds (a watch)
SETTLE = 5.0  # seconds the caBundle has trusted a CA before a replica serves a certificate it issued
_BACKDATE = datetime.timedelta(minutes=5)  # pki's allowance for clock skew: a certificate's notBefore is this early


@dataclass(frozen=True)
class Material:
    """What a usable generated Secret holds, parsed."""

    leaf: x509.Certificate
    leaf_pem: bytes
    key_pem: bytes
    bundle: tuple[x509.Certificate, ...]
    signer: x509.Certificate | None  # the bundle's CA whose key is ca.key; None: no key kept (an older Secret)
    ca_key_pem: bytes | None
    hosts: tuple[str, ...]
    stamp: int


def _certificates(pem: bytes) -> tuple[x509.Certificate, ...]:
    return tuple(x509.load_pem_x509_certificates(pem))


def _signer(bundle: tuple[x509.Certificate, ...], ca_key_pem: bytes | None) -> x509.Certificate | None:
    """The bundle's CA whose key is ``ca_key_pem``; ``None`` without a usable (EC, as made here) key."""
    if ca_key_pem is None:
        return None
    key = serialization.load_pem_private_key(ca_key_pem, password=None)
    if not isinstance(key, ec.EllipticCurvePrivateKey):
        return None
    return next((ca for ca in bundle if ca.public_key() == key.public_key()), None)


def _stamp(text: str | None) -> int:
    try:
        return max(0, int(text or "0"))
    except ValueError:
        return 0  # a garbage stamp loses nothing: the next bundle written carries a good one


def read(secret: Object | None) -> Material | None:
    """The Secret's material; ``None`` when there is none, it does not parse, or its key is not the serving
    certificate's (it is then made anew, the CAs the caBundle trusts kept)."""
    data = (secret or {}).get("data") or {}
    meta = (secret or {}).get("metadata") or {}
    annotations = meta.get("annotations") or {}
    try:
        raw = {k: base64.b64decode(v) for k, v in data.items() if k in ("ca.crt", "ca.key", "tls.crt", "tls.key")}
        bundle = _certificates(raw["ca.crt"])
        leaf = x509.load_pem_x509_certificate(raw["tls.crt"])
        if serialization.load_pem_private_key(raw["tls.key"], password=None).public_key() != leaf.public_key():
            return None
        return Material(
            leaf=leaf, leaf_pem=raw["tls.crt"], key_pem=raw["tls.key"], bundle=bundle,
            signer=_signer(bundle, raw.get("ca.key")), ca_key_pem=raw.get("ca.key"), hosts=_names(leaf),
            stamp=_stamp(annotations.get(BUNDLE_STAMP_ANNOTATION)),
        )  # fmt: skip
    except (KeyError, ValueError, TypeError, UnsupportedAlgorithm):
        return None


def _names(leaf: x509.Certificate) -> tuple[str, ...]:
    """The hosts a serving certificate is good for: its DNS names and IP addresses."""
    try:
        sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return ()
    return (*sans.get_values_for_type(x509.DNSName), *(str(ip) for ip in sans.get_values_for_type(x509.IPAddress)))


def fingerprint(certificate: x509.Certificate) -> str:
    return certificate.fingerprint(hashes.SHA256()).hex()


def issuer_in(bundle: tuple[x509.Certificate, ...], leaf: x509.Certificate) -> x509.Certificate | None:
    """The bundle's CA that issued ``leaf``, if any."""
    for ca in bundle:
        try:
            leaf.verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return ca
    return None


# What the Secret needs next: one step per pass, each written before the next is judged.
@dataclass(frozen=True)
class Keep:
    pass


@dataclass(frozen=True)
class Fresh:
    """Nothing usable: a new CA and serving certificate; ``keep`` are CAs the caBundle trusts now (a replica may
    still serve a certificate one of them issued), kept in the bundle until dropped as any old CA is."""

    keep: tuple[x509.Certificate, ...]


@dataclass(frozen=True)
class NewCA:
    """The signer ends within ``RENEW_CA_BEFORE`` (or no CA key is kept): a new CA joins the bundle and issues."""

    why: str


@dataclass(frozen=True)
class NewLeaf:
    """A serving certificate from the signer: for ``hosts`` and, with ``keep_names``, the names it had too."""

    why: str
    keep_names: bool = False


@dataclass(frozen=True)
class Drop:
    """CAs that no longer issue the served certificate leave the bundle."""

    cas: tuple[x509.Certificate, ...]


Step = Keep | Fresh | NewCA | NewLeaf | Drop


def next_step(material: Material | None, hosts: tuple[str, ...], now: datetime.datetime,
              configured: tuple[x509.Certificate, ...] | None) -> Step:  # fmt: skip
    """What to write next, given the Secret's material, the configured hosts, and the CAs the caBundle has now
    (``None``: the caBundle is not this controller's to keep)."""
    if material is None:
        return Fresh(tuple(ca for ca in configured or () if ca.not_valid_after_utc > now))
    signer = material.signer
    if signer is None:
        return NewCA("no CA key kept")
    if signer.not_valid_after_utc - now < RENEW_CA_BEFORE:
        return NewCA(f"the CA expires {signer.not_valid_after_utc:%Y-%m-%d}")
    leaf = material.leaf
    if missing := [h for h in hosts if canonical(h) not in {canonical(n) for n in material.hosts}]:
        # Added beside the names it has (render): two replicas wanting different hosts during a rollout are both
        # served by one certificate, instead of each rewriting it for its own; a name no longer wanted goes at the
        # next renewal.
        return NewLeaf(f"hosts added: {','.join(missing)}", keep_names=True)
    if issuer_in((signer,), leaf) is None:
        return NewLeaf("the serving certificate is not the CA's")
    if leaf.not_valid_after_utc - now < RENEW_LEAF_BEFORE:
        return NewLeaf(f"the serving certificate expires {leaf.not_valid_after_utc:%Y-%m-%d}")
    # Old CAs go once the serving certificate has been out long enough for every replica to serve it, and the
    # caBundle trusts its CA (a caBundle not written yet keeps replicas on the old one: it must stay trusted).
    settled = now - (leaf.not_valid_before_utc + _BACKDATE) >= DROP_AFTER and (
        configured is None or signer in configured
    )
    old = tuple(ca for ca in material.bundle if ca != signer and (settled or ca.not_valid_after_utc <= now))
    return Drop(old) if old else Keep()


def may_serve(candidate: x509.Certificate, served: x509.Certificate | None,
              trusted: dict[x509.Certificate, float] | None, now: float) -> bool:  # fmt: skip
    """Whether a replica serving ``served`` may serve ``candidate`` from now on.

    ``trusted``: each CA in the caBundle, with the (monotonic) time it was first seen there; ``None`` when the
    caBundle is not this controller's to keep. A certificate whose CA the API servers do not trust yet would have
    every call refused; one they already refuse loses nothing by changing.
    """
    if trusted is None or served is None or candidate == served:
        return True
    seen = _trusted_since(trusted, candidate)
    return (seen is not None and now - seen >= SETTLE) or _trusted_since(trusted, served) is None


def _trusted_since(trusted: dict[x509.Certificate, float], leaf: x509.Certificate) -> float | None:
    ca = issuer_in(tuple(trusted), leaf)
    return None if ca is None else trusted[ca]


def canonical(host: str) -> str:
    """A host as a certificate names it: an IP address in its one written form (``::1``, not ``0:0:...:1``), a DNS
    name in lower case."""
    try:
        return str(ipaddress.ip_address(host))
    except ValueError:
        return host.lower()


def _union(names: tuple[str, ...], hosts: tuple[str, ...]) -> tuple[str, ...]:
    """``names`` then each of ``hosts`` it lacks, once each, compared as a certificate compares them."""
    seen: set[str] = set()
    found = []
    for host in (*names, *hosts):
        if canonical(host) not in seen:
            seen.add(canonical(host))
            found.append(host)
    return tuple(found)


def _is_ip(host: str) -> bool:
    try:
        ipaddress.ip_address(host)
    except ValueError:
        return False
    return True


def _new_ca(now: datetime.datetime) -> CertificateAuthority:
    return CertificateAuthority(f"multikueue-webhook-ca@{int(now.timestamp())}", validity=CA_VALIDITY, now=now)


def render(step: Fresh | NewCA | NewLeaf | Drop, material: Material | None, hosts: tuple[str, ...],
           now: datetime.datetime, *, configured_stamp: int = 0) -> tuple[dict[str, str], dict[str, str]]:  # fmt: skip
    """The Secret's ``data`` and annotations after ``step`` (a new key for each certificate made).

    A bundle that changes gets a stamp above both the Secret's and the caBundle's (``configured_stamp``): a Secret
    made anew by a replica whose clock is behind the last writer's would otherwise never be written to the caBundle.
    """
    stamp = max((material.stamp if material else 0) + 1, configured_stamp + 1, int(now.timestamp() * 1000))
    hosts = _hosts_after(step, material, hosts)
    if material is not None and isinstance(step, Drop):
        bundle = tuple(ca for ca in material.bundle if ca not in step.cas)
        return _data(bundle, material.ca_key_pem, material.leaf_pem, material.key_pem), _annotations(hosts, stamp)
    if material is not None and material.signer is not None and material.ca_key_pem and isinstance(step, NewLeaf):
        signer = material.signer.public_bytes(serialization.Encoding.PEM)
        pair = _issue(CertificateAuthority.load(signer, material.ca_key_pem), hosts, now)
        data = _data(material.bundle, material.ca_key_pem, pair.cert_pem, pair.key_pem)
        return data, _annotations(hosts, material.stamp)
    ca = _new_ca(now)
    kept = step.keep if isinstance(step, Fresh) else (material.bundle if material else ())
    bundle = (*(c for c in kept if c.not_valid_after_utc > now), x509.load_pem_x509_certificate(ca.cert_pem))
    pair = _issue(ca, hosts, now)
    return _data(bundle, ca.key_pem, pair.cert_pem, pair.key_pem), _annotations(hosts, stamp)


def _hosts_after(step: Fresh | NewCA | NewLeaf | Drop, material: Material | None, hosts: tuple[str, ...]
                 ) -> tuple[str, ...]:  # fmt: skip
    """The names the Secret's certificate has after ``step``: the configured hosts (each once, however written), or,
    where the certificate's names are kept, those and any host they lack, in the configured order when that is all."""
    wanted = _union((), hosts)
    if material is None or not (isinstance(step, Drop) or (isinstance(step, NewLeaf) and step.keep_names)):
        return wanted
    kept = _union(material.hosts, wanted)
    return wanted if {canonical(h) for h in kept} == {canonical(h) for h in wanted} else kept


def _issue(ca: CertificateAuthority, hosts: tuple[str, ...], now: datetime.datetime) -> KeyPair:
    ips = tuple(h for h in hosts if _is_ip(h))
    dns = tuple(h for h in hosts if h not in ips)
    return ca.issue(dns[0] if dns else ips[0], dns_names=dns, ip_addresses=ips, server=True, validity=LEAF_VALIDITY,
                    now=now)  # fmt: skip


def _data(bundle: tuple[x509.Certificate, ...], ca_key: bytes | None, leaf: bytes, key: bytes) -> dict[str, str]:
    pem = b"".join(ca.public_bytes(serialization.Encoding.PEM) for ca in bundle)
    data = {"ca.crt": pem, "tls.crt": leaf, "tls.key": key} | ({"ca.key": ca_key} if ca_key else {})
    return {k: base64.b64encode(v).decode() for k, v in data.items()}


def _annotations(hosts: tuple[str, ...], stamp: int) -> dict[str, str]:
    # hosts: for an operator to read, and what an earlier release compares (in the configured order) before using
    # the Secret, so that a rollback to it keeps this certificate rather than making a CA of its own.
    return {HOSTS_ANNOTATION: ",".join(hosts), BUNDLE_STAMP_ANNOTATION: str(stamp)}


def bundle_pem(material: Material) -> bytes:
    return b"".join(ca.public_bytes(serialization.Encoding.PEM) for ca in material.bundle)
