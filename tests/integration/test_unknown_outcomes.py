"""A create whose answer never comes back is not a create that did not happen (#27).

worker1's API server is reached through a proxy (``testing/apiproxy.py``) that lets the run's create through, keeps
its answer back and pauses the server (SIGSTOP) as soon as the object is stored: the dispatcher's create times out
and worker1 stops answering, as a hung or partitioned worker does. worker2's Kueue is played so that it admits
whatever copy reaches it, as a real one would. The run must wait for worker1 (within ``workerLostTimeout``) and
never be created on worker2: with the leader alive, and with the leader SIGKILLed in that very window and a new
process taking over.
"""

from __future__ import annotations

import logging
import subprocess
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any

import anyio
import anyio.abc
import pytest

from multikueue.kube.addresses import WORKLOADS, Resource
from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from multikueue_testbed import TestBed, kueue
from multikueue_testbed.apiproxy import ApiProxy
from multikueue_testbed.objects import running_status
from multikueue_testbed.waiting import eventually
from tests.integration.controller import run_argv

CONTROLLER = "multikueue.x-k8s.io/external-dispatcher"
PIPELINERUNS = Resource("tekton.dev", "v1", "pipelineruns", "PipelineRun")
RUN = "answer-lost"
log = logging.getLogger(__name__)


class Worker2Kueue:
    """worker2's Kueue, played: every copy that reaches worker2 is admitted; every run seen there is remembered."""

    def __init__(self, api: ApiClient, namespace: str) -> None:
        self.api, self.namespace = api, namespace
        self.copies: set[str] = set()
        self.runs: set[str] = set()

    async def play(self) -> None:
        for _ in range(6000):  # bounded: 0.1 s apart, cancelled when the test is done
            for copy in await Objects(self.api, WORKLOADS).items(self.namespace):
                name = copy["metadata"]["name"]
                self.copies.add(name)
                conditions = (copy.get("status") or {}).get("conditions") or []
                if not any(c["type"] == "Admitted" and c["status"] == "True" for c in conditions):
                    await kueue.admit(self.api, name, self.namespace)
            self.runs.update(r["metadata"]["name"] for r in await Objects(self.api, PIPELINERUNS).items(self.namespace))
            await anyio.sleep(0.1)


class Dispatcher:
    """``multikueue run`` as its own process (so that it can be SIGKILLed), its log kept for a failing test."""

    def __init__(self, argv: list[str], log: IO[str]) -> None:
        self.argv, self.log = argv, log
        self.process: anyio.abc.Process | None = None

    async def start(self) -> None:
        self.process = await anyio.open_process(self.argv, stdout=self.log, stderr=subprocess.STDOUT)

    async def kill(self) -> None:
        assert self.process is not None
        self.process.kill()
        with anyio.fail_after(30):
            await self.process.wait()

    async def stop(self) -> None:
        if self.process is not None and self.process.returncode is None:
            self.process.terminate()
            with anyio.fail_after(30):
                await self.process.wait()


def _check(workload: Any, check: str) -> dict[str, Any]:
    states = ((workload or {}).get("status") or {}).get("admissionChecks") or []
    return next((s for s in states if s["name"] == check), {})


@asynccontextmanager
async def _bed_with_a_proxied_worker1(
    testbed: TestBed, namespace: str, manager_api: ApiClient, tmp_path: Path, on_withheld: Callable[[], Any]
) -> AsyncIterator[tuple[ApiProxy, dict[str, str], Dispatcher]]:
    """worker1 behind the proxy, worker2 direct; the dispatcher's process (not started); worker1 resumed at the end
    whatever happens."""
    async with ApiProxy(testbed.cluster("worker1"), on_withheld=on_withheld) as proxy:
        names = await kueue.multikueue_setup(
            manager_api,
            namespace=namespace,
            prefix=namespace,
            controller_name=CONTROLLER,
            workers={"worker1": proxy.kubeconfig, "worker2": testbed.cluster("worker2").kubeconfig},
        )
        config = (
            "multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}], workerLostTimeout: 10m}\n"
            f"dispatcher: {{namespace: {namespace}, eventsBatchPeriod: 100ms,"
            " workerClient: {timeout: 3s, probeInterval: 1s}}\n"
        )
        log = (tmp_path / "dispatcher.log").open("w")
        dispatcher = Dispatcher(run_argv(testbed, tmp_path, config, "--log-level", "debug"), log)
        try:
            yield proxy, names, dispatcher
        finally:
            await dispatcher.stop()
            log.close()
            proxy.release()
            await anyio.to_thread.run_sync(lambda: testbed.resume_apiserver("worker1", wait=True))
            await kueue.multikueue_teardown(manager_api, names)


@pytest.mark.parametrize("leader", ["kept", "killed in the window"])
async def test_a_create_whose_answer_is_lost_keeps_the_run_on_its_worker(
    leader: str,
    testbed: TestBed,
    namespace: str,
    manager_api: ApiClient,
    worker1_api: ApiClient,
    worker2_api: ApiClient,
    tmp_path: Path,
) -> None:
    events: list[str] = []

    async def pause() -> None:
        await anyio.to_thread.run_sync(testbed.pause_apiserver, "worker1")
        events.append("worker1 paused (SIGSTOP) right after storing the run's create, whose answer is withheld")

    bed = _bed_with_a_proxied_worker1(testbed, namespace, manager_api, tmp_path, pause)
    async with bed as (proxy, names, dispatcher):
        w1, w2, check = names["worker1"], names["worker2"], names["check"]
        proxy.withhold("POST", "/pipelineruns")
        await dispatcher.start()
        wl_name = await kueue.submit_pipelinerun(manager_api, namespace, RUN, check=check, queued=True)
        for api in (worker1_api, worker2_api):
            await eventually(lambda a=api: Objects(a, WORKLOADS).get(wl_name, namespace), what="copied")  # type: ignore[misc]
        events.append("the Workload copied to worker1 and worker2; worker1's Kueue admits it")
        await kueue.admit(worker1_api, wl_name, namespace)
        with anyio.fail_after(60):
            await proxy.answered.wait()
        assert proxy.withheld[0].status == 201, proxy.withheld  # worker1 stored the run
        events.append(f"(that create: {proxy.withheld[0].method} {proxy.withheld[0].path}: HTTP 201 on worker1)")
        played = Worker2Kueue(worker2_api, namespace)
        async with anyio.create_task_group() as tg:
            tg.start_soon(played.play)
            if leader != "kept":
                await dispatcher.kill()
                events.append("the leader SIGKILLed, a new process started")
                await dispatcher.start()
            waiting = f'The workload was admitted on "{w1}", which is unreachable'

            async def now() -> tuple[Any, bool]:
                return await Objects(manager_api, WORKLOADS).get(wl_name, namespace), RUN in played.runs

            workload, elsewhere = await eventually(
                now,
                until=lambda n: n[1] or str(_check(n[0], check).get("message", "")).startswith(waiting),
                timeout=90,
                what="the check waiting for worker1",
            )
            assert not elsewhere, f"the run was created on {w2} too"
            assert _check(workload, check)["state"] == "Ready"
            assert workload["status"]["clusterName"] == w1
            events.append(f"the check: Ready, clusterName {w1}: {_check(workload, check)['message']}")
            assert RUN not in played.runs, f"the run was created on {w2} too"

            proxy.release()
            await anyio.to_thread.run_sync(lambda: testbed.resume_apiserver("worker1", wait=True))
            events.append("worker1 resumed")
            admitted = f'The workload was admitted on "{w1}"'
            await eventually(
                lambda: Objects(manager_api, WORKLOADS).get(wl_name, namespace),
                until=lambda w: _check(w, check).get("message") == admitted,
                timeout=90,
                what="the check back to admitted on worker1",
            )
            events.append(f"the check: {admitted}")
            await Objects(worker1_api, PIPELINERUNS).patch_status(RUN, {"status": running_status(RUN)}, namespace)
            await eventually(
                lambda: Objects(manager_api, PIPELINERUNS).get(RUN, namespace),
                until=lambda r: "status" in (r or {}),
                what="worker1's status mirrored",
            )
            await kueue.finish(worker1_api, wl_name, namespace)
            await eventually(
                lambda: Objects(manager_api, WORKLOADS).get(wl_name, namespace),
                until=lambda w: any(
                    c["type"] == "Finished" for c in ((w or {}).get("status") or {}).get("conditions") or []
                ),
                what="the Workload finished",
            )
            events.append("worker1's status mirrored, the Workload finished from worker1's copy")
            tg.cancel_scope.cancel()
        assert RUN not in played.runs, f"the run was created on {w2} too"
        assert await Objects(worker2_api, PIPELINERUNS).get(RUN, namespace) is None
        events.append(f"{w2} never held the run (its played Kueue saw copies {sorted(played.copies)} and no run)")
        log.info("the sequence:\n%s", "\n".join(events))
