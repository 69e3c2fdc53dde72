"""The local multi-cluster test bed, reusable by the test suite, the e2e suite, the demo and the benchmarks.

from multikueue_testbed import TestBed
with TestBed() as bed:                  # builds or finds the binaries, starts etcd + 3 kube-apiservers
    bed.cluster("worker1").kubeconfig   # admin kubeconfig (a dict)
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from multikueue_testbed.binaries import (
        KUBERNETES_VERSION,
        Binaries,
        BinariesUnavailable,
        BuildFailed,
        find_binaries,
    )
    from multikueue_testbed.testbed import CLUSTERS, MANAGER, WORKERS, Cluster, TestBed, TestBedError

_BINARIES = ("KUBERNETES_VERSION", "Binaries", "BinariesUnavailable", "BuildFailed", "find_binaries")
_TESTBED = ("CLUSTERS", "MANAGER", "WORKERS", "Cluster", "TestBed", "TestBedError")
_HOMES = {**dict.fromkeys(_BINARIES, "binaries"), **dict.fromkeys(_TESTBED, "testbed")}


def __getattr__(name: str) -> Any:
    """The test bed is imported on first use: the controller's command line reads a constant of ``binaries`` and
    must not load the bed's PKI (cryptography, ~10 MiB resident) for it."""
    if name in _HOMES:
        return getattr(importlib.import_module(f"multikueue_testbed.{_HOMES[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
