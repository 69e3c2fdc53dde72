"""A copy of this very run that is going, and a copy that is gone when the worker says the run ended: never taken
for the run's result (found by an adversarial read of the run lifecycle; each failed before its fix)."""

from __future__ import annotations

import pytest

from multikueue.dispatch import copies, run_lifecycle
from multikueue.dispatch.copies import Want
from multikueue.labels import ATTEMPT_ANNOTATION
from tests.component.cases import FINISHED, KEY, MODES, NAME, NAMESPACE, Case, Mode, ago, mirrored, status

EARLIER = "2026-08-01T09:00:00Z"  # an earlier admission's quota reservation


@pytest.mark.parametrize("mode", MODES)
async def test_a_copy_of_this_run_being_deleted_is_not_taken_as_the_run(mode: Mode) -> None:
    """Evicted and re-admitted to the same worker while a finalizer holds the earlier attempt's copy (the same
    manager UID, the same Workload; in Kueue mode an earlier admission's): the copy is going, so the run waits for
    it; its (cancelled) status is never mirrored as the new attempt's, and nothing is created beside it."""
    case = Case(mode, mode.adapter(FINISHED))
    dying = case.copy_of(state=status("False", "cancelled by its deletion"), attempt=mode.attempt(reserved_at=EARLIER))
    dying["metadata"].update(finalizers=["results.tekton.dev/pipelinerun"], deletionTimestamp=ago(5))
    case.store.put(dying)
    case.worker.relist()

    out = await case.sync(Want.RUN, earlier_attempts=True)  # Kueue mode: the Workload was evicted before

    assert type(out) is copies.Stale, out
    assert ("an earlier admission of this run" if mode.attempt() else "a copy of this run being deleted") in out.message
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


async def test_a_recreated_workloads_going_copy_is_not_taken_as_this_attempt() -> None:
    """Kueue mode. Attempt 1 ran on w1; its copy is being deleted, a finalizer holds it (cancelled). Kueue deletes
    the Workload and makes it again for the same object (the job's spec changed while suspended, or a user's
    ``kubectl delete workload``): the same name, a new UID, no eviction history. Admitted on w1 again, the going
    copy is an earlier admission's: never mirrored, and the run waits for it rather than end with its verdict."""
    mode = Mode("Kueue")
    case = Case(mode, mode.adapter(FINISHED), attempt=mode.attempt(workload_uid="wl-2"))
    dying = case.copy_of(state=status("False", "cancelled by its deletion"), attempt=mode.attempt(workload_uid="wl-1"))
    dying["metadata"].update(finalizers=["results.tekton.dev/pipelinerun"], deletionTimestamp=ago(5))
    case.store.put(dying)
    case.worker.relist()

    out = await case.sync(Want.RUN, earlier_attempts=False)

    assert type(out) is copies.Stale, out
    step = run_lifecycle.after_copy(run_lifecycle.RunView(worker="w1", lost_timeout=900.0), out)
    assert not isinstance(step, run_lifecycle.Finish), f"attempt 2 ends with attempt 1's verdict: {step}"
    assert case.manager.sent("patch_status") == [], "attempt 1's status is not this attempt's"


async def test_after_an_eviction_this_admissions_own_going_copy_gives_its_final_status() -> None:
    """Kueue mode, the mirror image: evicted once, admitted again to w1, this admission's copy finished there and
    someone deleted it while a finalizer holds it. It is this admission's (it says so): its final status is
    mirrored and the run finishes, never taken as an earlier attempt's and run again."""
    mode = Mode("Kueue")
    case = Case(mode, mode.adapter(FINISHED))
    dying = case.copy_of(state=status("True", "done"))
    dying["metadata"].update(finalizers=["results.tekton.dev/pipelinerun"], deletionTimestamp=ago(5))
    case.store.put(dying)
    case.worker.relist()

    out = await case.sync(Want.RUN, earlier_attempts=True)

    assert type(out) is copies.Finished, out
    assert case.manager_status() == mirrored(case, status("True", "done")), "its final status on the manager"


async def test_after_an_eviction_a_going_copy_an_older_version_made_is_taken_as_the_earlier_attempts() -> None:
    """A copy made before copies carried their admission says nothing of it: after an eviction, going, it is taken
    as the earlier admission's (as before), never mirrored."""
    mode = Mode("Kueue")
    case = Case(mode, mode.adapter(FINISHED))
    dying = case.copy_of(state=status("False", "cancelled by its deletion"), attempt="")
    dying["metadata"].update(finalizers=["results.tekton.dev/pipelinerun"], deletionTimestamp=ago(5))
    case.store.put(dying)
    case.worker.relist()

    out = await case.sync(Want.RUN, earlier_attempts=True)

    assert type(out) is copies.Stale, out
    assert "a copy of this run being deleted there" in out.message


@pytest.mark.parametrize(
    ("made_for", "marked"),
    [
        pytest.param("wl-1/2026-08-01T09:00:00Z/0", True, id="an earlier admission of this Workload"),
        pytest.param("wl-0/2026-08-01T09:00:00Z/0", True, id="a Workload made again under the same name"),
        pytest.param("", True, id="made by an older version"),
        pytest.param("wl-1/2026-08-01T11:00:00Z/2", False, id="a later admission: this view lags"),
    ],
)
async def test_a_running_copy_made_for_another_admission_goes_on_as_this_ones(made_for: str, marked: bool) -> None:
    """Evicted (or its Workload made again) and admitted again while this dispatcher did not look: nothing removed
    the copy, still running there. It is this run's (the same manager object): it goes on, marked as this
    admission's, as in Kueue; never deleted and run again (an adversarial read found it deleted as stale and the
    run then failed as deleted by someone else). A later admission's (this view lags) is left marked as it is."""
    mode = Mode("Kueue")
    case = Case(mode, mode.adapter(FINISHED), attempt=mode.attempt(evictions=1))  # this view: wl-1, evicted once
    case.store.put(case.copy_of(state=status(), attempt=made_for))
    case.worker.relist()

    out = await case.sync(Want.RUN)

    assert type(out) is copies.InSync, out
    assert case.store.sent("delete") == [], "this run's copy is never deleted"
    assert case.store.sent("create") == [], "nor made again beside it"
    assert case.manager_status() == mirrored(case, status()), "its status is this run's"
    stamped = ((case.there() or {}).get("metadata") or {}).get("annotations", {}).get(ATTEMPT_ANNOTATION, "")
    assert stamped == (case.attempt if marked else made_for)


async def test_two_admissions_within_one_second_are_told_apart_by_the_eviction_count() -> None:
    """Reserved again within the second the first admission's quota was (Kueue's times have a resolution of one
    second), to w1 while the first admission's copy is held there: the eviction count tells them apart."""
    mode = Mode("Kueue")
    case = Case(mode, mode.adapter(FINISHED), attempt=mode.attempt(evictions=1))
    dying = case.copy_of(state=status("False", "cancelled by its deletion"), attempt=mode.attempt(evictions=0))
    dying["metadata"].update(finalizers=["results.tekton.dev/pipelinerun"], deletionTimestamp=ago(1))
    case.store.put(dying)
    case.worker.relist()

    out = await case.sync(Want.RUN, earlier_attempts=True)

    assert type(out) is copies.Stale, out
    assert case.manager.sent("patch_status") == [], "the earlier admission's status is not this one's"
