"""``multikueue status``: one run across clusters on the real bed, as a user runs it (the CLI, a kubeconfig), for
the waiting cases; a run whose pod really runs is shown on kind (e2e/kind)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import anyio
import yaml
from kubernetes_asyncio import client as k8s_client

from multikueue_testbed import kueue
from multikueue_testbed.accounts import mint_service_account_kubeconfig
from multikueue_testbed.client import k8s, raw_body
from tests.integration.scenario import Scenario

KIND = "PipelineRun.v1.tekton.dev"


async def _status(s: Scenario, kubeconfig: Any, name: str, tmp_path: Path, command: str = "status",
                  *extra: str) -> tuple[int, str, str]:  # fmt: skip
    """The command as a user runs it: a process, a kubeconfig file."""
    path = tmp_path / "kubeconfig.yaml"
    path.write_text(yaml.safe_dump(kubeconfig))
    argv = [sys.executable, "-m", "multikueue", command, KIND, f"{s.namespace}/{name}", "--kubeconfig", str(path),
            "--secrets-namespace", s.namespace, *extra]  # fmt: skip
    with anyio.fail_after(60):
        done = await anyio.run_process(argv, check=False)
    return done.returncode, done.stdout.decode(), done.stderr.decode()


async def test_status_says_why_a_run_waits_and_where_it_runs(scenario: Scenario, tmp_path: Path) -> None:
    s = scenario
    admin = s.bed.cluster("manager").kubeconfig
    _, workload = await s.submit("asked")
    wl_name = workload["metadata"]["name"]
    await s.copied(wl_name)
    w1, w2 = s.names["worker1"], s.names["worker2"]
    full = "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 1 more needed"
    await kueue.pending(s.api["worker1"], wl_name, s.namespace, full)

    code, out, _ = await _status(s, admin, "asked", tmp_path)
    assert code == 0
    assert f"  why: waiting for a worker's Kueue to admit it: {w1}: {full}; {w2}: not looked at by its Kueue yet" in out
    assert f"    nominated: {w1}, {w2}" in out or f"    nominated: {w2}, {w1}" in out
    assert (
        f"  worker {w1}:\n    Workload copy: not admitted; quota: False Pending: {full}\n    object: not created" in out
    )

    await kueue.admit(s.api["worker2"], wl_name, s.namespace)
    await s.check_state(wl_name, state="Ready")
    code, out, _ = await _status(s, admin, "asked", tmp_path)
    assert f"  why: admitted on {w2}, running there: no conditions yet" in out
    assert f"    admitted on: {w2}" in out
    assert f"manager Workload/{wl_name} Normal" in out, "the manager's Events, merged in"
    assert f'The workload was admitted on "{w2}"' in out

    code, out, err = await _status(s, admin, "nothing-here", tmp_path)
    assert (code, err) == (1, "")
    assert f"why: PipelineRun {s.namespace}/nothing-here does not exist on the manager" in out


async def test_status_reads_a_worker_only_when_the_users_own_rbac_allows_its_secret(
    scenario: Scenario, tmp_path: Path
) -> None:
    """A user who may read runs, Workloads, Events and MultiKueueClusters but not the kubeconfig Secrets gets the
    manager's view, and each worker line says why it is not read."""
    s = scenario
    _, workload = await s.submit("mine")
    await s.copied(workload["metadata"]["name"])
    rbac: Any = k8s_client.RbacAuthorizationV1Api(k8s(s.api["manager"]))
    role = f"status-reader-{s.namespace}"
    rules = [
        {"apiGroups": ["tekton.dev"], "resources": ["pipelineruns"], "verbs": ["get"]},
        {"apiGroups": ["kueue.x-k8s.io"], "resources": ["workloads", "multikueueclusters"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["events"], "verbs": ["list"]},
    ]
    await rbac.create_cluster_role(raw_body({"metadata": {"name": role}, "rules": rules}))
    subject = {"kind": "ServiceAccount", "name": "reader", "namespace": s.namespace}
    await rbac.create_cluster_role_binding(raw_body({"metadata": {"name": role}, "subjects": [subject],
                                                     "roleRef": {"apiGroup": "rbac.authorization.k8s.io",
                                                                 "kind": "ClusterRole", "name": role}}))  # fmt: skip
    try:
        reader = await mint_service_account_kubeconfig(s.api["manager"], s.bed.cluster("manager"),
                                                       namespace=s.namespace, name="reader")  # fmt: skip
        code, out, _ = await _status(s, reader, "mine", tmp_path)
        assert code == 0
        secret = s.names.get("secret1") or ""
        for worker in ("worker1", "worker2"):
            line = next(line for line in out.splitlines() if line.startswith(f"  worker {s.names[worker]}:"))
            assert f"cannot read its Secret {s.namespace}/" in line, out
            assert "Forbidden" in line, line
        assert secret == "" or secret in out
    finally:
        await rbac.delete_cluster_role_binding(role)
        await rbac.delete_cluster_role(role)


async def test_logs_says_why_there_are_none_yet(scenario: Scenario, tmp_path: Path) -> None:
    """The waiting cases (the bed runs no pods; a real pod's log is read on kind): not on a worker yet, no pod
    selector for the kind, no pods there yet, and pods gone with a finished run. Each one line, exit 1."""
    s = scenario
    config = tmp_path / "config.yaml"
    adapter = {"name": KIND, "podSelector": "tekton.dev/pipelineRun={name}"}
    config.write_text(yaml.safe_dump({"multiKueue": {"externalFrameworks": [{"name": KIND}]},
                                      "dispatcher": {"adapters": [adapter]}}))  # fmt: skip
    admin = s.bed.cluster("manager").kubeconfig
    _, workload = await s.submit("logged")
    wl_name = workload["metadata"]["name"]
    await s.copied(wl_name)

    code, out, err = await _status(s, admin, "logged", tmp_path, "logs", "--config-file", str(config))
    assert (code, out) == (1, "")
    assert err.startswith("multikueue logs: not running on a worker yet: waiting for a worker's Kueue to admit it"), err

    await kueue.admit(s.api["worker1"], wl_name, s.namespace)
    await s.check_state(wl_name, state="Ready")
    # A ConfigMap that is not there (the bed's own multikueue-config may be, from the manifests' tests).
    code, out, err = await _status(s, admin, "logged", tmp_path, "logs", "--config-name", "no-such-config")
    assert code == 1
    assert err.startswith("multikueue logs: no pod selector: cannot read the configuration (ConfigMap "
                          "multikueue-system/no-such-config): "), err  # fmt: skip
    assert err.endswith("; give --selector\n"), err
    code, out, err = await _status(s, admin, "logged", tmp_path, "logs", "--config-file", str(config))
    assert code == 1
    assert err == (f"multikueue logs: no pods of PipelineRun {s.namespace}/logged on worker {s.names['worker1']} "
                   f"(selector tekton.dev/pipelineRun=logged): admitted on {s.names['worker1']}, running there: no "
                   "conditions yet\n"), err  # fmt: skip
    await _shaped_logs_say_what_they_cannot_narrow_to(s, admin, config, tmp_path)

    # Finished: its pods are gone with its copy (unless the kind's retention keeps them), and it says so.
    await kueue.finish(s.api["worker1"], wl_name, s.namespace, reason="Succeeded", message="Job finished successfully")
    await s.wait(s.workloads("manager"), wl_name, lambda w: _finished(w), "the run finished")
    code, out, err = await _status(s, admin, "logged", tmp_path, "logs", "--config-file", str(config))
    assert code == 1
    assert err == (f"multikueue logs: finished (Succeeded): Job finished successfully; its pods on worker "
                   f"{s.names['worker1']} are gone (the kind's retention keeps a finished run's object, and its pods, "
                   "for a while)\n"), err  # fmt: skip


async def _shaped_logs_say_what_they_cannot_narrow_to(s: Scenario, admin: Any, config: Path, tmp_path: Path) -> None:
    """``--task`` needs the kind's logs shape; with it, a task none of the run's pods belongs to is named. A pod that
    has not started (the bed runs none) has nothing to read yet: no line, exit 0."""
    code, out, err = await _status(s, admin, "logged", tmp_path, "logs", "--config-file", str(config), "--task", "b")
    assert (code, out) == (1, "")
    assert err == (f"multikueue logs: --task b: {KIND} has no logs shape (logs.groupLabel) in the configuration "
                   f"({config})\n"), err  # fmt: skip
    shaped = tmp_path / "shaped.yaml"
    adapter = {"name": KIND, "podSelector": "tekton.dev/pipelineRun={name}",
               "logs": {"groupLabel": "tekton.dev/pipelineTask", "containerPrefix": "step-"}}  # fmt: skip
    shaped.write_text(yaml.safe_dump({"multiKueue": {"externalFrameworks": [{"name": KIND}]},
                                      "dispatcher": {"adapters": [adapter]}}))  # fmt: skip
    pod = {"metadata": {"name": "logged-make-pod", "labels": {"tekton.dev/pipelineRun": "logged",
                                                              "tekton.dev/pipelineTask": "make"}},
           "spec": {"containers": [{"name": "step-choose", "image": "never-pulled"}]}}  # fmt: skip
    pods = k8s_client.CoreV1Api(k8s(s.api["worker1"]))
    await pods.create_namespaced_pod(s.namespace, pod)
    try:
        code, out, err = await _status(s, admin, "logged", tmp_path, "logs", "--config-file", str(shaped), "--task",
                                       "build")  # fmt: skip
        assert (code, out) == (1, "")
        assert err == (f"multikueue logs: no part build in pods of PipelineRun {s.namespace}/logged on worker "
                       f"{s.names['worker1']} (selector tekton.dev/pipelineRun=logged): admitted on "
                       f"{s.names['worker1']}, running there: no conditions yet\n"), err  # fmt: skip
        code, out, err = await _status(s, admin, "logged", tmp_path, "logs", "--config-file", str(shaped))
        assert (code, out, err) == (0, "", "")
    finally:
        await pods.delete_namespaced_pod("logged-make-pod", s.namespace, grace_period_seconds=0)


def _finished(workload: Any) -> bool:
    return any(c["type"] == "Finished" and c["status"] == "True"
               for c in (workload or {}).get("status", {}).get("conditions") or [])  # fmt: skip


async def test_a_worker_status_cannot_reach_is_one_plain_line_suggesting_the_users_own_access(
    scenario: Scenario, tmp_path: Path
) -> None:
    """A worker Secret's server that only the manager's pods reach (here: nothing listens there): the line says
    where and why, with no Python object in it, and how to give the command access of its own."""
    s = scenario
    _, workload = await s.submit("far")
    wl_name = workload["metadata"]["name"]
    await s.copied(wl_name)
    await kueue.admit(s.api["worker2"], wl_name, s.namespace)
    await s.check_state(wl_name, state="Ready")  # recorded on worker2: status looks there whatever follows
    unreachable = s.bed.cluster("worker2").kubeconfig
    unreachable["clusters"][0]["cluster"]["server"] = "https://127.0.0.1:1"
    await kueue.put_kubeconfig_secret(s.api["manager"], s.namespace, "worker2-kubeconfig", unreachable)
    code, out, _ = await _status(s, s.bed.cluster("manager").kubeconfig, "far", tmp_path)
    assert code == 0
    line = next((line for line in out.splitlines() if line.startswith(f"  worker {s.names['worker2']}:")), out)
    assert line == (
        f"  worker {s.names['worker2']}: cannot be reached at https://127.0.0.1:1: cannot connect to 127.0.0.1:1: "
        f"Connection refused; if only the manager's pods reach that address, give your own access: "
        f"--worker-kubeconfig {s.names['worker2']}=PATH"
    ), line
