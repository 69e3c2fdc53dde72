"""Find or build the control-plane binaries of the local test bed.

Order: ``KUBEBUILDER_ASSETS`` (what setup-envtest users already have), then a versioned cache outside the
repository, then a build from the Go module proxy. ``k8s.io/kubernetes`` cannot be ``go install``-ed (its
go.mod replaces every staging module with a local path), so the build uses a wrapper module that pins each
staging module to its published ``v0.<minor>.<patch>`` tag, and stamps the version as upstream's
hack/lib/version.sh does (Kueue, kwok and Tekton all parse ``/version``).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

KUBERNETES_VERSION = "1.35.4"
"""The pinned Kubernetes release (one minor for the whole project)."""

REQUIRED = ("kube-apiserver", "etcd")
KUBERNETES_COMMANDS = ("kube-apiserver", "kubectl")
OPTIONAL_KUBERNETES_COMMANDS = ("kube-controller-manager", "kube-scheduler", "kubelet", "kubeadm", "kube-proxy")
"""Built together when any of them is wanted (the interop profile's control plane, the kind node image), so one
build serves both."""
_BUILD_TAGS = "selinux,notest,grpcnotrace"

Progress = Callable[[str], None]


class BinariesUnavailable(RuntimeError):
    """Neither prebuilt binaries nor a Go toolchain to build them are available."""


class BuildFailed(RuntimeError):
    """A ``go`` step failed; the message carries the command and the tail of its output."""


def _stderr_progress(message: str) -> None:
    print(f"[testbed] {message}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Binaries:
    """Paths to the control-plane programs and where they came from."""

    directory: Path
    source: str  # "KUBEBUILDER_ASSETS", "cache" or "built"

    def path(self, name: str) -> Path:
        return self.directory / name

    @property
    def kube_apiserver(self) -> Path:
        return self.path("kube-apiserver")

    @property
    def etcd(self) -> Path:
        return self.path("etcd")

    @property
    def kubectl(self) -> Path | None:
        p = self.path("kubectl")
        return p if p.exists() else None

    def version(self, name: str = "kube-apiserver") -> str:
        out = subprocess.run(
            [str(self.path(name)), "--version"], capture_output=True, text=True, timeout=30, check=True
        )
        return out.stdout.strip()


def cache_root() -> Path:
    """``$MULTIKUEUE_CACHE_DIR``, else ``$XDG_CACHE_HOME/multikueue``, else ``~/.cache/multikueue``."""
    if explicit := os.environ.get("MULTIKUEUE_CACHE_DIR"):
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "multikueue"


def cache_dir(version: str = KUBERNETES_VERSION) -> Path:
    return cache_root() / f"kubernetes-v{version}"


def _complete(directory: Path, names: Sequence[str]) -> bool:
    return all(os.access(directory / n, os.X_OK) for n in names)


def find_binaries(
    *,
    build: bool = True,
    extra: Sequence[str] = (),
    version: str = KUBERNETES_VERSION,
    progress: Progress = _stderr_progress,
) -> Binaries:
    """Return usable binaries, building (and caching) them if allowed and needed.

    ``extra`` names optional programs also wanted (``kube-controller-manager``, ``kube-scheduler``).
    """
    wanted = (*REQUIRED, *extra)
    if assets := os.environ.get("KUBEBUILDER_ASSETS"):
        directory = Path(assets)
        missing = [n for n in wanted if not os.access(directory / n, os.X_OK)]
        if missing:
            raise BinariesUnavailable(
                f"KUBEBUILDER_ASSETS={assets} lacks executable {', '.join(missing)}; "
                "point it at a directory holding them (setup-envtest's), or unset it to use the cache or a build"
            )
        return Binaries(directory, "KUBEBUILDER_ASSETS")

    target = cache_dir(version) / "bin"
    if _complete(target, (*wanted, "kubectl")) and (target.parent / "build.json").exists():
        return Binaries(target, "cache")
    if not build:
        raise BinariesUnavailable(f"no cached binaries in {target} and building is disabled")
    go = shutil.which("go")
    if go is None:
        raise BinariesUnavailable(
            "kube-apiserver and etcd were not found: set KUBEBUILDER_ASSETS to a directory with kube-apiserver "
            "and etcd (for example from `setup-envtest use 1.35.x -p path`), or install Go >= 1.25 "
            "(https://go.dev/dl) so they can be built from the Go module proxy"
        )
    with _locked(cache_dir(version)):
        # Another process may have finished the build while this one waited for the lock.
        if _complete(target, (*wanted, "kubectl")) and (target.parent / "build.json").exists():
            return Binaries(target, "cache")
        _build(go, version, target, [*KUBERNETES_COMMANDS, *(OPTIONAL_KUBERNETES_COMMANDS if extra else ())], progress)
    return Binaries(target, "built")


@contextlib.contextmanager
def _locked(directory: Path) -> Iterator[None]:
    directory.mkdir(parents=True, exist_ok=True)
    with (directory.parent / f"{directory.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def wrapper_go_mod(kubernetes_go_mod: str, version: str) -> str:
    """The go.mod of a module that builds ``k8s.io/kubernetes@v<version>`` from published modules.

    Each staging module that k/k requires at ``v0.0.0`` is replaced by its published ``v0.<minor>.<patch>``
    tag, and k/k's own ``godebug default=`` line is carried over (a dependency's godebug is ignored).
    """
    staging = sorted(set(re.findall(r"^\s+(k8s\.io/[\w.-]+) v0\.0\.0$", kubernetes_go_mod, re.MULTILINE)))
    if not staging:
        raise BuildFailed("k8s.io/kubernetes go.mod lists no staging modules at v0.0.0; the layout changed")
    staging_version = "v0." + version.split(".", 1)[1]
    lines = ["module local/multikueue-k8sbin", "", "go 1.25.0", ""]
    if godebug := re.search(r"^godebug default=(go[\d.]+)$", kubernetes_go_mod, re.MULTILINE):
        lines += [f"godebug default={godebug.group(1)}", ""]
    lines += [f"require k8s.io/kubernetes v{version}", "", "replace ("]
    lines += [f"\t{m} => {m} {staging_version}" for m in staging]
    lines += [")", ""]
    return "\n".join(lines)


def version_ldflags(version: str) -> str:
    major, minor, _ = version.split(".", 2)
    flags = ["-s", "-w"]
    for pkg in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        for key, value in (
            ("gitVersion", f"v{version}"),
            ("gitMajor", major),
            ("gitMinor", minor),
            ("gitTreeState", "clean"),
            ("buildDate", time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())),
        ):
            flags.append(f"-X {pkg}.{key}={value}")
    return " ".join(flags)


class _GoRunner:
    def __init__(self, go: str, progress: Progress) -> None:
        self.go = go
        self.progress = progress
        self.env = {**os.environ, "CGO_ENABLED": "0", "GOWORK": "off"}

    def run(self, args: Sequence[str], cwd: Path, *, timeout: float = 1800) -> str:
        cmd = [self.go, *args]
        proc = subprocess.run(cmd, cwd=cwd, env=self.env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode != 0:
            tail = "\n".join((proc.stdout + proc.stderr).splitlines()[-25:])
            raise BuildFailed(f"`go {' '.join(args)}` failed in {cwd} (exit {proc.returncode}):\n{tail}")
        return proc.stdout

    def build(self, packages: Sequence[str], out_dir: Path, cwd: Path, ldflags: str, label: str) -> None:
        """``go build -v`` with a live package counter; -v names each package as it is compiled."""
        deps = self.run(["list", "-deps", "-tags", _BUILD_TAGS, *packages], cwd)
        total = len(deps.split())
        cmd = [
            self.go,
            "build",
            "-v",
            "-trimpath",
            "-tags",
            _BUILD_TAGS,
            "-ldflags",
            ldflags,
            "-o",
            f"{out_dir}/",
            *packages,
        ]
        started = time.monotonic()
        compiled = 0
        tail: list[str] = []
        proc = subprocess.Popen(cmd, cwd=cwd, env=self.env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        last = [started]
        done = threading.Event()

        def heartbeat() -> None:  # the linker prints nothing for minutes; keep the user informed
            while not done.wait(20):
                if time.monotonic() - last[0] >= 20:
                    self.progress(
                        f"{label}: still working ({compiled}/{total} packages compiled, "
                        f"{time.monotonic() - started:.0f}s)"
                    )

        beat = threading.Thread(target=heartbeat, daemon=True)
        beat.start()
        try:
            assert proc.stdout is not None
            for line in proc.stdout:
                line = line.rstrip()
                tail = [*tail[-24:], line]
                if line and not line.startswith(("#", " ")):
                    compiled += 1
                    now = time.monotonic()
                    if now - last[0] >= 10:
                        self.progress(f"{label}: {compiled}/{total} packages compiled ({now - started:.0f}s)")
                        last[0] = now
            code = proc.wait()
        finally:
            done.set()
        if code != 0:
            raise BuildFailed(f"`go build` of {label} failed (exit {code}):\n" + "\n".join(tail))
        self.progress(f"{label}: built in {time.monotonic() - started:.0f}s")


def _build(go: str, version: str, target: Path, commands: Sequence[str], progress: Progress) -> None:
    started = time.monotonic()
    root = target.parent
    runner = _GoRunner(go, progress)
    progress(
        f"building Kubernetes v{version} ({', '.join(commands)}) and etcd from the Go module proxy into "
        f"{target}; the first build takes 10-30 minutes on 2 cores, later runs reuse the cache"
    )
    staging = Path(tempfile.mkdtemp(prefix="bin.partial-", dir=root))
    try:
        k8s_mod = root / "src" / "kubernetes"
        k8s_mod.mkdir(parents=True, exist_ok=True)
        progress(f"downloading k8s.io/kubernetes@v{version} module metadata")
        info = json.loads(runner.run(["mod", "download", "-json", f"k8s.io/kubernetes@v{version}"], root))
        if "Error" in info:
            raise BuildFailed(f"cannot download k8s.io/kubernetes@v{version}: {info['Error']}")
        (k8s_mod / "go.mod").write_text(wrapper_go_mod(Path(info["GoMod"]).read_text(), version))
        (k8s_mod / "go.sum").touch()
        packages = [f"k8s.io/kubernetes/cmd/{c}" for c in commands]
        progress("resolving dependencies (go get; downloads ~0.5 GB of modules on the first run)")
        runner.run(["get", *(f"{p}@v{version}" for p in packages)], k8s_mod)
        etcd_version = runner.run(["list", "-m", "-f", "{{.Version}}", "go.etcd.io/etcd/server/v3"], k8s_mod).strip()
        runner.build(packages, staging, k8s_mod, version_ldflags(version), f"Kubernetes v{version}")

        etcd_mod = root / "src" / "etcd"
        etcd_mod.mkdir(parents=True, exist_ok=True)
        (etcd_mod / "go.mod").write_text("module local/multikueue-etcdbin\n\ngo 1.25.0\n")
        (etcd_mod / "go.sum").touch()
        progress(f"resolving etcd {etcd_version} (the version Kubernetes v{version} pins)")
        runner.run(["get", f"go.etcd.io/etcd/server/v3@{etcd_version}"], etcd_mod)
        runner.build(["go.etcd.io/etcd/server/v3"], staging, etcd_mod, "-s -w", f"etcd {etcd_version}")
        # The server's main package is its module root; go names the binary after "server" (or "v3").
        built = next(p for p in (staging / "server", staging / "v3") if p.exists())
        built.rename(staging / "etcd")

        stamped = subprocess.run(
            [str(staging / "kube-apiserver"), "--version"],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
        ).stdout.strip()
        if stamped != f"Kubernetes v{version}":
            raise BuildFailed(f"kube-apiserver --version printed {stamped!r}, expected 'Kubernetes v{version}'")
        if target.exists():
            shutil.rmtree(target)
        staging.rename(target)
        (root / "build.json").write_text(
            json.dumps(
                {
                    "kubernetes": f"v{version}",
                    "etcd": etcd_version,
                    "commands": [*commands, "etcd"],
                    "go": runner.run(["env", "GOVERSION"], root).strip(),
                    "seconds": round(time.monotonic() - started, 1),
                },
                indent=2,
            )
        )
        progress(f"binaries ready in {target} after {time.monotonic() - started:.0f}s")
    finally:
        shutil.rmtree(staging, ignore_errors=True)
