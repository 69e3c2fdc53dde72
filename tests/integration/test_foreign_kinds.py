"""Kinds this project ships nothing for, configured only through configuration lines, with their real upstream CRDs
(read from their Go modules): JobSet, KubeRay's RayJob (no ``conditions`` in its status schema) and Argo's
Workflow (the minimal CRD of Argo's default install: no schema and no ``/status`` subresource). Each is dispatched
in Direct and in Kueue mode, its status mirrored, finished and cleaned up; the tests play the worker's controller
(its status writes) and, in Kueue mode, Kueue."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
import yaml
from kubernetes_asyncio import client as k8s_client

from multikueue.kube.addresses import Resource
from multikueue_testbed import TestBed, crds, kueue
from multikueue_testbed.client import k8s
from multikueue_testbed.waiting import eventually
from tests.integration.scenario import Scenario

Object = dict[str, Any]
WORKER, PHASE, RECORD = "multikueue.x-k8s.io/worker", "multikueue.x-k8s.io/phase", "multikueue.x-k8s.io/placement"


@dataclass(frozen=True)
class Kind:
    """One foreign kind: its framework name, resource, the adapter lines a user writes, an object, and the status
    its controller writes while running and at the end."""

    framework: str
    resource: Resource
    adapter: str
    body: Callable[[str], Object]
    running: Object
    final: Object


def _jobset(name: str) -> Object:
    template = {"spec": {"containers": [{"name": "main", "image": "busybox", "command": ["true"]}],
                         "restartPolicy": "Never"}}  # fmt: skip
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": name},
        "spec": {
            "managedBy": kueue.MANAGED_BY,
            "replicatedJobs": [{"name": "workers", "replicas": 2, "template": {"spec": {"template": template}}}],
        },
    }


def _rayjob(name: str) -> Object:
    head = {
        "rayStartParams": {},
        "template": {"spec": {"containers": [{"name": "ray-head", "image": "rayproject/ray"}]}},
    }
    return {
        "apiVersion": "ray.io/v1",
        "kind": "RayJob",
        "metadata": {"name": name},
        "spec": {"managedBy": kueue.MANAGED_BY, "entrypoint": "python -c 'print(1)'",
                 "rayClusterSpec": {"headGroupSpec": head}},
    }  # fmt: skip


def _workflow(name: str) -> Object:
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"name": name},
        "spec": {
            # Argo has no managedBy: the manager runs no Argo controller, and the copy is created without it.
            "managedBy": kueue.MANAGED_BY,
            "entrypoint": "main",
            "templates": [{"name": "main", "container": {"image": "busybox", "command": ["echo", "hello"]}}],
        },
    }


KINDS = {
    "JobSet": Kind(
        "JobSet.v1alpha2.jobset.x-k8s.io",
        Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"),
        "{finished: {path: .status.terminalState, exists: true},"
        " failed: {path: .status.terminalState, equals: Failed}}",
        _jobset,
        {
            "restarts": 0,
            "replicatedJobsStatus": [
                {"name": "workers", "ready": 2, "succeeded": 0, "failed": 0, "active": 2, "suspended": 0}
            ],
        },
        {
            "restarts": 0,
            "terminalState": "Completed",
            "conditions": [
                {
                    "type": "Completed",
                    "status": "True",
                    "reason": "AllJobsCompleted",
                    "message": "done",
                    "lastTransitionTime": "2026-08-01T10:05:00Z",
                }
            ],
        },
    ),
    "RayJob": Kind(
        "RayJob.v1.ray.io",
        Resource("ray.io", "v1", "rayjobs", "RayJob"),
        "{finished: {path: .status.jobDeploymentStatus, in: [Complete, Failed]},"
        " failed: {path: .status.jobDeploymentStatus, equals: Failed}}",
        _rayjob,
        {"jobDeploymentStatus": "Running", "jobStatus": "RUNNING", "rayClusterName": "r-1"},
        {
            "jobDeploymentStatus": "Complete",
            "jobStatus": "SUCCEEDED",
            "rayClusterName": "r-1",
            "endTime": "2026-08-01T10:05:00Z",
        },
    ),
    "Workflow": Kind(
        "Workflow.v1alpha1.argoproj.io",
        Resource("argoproj.io", "v1alpha1", "workflows", "Workflow", status_subresource=False),
        "{finished: {path: .status.phase, in: [Succeeded, Failed, Error]},"
        " failed: {path: .status.phase, in: [Failed, Error]}}",
        _workflow,
        {"phase": "Running", "startedAt": "2026-08-01T10:00:00Z", "progress": "0/1"},
        {
            "phase": "Succeeded",
            "startedAt": "2026-08-01T10:00:00Z",
            "finishedAt": "2026-08-01T10:05:00Z",
            "progress": "1/1",
        },
    ),
}


def configuration(kind: Kind, mode: str, placement: str = "{}") -> str:
    adapter = yaml.safe_load(kind.adapter)
    adapter.update(name=kind.framework, mode=mode)
    if mode == "Direct":
        adapter["placement"] = yaml.safe_load(placement)
    document = {
        "multiKueue": {
            "gcInterval": "2s",
            "workerLostTimeout": "10s",
            "externalFrameworks": [{"name": kind.framework}],
        },
        "dispatcher": {"adapters": [adapter]},
    }
    return yaml.safe_dump(document)


@pytest.fixture(scope="module")
def foreign_crds(testbed: TestBed) -> None:
    """The three upstream CRDs on every cluster of the bed."""
    crds.install_on_bed(testbed, [crds.foreign_crd(k) for k in KINDS])


def notes(obj: Any) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("annotations") or {})


async def explain(s: Scenario, kind: Kind, name: str) -> str:
    kubeconfig = s.bed.cluster("manager").kubeconfig_path
    shown = await anyio.run_process(
        [sys.executable, "-m", "multikueue", "explain", "--kubeconfig", str(kubeconfig), "--kind", kind.framework,
         f"{s.namespace}/{name}"],
        check=False,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr.decode()
    return shown.stdout.decode()


async def write_status(s: Scenario, worker: str, kind: Kind, name: str, status: Object) -> None:
    """What the kind's own controller does on the worker (through ``/status`` where the kind has it)."""
    await s.objects(worker, kind.resource).patch_status(name, {"status": status}, s.namespace)


def cases() -> list[Any]:
    return [
        pytest.param(kind, mode, configuration(KINDS[kind], mode), id=f"{kind}-{mode}")
        for kind in KINDS
        for mode in ("Direct", "Kueue")
    ]


@pytest.mark.parametrize(("kind_name", "mode", "multikueue_config"), cases())
async def test_a_foreign_kind_is_dispatched_mirrored_finished_and_cleaned_up(
    foreign_crds: None, scenario: Scenario, kind_name: str, mode: str
) -> None:
    s, kind = scenario, KINDS[kind_name]
    name = f"{kind_name.lower()}-{mode.lower()}"
    manager = s.objects("manager", kind.resource)
    if mode == "Direct":
        await manager.create(kind.body(name), s.namespace)
        placed = await s.wait(manager, name, lambda o: notes(o).get(PHASE) == "Placed", "placed")
        worker = next(w for w in ("worker1", "worker2") if s.names[w] == notes(placed)[WORKER])
        shown = await explain(s, kind, name)
        assert f"  worker: {s.names[worker]}    phase: Placed" in shown, shown
        assert "  MultiKueuePlacement: True Placed" in shown, shown
    else:
        body = kind.body(name)
        body["metadata"]["labels"] = {"kueue.x-k8s.io/queue-name": "user-queue"}
        _, workload = await s.submit_object(kind.resource, body)
        wl_name, worker = workload["metadata"]["name"], "worker1"
        await s.copied(wl_name)
        await kueue.admit(s.api[worker], wl_name, s.namespace)
        await s.check_state(wl_name, state="Ready")

    copy = await s.wait(s.objects(worker, kind.resource), name, lambda o: o is not None, f"the copy on {worker}")
    assert "managedBy" not in copy["spec"]
    await write_status(s, worker, kind, name, kind.running)
    mirrored = await s.wait(manager, name, lambda o: _has(o, kind.running), "the running status mirrored")
    assert _has(mirrored, kind.running)

    await write_status(s, worker, kind, name, kind.final)
    if mode == "Direct":
        done = await s.wait(manager, name, lambda o: notes(o).get(PHASE) == "Finished", "Finished")
    else:
        finished = await s.wait(
            s.workloads("manager"), wl_name, lambda w: _condition(w, "Finished") is not None, "Workload Finished"
        )
        assert _condition(finished, "Finished")["reason"] == "Succeeded"
        done = await s.get(manager, name)
    assert _has(done, kind.final), "the final status is on the manager object before anything is removed"
    await s.wait(s.objects(worker, kind.resource), name, lambda o: o is None, f"the copy removed from {worker}")


async def _settled(controller: Any, reconciles: int) -> bool:
    return bool(controller.reconciles >= reconciles and len(controller.queue) == 0)


def _has(obj: Any, status: Object) -> bool:
    """The worker's status is on the manager object (its conditions beside the manager's own placement one)."""
    mirrored = (obj or {}).get("status") or {}
    for key, value in status.items():
        got = mirrored.get(key)
        if key == "conditions":
            got = [c for c in got or [] if c.get("type") != "MultiKueuePlacement"]
        if got != value:
            return False
    return True


def _condition(obj: Any, kind: str) -> Any:
    conditions = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c["type"] == kind and c["status"] == "True"), None)


@pytest.mark.parametrize(
    "multikueue_config", [configuration(KINDS["RayJob"], "Direct", "{workerSelector: 'pool=none'}")]
)
async def test_a_kind_that_cannot_hold_conditions_keeps_its_record_and_says_each_decision_once(
    foreign_crds: None, scenario: Scenario
) -> None:
    """RayJob's status schema has no ``conditions``: the API server drops the placement condition without an error.
    The record is kept in an annotation instead, ``explain`` shows it, and a waiting run looked at again does not
    repeat its Event."""
    s, kind = scenario, KINDS["RayJob"]
    manager = s.objects("manager", kind.resource)
    names = [f"waiting-{i}" for i in range(3)]
    for name in names:
        await manager.create(kind.body(name), s.namespace)
    for name in names:
        waiting = await s.wait(manager, name, lambda o: RECORD in notes(o), f"{name}: its record kept")
        record = json.loads(notes(waiting)[RECORD])
        assert (record["status"], record["reason"]) == ("False", "NoWorkerFits"), record
    shown = await explain(s, kind, names[0])
    assert "  MultiKueuePlacement: False NoWorkerFits" in shown, shown

    # Worker changes wake every waiting run for another look; the decision is the same, so nothing is said again.
    assert s.manager is not None
    controller = s.manager.generation.direct_controller
    before = controller.reconciles
    for round_ in range(3):
        await s.label("worker1", round=str(round_))
    await eventually(
        lambda: _settled(controller, before + 3 * len(names)), until=bool, what="every waiting run looked at again"
    )
    listed = await k8s_client.CoreV1Api(k8s(s.api["manager"])).list_namespaced_event(s.namespace)
    told = sorted(e.involved_object.name for e in listed.items if e.reason == "NoWorkerFits")
    assert told == names, told

    # The record is the manager's own: the copy (once placed) never carries it.
    await s.label("worker1", pool="none")
    # The placement (worker, phase) is written first, its record in a write of its own right after.
    placed = await s.wait(manager, names[0], lambda o: notes(o).get(PHASE) == "Placed"
                          and json.loads(notes(o).get(RECORD) or "{}").get("reason") == "Placed",
                          "placed on worker1, and recorded")  # fmt: skip
    assert json.loads(notes(placed)[RECORD])["reason"] == "Placed"
    copy = await s.wait(s.objects("worker1", kind.resource), names[0], lambda o: o is not None, "the copy")
    assert RECORD not in notes(copy)
    assert WORKER not in notes(copy)
    assert PHASE not in notes(copy)


@pytest.mark.parametrize("multikueue_config", [configuration(KINDS["Workflow"], "Direct")])
async def test_the_offline_preview_is_the_copy_the_dispatcher_makes(
    foreign_crds: None, scenario: Scenario, tmp_path: Any
) -> None:
    s, kind = scenario, KINDS["Workflow"]
    body = kind.body("previewed")
    body["metadata"]["annotations"] = {"kubectl.kubernetes.io/last-applied-configuration": json.dumps(body)}
    created = await s.objects("manager", kind.resource).create(body, s.namespace)
    placed = await s.wait(s.objects("manager", kind.resource), "previewed", lambda o: WORKER in notes(o), "placed")
    worker = next(w for w in ("worker1", "worker2") if s.names[w] == notes(placed)[WORKER])
    copy = await s.wait(s.objects(worker, kind.resource), "previewed", lambda o: o is not None, "the copy")

    config_file, object_file = tmp_path / "config.yaml", tmp_path / "object.yaml"
    config_file.write_text(configuration(kind, "Direct"))
    object_file.write_text(yaml.safe_dump(created))
    shown = await anyio.run_process(
        [sys.executable, "-m", "multikueue", "adapter", "check", "--config", str(config_file),
         "--object", str(object_file)],
        check=False,
    )  # fmt: skip
    text = shown.stdout.decode()
    section = text.split("## worker copy")[1].split("\n## ")[0]
    preview = yaml.safe_load("\n".join(line[2:] for line in section.splitlines()[1:]))
    assert preview["metadata"]["labels"] == copy["metadata"]["labels"]
    assert preview["metadata"]["annotations"] == notes(copy)
    assert preview["spec"] == copy["spec"]
    assert "kubectl.kubernetes.io/last-applied-configuration" not in notes(copy)
