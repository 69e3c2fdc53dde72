"""Programs that ask why a run waits, and users whose access is partial, against the real bed with the dispatcher
running (the tests play Kueue's and Tekton's part on the workers): ``status -o json`` and ``explain -o json`` follow
a run from waiting to running to finished in both modes, their text saying the same; a user who may read the run but
not MultiKueueClusters gets the run and one line per worker; a worker whose kubeconfig Secret is not YAML is one
line on its MultiKueueCluster, in ``workers`` and in ``status``."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import anyio
import pytest
import yaml
from anyio.streams.text import TextReceiveStream
from kubernetes_asyncio import client as k8s_client

from multikueue.dispatch.placement import WORKER_SELECTOR_ANNOTATION
from multikueue.kube.addresses import MULTIKUEUE_CLUSTERS
from multikueue.kube.resources import Objects
from multikueue_testbed import kueue
from multikueue_testbed.accounts import mint_service_account_kubeconfig
from multikueue_testbed.client import k8s, raw_body
from multikueue_testbed.objects import pipelinerun, running_status
from multikueue_testbed.waiting import eventually
from tests.integration.scenario import Scenario

KIND = "PipelineRun.v1.tekton.dev"
EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "why_it_waits.py"
CONFIG = "multiKueue:\n  externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]\n"
DIRECT = """
multiKueue: {gcInterval: 2s, workerLostTimeout: 10s}
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    mode: Direct
    finished: {path: '.status.conditions[?type=="Succeeded"].status', notIn: [Unknown]}
"""
FORBIDDEN = "with your credentials (HTTP 403 Forbidden: "
NOT_YAML_KEY = "worker2-kubeconfig key kubeconfig is not YAML"
NOT_YAML = """apiVersion: v1
clusters:
- name: w2
  cluster: server: https://127.0.0.1:6443
"""


def _file(tmp_path: Path, kubeconfig: Any) -> str:
    path = tmp_path / f"kubeconfig-{abs(hash(json.dumps(kubeconfig, sort_keys=True)))}.yaml"
    path.write_text(yaml.safe_dump(kubeconfig))
    return str(path)


async def _cli(tmp_path: Path, kubeconfig: Any, *argv: str) -> tuple[int, str, str]:
    """A command as a user runs it: a process, a kubeconfig file."""
    with anyio.fail_after(60):
        done = await anyio.run_process(
            [sys.executable, "-m", "multikueue", *argv, "--kubeconfig", _file(tmp_path, kubeconfig)], check=False
        )
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def _read(stream: Any, into: list[str], until: Callable[[str], bool]) -> None:
    """The process's output into ``into`` until ``until`` holds for all of it, or the stream ends."""
    with anyio.fail_after(60):
        async for chunk in TextReceiveStream(stream):
            into.append(chunk)
            if until("".join(into)):
                return


async def _status(s: Scenario, tmp_path: Path, kubeconfig: Any, name: str, *extra: str) -> tuple[int, str, str]:
    return await _cli(tmp_path, kubeconfig, "status", KIND, f"{s.namespace}/{name}", "--secrets-namespace",
                      s.namespace, *extra)  # fmt: skip


async def _document(s: Scenario, tmp_path: Path, name: str, command: str = "status") -> Any:
    """``-o json`` of ``status`` or ``explain`` as the bed's admin; the text of the same command says the same."""
    admin = s.bed.cluster("manager").kubeconfig
    if command == "status":
        code, out, err = await _status(s, tmp_path, admin, name, "-o", "json")
    else:
        code, out, err = await _cli(tmp_path, admin, "explain", "--kind", KIND, f"{s.namespace}/{name}", "-o", "json")
    assert (code, err) == (0, ""), err
    document = json.loads(out)
    assert (document["apiVersion"], document["kind"]) == ("multikueue.x-k8s.io/v1alpha1", "RunStatus")
    assert document["run"]["name"] == name
    assert document["run"]["uid"]
    return document


def _by_name(document: Any) -> dict[str, Any]:
    return {w["name"]: w for w in document["workers"]}


async def test_status_json_follows_a_kueue_run_from_waiting_to_running_to_finished(
    scenario: Scenario, tmp_path: Path
) -> None:
    """The example spawner follows the same run from beside, through the document only."""
    s = scenario
    _, workload = await s.submit("followed")
    wl_name = workload["metadata"]["name"]
    await s.copied(wl_name)
    w1, w2 = s.names["worker1"], s.names["worker2"]
    full = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 1 more needed"
    await kueue.pending(s.api["worker1"], wl_name, s.namespace, full)
    admin = _file(tmp_path, s.bed.cluster("manager").kubeconfig)
    argv = [sys.executable, str(EXAMPLE), KIND, f"{s.namespace}/followed", "--interval", "0.5", "--timeout", "120",
            "--kubeconfig", admin, "--secrets-namespace", s.namespace]  # fmt: skip
    spawner = await anyio.open_process(argv)
    try:
        shown: list[str] = []
        assert spawner.stdout is not None
        # Its first report, each worker's reason with it, before the run moves on.
        await _read(spawner.stdout, shown, lambda out: f"    {w1}: {full}\n" in out and f"    {w2}: " in out)
        first = "".join(shown).splitlines()[0]
        assert f"PipelineRun {s.namespace}/followed: WaitingForWorker (Kueue): " in first, shown
        await _kueue_run_to_the_end(s, tmp_path, wl_name, full)
        with anyio.fail_after(60):
            await spawner.wait()
        await _read(spawner.stdout, shown, lambda _: False)  # the rest, to its end
    finally:
        if spawner.returncode is None:
            spawner.kill()
        await spawner.aclose()
    assert spawner.returncode == 0, "".join(shown)
    last = "".join(shown).splitlines()[-1]
    assert last.endswith(f"PipelineRun {s.namespace}/followed: Finished on {w2} (Kueue): finished (Succeeded): Job "
                         "finished"), shown  # fmt: skip


async def _kueue_run_to_the_end(s: Scenario, tmp_path: Path, wl_name: str, full: str) -> None:
    w1, w2 = s.names["worker1"], s.names["worker2"]
    waiting = await _document(s, tmp_path, "followed")
    assert (waiting["mode"], waiting["phase"], waiting["worker"]) == ("Kueue", "WaitingForWorker", None)
    workers = _by_name(waiting)
    assert sorted(workers) == sorted([w1, w2])
    assert workers[w1]["reason"] == full
    assert workers[w1]["kueue"] == {"status": "False", "reason": "Pending", "message": full}, "its Kueue's own reason"
    assert (workers[w2]["reason"], workers[w2]["kueue"]) == ("not looked at by its Kueue yet", None)
    assert waiting["manager"]["workload"]["name"] == wl_name
    code, out, _ = await _status(s, tmp_path, s.bed.cluster("manager").kubeconfig, "followed")
    assert code == 0
    assert f"  why: {waiting['why']}\n" in out, "the text is rendered from the same document"
    assert waiting["why"].startswith("waiting for a worker's Kueue to admit it: ")

    explained = await _document(s, tmp_path, "followed", "explain")  # the manager only: workers said, not read
    assert (explained["mode"], explained["phase"]) == ("Kueue", "WaitingForWorker")
    assert {w["name"]: w["read"] for w in explained["workers"]} == {w1: False, w2: False}

    await kueue.admit(s.api["worker2"], wl_name, s.namespace)
    await s.check_state(wl_name, state="Ready")
    await s.wait(s.runs("worker2"), "followed", lambda r: r is not None, "the copy on worker2")
    placed = await _document(s, tmp_path, "followed")
    assert (placed["phase"], placed["worker"]) == ("Placed", w2)
    [there] = placed["workers"]
    assert (there["name"], there["read"], there["reason"]) == (w2, True, "admitted here, running: no conditions yet")

    await s.runs("worker2").patch_status("followed", {"status": running_status("followed")}, s.namespace)
    await s.wait(s.runs("manager"), "followed", lambda r: "status" in r, "status mirrored")
    running = await _document(s, tmp_path, "followed")
    assert running["workers"][0]["reason"] == "admitted here, running: Succeeded=Unknown (Running)"
    assert running["manager"]["conditions"][0]["reason"] == "Running", "the manager object's own, mirrored"

    await kueue.finish(s.api["worker2"], wl_name, s.namespace, reason="Succeeded", message="Job finished")
    await s.wait(s.workloads("manager"), wl_name, _finished, "the run finished")
    done = await _document(s, tmp_path, "followed")
    assert (done["phase"], done["why"]) == ("Finished", "finished (Succeeded): Job finished")


def _finished(workload: Any) -> bool:
    return any(c["type"] == "Finished" and c["status"] == "True"
               for c in (workload or {}).get("status", {}).get("conditions") or [])  # fmt: skip


def _reason(run: Any) -> str:
    conditions = ((run or {}).get("status") or {}).get("conditions") or []
    return str(next((c.get("reason") for c in conditions if c["type"] == "MultiKueuePlacement"), ""))


@pytest.mark.parametrize("multikueue_config", [DIRECT])
async def test_explain_json_gives_each_workers_verdict_while_a_direct_run_waits_then_where_it_runs(
    scenario: Scenario, tmp_path: Path
) -> None:
    s = scenario
    body = pipelinerun("picky")
    body["spec"]["managedBy"] = kueue.MANAGED_BY
    body["metadata"]["annotations"] = {WORKER_SELECTOR_ANNOTATION: "region=asia"}
    await s.runs("manager").create(body, s.namespace)
    await s.wait(s.runs("manager"), "picky", lambda r: _reason(r) == "NoWorkerFits", "no worker fits")
    w1, w2 = s.names["worker1"], s.names["worker2"]

    waiting = await _document(s, tmp_path, "picky", "explain")
    assert (waiting["mode"], waiting["phase"], waiting["worker"]) == ("Direct", "WaitingForWorker", None)
    rejected = "rejected: labels do not match the object's worker-selector (region in (asia))"
    assert {w["name"]: (w["reason"], w["placement"], w["read"]) for w in waiting["workers"]} == {
        w1: (rejected, rejected, False),
        w2: (rejected, rejected, False),
    }
    assert waiting["manager"]["placement"]["condition"]["reason"] == "NoWorkerFits"
    code, out, _ = await _cli(tmp_path, s.bed.cluster("manager").kubeconfig, "explain", "--kind", KIND,
                              f"{s.namespace}/picky")  # fmt: skip
    assert code == 0
    assert f"    {w1}: {rejected}\n    {w2}: {rejected}" in out, out
    assert (await _document(s, tmp_path, "picky"))["why"] == waiting["why"], "status and explain agree"

    await s.label("worker1", region="asia")
    await s.wait(s.runs("manager"), "picky", lambda r: _reason(r) == "Placed", "placed once worker1 matches")
    await s.wait(s.runs("worker1"), "picky", lambda r: r is not None, "the copy on worker1")
    placed = await _document(s, tmp_path, "picky")
    assert (placed["mode"], placed["phase"], placed["worker"]) == ("Direct", "Placed", w1)
    workers = _by_name(placed)
    assert (workers[w1]["read"], workers[w1]["reason"]) == (True, "placed here, running: no conditions yet")
    assert workers[w2]["placement"] == rejected


async def test_a_user_who_may_read_the_run_but_not_multikueueclusters_gets_the_run_and_a_line_per_worker(
    scenario: Scenario, tmp_path: Path
) -> None:
    s = scenario
    _, workload = await s.submit("limited")
    await s.copied(workload["metadata"]["name"])
    rbac: Any = k8s_client.RbacAuthorizationV1Api(k8s(s.api["manager"]))
    rules = [
        {"apiGroups": ["tekton.dev"], "resources": ["pipelineruns"], "verbs": ["get"]},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
    ]  # no MultiKueueClusters, no Secrets
    await rbac.create_namespaced_role(s.namespace, raw_body({"metadata": {"name": "run-reader"}, "rules": rules}))
    subject = {"kind": "ServiceAccount", "name": "run-reader", "namespace": s.namespace}
    binding: dict[str, Any] = {"metadata": {"name": "run-reader"}, "subjects": [subject],
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "run-reader"}}  # fmt: skip
    await rbac.create_namespaced_role_binding(s.namespace, raw_body(binding))
    reader = await mint_service_account_kubeconfig(s.api["manager"], s.bed.cluster("manager"), namespace=s.namespace,
                                                   name="run-reader")  # fmt: skip

    code, out, err = await _status(s, tmp_path, reader, "limited")
    assert (code, err) == (0, ""), err
    assert f"PipelineRun {s.namespace}/limited\n" in out
    assert "    nominated: " in out, "the manager's view of the run is all there"
    for worker in (s.names["worker1"], s.names["worker2"]):
        [line] = [line for line in out.splitlines() if line.startswith(f"  worker {worker}:")]
        said = line.removeprefix(f"  worker {worker}: ")
        assert said.startswith(f"cannot read its MultiKueueCluster {FORBIDDEN}"), line
        assert f'multikueueclusters.kueue.x-k8s.io "{worker}" is forbidden' in line, line

    code, out, err = await _status(s, tmp_path, reader, "limited", "-o", "json")
    assert (code, err) == (0, ""), err
    document = json.loads(out)
    assert (document["mode"], document["phase"]) == ("Kueue", "WaitingForWorker")
    for worker in document["workers"]:
        assert worker["read"] is False
        assert worker["unreadable"].startswith(f"cannot read its MultiKueueCluster {FORBIDDEN}")
        assert "\n" not in worker["unreadable"]

    # With the run alone: what it cannot read on the manager is one line each, the run still shown.
    await rbac.create_namespaced_role(s.namespace, raw_body({"metadata": {"name": "run-only"}, "rules": rules[:1]}))
    binding = {**binding, "metadata": {"name": "run-only"}, "subjects": [{**subject, "name": "run-only"}],
               "roleRef": {**binding["roleRef"], "name": "run-only"}}  # fmt: skip
    await rbac.create_namespaced_role_binding(s.namespace, raw_body(binding))
    alone = await mint_service_account_kubeconfig(s.api["manager"], s.bed.cluster("manager"), namespace=s.namespace,
                                                  name="run-only")  # fmt: skip
    code, out, err = await _status(s, tmp_path, alone, "limited")
    assert (code, err) == (0, ""), err
    assert f"  why: not known: Workloads cannot be read {FORBIDDEN}" in out, out
    assert f"  manager: cannot read Workloads {FORBIDDEN}" in out, out
    assert f"  manager: cannot read Events {FORBIDDEN}" in out, out
    code, out, err = await _status(s, tmp_path, alone, "limited", "-o", "json")
    document = json.loads(out)
    assert (document["mode"], document["phase"], document["workers"]) == (None, "Unknown", [])
    assert sorted(document["manager"]["unreadable"]) == ["Events", "Workloads"]

    # `workers` cannot list the fleet for this user: one line, and with the user's own access to a worker, that worker.
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    fleet = ("workers", "--secrets-namespace", s.namespace, "--config-file", str(config))
    code, out, err = await _cli(tmp_path, reader, *fleet)
    assert (code, out) == (1, "")
    assert err.startswith(f"multikueue workers: MultiKueueClusters cannot be listed {FORBIDDEN}"), err
    assert err.endswith("; give your own access to workers: --worker-kubeconfig WORKER=PATH\n"), err
    assert err.count("\n") == 1, err
    own = tmp_path / "worker1.yaml"
    own.write_text(yaml.safe_dump(s.bed.cluster("worker1").kubeconfig))
    code, out, err = await _cli(tmp_path, reader, *fleet, "--worker-kubeconfig", f"{s.names['worker1']}={own}")
    assert (code, err) == (0, ""), err
    lines = out.splitlines()
    assert lines[0].startswith(f"worker {s.names['worker1']}: Active=Unknown: MultiKueueClusters cannot be listed "
                               f"{FORBIDDEN}"), lines  # fmt: skip
    assert "  kinds: PipelineRun.v1.tekton.dev" in lines, "the worker itself read with the user's own access"


async def test_a_kubeconfig_secret_that_is_not_yaml_is_one_line_everywhere(scenario: Scenario, tmp_path: Path) -> None:
    s = scenario
    _, workload = await s.submit("unparsed")
    await s.copied(workload["metadata"]["name"])
    w2, admin = s.names["worker2"], s.bed.cluster("manager").kubeconfig
    problem = "line 4, column 18: mapping values are not allowed here"

    # `status` first, while the run is nominated to both workers: worker2's Secret read from a namespace of its own
    # (the dispatcher's stays good), so its line is the Secret's, whatever the dispatcher does next.
    core = k8s_client.CoreV1Api(k8s(s.api["manager"]))
    elsewhere = f"{s.namespace}-s"
    await core.create_namespace(raw_body({"metadata": {"name": elsewhere}}))
    try:
        await kueue.put_kubeconfig_secret(s.api["manager"], elsewhere, "worker2-kubeconfig", NOT_YAML)
        code, out, _ = await _cli(tmp_path, admin, "status", KIND, f"{s.namespace}/unparsed", "--secrets-namespace",
                                  elsewhere)  # fmt: skip
    finally:
        await core.delete_namespace(elsewhere)
    assert code == 0
    [line] = [line for line in out.splitlines() if line.startswith(f"  worker {w2}:")]
    assert line == f"  worker {w2}: kubeconfig Secret {elsewhere}/{NOT_YAML_KEY}: {problem}"

    await kueue.put_kubeconfig_secret(s.api["manager"], s.namespace, "worker2-kubeconfig", NOT_YAML)

    def refused(cluster: Any) -> bool:
        conditions = (cluster or {}).get("status", {}).get("conditions") or []
        return any(c["type"] == "Active" and c.get("reason") == "BadKubeConfig" for c in conditions)

    cluster = await eventually(lambda: Objects(s.api["manager"], MULTIKUEUE_CLUSTERS).get(w2), until=refused,
                               timeout=60, what="worker2's kubeconfig refused")  # fmt: skip
    active = next(c for c in cluster["status"]["conditions"] if c["type"] == "Active")
    assert active["message"] == f"load client config failed: failed to parse kubeconfig(apiconfig): {problem}"

    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    code, out, err = await _cli(tmp_path, admin, "workers", "--secrets-namespace", s.namespace, "--config-file",
                                str(config))  # fmt: skip
    assert code == 0, err
    lines = out.splitlines()
    start = lines.index(f"worker {w2}: Active=False BadKubeConfig: {active['message']}")
    entry = lines[start:start + next((i for i, line in enumerate(lines[start + 1:], 1) if line.startswith("worker ")),
                                     len(lines) - start)]  # fmt: skip
    assert len(entry) == 3, entry
    assert entry[1].startswith("  credentials expire: "), entry  # as recorded while it was connected
    assert entry[2] == f"  worker: kubeconfig Secret {s.namespace}/{NOT_YAML_KEY}: {problem}"
