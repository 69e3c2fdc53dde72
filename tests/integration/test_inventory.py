"""Workers kept from the cluster inventory (``dispatcher.inventory``), against the test bed's real API servers: the
real ClusterProfile CRD, workers reached through a real access plugin process, and Kueue's real CRDs (whose limits
the API server enforces). The tests play Kueue's part (quota, worker admission, eviction), as the scenario does."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes_asyncio import client as k8s_client

from multikueue.clusters.inventory import FROM_PROFILE, FROM_SELECTOR, INVENTORY_LABEL, MAX_CLUSTERS
from multikueue.kube.addresses import ADMISSION_CHECKS, CLUSTER_PROFILES, MULTIKUEUE_CLUSTERS, MULTIKUEUE_CONFIGS
from multikueue.kube.client import ApiClient, api_client_from_kubeconfig
from multikueue.kube.resources import Objects
from multikueue.process import Process
from multikueue_testbed import TestBed, crds, kueue
from multikueue_testbed.accounts import mint_service_account_kubeconfig
from multikueue_testbed.client import k8s
from multikueue_testbed.dispatcher import running
from multikueue_testbed.profiles import profile_status, put_cluster_profile, write_credentials
from multikueue_testbed.waiting import eventually
from tests.integration.scenario import CONTROLLER, Scenario
from tests.integration.test_chart import _comparable, _template, helm
from tests.integration.test_cluster_profiles import PROVIDER, access_config, plugin
from tests.integration.test_manifests import CONFIG, SYSTEM, kubectl

__all__ = ["helm", "plugin"]  # fixtures, used by name

Object = dict[str, Any]
LOST_TIMEOUT = 5.0  # workerLostTimeout here: a run on a worker that left waits this long
WORKERS = ("worker1", "worker2")


class Fleet:
    """One test's inventory: ClusterProfiles for the bed's workers in the test's namespace, and a dispatcher whose
    ``dispatcher.inventory`` selects them (by a label naming the test) and keeps one MultiKueueConfig by selector."""

    def __init__(self, s: Scenario, plugin: Path, credentials: dict[str, Path]) -> None:
        self.s, self.ns, self.plugin, self.credentials = s, s.namespace, plugin, credentials
        self.api = s.api["manager"]
        self.profiles = Objects(self.api, CLUSTER_PROFILES)
        self.clusters = Objects(self.api, MULTIKUEUE_CLUSTERS)
        self.configs = Objects(self.api, MULTIKUEUE_CONFIGS)
        self.config_name = f"{self.ns}-fleet"

    def config(self, *, selected: Object | None = None) -> str:
        document = yaml.safe_load(access_config(self.plugin, self.plugin.parent / "access-plugin.log"))
        document["multiKueue"].update(gcInterval="2s", workerLostTimeout=f"{LOST_TIMEOUT:g}s",
                                      externalFrameworks=[{"name": "PipelineRun.v1.tekton.dev"}])  # fmt: skip
        document["dispatcher"] = {
            "namespace": self.ns, "eventsBatchPeriod": "100ms", "workerClient": {"timeout": "3s"},
            "inventory": {
                "clusterProfiles": {"selector": {"matchLabels": {"inventory-test": self.ns}}},
                "multiKueueConfigs": [{"name": self.config_name, "clusterSelector": selected or {
                    "matchLabels": {"inventory-test": self.ns}, "matchExpressions": [
                        {"key": "pool", "operator": "In", "values": ["batch"]}]}}],
            },
        }  # fmt: skip
        return yaml.safe_dump(document)

    def cluster_name(self, worker: str) -> str:
        return f"{self.ns}-{worker}"  # the profile's name, so the MultiKueueCluster's: unique per test

    async def publish(self, worker: str, **labels: str) -> None:
        """The inventory publishing the worker as a ClusterProfile with ``labels`` (its status: the bed's cluster)."""
        status = profile_status(PROVIDER, self.s.bed.cluster(worker),
                                extension={"credentials": str(self.credentials[worker])})  # fmt: skip
        await put_cluster_profile(self.api, self.ns, self.cluster_name(worker), status)
        await self.label(worker, **labels)

    async def label(self, worker: str, **labels: str | None) -> None:
        await self.profiles.patch(self.cluster_name(worker), {"metadata": {"labels": labels}}, self.ns)

    async def cluster(self, worker: str, until: Any, what: str, timeout: float = 30) -> Object | None:
        found: Object | None = await eventually(
            lambda: self.clusters.get(self.cluster_name(worker)), until=until, timeout=timeout, what=what
        )
        return found

    async def listed(self, *workers: str, timeout: float = 30) -> Object:
        """Wait until the MultiKueueConfig lists exactly these workers' clusters (sorted), and return it."""
        wanted = sorted(self.cluster_name(w) for w in workers)
        config = await eventually(
            lambda: self.configs.get(self.config_name), timeout=timeout, what=f"{self.config_name} lists {wanted}",
            until=lambda c: c is not None and c["spec"]["clusters"] == wanted,
        )  # fmt: skip
        assert config is not None
        return config

    async def connected(self, worker: str) -> None:
        self.s.names[worker] = self.cluster_name(worker)
        await self.s.connected(worker, True)


async def _events(api: ApiClient, namespace: str, name: str) -> list[Any]:
    listed = await k8s_client.CoreV1Api(k8s(api)).list_namespaced_event(namespace)
    return [e for e in listed.items if e.involved_object.name == name]


async def _told(api: ApiClient, namespace: str, name: str, reason: str) -> Any:
    found = await eventually(lambda: _events(api, namespace, name), timeout=30, what=f"{reason} on {name}",
                             until=lambda events: any(e.reason == reason for e in events))  # fmt: skip
    return next(e for e in found if e.reason == reason)


@contextlib.asynccontextmanager
async def _fleet(testbed: TestBed, namespace: str, apis: dict[str, ApiClient], plugin: tuple[Path, Path],
                 tmp_path: Path, *, selected: Object | None = None) -> AsyncIterator[Fleet]:  # fmt: skip
    """The dispatcher running with the inventory, the admission check naming its MultiKueueConfig; everything
    cluster-scoped the test leaves is deleted after it."""
    s = Scenario(testbed, namespace, apis["manager"], apis["worker1"], apis["worker2"])
    credentials = {w: write_credentials(tmp_path / f"{w}.json", testbed.cluster(w)) for w in WORKERS}
    fleet = Fleet(s, plugin[0], credentials)
    s.names = {"check": f"{namespace}-ac"}
    checks = Objects(fleet.api, ADMISSION_CHECKS)
    await checks.create({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": s.names["check"]},
        "spec": {"controllerName": CONTROLLER, "parameters": {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig",
                                                              "name": fleet.config_name}},
    })  # fmt: skip
    try:
        async with running(fleet.api, fleet.config(selected=selected), temp_dir=tmp_path / "certs") as process:
            s.manager = process
            yield fleet
    finally:
        await checks.delete(s.names["check"])
        await fleet.configs.delete(fleet.config_name)
        for worker in WORKERS:
            await fleet.clusters.delete(fleet.cluster_name(worker))


@pytest.fixture
def apis(manager_api: ApiClient, worker1_api: ApiClient, worker2_api: ApiClient) -> dict[str, ApiClient]:
    return {"manager": manager_api, "worker1": worker1_api, "worker2": worker2_api}


async def test_profiles_become_workers_and_the_selector_keeps_the_multikueueconfig(
    testbed: TestBed, namespace: str, apis: dict[str, ApiClient], plugin: tuple[Path, Path], tmp_path: Path
) -> None:
    async with _fleet(testbed, namespace, apis, plugin, tmp_path) as f:
        s = f.s
        # A profile the selector matches: its MultiKueueCluster, named after it, with its labels, and connected
        # through the access provider; the MultiKueueConfig made for it.
        await f.publish("worker1", **{"inventory-test": namespace, "pool": "batch", "region": "eu"})
        made = await f.cluster("worker1", lambda c: c is not None, "worker1's MultiKueueCluster")
        assert made is not None
        assert made["metadata"]["labels"] == {
            "inventory-test": namespace, "pool": "batch", "region": "eu",
            "x-k8s.io/cluster-manager": "multikueue-tests", INVENTORY_LABEL: FROM_PROFILE,
        }  # fmt: skip
        assert made["spec"]["clusterSource"] == {"clusterProfileRef": {"name": f.cluster_name("worker1")}}
        await f.connected("worker1")
        config = await f.listed("worker1")
        assert config["metadata"]["labels"] == {INVENTORY_LABEL: FROM_SELECTOR}

        await f.publish("worker2", **{"inventory-test": namespace, "pool": "batch"})
        await f.connected("worker2")
        await f.listed("worker1", "worker2")

        # The profile's labels change: its MultiKueueCluster's follow, and so does the list (no run is on it).
        await f.label("worker1", pool="gpu", region=None)
        relabelled = await f.cluster("worker1", lambda c: c["metadata"]["labels"].get("pool") == "gpu", "pool=gpu")
        assert relabelled is not None
        assert "region" not in relabelled["metadata"]["labels"]
        await f.listed("worker2")
        await f.label("worker1", pool="batch")
        await f.listed("worker1", "worker2")

        # Runs go to the workers the inventory made, as to any.
        _, workload = await s.submit("from-the-inventory")
        await s.copied(workload["metadata"]["name"], "worker1", "worker2")

        # No longer selected: its MultiKueueCluster goes, and the list follows. None left: the list made here goes
        # (Kueue's schema has no empty list).
        await f.label("worker2", **{"inventory-test": None})
        await f.cluster("worker2", lambda c: c is None, "worker2's MultiKueueCluster deleted")
        await f.listed("worker1")
        await f.label("worker1", pool="gpu")
        await eventually(lambda: f.configs.get(f.config_name), until=lambda c: c is None, timeout=30,
                         what="the MultiKueueConfig made here deleted once nothing matches")  # fmt: skip
        assert await f.clusters.get(f.cluster_name("worker1")) is not None  # still a worker, in no list


async def test_a_profile_that_goes_takes_its_worker_and_a_run_there_waits_worker_lost_timeout_then_moves(
    testbed: TestBed, namespace: str, apis: dict[str, ApiClient], plugin: tuple[Path, Path], tmp_path: Path
) -> None:
    async with _fleet(testbed, namespace, apis, plugin, tmp_path) as f:
        s = f.s
        await _all_in_pool(f, namespace)
        await f.listed(*WORKERS)
        _, workload = await s.submit("stays")
        wl = workload["metadata"]["name"]
        await s.copied(wl, *WORKERS)
        await kueue.admit(s.api["worker1"], wl, namespace)
        await s.check_state(wl, state="Ready", message=f'The workload was admitted on "{f.cluster_name("worker1")}"')
        await s.wait(s.runs("worker1"), "stays", lambda r: r is not None, "the run on worker1")

        # worker1's profile is deleted: its MultiKueueCluster is kept while the run is recorded there (deleted, the
        # run would be retried at once while its copy ran on), unable to reach it without its profile; it stays
        # listed too, so the run waits workerLostTimeout as on any lost worker, then is retried.
        deleted_at = time.monotonic()
        await f.profiles.delete(f.cluster_name("worker1"), namespace)
        await f.cluster("worker1", lambda c: _active_reason(c) == "BadClusterProfile", "worker1 kept, unreachable")
        config = await f.listed(*WORKERS)
        await s.check_state(wl, state="Retry", message='Admitting remote lost, Previously: "Ready"')
        assert time.monotonic() - deleted_at >= LOST_TIMEOUT, "retried before workerLostTimeout"

        # Kueue answers Retry by evicting (the recorded worker cleared): the list lets worker1 go, and the run, given
        # quota again, goes to the worker left.
        current = await s.get(s.workloads("manager"), wl)
        conditions = [{**c, "status": "False", "reason": "Pending"} if c["type"] == "QuotaReserved" else c
                      for c in current["status"]["conditions"]]  # fmt: skip
        checks = [{**c, "state": "Pending", "message": 'Reset to Pending after eviction. Previously: "Retry"'}
                  for c in current["status"]["admissionChecks"]]  # fmt: skip
        await s.workloads("manager").patch_status(
            wl,
            {"status": {"conditions": conditions, "admissionChecks": checks, "admission": None, "clusterName": None}},
            namespace,
        )
        await f.listed("worker2")
        assert config["metadata"]["uid"] == (await f.listed("worker2"))["metadata"]["uid"]  # kept, not remade
        await f.cluster("worker1", lambda c: c is None, "worker1's MultiKueueCluster deleted once no run is there")
        await kueue.reserve_quota(s.api["manager"], wl, namespace, checks=[s.names["check"]])
        await s.wait(s.workloads("worker2"), wl, lambda w: w is not None, "the copy on worker2")
        await kueue.admit(s.api["worker2"], wl, namespace)
        await s.check_state(wl, state="Ready", message=f'The workload was admitted on "{f.cluster_name("worker2")}"')
        await s.wait(s.runs("worker2"), "stays", lambda r: r is not None, "the run moved to worker2")


async def test_a_multikueuecluster_written_by_hand_is_left_alone_and_the_profile_says_so(
    testbed: TestBed, namespace: str, apis: dict[str, ApiClient], plugin: tuple[Path, Path], tmp_path: Path
) -> None:
    clusters = Objects(apis["manager"], MULTIKUEUE_CLUSTERS)
    mine = {
        "apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "MultiKueueCluster",
        "metadata": {"name": f"{namespace}-worker1", "labels": {"team": "a"}},
        "spec": {"clusterSource": {"kubeConfig": {"location": "worker1-kubeconfig", "locationType": "Secret"}}},
    }
    await clusters.create(mine)  # fmt: skip
    # Twenty-one more clusters for one list: Kueue's CRD takes twenty, the rest is said on the MultiKueueConfig.
    crowd = [f"{namespace}-crowd-{i:02}" for i in range(MAX_CLUSTERS + 1)]
    for name in crowd:
        await clusters.create({**mine, "metadata": {"name": name, "labels": {"crowd": namespace}}})
    try:
        async with _fleet(testbed, namespace, apis, plugin, tmp_path,
                          selected={"matchLabels": {"crowd": namespace}}) as f:  # fmt: skip
            await f.publish("worker1", **{"inventory-test": namespace, "pool": "batch"})
            told = await _told(f.api, namespace, f.cluster_name("worker1"), "MultiKueueClusterExists")
            assert told.type == "Warning"
            assert told.involved_object.kind == "ClusterProfile"
            assert told.message.startswith(f'MultiKueueCluster "{f.cluster_name("worker1")}" exists and was not made '
                                           "from this ClusterProfile: it is left alone")  # fmt: skip
            untouched = await clusters.get(f.cluster_name("worker1"))
            assert untouched is not None
            assert untouched["metadata"]["labels"] == {"team": "a"}
            assert untouched["spec"] == mine["spec"]

            config = await eventually(lambda: f.configs.get(f.config_name), until=lambda c: c is not None,
                                      timeout=30, what="the crowd's MultiKueueConfig")  # fmt: skip
            assert config is not None
            assert config["spec"]["clusters"] == crowd[:MAX_CLUSTERS]
            over = await _told(f.api, "default", f.config_name, "TooManyClusters")
            assert over.message.endswith(f"left out ['{crowd[-1]}']"), over.message

            # The name freed, the profile gets its worker.
            await clusters.delete(f.cluster_name("worker1"))
            made = await f.cluster("worker1", lambda c: c is not None and made_here(c), "made once the name is free")
            assert made is not None
            assert made["spec"]["clusterSource"] == {"clusterProfileRef": {"name": f.cluster_name("worker1")}}
    finally:
        for name in [f"{namespace}-worker1", *crowd]:
            await clusters.delete(name)
    # The limit is Kueue's: the CRD installed on the bed says it.
    (crd,) = [c for c in crds.kueue_crds() if c["metadata"]["name"] == "multikueueconfigs.kueue.x-k8s.io"]
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["clusters"]
    assert (schema["minItems"], schema["maxItems"]) == (1, MAX_CLUSTERS)


def made_here(cluster: Object) -> bool:
    return bool((cluster["metadata"].get("labels") or {}).get(INVENTORY_LABEL) == FROM_PROFILE)


async def test_the_shipped_inventory_rbac_is_exactly_enough_and_the_chart_grants_the_same(
    testbed: TestBed, namespace: str, manager_api: ApiClient, plugin: tuple[Path, Path], tmp_path: Path,
    helm: Path,
) -> None:  # fmt: skip
    """As the shipped ServiceAccount with config/manager and config/manager/inventory.yaml: a profile in the
    controller's namespace gets its MultiKueueCluster and its MultiKueueConfig, both gone with the profile."""
    chart = await _template(helm, "--set", "inventory.enabled=true")
    shipped = {(d["kind"], d["metadata"]["name"]): d
               for d in yaml.safe_load_all((CONFIG / "manager" / "inventory.yaml").read_text())}  # fmt: skip
    for key, doc in shipped.items():
        assert _comparable(chart[key]) == _comparable(doc), key
    assert ("ClusterRole", "multikueue-controller-inventory") not in await _template(helm)

    await kubectl(testbed, "manager", "apply", "--server-side", "-k", str(CONFIG / "manager"))
    await kubectl(testbed, "manager", "apply", "--server-side", "-f", str(CONFIG / "manager" / "inventory.yaml"))
    identity = await mint_service_account_kubeconfig(manager_api, testbed.cluster("manager"), namespace=SYSTEM,
                                                     name="multikueue-controller")  # fmt: skip
    profile, config = f"{namespace}-rbac", f"{namespace}-rbac"
    credentials = write_credentials(tmp_path / "worker1.json", testbed.cluster("worker1"))
    document = yaml.safe_load(access_config(plugin[0], plugin[1]))
    document["dispatcher"] = {
        "namespace": SYSTEM,
        "inventory": {
            "clusterProfiles": {"selector": {"matchLabels": {"inventory-test": namespace}}},
            "multiKueueConfigs": [{"name": config, "clusterSelector": {"matchLabels": {"inventory-test": namespace}}}],
        },
    }
    clusters, configs = Objects(manager_api, MULTIKUEUE_CLUSTERS), Objects(manager_api, MULTIKUEUE_CONFIGS)
    status = profile_status(PROVIDER, testbed.cluster("worker1"), extension={"credentials": str(credentials)})
    await put_cluster_profile(manager_api, SYSTEM, profile, status)
    await Objects(manager_api, CLUSTER_PROFILES).patch(profile, {"metadata": {"labels": {"inventory-test": namespace}}},
                                                       SYSTEM)  # fmt: skip
    try:
        async with (
            await api_client_from_kubeconfig(identity, temp_dir=tmp_path) as restricted,
            running(restricted, yaml.safe_dump(document), temp_dir=tmp_path / "certs") as process,
        ):
            assert isinstance(process, Process)
            await eventually(lambda: configs.get(config), timeout=30, what="the MultiKueueConfig made as the account",
                             until=lambda c: c is not None and c["spec"]["clusters"] == [profile])  # fmt: skip
            made = await clusters.get(profile)
            assert made is not None
            assert made_here(made)
            await Objects(manager_api, CLUSTER_PROFILES).delete(profile, SYSTEM)
            await eventually(lambda: clusters.get(profile), until=lambda c: c is None, timeout=30,
                             what="the MultiKueueCluster deleted as the ServiceAccount")  # fmt: skip
            await eventually(lambda: configs.get(config), until=lambda c: c is None, timeout=30,
                             what="the MultiKueueConfig deleted as the ServiceAccount")  # fmt: skip
            controller = process.generation.inventory_controller
            assert controller.errors == 0, "a write was refused: the shipped rules are not enough"
    finally:
        await Objects(manager_api, CLUSTER_PROFILES).delete(profile, SYSTEM)
        await clusters.delete(profile)
        await configs.delete(config)


def _active_reason(cluster: Any) -> str:
    conditions = ((cluster or {}).get("status") or {}).get("conditions") or []
    return str(next((c.get("reason") for c in conditions if c.get("type") == "Active"), ""))


async def _all_in_pool(f: Any, namespace: str) -> None:
    """Every worker's profile published in this test's pool, each worker connected."""
    for worker in WORKERS:
        await f.publish(worker, **{"inventory-test": namespace, "pool": "batch"})
        await f.connected(worker)
