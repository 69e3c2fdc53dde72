"""Worker kubeconfigs as Kueue accepts them: inline credentials only, TLS verified, nothing executed.

Reasons and messages follow Kueue's ``validateKubeconfig``/``validateRestConfig`` (multikueuecluster.go) so a
MultiKueueCluster shows the same condition under either controller. One deliberate tightening: client
certificate and key *file paths* are refused too, since they would read files from the controller's own pod.
"""

from __future__ import annotations

import ipaddress
import re
from typing import Any
from urllib.parse import urlsplit

import yaml

BAD_KUBECONFIG = "BadKubeConfig"
INSECURE_KUBECONFIG = "InsecureKubeConfig"

_DNS1123_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_SUBDOMAIN = re.compile(rf"^{_DNS1123_LABEL}(\.{_DNS1123_LABEL})*$")


class KubeconfigRejected(ValueError):
    """``reason`` is the MultiKueueCluster condition reason; the message is Kueue's wording."""

    def __init__(self, reason: str, message: str) -> None:
        self.reason = reason
        super().__init__(message)


class KubeconfigNotYaml(KubeconfigRejected):
    """The text does not parse as YAML; ``problem`` is where and why, in one line."""

    def __init__(self, problem: str) -> None:
        self.problem = problem
        super().__init__(BAD_KUBECONFIG, f"failed to parse kubeconfig(apiconfig): {problem}")


def yaml_problem(error: yaml.YAMLError) -> str:
    """A YAML error in one line: the position (1-based, as editors count) and the problem, without the quoted
    snippet and caret PyYAML adds on lines of their own (a MultiKueueCluster condition, a worker's line)."""
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or getattr(error, "context", None)
    if mark is not None and problem:
        return f"line {mark.line + 1}, column {mark.column + 1}: {problem}"
    first = (str(error).splitlines() or [type(error).__name__])[0]
    if isinstance(error, yaml.reader.ReaderError):  # a character YAML does not allow: where, as a position
        return f"position {error.position}: {first}"
    return first


def _named(entries: Any, field: str) -> dict[str, dict[str, Any]]:
    if entries is None:
        return {}
    if not isinstance(entries, list):
        raise KubeconfigRejected(BAD_KUBECONFIG, f"failed to parse kubeconfig(apiconfig): {field} must be a list")
    named: dict[str, dict[str, Any]] = {}
    for entry in entries:
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            raise KubeconfigRejected(
                BAD_KUBECONFIG, f"failed to parse kubeconfig(apiconfig): {field} entry without name"
            )
        body = entry.get(field.rstrip("s")) or {}
        if not isinstance(body, dict):
            raise KubeconfigRejected(
                BAD_KUBECONFIG, f"failed to parse kubeconfig(apiconfig): {field} {entry['name']!r}"
            )
        named[entry["name"]] = body
    return named


def is_valid_host(server: str) -> bool:
    """An IP address or a DNS-1123 subdomain, as Kueue's ``isValidHostname`` (case-insensitive)."""
    try:
        host = urlsplit(server.lower()).hostname or ""
    except ValueError:
        return False
    try:
        ipaddress.ip_address(host)
        return True
    except ValueError:
        return len(host) <= 253 and bool(_DNS1123_SUBDOMAIN.match(host))


def validate_kubeconfig(raw: bytes | str) -> dict[str, Any]:
    """Parse and check a kubeconfig; return it, or raise ``KubeconfigRejected`` with Kueue's reason."""
    try:
        config = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise KubeconfigNotYaml(yaml_problem(e)) from None
    if not isinstance(config, dict):
        raise KubeconfigRejected(BAD_KUBECONFIG, "failed to parse kubeconfig(apiconfig): not a mapping")
    users = _named(config.get("users"), "users")
    clusters = _named(config.get("clusters"), "clusters")
    contexts = _named(config.get("contexts"), "contexts")

    for user in users.values():
        if user.get("tokenFile"):
            raise KubeconfigRejected(INSECURE_KUBECONFIG, "tokenFile is not allowed")
    for name, cluster in clusters.items():
        if cluster.get("insecure-skip-tls-verify"):
            raise KubeconfigRejected(
                INSECURE_KUBECONFIG, f"insecure TLS verification is not allowed for cluster {name}"
            )
        if cluster.get("certificate-authority"):
            raise KubeconfigRejected(
                INSECURE_KUBECONFIG,
                f"certificate-authority file paths are not allowed, use certificate-authority-data for cluster {name}",
            )
        if not cluster.get("server"):
            raise KubeconfigRejected(INSECURE_KUBECONFIG, f"server URL is required for cluster {name}")

    current = config.get("current-context")
    if not current or current not in contexts:
        problem = f"context {current!r} not found" if current else "no configuration has been provided"
        raise KubeconfigRejected(BAD_KUBECONFIG, f"invalid configuration: {problem}")
    context = contexts[current]
    if context.get("cluster") not in clusters:
        raise KubeconfigRejected(BAD_KUBECONFIG, f"invalid configuration: cluster {context.get('cluster')!r} not found")
    cluster = clusters[context["cluster"]]
    user = users.get(context.get("user", ""), {})

    if user.get("username") or user.get("password"):
        raise KubeconfigRejected(INSECURE_KUBECONFIG, "basic auth is not allowed")
    if user.get("exec"):
        raise KubeconfigRejected(INSECURE_KUBECONFIG, "exec plugins are not allowed")
    if user.get("auth-provider"):
        raise KubeconfigRejected(INSECURE_KUBECONFIG, "auth providers are not allowed")
    for field in ("client-certificate", "client-key"):
        if user.get(field):
            raise KubeconfigRejected(
                INSECURE_KUBECONFIG,
                f"{field} file paths are not allowed, use {field}-data for user {context.get('user')}",
            )
    if not is_valid_host(str(cluster["server"])):
        raise KubeconfigRejected(INSECURE_KUBECONFIG, "untrusted server endpoint")
    return config
