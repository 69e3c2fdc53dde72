"""The interop profile (#9) on a test bed of its own: on every cluster kube-controller-manager, kube-scheduler, kwok
(a fake node whose pods go Ready, then Succeeded) and real Kueue; the Tekton controller on both workers. Each is
built from its Go module and cached; where one cannot be built or started the run stops, naming it.

Opt-in (``make interop``, also run by CI); the first run builds everything (~30 min on 2 cores), later runs reuse it.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import anyio
import pytest
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.client.exceptions import ApiException

from multikueue.kube.client import ApiClient, api_client_from_kubeconfig
from multikueue.pki import CertificateAuthority
from multikueue_testbed import crds
from multikueue_testbed.binaries import find_binaries
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.interop import (
    TEKTON_NAMESPACE,
    ClusterRuntime,
    ComponentUnavailable,
    KueueProcess,
    fake_node,
    kueue_binary,
    kwok_binary,
    kwok_stages,
    tekton_binary,
    tekton_config_maps,
    tekton_kueue_binary,
)
from multikueue_testbed.profiles import PLUGIN_API_VERSION, write_credentials, write_plugin
from multikueue_testbed.testbed import TestBed

WORKERS = ("worker1", "worker2")
COMPLETE_AFTER_MS = 8000  # a TaskRun's pod runs this long: long enough to cancel a run in flight


def _progress(message: str) -> None:
    sys.stderr.write(f"[interop] {message}\n")
    sys.stderr.flush()


@dataclass
class Fleet:
    bed: TestBed
    kueues: dict[str, KueueProcess]
    runtimes: dict[str, ClusterRuntime]
    tekton_kueue: Path
    # The ClusterProfile access provider both the manager's Kueue and this dispatcher are configured with (Kueue's
    # `multiKueue.clusterProfile.accessProviders` entry), and the worker credential file each profile names.
    access_provider: dict[str, object] = field(default_factory=dict)
    credentials: dict[str, Path] = field(default_factory=dict)


ACCESS_PROVIDER = "interop-inventory"


def _access(fleet: Fleet, root: Path) -> None:
    """An exec access provider (a script) and each worker's credential: the manager's Kueue runs with the
    MultiKueueClusterProfile gate on and this provider, so a ClusterProfile reaches a worker for it as for us."""
    plugin, log = write_plugin(root / "access")
    fleet.access_provider = {
        "name": ACCESS_PROVIDER,
        "execConfig": {"apiVersion": PLUGIN_API_VERSION, "command": str(plugin), "args": [],
                       "env": [{"name": "PLUGIN_LOG", "value": str(log)}], "interactiveMode": "Never",
                       "provideClusterInfo": True},
    }  # fmt: skip
    for worker in WORKERS:
        fleet.credentials[worker] = write_credentials(root / "access" / f"{worker}.json", fleet.bed.cluster(worker))


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


async def _ensure(create: object, body: dict[str, object], *args: str) -> None:
    try:
        await create(*args, raw_body(body))  # type: ignore[operator]
    except ApiException as e:
        if e.status != 409:
            raise


async def _prepare(bed: TestBed, fleet: Fleet, ca: CertificateAuthority, root: Path) -> None:
    for name in bed.clusters:
        async with await api_client_from_kubeconfig(bed.cluster(name).kubeconfig, temp_dir=root) as api:
            core = k8s_client.CoreV1Api(k8s(api))
            await _ensure(core.create_node, fake_node())
            if name in WORKERS:
                await _ensure(core.create_namespace, {"metadata": {"name": TEKTON_NAMESPACE}})
                for config_map in tekton_config_maps():
                    await _ensure(core.create_namespaced_config_map, config_map, TEKTON_NAMESPACE)
            await fleet.kueues[name].install(api, ca, ["PipelineRun.v1.tekton.dev"])


@pytest.fixture(scope="session")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    try:
        kueue, kwok, tekton = kueue_binary(_progress), kwok_binary(_progress), tekton_binary(_progress)
        tekton_kueue = tekton_kueue_binary(_progress)
        binaries = find_binaries(extra=("kube-controller-manager", "kube-scheduler"), progress=_progress)
    except ComponentUnavailable as e:
        pytest.exit(f"interop profile: {e}", returncode=3)
    # The ClusterProfile CRD before Kueue starts: Kueue looks for it once, at start-up, to watch ClusterProfiles.
    definitions = crds.all_kueue_crds() + crds.all_tekton_crds() + [crds.cluster_profile_crd()]
    root = tmp_path_factory.mktemp("interop")
    with TestBed(binaries) as bed:
        crds.install_on_bed(bed, definitions)
        fleet = Fleet(bed, {}, {}, tekton_kueue)
        _access(fleet, root)
        stages = kwok_stages(COMPLETE_AFTER_MS)
        try:
            for name in bed.clusters:
                runtime = ClusterRuntime(bed.cluster(name), root / name)
                fleet.runtimes[name] = runtime
                runtime.start_control_plane(binaries.path("kube-controller-manager"), binaries.path("kube-scheduler"))
                runtime.start_kwok(kwok, stages)
                fleet.kueues[name] = KueueProcess(bed.cluster(name), kueue, root / name / "kueue")
                if name not in WORKERS:  # the manager: workers may be reached through ClusterProfiles
                    fleet.kueues[name].feature_gates = ("MultiKueueClusterProfile=true",)
                    fleet.kueues[name].extra = {"multiKueue": {"clusterProfile": {
                        "accessProviders": [fleet.access_provider]}}}  # fmt: skip
            anyio.run(_prepare, bed, fleet, CertificateAuthority("interop-webhooks"), root)
            for name in WORKERS:
                fleet.runtimes[name].start_tekton(tekton)
            for kueue_process in fleet.kueues.values():
                kueue_process.wait_ready()
            for runtime in fleet.runtimes.values():
                runtime.check()
            _progress(
                f"ready: Kueue {crds.KUEUE_VERSION} on {', '.join(bed.clusters)}; Tekton {crds.TEKTON_VERSION} on "
                f"{', '.join(WORKERS)}; kube-controller-manager, kube-scheduler and kwok everywhere"
            )
            yield fleet
        finally:
            for kueue_process in fleet.kueues.values():
                kueue_process.stop()
            for runtime in fleet.runtimes.values():
                runtime.stop()


@pytest.fixture
async def clients(fleet: Fleet, tmp_path: Path) -> AsyncIterator[dict[str, ApiClient]]:
    opened = {name: await api_client_from_kubeconfig(fleet.bed.cluster(name).kubeconfig, temp_dir=tmp_path)
              for name in fleet.bed.clusters}  # fmt: skip
    try:
        yield opened
    finally:
        for api in opened.values():
            await api.close()
