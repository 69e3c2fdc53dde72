"""Review of 1b8f954 (a running copy made for another admission goes on as this admission's and is re-marked; the
admission counts Kueue's evictions; the collector deletes a copy on a worker that is not the recorded one; a pass
takes its owner only with the UID its Workload was made for): sequences that, because of it, show a run with
another admission's result or lose its final status. Each test fails on 1b8f954 for the reason its docstring gives.

``copies.sync`` is called as ``runs.Runs`` calls it for the recorded worker (cases.py ``Case.sync``), over the
in-memory worker of memory_worker.py.
"""

from __future__ import annotations

from typing import Any

from multikueue.dispatch import copies
from multikueue.dispatch import workload_state as wl
from multikueue.dispatch.copies import Want
from tests.component.cases import FINISHED, NAME, NAMESPACE, Case, Mode, ago, mirrored, status
from tests.component.test_admissions import RESERVED_1, RESERVED_2

RESULTS = "results.tekton.dev/pipelinerun"  # Tekton Results' finalizer: it holds a deleted run until it is stored


def _admission(uid: str, reserved_at: str, evictions: int, *, evicted: bool = False) -> dict[str, Any]:
    """The manager Workload's status as ``workload_state.attempt`` reads it (``evicted``: Kueue has evicted this
    admission and not released its quota yet)."""
    conditions = [{"type": wl.QUOTA_RESERVED, "status": "True", "lastTransitionTime": reserved_at}]
    if evicted:
        conditions.append({"type": wl.EVICTED, "status": "True", "reason": "Preempted", "lastTransitionTime": ago(1)})
    stats = {"evictions": [{"reason": "Preempted", "underlyingCause": "", "count": evictions}]} if evictions else {}
    return {"metadata": {"uid": uid}, "status": {"conditions": conditions, "schedulingStats": stats}}


async def test_the_restamp_never_marks_a_copy_whose_deletion_began_since_the_cache_saw_it() -> None:
    """Admission 1's copy runs on w1. The Workload is evicted and its quota released: this dispatcher removes the
    copies there (``RemoveEverywhere``); the object copy is held by Tekton Results' finalizer (going) and Tekton
    writes its cancellation. Admission 2 wins w1 again before the worker's object watch has brought that change
    (a watch being re-established, a slow worker): the cache still shows admission 1's copy running.

    On ca9d50e the copy is another admission's: ``Stale``, the delete (UID precondition) a no-op, the run waits for
    it to go. On 1b8f954 it is ``made`` (not going, as cached) and re-marked (copies.py ``_restamp``): the merge
    patch carries the UID but no resourceVersion, so it lands on the copy being deleted, and the pass goes on with
    the server's answer (going, cancelled): admission 1's cancellation is mirrored as admission 2's final status and
    the run Finishes Failed, never run in admission 2."""
    mode = Mode("Kueue")
    first, second = _admission("wl-1", RESERVED_1, 0), _admission("wl-1", RESERVED_2, 1)
    case = Case(mode, mode.adapter(FINISHED), attempt=wl.attempt(second))
    running = case.copy_of(state=status(), attempt=wl.attempt(first))
    running["metadata"]["finalizers"] = [RESULTS]
    made = case.store.put(running)
    case.worker.relist()
    case.worker.watching = False  # the object watch lags from here on
    # The removal at the quota's release, and the cancellation Tekton writes on the copy being deleted.
    assert await case.store.delete(NAME, NAMESPACE, uid=made["metadata"]["uid"])
    case.store.edit(NAME, {"status": status("False", "PipelineRun cancelled by its deletion")}, NAMESPACE, status=True)

    out = await case.sync(Want.RUN, earlier_attempts=wl.evicted_before(second))

    assert not isinstance(out, copies.Finished), f"admission 1's cancellation ends admission 2: {out!r}"
    assert case.manager.sent("patch_status") == [], "admission 1's cancellation is mirrored as admission 2's status"


async def test_this_admissions_copy_deleted_while_its_eviction_is_under_way_still_gives_its_final_status() -> None:
    """The run succeeds on w1 and Tekton's pruner deletes it at once (Tekton Results' finalizer holds it, going);
    the worker's Kueue marks its Workload copy Finished. Before this dispatcher's pass, Kueue preempts the manager
    Workload: ``Evicted`` and ``schedulingStats.evictions`` 0 -> 1 in one write, its quota still reserved (same
    ``QuotaReserved`` time: the same admission). The pass finishes the run from the worker's copy (``Want.FINAL``).

    On ca9d50e the admission read ``uid/reserved`` on both: the copy is this admission's own, deleted there by
    someone else, and its final status is mirrored (docs/dispatch.md). On 1b8f954 the pass reads
    ``uid/reserved/1`` against the copy's ``uid/reserved/0``: a going copy of "another" admission (copy_outcomes.py
    ``Run.made``) is ``Stale``; the final status is never mirrored and, once the copy is gone, the run ends as
    ``LostThere`` with a ``FinalStatusLost`` Warning, the object showing the last status mirrored (running)."""
    mode = Mode("Kueue")
    before, during = _admission("wl-1", RESERVED_1, 0), _admission("wl-1", RESERVED_1, 1, evicted=True)
    case = Case(mode, mode.adapter(FINISHED), attempt=wl.attempt(during))
    done = status("True", "Tasks Completed: 1 (Failed: 0, Cancelled 0), Skipped: 0")
    pruned = case.copy_of(state=done, attempt=wl.attempt(before))
    pruned["metadata"].update(finalizers=[RESULTS], deletionTimestamp=ago(1))
    case.store.put(pruned)
    case.worker.relist()

    out = await case.sync(Want.FINAL, ran_there=True, earlier_attempts=wl.evicted_before(during))

    assert not isinstance(out, copies.Stale), f"this admission's own copy is taken as another's: {out.message}"
    assert case.manager_status() == mirrored(case, done), "its final status never reaches the manager"
