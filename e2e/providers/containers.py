"""``testcontainers``: each cluster (its own etcd + kube-apiserver, the host's static binaries mounted read-only)
in its own container on a private bridge network, and the dispatcher in a container built from the project's
Dockerfile, all started through testcontainers. A worker is lost by pausing its container.

Needs a Docker engine (``make docker-engine`` installs and starts one as root) and ``debootstrap`` for the
locally built base image; no image is pulled. Ports are published on 127.0.0.1 only.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from e2e import images
from e2e.providers import CLUSTERS, Environment, ProviderUnavailable, dispatcher_args
from multikueue.pki import CertificateAuthority, signing_key
from multikueue_testbed import crds
from multikueue_testbed.binaries import Binaries, find_binaries
from multikueue_testbed.testbed import Cluster, TestBedError, combined_kubeconfig, free_port

os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")  # the reaper's image cannot be pulled here

OWNER_LABEL = "io.multikueue.e2e.owner"  # the test process's PID: containers of a dead run are swept
APISERVER_PORT = 6443
START_SCRIPT = """#!/bin/sh
# etcd and kube-apiserver of one cluster; the apiserver retries etcd until it answers.
set -eu
/k8s/etcd --data-dir=/var/lib/etcd --listen-client-urls=http://127.0.0.1:2379 \\
  --advertise-client-urls=http://127.0.0.1:2379 --listen-peer-urls=http://127.0.0.1:2380 \\
  --unsafe-no-fsync=true --log-level=warn &
exec /k8s/kube-apiserver --etcd-servers=http://127.0.0.1:2379 --bind-address=0.0.0.0 \\
  --secure-port={port} --cert-dir=/var/run/kubernetes \\
  --tls-cert-file=/pki/serving.crt --tls-private-key-file=/pki/serving.key --client-ca-file=/pki/ca.crt \\
  --service-account-issuer=https://{name}:{port} --service-account-key-file=/pki/sa.crt \\
  --service-account-signing-key-file=/pki/sa.key --service-cluster-ip-range=10.0.0.0/24 \\
  --authorization-mode=RBAC --endpoint-reconciler-type=none --disable-admission-plugins=ServiceAccount \\
  --enable-priority-and-fairness=false --profiling=false
"""


def _docker() -> Any:
    try:
        import docker

        client = docker.from_env(timeout=120)
        client.ping()
        return client
    except Exception as e:
        raise ProviderUnavailable(
            f"the testcontainers provider needs a running Docker engine ({type(e).__name__}: {e}); "
            "as root, `make docker-engine` installs docker.io and starts dockerd --storage-driver=vfs"
        ) from None


def _sweep(client: Any) -> None:
    """Remove containers and networks left by an e2e run whose process is gone."""
    for container in client.containers.list(all=True, filters={"label": OWNER_LABEL}):
        owner = int(container.labels.get(OWNER_LABEL, "0"))
        if owner != os.getpid() and not Path(f"/proc/{owner}").exists():
            container.remove(force=True)
    for network in client.networks.list(filters={"label": OWNER_LABEL}):
        owner = int(network.attrs.get("Labels", {}).get(OWNER_LABEL, "0"))
        if owner != os.getpid() and not Path(f"/proc/{owner}").exists():
            network.remove()


class ContainersEnvironment(Environment):
    name = "testcontainers"

    def __init__(self) -> None:
        self.binaries: Binaries | None = None
        self.workdir = Path(tempfile.mkdtemp(prefix="multikueue-e2e-containers-"))
        self.clusters: dict[str, Cluster] = {}
        self.containers: dict[str, Any] = {}
        self.network: Any = None
        self.dispatcher: Any = None
        self._dispatcher_logs: list[str] = []
        self.client: Any = None

    # ------------------------------------------------------------------------------------------ lifecycle

    def start(self) -> None:
        from testcontainers.core.network import Network

        self.client = _docker()
        _sweep(self.client)
        self.binaries = find_binaries()
        for program in (self.binaries.etcd, self.binaries.kube_apiserver):
            if b"/lib64/ld-linux" in program.read_bytes()[:4096]:
                raise ProviderUnavailable(
                    f"{program} is dynamically linked; the cluster containers need static binaries"
                )
        base = images.ensure_base_image(self.client)
        self.dispatcher_image = images.build_dispatcher_image(self.client)
        self.network = Network(docker_network_kw={"labels": {OWNER_LABEL: str(os.getpid())}}).create()
        ca = CertificateAuthority()
        for name in CLUSTERS:
            self.clusters[name] = self._prepare(name, ca)
            self.containers[name] = self._cluster_container(name, base)
        self._wait_ready(list(CLUSTERS))
        combined = combined_kubeconfig(self.clusters[n] for n in CLUSTERS)
        (self.workdir / "kubeconfig").write_text(yaml.safe_dump(combined, sort_keys=False))
        crds.install_on_clusters(self.clusters[n] for n in CLUSTERS)

    def stop(self) -> None:
        for container in [self.dispatcher, *self.containers.values()]:
            if container is not None:
                with contextlib.suppress(Exception):  # a paused container cannot be removed
                    container.get_wrapped_container().unpause()
                container.stop()
        self.dispatcher, self.containers = None, {}
        if self.network is not None:
            self.network.remove()
            self.network = None
        if not os.environ.get("MULTIKUEUE_TESTBED_KEEP"):
            shutil.rmtree(self.workdir, ignore_errors=True)

    # --------------------------------------------------------------------------------------------- access

    def kubeconfig(self, cluster: str) -> dict[str, Any]:
        return self.clusters[cluster].kubeconfig

    @property
    def kubeconfig_path(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def kubectl(self) -> str:
        assert self.binaries is not None
        assert self.binaries.kubectl is not None
        return str(self.binaries.kubectl)

    def server_seen_by_dispatcher(self, cluster: str) -> str:
        return f"https://{cluster}:{APISERVER_PORT}"  # the container's alias on the bridge network

    # ----------------------------------------------------------------------------------------- dispatcher

    def start_dispatcher(self, manager_kubeconfig: dict[str, Any] | None = None) -> None:
        from testcontainers.core.container import DockerContainer

        if self.dispatcher is not None:  # a restart: the same container, as a kubelet restarts a crashed one
            self.dispatcher.get_wrapped_container().start()
            return
        assert manager_kubeconfig is not None, "the first start needs the dispatcher's identity"
        directory = self.workdir / "dispatcher"
        directory.mkdir(exist_ok=True)
        path = directory / "kubeconfig"
        path.write_text(yaml.safe_dump(manager_kubeconfig))
        path.chmod(0o644)  # read by the image's non-root user
        directory.chmod(0o755)
        self.dispatcher = (
            DockerContainer(self.dispatcher_image)
            .with_network(self.network)
            .with_volume_mapping(str(directory), "/etc/multikueue", "ro")
            .with_env("TMPDIR", "/tmp")
            .with_command(
                ["run", *dispatcher_args("0.0.0.0:8443", "0.0.0.0:8081"), "--kubeconfig=/etc/multikueue/kubeconfig"]
            )
            .with_tmpfs_mount("/tmp")
            .with_kwargs(labels={OWNER_LABEL: str(os.getpid())}, read_only=True)
        )
        self.dispatcher.start()
        user = self.dispatcher.get_wrapped_container().attrs["Config"]["User"]
        if user.split(":")[0] in ("", "0", "root"):
            raise AssertionError(
                f"the dispatcher image runs as {user or 'root'}; the Dockerfile must set a non-root USER"
            )

    def stop_dispatcher(self, *, kill: bool = False) -> None:
        if self.dispatcher is None:
            return
        wrapped = self.dispatcher.get_wrapped_container()
        wrapped.reload()
        if wrapped.status == "running":
            wrapped.kill() if kill else wrapped.stop(timeout=30)

    def dispatcher_log(self) -> str:
        if self.dispatcher is None:
            return "(never started)"
        out = self.dispatcher.get_wrapped_container().logs(tail=60)
        return out.decode(errors="replace") if isinstance(out, bytes) else str(out)

    # --------------------------------------------------------------------------------------------- faults

    def lose_worker(self, worker: str) -> None:
        self.containers[worker].get_wrapped_container().pause()  # requests hang, like a partition

    def restore_worker(self, worker: str) -> None:
        self.containers[worker].get_wrapped_container().unpause()
        self._wait_ready([worker])

    # ------------------------------------------------------------------------------------------ internals

    def _prepare(self, name: str, ca: CertificateAuthority) -> Cluster:
        directory = self.workdir / name
        directory.mkdir()
        serving = ca.issue(f"{name}-apiserver", dns_names=(name, "localhost"), ip_addresses=("127.0.0.1",), server=True)
        serving.write(directory, "serving")
        admin = ca.issue("admin", organizations=("system:masters",), client=True)
        admin.write(directory, "admin")
        signing_key().write(directory, "sa")
        (directory / "ca.crt").write_bytes(ca.cert_pem)
        (directory / "start.sh").write_text(START_SCRIPT.format(name=name, port=APISERVER_PORT))
        return Cluster(name=name, port=free_port(), directory=directory, ca_pem=ca.cert_pem, admin=admin)

    def _cluster_container(self, name: str, image: str) -> Any:
        from testcontainers.core.container import DockerContainer

        assert self.binaries is not None
        container = (
            DockerContainer(image)
            .with_network(self.network)
            .with_network_aliases(name)
            .with_volume_mapping(str(self.binaries.directory), "/k8s", "ro")
            .with_volume_mapping(str(self.clusters[name].directory), "/pki", "ro")
            .with_command(["/bin/sh", "/pki/start.sh"])
            .with_kwargs(labels={OWNER_LABEL: str(os.getpid())}, hostname=name)
        )
        # Published on the loopback only; testcontainers' own port helpers would bind every interface.
        # (docker-py takes a (host IP, port) pair; testcontainers' annotation only knows the port.)
        container.ports = {f"{APISERVER_PORT}/tcp": ("127.0.0.1", self.clusters[name].port)}  # type: ignore[dict-item]
        container.start()
        return container

    def _wait_ready(self, names: list[str], timeout: float = 180) -> None:
        deadline = time.monotonic() + timeout
        pending = list(names)
        while pending:
            for name in list(pending):
                if self.clusters[name].ready():
                    pending.remove(name)
            if not pending:
                return
            if time.monotonic() > deadline:
                logs = {
                    n: self.containers[n].get_wrapped_container().logs(tail=20).decode(errors="replace")
                    for n in pending
                }
                raise TestBedError(f"not ready within {timeout:.0f}s: {', '.join(pending)}\n{logs}")
            time.sleep(0.5)
