"""A copy of this very run that is going, and a copy that is gone when the worker says the run ended: never taken
for the run's result (found by an adversarial read of the run lifecycle; each failed before its fix)."""

from __future__ import annotations

import pytest

from multikueue.dispatch import copies
from multikueue.dispatch.copies import Want
from tests.component.cases import FINISHED, KEY, MODES, NAME, NAMESPACE, Case, Mode, ago, mirrored, status


@pytest.mark.parametrize("mode", MODES)
async def test_a_copy_of_this_run_being_deleted_is_not_taken_as_the_run(mode: Mode) -> None:
    """Evicted and re-admitted to the same worker while a finalizer holds the earlier attempt's copy (the same
    manager UID, the same Workload): the copy is going, so the run waits for it; its (cancelled) status is never
    mirrored as the new attempt's, and nothing is created beside it."""
    case = Case(mode, mode.adapter(FINISHED))
    dying = case.copy_of(state=status("False", "cancelled by its deletion"))
    dying["metadata"].update(finalizers=["results.tekton.dev/pipelinerun"], deletionTimestamp=ago(5))
    case.store.put(dying)
    case.worker.relist()

    out = await case.sync(Want.RUN, earlier_attempts=True)  # Kueue mode: the Workload was evicted before

    assert type(out) is copies.Stale, out
    assert "a copy of this run being deleted there" in out.message
    assert case.manager.sent("patch_status") == [], "its status is not this attempt's"
    assert case.store.sent("create") == [], "nothing made beside it"
    assert case.store.sent("delete") == [], "already going: no delete sent"


@pytest.mark.parametrize("mode", MODES)
async def test_a_copy_of_this_run_deleted_there_by_someone_else_still_gives_its_final_status(mode: Mode) -> None:
    """No earlier attempt can exist (Direct mode; Kueue mode never evicted): a copy of this run that someone else
    deletes (a pruner, a TTL) while a finalizer holds it is this run: its final status is mirrored and it finishes,
    never created again once it is gone (an adversarial read found it Stale, its result lost or the run made again)."""
    case = Case(mode, mode.adapter(FINISHED))
    dying = case.copy_of(state=status("True", "done"))
    dying["metadata"].update(finalizers=["results.tekton.dev/pipelinerun"], deletionTimestamp=ago(5))
    case.store.put(dying)
    case.worker.relist()

    out = await case.sync(Want.RUN)

    assert type(out) is copies.Finished, out
    assert case.manager_status() == mirrored(case, status("True", "done")), "its final status on the manager"
    assert case.store.sent("create") == [], "nothing made beside it"


@pytest.mark.parametrize("mode", MODES)
async def test_a_final_read_of_a_copy_gone_there_says_so(mode: Mode) -> None:
    """The worker says the run ended; the cache still shows the copy running (its watch lags) and the copy is gone
    there (pruned): the final status never came, and that is said, not the stale one taken as final."""
    case = Case(mode, mode.adapter(FINISHED))
    case.store.put(case.copy_of(state=status()))
    case.worker.relist()
    case.worker.watching = False  # the object's watch lags
    await case.store.delete(NAME, NAMESPACE)
    assert case.worker.copy(case.adapter.gvk, KEY) is not None, "the cache has not seen the deletion"

    out = await case.sync(Want.FINAL)

    assert type(out) is copies.Gone, out
    assert "before its final status reached the manager" in out.message
