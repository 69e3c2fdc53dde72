"""Review of ca9d50e (a Kueue-mode copy carries the admission it was made for): sequences that still lose a run, run
it twice or show another admission's result. Each test fails on ca9d50e for the reason its docstring gives.

Passes are played as ``WorkloadReconciler`` plays them, minus its writes to the manager: the snapshot
(``Snapshots.group``), the decision (``decision.decide``), the run's view (``WorkloadReconciler._run_on``) and the
lifecycle (``Runs``), over the in-memory workers of memory_worker.py. The winner's record (``set_admitted``) is
applied to the Workload dict as that write leaves it.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from multikueue.clusters.worker import Worker
from multikueue.config import parse_configuration
from multikueue.dispatch import copies, decision, workload_copies
from multikueue.dispatch import run_lifecycle as rl
from multikueue.dispatch import workload_state as wl
from multikueue.dispatch.check_status import admitted_message
from multikueue.dispatch.copies import Want
from multikueue.dispatch.garbage import GarbageCollector
from multikueue.dispatch.mirror import StatusMirror
from multikueue.dispatch.reconciler import WorkloadReconciler, _Pass
from multikueue.dispatch.runs import Runs
from multikueue.kube.client import ApiClient
from multikueue.kube.kubeconfig import ClusterAccess
from multikueue.kube.resources import Objects
from multikueue.runtime.informer import Informer, ObjectKey
from tests.component.cases import FINISHED, KEY, NAME, NAMESPACE, ORIGIN, PIPELINERUN, Case, Mode, ago, status
from tests.component.memory_worker import MemoryWorker
from tests.component.test_runs import RecordingRecord

Object = dict[str, Any]
CHECK = "mk-check"
SPEC: Object = {"queueName": "q", "podSets": [{"name": "main", "count": 1}]}
RESERVED_1 = "2026-08-01T10:00:00Z"  # the first admission's quota reservation
RESERVED_2 = "2026-08-01T10:20:00Z"  # the next one's (after an eviction, or a Workload made again)
CONFIG = f"""
multiKueue:
  origin: {ORIGIN}
  externalFrameworks: [{{name: PipelineRun.v1.tekton.dev}}]
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    mode: Kueue
    {FINISHED.replace(chr(10), chr(10) + "    ")}
"""


class _Nowhere:
    description = "nowhere"

    async def list(self, *, limit: int, continue_token: str | None) -> dict[str, Any]:
        raise AssertionError("not listed in these tests")

    def watch(self, *, resource_version: str, timeout_seconds: int) -> Any:
        raise AssertionError("not watched in these tests")


@dataclass
class World:
    """One PipelineRun on the manager, its Workload's passes, and the workers ``w1`` (and ``w2``)."""

    reconciler: WorkloadReconciler
    case: Case
    workers: dict[str, MemoryWorker] = field(default_factory=dict)

    @property
    def adapter(self) -> Any:
        return self.case.adapter

    @property
    def workload_name(self) -> str:
        return self.case.mode.workload_name(self.case.obj)

    @property
    def key(self) -> ObjectKey:
        return ObjectKey(NAMESPACE, self.workload_name)

    def obj(self) -> Object:
        """The manager object as the owners' cache holds it (with what was mirrored to it)."""
        found = self.case.manager.peek(NAME, NAMESPACE)
        assert found is not None
        return found

    def workload(self, uid: str, reserved_at: str, *, evictions: int = 0, state: str = "Pending",
                 cluster: str | None = None) -> Object:  # fmt: skip
        """The manager Workload with its quota reserved at ``reserved_at`` (``evictions``: Kueue's count of its
        evictions, in ``status.schedulingStats``)."""
        reserved = {"type": wl.QUOTA_RESERVED, "status": "True", "reason": "QuotaReserved",
                    "message": "Quota reserved in ClusterQueue cq", "lastTransitionTime": reserved_at}  # fmt: skip
        state_entry = {"name": CHECK, "state": state, "message": admitted_message(cluster) if cluster else ""}
        status: Object = {"conditions": [reserved], "admissionChecks": [state_entry]}
        if cluster:
            status["clusterName"] = cluster
        if evictions:
            status["schedulingStats"] = {"evictions": [{"reason": "Preempted", "underlyingCause": "",
                                                        "count": evictions}]}  # fmt: skip
        owner = {"apiVersion": "tekton.dev/v1", "kind": "PipelineRun", "name": NAME,
                 "uid": self.case.obj["metadata"]["uid"], "controller": True}  # fmt: skip
        return {"apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Workload",
                "metadata": {"name": self.workload_name, "namespace": NAMESPACE, "uid": uid,
                             "ownerReferences": [owner]},
                "spec": copy.deepcopy(SPEC), "status": status}  # fmt: skip

    def running_there(self, cluster: str, workload: Object) -> None:
        """What a run admitted on ``cluster`` for ``workload``'s admission leaves there: its object copy (made for
        that admission, running) and its Workload copy (admitted there, adopted by that object copy)."""
        worker = self.workers[cluster]
        store = worker.store(PIPELINERUN)
        made = store.put(self.case.copy_of(state=status(), attempt=wl.attempt(workload)))
        worker_wl = wl.clone_for_create(workload, ORIGIN)
        worker_wl["metadata"]["ownerReferences"] = [{"apiVersion": "tekton.dev/v1", "kind": "PipelineRun",
                                                     "name": NAME, "uid": made["metadata"]["uid"],
                                                     "controller": True}]  # fmt: skip
        worker_wl["status"] = {"conditions": [
            {"type": wl.QUOTA_RESERVED, "status": "True", "reason": "QuotaReserved", "message": "",
             "lastTransitionTime": ago(600)},
            {"type": wl.ADMITTED, "status": "True", "reason": "Admitted", "message": "",
             "lastTransitionTime": ago(600)},
        ]}  # fmt: skip
        worker.workload_store.put(worker_wl)
        # The run's status, mirrored to the manager object while it ran there.
        self.case.obj = self.case.manager.put({**self.obj(), "status": status()})

    async def one_pass(self, workload: Object, record: RecordingRecord) -> Object:
        """One pass over ``workload`` as the reconciler makes it (the steps these sequences reach are carried out,
        the others only decided); the Workload as the pass left it. A loser's removal that fails is left to the
        next pass (the reconciler raises it after the winner's drive, and the pass is retried)."""
        connected: dict[str, Worker] = {c: w for c, w in self.workers.items() if w.connected}
        present = {c: r for c, w in connected.items() if (r := w.workload(self.key)) is not None}
        obj = self.obj()
        group = self.reconciler.snapshots.group(workload, CHECK, self.adapter, obj, list(self.workers), connected,
                                                present)  # fmt: skip
        step = decision.decide(group)
        work = _Pass(workload, CHECK, self.adapter, obj, connected, {})
        runs = Runs(ORIGIN, self._manager, StatusMirror(), None)
        match step:
            case decision.RunOnWinner(winner=winner, losers=losers, deactivate=False):
                for loser in losers:  # ``_run_on_winner``: the losers' copies go first
                    with contextlib.suppress(Exception):
                        await workload_copies.remove(self.workers[loser], PIPELINERUN, KEY, self.key)
                workload = self._recorded(workload, winner)
                await runs.drive(self.reconciler._run_on(work, workload, winner), record)
            case rl.LostThere() | rl.AwaitWorker() | rl.Leave():
                await runs.carry_out(step, self.reconciler._run_on(work, workload, None), record)
        return workload

    async def _manager(self, gvk: Any) -> Objects:
        return self.case.manager  # type: ignore[return-value]  # a LiveObjects, as Runs reads it

    @staticmethod
    def _recorded(workload: Object, winner: str) -> Object:
        """The Workload as ``CheckStatus.set_admitted`` writes it: the check Ready, ``clusterName`` the winner."""
        written = copy.deepcopy(workload)
        written["status"]["admissionChecks"][0].update(state=wl.READY, message=admitted_message(winner))
        written["status"]["clusterName"] = winner
        return written


@pytest.fixture
async def world() -> AsyncIterator[World]:
    config = parse_configuration(CONFIG)
    workers = {"w1": MemoryWorker("w1", origin=ORIGIN, kinds=[PIPELINERUN])}
    api = ApiClient(ClusterAccess(server="http://127.0.0.1:1"))
    reconciler = WorkloadReconciler(config, api, Informer(_Nowhere()), Informer(_Nowhere()), Informer(_Nowhere()),
                                    lambda: dict(workers), {})  # fmt: skip
    try:
        yield World(reconciler, Case(Mode("Kueue"), reconciler.adapters[PIPELINERUN]), workers)
    finally:
        await api.close()


# ------------------------------------------------------------------------------------------------------ finding 1


async def test_a_workload_made_again_is_not_failed_for_the_copy_this_dispatcher_deleted(world: World) -> None:
    """The Workload is deleted (``kubectl delete workload``) while its run runs on w1, and made again at once under
    the same name (the integration re-creates it for the held object); Kueue reserves quota for it before this
    dispatcher's next pass (a backlog, a restart, a failover), so the deleted Workload's pass never happens: the
    first pass sees the new Workload (no eviction history) and, on w1, the earlier Workload's copies, running.

    On ca9d50e: w1 wins with the earlier Workload copy (still admitted); the running object copy is made for
    another admission, so it is deleted as stale (copies.py ``_stale``). Its Workload copy goes with it (its owner is
    gone). The next pass finds nothing on w1 and reads the absence as a deletion by someone else: the manager
    object carries a mirrored status and the new Workload was never evicted (snapshot.py ``ran_there``), so
    ``decision._winner`` returns ``lost_on_worker``: the Workload is finished Failed and never run again, though
    this dispatcher deleted the copy itself. Before ca9d50e the copy was taken as this run's and went on running."""
    first = world.workload("wl-1", RESERVED_1)
    world.running_there("w1", first)
    world.workers["w1"].relist()
    made_again = world.workload("wl-2", RESERVED_2)  # new UID, same name, quota reserved, never evicted
    record = RecordingRecord()

    made_again = await world.one_pass(made_again, record)  # on ca9d50e: w1 wins, its copy is deleted as stale
    if world.case.there() is None:  # its object copy deleted: kube's garbage collector takes the Workload copy
        await world.workers["w1"].workload_store.delete(world.workload_name, NAMESPACE)
    await world.one_pass(made_again, record)

    assert "lost_there" not in record.calls, (
        f"the new Workload is finished Failed for a copy this dispatcher deleted itself: {record.args[-2:]}"
    )


async def test_after_an_eviction_this_dispatcher_missed_the_run_is_not_failed_for_the_copy_it_deleted(
    world: World,
) -> None:
    """The run runs on w1. Kueue evicts its Workload and reserves quota for it again while this dispatcher does not
    look (down, failing over, a backlog; or w1 unreachable while the copies were removed): nothing was removed on
    w1. The next pass sees the Workload admitted again (evicted once) and w1's Workload copy still admitted: w1 wins
    (decision.py ``_the_winner``).

    On ca9d50e the running object copy, made for the first admission, is deleted as stale. The worker's Workload
    copy, adopted by that object, is still in the cache at the next pass (kube's garbage collector has not reached
    it: the deletion's own watch event brings the pass after eventsBatchPeriod, 0.25 s), so ``_run_on`` says the run
    ran there (``adopted_by`` checks the owner's kind and name, not which copy): the missing copy is ``Gone``,
    ``LostThere``, and the Workload is finished Failed "deleted there (not by this dispatcher)", never run again."""
    world.running_there("w1", world.workload("wl-1", RESERVED_1))
    world.workers["w1"].relist()
    again = world.workload("wl-1", RESERVED_2, evictions=1)
    record = RecordingRecord()

    again = await world.one_pass(again, record)  # on ca9d50e: w1 wins, its copy is deleted as stale
    await world.one_pass(again, record)  # within the garbage collector's delay

    assert "lost_there" not in record.calls, (
        f"the run is finished Failed for a copy this dispatcher deleted itself: {record.args[-2:]}"
    )


# ------------------------------------------------------------------------------------------------------ finding 3


async def test_two_admissions_in_one_second_are_two_admissions(world: World) -> None:
    """``lastTransitionTime`` has a resolution of one second. Admitted on w1 at 10:00:00.2, evicted (preempted on
    the manager) and admitted again at 10:00:00.8, to w1 again while the first admission's copy (a final status
    written, cancelled) is held there by a finalizer. Both admissions read ``uid/2026-08-01T10:00:00Z``
    (workload_state.py ``attempt``): the earlier admission's going copy is ``made`` for this one, its final status
    mirrored, and the run Finishes with the earlier admission's verdict. Before ca9d50e the eviction guess
    (``earlier_attempts`` and going) kept it out. Kueue's ``schedulingStats.evictions`` count tells them apart."""
    first = world.workload("wl-1", RESERVED_1)
    second = world.workload("wl-1", RESERVED_1, evictions=1)  # the same second
    case = world.case
    case.attempt = wl.attempt(second)
    dying = case.copy_of(state=status("False", "cancelled by its deletion"), attempt=wl.attempt(first))
    dying["metadata"].update(finalizers=["results.tekton.dev/pipelinerun"], deletionTimestamp=ago(1))
    case.store.put(dying)
    case.worker.relist()

    out = await case.sync(Want.RUN, earlier_attempts=wl.evicted_before(second))

    assert case.manager.sent("patch_status") == [], "the earlier admission's status is mirrored as this one's"
    assert type(out) is copies.Stale, out


async def test_an_earlier_admission_reserved_by_a_kueue_with_a_clock_ahead_is_not_taken_as_a_later_one(
    world: World,
) -> None:
    """``Run.later`` orders admissions by the wall clock of whichever Kueue replica reserved the quota. Admission 1
    reserved by a Kueue leader whose clock is 3 s ahead (10:00:07); evicted; Kueue fails over; admission 2 reserved
    by the new leader at 10:00:05 by its clock. The first admission's copy still on w1 (nothing removed it: see
    finding 1's triggers) is taken as made for a LATER admission: ``Behind``, ``LookAgain`` (requeue 0) on every
    pass: the run is never created, the old copy never removed, the Workload loops at once, for ever."""
    first = world.workload("wl-1", "2026-08-01T10:00:07Z")
    second = world.workload("wl-1", "2026-08-01T10:00:05Z", evictions=1)
    case = world.case
    case.attempt = wl.attempt(second)
    case.store.put(case.copy_of(state=status(), attempt=wl.attempt(first)))
    case.worker.relist()

    out = await case.sync(Want.RUN, earlier_attempts=wl.evicted_before(second))

    assert type(out) is not copies.Behind, "an earlier admission's copy waited on as a later one's, for ever"


# ------------------------------------------------------------------------------------------------------ finding 2


async def test_an_earlier_admissions_copy_left_by_a_loser_removal_before_its_cache_listed_is_collected(
    world: World,
) -> None:
    """w1 was lost past workerLostTimeout while the run ran there; Kueue admitted it again and it runs on w2
    (recorded). w1 comes back: ``connected`` as soon as its Workloads are listed, its PipelineRun cache not yet.
    The pass removes the losers (w1 holds the first admission's Workload copy): ``copies.delete`` finds no object
    in the unlisted cache and sends nothing, ``remove_workload`` deletes the Workload copy. Once the cache lists,
    w1 holds no Workload copy, so it is never a loser again; the garbage collector keeps the copy
    (``KueueGarbage.wants``: a manager Workload of that name exists), though it was made for an earlier admission
    and w1 is not the recorded worker. The first admission's run goes on on w1 beside the second on w2 until the
    Workload ends (our own worker integration leaves a started object without a Workload running)."""
    world.workers["w2"] = MemoryWorker("w2", origin=ORIGIN, kinds=[PIPELINERUN])
    world.running_there("w1", world.workload("wl-1", RESERVED_1))
    second = world.workload("wl-1", RESERVED_2, evictions=1, state=wl.READY, cluster="w2")
    world.running_there("w2", second)
    for worker in world.workers.values():
        worker.relist()
    world.workers["w1"].unlist(PIPELINERUN)  # a moment after the reconnect
    world.reconciler.workloads.store[world.key] = second  # the manager's Workloads, as the collector reads them
    record = RecordingRecord()

    await world.one_pass(second, record)  # w1 (the first admission's Workload copy) a loser of w2
    world.workers["w1"].relist(PIPELINERUN)  # the kind's cache lists
    await world.one_pass(second, record)
    await GarbageCollector(lambda: dict(world.workers), [world.reconciler.garbage]).collect_garbage()

    left = world.workers["w1"].store(PIPELINERUN).peek(NAME, NAMESPACE)
    assert left is None or left["metadata"].get("deletionTimestamp"), (
        "the first admission's copy still runs on w1 beside the second admission's on w2"
    )


# ------------------------------------------------------------------------------------------------------ finding 4


async def test_a_pass_over_a_deleted_objects_workload_does_not_take_the_object_made_again(world: World) -> None:
    """``_object`` finds the Workload's owner by name only. The PipelineRun is deleted and made again under the same
    name (``kubectl replace --force``); its old Workload is not marked deleted yet (kube's garbage collector has
    not reached it) when a pass over it runs (its copy's status changed on w1): the pass drives the NEW object
    under the OLD Workload's name and admission (the old copy is another run's: deleted; then the new object's
    copy is created for the old Workload and runs there, to run again under its own Workload)."""
    old_uid = world.case.obj["metadata"]["uid"]
    old_workload = world.workload("wl-1", RESERVED_1, state=wl.READY, cluster="w1")
    world.case.submit()  # the same name, another UID
    owners = Informer(_Nowhere())
    owners.store[KEY] = world.obj()
    world.reconciler.owners[PIPELINERUN] = owners

    try:
        found: Object | None = await world.reconciler._object(old_workload, CHECK, world.adapter, KEY)
    except LookupError:
        found = None

    assert found is None or found["metadata"]["uid"] == old_uid, (
        "the old Workload's pass drives the object made again, under the old Workload's admission"
    )
