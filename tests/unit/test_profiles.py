"""ClusterProfile + configured access providers → the kubeconfig a worker connection is made from (pure)."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.clusters.profiles import kubeconfig_from_profile, profile_name
from multikueue.clusters.worker_kubeconfig import KubeconfigRejected
from multikueue.config import ConfigError, parse_configuration
from multikueue.kube.kubeconfig import access_from_kubeconfig

EXEC = {"apiVersion": "client.authentication.k8s.io/v1", "command": "/opt/plugins/token", "interactiveMode": "Never"}


def providers(*names: str, **exec_config: Any) -> Any:
    config = parse_configuration(
        "multiKueue:\n  clusterProfile:\n    accessProviders:\n"
        + "".join(f"    - name: {n}\n      execConfig: {{{_flow({**EXEC, **exec_config})}}}\n" for n in names)
    )
    assert config.multi_kueue.cluster_profile is not None
    return config.multi_kueue.cluster_profile.providers


def _flow(d: dict[str, Any]) -> str:
    import json

    return ", ".join(f"{k}: {json.dumps(v)}" for k, v in d.items())


def profile(*entries: tuple[str, dict[str, Any]], deprecated: tuple[tuple[str, dict[str, Any]], ...] = ()) -> Any:
    return {
        "metadata": {"name": "east", "namespace": "kueue-system"},
        "status": {
            "accessProviders": [{"name": n, "cluster": c} for n, c in entries],
            "credentialProviders": [{"name": n, "cluster": c} for n, c in deprecated],
        },
    }


CLUSTER = {"server": "https://east.example.com:6443", "certificate-authority-data": "Q0E="}


def test_the_first_configured_provider_the_profile_lists_is_used() -> None:
    config = kubeconfig_from_profile(
        profile(("b", {**CLUSTER, "server": "https://b.example.com"}), ("a", CLUSTER)), providers("a", "b")
    )
    assert config["clusters"][0]["cluster"] == CLUSTER
    assert config["users"][0]["name"] == "a"
    access = access_from_kubeconfig(config)
    assert access.server == "https://east.example.com:6443"
    assert access.exec is not None
    assert access.exec.command == "/opt/plugins/token"


def test_access_providers_win_over_deprecated_credential_providers_of_the_same_name() -> None:
    old = {**CLUSTER, "server": "https://old.example.com"}
    config = kubeconfig_from_profile(profile(("a", CLUSTER), deprecated=(("a", old),)), providers("a"))
    assert config["clusters"][0]["cluster"]["server"] == CLUSTER["server"]
    config = kubeconfig_from_profile(profile(deprecated=(("a", old),)), providers("a"))
    assert config["clusters"][0]["cluster"]["server"] == old["server"]


def test_nothing_in_the_profile_can_add_arguments_or_environment_and_the_plugin_never_prompts() -> None:
    cluster = {
        **CLUSTER,
        "insecure-skip-tls-verify": True,  # not carried over, as upstream's access library
        "extensions": [
            {"name": "clusterprofiles.multicluster.x-k8s.io/exec/additional-args", "extension": ["--evil"]},
            {"name": "clusterprofiles.multicluster.x-k8s.io/exec/additional-envs", "extension": {"LD_PRELOAD": "x"}},
            {"name": "client.authentication.k8s.io/exec", "extension": {"audience": "east"}},
        ],
    }
    config = kubeconfig_from_profile(
        profile(("a", cluster)), providers("a", interactiveMode="Always", provideClusterInfo=True)
    )
    user = config["users"][0]["user"]["exec"]
    assert user["args"] == []
    assert user["env"] == []
    assert user["interactiveMode"] == "Never"
    access = access_from_kubeconfig(config)
    assert not access.insecure
    assert access.exec is not None
    assert access.exec.cluster_info is not None
    assert '"config": {"audience": "east"}' in access.exec.cluster_info


@pytest.mark.parametrize(
    ("status", "names", "reason", "message"),
    [
        ((("a", CLUSTER),), (), "BadClusterProfile", "no access provider configured"),
        ((("z", CLUSTER),), ("a",), "BadClusterProfile", 'no matching cluster accessor found for cluster'),
        ((("a", {**CLUSTER, "server": "https://bad_host:1"}),), ("a",), "BadRestConfig", "untrusted server endpoint"),
    ],
)  # fmt: skip
def test_refusals_carry_kueues_reasons(status: Any, names: tuple[str, ...], reason: str, message: str) -> None:
    with pytest.raises(KubeconfigRejected) as caught:
        kubeconfig_from_profile(profile(*status), providers(*names) if names else ())
    assert caught.value.reason == reason
    assert str(caught.value).startswith(message)


def test_profile_name() -> None:
    assert profile_name({"spec": {"clusterSource": {"clusterProfileRef": {"name": "east"}}}}) == "east"
    assert profile_name({"spec": {"clusterSource": {"kubeConfig": {"location": "s"}}}}) is None


@pytest.mark.parametrize(
    ("section", "problem"),
    [
        ("accessProviders: [{name: a, execConfig: {command: c, apiVersion: v}}]",
         "multiKueue.clusterProfile.accessProviders[0].execConfig.interactiveMode: Field required"),
        ("accessProviders: [{name: a, execConfig: {command: c, apiVersion: v, interactiveMode: Sometimes}}]",
         "multiKueue.clusterProfile.accessProviders[0].execConfig.interactiveMode: Input should be"),
        ("{accessProviders: [{name: a, execConfig: {command: c, apiVersion: v, interactiveMode: Never}}], "
         "credentialsProviders: [{name: b, execConfig: {command: c, apiVersion: v, interactiveMode: Never}}]}",
         "multiKueue.clusterProfile.credentialsProviders: must not be specified when accessProviders is specified"),
        ("accessProviders: [{name: a, execConfig: {command: '', apiVersion: v, interactiveMode: Never}}]",
         "multiKueue.clusterProfile.accessProviders[0].execConfig.command: String should have at least 1 character"),
    ],
)  # fmt: skip
def test_bad_access_provider_configuration_is_one_line_naming_the_field(section: str, problem: str) -> None:
    text = (
        f"multiKueue:\n  clusterProfile: {section}\n"
        if section.startswith("{")
        else (f"multiKueue:\n  clusterProfile:\n    {section}\n")
    )
    with pytest.raises(ConfigError) as caught:
        parse_configuration(text)
    assert problem in str(caught.value), str(caught.value)
