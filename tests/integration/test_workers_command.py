"""``multikueue workers``: the fleet at a glance, as a user runs it (a process, a kubeconfig) against the real bed
while the dispatcher runs: each worker's connection as the dispatcher recorded it, the configured kinds it serves,
and its Kueue's ClusterQueues (written here as a worker's Kueue writes its status)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import anyio
import yaml

from multikueue.kube.resources import Objects
from multikueue_testbed import kueue
from tests.integration.scenario import Scenario

CONFIG = """
multiKueue:
  externalFrameworks: [{name: PipelineRun.v1.tekton.dev}, {name: Sweep.v1.batch.example.com}]
"""
# Sweep: a kind no test installs (the bed is shared: JobSet's CRD may be on the workers after another test).


async def _workers(s: Scenario, tmp_path: Path, *extra: str) -> tuple[int, str, str]:
    kubeconfig, config = tmp_path / "kubeconfig.yaml", tmp_path / "config.yaml"
    kubeconfig.write_text(yaml.safe_dump(s.bed.cluster("manager").kubeconfig))
    config.write_text(CONFIG)
    argv = [sys.executable, "-m", "multikueue", "workers", "--kubeconfig", str(kubeconfig), "--secrets-namespace",
            s.namespace, "--config-file", str(config), *extra]  # fmt: skip
    with anyio.fail_after(60):
        done = await anyio.run_process(argv, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_the_fleet_shows_each_workers_connection_kinds_and_queues(scenario: Scenario, tmp_path: Path) -> None:
    s = scenario
    await s.label("worker1", region="eu")
    queue = f"{s.namespace}-cq"
    body = {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue", "metadata": {"name": queue},
            "spec": {"resourceGroups": [{"coveredResources": ["cpu"], "flavors": [
                {"name": "default", "resources": [{"name": "cpu", "nominalQuota": "8"}]}]}]}}  # fmt: skip
    queues = Objects(s.api["worker1"], kueue.CLUSTER_QUEUES)
    await queues.create(body)
    try:
        usage = {"flavorsUsage": [{"name": "default", "resources": [{"name": "cpu", "total": "3", "borrowed": "0"}]}],
                 "pendingWorkloads": 4, "reservingWorkloads": 3, "admittedWorkloads": 3}  # fmt: skip
        await queues.patch_status(queue, {"status": usage})

        # The dispatcher's fleet metrics: the poll its generation runs every 30 s, run once here.
        assert s.manager is not None
        await s.manager.generation.worker_queues.poll()
        registry, labels = s.manager.metrics.registry, {"worker": s.names["worker1"], "cluster_queue": queue}
        sample = registry.get_sample_value
        assert sample("multikueue_worker_clusterqueue_usage", {**labels, "flavor": "default", "resource": "cpu"}) == 3
        assert sample("multikueue_worker_clusterqueue_nominal_quota",
                      {**labels, "flavor": "default", "resource": "cpu"}) == 8  # fmt: skip
        assert sample("multikueue_worker_clusterqueue_workloads", {**labels, "state": "pending"}) == 4

        code, out, err = await _workers(s, tmp_path)
        assert code == 0, err
        w1, w2 = s.names["worker1"], s.names["worker2"]
        assert f"worker {w1}: Active=True Active" in out, out
        assert "  labels: region=eu" in out
        assert "  kinds: PipelineRun.v1.tekton.dev, Sweep.v1.batch.example.com (not served)" in out
        assert f"  ClusterQueue {queue}: 4 pending, 3 reserving, 3 admitted\n    default cpu: 3 of 8" in out
        assert f"worker {w2}: Active=True" in out

        code, out, err = await _workers(s, tmp_path, "-o", "json")
        assert code == 0, err
        items = {item["name"]: item for item in json.loads(out)["items"]}
        mine = next(q for q in items[w1]["queues"] if q["name"] == queue)
        assert mine["usage"] == [{"flavor": "default", "resource": "cpu", "used": "3", "nominal": "8"}]
        assert items[w2]["kinds"] == {"PipelineRun.v1.tekton.dev": True, "Sweep.v1.batch.example.com": False}

        code, out, err = await _workers(s, tmp_path, "--secrets-namespace", "elsewhere")
        assert code == 0, err  # the fleet is still shown; each worker says why it could not be read
        assert f"worker {w1}: Active=True Active" in out, out
        assert "  worker: cannot read its Secret elsewhere/worker1-kubeconfig with your credentials (" in out, out
    finally:
        await queues.delete(queue)
