"""pytest fixtures over the test bed; load with ``pytest_plugins = ["multikueue_testbed.fixtures"]``.

- ``testbed``: session-scoped, three clusters with Kueue's and Tekton's CRDs installed.
- ``manager_api``, ``worker1_api``, ``worker2_api``: one timed-out ``ApiClient`` per cluster and test.
- ``namespace``: a fresh namespace of the same name on every cluster, for one test.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.client.exceptions import ApiException

from multikueue.kube.client import ApiClient, api_client_from_kubeconfig
from multikueue_testbed import crds
from multikueue_testbed.client import k8s
from multikueue_testbed.testbed import TestBed


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="session")
def testbed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TestBed]:
    definitions = crds.all_crds()  # before the clusters start: a download error should not cost a bed start
    with TestBed() as bed:
        crds.install_on_bed(bed, definitions)
        yield bed


async def _client(bed: TestBed, name: str, tmp_path: Path) -> ApiClient:
    return await api_client_from_kubeconfig(bed.cluster(name).kubeconfig, temp_dir=tmp_path / "certs")


@pytest.fixture
async def manager_api(testbed: TestBed, tmp_path: Path) -> AsyncIterator[ApiClient]:
    async with await _client(testbed, "manager", tmp_path) as api:
        yield api


@pytest.fixture
async def worker1_api(testbed: TestBed, tmp_path: Path) -> AsyncIterator[ApiClient]:
    async with await _client(testbed, "worker1", tmp_path) as api:
        yield api


@pytest.fixture
async def worker2_api(testbed: TestBed, tmp_path: Path) -> AsyncIterator[ApiClient]:
    async with await _client(testbed, "worker2", tmp_path) as api:
        yield api


async def _gone(deletion: Awaitable[Any]) -> None:
    """A deletion that may find nothing to delete (no PipelineRun CRD on this cluster, the namespace gone)."""
    try:
        await deletion
    except ApiException as e:
        if e.status != 404:
            raise


@pytest.fixture
async def namespace(testbed: TestBed, tmp_path: Path, request: pytest.FixtureRequest) -> AsyncIterator[str]:
    """Created on every cluster before the test, deleted after it.

    The bed runs no namespace controller, so a deleted namespace stays ``Terminating`` with its objects; the
    unique name keeps tests apart all the same. Its PipelineRuns on the manager are deleted first: a later test's
    direct-mode dispatcher watches every namespace, and would place the ones left behind (loading a worker the test
    counts on).
    """
    stem = request.node.name.lower().replace("_", "-")
    name = f"{''.join(c for c in stem if c.isalnum() or c == '-')[:40].strip('-')}-{uuid.uuid4().hex[:6]}"
    clients = [await _client(testbed, c, tmp_path) for c in testbed.clusters]
    try:
        for api in clients:
            await k8s_client.CoreV1Api(k8s(api)).create_namespace(
                k8s_client.V1Namespace(metadata=k8s_client.V1ObjectMeta(name=name))
            )
        yield name
        # The manager's only: that is what a dispatcher watches (a worker's API server a test restarted may not
        # serve the CRD's paths again yet).
        manager = dict(zip(testbed.clusters, clients, strict=True))["manager"]
        await _gone(k8s_client.CustomObjectsApi(k8s(manager)).delete_collection_namespaced_custom_object(
            "tekton.dev", "v1", name, "pipelineruns"))  # fmt: skip
        for api in clients:
            await _gone(k8s_client.CoreV1Api(k8s(api)).delete_namespace(name))
    finally:
        for api in clients:
            await api.close()
