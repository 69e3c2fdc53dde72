"""A kind node image built on this machine, from Debian's packages and Go modules only (no registry is reachable).

``python -m e2e.kind.node`` prints the image's name once it exists in the kind engine (``e2e/kind/engine.sh``):

1. Go programs, each cached by version under ``~/.cache/multikueue/kind/``: the kind CLI, containerd, runc (with
   seccomp), the CNI plugins, CoreDNS; Kubernetes' own (kubelet, kubeadm, kube-proxy, the control plane) from the
   test bed's Kubernetes build.
2. The node's root file system: debootstrap of Debian bookworm with the packages kind's base image installs, kind's
   own ``images/base/files`` from its module, the same units enabled and removed as its Dockerfile does, the
   programs above, a static bridge CNI configuration (kindnetd cannot be built here), and the kernel guard below.
3. The images kubeadm runs (pause, etcd, kube-apiserver, kube-controller-manager, kube-scheduler, kube-proxy,
   CoreDNS), built from those binaries and imported into the node's containerd, pinned.

The kernel guard: kubelet writes ``vm.overcommit_memory``, ``vm.panic_on_oom``, ``kernel.panic`` and
``kernel.panic_on_oops``, which are not namespaced, so from inside a node container it would change the *host*. A
oneshot unit bind-mounts files holding kubelet's values over them in the node's own mount namespace before kubelet
starts, so kubelet finds nothing to change. Debian's ``50-pid-max.conf`` and ``99-protect-links.conf`` sysctl
files are removed for the same reason. Never drop it; ``e2e/kind`` tests assert the host is unchanged.

A step that cannot run names what is missing in one line and exits 3.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from multikueue_testbed.binaries import KUBERNETES_VERSION, cache_root, find_binaries

KIND_VERSION = "v0.33.0"
CONTAINERD_VERSION = "v2.2.0"
RUNC_VERSION = "v1.4.0"
CNI_PLUGINS_VERSION = "v1.9.0"
COREDNS_VERSION = "v1.13.1"
PAUSE_TAG = "3.10.1"
ETCD_TAG = "3.6.6-0"  # the tag kubeadm v1.35 asks for; the image holds the test bed's etcd
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
BUILD = "mk1"  # bump when the recipe changes: the image and the rootfs are cached under this name
NODE_IMAGE = f"local/kind-node:v{KUBERNETES_VERSION}-{BUILD}"
PACKAGES = (
    "systemd,dbus,conntrack,iptables,nftables,iproute2,ethtool,util-linux,mount,kmod,libseccomp2,pigz,e2fsprogs,"
    "bash,ca-certificates,curl,jq,procps"
)
KUBERNETES_PROGRAMS = ("kube-controller-manager", "kube-scheduler", "kubelet", "kubeadm", "kube-proxy")
HERE = Path(__file__).resolve().parent
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"  # kube-proxy finds iptables in sbin
GUARDED_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
}


class NodeImageError(RuntimeError):
    """A step cannot run here; the message names the missing piece."""


def say(message: str) -> None:
    print(f"[kind node image] {message}", file=sys.stderr, flush=True)


def run(argv: list[str], what: str, *, timeout: float = 1800, env: dict[str, str] | None = None,
        cwd: Path | None = None, stdin: bytes | None = None) -> str:  # fmt: skip
    started = time.monotonic()
    result = subprocess.run(argv, capture_output=True, timeout=timeout, check=False, cwd=cwd, input=stdin,
                            env={**os.environ, **(env or {})})  # fmt: skip
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).decode(errors="replace").splitlines()[-15:])
        raise NodeImageError(f"{what} failed (exit {result.returncode}): {' '.join(argv[:6])} ...\n{tail}")
    if time.monotonic() - started > 5:
        say(f"{what}: done in {time.monotonic() - started:.0f}s")
    return result.stdout.decode(errors="replace")


def kind_cache() -> Path:
    return cache_root() / "kind"


def module_dir(module: str, version: str) -> Path:
    info = json.loads(run(["go", "mod", "download", "-json", f"{module}@{version}"], f"go mod download {module}",
                          env={"GOWORK": "off", "GOFLAGS": "-mod=mod"}, cwd=Path.home()))  # fmt: skip
    return Path(info["Dir"])


# ------------------------------------------------------------------------------------------- Go programs


def go_install(label: str, version: str, packages: list[str], *, cgo: bool = False, tags: str = "") -> Path:
    """``go install pkg@version`` into a directory cached by ``label`` and version."""
    target = kind_cache() / "bin" / f"{label}-{version}"
    if (target / ".done").exists():
        return target
    if shutil.which("go") is None:
        raise NodeImageError(f"{label} {version}: Go is not on PATH (install Go >= 1.25)")
    target.mkdir(parents=True, exist_ok=True)
    say(f"building {label} {version} from the Go module proxy (once; cached in {target})")
    argv = ["go", "install", "-trimpath", "-ldflags", "-s -w", *(["-tags", tags] if tags else [])]
    run([*argv, *(f"{p}@{version}" for p in packages)], f"go install {label}", cwd=Path.home(),
        env={"GOBIN": str(target), "CGO_ENABLED": "1" if cgo else "0", "GOWORK": "off"})  # fmt: skip
    (target / ".done").touch()
    return target


def containerd() -> Path:
    """containerd, its shim and ctr. ``go install`` refuses containerd (its go.mod has exclude directives), so a
    wrapper module builds it."""
    target = kind_cache() / "bin" / f"containerd-{CONTAINERD_VERSION}"
    if (target / ".done").exists():
        return target
    module = "github.com/containerd/containerd/v2"
    source = module_dir(module, CONTAINERD_VERSION)
    say(f"building containerd {CONTAINERD_VERSION} (once; cached in {target})")
    target.mkdir(parents=True, exist_ok=True)
    commands = ("containerd", "containerd-shim-runc-v2", "ctr")
    with tempfile.TemporaryDirectory(prefix="multikueue-containerd-") as work:
        (Path(work) / "go.sum").write_bytes((source / "go.sum").read_bytes())
        env = {"CGO_ENABLED": "0", "GOWORK": "off", "GOFLAGS": "-mod=mod"}
        run(["go", "mod", "init", "local/multikueue-containerd"], "go mod init", cwd=Path(work), env=env)
        run(["go", "get", f"{module}@{CONTAINERD_VERSION}"], "go get containerd", cwd=Path(work), env=env)
        for command in commands:
            run(["go", "build", "-trimpath", "-tags", "no_btrfs no_devmapper no_zfs no_aufs", "-ldflags", "-s -w",
                 "-o", str(target / command), f"{module}/cmd/{command}"], f"go build {command}", cwd=Path(work),
                env=env)  # fmt: skip
    (target / ".done").touch()
    return target


def programs() -> dict[str, Path]:
    """Every program the node image and the e2e need, by name."""
    if shutil.which("pkg-config") is None or not Path("/usr/include/seccomp.h").exists():
        install_debian_packages("libseccomp-dev", "pkg-config", "gcc")
    found: dict[str, Path] = {}
    kind = go_install("kind", KIND_VERSION, ["sigs.k8s.io/kind"])
    found["kind"] = kind / "kind"
    runc = go_install("runc", RUNC_VERSION, ["github.com/opencontainers/runc"], cgo=True, tags="seccomp")
    found["runc"] = runc / "runc"
    plugins = [f"github.com/containernetworking/plugins/plugins/{p}"
               for p in ("main/bridge", "ipam/host-local", "main/loopback", "meta/portmap", "main/ptp")]  # fmt: skip
    cni = go_install("cni-plugins", CNI_PLUGINS_VERSION, plugins)
    for plugin in plugins:
        found[f"cni/{plugin.rsplit('/', 1)[1]}"] = cni / plugin.rsplit("/", 1)[1]
    coredns = go_install("coredns", COREDNS_VERSION, ["github.com/coredns/coredns"])
    found["coredns"] = coredns / "coredns"
    built = containerd()
    for command in ("containerd", "containerd-shim-runc-v2", "ctr"):
        found[command] = built / command
    binaries = find_binaries(extra=KUBERNETES_PROGRAMS, progress=say)
    for name in (*KUBERNETES_PROGRAMS, "kube-apiserver", "kubectl", "etcd"):
        found[name] = binaries.path(name)
    found["pause"] = pause()
    return found


def pause() -> Path:
    """Kubernetes' pause, ``gcc -static`` from the k8s.io/kubernetes module's own source."""
    target = kind_cache() / "bin" / f"pause-{PAUSE_TAG}" / "pause"
    if target.exists():
        return target
    source = module_dir("k8s.io/kubernetes", f"v{KUBERNETES_VERSION}") / "build" / "pause" / "linux" / "pause.c"
    target.parent.mkdir(parents=True, exist_ok=True)
    run(["gcc", "-Os", "-static", "-o", str(target), f"-DVERSION=v{PAUSE_TAG}-multikueue", str(source)], "gcc pause")
    return target


def install_debian_packages(*names: str) -> None:
    if os.geteuid() != 0:
        raise NodeImageError(f"{', '.join(names)} missing: install them (apt-get install {' '.join(names)})")
    say(f"installing {', '.join(names)} from Debian's packages")
    run(["apt-get", "update", "-qq"], "apt-get update", timeout=600)
    run(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *names], "apt-get install", timeout=900,
        env={"DEBIAN_FRONTEND": "noninteractive"})  # fmt: skip


# ------------------------------------------------------------------------------------------- the node rootfs

BRIDGE_CNI = {
    "cniVersion": "0.4.0",
    "name": "kind-bridge",
    "plugins": [
        {"type": "bridge", "bridge": "cni0", "isGateway": True, "ipMasq": True, "hairpinMode": True,
         "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.0.0/24"}]], "routes": [{"dst": "0.0.0.0/0"}]}},
        {"type": "portmap", "capabilities": {"portMappings": True}},
    ],
}  # fmt: skip
"""One node per cluster: a static bridge is the whole pod network (kindnetd cannot be built here)."""

DEFAULT_CNI_MANIFEST = """\
# kind applies this at start; the pod network is the static bridge in /etc/cni/net.d, so there is nothing to run.
apiVersion: v1
kind: ConfigMap
metadata: {name: multikueue-static-bridge-cni, namespace: kube-system}
data: {cni: /etc/cni/net.d/10-bridge.conflist}
"""

GUARD_UNIT = """\
[Unit]
Description=Keep kubelet's non-namespaced kernel settings inside this node container
DefaultDependencies=no
Before=containerd.service kubelet.service
[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/kind/bin/keep-kernel-settings.sh
[Install]
WantedBy=multi-user.target
"""


def guard_script() -> str:
    lines = ["#!/bin/sh", "# Files holding kubelet's values, bind-mounted over /proc/sys in this node's mount",
             "# namespace only: kubelet finds its values in place and writes nothing to the host's kernel.",
             "set -eu", "mkdir -p /kind/kernel-settings"]  # fmt: skip
    for key, value in GUARDED_SYSCTLS.items():
        file = f"/kind/kernel-settings/{key.replace('/', '.')}"
        lines.append(f"echo {value} > {file}; mountpoint -q /proc/sys/{key} || mount --bind {file} /proc/sys/{key}")
    return "\n".join(lines) + "\n"


def _copy_tree(source: Path, target: Path, mode: int) -> None:
    for path in sorted(source.rglob("*")):
        destination = target / path.relative_to(source)
        if path.is_dir():
            destination.mkdir(parents=True, exist_ok=True)
        else:
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, destination)
            destination.chmod(mode)


def _install(found: dict[str, Path], rootfs: Path) -> None:
    places = {"containerd": "usr/local/bin", "containerd-shim-runc-v2": "usr/local/bin", "ctr": "usr/local/bin",
              "runc": "usr/local/sbin", "kubelet": "usr/bin", "kubeadm": "usr/bin", "kubectl": "usr/bin"}  # fmt: skip
    for name, place in places.items():
        shutil.copyfile(found[name], rootfs / place / name)
        (rootfs / place / name).chmod(0o755)
    (rootfs / "opt/cni/bin").mkdir(parents=True, exist_ok=True)
    for name, path in found.items():
        if name.startswith("cni/"):
            shutil.copyfile(path, rootfs / "opt/cni/bin" / name[4:])
            (rootfs / "opt/cni/bin" / name[4:]).chmod(0o755)
    spec = json.loads(run([str(found["ctr"]), "oci", "spec"], "ctr oci spec"))
    spec.setdefault("hooks", {}).setdefault("createContainer", []).append({"path": "/kind/bin/mount-product-files.sh"})
    spec["process"].pop("rlimits", None)
    (rootfs / "etc/containerd/cri-base.json").write_text(json.dumps(spec, indent=2))


def _as_kind_base(rootfs: Path, found: dict[str, Path]) -> None:
    """What kind's images/base Dockerfile does, on a debootstrapped root."""
    files = module_dir("sigs.k8s.io/kind", KIND_VERSION) / "images" / "base" / "files"
    _copy_tree(files / "usr/local/bin", rootfs / "usr/local/bin", 0o755)
    _copy_tree(files / "kind", rootfs / "kind", 0o644)
    _copy_tree(files / "kind/bin", rootfs / "kind/bin", 0o755)
    _copy_tree(files / "etc", rootfs / "etc", 0o644)
    for wanted in ("multi-user", "local-fs", "basic"):
        shutil.rmtree(rootfs / f"lib/systemd/system/{wanted}.target.wants", ignore_errors=True)
    for wants in (rootfs / "etc/systemd/system").glob("*.wants"):
        shutil.rmtree(wants)
    for pattern in ("*udev*", "*initctl*"):
        for unit in (rootfs / "lib/systemd/system/sockets.target.wants").glob(pattern):
            unit.unlink()
    for unit in (rootfs / "lib/systemd/system/sysinit.target.wants").glob("systemd-tmpfiles-setup.service"):
        unit.unlink()
    with (rootfs / "etc/systemd/journald.conf").open("a") as journald:
        journald.write("ReadKMsg=no\n")
    init = rootfs / "sbin/init"
    if init.exists() or init.is_symlink():
        init.unlink()
    init.symlink_to("/usr/lib/systemd/systemd")
    (rootfs / "etc/kubernetes/manifests").mkdir(parents=True, exist_ok=True)
    # The kernel guard, and Debian's own sysctl files that would reach the host the same way.
    (rootfs / "kind/bin/keep-kernel-settings.sh").write_text(guard_script())
    (rootfs / "kind/bin/keep-kernel-settings.sh").chmod(0o755)
    (rootfs / "etc/systemd/system/keep-kernel-settings.service").write_text(GUARD_UNIT)
    for name in ("50-pid-max.conf", "99-protect-links.conf"):
        (rootfs / "usr/lib/sysctl.d" / name).unlink(missing_ok=True)
    _install(found, rootfs)
    (rootfs / "kind/version").write_text(f"v{KUBERNETES_VERSION}")
    (rootfs / "kind/manifests").mkdir(parents=True, exist_ok=True)
    (rootfs / "kind/manifests/default-cni.yaml").write_text(DEFAULT_CNI_MANIFEST)
    (rootfs / "etc/cni/net.d").mkdir(parents=True, exist_ok=True)
    (rootfs / "etc/cni/net.d/10-bridge.conflist").write_text(json.dumps(BRIDGE_CNI, indent=2))
    units = ["kubelet.service", "containerd.service", "undo-mount-hacks.service", "keep-kernel-settings.service"]
    run(["systemctl", f"--root={rootfs}", "enable", *units], "systemctl enable")
    run(["systemctl", f"--root={rootfs}", "mask", "systemd-binfmt.service"], "systemctl mask")


def rootfs_tarball(found: dict[str, Path]) -> Path:
    tarball = kind_cache() / f"node-rootfs-{SUITE}-v{KUBERNETES_VERSION}-{BUILD}.tar"
    if tarball.exists():
        return tarball
    if shutil.which("debootstrap") is None:
        install_debian_packages("debootstrap")
    with tempfile.TemporaryDirectory(prefix="multikueue-kind-rootfs-") as work:
        rootfs = Path(work) / "rootfs"
        say(f"debootstrap {SUITE} with kind's packages (a few minutes, once per machine)")
        run(["debootstrap", "--variant=minbase", f"--include={PACKAGES}", SUITE, str(rootfs), MIRROR], "debootstrap",
            timeout=1800)  # fmt: skip
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        _as_kind_base(rootfs, found)
        partial = tarball.with_suffix(".partial")
        run(["tar", "-C", str(rootfs), "-cf", str(partial), "."], "tar the node rootfs", timeout=900)
        partial.rename(tarball)
    return tarball


# ------------------------------------------------------------------------------------------- images


def docker(*args: str, what: str, stdin: bytes | None = None, timeout: float = 1800) -> str:
    return run(["docker", *args], what, stdin=stdin, timeout=timeout)


def has_image(name: str) -> bool:
    return subprocess.run(["docker", "image", "inspect", name], capture_output=True, check=False).returncode == 0


def component_images(found: dict[str, Path], base: str) -> list[str]:
    """The images kubeadm and kind run, tagged as they expect them, built from the binaries here."""
    version = f"v{KUBERNETES_VERSION}"
    recipes = {
        f"registry.k8s.io/pause:{PAUSE_TAG}": ("scratch", "pause", "/pause", "USER 65535:65535"),
        f"registry.k8s.io/etcd:{ETCD_TAG}": ("scratch", "etcd", "/usr/local/bin/etcd", ""),
        f"registry.k8s.io/kube-apiserver:{version}": ("scratch", "kube-apiserver", "/usr/local/bin/kube-apiserver", ""),
        f"registry.k8s.io/kube-controller-manager:{version}":
            ("scratch", "kube-controller-manager", "/usr/local/bin/kube-controller-manager", ""),
        f"registry.k8s.io/kube-scheduler:{version}": ("scratch", "kube-scheduler", "/usr/local/bin/kube-scheduler", ""),
        # kube-proxy programs iptables: on the node's own base, which has them.
        f"registry.k8s.io/kube-proxy:{version}": (base, "kube-proxy", "/usr/local/bin/kube-proxy", ""),
        f"registry.k8s.io/coredns/coredns:{COREDNS_VERSION}": ("scratch", "coredns", "/coredns", ""),
    }  # fmt: skip
    aliases = {"registry.k8s.io/pause:3.10": f"registry.k8s.io/pause:{PAUSE_TAG}"}  # containerd's default sandbox
    for tag, (source, program, path, extra) in recipes.items():
        if has_image(tag):
            continue
        with tempfile.TemporaryDirectory(prefix="multikueue-kind-image-") as work:
            shutil.copyfile(found[program], Path(work) / program)
            (Path(work) / program).chmod(0o755)
            (Path(work) / "Dockerfile").write_text(
                f'FROM {source}\nCOPY {program} {path}\nENV PATH={IMAGE_PATH}\n{extra}\nENTRYPOINT ["{path}"]\n'
            )
            docker("build", "-q", "-t", tag, work, what=f"docker build {tag}")
    for alias, tag in aliases.items():
        docker("tag", tag, alias, what=f"docker tag {alias}")
    return [*recipes, *aliases]


def node_image() -> str:
    """The node image, built once and kept by the kind engine (its data root is cached too)."""
    if has_image(NODE_IMAGE):
        return NODE_IMAGE
    started = time.monotonic()
    found = programs()
    base = f"local/kind-base:{SUITE}-{BUILD}"
    if not has_image(base):
        tarball = rootfs_tarball(found)
        say(f"docker import {tarball.name} as {base}")
        imported = f"{base}-imported"
        docker("import", "--change", "ENV container=docker", str(tarball), imported, what="docker import")
        # `docker import` takes no STOPSIGNAL: a one-line build adds it (systemd stops on SIGRTMIN+3) and the
        # entrypoint kind's base image has.
        with tempfile.TemporaryDirectory(prefix="multikueue-kind-base-") as work:
            (Path(work) / "Dockerfile").write_text(
                f'FROM {imported}\nSTOPSIGNAL SIGRTMIN+3\nENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]\n'
            )
            docker("build", "-q", "-t", base, work, what="docker build the kind base")
    images = component_images(found, base)
    builder = f"multikueue-kind-node-build-{os.getpid()}"
    docker("run", "-d", "--name", builder, "--privileged", "--entrypoint", "sleep", base, "infinity", what="docker run")
    try:
        docker("exec", "-d", builder, "sh", "-c", "containerd >/var/log/containerd-build.log 2>&1", what="containerd")
        docker("exec", builder, "sh", "-c", "for i in $(seq 1 30); do ctr version >/dev/null 2>&1 && exit 0; sleep 1; "
               "done; exit 1", what="containerd answering")  # fmt: skip
        for image in images:
            saved = subprocess.run(["docker", "save", image], capture_output=True, check=True).stdout
            docker("exec", "-i", builder, "ctr", "--namespace=k8s.io", "images", "import", "--no-unpack",
                   "--label=io.cri-containerd.pinned=pinned", "--digests", "-", stdin=saved,
                   what=f"preload {image}")  # fmt: skip
        docker("exec", builder, "sh", "-c", "kill $(pidof containerd); sleep 2", what="stop containerd")
        docker("commit", "--change", 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]', builder, NODE_IMAGE,
               what="docker commit")  # fmt: skip
    finally:
        subprocess.run(["docker", "rm", "-f", "-v", builder], capture_output=True, check=False)
    say(f"{NODE_IMAGE} built in {time.monotonic() - started:.0f}s")
    return NODE_IMAGE


def main() -> int:
    if "DOCKER_HOST" not in os.environ:
        print("kind node image: DOCKER_HOST is not set: start the engine first (e2e/kind/engine.sh start)",
              file=sys.stderr)  # fmt: skip
        return 3
    try:
        print(node_image())
    except NodeImageError as e:
        print(f"kind node image: {e}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
