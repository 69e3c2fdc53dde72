"""What the simulated API server does that the real one does only at its own time (compaction, a CRD removed), and
the client's faults; the rest is held to a real kube-apiserver by tests/integration/test_sim_fidelity.py."""

from __future__ import annotations

import json
import random

import anyio
import pytest

from multikueue.kube.errors import Gone, NotFound, Unreachable
from tests.sim.apiserver import Kind, SimApiServer
from tests.sim.client import SimApiClient

RUNS = Kind("tekton.dev", "v1", "pipelineruns", "PipelineRun")
PATH = "/apis/tekton.dev/v1/namespaces/default/pipelineruns"


def server() -> SimApiServer:
    s = SimApiServer("w", random.Random(1), lambda: 1_800_000_000.0)
    s.serve(RUNS)
    return s


async def events(client: SimApiClient, since: str) -> list[tuple[str, object]]:
    seen: list[tuple[str, object]] = []
    with anyio.move_on_after(0.5):
        async with client.stream(PATH, query={"watch": True, "resourceVersion": since}) as lines:
            async for line in lines:
                event = json.loads(line)
                seen.append((event["type"], event["object"]["metadata"].get("name", event["object"].get("code"))))
    return seen


async def test_a_watch_from_before_a_compaction_is_gone_and_one_after_it_replays() -> None:
    client = SimApiClient(server())
    listed = await client.request("GET", PATH)
    await client.request("POST", PATH, body={"metadata": {"name": "a"}, "spec": {}})
    client.server.compact()
    await client.request("POST", PATH, body={"metadata": {"name": "b"}, "spec": {}})
    assert await events(client, listed["metadata"]["resourceVersion"]) == [("ERROR", 410)]
    assert await events(client, str(client.server.compacted)) == [("ADDED", "b")]


async def test_the_same_seed_makes_the_same_uids() -> None:
    answers = []
    for _ in range(2):
        client = SimApiClient(server())
        answers.append((await client.request("POST", PATH, body={"metadata": {"name": "a"}}))["metadata"]["uid"])
    assert answers[0] == answers[1]


async def test_a_kind_removed_ends_its_watches_and_is_not_found() -> None:
    client = SimApiClient(server())
    await client.request("POST", PATH, body={"metadata": {"name": "a"}})
    client.server.unserve(RUNS)
    with pytest.raises(NotFound):
        await client.request("GET", PATH)


async def test_a_lost_answer_is_unreachable_and_the_write_is_done() -> None:
    client = SimApiClient(server())
    client.link.lose_next("POST", "/pipelineruns")
    with pytest.raises(Unreachable):
        await client.request("POST", PATH, body={"metadata": {"name": "a"}})
    assert (await client.request("GET", f"{PATH}/a"))["metadata"]["name"] == "a"
    client.link.cut = True
    with pytest.raises(Unreachable):
        await client.request("GET", f"{PATH}/a")


async def test_a_410_event_is_raised_as_gone_by_the_dispatchers_list_source() -> None:
    from multikueue.kube.listwatch import ApiListSource

    client = SimApiClient(server())
    await client.request("POST", PATH, body={"metadata": {"name": "a"}})
    client.server.compact()
    source = ApiListSource(client, PATH, description="runs")
    with pytest.raises(Gone):
        async for _ in source.watch(resource_version="1", timeout_seconds=1):
            pass
