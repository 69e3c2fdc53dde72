"""Three kind clusters (manager, worker1, worker2) on the node image built here, in the kind engine.

    e2e/kind/engine.sh start            # then export the DOCKER_HOST it prints
    python -m e2e.kind.clusters up      # builds what is missing (cached), creates the clusters, checks them
    python -m e2e.kind.clusters down    # deletes them and the kind network

``up`` waits until every node is Ready and CoreDNS answers, runs a pod on each cluster, and checks that the host's
kernel settings are what they were before (a node's kubelet must never change them). Each cluster's kubeconfig is
written to ``~/.cache/multikueue/kind/<cluster>.kubeconfig`` (the host's view, 127.0.0.1) and
``<cluster>.internal.kubeconfig`` (the docker network's view, what the manager's pods use for a worker).
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from e2e.kind.node import HERE, NodeImageError, kind_cache, node_image, programs, run, say

CLUSTERS = ("mk-manager", "mk-worker1", "mk-worker2")
HOST_SETTINGS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "fs/protected_hardlinks",
    "fs/protected_symlinks",
    "fs/protected_fifos",
    "fs/protected_regular",
)


def host_settings() -> dict[str, str]:
    """The host's non-namespaced kernel settings a kubelet would write."""
    return {key: (Path("/proc/sys") / key).read_text().strip() for key in HOST_SETTINGS}


def kubeconfig(cluster: str, *, internal: bool = False) -> Path:
    return kind_cache() / f"{cluster}{'.internal' if internal else ''}.kubeconfig"


def kubectl(cluster: str, *args: str, what: str, timeout: float = 300) -> str:
    found = programs()
    return run([str(found["kubectl"]), "--kubeconfig", str(kubeconfig(cluster)), *args], what, timeout=timeout)


def up() -> None:
    before = host_settings()
    image = node_image()
    kind = str(programs()["kind"])
    existing = run([kind, "get", "clusters"], "kind get clusters").split()
    for cluster in CLUSTERS:
        if cluster not in existing:
            say(f"creating {cluster} from {image}")
            config = str(HERE / "cluster.yaml")
            argv = [
                kind,
                "create",
                "cluster",
                "--name",
                cluster,
                "--image",
                image,
                "--config",
                config,
                "--wait",
                "180s",
            ]
            run(argv, f"kind create cluster {cluster}", timeout=600)
        for internal in (False, True):
            text = run([kind, "get", "kubeconfig", "--name", cluster, *(["--internal"] if internal else [])],
                       "kind get kubeconfig")  # fmt: skip
            kubeconfig(cluster, internal=internal).write_text(text)
    allow_between_nodes()
    for cluster in CLUSTERS:
        kubectl(cluster, "wait", "--for=condition=Ready", "nodes", "--all", "--timeout=180s", what="nodes Ready")
        kubectl(cluster, "-n", "kube-system", "rollout", "status", "deployment/coredns", "--timeout=180s",
                what="CoreDNS ready")  # fmt: skip
        smoke(cluster)
    after = host_settings()
    if after != before:
        changed = {k: f"{before[k]} -> {after[k]}" for k in before if before[k] != after[k]}
        raise NodeImageError(f"the host's kernel settings changed while the clusters started: {changed}")
    say(f"ready: {', '.join(CLUSTERS)}; kubeconfigs in {kind_cache()}; host kernel settings unchanged")


def _forward_rule() -> list[str]:
    """Traffic between the kind nodes crosses the host's bridge for the kind network; with br_netfilter loaded the
    host's FORWARD chain sees it, and a DROP policy (dockerd sets one when it turns forwarding on) drops what a pod
    sends to another cluster. The engine adds no rules of its own (``--iptables=false``), so this one does."""
    network = run(["docker", "network", "inspect", "kind", "--format", "{{.Id}}"], "docker network inspect").strip()
    bridge = f"br-{network[:12]}"
    return ["FORWARD", "-i", bridge, "-o", bridge, "-j", "ACCEPT"]


def allow_between_nodes() -> None:
    rule = _forward_rule()
    if subprocess.run(["iptables", "-C", *rule], capture_output=True, check=False).returncode != 0:
        run(["iptables", "-I", *rule], "iptables: accept traffic between the kind nodes")


def forget_between_nodes() -> None:
    rule = _forward_rule()
    while subprocess.run(["iptables", "-C", *rule], capture_output=True, check=False).returncode == 0:
        run(["iptables", "-D", *rule], "iptables: remove the kind nodes' rule")


def smoke(cluster: str) -> None:
    """A pod runs to completion: the node runs containers, its sandbox gets an address."""
    name = f"smoke-{int(time.time())}"
    image = "--image=registry.k8s.io/pause:3.10.1"
    kubectl(cluster, "run", name, image, "--restart=Never", "--image-pull-policy=Never", what="a pod")
    kubectl(cluster, "wait", "--for=condition=Ready", f"pod/{name}", "--timeout=120s", what=f"{cluster}: pod Ready")
    kubectl(cluster, "delete", "pod", name, "--wait=false", what="delete the pod")


def down() -> None:
    kind = str(programs()["kind"])
    if _has_kind_network():
        forget_between_nodes()
    for cluster in CLUSTERS:
        run([kind, "delete", "cluster", "--name", cluster], f"kind delete cluster {cluster}", timeout=300)
        for internal in (False, True):
            kubeconfig(cluster, internal=internal).unlink(missing_ok=True)
    if _has_kind_network():
        run(["docker", "network", "rm", "kind"], "docker network rm kind")


def _has_kind_network() -> bool:
    return "kind" in run(["docker", "network", "ls", "--format", "{{.Name}}"], "docker network ls").split()


def main(argv: list[str]) -> int:
    command = argv[0] if argv else ""
    if command not in ("up", "down"):
        print("usage: python -m e2e.kind.clusters up|down", file=sys.stderr)
        return 2
    try:
        if command == "up":
            up()
        else:
            down()
    except NodeImageError as e:
        print(f"kind clusters: {e}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
