"""Pod set info on admission and its restoration (``integration/podsetinfo.py``), as Kueue's ``podset`` package and
``getPodSetsInfoFromStatus`` (v0.19.2) write them; cases after Kueue's ``podset_test.go``."""

from __future__ import annotations

import copy
import json
from typing import Any

import jsonpatch
import pytest

from multikueue.integration import podsetinfo as psi
from multikueue.integration.lifecycle import Step, changed_object, object_patch
from multikueue.labels import HELD_ANNOTATION, ORIGIN_LABEL
from tests.unit.test_pod_sets_from import TEMPLATE, integration, job, jobset

Object = dict[str, Any]
GPU: Object = {"spec": {"nodeLabels": {"cloud/gpu": "a100"}, "tolerations": [{"key": "gpu", "operator": "Exists",
                                                                       "effect": "NoSchedule"}]}}  # fmt: skip
SPOT: Object = {"spec": {"nodeLabels": {"cloud/spot": "true"}, "tolerations": [{"key": "spot", "value": "yes",
                                                                         "effect": "NoSchedule"}]}}  # fmt: skip


def workload(*assignments: Object, checks: list[Object] | None = None, labels: Object | None = None,
             pod_sets: list[Object] | None = None) -> Object:  # fmt: skip
    return {
        "metadata": {"name": "wl", "namespace": "ns", "labels": labels or {}},
        "spec": {"queueName": "lq", "podSets": pod_sets or [{"name": a["name"], "count": 1} for a in assignments]},
        "status": {"admission": {"clusterQueue": "cq", "podSetAssignments": list(assignments)},
                   "admissionChecks": checks or []},
    }  # fmt: skip


def assigned(name: str, **flavors: str) -> Object:
    return {"name": name, "flavors": flavors, "count": 1}


def test_the_admitted_flavors_kueues_labels_and_annotations_make_the_info() -> None:
    [info] = psi.on_admission(workload(assigned("main", cpu="gpu", memory="gpu")), {"gpu": GPU})
    assert info.node_selector == {"cloud/gpu": "a100"}
    assert info.tolerations == GPU["spec"]["tolerations"], "a flavor named twice is read once"
    assert info.labels == {psi.POD_SET_LABEL: "main", psi.LOCAL_QUEUE_LABEL: "lq", psi.CLUSTER_QUEUE_LABEL: "cq"}
    assert info.annotations == {psi.WORKLOAD_ANNOTATION: "wl"}
    assert info.scheduling_gates == []


def test_a_worker_copy_gets_multikueues_pod_label_and_a_cluster_queue_not_a_label_value_is_left_out() -> None:
    wl = workload(assigned("main", cpu="gpu"), labels={ORIGIN_LABEL: "multikueue"})
    wl["status"]["admission"]["clusterQueue"] = "Not_A_Label"
    [info] = psi.on_admission(wl, {"gpu": GPU})
    assert info.labels[psi.WORKER_POD_LABEL] == "true"
    assert psi.CLUSTER_QUEUE_LABEL not in info.labels


def test_a_topology_assignment_gates_the_pods_and_without_a_request_marks_them_unconstrained() -> None:
    topology = {"levels": ["rack"], "domains": []}
    implicit, explicit = (dict(assigned(n, cpu="gpu"), topologyAssignment=topology) for n in ("a", "b"))
    requested = {"name": "b", "count": 1, "topologyRequest": {"required": "rack"}}
    wl = workload(implicit, explicit, pod_sets=[{"name": "a", "count": 1}, requested])
    a, b = psi.on_admission(wl, {"gpu": GPU})
    assert a.scheduling_gates == b.scheduling_gates == [{"name": psi.TOPOLOGY_GATE}]
    assert a.annotations[psi.UNCONSTRAINED_ANNOTATION] == "true"
    assert psi.UNCONSTRAINED_ANNOTATION not in b.annotations


def test_admission_checks_pod_set_updates_are_merged_and_a_conflict_is_refused_in_kueues_words() -> None:
    update = {"name": "main", "labels": {"team": "ml"}, "nodeSelector": {"zone": "z1"},
              "tolerations": [{"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}]}  # fmt: skip
    [info] = psi.on_admission(workload(assigned("main", cpu="gpu"), checks=[{"name": "prov", "podSetUpdates": [
        update, {"name": "other", "labels": {"x": "y"}}]}]), {"gpu": GPU})  # fmt: skip
    assert info.labels["team"] == "ml"
    assert "x" not in info.labels
    assert info.node_selector == {"cloud/gpu": "a100", "zone": "z1"}
    assert len(info.tolerations) == 1, "the same toleration is not added twice"
    clash = {"name": "main", "nodeSelector": {"cloud/gpu": "h100"}}
    with pytest.raises(psi.InvalidPodSetInfo) as refused:
        psi.on_admission(workload(assigned("main", cpu="gpu"), checks=[{"name": "prov", "podSetUpdates": [clash]}]),
                         {"gpu": GPU})  # fmt: skip
    assert str(refused.value) == (
        'in admission check "prov": invalid admission check PodSetUpdate: conflict for nodeSelector: '
        "conflict for key=cloud/gpu, value1=a100, value2=h100"
    )


def test_a_flavor_that_is_gone_is_an_error_to_retry() -> None:
    with pytest.raises(LookupError, match="ResourceFlavor 'gpu' not found"):
        psi.on_admission(workload(assigned("main", cpu="gpu")), {})


def test_merge_then_restore_gives_the_template_back_exactly() -> None:
    own = [{"key": "spot", "value": "yes", "effect": "NoSchedule"}]
    template: Object = {
        "metadata": {"annotations": {"keep": "me"}},
        "spec": {"containers": [{"name": "c"}], "tolerations": own},
    }
    original = copy.deepcopy(template)
    [info] = psi.on_admission(workload(assigned("main", cpu="gpu", memory="spot")), {"gpu": GPU, "spot": SPOT})
    psi.merge(template, info)
    assert template["spec"]["nodeSelector"] == {"cloud/gpu": "a100", "cloud/spot": "true"}
    # Kueue's toleration equality reads an empty operator as Equal: the template's own is not repeated.
    assert template["spec"]["tolerations"] == [*original["spec"]["tolerations"], GPU["spec"]["tolerations"][0]]
    assert template["metadata"]["annotations"] == {"keep": "me", psi.WORKLOAD_ANNOTATION: "wl"}
    assert "schedulingGates" not in template["spec"], "an empty field is not written (Go's omitempty)"
    [before] = psi.from_workload({"spec": {"podSets": [{"name": "main", "template": original}]}})
    assert psi.restore(template, before)
    assert template == original
    assert not psi.restore(template, before), "nothing left to restore"


def test_a_template_key_with_another_value_is_a_conflict() -> None:
    template = {"spec": {"containers": [{"name": "c"}], "nodeSelector": {"cloud/gpu": "t4"}}}
    [info] = psi.on_admission(workload(assigned("main", cpu="gpu")), {"gpu": GPU})
    with pytest.raises(psi.InvalidPodSetInfo, match="conflict for key=cloud/gpu, value1=t4, value2=a100"):
        psi.merge(template, info)


def held_jobset() -> Object:
    # Through JSON, as from the API server: no dict shared between the two jobs (deepcopy would keep the sharing).
    obj: Object = json.loads(json.dumps(jobset(job("driver", replicas=1), job("workers", replicas=2, parallelism=2))))
    obj["metadata"].update(resourceVersion="7", annotations={HELD_ANNOTATION: "true"})
    obj["spec"]["suspend"] = True
    return obj


def test_run_writes_the_suspend_field_and_each_template_at_its_index_in_one_guarded_patch() -> None:
    obj = held_jobset()
    wl = workload(assigned("driver", cpu="gpu"), assigned("workers", cpu="spot"))
    after = changed_object(obj, integration(), Step.RUN, psi.on_admission(wl, {"gpu": GPU, "spot": SPOT}))
    assert after["spec"]["suspend"] is False
    assert HELD_ANNOTATION not in after["metadata"].get("annotations", {})
    driver, workers = (j["template"]["spec"]["template"] for j in after["spec"]["replicatedJobs"])
    assert driver["spec"]["nodeSelector"] == {"cloud/gpu": "a100"}
    assert workers["spec"]["nodeSelector"] == {"cloud/spot": "true"}
    assert workers["metadata"]["labels"][psi.POD_SET_LABEL] == "workers"
    assert obj == held_jobset(), "the cached object is not touched"
    patch = object_patch(obj, after)
    assert patch[0] == {"op": "test", "path": "/metadata/resourceVersion", "value": "7"}
    assert any(op["path"].startswith("/spec/replicatedJobs/1/template/spec/template/") for op in patch)
    assert jsonpatch.apply_patch(obj, patch) == after


def test_stop_restores_the_templates_the_workload_holds_and_a_mismatch_is_passed_over_or_refused() -> None:
    obj = held_jobset()
    pod_sets = [
        {"name": j["name"], "count": 1, "template": copy.deepcopy(TEMPLATE)} for j in obj["spec"]["replicatedJobs"]
    ]
    wl = workload(assigned("driver", cpu="gpu"), assigned("workers", cpu="gpu"), pod_sets=pod_sets)
    running = changed_object(obj, integration(), Step.RUN, psi.on_admission(wl, {"gpu": GPU}))
    stopped = changed_object(running, integration(), Step.STOP, psi.from_workload(wl))
    # As Kueue leaves it: the labels and annotations it added are removed, the emptied metadata stays as {}.
    restored = {**TEMPLATE, "metadata": {}}
    assert [j["template"]["spec"]["template"] for j in stopped["spec"]["replicatedJobs"]] == [restored, restored]
    assert stopped["spec"]["suspend"] is True
    fewer = psi.from_workload({"spec": {"podSets": pod_sets[:1]}})
    assert changed_object(running, integration(), Step.STOP, fewer)["spec"]["replicatedJobs"] == running["spec"][
        "replicatedJobs"], "Kueue passes a restore over when the pod sets no longer match"  # fmt: skip
    with pytest.raises(psi.InvalidPodSetInfo, match="invalid podset infos: expecting 2 podset, got 1"):
        changed_object(obj, integration(), Step.RUN, fewer)
