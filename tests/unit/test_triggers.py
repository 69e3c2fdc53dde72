"""docs/architecture.md's trigger table ("Reconcilers and their triggers") is what the generations install: one row
per ``Watch`` of every reconciler, word for word, with how its keys are queued. A trigger added, reworded or dropped
in a reconciler's ``watches()`` without the table (or the other way round) fails here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import yaml

from multikueue.config import parse_configuration
from multikueue.generation import ManagerGeneration, Triggers, WorkerGeneration
from multikueue.kube.client import ApiClient
from multikueue.kube.kubeconfig import ClusterAccess
from multikueue.metrics import Metrics
from multikueue.runtime.watches import Watch

ROOT = Path(__file__).parents[2]
SECTION = "## Reconcilers and their triggers"
Row = tuple[str, str, str]  # (controller, trigger, queued)


def table(markdown: str) -> list[Row]:
    """The rows of the first table in the trigger section (controller, trigger, queued), backticks off the name."""
    lines = markdown[markdown.index(SECTION) :].splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| controller |"))
    rows = []
    for line in lines[start + 2 :]:  # past the header and its separator
        if not line.startswith("|"):
            break
        controller, _key, trigger, queued = (cell.strip() for cell in line.strip().strip("|").split("|"))
        rows.append((controller.strip("`"), trigger, queued))
    return rows


def queued(watch: Watch[Any]) -> str:
    if watch.delay is not None:
        return "after `eventsBatchPeriod`"
    return "low priority" if watch.low else "at once"


def rows_of(triggers: Triggers) -> list[Row]:
    return [(name, watch.what, queued(watch)) for name, watches in triggers.items() for watch in watches]


def everything_configured() -> str:
    """A configuration under which every trigger is wired: a Kueue-mode kind with an integration, a Direct-mode kind,
    ClusterProfiles read through an access provider, and workers kept from the inventory."""
    document = yaml.safe_load((ROOT / "examples/tekton/integration-config.yaml").read_text())
    document["multiKueue"]["externalFrameworks"].append({"name": "JobSet.v1alpha2.jobset.x-k8s.io"})
    document["dispatcher"]["adapters"].append({"name": "JobSet.v1alpha2.jobset.x-k8s.io", "mode": "Direct"})
    plugin = {"apiVersion": "client.authentication.k8s.io/v1", "command": "/plugin", "interactiveMode": "Never"}
    document["multiKueue"]["clusterProfile"] = {"accessProviders": [{"name": "fleet", "execConfig": plugin}]}
    document["dispatcher"]["inventory"] = {
        "clusterProfiles": {"selector": {}},
        "multiKueueConfigs": [{"name": "fleet", "clusterSelector": {}}],
    }
    return yaml.safe_dump(document)


async def unwarned(reason: str, message: str) -> None:
    raise AssertionError(f"warned {reason}: {message}")


def test_the_table_reads_as_rows() -> None:
    """The parser itself: a row per line, the key column ignored, the table's end found."""
    markdown = f"{SECTION}\n\ntext\n\n| controller | key | trigger | queued |\n|---|---|---|---|\n"
    markdown += "| `a` | k | one (words) | at once |\n| `a` | | two | low priority |\n\nafter\n| `b` | | x | y |\n"
    assert table(markdown) == [("a", "one (words)", "at once"), ("a", "two", "low priority")]


async def test_the_trigger_table_is_what_the_generations_install() -> None:
    documented = table((ROOT / "docs/architecture.md").read_text())
    async with anyio.create_task_group() as tg:
        api = ApiClient(ClusterAccess(server="http://127.0.0.1:1"))  # nothing is started: nothing is asked
        config = parse_configuration(everything_configured())
        manager = ManagerGeneration(api, config, {}, tg, metrics=Metrics(), temp_dir=None, warn=unwarned)
        worker = WorkerGeneration(api, config, {}, metrics=Metrics())
        installed = rows_of(manager.triggers)
        assert set(manager.triggers) == {
            "multikueue_cluster", "multikueue_admissioncheck", "multikueue_direct", "multikueue_integration",
            "multikueue_inventory", "multikueue_workload",
        }, "every controller of the manager has its triggers recorded"  # fmt: skip
        assert set(rows_of(worker.triggers)) <= set(installed), "a worker's integration is wired as the manager's"
        tg.cancel_scope.cancel()

    assert len(documented) == len(set(documented)), "a row twice in the table"
    assert len(installed) == len(set(installed)), "two watches of one controller say the same: tell them apart"
    assert sorted(set(installed) - set(documented)) == [], "installed, missing from docs/architecture.md's table"
    assert sorted(set(documented) - set(installed)) == [], "in docs/architecture.md's table, installed by no one"
