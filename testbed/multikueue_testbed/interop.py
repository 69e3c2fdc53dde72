"""Upstream components built from their Go modules and run against the test bed: the interop profile (#9).

Kueue is built with a wrapper module (``go install pkg@version`` asks the proxy for the module's version list,
which this machine's proxy refuses) and Kueue's own go.sum (some of its dependencies are missing from the checksum
database here). Each cluster gets its own Kueue process: webhooks served on 127.0.0.1 with a certificate from the
bed's PKI, Kueue's webhook configurations from its module rewritten to point there, leader election off.
Any step that cannot be done raises ``ComponentUnavailable`` naming the component and why.
"""

from __future__ import annotations

import base64
import copy
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client as k8s_client
from kubernetes_asyncio.client.exceptions import ApiException

from multikueue.kube.client import ApiClient
from multikueue.pki import CertificateAuthority
from multikueue_testbed import crds, processes
from multikueue_testbed.binaries import cache_root, find_binaries
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.processes import ManagedProcess
from multikueue_testbed.testbed import Cluster, free_port

KUEUE_NAMESPACE = "kueue-system"
# Hard-coded in Kueue's cmd/kueue/main.go when internal certificate management is off: it exits without them.
KUEUE_METRICS_CERTS = Path("/etc/kueue/metrics/certs")
Progress = Callable[[str], None]


class ComponentUnavailable(RuntimeError):
    """An upstream component could not be built or started here; the message names it and says why."""


def _quiet(message: str) -> None:
    del message


def kueue_binary(progress: Progress = _quiet) -> Path:
    """Kueue's manager at the CRDs' version, built once into the cache (~10 min on 2 cores, cold)."""
    version = crds.KUEUE_VERSION
    target = cache_root() / "interop" / f"kueue-{version}" / "kueue"
    ldflags = f"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion={version}"
    return _go_build("Kueue", "sigs.k8s.io/kueue", "sigs.k8s.io/kueue/cmd/kueue", version, target, progress, ldflags)


def patched_kueue_binary(patch: Path, progress: Progress = _quiet) -> Path:
    """Kueue's manager at the CRDs' version with ``patch`` applied (a unified diff against the module's root),
    built once into the cache under the version and the patch's digest. The module cache is read-only: a copy of
    the module is patched (``git apply``, no fuzz: a patch that no longer fits fails, naming the file) and built as
    the main module, so the Go build cache shares every unpatched package with ``kueue_binary``'s build."""
    version, target = crds.KUEUE_VERSION, patched_kueue_target(patch)
    digest = target.parent.name.rsplit("-", 1)[1]
    if target.exists():
        return target
    label = f"Kueue {version} + {patch.name}"
    go, git = shutil.which("go"), shutil.which("git")
    if go is None or git is None:
        raise ComponentUnavailable(f"{label}: needs Go and git on PATH")
    source = _module_dir("sigs.k8s.io/kueue", version)
    ldflags = f"-s -w -X sigs.k8s.io/kueue/pkg/version.GitVersion={version}-{digest}"
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"kueue.{os.getpid()}.tmp")
    with tempfile.TemporaryDirectory(prefix="multikueue-kueue-patched-") as work:
        module = Path(work) / "kueue"
        progress(f"{label}: copying the module ...")
        shutil.copytree(source, module)
        _writable(module)
        # No repository above the copy may take the patch's paths as its own (git apply would skip them).
        env = {**os.environ, "CGO_ENABLED": "0", "GIT_CEILING_DIRECTORIES": work}
        steps = [("checking the patch fits (git apply --check)", [git, "apply", "--check", str(patch.resolve())]),
                 ("applying it (git apply)", [git, "apply", str(patch.resolve())]),
                 ("go build (~10 min cold; minutes when the Go build cache holds Kueue's own build)",
                  [go, "build", "-o", str(partial), "-ldflags", ldflags, "./cmd/kueue"])]  # fmt: skip
        for what, argv in steps:
            progress(f"{label}: {what} ...")
            result = subprocess.run(argv, cwd=module, capture_output=True, text=True, check=False, env=env)
            if result.returncode != 0:
                tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
                raise ComponentUnavailable(f"{label}: `{' '.join(argv[:2])}` failed:\n{tail}")
    partial.rename(target)
    return target


def patched_kueue_target(patch: Path) -> Path:
    """Where ``patched_kueue_binary`` keeps its build: beside Kueue's own, named by version and the patch's digest
    (another patch, or this one changed, is another build)."""
    digest = hashlib.sha256(patch.read_bytes()).hexdigest()[:12]
    return cache_root() / "interop" / f"kueue-{crds.KUEUE_VERSION}-{digest}" / "kueue"


def _writable(tree: Path) -> None:
    """The module cache's files and directories are read-only; a copy to patch (and remove) must not be."""
    for path in (tree, *tree.rglob("*")):
        if not path.is_symlink():
            path.chmod(path.stat().st_mode | 0o200)


def _webhook_configurations(module: Path, port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's Mutating/ValidatingWebhookConfigurations, pointed at https://127.0.0.1:<port><path>."""
    bundle = base64.b64encode(ca_pem).decode()
    documents = yaml.safe_load_all((module / "config/components/webhook/manifests.yaml").read_text())
    result = []
    for doc in documents:
        if not doc:
            continue
        doc = copy.deepcopy(doc)
        doc["metadata"]["name"] = f"kueue-{doc['metadata']['name']}"
        for webhook in doc.get("webhooks") or []:
            path = webhook["clientConfig"]["service"]["path"]
            webhook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": bundle}
        result.append(doc)
    return result


@dataclass
class KueueProcess:
    """One Kueue manager serving one cluster of the bed."""

    cluster: Cluster
    binary: Path
    directory: Path
    webhook_port: int = field(default_factory=free_port)
    health_port: int = field(default_factory=free_port)
    metrics_port: int = field(default_factory=free_port)
    log_level: str = "2"  # zap: "info", "error", or an integer > 0 (2: debug, what a failing test wants)
    extra: dict[str, Any] = field(default_factory=dict)  # more top-level Configuration, e.g. ``multiKueue``
    frameworks: tuple[str, ...] = ("batch/job",)  # Kueue's own integrations to enable
    external_frameworks: tuple[str, ...] = ()
    kubeconfig: Path | None = None  # whom Kueue acts as; the bed's admin by default
    feature_gates: tuple[str, ...] = ()  # e.g. "MultiKueueClusterProfile=true"
    process: processes.ManagedProcess | None = None

    def configuration(self, external_frameworks: list[str]) -> dict[str, Any]:
        return {
            "apiVersion": "config.kueue.x-k8s.io/v1beta2",
            "kind": "Configuration",
            "namespace": KUEUE_NAMESPACE,
            "leaderElection": {"leaderElect": False},
            "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": self.webhook_port, "certDir": str(self.directory / "webhook")},
            "metrics": {"bindAddress": f"127.0.0.1:{self.metrics_port}"},
            "health": {"healthProbeBindAddress": f"127.0.0.1:{self.health_port}"},
            "integrations": {"frameworks": list(self.frameworks), "externalFrameworks": external_frameworks},
        } | self.extra

    async def install(self, api: ApiClient, ca: CertificateAuthority, external_frameworks: list[str]) -> None:
        """Namespace, serving certificate and webhook configurations; then start the process."""
        self.directory.mkdir(parents=True, exist_ok=True)
        serving = ca.issue("kueue-webhook", ip_addresses=("127.0.0.1",), server=True)
        (self.directory / "webhook").mkdir(exist_ok=True)
        serving.write(self.directory / "webhook", "tls")
        _metrics_certificate(ca)
        await crds.install_crds(api, converted_kueue_crds(self.webhook_port, ca.cert_pem))
        core = k8s_client.CoreV1Api(k8s(api))
        try:
            await core.create_namespace(raw_body({"metadata": {"name": KUEUE_NAMESPACE}}))
        except ApiException as e:
            if e.status != 409:
                raise
        admission: Any = k8s_client.AdmissionregistrationV1Api(k8s(api))
        for doc in _webhook_configurations(crds.KUEUE.directory(), self.webhook_port, ca.cert_pem):
            create = (admission.create_mutating_webhook_configuration if doc["kind"] == "MutatingWebhookConfiguration"
                      else admission.create_validating_webhook_configuration)  # fmt: skip
            await create(raw_body(doc))
        self.external_frameworks = tuple(external_frameworks)
        self._start()

    def restart(self, *, frameworks: tuple[str, ...] | None = None, extra: dict[str, Any] | None = None) -> None:
        """Stop, then start again with other integrations or configuration (ready when this returns)."""
        self.stop()
        if frameworks is not None:
            self.frameworks = frameworks
        if extra is not None:
            self.extra = extra
        self._start()
        self.wait_ready()

    def _start(self) -> None:
        config_path = self.directory / "kueue-config.yaml"
        config_path.write_text(yaml.safe_dump(self.configuration(list(self.external_frameworks))))
        env = {**dict(os.environ), "KUBECONFIG": str(self.kubeconfig or self.cluster.kubeconfig_path)}
        gates = ",".join(("VisibilityOnDemand=false", *self.feature_gates))
        argv = [str(self.binary), f"--config={config_path}", f"--feature-gates={gates}",
                f"--zap-log-level={self.log_level}"]  # fmt: skip
        self.process = processes.ManagedProcess(f"kueue-{self.cluster.name}", argv, self.directory / "kueue.log", env)
        self.process.start()

    def wait_ready(self, timeout: float = 90.0) -> None:
        deadline = time.monotonic() + timeout
        url = f"http://127.0.0.1:{self.health_port}/readyz"
        while time.monotonic() < deadline:
            if self.process is not None and not self.process.running:
                raise ComponentUnavailable(f"Kueue on {self.cluster.name} exited; last log lines:\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(url, timeout=2) as answer:
                    if answer.status == 200 and self._webhook_answers():
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise ComponentUnavailable(f"Kueue on {self.cluster.name} not ready in {timeout:.0f}s:\n{self.log_tail()}")

    def _webhook_answers(self) -> bool:
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        try:
            urllib.request.urlopen(f"https://127.0.0.1:{self.webhook_port}/", timeout=2, context=context)
        except urllib.error.HTTPError:
            return True  # 404: the server is up
        except OSError:
            return False
        return True

    def log_tail(self, lines: int = 20) -> str:
        path = self.directory / "kueue.log"
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) if path.exists() else "(no log)"

    def stop(self) -> None:
        if self.process is not None:
            self.process.stop()


def _metrics_certificate(ca: CertificateAuthority) -> None:
    if (KUEUE_METRICS_CERTS / "tls.crt").exists():
        return
    try:
        KUEUE_METRICS_CERTS.mkdir(parents=True, exist_ok=True)
        ca.issue("kueue-metrics", ip_addresses=("127.0.0.1",), server=True).write(KUEUE_METRICS_CERTS, "tls")
    except OSError as e:
        raise ComponentUnavailable(
            f"Kueue reads its metrics certificate from {KUEUE_METRICS_CERTS} (hard-coded when its internal "
            f"certificate management is off) and cannot start without it: {e}"
        ) from None


# ----------------------------------------------------------------------------- pods that run: KCM, scheduler, kwok

KWOK_VERSION = "v0.8.0"
TEKTON_NAMESPACE = "tekton-pipelines"
FAKE_NODE = "kwok-node-0"


def _go_build(label: str, module: str, package: str, version: str, target: Path, progress: Progress,
              ldflags: str = "-s -w") -> Path:  # fmt: skip
    """Build ``package`` of ``module@version`` into ``target`` (once: the cache keeps it) with a wrapper module.

    ``go install pkg@version`` cannot be used here: it asks the proxy for the module's version list, which this
    machine's proxy refuses, and it refuses modules with ``replace`` directives. The wrapper carries the module's
    own go.sum (some dependencies are missing from the checksum database here) and its ``replace`` lines.
    """
    if target.exists():
        return target
    go = shutil.which("go")
    if go is None:
        raise ComponentUnavailable(f"{label} {version}: needs Go on PATH to build {package}")
    source = _module_dir(module, version)
    replaces = [line.removeprefix("replace ").split("=>") for line in (source / "go.mod").read_text().splitlines()
                if line.startswith("replace ")]  # fmt: skip
    steps = [["mod", "init", "local/multikueue-interop"]]
    steps += [["mod", "edit", "-replace", f"{old.split()[0]}={'@'.join(new.split())}"] for old, new in replaces]
    steps += [["get", f"{package}@{version}"], ["build", "-o", str(target.with_suffix(".tmp")), "-ldflags", ldflags,
                                                package]]  # fmt: skip
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="multikueue-interop-build-") as work:
        (Path(work) / "go.sum").write_bytes((source / "go.sum").read_bytes())
        for args in steps:
            progress(f"{label} {version}: go {' '.join(args[:2])} ...")
            result = subprocess.run([go, *args], cwd=work, capture_output=True, text=True, check=False,
                                    env={**os.environ, "CGO_ENABLED": "0"})  # fmt: skip
            if result.returncode != 0:
                tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-15:])
                raise ComponentUnavailable(f"{label} {version}: `go {' '.join(args)}` failed:\n{tail}")
    target.with_suffix(".tmp").rename(target)
    return target


def jobset_binary(progress: Progress = _quiet) -> Path:
    """JobSet's controller manager (its ``main`` is the module's root package), at the CRD's version."""
    source = crds.JOBSET
    target = cache_root() / "interop" / f"jobset-{source.version}" / "jobset"
    return _go_build("JobSet", source.module, source.module, source.version, target, progress)


HELM_VERSION = "v3.22.0"


def helm_binary(progress: Progress = _quiet) -> Path:
    """Helm's CLI, built once from its module (the chart's lint, template and install in the tests)."""
    target = cache_root() / "interop" / f"helm-{HELM_VERSION}" / "helm"
    ldflags = f"-s -w -X helm.sh/helm/v3/internal/version.version={HELM_VERSION}"
    return _go_build("Helm", "helm.sh/helm/v3", "helm.sh/helm/v3/cmd/helm", HELM_VERSION, target, progress, ldflags)


PROMETHEUS_VERSION = "v0.316.0"  # the Go module's version of Prometheus 3.x


def prometheus_binary(program: str, progress: Progress = _quiet) -> Path:
    """Prometheus' ``prometheus`` or ``promtool``, built once from its module (the monitoring tests)."""
    target = cache_root() / "interop" / f"prometheus-{PROMETHEUS_VERSION}" / program
    module = "github.com/prometheus/prometheus"
    return _go_build(f"Prometheus {program}", module, f"{module}/cmd/{program}", PROMETHEUS_VERSION, target, progress)


def kwok_binary(progress: Progress = _quiet) -> Path:
    target = cache_root() / "interop" / f"kwok-{KWOK_VERSION}" / "kwok"
    return _go_build("kwok", "sigs.k8s.io/kwok", "sigs.k8s.io/kwok/cmd/kwok", KWOK_VERSION, target, progress)


def tekton_binary(progress: Progress = _quiet) -> Path:
    return tekton_program("controller", progress)


def tekton_program(name: str, progress: Progress = _quiet) -> Path:
    """One of Tekton Pipelines' programs (``cmd/<name>``: controller, entrypoint, nop, ...), built once."""
    version = crds.TEKTON_VERSION
    target = cache_root() / "interop" / f"tekton-{version}" / name
    module = "github.com/tektoncd/pipeline"
    return _go_build(f"Tekton {name}", module, f"{module}/cmd/{name}", version, target, progress)


def kwok_stages(complete_after_ms: int) -> str:
    """kwok's own fast stages from its module (node initialised; pods ready), and a pod-complete stage for pods a
    TaskRun owns (kwok's selects Job-owned pods), after ``complete_after_ms`` so a run can be cancelled meanwhile."""
    root = _module_dir("sigs.k8s.io/kwok", KWOK_VERSION) / "kustomize" / "stage"
    documents = [yaml.safe_load((root / "node/fast/node-initialize.yaml").read_text()),
                 yaml.safe_load((root / "node/heartbeat/node-heartbeat.yaml").read_text()),
                 yaml.safe_load((root / "pod/fast/pod-ready.yaml").read_text()),
                 yaml.safe_load((root / "pod/fast/pod-delete.yaml").read_text())]  # fmt: skip
    complete = yaml.safe_load((root / "pod/fast/pod-complete.yaml").read_text())
    for expression in complete["spec"]["selector"]["matchExpressions"]:
        if expression["key"] == ".metadata.ownerReferences.[].kind":
            expression["values"] = ["TaskRun"]
    complete["spec"]["delay"] = {"durationMilliseconds": complete_after_ms}
    documents.append(complete)
    # Job pods (a JobSet's) complete too, but only those labelled for it: the others run until stopped.
    jobs = copy.deepcopy(complete)
    jobs["metadata"]["name"] = "pod-complete-labelled-job"
    for expression in jobs["spec"]["selector"]["matchExpressions"]:
        if expression["key"] == ".metadata.ownerReferences.[].kind":
            expression["values"] = ["Job"]
    jobs["spec"]["selector"]["matchExpressions"].append(
        {"key": f".metadata.labels.{COMPLETE_LABEL}", "operator": "In", "values": ["true"]}
    )
    documents.append(jobs)
    return yaml.safe_dump_all(documents)


COMPLETE_LABEL = "interop_complete"
"""On a Job's pod template: kwok completes its pods (after the delay) instead of running them until stopped."""


def _module_dir(module: str, version: str) -> Path:
    result = subprocess.run(["go", "mod", "download", "-json", f"{module}@{version}"], capture_output=True, text=True,
                            check=False)  # fmt: skip
    if result.returncode != 0:
        raise ComponentUnavailable(f"{module}@{version}: cannot be downloaded: {result.stderr.strip()[-500:]}")
    return Path(json.loads(result.stdout)["Dir"])


def fake_node() -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": FAKE_NODE,
                     "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
                     "labels": {"kubernetes.io/hostname": FAKE_NODE, "kubernetes.io/os": "linux",
                                "kubernetes.io/arch": "amd64", "type": "kwok"}},
        "spec": {},
        "status": {"allocatable": {"cpu": "32", "memory": "256Gi", "pods": "110"},
                   "capacity": {"cpu": "32", "memory": "256Gi", "pods": "110"}},
    }  # fmt: skip


@dataclass
class ClusterRuntime:
    """What makes pods run on one cluster of the bed: kube-controller-manager, kube-scheduler, kwok (one fake
    node whose pods go Ready, then Succeeded) and, on workers, the Tekton controller."""

    cluster: Cluster
    directory: Path
    processes: list[processes.ManagedProcess] = field(default_factory=list)

    def _start(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> None:
        process = processes.ManagedProcess(f"{name}-{self.cluster.name}", argv, self.directory / f"{name}.log",
                                           {**dict(os.environ), **(env or {})})  # fmt: skip
        process.start()
        self.processes.append(process)

    def start_control_plane(self, controller_manager: Path, scheduler: Path) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        d, kubeconfig = self.cluster.directory, str(self.cluster.kubeconfig_path)
        self._start("kube-controller-manager", [
            str(controller_manager), f"--kubeconfig={kubeconfig}", "--leader-elect=false",
            "--bind-address=127.0.0.1", f"--secure-port={free_port()}", "--use-service-account-credentials=false",
            f"--service-account-private-key-file={d / 'sa.key'}", f"--root-ca-file={d / 'ca.crt'}",
            f"--cert-dir={self.directory / 'kcm-certs'}",
        ])  # fmt: skip
        self._start("kube-scheduler", [
            str(scheduler), f"--kubeconfig={kubeconfig}", "--leader-elect=false", "--bind-address=127.0.0.1",
            f"--secure-port={free_port()}", f"--cert-dir={self.directory / 'scheduler-certs'}",
        ])  # fmt: skip

    def start_kwok(self, kwok: Path, stages: str) -> None:
        config = self.directory / "kwok-stages.yaml"
        config.write_text(stages)
        self._start("kwok", [
            str(kwok), f"--kubeconfig={self.cluster.kubeconfig_path}", "--manage-all-nodes=false",
            "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", "--manage-nodes-with-label-selector=",
            "--manage-single-node=", "--cidr=10.0.0.0/24", "--node-ip=10.0.0.1", f"--config={config}",
            f"--server-address=127.0.0.1:{free_port()}",
        ])  # fmt: skip

    def start_jobset(self, binary: Path, ca: CertificateAuthority) -> ManagedProcess:
        """JobSet's controller, its webhooks served on 127.0.0.1 with no configuration sending them anything (the
        tests write JobSets as its defaulting webhook leaves them); returned so that a test module can stop it."""
        certs = self.directory / "jobset-webhook"
        certs.mkdir(parents=True, exist_ok=True)
        ca.issue("jobset-webhook", ip_addresses=("127.0.0.1",), server=True).write(certs, "tls")
        config = self.directory / "jobset-config.yaml"
        config.write_text(yaml.safe_dump({
            "apiVersion": "config.jobset.x-k8s.io/v1alpha1", "kind": "Configuration",
            "leaderElection": {"leaderElect": False}, "internalCertManagement": {"enable": False},
            "webhook": {"host": "127.0.0.1", "port": free_port(), "certDir": str(certs)},
            "metrics": {"bindAddress": "0"}, "health": {"healthProbeBindAddress": f"127.0.0.1:{free_port()}"},
        }))  # fmt: skip
        self._start("jobset", [str(binary), f"--config={config}"], {"KUBECONFIG": str(self.cluster.kubeconfig_path)})
        return self.processes[-1]

    def start_tekton(self, controller: Path) -> None:
        env = {
            "KUBECONFIG": str(self.cluster.kubeconfig_path), "SYSTEM_NAMESPACE": TEKTON_NAMESPACE,
            "KUBERNETES_MIN_VERSION": "v1.28.0", "CONFIG_DEFAULTS_NAME": "config-defaults",
            "CONFIG_LOGGING_NAME": "config-logging", "CONFIG_OBSERVABILITY_NAME": "config-observability",
            "CONFIG_FEATURE_FLAGS_NAME": "feature-flags",
            "CONFIG_LEADERELECTION_NAME": "config-leader-election-controller",
            "CONFIG_SPIRE": "config-spire", "METRICS_DOMAIN": "tekton.dev/pipeline",
            "PROBES_PORT": str(free_port()), "PROFILING_PORT": str(free_port()),
            "METRICS_PROMETHEUS_PORT": str(free_port()),
        }  # fmt: skip
        images = ["-entrypoint-image", "interop/entrypoint", "-nop-image", "interop/nop", "-sidecarlogresults-image",
                  "interop/sidecarlogresults", "-workingdirinit-image", "interop/workingdirinit", "-shell-image",
                  "interop/busybox", "-shell-image-win", "interop/powershell"]  # fmt: skip
        self._start("tekton-controller", [str(controller), f"--kubeconfig={self.cluster.kubeconfig_path}",
                                          "-disable-ha", *images], env)  # fmt: skip

    def check(self) -> None:
        for process in self.processes:
            if not process.running:
                raise ComponentUnavailable(f"{process.name} exited:\n{process.log_tail()}")

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()


def tekton_config_maps() -> list[dict[str, Any]]:
    """The Tekton controller's ConfigMaps from its module (config/config-*.yaml), metrics export off."""
    root = crds.TEKTON.directory() / "config"
    maps = []
    for path in sorted(root.glob("config-*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "ConfigMap":
                doc["metadata"]["namespace"] = TEKTON_NAMESPACE
                if doc["metadata"]["name"] == "config-observability":
                    doc["data"] = {"metrics-protocol": "none", "tracing-protocol": "none"}
                maps.append(doc)
    return maps


# --------------------------------------------------------------------------------------------------- tekton-kueue

TEKTON_KUEUE_MODULE = "github.com/konflux-ci/tekton-kueue"
TEKTON_KUEUE_VERSION = "v0.3.0"  # the newest the proxy here serves; built against Kueue v0.14.5 (v1beta1 Workloads)
# Kueue's CRDs whose v1beta1 <-> v1beta2 conversion its webhook serves (config/components/crd/patches).
CONVERTED = ("localqueues", "clusterqueues", "cohorts", "workloads", "multikueueclusters")


def tekton_kueue_binary(progress: Progress = _quiet) -> Path:
    """tekton-kueue's manager (``controller``, ``webhook`` subcommands); its go.mod replaces cel-go."""
    target = cache_root() / "interop" / f"tekton-kueue-{TEKTON_KUEUE_VERSION}" / "manager"
    package = f"{TEKTON_KUEUE_MODULE}/cmd"
    return _go_build("tekton-kueue", TEKTON_KUEUE_MODULE, package, TEKTON_KUEUE_VERSION, target, progress)


LOCAL_PATH_MODULE = "github.com/rancher/local-path-provisioner"
LOCAL_PATH_VERSION = "v0.0.30"  # the newest the proxy here serves


def local_path_provisioner_binary(progress: Progress = _quiet) -> Path:
    """rancher's local-path-provisioner (kind's own default storage), for the kind suite's workers."""
    target = cache_root() / "interop" / f"local-path-provisioner-{LOCAL_PATH_VERSION}" / "local-path-provisioner"
    return _go_build("local-path-provisioner", LOCAL_PATH_MODULE, LOCAL_PATH_MODULE, LOCAL_PATH_VERSION, target,
                     progress)  # fmt: skip


def converted_kueue_crds(port: int, ca_pem: bytes) -> list[dict[str, Any]]:
    """Kueue's CRDs serving v1beta1 too, converted by that cluster's Kueue (as its kustomize patches set up):
    tekton-kueue, built against Kueue v0.14, reads and writes v1beta1 Workloads."""
    bases = crds.KUEUE.directory() / "config" / "components" / "crd" / "bases"
    result = []
    for path in sorted(bases.glob("kueue.x-k8s.io_*.yaml")):
        crd = yaml.safe_load(path.read_text())
        for key in ("creationTimestamp", "annotations"):
            crd["metadata"].pop(key, None)
        crd.pop("status", None)
        if crd["spec"]["names"]["plural"] in CONVERTED:
            crd["spec"]["conversion"] = {"strategy": "Webhook", "webhook": {
                "clientConfig": {"url": f"https://127.0.0.1:{port}/convert",
                                 "caBundle": base64.b64encode(ca_pem).decode()},
                "conversionReviewVersions": ["v1"]}}  # fmt: skip
        result.append(crd)  # every version served, as upstream installs them
    return result


def start_tekton_kueue_controller(runtime: ClusterRuntime, binary: Path) -> processes.ManagedProcess:
    """tekton-kueue's controller (Kueue v0.14's jobframework for PipelineRun) on one cluster. Its webhook is not
    run: it binds 0.0.0.0:9443 with no flag to change either, and reads the in-cluster namespace file; tests make
    the objects it would (``spec.status: PipelineRunPending``, the queue-name label, ``spec.managedBy``)."""
    runtime._start("tekton-kueue", [
        str(binary), "controller", f"--kubeconfig={runtime.cluster.kubeconfig_path}", "--metrics-bind-address=0",
        f"--health-probe-bind-address=127.0.0.1:{free_port()}",
    ])  # fmt: skip
    return runtime.processes[-1]


def build_components(progress: Progress = _quiet) -> None:
    """Every program the interop profile runs, built once (or found in the cache): Kueue, kwok, Tekton's controller,
    tekton-kueue, JobSet's controller, and kube-controller-manager and kube-scheduler. Called before the profile's
    pytest run, so a cold build (~10 min) prints its progress where CI's log shows it, outside pytest's capture."""
    for build in (kueue_binary, kwok_binary, tekton_binary, tekton_kueue_binary, jobset_binary):
        build(progress)
    find_binaries(extra=("kube-controller-manager", "kube-scheduler"), progress=progress)
