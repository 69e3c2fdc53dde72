"""Where a cluster is and how to authenticate to it, from a kubeconfig document or the pod's service account.

What client-go's ``clientcmd`` reads, for the fields a controller and its CLI meet: the server, its CA (inline or
a file), ``insecure-skip-tls-verify``, ``tls-server-name``, ``proxy-url``; a client certificate and key (inline or
files), a bearer token (inline or ``tokenFile``, re-read as it rotates), basic auth, an ``exec`` credential plugin
(EKS, GKE, kubelogin...), and impersonation (``as``, ``as-uid``, ``as-groups``, ``as-user-extra``, sent as kubectl
sends them). What this client cannot do as the kubeconfig says is refused at load time rather than done otherwise:
``auth-provider`` plugins (with the way out), a CA together with ``insecure-skip-tls-verify`` (kubectl refuses it
too), a proxy scheme other than http(s), an exec plugin that must prompt. Every problem is one ``KubeconfigError``
line naming the field and its value.
"""

from __future__ import annotations

import base64
import binascii
import dataclasses
import json
import os
import urllib.parse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from multikueue.kube.errors import KubeconfigError

SERVICE_ACCOUNT = Path("/var/run/secrets/kubernetes.io/serviceaccount")


@dataclass(frozen=True)
class ExecPlugin:
    """A ``client.authentication.k8s.io`` credential plugin: run, its ``ExecCredential`` read from stdout."""

    command: str
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    api_version: str = "client.authentication.k8s.io/v1"
    install_hint: str = ""
    # provideClusterInfo: the cluster's connection details (and its exec extension's config, as JSON) go to the
    # plugin in KUBERNETES_EXEC_INFO's spec.cluster, for plugins that mint a credential per cluster.
    cluster_info: str | None = None


@dataclass(frozen=True)
class Impersonation:
    """Who the requests act as (``Impersonate-*`` headers): the server authorises the base identity to impersonate,
    then everything else as the impersonated one."""

    user: str
    uid: str | None = None
    groups: tuple[str, ...] = ()
    extra: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def headers(self) -> list[tuple[str, str]]:
        """As client-go's impersonating round tripper sends them (a header per group and per extra value)."""
        headers = [("Impersonate-User", self.user)]
        if self.uid:
            headers.append(("Impersonate-Uid", self.uid))
        headers += [("Impersonate-Group", g) for g in self.groups]
        for key, values in self.extra:
            name = "Impersonate-Extra-" + urllib.parse.quote(key, safe="!#$&'*+-.^_`|~")
            headers += [(name, v) for v in values]
        return headers


@dataclass(frozen=True)
class ClusterAccess:
    server: str
    ca: str | None = None  # PEM
    insecure: bool = False
    tls_server_name: str | None = None
    proxy_url: str | None = None
    client_certificate: bytes | None = None  # PEM
    client_key: bytes | None = None  # PEM
    token: str | None = None
    token_file: str | None = None
    basic: tuple[str, str] | None = field(default=None, repr=False)
    exec: ExecPlugin | None = None
    impersonate: Impersonation | None = None

    @property
    def tls(self) -> bool:
        return self.server.startswith("https://")


def _named(config: dict[str, Any], section: str, name: str) -> dict[str, Any]:
    for entry in config.get(section) or []:
        if isinstance(entry, dict) and entry.get("name") == name:
            body = entry.get(section.rstrip("s")) or {}
            if not isinstance(body, dict):
                raise KubeconfigError(f"kubeconfig: {section}[{name}] is not a mapping")
            return body
    raise KubeconfigError(f"kubeconfig: {section.rstrip('s')} {name!r} not found in {section}")


def _inline_or_file(entry: dict[str, Any], key: str, where: str) -> bytes | None:
    """``<key>-data`` (base64) or ``<key>`` (a file path; ``read_kubeconfig`` made a relative one absolute)."""
    data = entry.get(f"{key}-data")
    if data:
        try:
            return base64.b64decode(str(data), validate=True)
        except (binascii.Error, ValueError):
            raise KubeconfigError(f"kubeconfig: {where}.{key}-data is not base64") from None
    path = entry.get(key)
    if not path:
        return None
    try:
        return Path(str(path)).read_bytes()
    except OSError as e:
        raise KubeconfigError(f"kubeconfig: {where}.{key} {path!r} cannot be read: {e.strerror}") from None


EXEC_EXTENSION = "client.authentication.k8s.io/exec"
"""A cluster's ``extensions`` entry whose ``extension`` is handed to an exec plugin as ``spec.cluster.config``."""


def _cluster_info(cluster: dict[str, Any], ca: bytes | None) -> str:
    """``spec.cluster`` of an ``ExecCredential`` (client-go's ``clientauthentication.Cluster``), as JSON."""
    info: dict[str, Any] = {"server": str(cluster.get("server") or "")}
    if cluster.get("tls-server-name"):
        info["tls-server-name"] = str(cluster["tls-server-name"])
    if cluster.get("insecure-skip-tls-verify"):
        info["insecure-skip-tls-verify"] = True
    if ca:
        info["certificate-authority-data"] = base64.b64encode(ca).decode()
    if cluster.get("proxy-url"):
        info["proxy-url"] = str(cluster["proxy-url"])
    for entry in cluster.get("extensions") or []:
        if isinstance(entry, dict) and entry.get("name") == EXEC_EXTENSION:
            info["config"] = entry.get("extension")
    return json.dumps(info, sort_keys=True)


def _exec_plugin(spec: Any, where: str) -> ExecPlugin:
    if not isinstance(spec, dict) or not spec.get("command"):
        raise KubeconfigError(f"kubeconfig: {where}.exec.command is required")
    env = spec.get("env") or []
    if not isinstance(env, list) or not all(isinstance(e, dict) and "name" in e for e in env):
        raise KubeconfigError(f"kubeconfig: {where}.exec.env must be a list of {{name, value}}")
    if spec.get("interactiveMode") == "Always":
        raise KubeconfigError(
            f"kubeconfig: {where}.exec.interactiveMode 'Always' cannot be honoured: this client has no terminal to "
            "prompt on; use a plugin that needs no input (interactiveMode Never or IfAvailable)"
        )
    return ExecPlugin(
        command=str(spec["command"]),
        args=tuple(str(a) for a in spec.get("args") or []),
        env=tuple((str(e["name"]), str(e.get("value", ""))) for e in env),
        api_version=str(spec.get("apiVersion") or "client.authentication.k8s.io/v1"),
        install_hint=str(spec.get("installHint") or ""),
    )


REMOVED_AUTH_PROVIDERS = ("gcp", "azure")
"""client-go removed these in v1.26 (an exec plugin took their place); ``oidc`` is still in client-go."""


def _auth_provider(user: dict[str, Any], where: str) -> None:
    provider = str((user["auth-provider"] or {}).get("name", ""))
    if provider in REMOVED_AUTH_PROVIDERS:
        raise KubeconfigError(
            f"kubeconfig: {where}.auth-provider {provider!r} is not supported (client-go removed it): "
            "use an exec credential plugin"
        )
    raise KubeconfigError(
        f"kubeconfig: {where}.auth-provider {provider!r} is not supported by this client: use an exec credential "
        "plugin (for OIDC: kubelogin, `kubectl oidc-login get-token`)"
    )


def _impersonation(user: dict[str, Any], where: str) -> Impersonation | None:
    name, uid = user.get("as"), user.get("as-uid")
    groups, extra = user.get("as-groups") or [], user.get("as-user-extra") or {}
    if not name:
        if uid or groups or extra:
            raise KubeconfigError(f"kubeconfig: {where}.as is required with as-uid, as-groups or as-user-extra")
        return None
    if not isinstance(groups, list) or not isinstance(extra, dict):
        raise KubeconfigError(f"kubeconfig: {where}.as-groups must be a list and as-user-extra a mapping of lists")
    values = {str(k): v if isinstance(v, list) else [v] for k, v in extra.items()}
    return Impersonation(
        user=str(name),
        uid=str(uid) if uid else None,
        groups=tuple(str(g) for g in groups),
        extra=tuple((k, tuple(str(x) for x in v)) for k, v in sorted(values.items())),
    )


def _user(user: dict[str, Any], where: str) -> dict[str, Any]:
    if user.get("auth-provider"):
        _auth_provider(user, where)
    fields: dict[str, Any] = {
        "client_certificate": _inline_or_file(user, "client-certificate", where),
        "client_key": _inline_or_file(user, "client-key", where),
        "token": str(user["token"]) if user.get("token") else None,
        "token_file": str(user["tokenFile"]) if user.get("tokenFile") else None,
        "exec": _exec_plugin(user["exec"], where) if user.get("exec") else None,
        "impersonate": _impersonation(user, where),
    }
    if bool(fields["client_certificate"]) != bool(fields["client_key"]):
        raise KubeconfigError(f"kubeconfig: {where} has a client certificate without its key, or a key without one")
    if user.get("username") or user.get("password"):
        fields["basic"] = (str(user.get("username") or ""), str(user.get("password") or ""))
    return fields


def access_from_kubeconfig(config: dict[str, Any], *, context: str | None = None) -> ClusterAccess:
    """The access ``context`` (default: ``current-context``) describes."""
    name = context or config.get("current-context")
    if not name:
        raise KubeconfigError("kubeconfig: current-context is not set and no context was given")
    ctx = _named(config, "contexts", str(name))
    cluster_name = ctx.get("cluster")
    cluster = _named(config, "clusters", str(cluster_name))
    where = f"clusters[{cluster_name}].cluster"
    server = str(cluster.get("server") or "")
    if not server.startswith(("https://", "http://")):
        raise KubeconfigError(f"kubeconfig: {where}.server must be an http(s) URL, got {server!r}")
    ca = _inline_or_file(cluster, "certificate-authority", where)
    insecure = bool(cluster.get("insecure-skip-tls-verify"))
    if ca and insecure:  # kubectl: "specifying a root certificates file with the insecure flag is not allowed"
        raise KubeconfigError(
            f"kubeconfig: {where} has both certificate-authority and insecure-skip-tls-verify: true; keep one"
        )
    proxy = str(cluster["proxy-url"]) if cluster.get("proxy-url") else None
    if proxy is not None and urllib.parse.urlsplit(proxy).scheme not in ("http", "https"):
        raise KubeconfigError(f"kubeconfig: {where}.proxy-url {proxy!r} is not supported: an http(s) proxy only")
    user: dict[str, Any] = {}
    if ctx.get("user"):
        entry = _named(config, "users", str(ctx["user"]))
        user = _user(entry, f"users[{ctx['user']}].user")
        if user["exec"] is not None and (entry.get("exec") or {}).get("provideClusterInfo"):
            user["exec"] = dataclasses.replace(user["exec"], cluster_info=_cluster_info(cluster, ca))
    return ClusterAccess(
        server=server.rstrip("/"),
        ca=ca.decode(errors="replace") if ca else None,
        insecure=insecure,
        tls_server_name=str(cluster["tls-server-name"]) if cluster.get("tls-server-name") else None,
        proxy_url=proxy,
        **user,
    )


_FILE_FIELDS = {"clusters": ("certificate-authority",), "users": ("client-certificate", "client-key", "tokenFile")}


def _absolute(config: dict[str, Any], base: Path) -> None:
    """Relative file paths made absolute from the kubeconfig's own directory, as kubectl resolves them."""
    for section, keys in _FILE_FIELDS.items():
        for entry in config.get(section) or []:
            body = entry.get(section.rstrip("s")) if isinstance(entry, dict) else None
            if not isinstance(body, dict):
                continue
            for key in keys:
                if isinstance(body.get(key), str) and body[key] and not Path(body[key]).is_absolute():
                    body[key] = str(base / body[key])


def read_kubeconfig(spec: str) -> dict[str, Any]:
    """A kubeconfig file, or a ``KUBECONFIG`` list (``:``-separated), merged as kubectl merges it: the first file to
    name a cluster, user or context, or to set ``current-context``, wins. Relative file paths in each are made
    absolute from that file's directory. A file that cannot be read or parsed is one ``KubeconfigError`` line."""
    merged: dict[str, Any] = {"clusters": [], "users": [], "contexts": []}
    for path in (Path(p) for p in spec.split(os.pathsep) if p):
        try:
            document = yaml.safe_load(path.read_text())
        except OSError as e:
            raise KubeconfigError(f"kubeconfig {path} cannot be read: {e.strerror}") from None
        except yaml.YAMLError as e:
            raise KubeconfigError(f"kubeconfig {path} is not YAML: {str(e).splitlines()[0]}") from None
        if document is None:
            continue
        if not isinstance(document, dict):
            raise KubeconfigError(f"kubeconfig {path} is not a kubeconfig document (not a mapping)")
        _absolute(document, path.resolve().parent)
        for section in ("clusters", "users", "contexts"):
            known = {e.get("name") for e in merged[section]}
            entries = [e for e in document.get(section) or [] if isinstance(e, dict)]
            merged[section] += [e for e in entries if e.get("name") not in known]
        if document.get("current-context") and "current-context" not in merged:
            merged["current-context"] = document["current-context"]
    return merged


def in_cluster_access(account: Path = SERVICE_ACCOUNT) -> ClusterAccess:
    """The pod's service account: the API server from the environment, the token file re-read as it rotates."""
    host, port = os.environ.get("KUBERNETES_SERVICE_HOST"), os.environ.get("KUBERNETES_SERVICE_PORT")
    if not host or not port:
        raise KubeconfigError(
            "not running in a cluster (KUBERNETES_SERVICE_HOST/PORT are not set): pass --kubeconfig or set KUBECONFIG"
        )
    try:
        ca = (account / "ca.crt").read_text()
    except OSError as e:
        raise KubeconfigError(f"service account CA {account / 'ca.crt'} cannot be read: {e.strerror}") from None
    server = f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"
    return ClusterAccess(server=server, ca=ca, token_file=str(account / "token"))
