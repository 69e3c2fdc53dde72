"""Two dispatcher deployments splitting one manager's work (docs/scaling.md), on the real API servers: in Direct
mode by complementary object selectors, in Kueue mode by each serving its own AdmissionCheck. Both shards share
the workers and the origin; nothing may be dispatched twice or dropped, and nothing at a shard's edge lost."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest

from multikueue.config import Configuration, Shard
from multikueue.kube.addresses import ADMISSION_CHECKS
from multikueue.kube.resources import Objects
from multikueue.process import Process
from multikueue_testbed import kueue
from multikueue_testbed.objects import pipelinerun
from multikueue_testbed.waiting import eventually, wait_until
from tests.integration.scenario import LOOPBACK, Scenario
from tests.integration.test_direct import PHASE, WORKER, direct, names_on, notes, placed, succeed, worker_key

SHARD_A = "team=a"
SHARD_B = "team!=a"  # the complement: an object without the label is B's
DIRECT_SHARD_A = direct().replace("dispatcher:\n", f"dispatcher:\n  shard: {{objectSelector: '{SHARD_A}'}}\n")


def with_shard(config: Configuration, *, selector: str = "", controller_name: str | None = None) -> Configuration:
    dispatcher = config.dispatcher.model_copy(
        update={"shard": Shard(object_selector=selector),
                "controller_name": controller_name or config.dispatcher.controller_name}
    )  # fmt: skip
    return config.model_copy(update={"dispatcher": dispatcher})


@asynccontextmanager
async def another_shard(s: Scenario, config: Configuration, tmp_path: Path) -> AsyncIterator[Process]:
    """A second dispatcher on the same manager (as a second Deployment would be), connected to both workers."""
    shard = Process(s.api["manager"], config, temp_dir=tmp_path / "shard-b", serving=LOOPBACK)
    async with anyio.create_task_group() as tg:
        tg.start_soon(shard.run)
        with anyio.fail_after(30):
            await shard.started.wait()
        connections = shard.generation.cluster_reconciler.connections
        for worker in ("worker1", "worker2"):
            name = s.names[worker]
            await wait_until(lambda n=name: bool(connections.get(n) and connections[n].connected),  # type: ignore[misc]
                             what=f"shard B connected to {worker}")  # fmt: skip
        yield shard
        tg.cancel_scope.cancel()


def mine(s: Scenario, obj: Any) -> bool:
    """In this test's namespace (a shard selects in every namespace; other tests leave objects in theirs)."""
    return bool(obj["metadata"]["namespace"] == s.namespace)


async def submit(s: Scenario, name: str, team: str | None) -> None:
    body = pipelinerun(name, labels={"team": team} if team else None)
    body["spec"]["managedBy"] = kueue.MANAGED_BY
    await s.runs("manager").create(body, s.namespace)


async def copy_uids(s: Scenario, names: list[str]) -> dict[str, str]:
    """Each run's copy on the worker it was placed on, by uid (a copy deleted and made again has a new one)."""
    uids = {}
    for name in names:
        worker = worker_key(s, await placed(s, name))
        copy = await s.wait(s.runs(worker), name, lambda r: r is not None, f"{name}'s copy on {worker}")
        uids[name] = copy["metadata"]["uid"]
    return uids


async def collect_garbage(*shards: Process | None) -> None:
    """A garbage collection pass of each shard, now (instead of waiting for gcInterval)."""
    for shard in shards:
        assert shard is not None
        await shard.generation.collector.collect_garbage()


@pytest.mark.parametrize("multikueue_config", [DIRECT_SHARD_A])
async def test_two_direct_mode_shards_split_one_load_and_each_run_is_placed_once(
    scenario: Scenario, tmp_path: Path
) -> None:
    s = scenario
    assert s.manager is not None
    async with another_shard(s, with_shard(s.manager.config, selector=SHARD_B), tmp_path) as shard_b:
        teams = {f"split-{i:02d}": ("a", "b", None)[i % 3] for i in range(12)}
        for name, team in teams.items():
            await submit(s, name, team)
        uids = await copy_uids(s, sorted(teams))

        async def everywhere() -> list[str]:
            return await names_on(s, "worker1") + await names_on(s, "worker2")

        assert sorted(await everywhere()) == sorted(teams), "each run once, on one worker"
        # Each shard holds (and placed) only its own objects.
        gvk = next(iter(s.manager.generation.direct_kinds))
        held_a = {o["metadata"]["name"] for o in s.manager.generation.direct_kinds[gvk][0].items() if mine(s, o)}
        held_b = {o["metadata"]["name"] for o in shard_b.generation.direct_kinds[gvk][0].items() if mine(s, o)}
        assert held_a == {n for n, t in teams.items() if t == "a"}
        assert held_b == {n for n, t in teams.items() if t != "a"}
        # Neither shard's garbage collector takes the other's copies for orphans.
        await collect_garbage(s.manager, shard_b)
        assert await copy_uids(s, sorted(teams)) == uids
        for name in teams:
            await succeed(s, worker_key(s, notes(await s.get(s.runs("manager"), name))[WORKER]), name)
        for name in teams:
            await s.wait(s.runs("manager"), name, lambda r: notes(r).get(PHASE) == "Finished", f"{name} Finished")
        await eventually(everywhere, until=lambda left: not left, what="every copy deleted once finished")


@pytest.mark.parametrize("multikueue_config", [DIRECT_SHARD_A])
async def test_a_run_relabelled_into_the_other_shard_keeps_its_copy_and_is_finished_there(
    scenario: Scenario, tmp_path: Path
) -> None:
    s = scenario
    assert s.manager is not None
    async with another_shard(s, with_shard(s.manager.config, selector=SHARD_B), tmp_path) as shard_b:
        await submit(s, "moving", "a")
        before = await copy_uids(s, ["moving"])
        await s.runs("manager").patch("moving", {"metadata": {"labels": {"team": "b"}}}, s.namespace)
        gvk = next(iter(shard_b.generation.direct_kinds))
        held_b = shard_b.generation.direct_kinds[gvk][0]
        await wait_until(lambda: any(o["metadata"]["name"] == "moving" for o in held_b.items()),
                         what="shard B holds the relabelled run")  # fmt: skip
        events = await eventually(lambda: s.events("moving"), until=lambda e: any(x.reason == "LeftShard" for x in e),
                                  what="shard A says the run left it")  # fmt: skip
        message = next(x for x in events if x.reason == "LeftShard").message
        assert f"no longer match '{SHARD_A}'" in message
        assert "is left to the shard that selects it" in message
        await collect_garbage(s.manager, shard_b)
        assert await copy_uids(s, ["moving"]) == before, "the copy was neither deleted nor made again"
        worker = worker_key(s, notes(await s.get(s.runs("manager"), "moving"))[WORKER])
        await succeed(s, worker, "moving")
        await s.wait(s.runs("manager"), "moving", lambda r: notes(r).get(PHASE) == "Finished", "Finished by B")
        await s.wait(s.runs(worker), "moving", lambda r: r is None, "the copy deleted once finished")


async def second_check(s: Scenario, controller_name: str) -> str:
    """An AdmissionCheck for shard B's controller, on the same MultiKueueConfig (the same workers)."""
    name = f"{s.names['check']}-b"
    params = {"apiGroup": "kueue.x-k8s.io", "kind": "MultiKueueConfig", "name": s.names["config"]}
    body = {"apiVersion": kueue.API_VERSION, "kind": "AdmissionCheck", "metadata": {"name": name},
            "spec": {"controllerName": controller_name, "parameters": params}}  # fmt: skip
    await Objects(s.api["manager"], ADMISSION_CHECKS).create(body)
    return name


async def test_two_kueue_mode_shards_each_serve_their_own_admission_check(scenario: Scenario, tmp_path: Path) -> None:
    s = scenario
    assert s.manager is not None
    controller_b = "multikueue.x-k8s.io/shard-b"
    check_b = await second_check(s, controller_b)
    try:
        config_b = with_shard(s.manager.config, controller_name=controller_b)
        async with another_shard(s, config_b, tmp_path):
            checks = {f"kq-{i}": (s.names["check"], check_b)[i % 2] for i in range(6)}
            workloads = {}
            for name, check in checks.items():
                body = pipelinerun(name, labels={"kueue.x-k8s.io/queue-name": "user-queue"})
                body["spec"]["managedBy"] = kueue.MANAGED_BY
                obj = await s.runs("manager").create(body, s.namespace)
                workload = await s.workloads("manager").create(kueue.workload_for(obj), s.namespace)
                workloads[name] = workload["metadata"]["name"]
                await kueue.reserve_quota(s.api["manager"], workloads[name], s.namespace, checks=[check])
            for name, wl_name in workloads.items():  # each shard copies its own Workloads
                await s.copied(wl_name)
                worker = ("worker1", "worker2")[int(name[-1]) // 2 % 2]
                await kueue.admit(s.api[worker], wl_name, s.namespace)
            for name, wl_name in workloads.items():
                await check_ready(s, wl_name, checks[name])
            for name, wl_name in workloads.items():
                winner = ("worker1", "worker2")[int(name[-1]) // 2 % 2]
                loser = "worker2" if winner == "worker1" else "worker1"
                await s.wait(s.runs(winner), name, lambda r: r is not None, f"{name} on {winner}")
                await s.wait(s.workloads(loser), wl_name, lambda w: w is None, f"{name}'s copy gone from {loser}")
            await collect_kueue_garbage(s.manager)  # shard B's runs are not orphans to shard A
            for name, wl_name in workloads.items():
                winner = ("worker1", "worker2")[int(name[-1]) // 2 % 2]
                loser = "worker2" if winner == "worker1" else "worker1"
                assert await s.workloads(winner).get(wl_name, s.namespace) is not None, f"{name}'s copy kept"
                assert await s.runs(winner).get(name, s.namespace) is not None, f"{name} kept on {winner}"
                assert await s.runs(loser).get(name, s.namespace) is None, "never run twice"
    finally:
        await Objects(s.api["manager"], ADMISSION_CHECKS).delete(check_b)


async def check_ready(s: Scenario, wl_name: str, check: str) -> None:
    def ready(wl: Any) -> bool:
        states = ((wl or {}).get("status") or {}).get("admissionChecks") or []
        return any(x["name"] == check and x.get("state") == "Ready" for x in states)

    await s.wait(s.workloads("manager"), wl_name, ready, f"{wl_name}'s check {check} Ready")


async def collect_kueue_garbage(shard: Process) -> None:
    """Shard A's garbage collection, now: Workloads of shard B's check must not look like orphans to it."""
    await shard.generation.collector.collect_garbage()
