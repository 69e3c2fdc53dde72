"""The generated webhook certificate's steps (what the shared Secret holds next) and when a replica may serve a new
one: renewals keep the CA, a CA is replaced in steps no replica can skip, and no step leaves a served certificate
untrusted."""

from __future__ import annotations

import base64
import datetime
from typing import Any

import pytest
from cryptography import x509

from multikueue.integration import ca_bundle, certificates
from multikueue.integration.certificates import (
    DROP_AFTER,
    RENEW_CA_BEFORE,
    RENEW_LEAF_BEFORE,
    SETTLE,
    Drop,
    Fresh,
    Keep,
    Material,
    NewCA,
    NewLeaf,
    may_serve,
    next_step,
    read,
    render,
)

HOSTS = ("multikueue-webhook.multikueue-system.svc",)
NOW = datetime.datetime.now(datetime.UTC)
DAY = datetime.timedelta(days=1)


def _secret(data: dict[str, str], annotations: dict[str, str]) -> dict[str, Any]:
    return {"metadata": {"name": "s", "annotations": annotations, "resourceVersion": "1"}, "data": data}


def _made(step: Any, material: Material | None = None, hosts: tuple[str, ...] = HOSTS, now: datetime.datetime = NOW
          ) -> Material:  # fmt: skip
    found = read(_secret(*render(step, material, hosts, now)))
    assert found is not None
    return found


@pytest.fixture
def fresh() -> Material:
    return _made(Fresh(()))


def test_a_fresh_secret_holds_one_ca_its_key_and_a_serving_certificate_it_issued(fresh: Material) -> None:
    assert len(fresh.bundle) == 1
    assert fresh.signer == fresh.bundle[0]
    assert certificates.issuer_in(fresh.bundle, fresh.leaf) == fresh.signer
    assert fresh.hosts == HOSTS
    assert next_step(fresh, HOSTS, NOW, fresh.bundle) == Keep()


def test_nothing_usable_is_made_anew_keeping_the_cas_the_ca_bundle_trusts_now(fresh: Material) -> None:
    step = next_step(None, HOSTS, NOW, fresh.bundle)
    assert step == Fresh(fresh.bundle)
    made = _made(step)
    assert fresh.bundle[0] in made.bundle, "a replica still serving the old certificate stays trusted"
    assert made.signer != fresh.signer
    assert read(_secret({"tls.crt": "bm90IGEgY2VydA=="}, {})) is None, "a Secret that does not parse is made anew"


@pytest.mark.parametrize(
    ("hosts", "when", "why"),
    [
        (("other.svc",), NOW, "hosts added"),
        (HOSTS, NOW + certificates.LEAF_VALIDITY - RENEW_LEAF_BEFORE + DAY, "the serving certificate expires"),
    ],
)
def test_a_serving_certificate_is_renewed_by_the_same_ca(
    fresh: Material, hosts: tuple[str, ...], when: datetime.datetime, why: str
) -> None:
    step = next_step(fresh, hosts, when, fresh.bundle)
    assert isinstance(step, NewLeaf)
    assert step.why.startswith(why)
    renewed = _made(step, fresh, hosts, when)
    assert renewed.bundle == fresh.bundle, "the caBundle does not change: nothing to wait for"
    assert renewed.stamp == fresh.stamp
    assert renewed.leaf != fresh.leaf
    assert certificates.issuer_in(renewed.bundle, renewed.leaf) == fresh.signer
    assert next_step(renewed, hosts, when, fresh.bundle) == Keep()


def test_replicas_wanting_different_hosts_share_one_certificate_instead_of_rewriting_it_in_turn(
    fresh: Material,
) -> None:
    """A rolling upgrade that changes ``hosts``: the old replica and the new one both keep what they need."""
    new_hosts = ("multikueue-webhook.other-namespace.svc",)
    step = next_step(fresh, new_hosts, NOW, fresh.bundle)
    assert step == NewLeaf(f"hosts added: {new_hosts[0]}", keep_names=True)
    both = _made(step, fresh, new_hosts)
    assert both.hosts == (*HOSTS, *new_hosts)
    assert next_step(both, HOSTS, NOW, fresh.bundle) == Keep(), "the old replica is served by it too"
    assert next_step(both, new_hosts, NOW, fresh.bundle) == Keep()
    # At its renewal the certificate is made for the hosts wanted then, and the old name goes.
    late = NOW + certificates.LEAF_VALIDITY - RENEW_LEAF_BEFORE + DAY
    renewed = _made(next_step(both, new_hosts, late, fresh.bundle), both, new_hosts, late)
    assert renewed.hosts == new_hosts


def test_a_secret_whose_key_is_not_its_certificates_is_made_anew_and_a_garbage_stamp_costs_nothing(
    fresh: Material,
) -> None:
    data, annotations = render(Fresh(()), None, HOSTS, NOW)
    other, _ = render(Fresh(()), None, HOSTS, NOW)
    assert read(_secret(data | {"tls.key": other["tls.key"]}, annotations)) is None
    garbage = read(_secret(data, annotations | {certificates.BUNDLE_STAMP_ANNOTATION: "12.5"}))
    assert garbage is not None, "the CA and its key are kept"
    assert garbage.stamp == 0
    assert next_step(garbage, HOSTS, NOW, garbage.bundle) == Keep()


def test_a_bundle_made_anew_is_stamped_above_the_one_the_ca_bundle_carries_whatever_this_clock_says() -> None:
    """A Secret deleted and made again by a replica whose clock is behind the last writer's."""
    written_ahead = int((NOW + datetime.timedelta(minutes=10)).timestamp() * 1000)
    made = _made_with(Fresh(()), configured_stamp=written_ahead)
    assert made.stamp > written_ahead


def _made_with(step: Any, *, configured_stamp: int) -> Material:
    found = read(_secret(*render(step, None, HOSTS, NOW, configured_stamp=configured_stamp)))
    assert found is not None
    return found


def test_a_ca_near_its_end_is_joined_by_a_new_one_then_dropped_once_the_new_certificate_is_out(fresh: Material) -> None:
    late = fresh.signer.not_valid_after_utc - RENEW_CA_BEFORE + DAY  # type: ignore[union-attr]
    step = next_step(fresh, HOSTS, late, fresh.bundle)
    assert isinstance(step, NewCA)
    rolled = _made(step, fresh, now=late)
    assert rolled.bundle[0] == fresh.signer, "old and new CA both trusted"
    assert len(rolled.bundle) == 2
    assert rolled.signer == rolled.bundle[1]
    assert certificates.issuer_in((rolled.bundle[1],), rolled.leaf) is not None
    assert rolled.stamp > fresh.stamp, "a newer bundle carries a newer stamp"
    # The old CA stays while the caBundle has not taken the new one, however long that takes...
    much_later = late + DROP_AFTER * 4
    assert next_step(rolled, HOSTS, much_later, fresh.bundle) == Keep()
    # ...and until the new serving certificate has been out DROP_AFTER.
    assert next_step(rolled, HOSTS, late + DROP_AFTER / 2, rolled.bundle) == Keep()
    assert next_step(rolled, HOSTS, much_later, rolled.bundle) == Drop((fresh.bundle[0],))
    dropped = _made(Drop((fresh.bundle[0],)), rolled, now=much_later)
    assert dropped.bundle == (rolled.signer,)
    assert dropped.leaf == rolled.leaf
    assert dropped.stamp > rolled.stamp


def test_an_older_secret_without_a_ca_key_gets_a_new_ca_beside_its_own(fresh: Material) -> None:
    data, annotations = render(Fresh(()), None, HOSTS, NOW)
    del data["ca.key"]
    legacy = read(_secret(data, annotations))
    assert legacy is not None
    assert legacy.signer is None
    step = next_step(legacy, HOSTS, NOW, legacy.bundle)
    assert step == NewCA("no CA key kept")
    assert _made(step, legacy).bundle[0] == legacy.bundle[0]


def test_a_replica_serves_a_new_certificate_only_once_the_ca_bundle_has_trusted_its_ca_for_a_moment(
    fresh: Material,
) -> None:
    late = fresh.signer.not_valid_after_utc - RENEW_CA_BEFORE + DAY  # type: ignore[union-attr]
    rolled = _made(NewCA("test"), fresh, now=late)
    old_ca, new_ca = rolled.bundle
    assert may_serve(rolled.leaf, fresh.leaf, {old_ca: 0.0}, 100.0) is False, "its CA not trusted yet"
    assert may_serve(rolled.leaf, fresh.leaf, {old_ca: 0.0, new_ca: 100.0}, 100.0) is False, "trusted just now"
    assert may_serve(rolled.leaf, fresh.leaf, {old_ca: 0.0, new_ca: 100.0}, 100.0 + SETTLE) is True
    assert may_serve(rolled.leaf, fresh.leaf, {new_ca: 100.0}, 100.0) is True, "the old one is refused already"
    assert may_serve(rolled.leaf, None, {old_ca: 0.0}, 100.0) is True, "at start there is nothing else to serve"
    assert may_serve(rolled.leaf, fresh.leaf, None, 100.0) is True, "the caBundle is not ours to keep"


def test_the_ca_bundle_is_written_only_from_a_view_not_older_than_the_one_written(fresh: Material) -> None:
    wanted = ca_bundle.wanted_bundle(fresh)

    def configuration(bundle: str, stamp: int | None) -> dict[str, Any]:
        annotations = {} if stamp is None else {certificates.BUNDLE_STAMP_ANNOTATION: str(stamp)}
        return {"metadata": {"name": "c", "resourceVersion": "5", "annotations": annotations},
                "webhooks": [{"name": "a", "clientConfig": {"caBundle": bundle}},
                             {"name": "b", "clientConfig": {"caBundle": bundle}}]}  # fmt: skip

    assert ca_bundle.judge(configuration(wanted, fresh.stamp), fresh) == ca_bundle.Verdict(True, False)
    assert ca_bundle.judge(configuration("", None), fresh) == ca_bundle.Verdict(False, True), "re-applied: written"
    assert ca_bundle.judge(configuration("", fresh.stamp + 1), fresh) == ca_bundle.Verdict(False, False)
    assert ca_bundle.configured_cas(configuration(wanted, 1)) == fresh.bundle
    assert ca_bundle.configured_cas(configuration(base64.b64encode(b"junk").decode(), 1)) == ()
    assert isinstance(x509.load_pem_x509_certificates(base64.b64decode(wanted))[0], x509.Certificate)


def test_a_host_written_in_another_form_is_the_same_host() -> None:
    """An IPv6 address in its long form, a DNS name in capitals: the certificate names them once, and no pass finds
    them missing (each would add the name again, for ever)."""
    hosts = ("Multikueue-Webhook.multikueue-system.svc", "0:0:0:0:0:0:0:1", "2001:DB8::1")
    made = _made(Fresh(()), hosts=hosts)
    assert next_step(made, hosts, NOW, made.bundle) == Keep()
    renamed = _made(NewLeaf("test", keep_names=True), made, hosts=(*hosts, "::1", "extra.svc"))
    assert len(renamed.hosts) == 4, renamed.hosts


def test_the_hosts_annotation_keeps_the_configured_order_when_the_certificate_names_just_those(fresh: Material) -> None:
    """What an earlier release compares before using the Secret: a rollback to it keeps this certificate."""
    hosts = ("10.0.0.5", "multikueue-webhook.multikueue-system.svc")
    made = _made(Fresh(()), hosts=hosts)
    _, annotations = render(Drop(()), made, hosts, NOW)
    assert annotations[certificates.HOSTS_ANNOTATION] == "10.0.0.5,multikueue-webhook.multikueue-system.svc"


def test_a_configuration_without_webhooks_is_in_sync(fresh: Material) -> None:
    assert ca_bundle.judge({"metadata": {"name": "c"}, "webhooks": []}, fresh) == ca_bundle.Verdict(True, False)
