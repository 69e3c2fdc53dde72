from __future__ import annotations

import stat
from pathlib import Path

import pytest

from multikueue_testbed import binaries
from multikueue_testbed.binaries import BinariesUnavailable, find_binaries, version_ldflags, wrapper_go_mod

K8S_GO_MOD = """module k8s.io/kubernetes

go 1.25.0

godebug default=go1.25

require (
\tgithub.com/spf13/cobra v1.10.0
\tk8s.io/api v0.0.0
\tk8s.io/apiextensions-apiserver v0.0.0
\tk8s.io/client-go v0.0.0
\tk8s.io/utils v0.0.0-20250820121507-0af2bda4dd1d
)

replace (
\tk8s.io/api => ./staging/src/k8s.io/api
)
"""


def test_wrapper_pins_each_staging_module_to_its_published_tag() -> None:
    mod = wrapper_go_mod(K8S_GO_MOD, "1.35.4")
    assert "require k8s.io/kubernetes v1.35.4" in mod
    assert "godebug default=go1.25" in mod
    for staging in ("k8s.io/api", "k8s.io/apiextensions-apiserver", "k8s.io/client-go"):
        assert f"\t{staging} => {staging} v0.35.4" in mod
    assert "k8s.io/utils =>" not in mod  # a pseudo-versioned real module is left alone
    assert "./staging" not in mod


def test_wrapper_refuses_a_go_mod_without_staging_modules() -> None:
    with pytest.raises(binaries.BuildFailed, match="layout changed"):
        wrapper_go_mod("module k8s.io/kubernetes\n", "1.35.4")


def test_version_is_stamped_for_both_version_packages() -> None:
    flags = version_ldflags("1.35.4")
    for pkg in ("k8s.io/client-go/pkg/version", "k8s.io/component-base/version"):
        assert f"-X {pkg}.gitVersion=v1.35.4" in flags
        assert f"-X {pkg}.gitMajor=1" in flags
        assert f"-X {pkg}.gitMinor=35" in flags


def _fake_program(path: Path) -> None:
    path.write_text("#!/bin/sh\necho 'Kubernetes v1.35.4'\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def test_kubebuilder_assets_come_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("kube-apiserver", "etcd"):
        _fake_program(tmp_path / name)
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    found = find_binaries(build=False)
    assert (found.source, found.directory) == ("KUBEBUILDER_ASSETS", tmp_path)
    assert found.version() == "Kubernetes v1.35.4"


def test_incomplete_kubebuilder_assets_name_what_is_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_program(tmp_path / "kube-apiserver")
    monkeypatch.setenv("KUBEBUILDER_ASSETS", str(tmp_path))
    with pytest.raises(BinariesUnavailable, match=r"lacks executable etcd"):
        find_binaries(build=False)


def test_a_complete_cache_is_used_without_go(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("MULTIKUEUE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")
    bin_dir = binaries.cache_dir() / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("kube-apiserver", "etcd", "kubectl"):
        _fake_program(bin_dir / name)
    (bin_dir.parent / "build.json").write_text("{}")
    assert find_binaries().source == "cache"


def test_without_binaries_or_go_the_error_says_what_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KUBEBUILDER_ASSETS", raising=False)
    monkeypatch.setenv("MULTIKUEUE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(BinariesUnavailable) as e:
        find_binaries()
    assert "KUBEBUILDER_ASSETS" in str(e.value)
    assert "install Go" in str(e.value)


def test_cache_location_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("MULTIKUEUE_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert binaries.cache_dir("1.35.4") == tmp_path / "multikueue" / "kubernetes-v1.35.4"
