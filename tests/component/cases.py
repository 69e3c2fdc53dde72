"""One run and one worker for the component tests: the run's manager object in an in-memory manager, its worker in
memory (memory_worker.py), and ``copies.sync`` called as each mode's reconciler calls it."""

from __future__ import annotations

import datetime
from dataclasses import dataclass, field
from typing import Any

import pytest

from multikueue.config import parse_configuration
from multikueue.dispatch import copies
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.dispatch.copies import CopyOutcome, Want
from multikueue.dispatch.mirror import StatusMirror
from multikueue.kube.addresses import GroupVersionKind
from multikueue.labels import MANAGER_UID_ANNOTATION, ORIGIN_LABEL
from multikueue.runtime.informer import ObjectKey
from tests.component.memory_worker import MemoryObjects, MemoryWorker, manager_objects

Object = dict[str, Any]
PIPELINERUN = GroupVersionKind("tekton.dev", "v1", "PipelineRun")
ORIGIN = "multikueue-test"
NAMESPACE, NAME = "team-a", "build"
KEY = ObjectKey(NAMESPACE, NAME)
MANAGED_BY = "kueue.x-k8s.io/multikueue"
PLACEMENT = "MultiKueuePlacement"  # Direct mode's own condition on the manager object, kept as it is
SUCCEEDED = '.status.conditions[?type=="Succeeded"].status'

ADOPT = "conflictPolicy: Adopt"
SUSPENDED = "suspended: {path: .spec.status, equals: PipelineRunPending}"
FINISHED = f"finished: {{path: '{SUCCEEDED}', notIn: [Unknown]}}\nfailed: {{path: '{SUCCEEDED}', equals: 'False'}}"
SPEC_SYNC = "specSync: [{path: .spec.status, values: [Cancelled]}]"


def status(state: str = "Unknown", message: str = "running", **more: Any) -> Object:
    """A Tekton-like status: ``Succeeded`` Unknown while it runs, True or False once over."""
    condition = {"type": "Succeeded", "status": state, "reason": "Running", "message": message,
                 "lastTransitionTime": "2026-08-01T10:00:02Z"}  # fmt: skip
    return {"startTime": "2026-08-01T10:00:01Z", "conditions": [condition], **more}


@dataclass(frozen=True)
class Mode:
    """How each mode calls ``sync`` (dispatch/reconciler.py in Kueue mode, dispatch/direct.py in Direct mode)."""

    name: str

    @property
    def direct(self) -> bool:
        return self.name == "Direct"

    def adapter(self, *options: str) -> GenericAdapter:
        lines = "".join(f"\n    {line}" for option in options for line in option.splitlines())
        config = parse_configuration(f"""
multiKueue: {{externalFrameworks: [{{name: PipelineRun.v1.tekton.dev}}]}}
dispatcher:
  adapters:
  - name: PipelineRun.v1.tekton.dev
    mode: {self.name}{lines}
""")
        return GenericAdapter(PIPELINERUN, MANAGED_BY, config.adapter(PIPELINERUN))

    def workload_name(self, obj: Object) -> str:
        """The prebuilt Workload's name, as Kueue makes it from the owner's UID (none in Direct mode)."""
        return "" if self.direct else f"pipelinerun-{NAME}-{obj['metadata']['uid'][:5]}"

    def attempt(self, workload_uid: str = "wl-1", reserved_at: str = "2026-08-01T10:00:00Z", evictions: int = 0) -> str:
        """The admission a copy is made for (``workload_state.attempt``; none in Direct mode)."""
        return "" if self.direct else f"{workload_uid}/{reserved_at}/{evictions}"

    @property
    def keep_conditions(self) -> frozenset[str]:
        return frozenset({PLACEMENT})  # as ``runs.Runs`` passes in both modes (a Kueue-mode object has none)

    def own_status(self) -> Object | None:
        """What the dispatcher itself keeps in the manager object's status: Direct mode's placement condition."""
        placed = {"type": PLACEMENT, "status": "True", "reason": "Placed", "message": "worker w1"}
        return {"conditions": [placed]} if self.direct else None


MODES = [pytest.param(Mode("Kueue"), id="Kueue"), pytest.param(Mode("Direct"), id="Direct")]


@dataclass
class Case:
    """One run (its manager object) and one worker, in a mode; ``sync`` called as that mode calls it."""

    mode: Mode
    adapter: GenericAdapter
    worker: MemoryWorker = field(default_factory=lambda: MemoryWorker("w1", origin=ORIGIN, kinds=[PIPELINERUN]))
    manager: MemoryObjects = field(default_factory=lambda: manager_objects(PIPELINERUN))
    mirror: StatusMirror = field(default_factory=StatusMirror)
    obj: Object = field(default_factory=dict)
    attempt: str = ""  # the admission the run is in now (Kueue mode): the mode's first one unless given

    def __post_init__(self) -> None:
        self.attempt = self.attempt or self.mode.attempt()
        if not self.obj:
            self.obj = self.submit()

    def submit(self, **spec: Any) -> Object:
        """The run on the manager (again: a same-named later run, with another UID)."""
        self.manager.objects.clear()
        body: Object = {"apiVersion": "tekton.dev/v1", "kind": "PipelineRun",
                        "metadata": {"name": NAME, "namespace": NAMESPACE},
                        "spec": {"managedBy": MANAGED_BY, "pipelineRef": {"name": "p"}, **spec}}  # fmt: skip
        if (own := self.mode.own_status()) is not None:
            body["status"] = own
        self.obj = self.manager.put(body)
        return self.obj

    @property
    def store(self) -> MemoryObjects:
        return self.worker.store(PIPELINERUN)

    def copy_of(self, run: Object | None = None, *, state: Object | None = None, ours: bool = True,
                attempt: str | None = None) -> Object:  # fmt: skip
        """The copy the dispatcher makes of ``run`` (this case's by default) in ``attempt`` (this case's by default),
        with a status the worker wrote; not labelled with this origin unless ``ours``."""
        run = run or self.obj
        body = self.adapter.worker_copy(run, origin=ORIGIN, workload_name=self.mode.workload_name(run),
                                        attempt=self.attempt if attempt is None else attempt)  # fmt: skip
        if not ours:
            del body["metadata"]["labels"][ORIGIN_LABEL]
        if state is not None:
            body["status"] = state
        return body

    def earlier_run(self) -> Object:
        """A same-named run before this one: the same name, another UID (and so another prebuilt Workload)."""
        return {**self.obj, "metadata": {**self.obj["metadata"], "uid": "0ld0ld00-0000-0000-0000-000000000000"}}

    def there(self) -> Object | None:
        return self.store.peek(NAME, NAMESPACE)

    def manager_status(self) -> Object | None:
        found = self.manager.peek(NAME, NAMESPACE)
        assert found is not None
        return found.get("status")

    async def sync(self, want: Want = Want.RUN, *, ran_there: bool = False, earlier_attempts: bool = False
                   ) -> CopyOutcome:  # fmt: skip
        """``sync`` as ``runs.Runs`` calls it for the mode."""
        return await copies.sync(
            self.worker, self.adapter, self.obj, want=want, origin=ORIGIN, manager=self.manager, mirror=self.mirror,
            workload_name=self.mode.workload_name(self.obj), attempt=self.attempt, ran_there=ran_there,
            earlier_attempts=earlier_attempts,
            keep_conditions=self.mode.keep_conditions,
        )  # fmt: skip


def made_for(copy: Object | None, run: Object) -> bool:
    annotations = ((copy or {}).get("metadata") or {}).get("annotations") or {}
    return bool(annotations.get(MANAGER_UID_ANNOTATION) == run["metadata"]["uid"])


def mirrored(case: Case, worker_status: Object) -> Object:
    """The manager's status once the copy's is mirrored: the copy's, with the dispatcher's own conditions kept."""
    own = (case.mode.own_status() or {}).get("conditions") or []
    return {**worker_status, "conditions": worker_status["conditions"] + own} if own else worker_status


def ago(seconds: float) -> str:
    then = datetime.datetime.now(datetime.UTC) - datetime.timedelta(seconds=seconds)
    return then.strftime("%Y-%m-%dT%H:%M:%SZ")
