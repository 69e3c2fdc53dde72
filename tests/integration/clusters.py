"""The MultiKueueCluster harness: the controller in-process with its Secret namespace set to the test's namespace, and
the Active conditions it writes read back (``harness`` fixture)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
from kubernetes_asyncio import client as k8s_client

from multikueue.config import Configuration, parse_configuration
from multikueue.kube.addresses import ADMISSION_CHECKS, MULTIKUEUE_CLUSTERS, MULTIKUEUE_CONFIGS
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue.process import Process
from multikueue_testbed import TestBed, kueue
from multikueue_testbed.client import k8s
from multikueue_testbed.waiting import eventually


async def _listed(objects: Objects) -> list[dict[str, Any]]:
    r = objects.resource
    listed = await k8s_client.CustomObjectsApi(k8s(objects.api)).list_cluster_custom_object(
        r.group, r.version, r.plural
    )
    return list(listed["items"])


class Harness:
    def __init__(self, bed: TestBed, api: ApiClient, namespace: str) -> None:
        self.bed = bed
        self.api = api
        self.namespace = namespace
        self.clusters = Objects(api, MULTIKUEUE_CLUSTERS)
        self.checks = Objects(api, ADMISSION_CHECKS)
        self.configs = Objects(api, MULTIKUEUE_CONFIGS)
        self.core = k8s_client.CoreV1Api(k8s(api))
        self.manager: Process | None = None

    def name(self, short: str) -> str:
        return f"{self.namespace}-{short}"  # cluster-scoped objects: unique per test

    async def put_secret(self, short: str, kubeconfig: dict[str, Any] | str) -> None:
        await kueue.put_kubeconfig_secret(self.api, self.namespace, short, kubeconfig)

    async def add_cluster(self, short: str, secret: str) -> None:
        await self.clusters.create({
            "apiVersion": "kueue.x-k8s.io/v1beta2",
            "kind": "MultiKueueCluster",
            "metadata": {"name": self.name(short)},
            "spec": {"clusterSource": {"kubeConfig": {"location": secret, "locationType": "Secret"}}},
        })  # fmt: skip

    async def active(self, short: str, **expected: str) -> dict[str, Any]:
        """Wait until the cluster's Active condition has ``expected`` fields (message: a prefix)."""
        return await self._condition(self.clusters, self.name(short), expected)

    async def check_active(self, short: str, **expected: str) -> dict[str, Any]:
        return await self._condition(self.checks, self.name(short), expected)

    async def _condition(self, objects: Objects, name: str, expected: dict[str, str]) -> dict[str, Any]:
        def matches(obj: dict[str, Any] | None) -> bool:
            found = next(
                (c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == "Active"), None
            )
            if found is None:
                return False
            return all(
                str(found.get(k, "")).startswith(v) if k == "message" else found.get(k) == v
                for k, v in expected.items()
            )

        obj = await eventually(lambda: objects.get(name), until=matches, timeout=60, what=f"{name} Active {expected}")
        assert obj is not None
        return next(c for c in obj["status"]["conditions"] if c["type"] == "Active")


@pytest.fixture
async def harness(
    testbed: TestBed, manager_api: ApiClient, namespace: str, tmp_path: Path
) -> AsyncIterator[Callable[..., Any]]:
    """Start the controller in-process with its Secret namespace set to this test's namespace."""
    h = Harness(testbed, manager_api, namespace)
    async with anyio.create_task_group() as tg:

        async def start(extra: str = "", worker_client: str = "{timeout: 3s}") -> Harness:
            config: Configuration = parse_configuration(
                f"dispatcher: {{namespace: {namespace}, workerClient: {worker_client}}}\n{extra}"
            )
            h.manager = Process(manager_api, config, temp_dir=tmp_path / "certs")
            tg.start_soon(h.manager.run)
            with anyio.fail_after(30):
                await h.manager.started.wait()
            return h

        yield start
        tg.cancel_scope.cancel()
    for objects in (h.checks, h.configs, h.clusters):  # cluster-scoped: they would outlive the test
        for obj in await _listed(objects):
            if obj["metadata"]["name"].startswith(f"{namespace}-"):
                await objects.delete(obj["metadata"]["name"])
