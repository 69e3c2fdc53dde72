"""ConfigReloads: a ConfigMap change is judged whole before anything restarts, once per text, by its last state."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from multikueue.config import Configuration, parse_configuration
from multikueue.kube.client import ApiClient
from multikueue.kube.errors import Unreachable
from multikueue.kube.kubeconfig import ClusterAccess
from multikueue.metrics import Metrics
from multikueue.reload import ConfigReloads, ConfigSource, StartupError

SOURCE = ConfigSource("ns", "mk", "config.yaml")


def text(lost_timeout: str = "15m", kind: str = "PipelineRun.v1.tekton.dev") -> str:
    return f"multiKueue: {{workerLostTimeout: {lost_timeout}, externalFrameworks: [{{name: {kind}}}]}}"


def config_map(body: str) -> dict[str, Any]:
    return {"metadata": {"name": "mk", "namespace": "ns"}, "data": {"config.yaml": body}}


class Reloads(ConfigReloads):
    """The one I/O a refusal does (the Event on the ConfigMap) recorded instead of sent."""

    def __init__(self, checked: list[Configuration], failures: list[Exception]) -> None:
        async def check(config: Configuration) -> None:
            checked.append(config)
            if failures:
                raise failures.pop(0)

        api = ApiClient(ClusterAccess(server="http://127.0.0.1:1"))
        super().__init__(api, SOURCE, parse_configuration(text()), metrics=Metrics(), check=check)
        self.warnings: list[tuple[str, str]] = []

    async def warn(self, reason: str, message: str) -> None:
        self.warnings.append((reason, message))


def metric(reloads: ConfigReloads, result: str) -> float:
    return float(reloads.metrics.config_reloads.labels(result)._value.get())


async def test_a_burst_of_edits_is_judged_once_by_its_last_state() -> None:
    checked: list[Configuration] = []
    reloads = Reloads(checked, [])
    for timeout in ("1m", "soon", "2m"):  # the invalid one in the middle is never judged
        reloads.on_event("MODIFIED", config_map(text(timeout)))
    with anyio.fail_after(5):
        config = await reloads.next_valid()
    assert config.multi_kueue.worker_lost_timeout == 120
    assert reloads.current is config
    assert len(checked) == 1
    assert (metric(reloads, "applied"), metric(reloads, "invalid")) == (1, 0)
    assert reloads.warnings == []


async def test_a_misspelt_kind_is_refused_once_and_the_running_configuration_kept() -> None:
    checked: list[Configuration] = []
    reloads = Reloads(checked, [StartupError('multiKueue.externalFrameworks: did you mean "PipelineRun"?')])
    applied: list[Configuration] = []

    async def take() -> None:
        applied.append(await reloads.next_valid())

    misspelt = config_map(text("5m", kind="pipelinerun.v1.tekton.dev"))
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(take)
            reloads.on_event("MODIFIED", misspelt)
            await anyio.wait_all_tasks_blocked()  # judged: next_valid waits for the next change
            assert reloads.current.multi_kueue.worker_lost_timeout == 900
            assert reloads.metrics.config_valid._value.get() == 0
            reloads.on_event("DELETED", config_map(text("1m")))  # a deleted ConfigMap changes nothing
            reloads.on_event("MODIFIED", misspelt)  # the same text again (a relist): not judged again
            await anyio.wait_all_tasks_blocked()
            reloads.on_event("MODIFIED", config_map(text("3m")))
    assert [c.multi_kueue.worker_lost_timeout for c in applied] == [180]
    assert reloads.warnings == [
        (
            "InvalidConfiguration",
            'multiKueue.externalFrameworks: did you mean "PipelineRun"? (the running configuration is kept)',
        )
    ]
    assert [c.multi_kueue.worker_lost_timeout for c in checked] == [300, 180]
    assert (metric(reloads, "applied"), metric(reloads, "invalid")) == (1, 1)
    assert reloads.metrics.config_valid._value.get() == 1


async def test_an_equal_configuration_is_valid_and_restarts_nothing_without_a_kind_check() -> None:
    checked: list[Configuration] = []
    reloads = Reloads(checked, [])
    reloads.metrics.config_valid.set(0)
    reloads.on_event("ADDED", config_map(text() + "\n"))  # another text, the same configuration
    reloads.on_event("MODIFIED", config_map(text()))
    with anyio.fail_after(5):
        reloads.on_event("MODIFIED", config_map(text("4m")))
        config = await reloads.next_valid()
    assert config.multi_kueue.worker_lost_timeout == 240
    assert len(checked) == 1  # only the change


async def test_a_change_whose_kinds_cannot_be_checked_now_is_judged_again(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("multikueue.reload.RECHECK_SECONDS", 0.0)
    checked: list[Configuration] = []
    reloads = Reloads(checked, [Unreachable("https://manager: connection refused", maybe_done=False)])
    reloads.on_event("MODIFIED", config_map(text("7m")))
    with anyio.fail_after(5):
        config = await reloads.next_valid()
    assert config.multi_kueue.worker_lost_timeout == 420
    assert len(checked) == 2
    assert reloads.warnings == []
    assert (metric(reloads, "applied"), metric(reloads, "invalid")) == (1, 0)
