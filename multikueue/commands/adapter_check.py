"""``multikueue adapter check``: what the dispatcher would do with one object, offline.

Given the configuration and a manager object (and optionally the worker's copy as it is now), it renders the
worker copy, the spec fields that would be carried over, the status patch the manager object would get, and each
predicate's verdict, and explains every problem it finds, so a per-kind adapter can be tried before it is rolled
out. Pure: the CLI reads the files, this module only computes the report.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import yaml

from multikueue import jsonpaths
from multikueue.config import Configuration, Predicate
from multikueue.dispatch.adapter import GenericAdapter
from multikueue.kube.addresses import GroupVersionKind
from multikueue.mergepatch import apply_merge_patch
from multikueue.owners import workload_name
from multikueue.predicates import holds

Object = dict[str, Any]


@dataclass
class Report:
    sections: list[tuple[str, str]] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def add(self, title: str, body: Any) -> None:
        text = body if isinstance(body, str) else yaml.safe_dump(body, sort_keys=False).rstrip()
        self.sections.append((title, text))

    def render(self) -> str:
        out = []
        for title, body in self.sections:
            out.append(f"## {title}\n" + "\n".join(f"  {line}" for line in body.splitlines()))
        if self.problems:
            out.append("## problems\n" + "\n".join(f"  - {p}" for p in self.problems))
        else:
            out.append("## problems\n  none")
        return "\n\n".join(out) + "\n"


def _gvk_of(obj: Object, what: str, report: Report) -> GroupVersionKind | None:
    api_version, kind = obj.get("apiVersion"), obj.get("kind")
    if not isinstance(api_version, str) or "/" not in api_version or not isinstance(kind, str) or not kind:
        report.problems.append(f"{what}: needs apiVersion group/version and kind, got {api_version!r} and {kind!r}")
        return None
    group, version = api_version.split("/", 1)
    return GroupVersionKind(group, version, kind)


def _verdict(predicate: Predicate | None, obj: Object) -> str:
    if predicate is None:
        return "not configured"
    found = jsonpaths.find(obj, predicate.path)
    return f"{'holds' if holds(predicate, obj) else 'does not hold'} ({predicate.path} = {found or 'nothing'})"


def _not_configured(config: Configuration, gvk: GroupVersionKind, configured: dict[GroupVersionKind, str]) -> str:
    """Why an object's kind is not dispatched, in the words of the mode it would have had."""
    spelt = f"{gvk.kind}.{gvk.version}.{gvk.group}"
    alike = next((g for g in configured if str(g).lower() == str(gvk).lower()), None)
    if alike is not None:
        return (
            f'object: kind {spelt} is configured as "{configured[alike]}": kinds are case-sensitive, so the '
            f"dispatcher would not take this object (write {spelt} in multiKueue.externalFrameworks)"
        )
    names = ", ".join(configured.values()) or "none"
    return (
        f"object: kind {spelt} is not in multiKueue.externalFrameworks ({names}); the dispatcher would not take it "
        "(in Kueue mode its Workload is rejected: No multikueue adapter found; in Direct mode it is never placed)"
    )


def check(config: Configuration, obj: Object, worker_obj: Object | None = None) -> Report:
    """The report for ``obj`` (the manager object) and, if given, ``worker_obj`` (the worker's copy)."""
    report = Report()
    if not isinstance(obj, dict) or not isinstance(obj.get("metadata"), dict):
        report.problems.append("object: not a Kubernetes object (a mapping with metadata)")
        return report
    gvk = _gvk_of(obj, "object", report)
    if gvk is None:
        return report
    configured = {f.gvk: f.name for f in config.multi_kueue.external_frameworks}
    if gvk not in configured:
        report.problems.append(_not_configured(config, gvk, configured))
        return report
    meta = obj["metadata"]
    for required in ("name", "namespace"):
        if not meta.get(required):
            report.problems.append(f"object: metadata.{required} is missing")
    options = config.adapter(gvk)
    adapter = GenericAdapter(gvk, config.dispatcher.managed_by, options)
    managed, reason = adapter.is_managed(obj)
    report.add("managedBy", f"{options.managed_by_path}: {'accepted' if managed else 'refused: ' + reason}")
    if not managed:
        outcome = "it would be left alone" if options.mode == "Direct" else "its Workload would be Rejected"
        report.problems.append(f"object: {reason}; {outcome} and nothing sent to a worker")
    for path in options.create.remove:
        if not jsonpaths.find(obj, path):
            report.problems.append(f"create.remove: {path} matches nothing in this object (a typo?)")

    named = {
        **obj,
        "metadata": {**meta, "name": meta.get("name", "?"), "namespace": meta.get("namespace", "?")},
    }
    prebuilt = workload_name(named["metadata"]["name"], str(meta.get("uid") or ""), gvk)
    copy = adapter.worker_copy(named, origin=config.multi_kueue.origin, workload_name=prebuilt)
    where = "the placed worker (Direct mode)" if options.mode == "Direct" else "the admitting worker"
    report.add(f"worker copy (created on {where})", copy)
    report.add("suspended (status sync waits while this holds)", _verdict(options.suspended, obj))

    worker = worker_obj if worker_obj is not None else copy
    spec_patch = adapter.spec_patch(obj, worker)
    against = "the worker object given" if worker_obj is not None else "the copy above"
    report.add(f"spec sync (merge patch to the worker, against {against})", spec_patch or "nothing to carry")
    if worker_obj is None:
        report.add("status mapping", "give the worker object (--worker FILE) to see the status patch")
        return report
    _status_sections(report, adapter, gvk, obj, worker_obj)
    return report


def _status_sections(
    report: Report, adapter: GenericAdapter, gvk: GroupVersionKind, obj: Object, worker_obj: Object
) -> None:
    """What the worker object given would do to the manager's: the status patch and the run's end."""
    worker_gvk = _gvk_of(worker_obj, "worker object", report)
    if worker_gvk is not None and worker_gvk != gvk:
        report.problems.append(f"worker object: kind {worker_gvk} differs from the manager object's {gvk}")
    patch = adapter.status_patch(obj, worker_obj)
    if adapter.suspended(obj):
        report.add("status mapping", "deferred: the manager object is suspended")
    else:
        report.add("status mapping (merge patch to the manager's /status)", patch or "already in sync")
        if patch:
            report.add("manager status after the patch", apply_merge_patch(obj, patch).get("status"))
    options = adapter.options
    report.add("finished (on the worker object)", _verdict(options.finished, worker_obj))
    if options.failed is not None:
        report.add("failed (on the worker object)", _verdict(options.failed, worker_obj))
