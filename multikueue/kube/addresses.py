"""Where things live on an API server: a kind's group, version and kind, and a resource's REST path.

Plain values with no I/O, so configuration, domain code and kube/ can all name a kind or resource without
reaching the client.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, order=True)
class GroupVersionKind:
    group: str
    version: str
    kind: str

    @classmethod
    def parse(cls, text: str) -> GroupVersionKind:
        """``Kind.version.group`` as Kueue's ``schema.ParseKindArg`` reads it (case kept; a group is required)."""
        parts = text.split(".", 2)
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"must be in 'Kind.version.group' format (e.g. PipelineRun.v1.tekton.dev), got {text!r}")
        kind, version, group = parts
        return cls(group=group, version=version, kind=kind)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}"

    def __str__(self) -> str:  # the key Kueue uses for adapters: schema.GroupVersionKind.String()
        return f"{self.group}/{self.version}, Kind={self.kind}"


@dataclass(frozen=True)
class Resource:
    group: str
    version: str
    plural: str
    kind: str
    namespaced: bool = True
    # Whether ``/status`` is a subresource (discovery tells). Without one (Argo's minimal Workflow CRD has
    # ``subresources: {}``) status is written through the object itself, and ``PATCH .../status`` is a 404.
    status_subresource: bool = True

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}/{self.version}" if self.group else f"{self.plural}/{self.version}"


KUEUE = "kueue.x-k8s.io"
WORKLOADS = Resource(KUEUE, "v1beta2", "workloads", "Workload")
ADMISSION_CHECKS = Resource(KUEUE, "v1beta2", "admissionchecks", "AdmissionCheck", namespaced=False)
MULTIKUEUE_CLUSTERS = Resource(KUEUE, "v1beta2", "multikueueclusters", "MultiKueueCluster", namespaced=False)
CLUSTER_QUEUES = Resource(KUEUE, "v1beta2", "clusterqueues", "ClusterQueue", namespaced=False)
MULTIKUEUE_CONFIGS = Resource(KUEUE, "v1beta2", "multikueueconfigs", "MultiKueueConfig", namespaced=False)
RESOURCE_FLAVORS = Resource(KUEUE, "v1beta2", "resourceflavors", "ResourceFlavor", namespaced=False)
# SIG-Multicluster's cluster inventory API (sigs.k8s.io/cluster-inventory-api), the version Kueue v0.19 reads.
CLUSTER_PROFILES = Resource("multicluster.x-k8s.io", "v1alpha1", "clusterprofiles", "ClusterProfile")
