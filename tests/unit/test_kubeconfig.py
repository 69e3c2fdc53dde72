"""kube/kubeconfig.py without a cluster: kubeconfig documents, files and lists, and the service account, read into
what a request presents; every refusal one line naming the field and the value."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest
import yaml

from multikueue.kube.errors import KubeconfigError
from multikueue.kube.kubeconfig import ExecPlugin, access_from_kubeconfig, in_cluster_access, read_kubeconfig


def document(cluster: dict[str, Any], user: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "clusters": [{"name": "c", "cluster": cluster}], "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}], "current-context": "x", **extra,
    }  # fmt: skip


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def test_a_kubeconfig_reads_inline_data_files_relative_to_it_and_every_kind_of_user(tmp_path: Path) -> None:
    (tmp_path / "ca.pem").write_text("CA")
    cluster = {"server": "https://k.example:6443/", "certificate-authority": "ca.pem", "tls-server-name": "api",
               "proxy-url": "http://p:1"}  # fmt: skip
    user = {"client-certificate-data": b64("CERT"), "client-key-data": b64("KEY"), "tokenFile": "token"}
    (tmp_path / "config").write_text(yaml.safe_dump(document(cluster, user)))
    access = access_from_kubeconfig(read_kubeconfig(str(tmp_path / "config")))
    assert (access.server, access.ca, access.tls_server_name, access.proxy_url) == (
        "https://k.example:6443",
        "CA",
        "api",
        "http://p:1",
    )
    assert (access.client_certificate, access.client_key, access.token_file) == (
        b"CERT",
        b"KEY",
        str(tmp_path / "token"),
    )
    plugin = {"command": "aws", "args": ["eks", "get-token"], "env": [{"name": "AWS_PROFILE", "value": "p"}],
              "apiVersion": "client.authentication.k8s.io/v1beta1"}  # fmt: skip
    access = access_from_kubeconfig(document({"server": "http://k:80"}, {"exec": plugin}))
    assert access.exec == ExecPlugin("aws", ("eks", "get-token"), (("AWS_PROFILE", "p"),),
                                     "client.authentication.k8s.io/v1beta1")  # fmt: skip
    basic = access_from_kubeconfig(document({"server": "http://k:80"}, {"username": "a", "password": "b"}))
    assert basic.basic == ("a", "b")


@pytest.mark.parametrize(
    ("config", "context", "message"),
    [
        (document({"server": "https://k:6443"}, {}, **{"current-context": ""}), None, "current-context is not set"),
        (document({"server": "https://k:6443"}, {}), "other", "context 'other' not found in contexts"),
        (document({"server": "k:6443"}, {}), None, "clusters[c].cluster.server must be an http(s) URL, got 'k:6443'"),
        (document({"server": "https://k", "certificate-authority-data": "%%"}, {}), None,
         "clusters[c].cluster.certificate-authority-data is not base64"),
        (document({"server": "https://k", "certificate-authority": "/no/such/ca.pem"}, {}), None,
         "clusters[c].cluster.certificate-authority '/no/such/ca.pem' cannot be read: No such file or directory"),
        (document({"server": "https://k"}, {"client-certificate-data": b64("C")}), None,
         "users[u].user has a client certificate without its key"),
        (document({"server": "https://k"}, {"auth-provider": {"name": "gcp"}}), None,
         "users[u].user.auth-provider 'gcp' is not supported (client-go removed it): use an exec credential plugin"),
        # client-go still has oidc: the refusal must not say it was removed, and says what to use instead.
        (document({"server": "https://k"}, {"auth-provider": {"name": "oidc"}}), None,
         "users[u].user.auth-provider 'oidc' is not supported by this client: use an exec credential plugin (for "
         "OIDC: kubelogin, `kubectl oidc-login get-token`)"),
        (document({"server": "https://k"}, {"exec": {"args": ["x"]}}), None, "users[u].user.exec.command is required"),
        (document({"server": "https://k"}, {"exec": {"command": "x", "interactiveMode": "Always"}}), None,
         "users[u].user.exec.interactiveMode 'Always' cannot be honoured"),
        (document({"server": "https://k", "certificate-authority-data": b64("CA"), "insecure-skip-tls-verify": True},
                  {}), None,
         "clusters[c].cluster has both certificate-authority and insecure-skip-tls-verify: true; keep one"),
        (document({"server": "https://k", "proxy-url": "socks5://p:1080"}, {}), None,
         "clusters[c].cluster.proxy-url 'socks5://p:1080' is not supported: an http(s) proxy only"),
        (document({"server": "https://k"}, {"as-groups": ["g"]}), None,
         "users[u].user.as is required with as-uid, as-groups or as-user-extra"),
    ],
)  # fmt: skip
def test_a_kubeconfig_that_cannot_be_used_is_one_line_naming_field_and_value(
    config: dict[str, Any], context: str | None, message: str
) -> None:
    with pytest.raises(KubeconfigError) as raised:
        access_from_kubeconfig(config, context=context)
    assert message in str(raised.value)
    assert "\n" not in str(raised.value)


def test_in_cluster_access_reads_the_service_account_and_says_when_there_is_none(tmp_path: Path, monkeypatch: Any
                                                                                  ) -> None:  # fmt: skip
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(KubeconfigError, match="not running in a cluster"):
        in_cluster_access(tmp_path)
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", "fd00::1")
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", "443")
    with pytest.raises(KubeconfigError, match=r"ca\.crt cannot be read"):
        in_cluster_access(tmp_path)
    (tmp_path / "ca.crt").write_text("CA")
    access = in_cluster_access(tmp_path)
    assert (access.server, access.ca, access.token_file) == ("https://[fd00::1]:443", "CA", str(tmp_path / "token"))


def test_a_kubeconfig_file_resolves_its_relative_paths_and_a_kubeconfig_list_merges_first_wins(tmp_path: Path) -> None:
    import yaml

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "ca.pem").write_text("CA of a")
    first = document({"server": "https://a:6443", "certificate-authority": "ca.pem"}, {"tokenFile": "/abs/token"})
    (tmp_path / "a" / "config").write_text(yaml.safe_dump(first))
    second = document({"server": "https://b:6443"}, {"token": "b"}, **{"current-context": "y"})
    second["contexts"] += [{"name": "y", "context": {"cluster": "c", "user": "u"}}]
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(second))
    (tmp_path / "empty.yaml").write_text("")
    merged = read_kubeconfig(f"{tmp_path / 'empty.yaml'}:{tmp_path / 'a' / 'config'}:{tmp_path / 'b.yaml'}")
    assert merged["current-context"] == "x", "the first file to set current-context wins"
    assert [c["name"] for c in merged["contexts"]] == ["x", "y"]
    access = access_from_kubeconfig(merged)
    assert (access.server, access.ca, access.token_file) == ("https://a:6443", "CA of a", "/abs/token")
    assert access_from_kubeconfig(merged, context="y").server == "https://a:6443", "cluster c is the first file's"
    for content, message in (("[1, 2]", "not a kubeconfig document"), ("a: [", "is not YAML")):
        (tmp_path / "bad.yaml").write_text(content)
        with pytest.raises(KubeconfigError, match=message):
            read_kubeconfig(str(tmp_path / "bad.yaml"))
    with pytest.raises(KubeconfigError, match="cannot be read: No such file or directory"):
        read_kubeconfig(str(tmp_path / "missing.yaml"))
