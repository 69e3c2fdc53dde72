"""Kueue "with the fix" for the bench (#29): bench/kueue-patches/worker-client-connection.patch fits Kueue's module
at the version the bed runs, without fuzz, and the build made with it (cached beside the interop profile's Kueue,
by the patch's digest) knows the feature gate the released Kueue refuses."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from bench.kueue import FIX_GATE, FIX_PATCH
from multikueue_testbed import crds
from multikueue_testbed.interop import _module_dir, kueue_binary, patched_kueue_binary


def _progress(message: str) -> None:
    sys.stderr.write(f"[kueue] {message}\n")  # a cold build takes minutes: say where it is


def test_the_patch_fits_the_module_without_fuzz(tmp_path: Path) -> None:
    """The files it touches, copied from the module as the proxy serves it, take it as it is (git apply --check)."""
    module = _module_dir("sigs.k8s.io/kueue", crds.KUEUE_VERSION)
    touched = re.findall(r"^\+\+\+ b/(\S+)$", FIX_PATCH.read_text(), flags=re.MULTILINE)
    assert len(touched) == 4, touched  # main.go, the gate, the options, the worker clients
    for path in touched:
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(module / path, tmp_path / path)
    checked = subprocess.run(["git", "apply", "--check", "--verbose", str(FIX_PATCH)], cwd=tmp_path, text=True,
                             capture_output=True, timeout=60, check=False,
                             env={**os.environ, "GIT_CEILING_DIRECTORIES": str(tmp_path.parent)})  # fmt: skip
    assert checked.returncode == 0, checked.stderr
    assert all(f"Checking patch {path}..." in checked.stderr for path in touched), checked.stderr


def _start(binary: Path, tmp_path: Path) -> str:
    """Start Kueue with the gate on and no cluster to reach: it reads its configuration and feature gates, logs
    them, and ends when it finds no kubeconfig. Its output."""
    config = tmp_path / "config.yaml"
    config.write_text("apiVersion: config.kueue.x-k8s.io/v1beta2\nkind: Configuration\n")
    # No kubeconfig anywhere it looks (KUBECONFIG, in-cluster, ~/.kube/config): it must not reach a real cluster.
    env = {k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")}
    env |= {"KUBECONFIG": str(tmp_path / "none"), "HOME": str(tmp_path)}
    ended = subprocess.run([str(binary), f"--config={config}", f"--feature-gates={FIX_GATE}=true",
                            "--zap-log-level=2"], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
                           check=False)  # fmt: skip
    assert ended.returncode != 0
    return ended.stdout + ended.stderr


def test_the_patched_build_takes_the_gate_the_released_one_refuses(tmp_path: Path) -> None:
    patched = patched_kueue_binary(FIX_PATCH, _progress)
    assert patched.parent.parent == kueue_binary(_progress).parent.parent  # the interop profile's cache
    assert patched.parent.name.startswith(f"kueue-{crds.KUEUE_VERSION}-")

    output = _start(patched, tmp_path)
    assert f'"{FIX_GATE}":true' in output, output[-2000:]  # Kueue's "Loaded feature gates" line
    assert "unable to get kubeconfig" in output  # it went on past the gates, to where a cluster is needed

    released = _start(kueue_binary(_progress), tmp_path)
    assert f"unrecognized feature gate: {FIX_GATE}" in released, released[-2000:]
