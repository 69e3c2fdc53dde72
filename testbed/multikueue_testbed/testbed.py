"""A real three-cluster Kubernetes control plane on 127.0.0.1: one etcd, one kube-apiserver per cluster.

Each cluster has its own port, etcd prefix, service-account issuer and signing key, so objects, RBAC and tokens
are as separate as on real clusters. What is absent on purpose: nodes, kubelets and controllers (no namespace
deletion, no garbage collection, no pods running); this is the envtest model Kueue's own integration suite uses.
"""

from __future__ import annotations

import base64
import http.client
import json
import os
import random
import shutil
import signal
import socket
import ssl
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

import yaml

from multikueue.pki import CertificateAuthority, KeyPair, signing_key
from multikueue_testbed import processes
from multikueue_testbed.binaries import Binaries, find_binaries

MANAGER = "manager"
WORKERS = ("worker1", "worker2")
CLUSTERS = (MANAGER, *WORKERS)
WORKDIR_PREFIX = "multikueue-testbed-"
Progress = Callable[[str], None]


class TestBedError(RuntimeError):
    """The test bed could not start or a server misbehaved; the message carries the server's log tail."""

    __test__ = False  # not a pytest test class


def _stderr_progress(message: str) -> None:
    print(f"[testbed] {message}", file=sys.stderr, flush=True)


_HANDED_OUT: set[int] = set()


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port() -> int:
    """A port free on 127.0.0.1 for a server started next, below the kernel's ephemeral range: a port the kernel
    hands out (``bind(0)``) may be taken by any client's outgoing connection before the server binds it, and was
    (Kueue's health probe refused with "address already in use"). None is handed out twice by this process."""
    low, _ = _ephemeral_range()
    candidates = [p for p in range(max(1024, low - 12000), low) if p not in _HANDED_OUT]
    if not candidates:  # a long session handed out every one: those servers are long gone or bound
        _HANDED_OUT.clear()
        candidates = list(range(max(1024, low - 12000), low))
    random.shuffle(candidates)
    for port in candidates[:200]:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError(f"no free port on 127.0.0.1 below the ephemeral range ({low})")


@dataclass
class Cluster:
    """One kube-apiserver: how to reach it as admin, and the process behind it."""

    name: str
    port: int
    directory: Path
    ca_pem: bytes
    admin: KeyPair
    process: processes.ManagedProcess | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig_path(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def kubeconfig(self) -> dict[str, Any]:
        """An admin (system:masters) kubeconfig with inline credentials."""
        return kubeconfig_document(
            self.name,
            self.url,
            ca_pem=self.ca_pem,
            user={
                "client-certificate-data": _b64(self.admin.cert_pem),
                "client-key-data": _b64(self.admin.key_pem),
            },
        )

    def ssl_context(self) -> ssl.SSLContext:
        """TLS to this API server as its admin: its CA trusted, the admin's client certificate presented."""
        ctx = ssl.create_default_context(cadata=self.ca_pem.decode())
        ctx.load_cert_chain(self.directory / "admin.crt", self.directory / "admin.key")
        return ctx

    def get(self, path: str, timeout: float = 5.0) -> tuple[int, bytes]:
        """A plain admin GET, for readiness probes outside any event loop."""
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ssl_context(), timeout=timeout)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            return response.status, response.read()
        finally:
            conn.close()

    def ready(self) -> bool:
        """``/readyz``, the ``default`` namespace, and every established CRD listable.

        ``/readyz`` turns green before custom resources can be served: right after a restart their storage
        answers 429 "storage is (re)initializing" for a while.
        """
        try:
            for path in ("/readyz", "/api/v1/namespaces/default", *self._custom_resource_paths()):
                status, _ = self.get(path, timeout=2)
                if status != 200:
                    return False
            return True
        except (OSError, http.client.HTTPException, ValueError):
            return False

    def _custom_resource_paths(self) -> list[str]:
        status, body = self.get("/apis/apiextensions.k8s.io/v1/customresourcedefinitions", timeout=2)
        if status != 200:
            raise ValueError(f"listing CRDs: HTTP {status}")
        paths = []
        for crd in json.loads(body)["items"]:
            spec = crd["spec"]
            version = next(v["name"] for v in spec["versions"] if v.get("storage"))
            paths.append(f"/apis/{spec['group']}/{version}/{spec['names']['plural']}?limit=1")
        return paths


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def kubeconfig_document(name: str, server: str, *, ca_pem: bytes, user: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": _b64(ca_pem)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
        "current-context": name,
    }


def combined_kubeconfig(clusters: Iterable[Cluster]) -> dict[str, Any]:
    """One kubeconfig with a context per cluster (the first is current), as ``kubectl --context NAME`` wants."""
    docs = [c.kubeconfig for c in clusters]
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [d["clusters"][0] for d in docs],
        "users": [d["users"][0] for d in docs],
        "contexts": [d["contexts"][0] for d in docs],
        "current-context": docs[0]["contexts"][0]["name"],
    }


class TestBed:
    """Start with ``with TestBed() as bed:``; every process is ended and the work directory removed on exit."""

    __test__ = False  # not a pytest test class

    def __init__(
        self,
        binaries: Binaries | None = None,
        *,
        clusters: Iterable[str] = CLUSTERS,
        base_dir: Path | None = None,
        start_timeout: float = 180.0,
        apiserver_args: Iterable[str] = (),
        progress: Progress = _stderr_progress,
    ) -> None:
        self.binaries = binaries or find_binaries(progress=progress)
        self.cluster_names = tuple(clusters)
        self.base_dir = base_dir or Path(tempfile.gettempdir())
        self.start_timeout = start_timeout
        self.apiserver_args = tuple(apiserver_args)
        self.progress = progress
        self.workdir: Path | None = None
        self.ca: CertificateAuthority | None = None
        self.etcd: processes.ManagedProcess | None = None
        self.etcd_port = 0
        self.clusters: dict[str, Cluster] = {}
        self.started_seconds: float | None = None

    # ----------------------------------------------------------------------------------------- lifecycle

    def __enter__(self) -> TestBed:
        try:
            self.start()
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def start(self) -> None:
        started = time.monotonic()
        for stale in processes.sweep_stale_workdirs(self.base_dir, WORKDIR_PREFIX):
            self.progress(f"removed {stale}, left by a test bed whose process is gone")
        self.workdir = Path(tempfile.mkdtemp(prefix=WORKDIR_PREFIX, dir=self.base_dir))
        processes.claim_workdir(self.workdir)
        ca = self.ca = CertificateAuthority()  # kept: a test issues client certificates of its own
        for name in self.cluster_names:
            self.clusters[name] = self._prepare_cluster(name, ca)
        self._start_etcd()
        for cluster in self.clusters.values():
            self._start_apiserver(cluster)
        self._wait_ready_moving_taken_ports()
        combined = self.workdir / "kubeconfig"
        combined.write_text(yaml.safe_dump(self.combined_kubeconfig(), sort_keys=False))
        self.started_seconds = time.monotonic() - started
        self.progress(
            f"{len(self.clusters)} clusters ready in {self.started_seconds:.1f}s: "
            + ", ".join(f"{c.name}={c.url}" for c in self.clusters.values())
        )

    def stop(self) -> None:
        servers = [c.process for c in self.clusters.values() if c.process] + ([self.etcd] if self.etcd else [])
        for server in servers:  # signal all first so they shut down in parallel
            server.signal(signal.SIGCONT)
            server.signal(signal.SIGTERM)
        for server in servers:
            server.stop()
        if self.workdir and not os.environ.get("MULTIKUEUE_TESTBED_KEEP"):
            shutil.rmtree(self.workdir, ignore_errors=True)
        self.workdir = None

    # ------------------------------------------------------------------------------------------- access

    def cluster(self, name: str) -> Cluster:
        try:
            return self.clusters[name]
        except KeyError:
            raise KeyError(f"no cluster {name!r} in this test bed; it has {', '.join(self.clusters)}") from None

    @property
    def kubeconfig_path(self) -> Path:
        """One kubeconfig with a context per cluster (``kubectl --context worker1 ...``)."""
        assert self.workdir, "the test bed is not running"
        return self.workdir / "kubeconfig"

    def combined_kubeconfig(self) -> dict[str, Any]:
        return combined_kubeconfig(self.clusters.values())

    # ---------------------------------------------------------------------------- faults and recovery

    def stop_apiserver(self, name: str, *, kill: bool = False) -> None:
        """End one cluster's kube-apiserver: SIGKILL (a crash) with ``kill``, else a graceful SIGTERM."""
        process = self.cluster(name).process
        assert process, f"{name} was never started"
        process.kill() if kill else process.stop()

    def start_apiserver(self, name: str, *, wait: bool = True) -> None:
        """Start a stopped kube-apiserver again on the same port, etcd prefix and certificates."""
        cluster = self.cluster(name)
        if cluster.process and cluster.process.running:
            raise TestBedError(f"{name}'s kube-apiserver is still running as PID {cluster.process.pid}")
        self._start_apiserver(cluster)
        if wait:
            self._wait_ready([cluster])

    def pause_apiserver(self, name: str) -> None:
        """SIGSTOP: connections hang instead of being refused, like a partitioned network."""
        process = self.cluster(name).process
        assert process
        if not process.running:  # a silent no-op would let a test "partition" a server that is not there
            raise TestBedError(f"{name}'s kube-apiserver is not running (exit code {process.returncode}): no pause")
        process.signal(signal.SIGSTOP)
        # The stop lands when the kernel next handles the process: wait for it, so that what follows is answered by
        # a stopped server, not one still finishing its time slice on a loaded machine.
        stat = Path(f"/proc/{process.pid}/stat")
        deadline = time.monotonic() + 5
        while stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "T":
            if time.monotonic() > deadline:
                raise TestBedError(f"{name}'s kube-apiserver (PID {process.pid}) did not stop within 5 s of SIGSTOP")
            time.sleep(0.01)

    def resume_apiserver(self, name: str, *, wait: bool = False) -> None:
        """SIGCONT (harmless on a server that was not paused); with ``wait``, until it serves again."""
        process = self.cluster(name).process
        assert process
        process.signal(signal.SIGCONT)
        if wait:
            self._wait_ready([self.cluster(name)])

    def pause_etcd(self) -> None:
        """SIGSTOP etcd: every cluster's writes and watches stall at once (a storage outage)."""
        if self.etcd is None or not self.etcd.running:
            raise TestBedError("etcd is not running: no pause")
        self.etcd.signal(signal.SIGSTOP)

    def resume_etcd(self) -> None:
        """SIGCONT etcd (harmless when it was not paused)."""
        if self.etcd is not None:
            self.etcd.signal(signal.SIGCONT)

    def compact_etcd(self) -> int:
        """Compact etcd's history up to the current revision (what kube-apiserver does every 5 minutes).

        Returns the revision compacted to; resourceVersions below it can no longer be watched from etcd.
        """
        status = self._etcd_post("/v3/maintenance/status", {})
        revision = int(status["header"]["revision"])
        self._etcd_post("/v3/kv/compaction", {"revision": revision, "physical": True})
        return revision

    # ---------------------------------------------------------------------------------------- internals

    def _prepare_cluster(self, name: str, ca: CertificateAuthority) -> Cluster:
        assert self.workdir
        directory = self.workdir / name
        directory.mkdir()
        serving = ca.issue(f"{name}-apiserver", dns_names=("localhost",), ip_addresses=("127.0.0.1",), server=True)
        serving.write(directory, "serving")
        admin = ca.issue("admin", organizations=("system:masters",), client=True)
        admin.write(directory, "admin")
        signing_key().write(directory, "sa")  # sa.crt holds the public key
        (directory / "ca.crt").write_bytes(ca.cert_pem)
        cluster = Cluster(name=name, port=free_port(), directory=directory, ca_pem=ca.cert_pem, admin=admin)
        cluster.kubeconfig_path.write_text(yaml.safe_dump(cluster.kubeconfig, sort_keys=False))
        return cluster

    def _start_etcd(self) -> None:
        assert self.workdir
        self.etcd_port, peer_port = free_port(), free_port()
        client_url, peer_url = f"http://127.0.0.1:{self.etcd_port}", f"http://127.0.0.1:{peer_port}"
        self.etcd = processes.ManagedProcess(
            "etcd",
            [
                str(self.binaries.etcd),
                f"--data-dir={self.workdir / 'etcd'}",
                f"--listen-client-urls={client_url}",
                f"--advertise-client-urls={client_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--unsafe-no-fsync=true",  # test data: durability is not worth the latency on a shared disk
                "--log-level=warn",
            ],
            self.workdir / "etcd.log",
        )
        self.etcd.start()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if not self.etcd.running:
                raise TestBedError(f"etcd exited with code {self.etcd.returncode}:\n{self.etcd.log_tail()}")
            try:
                if self._etcd_get("/health").get("health") == "true":
                    return
            except OSError:
                pass
            time.sleep(0.1)
        raise TestBedError(f"etcd was not healthy within 30s:\n{self.etcd.log_tail()}")

    def _etcd_request(self, method: str, path: str, body: dict[str, Any] | None) -> dict[str, Any]:
        conn = http.client.HTTPConnection("127.0.0.1", self.etcd_port, timeout=10)
        try:
            conn.request(method, path, body=json.dumps(body) if body is not None else None)
            response = conn.getresponse()
            payload = response.read()
            if response.status != 200:
                raise TestBedError(f"etcd {method} {path}: HTTP {response.status}: {payload[:300]!r}")
            result: dict[str, Any] = json.loads(payload)
            return result
        finally:
            conn.close()

    def _etcd_get(self, path: str) -> dict[str, Any]:
        return self._etcd_request("GET", path, None)

    def _etcd_post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        return self._etcd_request("POST", path, body)

    def _start_apiserver(self, cluster: Cluster) -> None:
        d = cluster.directory
        argv = [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--etcd-prefix=/{cluster.name}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            f"--secure-port={cluster.port}",
            f"--cert-dir={d}",
            f"--tls-cert-file={d / 'serving.crt'}",
            f"--tls-private-key-file={d / 'serving.key'}",
            f"--client-ca-file={d / 'ca.crt'}",
            # A distinct issuer and key per cluster: a token minted on one cluster is worthless on another.
            f"--service-account-issuer=https://127.0.0.1:{cluster.port}",
            f"--service-account-key-file={d / 'sa.crt'}",
            f"--service-account-signing-key-file={d / 'sa.key'}",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--authorization-mode=RBAC",
            "--allow-privileged=true",
            "--endpoint-reconciler-type=none",  # no Endpoints for a Service that has no nodes behind it
            "--disable-admission-plugins=ServiceAccount",  # no controller-manager creates default SAs
            "--enable-priority-and-fairness=false",
            "--profiling=false",
            # "{directory}" in an extra argument is the cluster's own directory (per-cluster files, e.g. audit logs).
            *(arg.replace("{directory}", str(d)) for arg in self.apiserver_args),
        ]
        cluster.process = processes.ManagedProcess(f"{cluster.name}-apiserver", argv, d / "apiserver.log")
        cluster.process.start()

    def _wait_ready_moving_taken_ports(self, attempts: int = 3) -> None:
        """Wait for every API server; one whose port was taken between ``free_port`` and its bind (another
        process's ephemeral port) moves to another port, at most ``attempts`` times. Only at start: a restarted
        server must keep the URL its clients hold."""
        for attempt in range(attempts):
            try:
                self._wait_ready(list(self.clusters.values()))
                return
            except TestBedError:
                taken = [c for c in self.clusters.values() if c.process is not None and not c.process.running
                         and "address already in use" in c.process.log_tail()]  # fmt: skip
                if not taken or attempt == attempts - 1:
                    raise
                for cluster in taken:
                    self.progress(f"{cluster.name}: port {cluster.port} was taken meanwhile; starting on another")
                    cluster.port = free_port()
                    cluster.kubeconfig_path.write_text(yaml.safe_dump(cluster.kubeconfig, sort_keys=False))
                    self._start_apiserver(cluster)

    def _wait_ready(self, clusters: list[Cluster]) -> None:
        deadline = time.monotonic() + self.start_timeout
        pending = list(clusters)
        while pending:
            for cluster in list(pending):
                assert cluster.process
                if not cluster.process.running:
                    raise TestBedError(
                        f"{cluster.name}'s kube-apiserver exited with code {cluster.process.returncode}:\n"
                        f"{cluster.process.log_tail()}"
                    )
                if cluster.ready():
                    pending.remove(cluster)
            if pending and time.monotonic() > deadline:
                names = ", ".join(c.name for c in pending)
                tails = "\n".join(f"--- {c.name}:\n{c.process.log_tail() if c.process else ''}" for c in pending)
                raise TestBedError(f"not ready within {self.start_timeout:.0f}s: {names}\n{tails}")
            if pending:
                time.sleep(0.2)
