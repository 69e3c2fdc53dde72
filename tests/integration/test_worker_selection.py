"""Kueue mode: a run chooses the workers it races on (the kind's ``workerSelector``, the object's
``multikueue.x-k8s.io/worker-selector``), on the real bed with the tests playing Kueue's part. A run no worker matches
is told so where its user looks, and goes as soon as a worker is labelled to match."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from multikueue.dispatch.placement import WORKER_SELECTOR_ANNOTATION
from multikueue_testbed import kueue
from multikueue_testbed.objects import pipelinerun
from multikueue_testbed.waiting import eventually
from tests.integration.scenario import Scenario
from tests.integration.test_status import _status as status


async def _submit(s: Scenario, name: str, selector: str | None = None) -> str:
    body = pipelinerun(name, labels={"kueue.x-k8s.io/queue-name": "user-queue"})
    body["spec"]["managedBy"] = kueue.MANAGED_BY
    if selector is not None:
        body["metadata"]["annotations"] = {WORKER_SELECTOR_ANNOTATION: selector}
    _, workload = await s.submit_object(kueue.PIPELINERUNS, body)
    return str(workload["metadata"]["name"])


async def _regions(s: Scenario) -> None:
    await s.label("worker1", region="eu")
    await s.label("worker2", region="us")


async def test_a_run_races_only_on_the_workers_it_selects(scenario: Scenario) -> None:
    s = scenario
    await _regions(s)
    wl_name = await _submit(s, "us-only", "region in (us)")
    await s.copied(wl_name, "worker2")
    manager_wl = await s.get(s.workloads("manager"), wl_name)
    assert manager_wl["status"]["nominatedClusterNames"] == [s.names["worker2"]]
    # A run without a selection, submitted after, is copied to both: worker1 has had its chance to get the first.
    other = await _submit(s, "anywhere")
    await s.copied(other, "worker1", "worker2")
    assert await s.workloads("worker1").get(wl_name, s.namespace) is None
    await kueue.admit(s.api["worker2"], wl_name, s.namespace)
    await s.check_state(wl_name, state="Ready", message=f'The workload was admitted on "{s.names["worker2"]}"')
    await s.wait(s.runs("worker2"), "us-only", lambda r: r is not None, "the run on worker2")


async def test_a_run_no_worker_matches_is_told_why_and_goes_once_a_worker_matches(
    scenario: Scenario, tmp_path: Path
) -> None:
    s = scenario
    await _regions(s)
    wl_name = await _submit(s, "asia", "region=asia")
    told = (
        "No worker matches the run's worker selection (the object's worker-selector \"region=asia\"): "
        f"{s.names['worker1']}: labels do not match the object's worker-selector (region in (asia)); "
        f"{s.names['worker2']}: labels do not match the object's worker-selector (region in (asia))"
    )
    await s.check_state(wl_name, state="Pending", message=told)
    on_workload = await eventually(
        lambda: s.events(wl_name), until=lambda e: any(x.message == told for x in e), what="a Warning on the Workload"
    )
    assert [x.type for x in on_workload if x.message == told] == ["Warning"]
    on_run = await eventually(
        lambda: s.events("asia"), until=lambda e: any(x.reason == "NoWorkerMatches" for x in e), what="an object Event"
    )
    assert [x.message for x in on_run if x.reason == "NoWorkerMatches"] == [told]
    for worker in ("worker1", "worker2"):
        assert await s.workloads(worker).get(wl_name, s.namespace) is None
    assert not (await s.get(s.workloads("manager"), wl_name))["status"].get("nominatedClusterNames")
    code, out, _ = await status(s, s.bed.cluster("manager").kubeconfig, "asia", tmp_path)
    assert code == 0
    assert f"  why: sent to no worker: {told}" in out, out

    await s.label("worker1", region="asia")  # the label change alone brings the run back
    await s.copied(wl_name, "worker1")
    await s.check_state(wl_name, state="Pending", message="")
    assert await s.workloads("worker2").get(wl_name, s.namespace) is None


ON_EU_WORKERS = """
multiKueue: {gcInterval: 2s, workerLostTimeout: 10s}
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    placement: {workerSelector: "region in (eu)"}
"""


@pytest.mark.parametrize("multikueue_config", [ON_EU_WORKERS])
async def test_a_kinds_worker_selector_narrows_every_run_of_it(scenario: Scenario) -> None:
    s = scenario
    await _regions(s)
    wl_name = await _submit(s, "eu-kind")
    await s.copied(wl_name, "worker1")
    manager_wl: Any = await s.get(s.workloads("manager"), wl_name)
    assert manager_wl["status"]["nominatedClusterNames"] == [s.names["worker1"]]
    # Moving worker1 out of the EU (while the run waits) takes its nomination and its copy away.
    await s.label("worker1", region="us")
    await s.wait(s.workloads("worker1"), wl_name, lambda w: w is None, "the copy on worker1 removed")
    await s.check_state(wl_name, state="Pending", message="No worker matches the run's worker selection")
