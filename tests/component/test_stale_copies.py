"""The sequences of the stale-copy issue (#43) over an in-memory worker, in Kueue and in Direct mode: an earlier
same-named run's copy is never mirrored or adopted, is deleted with its UID precondition, and the run is created
once it is gone; a create whose answer was lost is found by its retry, even when that retry is refused; a delete
never takes a newer same-named object; a lagging cache is caught up from a live read.

The branch matrix only: tests/integration/test_run_identity.py and test_unknown_outcomes.py prove these against real
API servers.
"""

from __future__ import annotations

import pytest

from multikueue.dispatch import copies
from multikueue.dispatch.writes import WorkerWriteFailed
from tests.component.cases import (
    ADOPT,
    FINISHED,
    KEY,
    MODES,
    NAME,
    NAMESPACE,
    PIPELINERUN,
    Case,
    Mode,
    made_for,
    status,
)
from tests.component.memory_worker import LostAnswer, Refuse


@pytest.mark.parametrize("mode", MODES)
async def test_an_earlier_runs_copy_is_never_mirrored_or_adopted_and_this_run_is_created_once_it_is_gone(
    mode: Mode,
) -> None:
    case = Case(mode, mode.adapter(ADOPT, FINISHED))
    earlier = case.copy_of(case.earlier_run(), state=status("True", "the earlier run's result"))
    earlier["metadata"]["finalizers"] = ["results.tekton.dev/pipelinerun"]
    stale_uid = case.store.put(earlier)["metadata"]["uid"]

    for _ in range(2):  # asked once; the next pass finds it going and waits
        out = await case.sync()
        assert type(out) is copies.Stale
        assert case.manager_status() == mode.own_status(), "never mirrored: it is not this run's result"
    assert [r.uid for r in case.store.sent("delete")] == [stale_uid], "deleted once, exactly that one"
    assert case.store.sent("patch") == [], "never adopted"
    assert case.store.sent("create") == []

    case.store.edit(NAME, {"metadata": {"finalizers": None}}, NAMESPACE)  # Tekton Results lets it go
    assert case.there() is None
    assert type(await case.sync()) is copies.Created
    there = case.there()
    assert made_for(there, case.obj)
    assert there is not None
    assert there["metadata"]["uid"] != stale_uid
    assert "status" not in there


@pytest.mark.parametrize("mode", MODES)
async def test_a_create_whose_answer_was_lost_is_found_by_its_retry(mode: Mode) -> None:
    case = Case(mode, mode.adapter())
    case.worker.watching = False  # the copy's watch event does not come before the retry
    case.store.fail("create", LostAnswer())
    with pytest.raises(WorkerWriteFailed) as raised:
        await case.sync()
    assert not raised.value.refused
    assert made_for(case.there(), case.obj), "carried out, its answer lost"

    out = await case.sync()
    assert type(out) is (copies.InSync)
    assert len(case.store.objects) == 1
    assert [r.verb for r in case.store.requests] == ["create", "create", "get"], "the 409 read the copy back"


@pytest.mark.parametrize("mode", MODES)
async def test_a_refused_create_whose_first_answer_was_lost_finds_the_copy(mode: Mode) -> None:
    case = Case(mode, mode.adapter())
    case.worker.watching = False
    # The retry is refused by what the first, stored create changed (a ResourceQuota on the kind's count).
    case.store.fail("create", LostAnswer(), Refuse(403, "exceeded quota: count/pipelineruns.tekton.dev, used: 1"))
    with pytest.raises(WorkerWriteFailed):
        await case.sync()

    out = await case.sync()
    assert not isinstance(out, copies.CreateRefused)
    assert type(out) is (copies.InSync)
    assert len(case.store.objects) == 1
    assert made_for(case.there(), case.obj)
    assert case.worker.copy(PIPELINERUN, KEY) is not None, "the copy read live is kept as cached"


@pytest.mark.parametrize("mode", MODES)
async def test_a_delete_never_takes_a_newer_same_named_object(mode: Mode) -> None:
    case = Case(mode, mode.adapter())
    first_run = case.obj
    case.store.put(case.copy_of(first_run))
    cached = case.worker.copy(PIPELINERUN, KEY)
    assert cached is not None
    case.worker.watching = False  # what follows is not in the cache yet
    case.store.objects.clear()  # the first copy deleted there, and the next run's copy made
    case.submit()
    newer = case.store.put(case.copy_of(case.obj))

    assert not await copies.delete(case.worker, PIPELINERUN, KEY, copies.Run.of(first_run))
    assert [r.uid for r in case.store.sent("delete")] == [cached["metadata"]["uid"]], "the cached one's UID"
    assert case.there() == newer, "the newer object is left alone (409)"

    case.store.requests.clear()
    assert not await copies.delete(case.worker, PIPELINERUN, KEY, copies.Run.of(case.obj, mode.workload_name(case.obj)))
    assert case.store.sent("delete") == [], "the cached copy is another run's: left to that run"

    case.worker.deliver()
    assert await copies.delete(case.worker, PIPELINERUN, KEY, copies.Run.of(case.obj, mode.workload_name(case.obj)))
    assert case.there() is None


@pytest.mark.parametrize("mode", MODES)
async def test_a_stale_copy_replaced_before_its_delete_leaves_the_replacement(mode: Mode) -> None:
    case = Case(mode, mode.adapter())
    case.store.put(case.copy_of(case.earlier_run()))
    case.worker.watching = False
    case.store.objects.clear()
    mine = case.store.put(case.copy_of(case.obj))  # this run's copy, made by a pass whose answer was lost

    out = await case.sync()
    assert type(out) is copies.Stale, "the cache still shows the earlier run's"
    assert case.there() == mine, "the delete's UID precondition spared this run's copy"
    case.worker.deliver()
    assert type(await case.sync()) is (copies.InSync)
