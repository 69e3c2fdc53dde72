"""The admission webhook's certificates over its life, against a real kube-apiserver that calls it (failurePolicy
Fail) for every create of a labelled ConfigMap: a generated CA replaced under a stream of creates by two replicas
behind one address, the caBundle kept through a re-applied and a replaced webhook configuration, and a renewed
``certDir`` read again before the old certificate expires. No create may be refused."""

from __future__ import annotations

import base64
import datetime
import ssl
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from anyio.streams.tls import TLSAttribute
from cryptography import x509
from kubernetes_asyncio import client as k8s_client

from multikueue.config import Webhook
from multikueue.integration import certificates, generated_certificate, webhook
from multikueue.integration.certificates import Fresh, render
from multikueue.integration.webhook import WebhookServer
from multikueue.kube.client import ApiClient
from multikueue.metrics import Metrics
from multikueue.pki import CertificateAuthority
from multikueue_testbed.balancer import Balancer
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.testbed import free_port
from multikueue_testbed.waiting import eventually
from tests.integration.webhooks import (
    SECRET,
    answered,
    configuration,
    configured_cas,
    events_about,
    secret_cas,
    serving_replica,
    streaming,
    webhook_configuration,
)

HOSTS = ("127.0.0.1",)


def _issued_by(ca: x509.Certificate) -> Callable[[WebhookServer], bool]:
    return lambda server: server.served is not None and certificates.issuer_in((ca,), server.served) is not None


async def test_a_generated_ca_is_replaced_under_a_stream_of_creates_through_three_replicas_and_none_is_refused(
    testbed: Any, namespace: str, manager_api: ApiClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Two replicas of this release and one of an earlier release (it serves the certificate it started with and
    never reloads it) behind one address: the new CA joins the bundle, this release's replicas switch, and the old CA
    stays while the earlier replica still serves its certificate; once it is gone, the old CA goes."""
    # The Secret a replica wrote two days ago; the caBundle trusts its CA.
    two_days_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(days=2)
    data, annotations = render(Fresh(()), None, HOSTS, two_days_ago)
    secret = {"metadata": {"name": SECRET, "annotations": annotations}, "type": "kubernetes.io/tls", "data": data}
    await k8s_client.CoreV1Api(k8s(manager_api)).create_namespaced_secret(namespace, raw_body(secret))
    old_ca = (await secret_cas(manager_api, namespace))[0]
    (tmp_path / "tls.crt").write_bytes(base64.b64decode(data["tls.crt"]))
    (tmp_path / "tls.key").write_bytes(base64.b64decode(data["tls.key"]))
    name = f"multikueue-{namespace}"
    options = Webhook(host="127.0.0.1", port=0, hosts=HOSTS, configuration_name=name)
    earlier = Webhook(host="127.0.0.1", port=0, cert_dir=str(tmp_path), configuration_name=None)
    monkeypatch.setattr(webhook, "RECHECK", 0.5)
    monkeypatch.setattr(generated_certificate, "RECHECK", 0.5)
    monkeypatch.setattr(generated_certificate, "PROBE_INTERVAL", 1.0)
    trusted = base64.b64decode(data["ca.crt"])
    async with (
        Balancer() as balancer,
        webhook_configuration(
            manager_api, configuration(name, namespace, f"https://127.0.0.1:{balancer.port}/mutate", trusted)
        ) as admission,
        serving_replica(manager_api, namespace, options) as a,
        serving_replica(manager_api, namespace, options) as b,
        serving_replica(manager_api, namespace, earlier) as old,
    ):
        for backend, replica in (("a", a), ("b", b), ("old", old)):
            assert replica.port is not None
            balancer.add(backend, replica.port)
        async with streaming(manager_api, namespace) as stream:
            # The CA now counts as near its end (a day inside the roll-over window): it is replaced.
            near_its_end = certificates.CA_VALIDITY - datetime.timedelta(days=1)
            monkeypatch.setattr(certificates, "RENEW_CA_BEFORE", near_its_end)
            monkeypatch.setattr(certificates, "DROP_AFTER", datetime.timedelta(seconds=3))
            cas = await eventually(lambda: secret_cas(manager_api, namespace), until=lambda c: len(c) == 2,
                                   what="a new CA joins the Secret's bundle")  # fmt: skip
            new_ca = cas[1]
            assert cas[0] == old_ca
            await eventually(lambda: configured_cas(admission, name), until=lambda c: c == cas,
                             what="the caBundle carries both CAs")  # fmt: skip
            for replica in (a, b):
                await _serving(replica, new_ca)
            # Past DROP_AFTER, the drop is put off while the earlier replica answers with the old CA's certificate.
            await eventually(lambda: _kept(a, b), until=lambda n: n >= 3, timeout=30,
                             what="the old CA kept for the earlier replica, three times over")  # fmt: skip
            assert await configured_cas(admission, name) == cas
            assert await secret_cas(manager_api, namespace) == cas
            balancer.remove("old")  # its rollout done: the earlier release's Pod leaves the Service
            await eventually(lambda: configured_cas(admission, name), until=lambda c: c == [new_ca],
                             timeout=60, what="the old CA leaves the caBundle")  # fmt: skip
            settled = await answered(stream)
            await eventually(lambda: answered(stream), until=lambda n: n >= settled + 20,
                             what="creates after the old CA is gone")  # fmt: skip
    assert stream.refused == [], f"{len(stream.refused)} of {await answered(stream)} refused: {stream.refused[:3]}"
    assert stream.answered >= 50
    for backend in ("a", "b", "old"):
        assert balancer.connections[backend] > 0, f"{backend} answered"


async def _kept(*replicas: WebhookServer) -> int:
    return sum(r.old_ca_kept for r in replicas)


async def _now(server: WebhookServer) -> WebhookServer:
    return server


async def _serving(replica: WebhookServer, ca: x509.Certificate) -> None:
    await eventually(lambda: _now(replica), until=_issued_by(ca), timeout=30, what="the new CA's certificate served")


async def test_the_ca_bundle_survives_a_re_applied_and_a_replaced_configuration_and_a_missing_one_is_said(
    testbed: Any, namespace: str, manager_api: ApiClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    from multikueue.kube import events

    name = f"multikueue-{namespace}"
    core: Any = k8s_client.CoreV1Api(k8s(manager_api))
    config_map = await core.create_namespaced_config_map(namespace, raw_body({"metadata": {"name": "config"}}))
    told = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": config_map.to_dict()["metadata"]}
    told["metadata"]["uid"], told["metadata"]["namespace"] = config_map.metadata.uid, namespace

    async def warn(reason: str, message: str) -> None:  # what Process does: an Event on the configuration ConfigMap
        await events.record(manager_api, told, type_="Warning", reason=reason, message=message, component="test")

    monkeypatch.setattr(webhook, "RECHECK", 0.5)
    monkeypatch.setattr(generated_certificate, "RECHECK", 0.5)
    options = Webhook(host="127.0.0.1", port=0, hosts=HOSTS, configuration_name=name)
    metrics = Metrics()
    async with Balancer() as balancer:
        url = f"https://127.0.0.1:{balancer.port}/mutate"
        async with (
            webhook_configuration(manager_api, configuration(name, namespace, url, None)) as admission,
            serving_replica(manager_api, namespace, options, metrics, warn) as replica,
        ):
            assert replica.port is not None
            balancer.add("a", replica.port)
            ca = await secret_cas(manager_api, namespace)
            await eventually(lambda: configured_cas(admission, name), until=lambda c: c == ca,
                             what="the caBundle written")  # fmt: skip
            await eventually(lambda: _now(replica), until=lambda r: r.ready, what="ready once trusted")
            async with streaming(manager_api, namespace) as stream:
                # kubectl apply (a three-way merge) of the shipped manifest, which has no caBundle.
                patch = {"webhooks": [{"name": "hold.multikueue.x-k8s.io", "timeoutSeconds": 4}]}
                await admission.patch_mutating_webhook_configuration(name, patch)
                before = await answered(stream)
                await eventually(lambda: answered(stream), until=lambda n: n >= before + 20,
                                 what="creates after the apply")  # fmt: skip
            assert stream.refused == [], stream.refused[:3]
            assert await _gauge(metrics, name) == 1.0

            # Replaced whole (a GitOps sync with Replace=true, kubectl replace): the caBundle comes back.
            current = await admission.read_mutating_webhook_configuration(name)
            replaced = configuration(name, namespace, url, None)
            replaced["metadata"]["resourceVersion"] = current.metadata.resource_version
            await admission.replace_mutating_webhook_configuration(name, raw_body(replaced))
            await eventually(lambda: configured_cas(admission, name), until=lambda c: c == ca,
                             what="the caBundle written again")  # fmt: skip
            await eventually(lambda: _gauge(metrics, name), until=lambda v: v == 1.0, what="in sync again")

            # Gone: said on the configuration's ConfigMap and in the gauge (the alert's), not only logged.
            await admission.delete_mutating_webhook_configuration(name)
            await eventually(lambda: _gauge(metrics, name), until=lambda v: v == 0.0, what="out of sync")
            found = await eventually(lambda: events_about(manager_api, namespace, "config"),
                                     until=lambda es: any(e.reason == "WebhookCABundleNotWritten" for e in es),
                                     what="a Warning Event on the ConfigMap")  # fmt: skip
            event = next(e for e in found if e.reason == "WebhookCABundleNotWritten")
            assert event.type == "Warning"
            assert name in event.message
            await admission.create_mutating_webhook_configuration(
                raw_body(configuration(name, namespace, url, None))
            )  # for the context's clean-up, and to see it written once more
            await eventually(lambda: configured_cas(admission, name), until=lambda c: c == ca,
                             what="the caBundle written into the new configuration")  # fmt: skip


async def _gauge(metrics: Metrics, configuration: str) -> float | None:
    value = metrics.registry.get_sample_value("multikueue_webhook_ca_bundle_in_sync", {"configuration": configuration})
    return value


async def _expiry(metrics: Metrics) -> float | None:
    name = "multikueue_webhook_certificate_expiry_timestamp_seconds"
    return metrics.registry.get_sample_value(name, {"source": "certDir"})


def _write_pair(directory: Path, ca: CertificateAuthority, validity: datetime.timedelta) -> x509.Certificate:
    """As the kubelet updates a Secret volume: the new files appear at once (a rename), never half-written."""
    pair = ca.issue("127.0.0.1", ip_addresses=HOSTS, server=True, validity=validity)
    for stem, content in (("tls.key", pair.key_pem), ("tls.crt", pair.cert_pem)):
        scratch = directory / f".{stem}.{uuid.uuid4().hex}"
        scratch.write_bytes(content)
        scratch.replace(directory / stem)
    return x509.load_pem_x509_certificate(pair.cert_pem)


async def _served_certificate(port: int, ca_pem: bytes) -> x509.Certificate:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    stream = await anyio.connect_tcp("127.0.0.1", port, ssl_context=context, tls_standard_compatible=False)
    async with stream:
        der = stream.extra(TLSAttribute.peer_certificate_binary)
    assert der is not None
    return x509.load_der_x509_certificate(der)


async def test_a_renewed_cert_dir_is_served_before_the_old_certificate_expires(
    testbed: Any, namespace: str, manager_api: ApiClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from multikueue import tls

    # Every handshake looks at the files; the keeper only every 3 s: the renewal is loaded by a handshake first.
    monkeypatch.setattr(tls, "CHECK_INTERVAL", 0.0)
    monkeypatch.setattr(webhook, "RECHECK", 3.0)
    ca = CertificateAuthority("cert-manager-like-ca")
    first = _write_pair(tmp_path, ca, datetime.timedelta(seconds=20))  # expires during the stream
    name = f"multikueue-{namespace}"
    options = Webhook(host="127.0.0.1", port=0, cert_dir=str(tmp_path), configuration_name=None)
    metrics = Metrics()
    async with serving_replica(manager_api, namespace, options, metrics) as replica:
        assert replica.port is not None
        url = f"https://127.0.0.1:{replica.port}/mutate"
        async with (
            webhook_configuration(manager_api, configuration(name, namespace, url, ca.cert_pem)),
            streaming(manager_api, namespace) as stream,
        ):
            assert await _served_certificate(replica.port, ca.cert_pem) == first
            second = _write_pair(tmp_path, ca, datetime.timedelta(days=90))  # cert-manager renews it
            await eventually(lambda: _served_certificate(replica.port or 0, ca.cert_pem),
                             until=lambda c: c == second, what="the renewed certificate served")  # fmt: skip
            # Loaded by that handshake, before the keeper looked: the gauge still follows what is served.
            await eventually(lambda: _expiry(metrics), until=lambda t: t == second.not_valid_after_utc.timestamp(),
                             what="the expiry gauge of the renewed certificate")  # fmt: skip
            # Past the first certificate's end: creates still pass (the API servers reuse no old connection
            # for this: a TLS session is checked when it is made, and the renewed one is what new ones get).
            expiry = first.not_valid_after_utc
            await eventually(lambda: answered(stream), until=lambda _: datetime.datetime.now(datetime.UTC)
                             > expiry + datetime.timedelta(seconds=5), timeout=40,
                             what="the stream past the first certificate's end")  # fmt: skip
    assert stream.refused == [], f"{len(stream.refused)} refused: {stream.refused[:3]}"
    assert stream.answered >= 50


async def test_every_endpoint_of_the_webhooks_service_is_asked_which_certificate_it_serves(
    testbed: Any, namespace: str, manager_api: ApiClient, tmp_path: Path
) -> None:
    """What decides whether an old CA may leave: the Service's endpoints (ready or not, every slice, the port its
    webhook port names) as the API server lists them, each asked over TLS; one that does not answer means "cannot
    tell". (An EndpointSlice may not name a loopback address: the addresses are read from the real API server, and
    the handshakes made to replicas on 127.0.0.1.)"""
    from multikueue.integration import webhook_probe

    core: Any = k8s_client.CoreV1Api(k8s(manager_api))
    discovery: Any = k8s_client.DiscoveryV1Api(k8s(manager_api))
    await core.create_namespaced_service(namespace, raw_body({
        "metadata": {"name": "multikueue-webhook"},
        "spec": {"ports": [{"name": "metrics", "port": 8443}, {"name": "webhook", "port": 443, "targetPort": 9443}]},
    }))  # fmt: skip
    for index, (address, ready) in enumerate((("192.0.2.10", True), ("192.0.2.11", False))):
        await discovery.create_namespaced_endpoint_slice(namespace, raw_body({
            "metadata": {"name": f"multikueue-webhook-{index}",
                         "labels": {"kubernetes.io/service-name": "multikueue-webhook"}},
            "addressType": "IPv4",
            "ports": [{"name": "metrics", "port": 8443}, {"name": "webhook", "port": 9443}],
            "endpoints": [{"addresses": [address], "conditions": {"ready": ready}}],
        }))  # fmt: skip
    configuration = {"webhooks": [{"name": "hold", "clientConfig": {
        "service": {"name": "multikueue-webhook", "namespace": namespace, "path": "/mutate"}}}]}  # fmt: skip
    assert sorted(await webhook_probe.addresses(manager_api, configuration)) == [("192.0.2.10", 9443),
                                                                                 ("192.0.2.11", 9443)]  # fmt: skip
    empty = {"webhooks": [{"name": "hold", "clientConfig": {"service": {"name": "none", "namespace": namespace}}}]}
    await core.create_namespaced_service(namespace, raw_body({"metadata": {"name": "none"},
                                                              "spec": {"ports": [{"port": 443}]}}))  # fmt: skip
    assert await webhook_probe.served(manager_api, empty) is None, "no endpoint at all tells nothing"
    url = {"webhooks": [{"name": "hold", "clientConfig": {"url": "https://127.0.0.1:8443/mutate"}}]}
    assert await webhook_probe.addresses(manager_api, url) == [("127.0.0.1", 8443)] * webhook_probe.PROBES_PER_URL

    ca = CertificateAuthority("probe-ca")
    first_dir, second_dir = tmp_path / "first", tmp_path / "second"
    first_dir.mkdir()
    second_dir.mkdir()
    first = _write_pair(first_dir, ca, datetime.timedelta(days=1))
    second = _write_pair(second_dir, ca, datetime.timedelta(days=1))
    replicas = [
        Webhook(host="127.0.0.1", port=0, cert_dir=str(d), configuration_name=None) for d in (first_dir, second_dir)
    ]
    async with (
        serving_replica(manager_api, namespace, replicas[0]) as one,
        serving_replica(manager_api, namespace, replicas[1]) as two,
    ):
        assert one.port is not None
        assert two.port is not None
        found = await webhook_probe.certificates_at([("127.0.0.1", one.port), ("127.0.0.1", two.port)])
        assert found == [first, second]
        silent = [("127.0.0.1", one.port), ("127.0.0.1", free_port())]
        assert await webhook_probe.certificates_at(silent) is None, "one silent endpoint: cannot tell"


@pytest.mark.parametrize(
    "verbs",
    [("get", "update"), ("get", "list", "watch", "update")],
    ids=["an earlier release's Role", "config/integration's Role"],
)
async def test_a_replica_that_may_not_watch_its_secret_says_so_and_the_shipped_role_lets_it_watch(
    testbed: Any, namespace: str, manager_api: ApiClient, monkeypatch: pytest.MonkeyPatch, verbs: tuple[str, ...]
) -> None:
    """An identity that may read and write the Secret but not list or watch it: the certificate is served, and the
    renewal it cannot follow is said, not only logged. With the shipped rule (list and watch by name) it watches."""
    from multikueue.kube.client import api_client_from_kubeconfig
    from multikueue_testbed.accounts import mint_service_account_kubeconfig

    monkeypatch.setattr(generated_certificate, "RECHECK", 0.2)
    monkeypatch.setattr(generated_certificate, "UNSYNCED_GRACE", 1.0)
    rbac: Any = k8s_client.RbacAuthorizationV1Api(k8s(manager_api))
    rules = [
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["secrets"], "resourceNames": [SECRET], "verbs": list(verbs)},
    ]
    await rbac.create_namespaced_role(namespace, raw_body({"metadata": {"name": "webhook-cert"}, "rules": rules}))
    role_ref = {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "webhook-cert"}
    binding = {"metadata": {"name": "webhook-cert"}, "roleRef": role_ref,
               "subjects": [{"kind": "ServiceAccount", "name": "replica", "namespace": namespace}]}  # fmt: skip
    await rbac.create_namespaced_role_binding(namespace, raw_body(binding))
    kubeconfig = await mint_service_account_kubeconfig(manager_api, testbed.cluster("manager"), namespace=namespace,
                                                       name="replica")  # fmt: skip
    told: list[tuple[str, str]] = []

    async def warn(reason: str, message: str) -> None:  # what Process does with it: an Event on the ConfigMap
        told.append((reason, message))

    options = Webhook(host="127.0.0.1", port=0, hosts=HOSTS, configuration_name=None)
    async with (
        await api_client_from_kubeconfig(kubeconfig) as restricted,
        serving_replica(restricted, namespace, options, warn=warn) as replica,
    ):
        assert replica.served is not None, "the certificate is had (get, create) and served"
        if "watch" in verbs:
            await eventually(lambda: _now(replica), until=lambda r: r.watching, what="the Secret watched by name")
            assert told == []
            return
        said = await eventually(lambda: _told(told), until=lambda t: any(r == generated_certificate.NOT_WATCHED
                                                                         for r, _ in t),
                                timeout=30, what="the watch it may not make, said")  # fmt: skip
        assert not replica.watching
    message = next(m for r, m in said if r == generated_certificate.NOT_WATCHED)
    assert f"Secret {namespace}/{SECRET}" in message
    assert "forbidden" in message.lower()
    assert "\n" not in message


async def _told(told: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return list(told)
