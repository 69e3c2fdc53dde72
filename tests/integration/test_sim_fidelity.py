"""The simulation's API server (tests/sim/apiserver.py) answers as a real kube-apiserver does: the same scripts, run
against worker1's real server and against a simulated one, give the same transcripts. Two scripts: the one the
in-memory worker is held to (through ``kube.resources.Objects``), and the raw one of tests/sim/fidelity.py
(preconditions, PUT, namespaces, discovery, watches)."""

from __future__ import annotations

import random
import time
from typing import cast

from multikueue.kube.client import ApiClient
from multikueue.kube.resources import Objects
from tests.component.memory_worker import resource_of
from tests.integration.test_memory_fidelity import PIPELINERUN
from tests.integration.test_memory_fidelity import script as objects_script
from tests.sim import fidelity
from tests.sim.apiserver import Kind, SimApiServer
from tests.sim.client import SimApiClient

SIM_PIPELINERUNS = Kind("tekton.dev", "v1", "pipelineruns", "PipelineRun")


def simulated(namespace: str) -> SimApiClient:
    """A simulated cluster as the bed's are when a test starts: the namespace made, the kind served since."""
    server = SimApiServer("worker1", random.Random(7), time.time)
    server.handle("POST", "/api/v1/namespaces", {}, {"metadata": {"name": namespace}}, "application/json")
    server.serve(SIM_PIPELINERUNS)
    return SimApiClient(server)


async def test_the_simulated_server_answers_the_objects_script_as_a_real_one(
    worker1_api: ApiClient, namespace: str
) -> None:
    real = await objects_script(Objects(worker1_api, resource_of(PIPELINERUN)), namespace)
    sim = await objects_script(Objects(cast(ApiClient, simulated(namespace)), resource_of(PIPELINERUN)), namespace)
    assert sim == real
    assert ("create again: the name is taken", "Conflict") in real, "the script ran its course"


async def test_the_simulated_server_answers_the_raw_script_as_a_real_one(
    worker1_api: ApiClient, namespace: str
) -> None:
    real = await fidelity.script(worker1_api, namespace)
    sim = await fidelity.script(simulated(namespace), namespace)
    for (what, real_answer), (_, sim_answer) in zip(real, sim, strict=True):
        assert sim_answer == real_answer, what
    assert real[-1] == ("watch from before the kind's history", [("ERROR", "410", "Expired")]), real[-1]
