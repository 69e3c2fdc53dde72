"""The local multi-cluster test bed, reusable by the test suite, the e2e suite, the demo and the benchmarks.

from multikueue.testing import TestBed
with TestBed() as bed:                  # builds or finds the binaries, starts etcd + 3 kube-apiservers
    bed.cluster("worker1").kubeconfig   # admin kubeconfig (a dict)
"""

from multikueue.testing.binaries import (
    KUBERNETES_VERSION,
    Binaries,
    BinariesUnavailable,
    BuildFailed,
    find_binaries,
)
from multikueue.testing.testbed import CLUSTERS, MANAGER, WORKERS, Cluster, TestBed, TestBedError

__all__ = [
    "CLUSTERS",
    "KUBERNETES_VERSION",
    "MANAGER",
    "WORKERS",
    "Binaries",
    "BinariesUnavailable",
    "BuildFailed",
    "Cluster",
    "TestBed",
    "TestBedError",
    "find_binaries",
]
