"""A kind made queueable from configuration alone (#10), against the real API servers and CRDs: the webhook served
here and called by kube-apiserver, the Workload as configured, admission, eviction, a user's own hold, bad input,
and MultiKueue's prebuilt Workload adopted on a worker. The tests play Kueue's scheduler (admit, evict)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal, cast

import anyio
import pytest
import yaml
from kubernetes_asyncio import client as k8s_client

from multikueue import owners
from multikueue.config import parse_configuration
from multikueue.integration.reconciler import IntegrationReconciler
from multikueue.integration.workload_spec import build
from multikueue.kube import discovery
from multikueue.kube.addresses import WORKLOADS, GroupVersionKind, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue.labels import HELD_ANNOTATION, QUEUE_NAME_LABEL
from multikueue.owners import workload_name
from multikueue.runtime.informer import Informer, ObjectKey
from multikueue_testbed import crds, kueue
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.dispatcher import running
from multikueue_testbed.objects import WIDGET_GROUP, pipelinerun, widget_crd
from multikueue_testbed.testbed import free_port
from multikueue_testbed.waiting import eventually
from tests.integration.scenario import PIPELINERUNS, Scenario

PR = GroupVersionKind("tekton.dev", "v1", "PipelineRun")
WIDGET = GroupVersionKind(WIDGET_GROUP, "v1", "Widget")
WIDGETS = Resource(WIDGET_GROUP, "v1", "widgets", "Widget")
PRIORITY_CLASSES = Resource("kueue.x-k8s.io", "v1beta2", "workloadpriorityclasses", "WorkloadPriorityClass",
                            namespaced=False)  # fmt: skip
SUCCEEDED = '.status.conditions[?type=="Succeeded"].status'
REQUESTS = "kueue.konflux-ci.dev/requests-"
TEKTON_ADAPTER = {
    "name": "PipelineRun.v1.tekton.dev",
    "suspended": {"path": ".spec.status", "equals": "PipelineRunPending"},
    "finished": {"path": SUCCEEDED, "notIn": ["Unknown"]},
    "failed": {"path": SUCCEEDED, "equals": "False"},
    "integration": {
        "suspend": {"path": ".spec.status", "value": "PipelineRunPending", "stopValue": "StoppedRunFinally",
                    "honorUserSuspend": True},
        "active": {"path": ".status.startTime", "exists": True},
        "podSets": [{"name": "pod-set-1", "requests": {"tekton.dev/pipelineruns": "1"},
                     "requestsFromAnnotations": REQUESTS}],
    },
}  # fmt: skip
WIDGET_ADAPTER = {
    "name": "Widget.v1.examples.multikueue.x-k8s.io",
    "finished": {"path": ".status.phase", "equals": "Done"},
    "integration": {
        "suspend": {"path": ".spec.suspend", "value": True, "runValue": False},
        "podSets": [{"name": "workers", "countPath": ".spec.parallelism", "template": ".spec.template"}],
    },
}
DONE = {"startTime": "2026-08-01T10:00:01Z", "completionTime": "2026-08-01T10:05:00Z",
        "conditions": [{"type": "Succeeded", "status": "True", "reason": "Succeeded", "message": "done",
                        "lastTransitionTime": "2026-08-01T10:05:00Z"}]}  # fmt: skip


def _config(namespace: str, *adapters: dict[str, Any], webhook: dict[str, Any] | None = None) -> str:
    frameworks = [{"name": a["name"]} for a in adapters]
    dispatcher: dict[str, Any] = {"namespace": namespace, "adapters": list(adapters)}
    if webhook is not None:
        dispatcher["webhook"] = webhook
    return yaml.safe_dump({"multiKueue": {"externalFrameworks": frameworks}, "dispatcher": dispatcher})


def _running(api: ApiClient, text: str, *, role: Literal["manager", "worker"] = "worker") -> Any:
    """This controller on one cluster; ``worker`` runs only the integration (and the webhook, if configured)."""
    return running(api, text, role=role, timeout=30)


@asynccontextmanager
async def _webhook_configuration(api: ApiClient, namespace: str, port: int) -> AsyncIterator[str]:
    """The shipped MutatingWebhookConfiguration's rules, pointed at this process and limited to one namespace."""
    name = f"multikueue-{namespace}"
    body = {
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": name},
        "webhooks": [{
            "name": "hold.multikueue.x-k8s.io", "clientConfig": {"url": f"https://127.0.0.1:{port}/mutate"},
            "rules": [{"apiGroups": ["tekton.dev", WIDGET_GROUP], "apiVersions": ["v1"], "operations": ["CREATE"],
                       "resources": ["pipelineruns", "widgets"]}],
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
            "objectSelector": {"matchExpressions": [{"key": QUEUE_NAME_LABEL, "operator": "Exists"}]},
            "failurePolicy": "Fail", "sideEffects": "None", "admissionReviewVersions": ["v1"], "timeoutSeconds": 5,
        }],
    }  # fmt: skip
    admission: Any = k8s_client.AdmissionregistrationV1Api(k8s(api))
    await admission.create_mutating_webhook_configuration(raw_body(body))
    try:
        yield name
    finally:
        await admission.delete_mutating_webhook_configuration(name)


async def _workload(api: ApiClient, namespace: str, owner: dict[str, Any], gvk: GroupVersionKind,
                    until: Any = None, what: str = "its Workload") -> Any:  # fmt: skip
    name = workload_name(owner["metadata"]["name"], owner["metadata"]["uid"], gvk)
    test = until or bool
    return await eventually(lambda: Objects(api, WORKLOADS).get(name, namespace), until=lambda w: w is not None
                            and test(w), what=what)  # fmt: skip


def _condition(obj: Any, kind: str) -> Any:
    return next((c for c in ((obj or {}).get("status") or {}).get("conditions") or [] if c["type"] == kind), {})


async def _get(objects: Objects, name: str, namespace: str) -> Any:
    return await objects.get(name, namespace)


def _held(obj: Any) -> bool:
    return HELD_ANNOTATION in ((obj or {}).get("metadata", {}).get("annotations") or {})


async def _events(api: ApiClient, namespace: str, name: str) -> list[Any]:
    listed = await k8s_client.CoreV1Api(k8s(api)).list_namespaced_event(namespace)
    return [e for e in listed.items if e.involved_object.name == name]


async def test_the_webhook_holds_a_pipelinerun_whose_workload_runs_it_on_admission(
    manager_api: ApiClient, namespace: str
) -> None:
    api, runs, port = manager_api, Objects(manager_api, PIPELINERUNS), free_port()
    priority = f"high-{namespace}"
    await Objects(api, PRIORITY_CLASSES).create({"apiVersion": "kueue.x-k8s.io/v1beta2",
        "kind": "WorkloadPriorityClass", "metadata": {"name": priority}, "value": 100})  # fmt: skip
    configuration = f"multikueue-{namespace}"
    webhook = {"host": "127.0.0.1", "port": port, "hosts": ["127.0.0.1"], "configurationName": configuration}
    adapter = {**TEKTON_ADAPTER, "integration": {**TEKTON_ADAPTER["integration"], "suspend": {  # type: ignore[dict-item]
        "path": ".spec.status", "value": "PipelineRunPending", "stopValue": "StoppedRunFinally"}}}  # fmt: skip
    try:
        async with _webhook_configuration(api, namespace, port), _running(api, _config(namespace, adapter,
                                                                                        webhook=webhook)):  # fmt: skip
            body = pipelinerun("build", labels={QUEUE_NAME_LABEL: "user-queue",
                                                "kueue.x-k8s.io/priority-class": priority})  # fmt: skip
            body["metadata"]["annotations"] = {f"{REQUESTS}cpu": "500m", f"{REQUESTS}memory": "1Gi"}
            # The caBundle reaches kube-apiserver's webhook cache shortly after the controller starts: until then
            # the create is refused (failurePolicy Fail), which is what the retry here waits out.
            created = await eventually(lambda: runs.create(body, namespace), what="the create admitted by the webhook")
            assert created["spec"]["status"] == "PipelineRunPending"  # held from its first instant
            assert _held(created)
            workload = await _workload(api, namespace, created, PR)
            assert workload["metadata"]["ownerReferences"] == [{
                "apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "name": "build",
                "uid": created["metadata"]["uid"], "controller": True, "blockOwnerDeletion": True}]  # fmt: skip
            assert workload["metadata"]["labels"]["kueue.x-k8s.io/job-uid"] == created["metadata"]["uid"]
            assert workload["metadata"]["finalizers"] == ["kueue.x-k8s.io/resource-in-use"]
            spec = workload["spec"]
            assert (spec["queueName"], spec["priority"], spec["priorityClassRef"]["name"]) == ("user-queue", 100,
                                                                                             priority)  # fmt: skip
            [pod_set] = spec["podSets"]
            assert (pod_set["name"], pod_set["count"]) == ("pod-set-1", 1)
            requests = pod_set["template"]["spec"]["containers"][0]["resources"]["requests"]
            assert requests == {"tekton.dev/pipelineruns": "1", "cpu": "500m", "memory": "1Gi"}
            assert spec.get("active", True) is True

            await eventually(
                lambda: kueue.admit(api, workload["metadata"]["name"], namespace), what="admit (a conflict retried)"
            )
            released = await eventually(
                lambda: _get(runs, "build", namespace),
                until=lambda r: "status" not in r["spec"] and not _held(r),
                what="released",
            )
            assert released["spec"]["pipelineSpec"] == created["spec"]["pipelineSpec"]  # nothing else touched

            await runs.patch_status("build", {"status": DONE}, namespace)
            finished = await _workload(api, namespace, created, PR, what="Finished, finalizer gone",
                                       until=lambda w: _condition(w, "Finished").get("reason") == "Succeeded"
                                       and not w["metadata"].get("finalizers"))  # fmt: skip
            assert _condition(finished, "Finished")["status"] == "True"
            reasons = [e.reason for e in await _events(api, namespace, "build")]
            assert {"CreatedWorkload", "Started", "FinishedWorkload"} <= set(reasons)

            await runs.delete("build", namespace)
            name = finished["metadata"]["name"]
            await eventually(lambda: Objects(api, WORKLOADS).get(name, namespace), until=lambda w: w is None,
                             what="the Workload deleted with its PipelineRun")  # fmt: skip
    finally:
        await Objects(api, PRIORITY_CLASSES).delete(priority)


async def test_without_the_webhook_a_suspend_kind_is_held_stopped_on_eviction_and_run_again(
    manager_api: ApiClient, namespace: str
) -> None:
    api, widgets = manager_api, Objects(manager_api, WIDGETS)
    await crds.install_crds(api, [widget_crd(strict_status=True)])
    template = {"spec": {"containers": [{"name": "main", "image": "busybox", "resources": {"requests": {"cpu": "2"}}}]}}
    async with _running(api, _config(namespace, WIDGET_ADAPTER)):
        body = {"apiVersion": f"{WIDGET_GROUP}/v1", "kind": "Widget",
                "metadata": {"name": "w1", "labels": {QUEUE_NAME_LABEL: "user-queue"}},
                "spec": {"parallelism": 3, "template": template}}  # fmt: skip
        created = await widgets.create(body, namespace)
        assert "suspend" not in created["spec"]  # no webhook: created as written
        await eventually(lambda: _get(widgets, "w1", namespace), until=lambda w: w["spec"].get("suspend") is True
                         and _held(w), what="held on first sight (the fallback)")  # fmt: skip
        workload = await _workload(api, namespace, created, WIDGET)
        [pod_set] = workload["spec"]["podSets"]
        assert (pod_set["name"], pod_set["count"], pod_set["template"]) == ("workers", 3, {"metadata": {}, **template})
        name = workload["metadata"]["name"]

        await eventually(lambda: kueue.admit(api, name, namespace), what="admit (a conflict retried)")
        await eventually(lambda: _get(widgets, "w1", namespace), until=lambda w: w["spec"].get("suspend") is False
                         and not _held(w), what="released on admission")  # fmt: skip

        await eventually(
            lambda: kueue.evict(
                api, name, namespace, reason="Preempted", message="Preempted to accommodate a workload"
            ),
            what="evict (a conflict retried)",
        )
        await eventually(lambda: _get(widgets, "w1", namespace), until=lambda w: w["spec"].get("suspend") is True
                         and _held(w), what="stopped (suspended) on eviction")  # fmt: skip
        released = await _workload(
            api,
            namespace,
            created,
            WIDGET,
            what="quota released for requeueing",
            until=lambda w: _condition(w, "QuotaReserved").get("status") == "False",
        )
        assert _condition(released, "Requeued")["status"] == "True"
        assert _condition(released, "Admitted")["status"] == "False"
        assert "admission" not in released["status"]

        await eventually(lambda: kueue.admit(api, name, namespace), what="admit (a conflict retried)")
        await eventually(lambda: _get(widgets, "w1", namespace), until=lambda w: w["spec"].get("suspend") is False,
                         what="runs again on re-admission")  # fmt: skip


async def test_an_admission_that_cannot_be_written_into_the_template_is_said_on_the_object_and_workload(
    manager_api: ApiClient, namespace: str
) -> None:
    """A flavor not there (yet): a Warning on the object once, and the run starts when it appears (Kueue retries).
    A flavor whose node label the template sets otherwise: Kueue's permanent error, the Workload finished
    ``FailedToStart`` with Kueue's message, and the object left suspended."""
    api, widgets = manager_api, Objects(manager_api, WIDGETS)
    await crds.install_crds(api, [widget_crd(strict_status=True)])
    late, gpu = f"{namespace}-late", f"{namespace}-gpu"
    await kueue.ensure_flavor(api, gpu, {"nodeLabels": {"cloud/gpu": "a100"}})

    def widget(name: str, **spec: Any) -> dict[str, Any]:
        template = {"spec": {"containers": [{"name": "main", "image": "busybox"}], **spec}}
        return {"apiVersion": f"{WIDGET_GROUP}/v1", "kind": "Widget",
                "metadata": {"name": name, "labels": {QUEUE_NAME_LABEL: "user-queue"}},
                "spec": {"parallelism": 1, "suspend": True, "template": template}}  # fmt: skip

    async with _running(api, _config(namespace, WIDGET_ADAPTER)):
        waiting = await widgets.create(widget("waiting"), namespace)
        name = (await _workload(api, namespace, waiting, WIDGET))["metadata"]["name"]
        await eventually(lambda: kueue.admit(api, name, namespace, flavor=late), what="admit (a conflict retried)")

        async def said(object_name: str, reason: str) -> list[str]:
            return [e.message for e in await _events(api, namespace, object_name) if e.reason == reason]

        [message] = await eventually(lambda: said("waiting", "FlavorUnavailable"), what="a Warning on the object")
        assert f"ResourceFlavor '{late}'" in message
        await kueue.ensure_flavor(api, late, {"nodeLabels": {"cloud/zone": "z1"}})
        started = await eventually(
            lambda: _get(widgets, "waiting", namespace), until=lambda w: w["spec"]["suspend"] is False, what="started"
        )
        assert started["spec"]["template"]["spec"]["nodeSelector"] == {"cloud/zone": "z1"}
        assert len(await said("waiting", "FlavorUnavailable")) == 1, "said once, not at every retry"

        clash = await widgets.create(widget("clash", nodeSelector={"cloud/gpu": "t4"}), namespace)
        name = (await _workload(api, namespace, clash, WIDGET))["metadata"]["name"]
        await eventually(lambda: kueue.admit(api, name, namespace, flavor=gpu), what="admit (a conflict retried)")
        finished = await _workload(api, namespace, clash, WIDGET, what="finished FailedToStart",
                                   until=lambda w: _condition(w, "Finished").get("status") == "True")  # fmt: skip
        expected = ("invalid admission check PodSetUpdate: conflict for nodeSelector: "
                    "conflict for key=cloud/gpu, value1=t4, value2=a100")  # fmt: skip
        assert (_condition(finished, "Finished")["reason"], _condition(finished, "Finished")["message"]) == (
            "FailedToStart", expected)  # fmt: skip
        assert await eventually(lambda: said("clash", "FailedToStart")) == [expected]
        assert (await _get(widgets, "clash", namespace))["spec"]["suspend"] is True


async def test_pods_ready_follows_the_objects_ready_pods_as_kueues_jobframework_writes_it(
    manager_api: ApiClient, namespace: str
) -> None:
    """``waitForPodsReady`` needs it: without it, Kueue evicts a healthy run after the timeout (PodsReadyTimeout)."""
    api, widgets = manager_api, Objects(manager_api, WIDGETS)
    await crds.install_crds(api, [widget_crd(strict_status=True)])
    integration: dict[str, Any] = {**cast(dict[str, Any], WIDGET_ADAPTER["integration"]),
                                   "podsReady": {"readyCounts": [".status.ready"]}}  # fmt: skip
    adapter = {**WIDGET_ADAPTER, "integration": integration}
    template = {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    async with _running(api, _config(namespace, adapter)):
        body = {"apiVersion": f"{WIDGET_GROUP}/v1", "kind": "Widget",
                "metadata": {"name": "w1", "labels": {QUEUE_NAME_LABEL: "user-queue"}},
                "spec": {"parallelism": 2, "template": template}}  # fmt: skip
        created = await widgets.create(body, namespace)

        def pods_ready(status: str, reason: str) -> Any:
            return lambda w: (_condition(w, "PodsReady").get("status"), _condition(w, "PodsReady").get("reason")) == (
                status, reason)  # fmt: skip

        waiting = await _workload(api, namespace, created, WIDGET, until=pods_ready("False", "WaitForStart"),
                                  what="PodsReady=False (WaitForStart) before admission")  # fmt: skip
        assert _condition(waiting, "PodsReady")["message"] == "Not all pods are ready or succeeded"
        name = waiting["metadata"]["name"]
        await eventually(lambda: kueue.admit(api, name, namespace), what="admit (a conflict retried)")
        await eventually(lambda: _get(widgets, "w1", namespace), until=lambda w: w["spec"].get("suspend") is False,
                         what="released on admission")  # fmt: skip
        await widgets.patch_status("w1", {"status": {"ready": 1}}, namespace)
        await eventually(lambda: _get(widgets, "w1", namespace), until=lambda w: w["status"].get("ready") == 1)
        one = await _workload(api, namespace, created, WIDGET, until=lambda w: "PodsReady" in str(w["status"]))
        assert _condition(one, "PodsReady")["status"] == "False", "1 of 2 pods ready"
        for ready, status, reason in (
            (2, "True", "Started"),
            (1, "False", "WaitForRecovery"),
            (2, "True", "Recovered"),
        ):
            await widgets.patch_status("w1", {"status": {"ready": ready}}, namespace)
            await _workload(api, namespace, created, WIDGET, until=pods_ready(status, reason),
                            what=f"PodsReady={status} ({reason}) with {ready} of 2 pods ready")  # fmt: skip


JOBSET = GroupVersionKind("jobset.x-k8s.io", "v1alpha2", "JobSet")


def _recipe(title: str) -> dict[str, Any]:
    """The adapter lines docs/integration.md gives under ``title``: the tests run what users copy."""
    text = (Path(__file__).parents[2] / "docs" / "integration.md").read_text()
    block = text.split(f"### {title}", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    [adapter] = yaml.safe_load(block)
    return cast(dict[str, Any], adapter)


JOBSET_ADAPTER = _recipe("JobSet, as Kueue's own JobSet integration shapes it")


async def test_a_jobset_gets_one_pod_set_per_replicated_job_with_kueues_counts_and_pods_ready(
    manager_api: ApiClient, namespace: str
) -> None:
    """JobSet's real CRD: three replicatedJobs with names of the user's choosing, completions below parallelism and
    parallelism missing; the Workload has Kueue's pod sets, the JobSet runs on admission, PodsReady follows it."""
    api, jobsets = manager_api, Objects(manager_api, Resource("jobset.x-k8s.io", "v1alpha2", "jobsets", "JobSet"))
    await crds.install_crds(api, [crds.foreign_crd("JobSet")])
    template = {"spec": {"containers": [{"name": "main", "image": "busybox"}], "restartPolicy": "Never"}}
    jobs: list[dict[str, Any]] = [
        {"name": "driver", "template": {"spec": {"template": template}}},
        {"name": "ps", "replicas": 2, "template": {"spec": {"parallelism": 4, "completions": 3, "template": template}}},
        {"name": "trainers", "replicas": 3, "template": {"spec": {"completions": 5, "template": {
            **template, "metadata": {"annotations": {"kueue.x-k8s.io/podset-required-topology": "rack"}}}}}},
    ]  # fmt: skip
    body = {"apiVersion": "jobset.x-k8s.io/v1alpha2", "kind": "JobSet",
            "metadata": {"name": "train", "labels": {QUEUE_NAME_LABEL: "user-queue"}},
            "spec": {"suspend": True, "replicatedJobs": jobs}}  # fmt: skip
    async with _running(api, _config(namespace, JOBSET_ADAPTER)):
        created = await jobsets.create(body, namespace)
        workload = await _workload(api, namespace, created, JOBSET)
        pod_sets = [(p["name"], p["count"], p["template"]["spec"]["containers"][0]["name"])
                    for p in workload["spec"]["podSets"]]  # fmt: skip
        assert pod_sets == [("driver", 1, "main"), ("ps", 6, "main"), ("trainers", 3, "main")]
        indexes = {"podIndexLabel": "batch.kubernetes.io/job-completion-index",
                   "subGroupIndexLabel": "jobset.sigs.k8s.io/job-index"}  # fmt: skip
        assert [p["topologyRequest"] for p in workload["spec"]["podSets"]] == [
            {**indexes, "subGroupCount": 1}, {**indexes, "subGroupCount": 2},
            {**indexes, "subGroupCount": 3, "required": "rack"},
        ]  # fmt: skip
        name = workload["metadata"]["name"]
        flavor, toleration = f"{namespace}-gpu", {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
        await kueue.ensure_flavor(api, flavor, {"nodeLabels": {"cloud/gpu": "a100"}, "tolerations": [toleration]})
        await eventually(lambda: kueue.admit(api, name, namespace, flavor=flavor), what="admit (a conflict retried)")
        running = await eventually(
            lambda: _get(jobsets, "train", namespace), until=lambda j: j["spec"]["suspend"] is False, what="released"
        )
        # The flavor and Kueue's pod labels and annotations in each Job's pod template, as Kueue's JobSet integration
        # writes them on admission.
        for job in running["spec"]["replicatedJobs"]:
            pod = job["template"]["spec"]["template"]
            assert pod["spec"]["nodeSelector"] == {"cloud/gpu": "a100"}
            assert pod["spec"]["tolerations"] == [toleration]
            assert pod["metadata"]["labels"] == {
                "kueue.x-k8s.io/podset": job["name"],
                "kueue.x-k8s.io/local-queue-name": "user-queue",
                "kueue.x-k8s.io/cluster-queue-name": "cq",
            }
            assert pod["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == name

        def status(ready: dict[str, int]) -> dict[str, Any]:
            rows = [{"name": j["name"], "ready": ready.get(j["name"], 0), "succeeded": 0, "failed": 0, "active": 0,
                     "suspended": 0} for j in jobs]  # fmt: skip
            return {"status": {"replicatedJobsStatus": rows}}

        await jobsets.patch_status("train", status({"driver": 1, "ps": 2}), namespace)  # 3 of 6 Jobs ready
        await jobsets.patch_status("train", status({"driver": 1, "ps": 2, "trainers": 3}), namespace)
        ready = await _workload(api, namespace, created, JOBSET, what="PodsReady=True (Started) once all Jobs are",
                                until=lambda w: _condition(w, "PodsReady").get("reason") == "Started")  # fmt: skip
        assert _condition(ready, "PodsReady")["status"] == "True"

        # Evicted: stopped, and every template restored to what the Workload holds (the JobSet as created).
        await eventually(lambda: kueue.evict(api, name, namespace), what="evict (a conflict retried)")
        stopped = await eventually(
            lambda: _get(jobsets, "train", namespace), until=lambda j: j["spec"]["suspend"] is True, what="stopped"
        )
        for job, original in zip(stopped["spec"]["replicatedJobs"], created["spec"]["replicatedJobs"], strict=True):
            pod, before = job["template"]["spec"]["template"], original["template"]["spec"]["template"]
            assert {**pod, "metadata": pod.get("metadata") or {}} == {
                **before,
                "metadata": before.get("metadata") or {},
            }


RAYJOB = GroupVersionKind("ray.io", "v1", "RayJob")


async def test_a_rayjob_gets_its_head_submitter_and_worker_groups_and_pods_ready_from_its_cluster_state(
    manager_api: ApiClient, namespace: str
) -> None:
    """KubeRay's real RayJob CRD, with the lines docs/integration.md gives."""
    api, rayjobs = manager_api, Objects(manager_api, Resource("ray.io", "v1", "rayjobs", "RayJob"))
    await crds.install_crds(api, [crds.foreign_crd("RayJob")])
    adapter = _recipe("RayJob, as Kueue's own RayJob integration shapes it")
    pod = {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray"}]}}
    groups = [{"groupName": "small", "minReplicas": 0, "maxReplicas": 4, "replicas": 3, "template": pod},
              {"groupName": "tpu", "minReplicas": 0, "maxReplicas": 2, "replicas": 2, "numOfHosts": 4,
               "template": pod}]  # fmt: skip
    body = {"apiVersion": "ray.io/v1", "kind": "RayJob",
            "metadata": {"name": "ray", "labels": {QUEUE_NAME_LABEL: "user-queue"}},
            "spec": {"suspend": True, "entrypoint": "python job.py", "submitterPodTemplate": pod,
                     "rayClusterSpec": {"headGroupSpec": {"rayStartParams": {}, "template": pod},
                                        "workerGroupSpecs": groups}}}  # fmt: skip
    async with _running(api, _config(namespace, adapter)):
        created = await rayjobs.create(body, namespace)
        workload = await _workload(api, namespace, created, RAYJOB)
        assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [
            ("head", 1), ("submitter", 1), ("small", 3), ("tpu", 8)]  # fmt: skip
        name = workload["metadata"]["name"]
        await eventually(lambda: kueue.admit(api, name, namespace), what="admit (a conflict retried)")
        await eventually(lambda: _get(rayjobs, "ray", namespace), until=lambda r: r["spec"]["suspend"] is False,
                         what="released on admission")  # fmt: skip
        await rayjobs.patch_status("ray", {"status": {"rayClusterStatus": {"state": "ready"}}}, namespace)
        await _workload(api, namespace, created, RAYJOB, what="PodsReady=True (Started) once its cluster is ready",
                        until=lambda w: _condition(w, "PodsReady").get("reason") == "Started")  # fmt: skip


async def test_a_rayjob_without_a_submitter_template_gets_kuberays_default_submitter_and_none_in_http_mode(
    manager_api: ApiClient, namespace: str
) -> None:
    """Most RayJobs name no submitterPodTemplate (KubeRay makes one): Kueue's RayJob queues them with the default
    submitter's pod set in K8sJobMode (the CRD's default), none in HTTPMode, and the user's template when given."""
    api, rayjobs = manager_api, Objects(manager_api, Resource("ray.io", "v1", "rayjobs", "RayJob"))
    await crds.install_crds(api, [crds.foreign_crd("RayJob")])
    adapter = _recipe("RayJob, as Kueue's own RayJob integration shapes it")
    pod = {"spec": {"containers": [{"name": "ray", "image": "rayproject/ray:2.9"}]}}
    mine = {"spec": {"containers": [{"name": "submit", "image": "mine", "resources": {"requests": {"cpu": "2"}}}]}}

    def body(name: str, **spec: Any) -> dict[str, Any]:
        return {"apiVersion": "ray.io/v1", "kind": "RayJob",
                "metadata": {"name": name, "labels": {QUEUE_NAME_LABEL: "user-queue"}},
                "spec": {"suspend": True, "entrypoint": "python job.py", **spec,
                         "rayClusterSpec": {"headGroupSpec": {"rayStartParams": {}, "template": pod},
                                            "workerGroupSpecs": [{"groupName": "small", "minReplicas": 0,
                                                                  "maxReplicas": 4, "replicas": 2,
                                                                  "template": pod}]}}}  # fmt: skip

    resources = {"limits": {"cpu": "1", "memory": "1Gi"}, "requests": {"cpu": "500m", "memory": "200Mi"}}
    default = {"metadata": {}, "spec": {"restartPolicy": "Never", "containers": [
        {"name": "ray-job-submitter", "image": "rayproject/ray:2.9", "resources": resources}]}}  # fmt: skip
    async with _running(api, _config(namespace, adapter)):
        plain = await rayjobs.create(body("plain"), namespace)
        assert plain["spec"]["submissionMode"] == "K8sJobMode"  # the CRD's default, as KubeRay reads it
        http = await rayjobs.create(body("http", submissionMode="HTTPMode"), namespace)
        given = await rayjobs.create(body("given", submitterPodTemplate=mine), namespace)
        workload = await _workload(api, namespace, plain, RAYJOB)
        pod_sets = {p["name"]: p for p in workload["spec"]["podSets"]}
        assert sorted(pod_sets) == ["head", "small", "submitter"]
        assert (pod_sets["submitter"]["count"], pod_sets["submitter"]["template"]) == (1, default)
        http_workload = await _workload(api, namespace, http, RAYJOB)
        assert sorted(p["name"] for p in http_workload["spec"]["podSets"]) == ["head", "small"]
        given_workload = await _workload(api, namespace, given, RAYJOB)
        [submitter] = [p for p in given_workload["spec"]["podSets"] if p["name"] == "submitter"]
        assert submitter["template"] == {"metadata": {}, **mine}

        # Admitted: the default template, with what admission writes into it, is kept in the RayJob (as Kueue's).
        name = workload["metadata"]["name"]
        await eventually(lambda: kueue.admit(api, name, namespace), what="admit (a conflict retried)")
        running = await eventually(
            lambda: _get(rayjobs, "plain", namespace), until=lambda r: not r["spec"]["suspend"], what="released"
        )
        written = running["spec"]["submitterPodTemplate"]
        assert written["spec"]["containers"] == default["spec"]["containers"]
        assert written["metadata"]["labels"]["kueue.x-k8s.io/podset"] == "submitter"
        assert written["metadata"]["annotations"]["kueue.x-k8s.io/workload"] == name


MPIJOB = GroupVersionKind("kubeflow.org", "v2beta1", "MPIJob")


async def test_an_mpijob_gets_launcher_and_worker_pod_sets_runs_on_admission_and_finishes(
    manager_api: ApiClient, namespace: str
) -> None:
    """The MPI Operator's real MPIJob CRD, with the lines docs/integration.md gives."""
    api, mpijobs = manager_api, Objects(manager_api, Resource("kubeflow.org", "v2beta1", "mpijobs", "MPIJob"))
    await crds.install_crds(api, [crds.foreign_crd("MPIJob")])
    adapter = _recipe("MPIJob (Kubeflow MPI Operator v2beta1), as Kueue's own MPIJob integration shapes it")
    pod = {"spec": {"containers": [{"name": "mpi", "image": "mpioperator/mpi-pi"}]}}
    body = {"apiVersion": "kubeflow.org/v2beta1", "kind": "MPIJob",
            "metadata": {"name": "pi", "labels": {QUEUE_NAME_LABEL: "user-queue"}},
            "spec": {"runPolicy": {"suspend": True},
                     "mpiReplicaSpecs": {"Launcher": {"template": pod},
                                         "Worker": {"replicas": 4, "template": pod}}}}  # fmt: skip
    async with _running(api, _config(namespace, adapter)):
        created = await mpijobs.create(body, namespace)
        workload = await _workload(api, namespace, created, MPIJOB)
        assert [(p["name"], p["count"], p["topologyRequest"]) for p in workload["spec"]["podSets"]] == [
            ("launcher", 1, {"podIndexLabel": "training.kubeflow.org/replica-index"}),
            ("worker", 4, {"podIndexLabel": "training.kubeflow.org/replica-index"}),
        ]
        name = workload["metadata"]["name"]
        await eventually(lambda: kueue.admit(api, name, namespace), what="admit (a conflict retried)")
        await eventually(lambda: _get(mpijobs, "pi", namespace), what="released on admission",
                         until=lambda m: m["spec"]["runPolicy"]["suspend"] is False)  # fmt: skip
        done = {"type": "Succeeded", "status": "True", "reason": "MPIJobSucceeded", "message": "done",
                "lastTransitionTime": "2026-11-24T10:00:00Z", "lastUpdateTime": "2026-11-24T10:00:00Z"}  # fmt: skip
        await mpijobs.patch_status("pi", {"status": {"conditions": [done]}}, namespace)
        finished = await _workload(api, namespace, created, MPIJOB, what="the Workload finished with the MPIJob",
                                   until=lambda w: _condition(w, "Finished").get("status") == "True")  # fmt: skip
        assert _condition(finished, "Finished")["reason"] == "Succeeded"


async def test_a_users_own_hold_is_never_undone_and_bad_requests_are_said_on_the_object(
    manager_api: ApiClient, namespace: str
) -> None:
    api, runs = manager_api, Objects(manager_api, PIPELINERUNS)
    async with _running(api, _config(namespace, TEKTON_ADAPTER)):
        held = pipelinerun("mine", labels={QUEUE_NAME_LABEL: "user-queue"}, status="PipelineRunPending")
        created = await runs.create(held, namespace)
        workload = await _workload(api, namespace, created, PR, what="an inactive Workload",
                                   until=lambda w: w["spec"].get("active") is False)  # fmt: skip
        current = await runs.get("mine", namespace)
        assert current is not None
        assert current["spec"]["status"] == "PipelineRunPending"
        assert not _held(current)  # still the user's hold, not ours

        await runs.patch("mine", {"spec": {"status": None}}, namespace)  # the user lets go
        await _workload(api, namespace, created, PR, until=lambda w: w["spec"].get("active") is True,
                        what="activated once the user lets go")  # fmt: skip
        queued = await eventually(lambda: _get(runs, "mine", namespace), until=_held, what="held for the queue")
        assert queued["spec"]["status"] == "PipelineRunPending"
        await eventually(
            lambda: kueue.admit(api, workload["metadata"]["name"], namespace), what="admit (a conflict retried)"
        )
        await eventually(lambda: _get(runs, "mine", namespace), until=lambda r: "status" not in r["spec"],
                         what="released on admission")  # fmt: skip

        bad = pipelinerun("greedy", labels={QUEUE_NAME_LABEL: "user-queue"})
        bad["metadata"]["annotations"] = {f"{REQUESTS}cpu": "lots"}
        created = await runs.create(bad, namespace)

        async def warnings() -> list[str]:
            return [e.message for e in await _events(api, namespace, "greedy") if e.reason == "ErrWorkloadCompose"]

        [message] = await eventually(warnings, what="a Warning on the object")
        assert f"annotation {REQUESTS}cpu" in message
        assert "'lots'" in message
        await runs.patch("greedy", {"metadata": {"annotations": {f"{REQUESTS}cpu": "4"}}}, namespace)
        fixed = await _workload(api, namespace, created, PR, what="the Workload once the annotation is fixed")
        assert fixed["spec"]["podSets"][0]["template"]["spec"]["containers"][0]["resources"]["requests"]["cpu"] == "4"


@pytest.mark.parametrize(
    "multikueue_config",
    [
        yaml.safe_dump(
            {
                "multiKueue": {"gcInterval": "2s", "workerLostTimeout": "10s"},
                "dispatcher": {"adapters": [TEKTON_ADAPTER]},
            }
        )
    ],
)
async def test_multikueue_end_to_end_with_the_integration_on_the_manager_and_a_worker(scenario: Scenario) -> None:
    """No test-made Workload: the manager's integration makes it, the worker's adopts MultiKueue's prebuilt copy."""
    s = scenario
    ns = s.namespace
    worker_config = _config(ns, TEKTON_ADAPTER)
    async with _running(s.api["worker1"], worker_config):
        body = pipelinerun("hello", labels={QUEUE_NAME_LABEL: "user-queue"}, managedBy=kueue.MANAGED_BY)
        created = await s.runs("manager").create(body, ns)
        workload = await _workload(s.api["manager"], ns, created, PR, what="the manager's Workload")
        name = workload["metadata"]["name"]
        held = await s.get(s.runs("manager"), "hello")
        assert held["spec"]["status"] == "PipelineRunPending"  # managedBy: nothing else runs it
        assert _held(held)
        # One cache per resource: the integration reads the dispatcher's Workload and PipelineRun informers.
        assert s.manager is not None
        reconciler = s.manager.generation.integration
        assert reconciler.workload_informer is s.manager.generation.manager_workloads
        assert reconciler.kinds[PR][0] is s.manager.generation.kinds.all[PR][0]
        # MultiKueueClusters, AdmissionChecks, MultiKueueConfigs, Workloads, PipelineRuns: one each
        assert len(s.manager.generation.informers) == 5

        await kueue.reserve_quota(s.api["manager"], name, ns, checks=[s.names["check"]])
        await s.copied(name, "worker1")
        await eventually(lambda: kueue.admit(s.api["worker1"], name, ns), what="admit (a conflict retried)")
        copy = await s.wait(s.runs("worker1"), "hello", lambda r: r is not None, "the copy on worker1")
        worker_workload = await s.wait(s.workloads("worker1"), name, lambda w: (w or {}).get("metadata", {}).get(
            "ownerReferences"), "the prebuilt Workload adopted on worker1")  # fmt: skip
        assert worker_workload["metadata"]["ownerReferences"][0]["uid"] == copy["metadata"]["uid"]
        await s.wait(s.runs("worker1"), "hello", lambda r: "status" not in r["spec"] and not _held(r),
                     "the copy released by the worker's integration")  # fmt: skip

        await s.check_state(name, state="Ready")
        # The manager's Kueue: every check Ready, so Admitted.
        await eventually(lambda: kueue.admit(s.api["manager"], name, ns), what="admit (a conflict retried)")
        await s.wait(s.runs("manager"), "hello", lambda r: "status" not in r["spec"] and not _held(r),
                     "the manager object released (only its suspend field changes)")  # fmt: skip
        manager_copy = await s.get(s.runs("manager"), "hello")
        assert manager_copy["spec"]["managedBy"] == kueue.MANAGED_BY

        await s.runs("worker1").patch_status("hello", {"status": DONE}, ns)  # Tekton on worker1
        await s.wait(s.runs("manager"), "hello", lambda r: _condition(r, "Succeeded").get("status") == "True",
                     "the worker's final status on the manager")  # fmt: skip
        await s.wait(s.workloads("manager"), name, lambda w: _condition(w, "Finished").get("status") == "True"
                     and not w["metadata"].get("finalizers"), "the manager Workload finished")  # fmt: skip
        await s.wait(s.runs("worker1"), "hello", lambda r: r is None, "nothing left on worker1")
        await s.wait(s.workloads("worker1"), name, lambda w: w is None, "no Workload left on worker1")


async def test_a_workload_seen_before_its_object_is_cached_is_not_taken_for_an_orphan(
    manager_api: ApiClient, namespace: str
) -> None:
    """Two watches, no order between them: a Workload's event can come while its object is not cached yet. The
    integration then must not take the object for deleted (it deleted the Workload: the benchmark with the
    integration on lost every run whose Workload came first); only one the API server no longer has is."""
    runs, workloads = Objects(manager_api, PIPELINERUNS), Objects(manager_api, WORKLOADS)
    run = await runs.create(pipelinerun("uncached"), namespace)
    await workloads.create(kueue.workload_for({**run, "apiVersion": "tekton.dev/v1", "kind": "PipelineRun"}),
                           namespace)  # fmt: skip
    config = parse_configuration(_config(namespace, TEKTON_ADAPTER))
    workload_informer = Informer(workloads.source(namespace=namespace))
    workload_informer.add_indexes(owners.INDEXES)
    not_cached = Informer(runs.source(namespace=namespace))  # never run: the object's event has not come yet
    reconciler = IntegrationReconciler(config, manager_api, {PR: (not_cached, runs.resource)}, workload_informer)
    async with anyio.create_task_group() as tg:
        tg.start_soon(workload_informer.run)
        await workload_informer.synced.wait()
        await reconciler.reconcile((PR, ObjectKey(namespace, "uncached")))
        tg.cancel_scope.cancel()
    assert await workloads.get("pipelinerun-uncached", namespace) is not None, "the Workload of a live object"
    await runs.delete("uncached", namespace)
    await eventually(lambda: runs.get("uncached", namespace), until=lambda r: r is None, what="the object gone")
    await reconciler.reconcile((PR, ObjectKey(namespace, "uncached")))  # the Workload is still cached
    assert await workloads.get("pipelinerun-uncached", namespace) is None, "the Workload of a deleted object goes"


async def test_a_copy_that_arrives_before_its_prebuilt_workload_is_adopted_when_it_appears(
    worker1_api: ApiClient, namespace: str
) -> None:
    """On a worker: the copy names a Workload not made yet. It is held meanwhile, and adopted and released as soon
    as the Workload appears (its creation wakes the copy; the 30 s recheck is only a safety net)."""
    api, runs = worker1_api, Objects(worker1_api, PIPELINERUNS)
    async with _running(api, _config(namespace, TEKTON_ADAPTER)):
        body = pipelinerun("copy", labels={QUEUE_NAME_LABEL: "user-queue",
                                           "kueue.x-k8s.io/prebuilt-workload-name": "prebuilt-copy"})  # fmt: skip
        body["metadata"]["annotations"] = {"kueue.x-k8s.io/prebuilt-workload-name": "prebuilt-copy"}
        copy = await runs.create(body, namespace)
        await eventually(lambda: _get(runs, "copy", namespace), until=lambda r: r["spec"].get("status")
                         == "PipelineRunPending" and _held(r), what="held while its Workload is missing")  # fmt: skip
        config = parse_configuration(_config(namespace, TEKTON_ADAPTER))
        integration = config.integrations[PR]
        current = await runs.get("copy", namespace)
        assert current is not None
        workload = build({**current, "apiVersion": "tekton.dev/v1", "kind": "PipelineRun"}, PR, integration,
                         active=True, priority=None)  # fmt: skip
        workload["metadata"].update(name="prebuilt-copy", ownerReferences=[], labels={})
        await Objects(api, WORKLOADS).create(workload, namespace)
        # The adoption races this write (both guard on resourceVersion): a conflict is retried, as Kueue does.
        await eventually(lambda: kueue.admit(api, "prebuilt-copy", namespace), what="admitted by 'Kueue'")
        adopted = await eventually(lambda: _get(Objects(api, WORKLOADS), "prebuilt-copy", namespace), timeout=10,
                                   until=lambda w: bool(w["metadata"].get("ownerReferences")),
                                   what="adopted within seconds of appearing")  # fmt: skip
        assert adopted["metadata"]["ownerReferences"][0]["uid"] == copy["metadata"]["uid"]
        await eventually(lambda: _get(runs, "copy", namespace), until=lambda r: "status" not in r["spec"],
                         timeout=10, what="released on its Workload's admission")  # fmt: skip


async def test_a_kind_installed_after_start_is_integrated_without_a_restart(
    manager_api: ApiClient, namespace: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(discovery, "KIND_RETRY_SECONDS", 1.0)  # looked for again every second
    group = "late-integration.multikueue.x-k8s.io"
    sprockets = Objects(manager_api, Resource(group, "v1", "sprockets", "Sprocket"))
    adapter = {**WIDGET_ADAPTER, "name": f"Sprocket.v1.{group}"}
    template = {"spec": {"containers": [{"name": "main", "image": "busybox"}]}}
    crd = widget_crd(strict_status=False, group=group, kind="Sprocket")
    try:
        async with _running(manager_api, _config(namespace, adapter)) as controller:
            assert not controller.integration.kinds  # not served at start
            await crds.install_crds(manager_api, [crd])
            body = {"apiVersion": f"{group}/v1", "kind": "Sprocket",
                    "metadata": {"name": "s1", "labels": {QUEUE_NAME_LABEL: "user-queue"}},
                    "spec": {"parallelism": 2, "template": template}}  # fmt: skip
            created = await sprockets.create(body, namespace)
            await eventually(lambda: _get(sprockets, "s1", namespace), until=lambda s: s["spec"].get("suspend") is True
                             and _held(s), what="held once the kind is served")  # fmt: skip
            workload = await _workload(manager_api, namespace, created, GroupVersionKind(group, "v1", "Sprocket"))
            assert [(p["name"], p["count"]) for p in workload["spec"]["podSets"]] == [("workers", 2)]
    finally:
        await crds.remove_crd(manager_api, crd)
