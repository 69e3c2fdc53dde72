"""The ``multikueue`` command line: process wiring only, no domain logic."""

from __future__ import annotations

import argparse
import importlib.util
import signal
import sys
import threading
from collections.abc import Awaitable, Callable, Sequence
from types import FrameType
from typing import Any

from multikueue import __version__
from multikueue.shutdown import DEFAULT_SHUTDOWN_DELAY, drain_delay


def _access_flags(parser: argparse.ArgumentParser) -> None:
    """The manager, the workers (through their Secrets, or the user's own kubeconfigs) and the dispatcher's
    configuration, for the commands that read a fleet with the user's own access."""
    parser.add_argument("--kubeconfig", help="kubeconfig of the manager cluster (default: $KUBECONFIG)")
    parser.add_argument("--context", help="context in --kubeconfig")
    parser.add_argument("--secrets-namespace", default="multikueue-system",
                        help="where the workers' kubeconfig Secrets are")  # fmt: skip
    parser.add_argument("--worker-kubeconfig", action="append", default=[], metavar="WORKER=PATH",
                        help="read this worker with your own kubeconfig instead of its Secret")  # fmt: skip
    parser.add_argument("--config-file", help="the dispatcher's configuration (default: its ConfigMap)")
    parser.add_argument("--config-namespace", default="multikueue-system", help="namespace of the ConfigMap")
    parser.add_argument("--config-name", default="multikueue-config", help="name of the ConfigMap")
    parser.add_argument("--config-key", default="controller_manager_config.yaml", help="key in the ConfigMap")


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="multikueue",
        description="Dispatch job-like custom objects from a Kueue manager cluster to worker clusters.",
    )
    parser.add_argument("--version", action="version", version=f"multikueue {__version__}")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    run = commands.add_parser("run", help="run the dispatcher against a manager cluster")
    run.add_argument("--kubeconfig", help="kubeconfig of the manager cluster (default: in-cluster, else $KUBECONFIG)")
    run.add_argument("--context", help="context in --kubeconfig")
    run.add_argument(
        "--max-connections",
        type=_at_least_one,
        help="connections kept open to the manager's API server (HTTP/1.1: one per request in flight; default 100); "
        "to workers: workerClient.maxConnections",
    )
    source = run.add_mutually_exclusive_group()
    source.add_argument("--config-file", help="read the configuration from this file instead of a ConfigMap")
    run.add_argument("--config-namespace", default="multikueue-system", help="namespace of the ConfigMap")
    run.add_argument("--config-name", default="multikueue-config", help="name of the ConfigMap")
    run.add_argument("--config-key", default="controller_manager_config.yaml", help="key in the ConfigMap")
    run.add_argument(
        "--metrics-bind-address",
        default="127.0.0.1:8443",
        help="host:port serving /metrics, over HTTPS to callers allowed 'get' on /metrics ('' to disable; "
        "0.0.0.0:8443 in a pod)",
    )
    run.add_argument(
        "--metrics-secure",
        type=_boolean,
        nargs="?",
        const=True,
        default=True,
        metavar="true|false",
        help="HTTPS, and only for callers whose bearer token the API server authenticates (TokenReview) and RBAC "
        "allows get on /metrics (SubjectAccessReview); false: plain HTTP to anyone, for local development only",
    )
    run.add_argument(
        "--metrics-cert-dir",
        help="directory with tls.crt and tls.key for /metrics (read again when they change); default: a "
        "self-signed certificate generated at start",
    )
    run.add_argument(
        "--http-address",
        help=argparse.SUPPRESS,  # before metrics moved to HTTPS: refused in one line naming its two successors
    )
    run.add_argument(
        "--health-probe-bind-address",
        default="127.0.0.1:8081",
        help="host:port serving /healthz and /readyz in plain HTTP ('' to disable; 0.0.0.0:8081 in a pod)",
    )
    run.add_argument("--leader-elect", action="store_true", help="reconcile only while holding a Lease (replicas > 1)")
    run.add_argument("--leader-elect-namespace", default="multikueue-system", help="namespace of the Lease")
    run.add_argument("--leader-elect-name", default="multikueue-dispatcher", help="name of the Lease")
    run.add_argument("--leader-elect-identity", default=None, help="this replica's identity (default: host name)")
    run.add_argument("--lease-duration", type=int, default=15, help="seconds a standby waits before taking over")
    run.add_argument("--renew-deadline", type=float, default=10.0, help="seconds the leader has to renew")
    run.add_argument("--retry-period", type=float, default=2.0, help="seconds between lease attempts")
    run.add_argument(
        "--role",
        default="manager",
        choices=["manager", "worker"],
        help="manager: dispatch (and integrate); worker: only the integrations of the configured kinds",
    )
    run.add_argument(
        "--shutdown-delay",
        type=_seconds,
        default=DEFAULT_SHUTDOWN_DELAY,
        metavar="SECONDS",
        help="after SIGTERM, seconds to keep answering the admission webhook while unready, so the API server "
        "stops calling this replica before it closes (default %(default)s; keep it under the Pod's "
        "terminationGracePeriodSeconds)",
    )
    run.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    run.add_argument("--log-format", default="auto", choices=["auto", "json", "console"])

    adapter = commands.add_parser("adapter", help="per-kind adapter tools")
    adapter_commands = adapter.add_subparsers(dest="adapter_command", metavar="ACTION", required=True)
    check = adapter_commands.add_parser(
        "check",
        help="render the worker copy, spec sync and status mapping of one object, offline, and explain every error",
    )
    check.add_argument("--config", required=True, help="the configuration document (as in the ConfigMap)")
    check.add_argument("--object", required=True, help="the manager object (YAML or JSON)")
    check.add_argument("--worker", help="the worker's copy as it is now (to see the status mapping and predicates)")

    explain = commands.add_parser("explain", help="why a direct-mode object is where it is (or waits)")
    explain.add_argument("--kubeconfig", help="kubeconfig of the manager cluster (default: $KUBECONFIG)")
    explain.add_argument("--context", help="context in --kubeconfig")
    explain.add_argument("--kind", required=True, help="the kind as configured, e.g. PipelineRun.v1.tekton.dev")
    explain.add_argument("object", metavar="NAMESPACE/NAME")
    explain.add_argument("-o", "--output", choices=("text", "json"), default="text",
                         help="text (default) or json (a RunStatus document)")  # fmt: skip

    status = commands.add_parser(
        "status",
        help="one run across clusters: its Workload, the workers it may go to, their Kueue, its events, why it waits",
    )
    status.add_argument("kind", metavar="KIND", help="the kind as configured, e.g. PipelineRun.v1.tekton.dev")
    status.add_argument("object", metavar="NAMESPACE/NAME")
    status.add_argument("-o", "--output", choices=("text", "json"), default="text",
                        help="text (default) or json (a RunStatus document)")  # fmt: skip
    status.add_argument("--kubeconfig", help="kubeconfig of the manager cluster (default: $KUBECONFIG)")
    status.add_argument("--context", help="context in --kubeconfig")
    status.add_argument(
        "--secrets-namespace",
        default="multikueue-system",
        help="where the workers' kubeconfig Secrets are (the configuration's dispatcher.namespace; default: "
        "multikueue-system). Workers are read only if your own credentials may read those Secrets",
    )
    status.add_argument(
        "--worker-kubeconfig",
        action="append",
        default=[],
        metavar="WORKER=PATH",
        help="read this worker (its MultiKueueCluster name) with your own kubeconfig instead of its Secret; repeatable",
    )

    logs_command = commands.add_parser("logs", help="a run's pod logs, from the worker it runs on")
    logs_command.add_argument("kind", metavar="KIND", help="the kind as configured, e.g. PipelineRun.v1.tekton.dev")
    logs_command.add_argument("object", metavar="NAMESPACE/NAME")
    logs_command.add_argument(
        "-f",
        "--follow",
        action="store_true",
        help="keep streaming: until the containers end; with the kind's logs shape, until the run ends",
    )
    logs_command.add_argument("-c", "--container", help="only this container of each pod")
    logs_command.add_argument(
        "--task", help="only this part of the run (a PipelineRun's task: the kind's logs.groupLabel)"
    )
    logs_command.add_argument("--prefix", type=_flag, nargs="?", const=True, default=None, metavar="BOOL",
                              help="prefix each line with where it comes from ([task : step] with the kind's logs "
                                   "shape); --prefix=false: bare lines")  # fmt: skip
    logs_command.add_argument(
        "--selector",
        help="the run's pods on the worker, a label selector ({name}, {namespace} filled in); default: the kind's "
        "podSelector in the dispatcher's configuration",
    )
    _access_flags(logs_command)

    workers = commands.add_parser(
        "workers", help="the fleet: each worker's connection, credential expiry, kinds served and ClusterQueues"
    )
    workers.add_argument("-o", "--output", choices=("text", "json"), default="text", help="text (default) or json")
    _access_flags(workers)

    demo = commands.add_parser(
        "demo", help="three local clusters, the shipped manifests, and one PipelineRun dispatched end to end"
    )
    demo.add_argument("--once", action="store_true", help="exit (removing everything) when the story is told")
    demo.add_argument(
        "--mode",
        choices=["direct", "kueue"],
        default="direct",
        help="direct: the dispatcher places the run itself, no Kueue part played (default); kueue: MultiKueue's "
        "Workload flow, with the demo playing Kueue's part",
    )

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
        choices=OPTIONAL_KUBERNETES_COMMANDS,  # kept in step with multikueue_testbed.binaries (a unit test)
        help="also build this optional program (repeatable)",
    )
    return parser


OPTIONAL_KUBERNETES_COMMANDS = ("kube-controller-manager", "kube-scheduler", "kubelet", "kubeadm", "kube-proxy")
"""What ``testbed binaries --extra`` may build (multikueue_testbed.binaries's list, kept equal by a unit test: the
controller's CLI imports nothing of the test bed until a test-bed command runs)."""


def _without_test_bed(command: str) -> str | None:
    """The one line for a test-bed command where the test bed (its own distribution) is not installed, or ``None``."""
    if importlib.util.find_spec("multikueue_testbed") is not None:
        return None
    return (
        f"multikueue: `multikueue {command}` needs the local test bed, the multikueue-testbed distribution: "
        "pip install ./testbed (from a checkout of the repository)"
    )


def _raise_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt  # SIGTERM ends the run like Ctrl-C: finally blocks stop every server


def _testbed_binaries(extra: Sequence[str]) -> int:
    from multikueue_testbed.binaries import find_binaries

    found = find_binaries(extra=extra)
    print(f"{found.directory} ({found.source}): {found.version()}")
    return 0


def _testbed_up(once: bool, install: bool) -> int:

    from multikueue_testbed import crds
    from multikueue_testbed.testbed import TestBed

    with TestBed() as bed:
        if install:
            print("[testbed] installing Kueue's and Tekton's CRDs from the Go module cache", file=sys.stderr)
            crds.install_on_bed(bed)
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


async def _until_signalled(work: Callable[[], Awaitable[None]], on_signal: Callable[[], None] = lambda: None
                           ) -> int | None:  # fmt: skip
    """Run ``work`` until it returns (None) or SIGTERM/SIGINT arrives (the signal's number).

    The signal cancels ``work``, so its shielded clean-up (worker clients, the Lease) runs before the process
    exits, as a pod's termination grace period expects; ``on_signal`` is called first, at once (readiness fails).
    """
    import anyio

    signalled: int | None = None
    async with anyio.create_task_group() as tg:

        async def watch() -> None:
            nonlocal signalled
            with anyio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                async for signum in signals:
                    print(f"multikueue: {signal.Signals(signum).name} received; stopping", file=sys.stderr)
                    signalled = signum
                    on_signal()
                    tg.cancel_scope.cancel()
                    return

        tg.start_soon(watch)
        await work()
        tg.cancel_scope.cancel()
    return signalled


def _adapter_check(config_path: str, object_path: str, worker_path: str | None) -> int:
    """Exit 0 when the object would dispatch cleanly, 1 when the report lists problems, 2 on unreadable input."""
    from pathlib import Path

    import yaml

    from multikueue.commands.adapter_check import check
    from multikueue.config import ConfigError, parse_configuration

    try:
        config = parse_configuration(Path(config_path).read_text(), source=f"file {config_path}")
    except (OSError, ConfigError) as e:
        print(f"multikueue adapter check: {e}", file=sys.stderr)
        return 2
    documents = {}
    for what, path in (("object", object_path), ("worker object", worker_path)):
        if path is None:
            continue
        try:
            documents[what] = yaml.safe_load(Path(path).read_text())
        except (OSError, yaml.YAMLError) as e:
            print(f"multikueue adapter check: cannot read the {what} {path}: {e}", file=sys.stderr)
            return 2
    report = check(config, documents["object"], documents.get("worker object"))
    print(report.render(), end="")
    return 1 if report.problems else 0


def _manager_kubeconfig(command: str, args: argparse.Namespace) -> tuple[Any, str, str] | None:
    """(kubeconfig, namespace, name) from the flags, or ``None`` after one line on stderr naming what is wrong."""
    namespace, _, name = args.object.rpartition("/")
    if not namespace or not name:
        print(f"multikueue {command}: give the object as NAMESPACE/NAME, got {args.object!r}", file=sys.stderr)
        return None
    kubeconfig = _read_manager_kubeconfig(command, args)
    return (kubeconfig, namespace, name) if kubeconfig is not None else None


def _read_manager_kubeconfig(command: str, args: argparse.Namespace) -> Any | None:
    """``--kubeconfig``, else $KUBECONFIG, else ~/.kube/config; ``None`` after one line on stderr."""
    import os
    from pathlib import Path

    from multikueue.kube.errors import KubeconfigError
    from multikueue.kube.kubeconfig import read_kubeconfig

    path = args.kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
    try:
        return read_kubeconfig(path)
    except KubeconfigError as e:
        print(f"multikueue {command}: {e}", file=sys.stderr)
        return None


def _worker_kubeconfigs(values: list[str]) -> dict[str, Any]:
    """``WORKER=PATH`` flags → kubeconfig documents by worker; ``ValueError`` naming the flag and value."""
    from pathlib import Path

    import yaml

    from multikueue.clusters.worker_kubeconfig import validate_kubeconfig

    found = {}
    for value in values:
        worker, sep, path = value.partition("=")
        if not sep or not worker or not path:
            raise ValueError(f"--worker-kubeconfig: give WORKER=PATH, got {value!r}")
        try:
            found[worker] = validate_kubeconfig(Path(path).read_text())
        except (OSError, ValueError, yaml.YAMLError) as e:
            raise ValueError(f"--worker-kubeconfig {value}: {e}") from None
    return found


def _run_on_a_run(
    command: str, args: argparse.Namespace, body: Callable[[Any, Any, str, str, Any], Awaitable[int]]
) -> int:
    """``status`` and ``logs``: the flags read (one line and exit 2 when bad), ``body(api, gvk, namespace, name,
    worker_kubeconfigs)`` run against the manager, a failure said in one line (exit 1)."""
    from multikueue.kube.addresses import GroupVersionKind

    try:  # the flags first, then the files they name: one line for the first problem, never two
        gvk = GroupVersionKind.parse(args.kind)
        workers = _worker_kubeconfigs(args.worker_kubeconfig)
    except ValueError as e:
        print(f"multikueue {command}: {e}", file=sys.stderr)
        return 2
    found = _manager_kubeconfig(command, args)
    if found is None:
        return 2
    kubeconfig, namespace, name = found
    return _on_the_manager(command, kubeconfig, args.context, lambda api: body(api, gvk, namespace, name, workers))


def _on_the_manager(command: str, kubeconfig: Any, context: str | None,
                    body: Callable[[Any], Awaitable[int]]) -> int:  # fmt: skip
    """``body(api)`` against the manager; a failure said in one line (exit 2 for the kubeconfig, else 1)."""
    import anyio

    from multikueue.kube.client import api_client_from_kubeconfig
    from multikueue.kube.errors import KubeconfigError, KubeError, describe

    async def main() -> int:
        async with await api_client_from_kubeconfig(kubeconfig, context=context) as api:
            return await body(api)

    try:
        return anyio.run(main)
    except KubeconfigError as e:
        print(f"multikueue {command}: cannot use the manager kubeconfig: {e}", file=sys.stderr)
        return 2
    except LookupError as e:
        print(f"multikueue {command}: {e}", file=sys.stderr)
        return 1
    except KubeError as e:  # refused, unanswered, or no credential from the kubeconfig's plugin: one line
        print(f"multikueue {command}: {describe(e)}", file=sys.stderr)
        return 1


def _status(args: argparse.Namespace) -> int:
    import json

    from multikueue.commands import status

    async def body(api: Any, gvk: Any, namespace: str, name: str, workers: Any) -> int:
        view = await status.gather(api, gvk, namespace, name, args.secrets_namespace, workers)
        print(json.dumps(status.as_json(view), indent=2) if args.output == "json" else status.render(view))
        return 0 if view.obj is not None else 1

    return _run_on_a_run("status", args, body)


def _flag(value: str) -> bool:
    """A kubectl-style boolean flag value (``--prefix=false``)."""
    if value.lower() in ("true", "1", "yes"):
        return True
    if value.lower() in ("false", "0", "no"):
        return False
    raise argparse.ArgumentTypeError(f"{value!r} is not true or false")


async def _pod_selector(api: Any, args: argparse.Namespace, gvk: Any) -> tuple[str, Any]:
    """``--selector``, else the kind's ``podSelector`` in the dispatcher's configuration (file or ConfigMap); and the
    kind's ``logs`` shape there (none when the configuration is not read or names none)."""
    from multikueue.commands.logs import LogsUnavailable

    where = args.config_file or f"ConfigMap {args.config_namespace}/{args.config_name}"
    try:
        adapter = (await _configuration(api, args)).adapter(gvk)
    except Exception as e:  # unreadable, absent or invalid: the same answer, naming where and why
        if args.selector and not args.task:
            return str(args.selector), None
        raise LogsUnavailable(f"no pod selector: cannot read the configuration ({where}): {e}; give --selector") from e
    if args.task and adapter.logs is None:
        raise LogsUnavailable(f"--task {args.task}: {args.kind} has no logs shape (logs.groupLabel) in the "
                              f"configuration ({where})")  # fmt: skip
    selector = args.selector or adapter.pod_selector
    if not selector:
        raise LogsUnavailable(f"no podSelector for {args.kind} in the configuration ({where}); give --selector")
    return str(selector), adapter.logs


def _logs(args: argparse.Namespace) -> int:
    from multikueue.commands import logs, status

    async def body(api: Any, gvk: Any, namespace: str, name: str, workers: Any) -> int:
        selector, shape = await _pod_selector(api, args, gvk)

        async def gather() -> Any:
            return await status.gather(api, gvk, namespace, name, args.secrets_namespace, workers)

        request = logs.Request(namespace, name, selector, args.container, args.follow, shape=shape, part=args.task,
                               prefix=args.prefix)  # fmt: skip
        await logs.stream(api, await gather(), request, lambda line: print(line, flush=True), workers,
                          args.secrets_namespace, refresh=gather)  # fmt: skip
        return 0

    return _run_on_a_run("logs", args, body)


async def _configuration(api: Any, args: argparse.Namespace) -> Any:
    """The dispatcher's configuration: ``--config-file``, else its ConfigMap on the manager."""
    import anyio

    from multikueue.config import parse_configuration
    from multikueue.kube import core

    if args.config_file:
        text = await anyio.Path(args.config_file).read_text()
    else:
        text = (await core.config_map_data(api, args.config_namespace, args.config_name))[args.config_key]
    return parse_configuration(text)


async def _configured_kinds(api: Any, args: argparse.Namespace) -> list[Any]:
    """The kinds in the dispatcher's configuration (file or ConfigMap); none, said in one line, when unreadable."""
    where = args.config_file or f"ConfigMap {args.config_namespace}/{args.config_name}"
    try:
        return list((await _configuration(api, args)).multi_kueue.gvks)
    except Exception as e:  # unreadable, absent or invalid: the fleet is still shown, without its kinds
        print(f"multikueue workers: kinds not checked: cannot read the configuration ({where}): {e}", file=sys.stderr)
        return []


def _workers(args: argparse.Namespace) -> int:
    import json

    from multikueue.commands import workers

    try:
        given = _worker_kubeconfigs(args.worker_kubeconfig)
    except ValueError as e:
        print(f"multikueue workers: {e}", file=sys.stderr)
        return 2
    kubeconfig = _read_manager_kubeconfig("workers", args)
    if kubeconfig is None:
        return 2

    async def body(api: Any) -> int:
        fleet = await workers.gather(api, args.secrets_namespace, await _configured_kinds(api, args), given)
        print(json.dumps(workers.as_json(fleet), indent=2) if args.output == "json" else workers.render(fleet))
        return 0

    return _on_the_manager("workers", kubeconfig, args.context, body)


def _explain(args: argparse.Namespace) -> int:
    import json

    import anyio

    from multikueue.commands.explain import explain, explain_document
    from multikueue.kube.addresses import GroupVersionKind
    from multikueue.kube.client import api_client_from_kubeconfig
    from multikueue.kube.errors import KubeconfigError, KubeError, describe

    try:
        gvk = GroupVersionKind.parse(args.kind)
    except ValueError as e:
        print(f"multikueue explain: {e}", file=sys.stderr)
        return 2
    found = _manager_kubeconfig("explain", args)
    if found is None:
        return 2
    kubeconfig, namespace, name = found

    async def main() -> int:
        async with await api_client_from_kubeconfig(kubeconfig, context=args.context) as api:
            if args.output == "json":
                document = await explain_document(api, gvk, namespace, name)
                text, found = json.dumps(document, indent=2), document["manager"] is not None
            else:
                text, found = await explain(api, gvk, namespace, name)
        print(text)
        return 0 if found else 1

    try:
        return anyio.run(main)
    except KubeconfigError as e:
        print(f"multikueue explain: cannot use the kubeconfig: {e}", file=sys.stderr)
        return 2
    except KubeError as e:
        print(f"multikueue explain: {describe(e)}", file=sys.stderr)
        return 1
    except LookupError as e:  # -o json: the kind is not served on the manager
        print(f"multikueue explain: {e}", file=sys.stderr)
        return 1


def _run(args: argparse.Namespace) -> int:
    import os
    import socket
    from pathlib import Path

    import anyio

    from multikueue import logs
    from multikueue.config import ConfigError, parse_configuration
    from multikueue.endpoints import Serving
    from multikueue.kube.client import (
        DEFAULT_MAX_CONNECTIONS,
        api_client_from_kubeconfig,
        in_cluster_api_client,
    )
    from multikueue.kube.errors import ApiError, KubeconfigError, describe
    from multikueue.kube.kubeconfig import read_kubeconfig
    from multikueue.metrics import Metrics
    from multikueue.process import LeaderElectionSettings, Process, preflight
    from multikueue.reload import ConfigSource, StartupError, load_configuration

    logs.configure(level=args.log_level, json=None if args.log_format == "auto" else args.log_format == "json")

    # Files are read before the event loop starts: errors surface at once, and no async code blocks on disk.
    config = None
    if args.config_file:
        path = Path(args.config_file)
        try:
            config = parse_configuration(path.read_text(), source=f"file {path}")
        except (OSError, ConfigError) as e:
            print(f"multikueue: {e}", file=sys.stderr)
            return 2
    if args.leader_elect and not (
        args.retry_period >= 1 and 1.2 * args.retry_period < args.renew_deadline < args.lease_duration
    ):
        print(
            "multikueue: leader election needs --retry-period >= 1, --renew-deadline > 1.2 x --retry-period and "
            f"--lease-duration > --renew-deadline; got {args.retry_period}, {args.renew_deadline}, "
            f"{args.lease_duration}",
            file=sys.stderr,
        )
        return 2
    if args.http_address is not None:
        print("multikueue: --http-address is gone: /metrics is served over HTTPS on --metrics-bind-address (default "
              "127.0.0.1:8443) and the probes on --health-probe-bind-address (default 127.0.0.1:8081)",
              file=sys.stderr)  # fmt: skip
        return 2
    try:
        serving = Serving(
            metrics=_address("--metrics-bind-address", args.metrics_bind_address),
            health=_address("--health-probe-bind-address", args.health_probe_bind_address),
            secure=args.metrics_secure,
            cert_dir=Path(args.metrics_cert_dir) if args.metrics_cert_dir else None,
        )
    except ValueError as e:
        print(f"multikueue: {e}", file=sys.stderr)
        return 2
    kubeconfig_path = args.kubeconfig or os.environ.get("KUBECONFIG")
    kubeconfig = None
    if kubeconfig_path:
        try:
            kubeconfig = read_kubeconfig(kubeconfig_path)
        except KubeconfigError as e:
            print(f"multikueue: cannot read the manager kubeconfig: {e}", file=sys.stderr)
            return 2

    max_connections = args.max_connections or DEFAULT_MAX_CONNECTIONS

    async def main() -> int:
        nonlocal config
        metrics = Metrics()
        on_request, on_error = metrics.requests_to("manager")
        try:
            if kubeconfig is not None:
                api = await api_client_from_kubeconfig(
                    kubeconfig, context=args.context, max_connections=max_connections, on_request=on_request,
                    on_error=on_error,
                )  # fmt: skip
            else:
                api = await in_cluster_api_client(
                    max_connections=max_connections, on_request=on_request, on_error=on_error
                )
        except KubeconfigError as e:
            print(f"multikueue: cannot use the manager kubeconfig: {e}", file=sys.stderr)
            return 2
        async with api:
            await preflight(api, args.role)
            source = None
            if config is None:  # from the ConfigMap, which is then watched: valid changes apply without a restart
                source = ConfigSource(args.config_namespace, args.config_name, args.config_key)
                try:
                    config = await load_configuration(api, source.namespace, source.name, source.key)
                except ConfigError as e:
                    print(f"multikueue: {e}", file=sys.stderr)
                    return 2
                except ApiError as e:
                    raise StartupError(f"cannot read the configuration {source}: {describe(e)}") from None
            process = Process(api, config, serving=serving, config_source=source, role=args.role, metrics=metrics)
            election = LeaderElectionSettings(
                namespace=args.leader_elect_namespace,
                name=args.leader_elect_name,
                identity=args.leader_elect_identity or f"{socket.gethostname()}-{os.getpid()}",
                lease_duration=args.lease_duration,
                renew_deadline=args.renew_deadline,
                retry_period=args.retry_period,
            )
            work = (lambda: process.run_as_leader(election)) if args.leader_elect else process.run

            def unready() -> None:
                process.draining = True

            # The listeners outlive the controllers: after SIGTERM the webhook answers on through the drain delay.
            async with process.serving():
                try:
                    signalled = await _until_signalled(work, unready)
                except Exception:  # a failure ends the process: the webhook is drained all the same
                    if delay := drain_delay(None, process.webhook is not None, args.shutdown_delay):
                        with anyio.CancelScope(shield=True):
                            await process.drain(delay)
                    raise
                if delay := drain_delay(signalled, process.webhook is not None, args.shutdown_delay):
                    await process.drain(delay)
            if signalled is not None or not args.leader_elect:
                return 0
            # Losing the lease ends the process: a fresh start as standby is simpler and safer than resuming.
            print("multikueue: leader lease lost; exiting so another replica takes over", file=sys.stderr)
            return 1

    try:
        return anyio.run(main, backend_options={"use_uvloop": _uvloop()})
    except (StartupError, KubeconfigError, BaseExceptionGroup) as e:
        problem = _startup_failure(e)
        if problem is None:
            raise
        print(f"multikueue: {problem}", file=sys.stderr)
        return 2


def _uvloop() -> bool:
    """uvloop's event loop where it is installed (a dependency on Linux and macOS): its transports and TLS are C,
    where asyncio's are Python, a large part of this controller's CPU per request (bench/results/README.md)."""
    import importlib.util

    return importlib.util.find_spec("uvloop") is not None


def _startup_failure(error: BaseException) -> str | None:
    """The one line to print for a failure at start (task groups wrap it in exception groups), if it is one."""
    from multikueue.kube.errors import KubeconfigError
    from multikueue.reload import StartupError

    if isinstance(error, BaseExceptionGroup):
        return next((found for e in error.exceptions if (found := _startup_failure(e)) is not None), None)
    if isinstance(error, KubeconfigError):
        return f"cannot use the manager kubeconfig: {error}"
    return str(error) if isinstance(error, StartupError) else None


def _address(flag: str, value: str) -> tuple[str, int] | None:
    """``host:port`` (``[::1]:port`` for IPv6) from a flag, as controller-runtime reads it: ``:port`` is every
    interface, ``''`` and ``0`` are ``None`` (not served)."""
    if value in ("", "0"):
        return None
    host, colon, port = value.rpartition(":")
    host = host.removeprefix("[").removesuffix("]")
    if not colon or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"{flag} must be host:port or :port, got {value!r}")
    return host or "0.0.0.0", int(port)


def _boolean(text: str) -> bool:
    """``true`` or ``false`` (Go's flag spellings too: 1, 0, t, f), as controller flags are written."""
    value = text.strip().lower()
    if value in ("true", "t", "1"):
        return True
    if value in ("false", "f", "0"):
        return False
    raise argparse.ArgumentTypeError(f"not true or false: {text!r}")


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0 and 3600 seconds, got {text}")
    return value


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def main(argv: Sequence[str] | None = None) -> int:
    args = _build_parser().parse_args(argv)
    # Synchronous commands stop on SIGTERM as on Ctrl-C; `run` replaces this with its own handler once its
    # event loop is up (see _until_signalled).
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        if args.command == "run":
            return _run(args)
        if args.command == "adapter" and args.adapter_command == "check":
            return _adapter_check(args.config, args.object, args.worker)
        if args.command == "explain":
            return _explain(args)
        if args.command == "status":
            return _status(args)
        if args.command == "logs":
            return _logs(args)
        if args.command == "workers":
            return _workers(args)
        if args.command in ("demo", "testbed") and (missing := _without_test_bed(args.command)) is not None:
            print(missing, file=sys.stderr)
            return 2
        if args.command == "demo":
            from multikueue_testbed import demo as demo_module

            return demo_module.main(once=args.once, mode=args.mode)
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
