"""Adversarial review of 85b3fd6 (a kind's CRD removed from a worker is noticed) and 3266950 (workers kept from the
cluster inventory): the sequences that lose a run, run it twice, leave it stuck or tell something false, shown on the
pure decisions and on ``Runs.drive`` over the in-memory worker. Each fails on the commit reviewed for the reason in
its docstring; tests/integration/test_fleet_edges.py shows the same against the real API servers where it can."""

from __future__ import annotations

from typing import Any

import pytest

from multikueue.clusters.inventory import MAX_CLUSTERS, plan_clusters, selector
from multikueue.clusters.inventory_config import ObjectSelector
from multikueue.clusters.worker import KindNotServed
from multikueue.config import DISPATCHER_ALL_AT_ONCE, DISPATCHER_INCREMENTAL
from multikueue.dispatch import decision as d
from multikueue.metrics import Metrics
from tests.component.cases import ORIGIN, PIPELINERUN, Case, status
from tests.component.memory_worker import MemoryWorker
from tests.component.test_runs import AT_LEAST, AT_MOST, ENDED, KUEUE, VIEWS, RecordingRecord, There, drive

Object = dict[str, Any]
CHECK = "ac"
SPEC: Object = {"queueName": "q", "podSets": [{"name": "main", "count": 1}]}
KIND = "PipelineRun.v1.tekton.dev"


def cond(kind: str, at: str = "2026-01-01T00:00:00Z") -> Object:
    return {"type": kind, "status": "True", "reason": kind, "message": "", "lastTransitionTime": at}


def workload(*conditions: Object, nominated: list[str] | None = None) -> Object:
    status_: Object = {"conditions": [cond("QuotaReserved"), *conditions],
                       "admissionChecks": [{"name": CHECK, "state": "Pending"}]}  # fmt: skip
    if nominated is not None:
        status_["nominatedClusterNames"] = nominated
    return {"metadata": {"name": "wl", "namespace": "ns"}, "spec": dict(SPEC), "status": status_}


def copy_(*conditions: Object) -> Object:
    return {"metadata": {"name": "wl", "namespace": "ns"}, "spec": dict(SPEC), "status": {"conditions": [*conditions]}}


def group(wl: Object, copies: dict[str, Object], **kwargs: Any) -> d.Group:
    options: Object = {"clusters": ("w1", "w2"), "connected": ("w1", "w2"), "serving": {"w1": True, "w2": False},
                       "holding": {"w1": False, "w2": False}, "kind": KIND, "now": 1000.0}  # fmt: skip
    options.update(kwargs)
    return d.Group(workload=wl, check=CHECK, worker_copies=copies, **options)


# ------------------------------------------------------------------------------------- 85b3fd6: the dispatch


def test_a_worker_that_no_longer_serves_the_kind_never_wins_the_race() -> None:
    """The CRD removed on w2 while the run's Workload copy waits there: w2's Kueue admits that copy (a prebuilt
    Workload needs no CRD) before the pass that takes w2 out of the nominations. ``_the_winner`` does not look at
    ``serving``, so w2 wins: it is recorded (``status.clusterName``, immutable in Kueue) and the object's create there
    raises ``KindNotServed`` on every pass: the run is stuck for ever, its quota held, the check saying it was admitted
    on w2. Before 85b3fd6 the kind's informer and resource stayed: the create was refused (404) and the run retried."""
    step = d.decide(group(workload(nominated=["w1", "w2"]), {"w1": copy_(), "w2": copy_(cond("Admitted"))}))
    assert not (isinstance(step, d.RunOnWinner) and step.winner == "w2"), step


@pytest.mark.parametrize("dispatcher", [DISPATCHER_INCREMENTAL, "example.com/external-dispatcher"])
def test_a_worker_named_not_nominated_for_lacking_the_kind_is_not_nominated_either(dispatcher: str) -> None:
    """Incremental (and an external dispatcher) nominate workers without looking at ``serving``: w2, lacking the
    kind, is nominated and the Workload copied there (its Kueue may admit it: then as above), while the check's
    new message says ``Not nominated: w2: does not serve ...``: false, beside ``nominatedClusterNames: [w1, w2]``."""
    wl = workload(nominated=["w1", "w2"] if dispatcher != DISPATCHER_INCREMENTAL else None)
    step = d.decide(group(wl, {}, dispatcher=dispatcher))
    assert isinstance(step, d.Nominate), step
    if step.left_out is not None:
        lacking = step.left_out.removeprefix(d.LEFT_OUT).split(":")[0].split(", ")
        assert not set(lacking) & set(step.nominated), (step.left_out, step.nominated)
        assert not set(lacking) & set(step.copy_to), (step.left_out, step.copy_to)


def test_all_at_once_is_the_reference_the_two_above_are_held_to() -> None:
    """AllAtOnce keeps w2 out of the nominations and copies, and says so: what every dispatcher should do."""
    step = d.decide(group(workload(), {}, dispatcher=DISPATCHER_ALL_AT_ONCE))
    assert isinstance(step, d.Nominate)
    assert (step.nominated, step.copy_to, step.left_out) == (("w1",), ("w1",), f"{d.LEFT_OUT}w2: does not serve {KIND}")


@pytest.mark.parametrize("view_name", [AT_LEAST, AT_MOST, KUEUE, ENDED])
async def test_a_run_whose_recorded_worker_stopped_serving_its_kind_is_told_not_retried_silently(
    view_name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run is recorded on w1 and ran there (its status mirrored); w1's CRD is removed, so 85b3fd6 stops the kind's
    informer and drops its resource. Every pass then raises ``KindNotServed`` out of ``copies.sync`` before anything
    is recorded: the controller retries with backoff for as long as the kind is not served (for ever when the CRD is
    not coming back). Nothing is told (Direct mode: still ``Placed``; Kueue mode: ``admitted on "w1"``), no
    ``workerLostTimeout`` runs, the run is neither failed, moved, nor finished with the verdict its worker gave."""
    view = VIEWS[view_name]
    case = Case(view.mode, view.mode.adapter())
    case.obj = case.manager.put({**case.obj, "status": status()})
    case.worker = MemoryWorker("w1", origin=ORIGIN, unserved={PIPELINERUN: 'no matches for kind "PipelineRun"'})
    record = RecordingRecord()
    raised: BaseException | None = None
    try:
        await drive(case, There(ran_there=True), view, record, Metrics())
    except KindNotServed as e:
        raised = e
    assert record.calls, f"nothing told; raised {raised!r} (retried with backoff, for as long as the kind is gone)"


# ------------------------------------------------------------------------------------- 3266950: the inventory


def _cluster(name: str) -> Object:
    return {"metadata": {"name": name, "labels": {"pool": "batch"}}}


def test_kueues_limit_never_drops_a_selected_cluster_a_run_is_recorded_on() -> None:
    """Twenty selected clusters listed, a run recorded on the one that sorts last; a twenty-first cluster is labelled
    into the pool and sorts first. ``plan_clusters`` keeps first only clusters that *no longer match* (``draining``):
    one that still matches and holds a run is cut like any other, so it leaves the list at once. Out of the list,
    this dispatcher reads the run's recorded worker as gone (``_winner``: not in the clusters, so not "unavailable",
    holding False): ``Admitting remote no longer exists`` (Retry: run a second time elsewhere while its copy runs on)
    or, once its status was mirrored, ``Finished`` Failed as "deleted there": lost while it runs. The docs say "a
    cluster kept for its runs first"."""
    listed = [f"c{i:02}" for i in range(1, MAX_CLUSTERS + 1)]
    clusters = [_cluster(n) for n in ["c00", *listed]]
    batch = selector(ObjectSelector.model_validate({"matchLabels": {"pool": "batch"}}))
    plan = plan_clusters(clusters, batch, current=listed, holding=[listed[-1]])
    assert listed[-1] in plan.clusters, plan
    assert len(plan.clusters) <= MAX_CLUSTERS
