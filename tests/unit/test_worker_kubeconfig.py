from __future__ import annotations

from typing import Any

import pytest
import yaml

from multikueue.clusters.worker_kubeconfig import (
    BAD_KUBECONFIG,
    INSECURE_KUBECONFIG,
    KubeconfigRejected,
    is_valid_host,
    validate_kubeconfig,
)


def kubeconfig(cluster: dict[str, Any] | None = None, user: dict[str, Any] | None = None) -> str:
    server = {"server": "https://127.0.0.1:6443", "certificate-authority-data": "Q0E="}
    return yaml.safe_dump({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "w1", "cluster": {**server, **(cluster or {})}}],
        "users": [{"name": "mk", "user": user if user is not None else {"token": "abc"}}],
        "contexts": [{"name": "ctx", "context": {"cluster": "w1", "user": "mk"}}],
        "current-context": "ctx",
    })  # fmt: skip


def test_a_token_or_inline_client_certificate_is_accepted() -> None:
    assert validate_kubeconfig(kubeconfig())["current-context"] == "ctx"
    validate_kubeconfig(kubeconfig(user={"client-certificate-data": "Q0U=", "client-key-data": "S0VZ"}))
    validate_kubeconfig(kubeconfig(cluster={"server": "https://Worker1.Example.com:443"}))


@pytest.mark.parametrize(
    ("cluster", "user", "message"),
    [
        ({}, {"tokenFile": "/var/run/token"}, "tokenFile is not allowed"),
        ({"insecure-skip-tls-verify": True}, None, "insecure TLS verification is not allowed for cluster w1"),
        (
            {"certificate-authority": "/etc/ca.crt"},
            None,
            "certificate-authority file paths are not allowed, use certificate-authority-data for cluster w1",
        ),
        ({"server": ""}, None, "server URL is required for cluster w1"),
        ({}, {"username": "admin", "password": "secret"}, "basic auth is not allowed"),
        (
            {},
            {"exec": {"command": "aws", "apiVersion": "client.authentication.k8s.io/v1"}},
            "exec plugins are not allowed",
        ),
        ({}, {"auth-provider": {"name": "oidc"}}, "auth providers are not allowed"),
        ({}, {"client-certificate": "/tmp/c.crt", "client-key-data": "S0VZ"}, "client-certificate file paths"),
        ({}, {"client-certificate-data": "Q0U=", "client-key": "/tmp/k.key"}, "client-key file paths"),
        ({"server": "https://evil_host:6443"}, None, "untrusted server endpoint"),
    ],
)
def test_insecure_forms_are_refused_with_kueues_reason(
    cluster: dict[str, Any], user: dict[str, Any] | None, message: str
) -> None:
    with pytest.raises(KubeconfigRejected) as e:
        validate_kubeconfig(kubeconfig(cluster, user))
    assert e.value.reason == INSECURE_KUBECONFIG
    assert str(e.value).startswith(message)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("clusters: [", "failed to parse kubeconfig(apiconfig)"),
        ("just a string", "failed to parse kubeconfig(apiconfig): not a mapping"),
        ("clusters: {a: b}", "failed to parse kubeconfig(apiconfig): clusters must be a list"),
        ("apiVersion: v1\nkind: Config\n", "invalid configuration: no configuration has been provided"),
    ],
)
def test_unparsable_or_incomplete_is_a_bad_kubeconfig(text: str, message: str) -> None:
    with pytest.raises(KubeconfigRejected) as e:
        validate_kubeconfig(text)
    assert e.value.reason == BAD_KUBECONFIG
    assert str(e.value).startswith(message)


def test_missing_current_context_is_named() -> None:
    text = kubeconfig().replace("current-context: ctx", "current-context: other")
    with pytest.raises(KubeconfigRejected, match="context 'other' not found"):
        validate_kubeconfig(text)


@pytest.mark.parametrize(
    ("server", "valid"),
    [("https://10.0.0.1:6443", True), ("https://[::1]:6443", True), ("https://api.example.com", True),
     ("https://API.Example.COM:443", True), ("https://under_score.com", False), ("https://", False)],
)  # fmt: skip
def test_hosts(server: str, valid: bool) -> None:
    assert is_valid_host(server) is valid
