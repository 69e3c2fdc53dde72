"""Kueue's and Tekton's real CRDs, read from the Go module cache at test time and installed on the test bed.

Nothing upstream is committed: ``go mod download`` fetches the release's module (it carries the YAML) into the
Go module cache, which later runs reuse.

Without the upstream webhooks there is no conversion between API versions, so a multi-version CRD is installed
with its storage version only: serving the others with strategy ``None`` would hand out unconverted objects
(Kueue's v1beta1 MultiKueueCluster has a different shape from v1beta2).
"""

from __future__ import annotations

import copy
import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.client.exceptions import ApiException

from multikueue.kube.client import ApiClient, api_client_from_kubeconfig
from multikueue_testbed.client import k8s, raw_body

if TYPE_CHECKING:
    from multikueue_testbed.testbed import Cluster, TestBed

KUEUE_MODULE = "sigs.k8s.io/kueue"
KUEUE_VERSION = "v0.19.2"
TEKTON_MODULE = "github.com/tektoncd/pipeline"
TEKTON_VERSION = "v1.15.0"

KUEUE_CRD_FILES = (
    "workloads",
    "admissionchecks",
    "multikueueclusters",
    "multikueueconfigs",
    "clusterqueues",
    "localqueues",
    "resourceflavors",
    "workloadpriorityclasses",
)
TEKTON_CRD_FILES = ("300-pipelinerun.yaml",)


class CRDSourceUnavailable(RuntimeError):
    """The module holding the CRDs could not be fetched."""


@dataclass(frozen=True)
class ModuleSource:
    module: str
    version: str

    def directory(self) -> Path:
        """The module's directory in the Go module cache, downloading it if needed."""
        go = shutil.which("go")
        if go is None:
            raise CRDSourceUnavailable(
                f"the CRDs come from the Go module {self.module}@{self.version}, and `go` is not on PATH: "
                "install Go >= 1.25 (https://go.dev/dl)"
            )
        proc = subprocess.run(
            [go, "mod", "download", "-json", f"{self.module}@{self.version}"],
            capture_output=True,
            text=True,
            timeout=600,
            env={**os.environ, "GOWORK": "off", "GOFLAGS": "-mod=mod"},
            cwd=Path.home(),
        )
        info = json.loads(proc.stdout) if proc.stdout.strip() else {}
        if proc.returncode != 0 or "Error" in info or "Dir" not in info:
            reason = info.get("Error") or proc.stderr.strip()
            raise CRDSourceUnavailable(f"cannot download {self.module}@{self.version}: {reason}")
        return Path(info["Dir"])


KUEUE = ModuleSource(KUEUE_MODULE, KUEUE_VERSION)
TEKTON = ModuleSource(TEKTON_MODULE, TEKTON_VERSION)

# Kinds this project ships no code for, configured only through configuration lines in the tests (and in
# docs/configuration.md's recipes): their real CRDs, from their Go modules.
JOBSET = ModuleSource("sigs.k8s.io/jobset", "v0.10.1")
KUBERAY = ModuleSource("github.com/ray-project/kuberay/ray-operator", "v1.4.2")
ARGO_WORKFLOWS = ModuleSource("github.com/argoproj/argo-workflows/v3", "v3.7.4")
MPI_OPERATOR = ModuleSource("github.com/kubeflow/mpi-operator", "v0.8.2")
# SIG-Multicluster's cluster inventory API, at the version Kueue v0.19.2 pins: ClusterProfiles.
CLUSTER_INVENTORY = ModuleSource("sigs.k8s.io/cluster-inventory-api", "v0.1.3")
FOREIGN_CRD_FILES = {
    "JobSet": (JOBSET, "config/components/crd/bases/jobset.x-k8s.io_jobsets.yaml"),
    "RayJob": (KUBERAY, "config/crd/bases/ray.io_rayjobs.yaml"),
    "RayCluster": (KUBERAY, "config/crd/bases/ray.io_rayclusters.yaml"),  # Kueue's RayJob integration watches it
    "MPIJob": (MPI_OPERATOR, "manifests/base/kubeflow.org_mpijobs.yaml"),
    # Argo's default install: the minimal CRD (no schema, no /status subresource).
    "Workflow": (ARGO_WORKFLOWS, "manifests/base/crds/minimal/argoproj.io_workflows.yaml"),
}


def foreign_crd(kind: str) -> dict[str, Any]:
    """The upstream CRD of one of ``FOREIGN_CRD_FILES``' kinds, installable as the others are."""
    source, path = FOREIGN_CRD_FILES[kind]
    (crd,) = _load([source.directory() / path])
    return prepare_crd(crd)


def cluster_profile_crd() -> dict[str, Any]:
    """``clusterprofiles.multicluster.x-k8s.io``, from the cluster inventory API's module."""
    (crd,) = _load([CLUSTER_INVENTORY.directory() / "config/crd/bases/multicluster.x-k8s.io_clusterprofiles.yaml"])
    return prepare_crd(crd)


def prepare_crd(crd: dict[str, Any]) -> dict[str, Any]:
    """Make an upstream CRD installable without its webhooks: no conversion stanza, storage version only."""
    crd = copy.deepcopy(crd)
    spec = crd["spec"]
    spec.pop("conversion", None)
    if len(spec["versions"]) > 1:
        storage = [v for v in spec["versions"] if v.get("storage")]
        if len(storage) != 1:
            raise ValueError(f"CRD {crd['metadata']['name']} has {len(storage)} storage versions, expected 1")
        spec["versions"] = storage
    for key in ("creationTimestamp", "annotations"):
        crd["metadata"].pop(key, None)
    crd.pop("status", None)
    return crd


def _load(paths: Iterable[Path]) -> list[dict[str, Any]]:
    docs: list[dict[str, Any]] = []
    for path in paths:
        docs.extend(
            d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "CustomResourceDefinition"
        )
    return docs


def kueue_crds() -> list[dict[str, Any]]:
    bases = KUEUE.directory() / "config" / "components" / "crd" / "bases"
    return [prepare_crd(d) for d in _load(bases / f"kueue.x-k8s.io_{n}.yaml" for n in KUEUE_CRD_FILES)]


def all_kueue_crds() -> list[dict[str, Any]]:
    """Every CRD real Kueue watches (the interop profile; the default bed needs only ``KUEUE_CRD_FILES``)."""
    bases = KUEUE.directory() / "config" / "components" / "crd" / "bases"
    return [prepare_crd(d) for d in _load(sorted(bases.glob("kueue.x-k8s.io_*.yaml")))]


def tekton_crds() -> list[dict[str, Any]]:
    crds = TEKTON.directory() / "config" / "300-crds"
    return [prepare_crd(d) for d in _load(crds / n for n in TEKTON_CRD_FILES)]


def all_tekton_crds() -> list[dict[str, Any]]:
    """Every Tekton Pipelines CRD (the interop profile runs the Tekton controller, which watches them all)."""
    return [prepare_crd(d) for d in _load(sorted((TEKTON.directory() / "config" / "300-crds").glob("*.yaml")))]


def all_crds() -> list[dict[str, Any]]:
    return kueue_crds() + tekton_crds()


async def install_crds(api: ApiClient, crds: Sequence[dict[str, Any]], *, timeout: float = 60.0) -> None:
    """Create or replace each CRD, then wait until every one is ``Established`` and its objects can be listed.

    ``Established`` comes before the resource's storage is initialized (lists answer 429 "storage is
    (re)initializing" for a moment), so the wait ends on a successful list.
    """
    ext = k8s_client.ApiextensionsV1Api(k8s(api))
    for crd in crds:
        name = crd["metadata"]["name"]
        try:
            await ext.create_custom_resource_definition(body=raw_body(crd))
        except ApiException as e:
            if e.status != 409:
                raise
            current = await ext.read_custom_resource_definition(name)
            body = {
                **crd,
                "metadata": {**crd["metadata"], "resourceVersion": current.metadata.resource_version},
            }
            await ext.replace_custom_resource_definition(name, body=raw_body(body))
    with anyio.fail_after(timeout):
        for crd in crds:
            name = crd["metadata"]["name"]
            while True:
                current = await ext.read_custom_resource_definition(name)
                conditions = current.status.conditions or [] if current.status else []
                if any(c.type == "Established" and c.status == "True" for c in conditions):
                    break
                await anyio.sleep(0.1)
            spec = crd["spec"]
            version = next(v["name"] for v in spec["versions"] if v.get("storage"))
            objects = k8s_client.CustomObjectsApi(k8s(api))
            while True:
                try:
                    await objects.list_cluster_custom_object(spec["group"], version, spec["names"]["plural"], limit=1)
                    break
                except ApiException as e:
                    if e.status not in (404, 429, 503):
                        raise
                await anyio.sleep(0.1)


async def remove_crd(api: ApiClient, crd: dict[str, Any]) -> None:
    """Delete a CRD a test installed (its objects go with it); one already gone is fine."""
    try:
        await k8s_client.ApiextensionsV1Api(k8s(api)).delete_custom_resource_definition(crd["metadata"]["name"])
    except ApiException as e:
        if e.status != 404:
            raise


def install_on_bed(bed: TestBed, definitions: Sequence[dict[str, Any]] | None = None) -> None:
    """Install CRDs (by default Kueue's and Tekton's) on every cluster of a running test bed."""
    install_on_clusters(bed.clusters.values(), definitions)


def install_on_clusters(clusters: Iterable[Cluster], definitions: Sequence[dict[str, Any]] | None = None) -> None:
    """Install CRDs (by default Kueue's and Tekton's) on each cluster, as its admin."""
    chosen = list(definitions) if definitions is not None else all_crds()

    async def install() -> None:
        for cluster in clusters:
            async with await api_client_from_kubeconfig(cluster.kubeconfig) as api:
                await install_crds(api, chosen)

    anyio.run(install)
