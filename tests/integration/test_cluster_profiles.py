"""Workers reached through a ClusterProfile (SIG-Multicluster's cluster inventory API) and an exec access provider
configured in the dispatcher's configuration, as Kueue v0.19 reaches them: the real CRD, a real plugin process."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import anyio
import pytest

from multikueue.clusters.reconciler import PROFILES_LISTING_RETRY, ClusterReconciler
from multikueue.config import parse_configuration
from multikueue.kube import core
from multikueue.kube.addresses import CLUSTER_PROFILES, MULTIKUEUE_CLUSTERS
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue.runtime.informer import Informer
from multikueue_testbed import TestBed, crds, kueue
from multikueue_testbed.objects import running_status
from multikueue_testbed.profiles import (
    PLUGIN_API_VERSION,
    profile_status,
    put_cluster_profile,
    requests_logged,
    write_credentials,
    write_plugin,
)
from tests.integration.scenario import Scenario
from tests.integration.test_status import _status

PROVIDER = "test-inventory"


def access_config(plugin: Path, log: Path, *, cluster_info: bool = True, credentials: Path | None = None) -> str:
    env = [{"name": "PLUGIN_LOG", "value": str(log)}]
    if credentials is not None:
        env.append({"name": "CREDENTIALS", "value": str(credentials)})
    provider = {
        "name": PROVIDER,
        "execConfig": {"apiVersion": PLUGIN_API_VERSION, "command": str(plugin), "args": [], "env": env,
                       "interactiveMode": "Never", "provideClusterInfo": cluster_info},
    }  # fmt: skip
    return "multiKueue:\n  clusterProfile:\n    accessProviders: " + json.dumps([provider]) + "\n"


@pytest.fixture
async def plugin(tmp_path: Path, manager_api: ApiClient) -> tuple[Path, Path]:
    await crds.install_crds(manager_api, [crds.cluster_profile_crd()])
    return write_plugin(tmp_path / "plugin")


# ------------------------------------------------------------------ the whole flow, one worker through a profile


@pytest.fixture
def multikueue_config(tmp_path: Path) -> str:
    plugin, log = tmp_path / "plugin" / "access-plugin", tmp_path / "plugin" / "access-plugin.log"
    return access_config(plugin, log)


@pytest.fixture
async def worker_sources(
    testbed: TestBed, manager_api: ApiClient, namespace: str, tmp_path: Path, plugin: tuple[Path, Path]
) -> dict[str, Any]:
    credentials = write_credentials(tmp_path / "worker2-credentials.json", testbed.cluster("worker2"))
    status = profile_status(PROVIDER, testbed.cluster("worker2"), extension={"credentials": str(credentials)})
    await put_cluster_profile(manager_api, namespace, "worker2-profile", status)
    return {"worker2": {"clusterProfileRef": {"name": "worker2-profile"}}}


async def test_a_worker_reached_through_a_clusterprofile_dispatches_and_mirrors(
    scenario: Scenario, testbed: TestBed, plugin: tuple[Path, Path], tmp_path: Path
) -> None:
    s = scenario
    _, workload = await s.submit("through-a-profile")
    wl_name = workload["metadata"]["name"]
    await s.copied(wl_name, "worker1", "worker2")
    await kueue.admit(s.api["worker2"], wl_name, s.namespace)
    await s.check_state(wl_name, state="Ready", message=f'The workload was admitted on "{s.names["worker2"]}"')
    await s.wait(s.runs("worker2"), "through-a-profile", lambda r: r is not None, "PipelineRun on worker2")
    await s.runs("worker2").patch_status("through-a-profile", {"status": running_status("x")}, s.namespace)
    mirrored = await s.wait(s.runs("manager"), "through-a-profile", lambda r: "status" in r, "status mirrored")
    assert mirrored["status"] == running_status("x")

    # The plugin ran as the configured provider, never interactively, with the profile's cluster and extension.
    _, log = plugin
    requests = requests_logged(log)
    assert requests, "the access plugin was never run"
    spec = requests[-1]["spec"]
    assert spec["interactive"] is False
    assert spec["cluster"]["server"] == testbed.cluster("worker2").url
    assert spec["cluster"]["config"]["credentials"].endswith("worker2-credentials.json")

    # `multikueue status` does not run the dispatcher's plugin for a user: it says how to give one's own access.
    code, out, _ = await _status(s, testbed.cluster("manager").kubeconfig, "through-a-profile", tmp_path)
    assert code == 0, out
    line = next(line for line in out.splitlines() if line.startswith(f"  worker {s.names['worker2']}:"))
    assert "reached through ClusterProfile worker2-profile by the dispatcher's access provider" in line, out
    assert f"--worker-kubeconfig {s.names['worker2']}=PATH" in line


# ------------------------------------------------------------------ conditions, as Kueue words them


async def test_a_clusterprofile_without_access_providers_is_refused_in_one_line(harness: Any) -> None:
    h = await harness()
    await h.clusters.create({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster", "metadata": {"name": h.name("p")},
        "spec": {"clusterSource": {"clusterProfileRef": {"name": "anything"}}},
    })  # fmt: skip
    condition = await h.active("p", status="False", reason="BadClusterProfile")
    assert condition["message"] == (
        "load client config failed: no access provider configured "
        "(multiKueue.clusterProfile.accessProviders in the configuration is empty)"
    )


async def test_clusterprofile_changes_are_followed_without_a_restart(
    testbed: TestBed, harness: Any, manager_api: ApiClient, namespace: str, tmp_path: Path,
    plugin: tuple[Path, Path],
) -> None:  # fmt: skip
    executable, log = plugin
    credentials = write_credentials(tmp_path / "worker1.json", testbed.cluster("worker1"))
    # Without cluster info the plugin takes $CREDENTIALS (one credential for every profile of this provider).
    h = await harness(access_config(executable, log, cluster_info=False, credentials=credentials))
    await h.clusters.create({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster", "metadata": {"name": h.name("w1")},
        "spec": {"clusterSource": {"clusterProfileRef": {"name": "w1"}}},
    })  # fmt: skip
    condition = await h.active("w1", status="False", reason="BadClusterProfile")
    assert condition["message"] == 'load client config failed: clusterprofiles.multicluster.x-k8s.io "w1" not found'

    # Published by the inventory with another provider only: nothing this dispatcher may run for it.
    await put_cluster_profile(manager_api, namespace, "w1", profile_status("someone-else", testbed.cluster("worker1")))
    # Same status and reason as before: wait on the message, or the earlier condition would match at once.
    await h.active(
        "w1", status="False", reason="BadClusterProfile",
        message='load client config failed: no matching cluster accessor found for cluster profile "w1"',
    )  # fmt: skip

    # The deprecated credentialProviders list is read too (inventories that have not moved yet).
    await put_cluster_profile(
        manager_api, namespace, "w1", profile_status(PROVIDER, testbed.cluster("worker1"), deprecated=True)
    )
    await h.active("w1", status="True", reason="Active", message="Connected")
    assert "cluster" not in requests_logged(log)[-1]["spec"]  # provideClusterInfo false: nothing more given

    # A server that is neither an IP nor a DNS name: Kueue's rest-config check.
    bad = profile_status(PROVIDER, testbed.cluster("worker1"), server="https://under_score.example:6443")
    await put_cluster_profile(manager_api, namespace, "w1", bad)
    await h.active(
        "w1", status="False", reason="BadRestConfig", message="load client config failed: untrusted server endpoint"
    )

    await put_cluster_profile(manager_api, namespace, "w1", profile_status(PROVIDER, testbed.cluster("worker1")))
    await h.active("w1", status="True", reason="Active", message="Connected")

    await Objects(manager_api, CLUSTER_PROFILES).delete("w1", namespace)
    gone = 'load client config failed: clusterprofiles.multicluster.x-k8s.io "w1" not found'
    await h.active("w1", status="False", reason="BadClusterProfile", message=gone)


async def test_an_access_plugin_that_fails_is_shown_on_the_cluster(
    testbed: TestBed, harness: Any, manager_api: ApiClient, namespace: str, tmp_path: Path,
    plugin: tuple[Path, Path],
) -> None:  # fmt: skip
    executable, log = plugin
    h = await harness(access_config(executable, log, cluster_info=False, credentials=tmp_path / "missing.json"))
    await put_cluster_profile(manager_api, namespace, "w1", profile_status(PROVIDER, testbed.cluster("worker1")))
    await h.clusters.create({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster", "metadata": {"name": h.name("w1")},
        "spec": {"clusterSource": {"clusterProfileRef": {"name": "w1"}}},
    })  # fmt: skip
    condition = await h.active("w1", status="False", reason="ClientConnectionFailed")
    assert "no credentials for this cluster" in condition["message"], condition["message"]


async def test_a_profile_reached_worker_is_not_judged_before_the_profiles_are_listed(
    manager_api: ApiClient, namespace: str, tmp_path: Path, plugin: tuple[Path, Path]
) -> None:
    """At start (or on a replica taking over) the ClusterProfiles' first list may still be under way: the worker is
    neither written inactive nor taken as tried (``settled``), only looked at again shortly."""
    executable, log = plugin
    config = parse_configuration(f"dispatcher: {{namespace: {namespace}}}\n{access_config(executable, log)}")
    name = f"{namespace}-early"
    clusters = Objects(manager_api, MULTIKUEUE_CLUSTERS)
    await clusters.create({"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster",
                           "metadata": {"name": name},
                           "spec": {"clusterSource": {"clusterProfileRef": {"name": "early"}}}})  # fmt: skip
    try:
        cache = Informer(clusters.source())
        profiles = Informer(Objects(manager_api, CLUSTER_PROFILES).source(namespace=namespace))  # not started yet
        async with anyio.create_task_group() as tg:
            tg.start_soon(cache.run)
            with anyio.fail_after(30):
                await cache.synced.wait()
            secrets = Informer(core.secret_source(manager_api, namespace))
            reconciler = ClusterReconciler(config, clusters, cache, secrets, tg, profiles=profiles)
            result = await reconciler.reconcile(name)
            assert result.requeue_after == PROFILES_LISTING_RETRY
            assert not reconciler.settled(name)
            assert not ((await clusters.get(name) or {}).get("status") or {}).get("conditions")
            tg.cancel_scope.cancel()
    finally:
        await clusters.delete(name)
