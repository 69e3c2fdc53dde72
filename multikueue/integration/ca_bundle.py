"""The webhook configuration's caBundle, kept equal to the generated Secret's ``ca.crt``.

Watched, not written once: a ``kubectl replace``, a GitOps sync that recreates the MutatingWebhookConfiguration, or
one failed write at start would otherwise leave the API servers trusting nothing this controller serves, and every
create of a configured kind refused. Every replica keeps it; each write carries the Secret's bundle stamp and the
resourceVersion read, so a replica whose view of the Secret is older never writes its bundle over a newer one.
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass
from typing import Any

from cryptography import x509

from multikueue.integration.certificates import BUNDLE_STAMP_ANNOTATION, Material, bundle_pem

Object = dict[str, Any]


def configured_cas(configuration: Object | None) -> tuple[x509.Certificate, ...]:
    """The CAs every webhook of the configuration trusts (what the API servers verify a replica with)."""
    if configuration is None:
        return ()
    found: set[x509.Certificate] | None = None
    for webhook in configuration.get("webhooks") or []:
        text = (webhook.get("clientConfig") or {}).get("caBundle") or ""
        try:
            cas = set(x509.load_pem_x509_certificates(base64.b64decode(text))) if text else set()
        except (ValueError, binascii.Error):
            cas = set()
        found = cas if found is None else found & cas
    return tuple(sorted(found or (), key=lambda c: c.not_valid_before_utc))


def stamp_of(configuration: Object) -> int:
    annotations = (configuration.get("metadata") or {}).get("annotations") or {}
    try:
        return int(annotations.get(BUNDLE_STAMP_ANNOTATION, "0"))
    except ValueError:
        return 0


@dataclass(frozen=True)
class Verdict:
    in_sync: bool  # every webhook's caBundle is the Secret's bundle
    write: bool  # this replica should write it (its view of the Secret is not older than the one written)


def judge(configuration: Object, material: Material) -> Verdict:
    """Whether the configuration carries the Secret's bundle, and whether to write it."""
    wanted = wanted_bundle(material)
    webhooks = configuration.get("webhooks") or []  # none: nothing to keep, nothing out of sync
    in_sync = all((w.get("clientConfig") or {}).get("caBundle") == wanted for w in webhooks)
    return Verdict(in_sync, not in_sync and stamp_of(configuration) <= material.stamp)


def wanted_bundle(material: Material) -> str:
    return base64.b64encode(bundle_pem(material)).decode()
