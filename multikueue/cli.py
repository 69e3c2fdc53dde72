"""The ``multikueue`` command line: process wiring only, no domain logic."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from types import FrameType

from multikueue import __version__


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="multikueue",
        description="Dispatch job-like custom objects from a Kueue manager cluster to worker clusters.",
    )
    parser.add_argument("--version", action="version", version=f"multikueue {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    testbed = commands.add_parser("testbed", help="the local three-cluster Kubernetes test bed")
    testbed_commands = testbed.add_subparsers(dest="testbed_command", metavar="ACTION", required=True)
    up = testbed_commands.add_parser(
        "up", help="start etcd and three kube-apiservers (manager, worker1, worker2) with the CRDs installed"
    )
    up.add_argument("--once", action="store_true", help="print how to reach the clusters, then stop them and exit")
    up.add_argument("--no-crds", action="store_true", help="do not install Kueue's and Tekton's CRDs")
    binaries = testbed_commands.add_parser("binaries", help="find or build kube-apiserver, kubectl and etcd")
    binaries.add_argument(
        "--extra",
        action="append",
        default=[],
        choices=["kube-controller-manager", "kube-scheduler"],
        help="also build this optional program (repeatable)",
    )
    return parser


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the run like Ctrl-C: finally blocks stop every server


def _testbed_binaries(extra: Sequence[str]) -> int:
    from multikueue.testing.binaries import find_binaries

    found = find_binaries(extra=extra)
    print(f"{found.directory} ({found.source}): {found.version()}")
    return 0


def _testbed_up(once: bool, install: bool) -> int:
    import anyio

    from multikueue.kube.client import api_client_from_kubeconfig
    from multikueue.testing import crds
    from multikueue.testing.testbed import TestBed

    with TestBed() as bed:
        if install:
            print("[testbed] installing Kueue's and Tekton's CRDs from the Go module cache", file=sys.stderr)
            definitions = crds.all_crds()

            async def install_all() -> None:
                for cluster in bed.clusters.values():
                    async with await api_client_from_kubeconfig(cluster.kubeconfig) as api:
                        await crds.install_crds(api, definitions)

            anyio.run(install_all)
        print(f"\nThree clusters are running ({bed.binaries.version()}, etcd shared, one prefix each).")
        print(f"  export KUBECONFIG={bed.kubeconfig_path}")
        for cluster in bed.clusters.values():
            print(f"  {cluster.name:8} {cluster.url}   kubectl --context {cluster.name} get namespaces")
        if bed.binaries.kubectl:
            print(f"  kubectl is at {bed.binaries.kubectl}")
        if once:
            return 0
        print("\nPress Ctrl-C to stop them (everything is removed on exit).", flush=True)
        threading.Event().wait()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        if args.command == "testbed" and args.testbed_command == "up":
            return _testbed_up(args.once, not args.no_crds)
        if args.command == "testbed" and args.testbed_command == "binaries":
            return _testbed_binaries(args.extra)
    except KeyboardInterrupt:
        print("\ninterrupted; stopped.", file=sys.stderr)
        return 130
    _build_parser().print_help()
    return 0


if __name__ == "__main__":
    sys.exit(main())
