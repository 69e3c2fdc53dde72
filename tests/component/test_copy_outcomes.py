"""``copies.sync`` over an in-memory worker: one row per outcome it returns and per error it raises, in Kueue and in
Direct mode. Each row asserts the outcome's type and what the worker (and the manager) hold afterwards; the
sequences of the stale-copy issue (#43) are in test_stale_copies.py.

The branch matrix only: each behaviour keeps its test against real API servers (tests/integration/test_run_identity.py,
test_unknown_outcomes.py, test_direct.py, ...), which stays the proof; tests/integration/test_memory_fidelity.py holds
the in-memory API server to the real one's answers.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from multikueue.clusters.worker import KindNotServed
from multikueue.dispatch import copies
from multikueue.dispatch.copies import CopyOutcome, Want
from multikueue.dispatch.mirror import StatusRejected
from multikueue.dispatch.writes import WorkerWriteFailed
from multikueue.kube.errors import Forbidden, Unreachable
from multikueue.labels import ORIGIN_ANNOTATION, ORIGIN_LABEL, PREBUILT_WORKLOAD
from tests.component.cases import (
    ADOPT,
    FINISHED,
    KEY,
    MODES,
    NAME,
    NAMESPACE,
    ORIGIN,
    PIPELINERUN,
    SPEC_SYNC,
    SUSPENDED,
    Case,
    Mode,
    ago,
    made_for,
    mirrored,
    status,
)
from tests.component.memory_worker import MemoryWorker, NoAnswer, Refuse

Arrange = Callable[[Case], None]
Check = Callable[[Case, Any], None]


@dataclass(frozen=True)
class Row:
    """Arrange the worker, call ``sync``, expect an outcome of exactly ``expect`` (or that error), check the state."""

    expect: type
    check: Check
    arrange: Arrange = lambda case: None
    want: Want = Want.RUN
    ran_there: bool = False
    options: tuple[str, ...] = ()


def nothing_written(case: Case) -> None:
    """Neither the worker nor the manager was written to."""
    writes = {"create", "patch", "patch_status", "delete"}
    assert [r for r in case.store.requests if r.verb in writes] == []
    assert [r for r in case.manager.requests if r.verb in writes] == []


def check_absent(case: Case, out: copies.Absent) -> None:
    assert case.there() is None
    nothing_written(case)


def arrange_unlisted(case: Case) -> None:
    case.store.put(case.copy_of(state=status()))
    case.worker.unlist(PIPELINERUN)


def check_unlisted(case: Case, out: copies.Unlisted) -> None:
    assert made_for(case.there(), case.obj), "what the cache has not listed yet is left as it is"
    assert case.manager_status() == case.mode.own_status(), "never read as absent, nor mirrored"
    nothing_written(case)


def arrange_watch_lagging(case: Case) -> None:
    case.worker.watching = False  # what this pass writes is not delivered to the cache by a watch event


def check_created(case: Case, out: copies.Created) -> None:
    there = case.there()
    assert there is not None
    meta = there["metadata"]
    assert meta["labels"][ORIGIN_LABEL] == ORIGIN
    assert made_for(there, case.obj)
    assert "managedBy" not in there["spec"]
    assert meta["annotations"].get(PREBUILT_WORKLOAD, "") == case.mode.workload_name(case.obj)
    assert case.worker.copy(PIPELINERUN, KEY) is not None, "read as cached until its watch event comes"
    assert len(case.store.sent("create")) == 1


def arrange_vanished(case: Case) -> None:
    case.store.fail("create", Refuse(409))  # a same-named object there at the create, gone at the read after it


def check_vanished(case: Case, out: copies.Vanished) -> None:
    assert case.there() is None
    assert [r.verb for r in case.store.requests] == ["create", "get"]


def arrange_refused(case: Case) -> None:
    case.store.fail("create", Refuse(403, "exceeded quota: pipelineruns"))


def check_refused(case: Case, out: copies.CreateRefused) -> None:
    assert (out.error.refused, out.error.code) == (True, 403)
    assert "exceeded quota" in str(out.error)
    assert case.there() is None
    assert [r.verb for r in case.store.requests] == ["create", "get"], "the name looked up before it is final"


def arrange_refused_unread(case: Case) -> None:
    case.store.fail("create", Refuse(403))
    case.store.fail("get", NoAnswer())


def check_refused_unread(case: Case, error: WorkerWriteFailed) -> None:
    assert error.action == "read (after a refused create)"
    assert not error.refused, "whether the copy is there is not known: retried, never taken as refused"
    assert case.there() is None


def arrange_foreign(case: Case) -> None:
    case.store.put(case.copy_of(ours=False, state=status("True", "someone else's")))


def check_foreign(case: Case, out: copies.Foreign) -> None:
    there = case.there()
    assert there is not None
    assert ORIGIN_LABEL not in there["metadata"]["labels"]
    assert there["metadata"]["resourceVersion"] == out.worker_obj["metadata"]["resourceVersion"], "left untouched"
    assert "was not created by this manager" in out.message
    assert case.manager_status() == case.mode.own_status(), "its status is not mirrored"
    assert [r.verb for r in case.store.requests] == ["create", "get"]


def arrange_foreign_other_run(case: Case) -> None:
    case.store.put(case.copy_of(case.earlier_run(), ours=False, state=status("True", "the earlier run's")))


def arrange_adoptable(case: Case) -> None:
    case.store.put(case.copy_of(ours=False, state=status()))


def check_adopted(case: Case, out: copies.Adopted) -> None:
    there = case.there()
    assert there is not None
    assert there["metadata"]["labels"][ORIGIN_LABEL] == ORIGIN
    assert out.worker_obj == there
    assert there["metadata"]["annotations"][ORIGIN_ANNOTATION] == ORIGIN
    assert case.manager_status() == case.mode.own_status(), "mirrored by the next pass, not this one"


def arrange_adopt_refused(case: Case) -> None:
    arrange_adoptable(case)
    case.store.fail("patch", Refuse(403))


def check_adopt_refused(case: Case, error: WorkerWriteFailed) -> None:
    assert isinstance(error.error, Forbidden), "the worker's answer, named with the worker and the object"
    assert str(error).startswith('worker "w1": cannot adopt PipelineRun team-a/build: HTTP 403')
    there = case.there()
    assert there is not None
    assert ORIGIN_LABEL not in there["metadata"]["labels"]


def arrange_stale(case: Case) -> None:
    case.store.put(case.copy_of(case.earlier_run(), state=status("True", "the earlier run's result")))


def check_stale_deleted(case: Case, out: copies.Stale) -> None:
    assert case.there() is None
    assert [(r.verb, r.uid) for r in case.store.sent("delete")] == [("delete", out.worker_obj["metadata"]["uid"])]
    assert "copy of an earlier run" in out.message
    assert case.manager_status() == case.mode.own_status(), "an earlier run's status is never mirrored"


def arrange_stale_held(case: Case) -> None:
    held = case.copy_of(case.earlier_run(), state=status("True", "the earlier run's result"))
    held["metadata"]["finalizers"] = ["results.tekton.dev/pipelinerun"]
    case.store.put(held)


def check_stale_held(case: Case, out: copies.Stale) -> None:
    there = case.there()
    assert there is not None
    assert there["metadata"].get("deletionTimestamp"), "deleted, held by its finalizer"
    assert [r.uid for r in case.store.sent("delete")] == [there["metadata"]["uid"]]
    assert "held there by the finalizers results.tekton.dev/pipelinerun" in out.message
    assert case.manager_status() == case.mode.own_status()


def arrange_stale_going(case: Case) -> None:
    going = case.copy_of(case.earlier_run(), state=status("True", "the earlier run's result"))
    going["metadata"].update(finalizers=["results.tekton.dev/pipelinerun"], deletionTimestamp=ago(90))
    case.store.put(going)


def check_stale_going(case: Case, out: copies.Stale) -> None:
    assert case.there() is not None
    assert case.store.sent("delete") == [], "already going: not deleted again"
    assert out.going_for >= 90
    assert case.manager_status() == case.mode.own_status()


def check_gone(case: Case, out: copies.Gone) -> None:
    assert case.there() is None
    assert case.store.sent("create") == [], "a run that ran there is never made twice"
    assert [r.verb for r in case.store.requests] == ["get"], "read live: the cache may lag"
    assert "was deleted there (not by this dispatcher)" in out.message


def arrange_lagging(case: Case) -> None:
    case.worker.watching = False  # its watch event has not come yet
    case.store.put(case.copy_of(state=status()))


def check_found_live(case: Case, out: copies.InSync) -> None:
    assert out.written
    assert case.manager_status() == mirrored(case, status())
    assert case.worker.copy(PIPELINERUN, KEY) is not None, "kept as cached until its watch event comes"
    assert case.store.sent("create") == []


def arrange_with_status(case: Case) -> None:
    case.store.put(case.copy_of(state=status()))


def arrange_without_status(case: Case) -> None:
    case.store.put(case.copy_of())


def arrange_suspended(case: Case) -> None:
    case.submit(status="PipelineRunPending")
    arrange_with_status(case)


def check_held(case: Case, out: copies.Held) -> None:
    assert out.first, "with a status held back, on the first pass: told once"
    assert case.manager_status() == case.mode.own_status()
    assert case.manager.sent("patch_status") == []


def arrange_suspended_without_status(case: Case) -> None:
    case.submit(status="PipelineRunPending")
    arrange_without_status(case)


def check_held_nothing(case: Case, out: copies.Held) -> None:
    assert not out.first, "nothing held back: nothing to tell"
    assert case.manager.sent("patch_status") == []


def check_no_status(case: Case, out: copies.InSync) -> None:
    assert case.manager_status() == case.mode.own_status()
    assert case.manager.sent("patch_status") == []
    assert not getattr(out, "written", False)


def check_written(case: Case, out: copies.InSync) -> None:
    assert out.written
    assert out.pruned == ()
    assert case.manager_status() == mirrored(case, status())
    assert out.obj == case.manager.peek(NAME, NAMESPACE), "the manager object as written (its resourceVersion)"


def arrange_in_sync(case: Case) -> None:
    case.obj = case.manager.put({**case.obj, "status": mirrored(case, status())})
    arrange_with_status(case)


def check_unwritten(case: Case, out: copies.InSync) -> None:
    assert not out.written
    assert case.manager.sent("patch_status") == []
    assert out.obj["metadata"]["resourceVersion"] == case.obj["metadata"]["resourceVersion"]


def arrange_pruning(case: Case) -> None:
    case.manager.prunes = frozenset({"status.newField"})  # a manager CRD older than the worker's
    case.store.put(case.copy_of(state=status(newField="only the newer schema has it")))


def check_pruned(case: Case, out: copies.InSync) -> None:
    assert (out.written, out.pruned) == (True, ("status.newField",))
    assert case.manager_status() == mirrored(case, status())


def arrange_cancelled(case: Case) -> None:
    case.submit(status="Cancelled")
    arrange_with_status(case)


def check_spec_carried(case: Case, out: copies.InSync) -> None:
    there = case.there()
    assert there is not None
    assert there["spec"]["status"] == "Cancelled", "the cancel reached the copy"
    assert out.written


def arrange_succeeded(case: Case) -> None:
    case.store.put(case.copy_of(state=status("True", "done")))


def check_succeeded(case: Case, out: copies.Finished) -> None:
    assert (out.reason, out.written) == ("Succeeded", True)
    assert case.manager_status() == mirrored(case, status("True", "done"))


def arrange_failed(case: Case) -> None:
    case.store.put(case.copy_of(state=status("False", "a task failed")))


def check_failed(case: Case, out: copies.Finished) -> None:
    assert out.reason == "Failed"
    assert case.manager_status() == mirrored(case, status("False", "a task failed"))


def arrange_status_refused(case: Case) -> None:
    arrange_with_status(case)
    case.manager.fail("patch_status", Refuse(422, "status.startTime: Invalid value"))


def check_status_refused(case: Case, error: StatusRejected) -> None:
    assert "rejected by the manager" in str(error)
    assert case.manager_status() == case.mode.own_status()


def arrange_unserved(case: Case) -> None:
    case.worker = MemoryWorker("w1", origin=ORIGIN, unserved={PIPELINERUN: "the server could not find the resource"})


def check_unserved(case: Case, out: copies.CreateRefused) -> None:
    """The kind is not served there (its CRD removed): the create it cannot take is refused, said with why, rather
    than retried for ever (an adversarial read found the run stuck, nothing told)."""
    assert "PipelineRun is unavailable on worker w1: the server could not find the resource" in str(out.error)
    assert out.error.refused
    assert case.worker.serves(PIPELINERUN) is False


def arrange_undiscovered(case: Case) -> None:
    case.worker = MemoryWorker("w1", origin=ORIGIN)


def check_undiscovered(case: Case, error: KindNotServed) -> None:
    assert "not discovered yet" in str(error)
    assert case.worker.serves(PIPELINERUN) is None, "unknown: never to be read as absent"


def arrange_no_answer(case: Case) -> None:
    case.store.fail("create", NoAnswer())


def arrange_behind(case: Case) -> None:
    arrange_with_status(case)
    case.worker.watching = False  # the copy's final status has not come with its watch yet
    case.store.edit(NAME, {"status": status("True", "done")}, NAMESPACE, status=True)


def check_behind(case: Case, out: copies.Behind) -> None:
    cached = case.worker.copy(PIPELINERUN, KEY)
    assert cached is not None
    assert cached["status"] == status("True", "done"), "the newer copy kept for the next pass"
    assert case.manager_status() == case.mode.own_status(), "mirrored by the next pass"
    assert [r.verb for r in case.store.requests] == ["get"]


def check_caught_up(case: Case, out: copies.InSync) -> None:
    check_written(case, out)
    assert [r.verb for r in case.store.requests] == ["get"], "its final status read live before the run ends"


def check_finished_unread(case: Case, out: copies.Finished) -> None:
    check_succeeded(case, out)
    assert case.store.sent("get") == [], "a cached copy that says it finished is not read again"


def check_no_answer(case: Case, error: WorkerWriteFailed) -> None:
    assert not error.refused
    assert isinstance(error.error, Unreachable)
    assert "no answer: it may have been done" in str(error)
    assert case.there() is None


ROWS = {
    "absent": Row(copies.Absent, check_absent, want=Want.OBSERVE),
    "unlisted": Row(copies.Unlisted, check_unlisted, arrange_unlisted, want=Want.OBSERVE),
    "created": Row(copies.Created, check_created, arrange_watch_lagging),
    "vanished": Row(copies.Vanished, check_vanished, arrange_vanished),
    "create refused": Row(copies.CreateRefused, check_refused, arrange_refused),
    "foreign": Row(copies.Foreign, check_foreign, arrange_foreign),
    "foreign, adopt: another run's": Row(copies.Foreign, check_foreign, arrange_foreign_other_run, options=(ADOPT,)),
    "adopted": Row(copies.Adopted, check_adopted, arrange_adoptable, options=(ADOPT,)),
    "stale, not yet being deleted": Row(copies.Stale, check_stale_deleted, arrange_stale),
    "stale, held by a finalizer": Row(copies.Stale, check_stale_held, arrange_stale_held),
    "stale, being deleted": Row(copies.Stale, check_stale_going, arrange_stale_going),
    "stale, adopt: never adopted": Row(copies.Stale, check_stale_deleted, arrange_stale, options=(ADOPT,)),
    "gone": Row(copies.Gone, check_gone, ran_there=True),
    "ran there, the cache lagging": Row(copies.InSync, check_found_live, arrange_lagging, ran_there=True),
    "held": Row(copies.Held, check_held, arrange_suspended, options=(SUSPENDED,)),
    "held, nothing to hold": Row(
        copies.Held, check_held_nothing, arrange_suspended_without_status, options=(SUSPENDED,)
    ),
    "no status, read as in sync": Row(copies.InSync, check_no_status, arrange_without_status),
    "in sync, written": Row(copies.InSync, check_written, arrange_with_status),
    "in sync, nothing to write": Row(copies.InSync, check_unwritten, arrange_in_sync),
    "in sync, fields pruned": Row(copies.InSync, check_pruned, arrange_pruning),
    "in sync, spec carried": Row(copies.InSync, check_spec_carried, arrange_cancelled, options=(SPEC_SYNC,)),
    "finished, succeeded": Row(copies.Finished, check_succeeded, arrange_succeeded, options=(FINISHED,)),
    "finished, failed": Row(copies.Finished, check_failed, arrange_failed, options=(FINISHED,)),
    "final, gone": Row(copies.Gone, check_gone, want=Want.FINAL),
    "final, the cache lagging": Row(copies.InSync, check_found_live, arrange_lagging, want=Want.FINAL),
    "final, behind": Row(copies.Behind, check_behind, arrange_behind, want=Want.FINAL, options=(FINISHED,)),
    "final, caught up": Row(copies.InSync, check_caught_up, arrange_with_status, want=Want.FINAL),
    "final, finished in the cache": Row(
        copies.Finished, check_finished_unread, arrange_succeeded, want=Want.FINAL, options=(FINISHED,)
    ),
    "kind not served: refused": Row(copies.CreateRefused, check_unserved, arrange_unserved),
    "raises: kind not discovered yet": Row(KindNotServed, check_undiscovered, arrange_undiscovered),
    "raises: create, no answer": Row(WorkerWriteFailed, check_no_answer, arrange_no_answer),
    "raises: create refused, name unread": Row(WorkerWriteFailed, check_refused_unread, arrange_refused_unread),
    "raises: adoption refused": Row(WorkerWriteFailed, check_adopt_refused, arrange_adopt_refused, options=(ADOPT,)),
    "raises: status rejected": Row(StatusRejected, check_status_refused, arrange_status_refused),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("row", [pytest.param(row, id=name) for name, row in ROWS.items()])
async def test_each_outcome_of_a_copy_and_what_the_worker_holds_then(mode: Mode, row: Row) -> None:
    case = Case(mode, mode.adapter(*row.options))
    row.arrange(case)
    if issubclass(row.expect, Exception):
        with pytest.raises(row.expect) as raised:
            await case.sync(row.want, ran_there=row.ran_there)
        row.check(case, raised.value)
        return
    out = await case.sync(row.want, ran_there=row.ran_there)
    assert type(out) is row.expect
    assert out.obj["metadata"]["uid"] == case.obj["metadata"]["uid"]
    row.check(case, out)


def test_every_outcome_has_a_row() -> None:
    outcomes = set(CopyOutcome.__args__) | {copies.Finished}
    assert outcomes <= {row.expect for row in ROWS.values()}
