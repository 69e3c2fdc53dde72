"""A ClusterProfile and the configured access providers → the kubeconfig a worker connection is made from.

As Kueue v0.19 does it (its ``clusterProfileRef`` support, through the cluster inventory API's access library): the
first of the configured providers, in configuration order, that the ClusterProfile lists in
``status.accessProviders`` (or the deprecated ``credentialProviders``) gives the cluster (server, CA data, proxy) and
the configured exec plugin gives the credential, run with ``interactiveMode: Never``. The ClusterProfile's
``client.authentication.k8s.io/exec`` extension reaches the plugin as ``spec.cluster.config`` when it asks for the
cluster's info. Nothing from the ClusterProfile can name a command or add arguments or environment: upstream's
"profile-sourced" arguments and variables are ignored, as Kueue leaves them (its providers carry no policy).
"""

from __future__ import annotations

from typing import Any

from multikueue.clusters.worker_kubeconfig import KubeconfigRejected, is_valid_host
from multikueue.config import ClusterProfileAccessProvider
from multikueue.kube.kubeconfig import EXEC_EXTENSION

BAD_CLUSTER_PROFILE = "BadClusterProfile"
BAD_REST_CONFIG = "BadRestConfig"

Object = dict[str, Any]


def profile_name(cluster: Object) -> str | None:
    """The ClusterProfile a MultiKueueCluster names, if it names one."""
    source = (cluster.get("spec") or {}).get("clusterSource") or {}
    ref = source.get("clusterProfileRef") or {}
    name = ref.get("name")
    return str(name) if name else None


def _accessor(profile: Object, providers: tuple[ClusterProfileAccessProvider, ...]) -> tuple[Object, str] | None:
    """The profile's access entry for the first configured provider it lists (accessProviders win over the
    deprecated credentialProviders of the same name), and that provider's name."""
    status = profile.get("status") or {}
    listed: dict[str, Object] = {}
    for field in ("credentialProviders", "accessProviders"):
        for entry in status.get(field) or []:
            if isinstance(entry, dict) and isinstance(entry.get("name"), str):
                listed[entry["name"]] = entry
    for provider in providers:
        if provider.name in listed:
            return listed[provider.name], provider.name
    return None


def _user(provider: ClusterProfileAccessProvider) -> Object:
    spec = provider.exec_config
    user: Object = {
        "apiVersion": spec.api_version,
        "command": spec.command,
        "args": list(spec.args),
        "env": [{"name": e.name, "value": e.value} for e in spec.env],
        "interactiveMode": "Never",
        "provideClusterInfo": spec.provide_cluster_info,
    }
    if spec.install_hint:
        user["installHint"] = spec.install_hint
    return {"exec": user}


def _listed(profile: Object) -> list[Any]:
    status = profile.get("status") or {}
    return [e.get("name") for field in ("accessProviders", "credentialProviders")
            for e in status.get(field) or [] if isinstance(e, dict)]  # fmt: skip


def _cluster(name: str, provider: str, source: Any) -> Object:
    """The kubeconfig cluster entry: what upstream's access library carries over (server, CA data, proxy, the exec
    extension); TLS skipping and server names are not."""
    if not isinstance(source, dict):
        raise KubeconfigRejected(BAD_CLUSTER_PROFILE, f'cluster profile "{name}": {provider}.cluster is not a mapping')
    server = str(source.get("server") or "")
    if not is_valid_host(server):  # Kueue's validateRestConfig: the host must be an IP or a DNS-1123 subdomain
        raise KubeconfigRejected(BAD_REST_CONFIG, "untrusted server endpoint")
    cluster: Object = {"server": server}
    for key in ("certificate-authority-data", "proxy-url"):
        if source.get(key):
            cluster[key] = source[key]
    extensions = [e for e in source.get("extensions") or [] if isinstance(e, dict) and e.get("name") == EXEC_EXTENSION]
    if extensions:
        cluster["extensions"] = extensions[:1]
    return cluster


def kubeconfig_from_profile(profile: Object, providers: tuple[ClusterProfileAccessProvider, ...]) -> Object:
    """The kubeconfig to connect with, or ``KubeconfigRejected`` with Kueue's reason and wording."""
    name = profile["metadata"]["name"]
    if not providers:
        raise KubeconfigRejected(
            BAD_CLUSTER_PROFILE,
            "no access provider configured (multiKueue.clusterProfile.accessProviders in the configuration is empty)",
        )
    found = _accessor(profile, providers)
    if found is None:
        raise KubeconfigRejected(
            BAD_CLUSTER_PROFILE,
            f'no matching cluster accessor found for cluster profile "{name}" (it lists {_listed(profile) or "none"}; '
            f"configured: {[p.name for p in providers]})",
        )
    entry, provider_name = found
    cluster = _cluster(name, provider_name, entry.get("cluster") or {})
    provider = next(p for p in providers if p.name == provider_name)
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": cluster}],
        "users": [{"name": provider_name, "user": _user(provider)}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": provider_name}}],
        "current-context": name,
    }
