"""Workers kept from the cluster inventory beside real Kueue v0.19.2 (its ``MultiKueueClusterProfile`` gate on, the
real cluster-inventory ClusterProfile CRD): the MultiKueueClusters this dispatcher makes from ClusterProfiles are
connected by Kueue itself too, and the MultiKueueConfig it keeps by label selector is the list Kueue reads."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import yaml

from e2e.interop.conftest import ACCESS_PROVIDER, Fleet
from e2e.interop.test_real_kueue import (
    CONTROLLER,
    PIPELINERUNS,
    _agreed_active,
    _condition,
    _config,
    _controller,
    _get,
    _queues,
    _running_on_a_worker,
    _submit,
    namespace,
)
from multikueue.kube.addresses import ADMISSION_CHECKS, CLUSTER_PROFILES, MULTIKUEUE_CLUSTERS, MULTIKUEUE_CONFIGS
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue_testbed.interop import KUEUE_NAMESPACE
from multikueue_testbed.profiles import profile_status, put_cluster_profile, requests_logged
from multikueue_testbed.waiting import eventually

__all__ = ["namespace"]  # a fixture, used by name

Object = dict[str, Any]
WORKERS = ("worker1", "worker2")
KUEUE_MULTIKUEUE = "kueue.x-k8s.io/multikueue"


def _check(name: str, controller: str, config: str) -> Object:
    params = {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": config}
    return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "AdmissionCheck", "metadata": {"name": name},
            "spec": {"controllerName": controller, "parameters": params}}  # fmt: skip


async def _publish(api: ApiClient, fleet: Fleet, name: str, worker: str, labels: dict[str, str], *,
                   provider: str = ACCESS_PROVIDER, mark: str = "") -> None:  # fmt: skip
    """A ClusterProfile in Kueue's namespace, as an inventory publishes it; ``mark`` reaches the access plugin (in
    the profile's exec extension), so its log tells this test's connections from the others'."""
    extension = {"credentials": str(fleet.credentials[worker]), "inventory": mark}
    await put_cluster_profile(api, KUEUE_NAMESPACE, name, profile_status(provider, fleet.bed.cluster(worker),
                                                                          extension=extension))  # fmt: skip
    await Objects(api, CLUSTER_PROFILES).patch(name, {"metadata": {"labels": labels}}, KUEUE_NAMESPACE)


@contextlib.asynccontextmanager
async def _inventory(clients: dict[str, ApiClient], namespace: str, fleet: Fleet,
                     tmp_path: Path) -> AsyncIterator[dict[str, str]]:  # fmt: skip
    """Queues everywhere, this dispatcher's AdmissionCheck and one of Kueue's own on the same MultiKueueConfig (the
    latter on no ClusterQueue: only its Active condition is read), and this dispatcher with the inventory on."""
    api = clients["manager"]
    names = {"check": f"{namespace}-ac", "kueue-check": f"{namespace}-kueue-ac", "config": f"{namespace}-fleet"}
    await _queues(api, namespace, check=names["check"])
    for worker in WORKERS:
        await _queues(clients[worker], namespace, check=None)
    checks = Objects(api, ADMISSION_CHECKS)
    await checks.create(_check(names["check"], CONTROLLER, names["config"]))
    await checks.create(_check(names["kueue-check"], KUEUE_MULTIKUEUE, names["config"]))
    document = yaml.safe_load(_config("integration", access_provider=fleet.access_provider))
    document["dispatcher"]["inventory"] = {
        "clusterProfiles": {"selector": {"matchLabels": {"inventory-test": namespace}}},
        "multiKueueConfigs": [{"name": names["config"], "clusterSelector": {
            "matchLabels": {"inventory-test": namespace}, "matchExpressions": [{"key": "pool", "operator": "In",
                                                                                 "values": ["batch"]}]}}],
    }  # fmt: skip
    text = yaml.safe_dump(document)
    try:
        async with contextlib.AsyncExitStack() as stack:
            await stack.enter_async_context(_controller(api, text, "manager", tmp_path / "m"))
            for worker in WORKERS:
                await stack.enter_async_context(_controller(clients[worker], text, "worker", tmp_path / worker))
            yield names
    finally:
        for name in (names["check"], names["kueue-check"]):
            await checks.delete(name)
        for short in (*WORKERS, "nowhere"):
            await Objects(api, CLUSTER_PROFILES).delete(f"{namespace}-{short}", KUEUE_NAMESPACE)
            await Objects(api, MULTIKUEUE_CLUSTERS).delete(f"{namespace}-{short}")
        await Objects(api, MULTIKUEUE_CONFIGS).delete(names["config"])


async def _kueues_check(api: ApiClient, name: str, **expected: str) -> Object:
    """Kueue's own AdmissionCheck reconciler's verdict on the list (its Active condition), once it says ``expected``."""
    check = await eventually(lambda: Objects(api, ADMISSION_CHECKS).get(name), timeout=60, what=f"{name} {expected}",
                             until=lambda c: expected.items() <= _condition(c, "Active").items())  # fmt: skip
    return _condition(check, "Active")


async def test_kueue_connects_the_workers_made_from_profiles_and_uses_the_list_kept_by_selector(
    clients: dict[str, ApiClient], namespace: str, fleet: Fleet, tmp_path: Path
) -> None:
    api = clients["manager"]
    async with _inventory(clients, namespace, fleet, tmp_path) as names:
        made = {w: f"{namespace}-{w}" for w in WORKERS}
        for worker in WORKERS:
            await _publish(api, fleet, made[worker], worker, {"inventory-test": namespace, "pool": "batch"},
                           mark=namespace)  # fmt: skip
        # Made here, connected by both controllers (True, Kueue's reason), Kueue through the access plugin itself.
        await _agreed_active(api, made)
        log = Path(str(fleet.access_provider["execConfig"]["env"][0]["value"]))  # type: ignore[index]

        def kueues(requests: list[Object]) -> set[str]:
            clusters = [r["spec"]["cluster"] for r in requests if r["runBy"] == "kueue"]
            return {c["server"] for c in clusters if (c.get("config") or {}).get("inventory") == namespace}

        async def logged() -> list[Object]:
            return requests_logged(log)

        servers = {fleet.bed.cluster(w).url for w in WORKERS}
        await eventually(logged, until=lambda r: kueues(r) == servers, timeout=60,
                         what="Kueue's own connections through the profiles")  # fmt: skip

        # The list kept by selector is Kueue's: its own AdmissionCheck on it finds both clusters active.
        config = await eventually(lambda: Objects(api, MULTIKUEUE_CONFIGS).get(names["config"]), timeout=30,
                                  until=lambda c: c is not None and c["spec"]["clusters"] == sorted(made.values()),
                                  what="the MultiKueueConfig listing both")  # fmt: skip
        assert config is not None
        assert await _kueues_check(api, names["kueue-check"], status="True", reason="Active")

        # A profile no configured provider can reach joins the list; Kueue reads it there, inactive. It goes, and
        # the list and Kueue's verdict follow.
        nowhere = f"{namespace}-nowhere"
        await _publish(api, fleet, nowhere, "worker1", {"inventory-test": namespace, "pool": "batch"},
                       provider="someone-else")  # fmt: skip
        verdict = await _kueues_check(api, names["kueue-check"], reason="SomeActiveClusters")
        assert verdict["message"] == f"Inactive clusters: [{nowhere}]", verdict
        await Objects(api, CLUSTER_PROFILES).delete(nowhere, KUEUE_NAMESPACE)
        await eventually(lambda: Objects(api, MULTIKUEUE_CLUSTERS).get(nowhere), until=lambda c: c is None,
                         timeout=30, what="its MultiKueueCluster deleted with it")  # fmt: skip
        await _kueues_check(api, names["kueue-check"], status="True", reason="Active")

        # A run through real Kueue's quota and this dispatcher's check, to a worker the inventory made.
        _, wl = await _submit(clients, namespace, "inventoried", "integration")
        worker = await _running_on_a_worker(clients, namespace, "inventoried", wl)
        done = await eventually(lambda: _get(api, PIPELINERUNS, "inventoried", namespace), timeout=120,
                                until=lambda r: _condition(r, "Succeeded").get("status") == "True",
                                what="Tekton's Succeeded on the manager object")  # fmt: skip
        assert done["status"]["childReferences"][0]["kind"] == "TaskRun"
        assert worker in WORKERS
