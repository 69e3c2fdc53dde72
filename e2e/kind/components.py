"""What runs in the kind clusters besides kind's own, with no registry: images built here and loaded with
``kind load``, and manifests rendered from the upstream Go modules at run time (never committed).

- the dispatcher: the project's ``Dockerfile`` on a debootstrap'd Debian base, tagged as ``config/manager``'s
  Deployment names it, so the manifests are applied unchanged;
- Kueue: its manager built from its module into a ``FROM scratch`` image at ``/manager`` (the path its manifests
  run), installed from its own ``config/default`` (internal certificates, webhooks, visibility API) with
  ``externalFrameworks: [PipelineRun.v1.tekton.dev]``;
- Tekton Pipelines (workers): ``controller``, ``entrypoint``, ``nop``, ``workingdirinit`` and
  ``sidecarlogresults`` built from ``github.com/tektoncd/pipeline`` into images at ``/ko-app/<name>`` (where ``ko``
  puts them and where the controller's pods expect them), and its ``config/`` without the admission webhook;
- tekton-kueue: its manager built from its module (as the interop profile builds it) into a ``FROM scratch`` image
  at ``/manager``, for the scenario that installs it (``e2e/kind/tekton_kueue.py``);
- storage (workers): rancher's local-path-provisioner, what kind itself ships as its default StorageClass, built
  from its module into a ``FROM scratch`` image and installed from its own ``deploy/local-path-storage.yaml``, its
  helper pod on the example step image (busybox's ``sh``);
- the step and shell image: the same Debian base (it has ``/bin/sh``).
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from e2e.images import BASE_IMAGE, ImageError, build_dispatcher_image
from e2e.kind.node import NodeImageError, docker, has_image, programs, run, say
from multikueue import __version__
from multikueue_testbed import crds
from multikueue_testbed.interop import (
    LOCAL_PATH_MODULE,
    LOCAL_PATH_VERSION,
    TEKTON_KUEUE_VERSION,
    ComponentUnavailable,
    kueue_binary,
    local_path_provisioner_binary,
    tekton_kueue_binary,
    tekton_program,
)

NONROOT = "65532:65532"
DEPLOYED_IMAGE = f"multikueue:{__version__}"  # what config/manager/deployment.yaml runs
KUEUE_IMAGE = f"local/kueue:{crds.KUEUE_VERSION}"
TEKTON_KUEUE_IMAGE = f"local/tekton-kueue:{TEKTON_KUEUE_VERSION}"  # at /manager, where its manifests run it
LOCAL_PATH_IMAGE = f"local/local-path-provisioner:{LOCAL_PATH_VERSION}"
LOCAL_PATH_PROGRAM = "/usr/bin/local-path-provisioner"  # where its upstream image has it (its manifest runs it by name)
LOCAL_PATH_NAMESPACE = "local-path-storage"
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"
STEP_IMAGE = BASE_IMAGE
# Upstream Tekton examples name alpine, busybox, ubuntu and bash: the Debian base (bash, coreutils) with busybox's
# shell as /bin/sh, so their `sh` scripts see the ash they were written for (`[[`, `==` in `[`), where Debian's dash
# would refuse them; `ash` too, for the scripts that ask for it by name.
EXAMPLE_STEP_IMAGE = "local/tekton-example-step:bookworm-busybox-ash"
TEKTON_PROGRAMS = ("controller", "entrypoint", "nop", "workingdirinit", "sidecarlogresults")
TEKTON_NAMESPACE = "tekton-pipelines"
KUEUE_NAMESPACE = "kueue-system"
EXTERNAL_FRAMEWORK = "PipelineRun.v1.tekton.dev"


def tekton_image(program: str) -> str:
    return f"local/tekton-{program}:{crds.TEKTON_VERSION}"


def _static_image(tag: str, binary: Path, path: str) -> None:
    """A ``FROM scratch`` image holding one static program, run as the conventional non-root user."""
    if has_image(tag):
        return
    with tempfile.TemporaryDirectory(prefix="multikueue-kind-image-") as work:
        shutil.copyfile(binary, Path(work) / "program")
        (Path(work) / "program").chmod(0o755)
        (Path(work) / "Dockerfile").write_text(
            f'FROM scratch\nCOPY program {path}\nUSER {NONROOT}\nENTRYPOINT ["{path}"]\n'
        )
        docker("build", "-q", "-t", tag, work, what=f"docker build {tag}")


def _example_step_image() -> None:
    if has_image(EXAMPLE_STEP_IMAGE):
        return
    with tempfile.TemporaryDirectory(prefix="multikueue-kind-image-") as work:
        run(["apt-get", "download", "busybox-static"], "apt-get download busybox-static", cwd=Path(work), timeout=300)
        [deb] = Path(work).glob("busybox-static_*.deb")
        run(["dpkg-deb", "-x", str(deb), f"{work}/unpacked"], "dpkg-deb -x busybox-static", timeout=120)
        shutil.copyfile(Path(work) / "unpacked" / "bin" / "busybox", Path(work) / "busybox")
        (Path(work) / "busybox").chmod(0o755)
        (Path(work) / "Dockerfile").write_text(
            f"FROM {BASE_IMAGE}\nCOPY busybox /usr/local/bin/busybox\n"
            'RUN ["/usr/local/bin/busybox", "sh", "-c", "ln -sf busybox /usr/local/bin/ash && '
            'ln -sf /usr/local/bin/busybox /bin/sh"]\n'
        )
        docker(
            "build",
            "-q",
            "--network",
            "none",
            "-t",
            EXAMPLE_STEP_IMAGE,
            work,
            what=f"docker build {EXAMPLE_STEP_IMAGE}",
        )


def build_images() -> dict[str, list[str]]:
    """Every image the scenarios need, in the kind engine (``DOCKER_HOST``); returns them per cluster role."""
    try:
        _static_image(KUEUE_IMAGE, kueue_binary(say), "/manager")
        _static_image(TEKTON_KUEUE_IMAGE, tekton_kueue_binary(say), "/manager")
        _static_image(LOCAL_PATH_IMAGE, local_path_provisioner_binary(say), LOCAL_PATH_PROGRAM)
        for program in TEKTON_PROGRAMS:
            _static_image(tekton_image(program), tekton_program(program, say), f"/ko-app/{program}")
        import docker as docker_sdk

        client = docker_sdk.from_env(timeout=600)
        built = build_dispatcher_image(client)  # also imports the Debian base: the step image
        _example_step_image()
    except (ComponentUnavailable, ImageError) as e:
        raise NodeImageError(str(e)) from None
    docker("tag", built, DEPLOYED_IMAGE, what=f"docker tag {DEPLOYED_IMAGE}")
    # the dispatcher's image on the workers too (`run --role worker`), and tekton-kueue everywhere
    common = [KUEUE_IMAGE, DEPLOYED_IMAGE, TEKTON_KUEUE_IMAGE]
    return {
        "manager": common,
        "worker": [
            *common,
            STEP_IMAGE,
            EXAMPLE_STEP_IMAGE,
            LOCAL_PATH_IMAGE,
            *(tekton_image(p) for p in TEKTON_PROGRAMS),
        ],
    }


def load_images(cluster: str, images: list[str]) -> None:
    kind = str(programs()["kind"])
    run([kind, "load", "docker-image", "--name", cluster, *images], f"kind load docker-image into {cluster}",
        timeout=900)  # fmt: skip


# ------------------------------------------------------------------------------------------------------- Kueue


def _kubectl_kustomize(directory: Path) -> list[dict[str, Any]]:
    kubectl = str(programs()["kubectl"])
    rendered = run([kubectl, "kustomize", str(directory)], f"kubectl kustomize {directory}")
    return [doc for doc in yaml.safe_load_all(rendered) if doc]


def kueue_manifests(*, multikueue: bool) -> list[dict[str, Any]]:
    """Kueue's ``config/default`` from its module, running the image built here. ``multikueue=False`` turns Kueue's
    own MultiKueue off (the manager: this dispatcher owns the MultiKueueClusters there, see docs/dispatch.md)."""
    documents = _kubectl_kustomize(crds.KUEUE.directory() / "config" / "default")
    for doc in documents:
        if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "kueue-manager-config":
            configuration = yaml.safe_load(doc["data"]["controller_manager_config.yaml"])
            configuration["integrations"] = {"frameworks": ["batch/job"], "externalFrameworks": [EXTERNAL_FRAMEWORK]}
            doc["data"]["controller_manager_config.yaml"] = yaml.safe_dump(configuration)
        if doc["kind"] == "Deployment" and doc["metadata"]["name"] == "kueue-controller-manager":
            _kueue_container(doc, multikueue=multikueue)
    return documents


def _kueue_container(deployment: dict[str, Any], *, multikueue: bool) -> None:
    for container in deployment["spec"]["template"]["spec"]["containers"]:
        if container["name"] != "manager":
            continue
        container["image"] = KUEUE_IMAGE
        container["imagePullPolicy"] = "IfNotPresent"  # loaded into the node; Always would pull
        # Two cores carry three clusters: upstream's 500m request would not fit beside the control plane.
        container["resources"] = {"requests": {"cpu": "50m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}}
        if not multikueue:
            container["args"] = [*container.get("args", []), "--feature-gates=MultiKueue=false"]


# ----------------------------------------------------------------------------------------------------- storage


def storage_manifests() -> list[dict[str, Any]]:
    """local-path-provisioner's ``deploy/local-path-storage.yaml`` from its module: the image built here, its helper
    pod on the example step image, and its StorageClass the default (as kind makes it), so a claim that names no
    class (a Tekton ``volumeClaimTemplate``) is bound on the node that runs its pod."""
    source = crds.ModuleSource(LOCAL_PATH_MODULE, LOCAL_PATH_VERSION).directory()
    documents = _documents(source / "deploy" / "local-path-storage.yaml")
    for doc in documents:
        if doc["kind"] == "Deployment":
            for container in doc["spec"]["template"]["spec"]["containers"]:
                container.update(image=LOCAL_PATH_IMAGE, command=[LOCAL_PATH_PROGRAM, *container["command"][1:]])
        if doc["kind"] == "StorageClass":
            doc["metadata"].setdefault("annotations", {})[DEFAULT_CLASS] = "true"
        if doc["kind"] == "ConfigMap" and "helperPod.yaml" in doc.get("data", {}):
            pod = yaml.safe_load(doc["data"]["helperPod.yaml"])
            for container in pod["spec"]["containers"]:
                container["image"] = EXAMPLE_STEP_IMAGE
            doc["data"]["helperPod.yaml"] = yaml.safe_dump(pod)
    return documents


def default_storage(kubeconfig: Path) -> None:
    """local-path-provisioner's class the only default: kind's own ``standard`` (the host-path provisioner of
    kube-controller-manager, whose directories kubelet cannot see) no longer."""
    documents = storage_manifests()
    apply(kubeconfig, documents, "apply local-path-provisioner")
    ours = {f"storageclass.storage.k8s.io/{d['metadata']['name']}" for d in documents if d["kind"] == "StorageClass"}
    kubectl = str(programs()["kubectl"])
    classes = run([kubectl, "--kubeconfig", str(kubeconfig), "get", "storageclasses", "-o", "name"], "storage classes")
    for name in classes.split():
        if name not in ours:
            run([kubectl, "--kubeconfig", str(kubeconfig), "annotate", "--overwrite", name, f"{DEFAULT_CLASS}=false"],
                f"{name} no longer the default")  # fmt: skip
    wait_rollout(kubeconfig, LOCAL_PATH_NAMESPACE, "local-path-provisioner")


# ------------------------------------------------------------------------------------------------------ Tekton

TEKTON_SKIPPED_FILES = ("500-webhooks.yaml", "webhook.yaml", "webhook-hpa.yaml", "events.yaml")
TEKTON_SKIPPED_KINDS = ("MutatingWebhookConfiguration", "ValidatingWebhookConfiguration")


def tekton_manifests(*, controller: bool) -> list[dict[str, Any]]:
    """Tekton Pipelines' ``config/`` from its module: CRDs always; with ``controller`` also its namespace, RBAC,
    ConfigMaps and the controller Deployment on the images built here. Its admission webhook is not installed (the
    reconciler applies the defaults), nor the events controller or the resolvers."""
    root = crds.TEKTON.directory() / "config"
    documents = [doc for path in sorted(root.glob("300-crds/*.yaml")) for doc in _documents(path)]
    if not controller:
        return documents
    paths = [root / "100-namespace" / "100-namespace.yaml", *sorted(root.glob("*.yaml"))]
    for path in paths:
        if path.name in TEKTON_SKIPPED_FILES:
            continue
        documents += [doc for doc in _documents(path) if doc["kind"] not in TEKTON_SKIPPED_KINDS]
    for doc in documents:
        if doc["kind"] == "Deployment":
            _tekton_images(doc)
    return documents


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _tekton_images(deployment: dict[str, Any]) -> None:
    for container in deployment["spec"]["template"]["spec"]["containers"]:
        container["image"] = _local_image(container["image"])
        container["imagePullPolicy"] = "IfNotPresent"
        container["resources"] = {"requests": {"cpu": "50m", "memory": "64Mi"}}
        args = list(container.get("args") or [])
        for i, arg in enumerate(args):
            if i > 0 and args[i - 1] == "-shell-image":
                args[i] = STEP_IMAGE
            else:
                args[i] = _local_image(arg)
        container["args"] = args


def _local_image(reference: str) -> str:
    prefix = "ko://github.com/tektoncd/pipeline/cmd/"
    return tekton_image(reference.removeprefix(prefix)) if reference.startswith(prefix) else reference


def apply(kubeconfig: Path, documents: list[dict[str, Any]], what: str) -> None:
    """``kubectl apply --server-side`` of rendered documents (CRDs are large: client-side apply cannot hold them)."""
    kubectl = str(programs()["kubectl"])
    argv = [kubectl, "--kubeconfig", str(kubeconfig), "apply", "--server-side", "--force-conflicts", "-f", "-"]
    run(argv, what, stdin=yaml.safe_dump_all(documents).encode(), timeout=300)


def wait_rollout(kubeconfig: Path, namespace: str, deployment: str, timeout: int = 300) -> None:
    kubectl = str(programs()["kubectl"])
    argv = [kubectl, "--kubeconfig", str(kubeconfig), "-n", namespace, "rollout", "status", f"deployment/{deployment}",
            f"--timeout={timeout}s"]  # fmt: skip
    run(argv, f"{deployment} rolled out", timeout=timeout + 30)


KUEUE_PROBE = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor", "metadata": {"name": "probe"}}


def wait_admitted(kubeconfig: Path, probe: dict[str, Any], what: str, timeout: float = 180) -> None:
    """Until a server-side dry run of creating ``probe`` passes the webhooks that see it: they serve, certificates
    included (a rolled-out Deployment does not say so: readiness probes may be a ping)."""
    kubectl = str(programs()["kubectl"])
    argv = [kubectl, "--kubeconfig", str(kubeconfig), "create", "--dry-run=server", "-f", "-"]
    deadline = time.monotonic() + timeout
    while subprocess.run(
        argv, input=yaml.safe_dump(probe), capture_output=True, text=True, check=False, timeout=60
    ).returncode:
        if time.monotonic() > deadline:
            raise NodeImageError(f"{what} did not answer within {timeout:.0f} s")
        time.sleep(2)
