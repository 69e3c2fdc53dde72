"""Images for the testcontainers provider, built locally: no registry is needed, or reachable, here.

- The base: Debian bookworm (Python 3.11, the Dockerfile's pinned minor) made by ``debootstrap`` and loaded with
  ``docker import``. The cluster containers run the host's static etcd and kube-apiserver on it; the dispatcher
  image is built on it instead of ``python:3.11-slim-bookworm``.
- The dispatcher: the project's own ``Dockerfile``, with the wheels built on the host first (``wheelhouse/``),
  because containers do not trust the host's package-registry proxy; nothing of the host reaches the final stage.

The rootfs tarball is cached next to the Kubernetes binaries, so CI on the same machine builds it once.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from multikueue import __version__
from multikueue_testbed.binaries import cache_root

ROOT = Path(__file__).resolve().parents[1]
BASE_IMAGE = "local/multikueue-base:bookworm"
DISPATCHER_IMAGE = f"local/multikueue:{__version__}-e2e"
SUITE, MIRROR = "bookworm", "http://deb.debian.org/debian"
PACKAGES = "python3,python3-venv,ca-certificates"


class ImageError(RuntimeError):
    """An image could not be built; the message says which step and what to install."""


def _say(message: str) -> None:
    print(f"[e2e images] {message}", file=sys.stderr, flush=True)


def _run(argv: list[str], what: str, timeout: float) -> None:
    started = time.monotonic()
    result = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).splitlines()[-20:])
        raise ImageError(f"{what} failed (exit {result.returncode}): {' '.join(argv)}\n{tail}")
    _say(f"{what}: done in {time.monotonic() - started:.0f}s")


def _has_image(client: Any, name: str) -> bool:
    import docker.errors

    try:
        client.images.get(name)
        return True
    except docker.errors.ImageNotFound:
        return False


def base_rootfs() -> Path:
    """A gzipped tarball of a minimal Debian with python3, made once with debootstrap and cached."""
    tarball = cache_root() / "images" / f"debian-{SUITE}-python3.tar.gz"
    if tarball.exists():
        return tarball
    if shutil.which("debootstrap") is None:
        raise ImageError("debootstrap is not installed: `apt-get install debootstrap` (as root) builds the base image")
    tarball.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="multikueue-rootfs-") as work:
        rootfs = Path(work) / "rootfs"
        _say(f"debootstrap {SUITE} with {PACKAGES} (about 2 minutes, once per machine)")
        _run(
            ["debootstrap", "--variant=minbase", f"--include={PACKAGES}", SUITE, str(rootfs), MIRROR],
            "debootstrap",
            timeout=1200,
        )
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        partial = tarball.with_suffix(".partial")
        _run(["tar", "-C", str(rootfs), "-czf", str(partial), "."], "tar the rootfs", timeout=600)
        partial.rename(tarball)
    return tarball


def ensure_base_image(client: Any) -> str:
    if not _has_image(client, BASE_IMAGE):
        tarball = base_rootfs()
        _say(f"docker import {tarball.name} as {BASE_IMAGE}")
        repository, tag = BASE_IMAGE.split(":")
        with tarball.open("rb") as data:
            client.api.import_image_from_data(data.read(), repository=repository, tag=tag)
    return BASE_IMAGE


def build_wheelhouse() -> Path:
    """Every runtime dependency (and the build backend) as wheels, fetched by the host's own pip; fetched again
    whenever pyproject.toml changes."""
    wheelhouse = ROOT / "wheelhouse"
    stamp = wheelhouse / ".pyproject.sha256"
    wanted = hashlib.sha256((ROOT / "pyproject.toml").read_bytes()).hexdigest()
    if stamp.exists() and stamp.read_text() == wanted and any(wheelhouse.glob("*.whl")):
        return wheelhouse
    for old in wheelhouse.glob("*.whl"):
        old.unlink()
    _say("pip wheel: the project's dependencies into wheelhouse/ (the image installs them with no index)")
    argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--wheel-dir", str(wheelhouse)]
    _run([*argv, str(ROOT), "setuptools>=77"], "pip wheel", timeout=900)  # the build backend pyproject.toml asks for
    for own in wheelhouse.glob("multikueue-*.whl"):
        own.unlink()  # the image installs the project from its source, never from a stale wheel
    stamp.write_text(wanted)
    return wheelhouse


def build_dispatcher_image(client: Any) -> str:
    """The project's Dockerfile on the local base; layers are cached by the engine between runs."""
    base = ensure_base_image(client)
    build_wheelhouse()
    _say(f"docker build {DISPATCHER_IMAGE} from the Dockerfile (BASE_IMAGE={base})")
    started = time.monotonic()
    try:
        client.images.build(path=str(ROOT), tag=DISPATCHER_IMAGE, buildargs={"BASE_IMAGE": base}, rm=True, pull=False)
    except Exception as e:  # docker.errors.BuildError carries the build log
        log = "".join(str(chunk.get("stream", "")) for chunk in getattr(e, "build_log", []) or [])
        raise ImageError(f"docker build of the Dockerfile failed: {e}\n{log[-3000:]}") from None
    _say(f"docker build: done in {time.monotonic() - started:.0f}s")
    return DISPATCHER_IMAGE


def main() -> int:
    """``python -m e2e.images``: build both images ahead of the suite, printing each step."""
    from e2e.providers.containers import _docker

    client = _docker()
    ensure_base_image(client)
    print(build_dispatcher_image(client))
    return 0


if __name__ == "__main__":
    sys.exit(main())
