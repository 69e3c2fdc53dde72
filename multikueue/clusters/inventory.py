"""Workers kept from the cluster inventory: which MultiKueueClusters and MultiKueueConfig cluster lists should exist.

Pure decisions, no I/O (``inventory_reconciler.py`` reads the caches and writes what these say), for Kueue's two open
asks: a MultiKueueCluster made for each ClusterProfile a label selector matches (kueue#7716), and a MultiKueueConfig
whose ``spec.clusters`` are the MultiKueueClusters a label selector matches (kueue#8156). Kueue's own objects keep
their shapes, so Kueue reads what is made here as it reads what a person writes.

- A MultiKueueCluster made here carries ``INVENTORY_LABEL: cluster-profile``, is named after its profile, names it
  in ``spec.clusterSource.clusterProfileRef`` and carries the profile's labels (so cluster selectors can use them).
  Only those are ever changed or deleted: one written by hand is left alone, even in a profile's way (said instead).
- A MultiKueueConfig's list is the matching clusters' names, sorted, at most ``MAX_CLUSTERS`` (Kueue's schema). A
  cluster that leaves the list while runs are recorded on it (a Workload's ``status.clusterName``) stays listed
  until they are over or moved: out of the list, Kueue and this dispatcher would retry such a run at once, its copy
  still there; listed but gone, the run waits ``workerLostTimeout`` as on any lost worker.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from multikueue.clusters.inventory_config import ObjectSelector
from multikueue.kube.addresses import MULTIKUEUE_CLUSTERS, MULTIKUEUE_CONFIGS
from multikueue.selectors import Selector, parse

Object = dict[str, Any]

INVENTORY_LABEL = "multikueue.x-k8s.io/inventory"
"""On the MultiKueueClusters and MultiKueueConfigs this controller made: what it made them from."""
FROM_PROFILE = "cluster-profile"
FROM_SELECTOR = "cluster-selector"
MAX_CLUSTERS = 20
"""``MultiKueueConfig.spec.clusters`` ``maxItems`` in Kueue v0.19.2's v1beta2 CRD (and ``minItems`` 1)."""


def selector(spec: ObjectSelector) -> Selector:
    """The configured ``metav1.LabelSelector`` as a matcher (apimachinery's semantics, ``selectors.py``)."""
    return parse(spec.text())


def _labels(obj: Object | None) -> dict[str, str]:
    return dict(((obj or {}).get("metadata") or {}).get("labels") or {})


def _deleting(obj: Object | None) -> bool:
    return bool(((obj or {}).get("metadata") or {}).get("deletionTimestamp"))


def made_here(obj: Object | None, source: str) -> bool:
    return _labels(obj).get(INVENTORY_LABEL) == source


# ------------------------------------------------------------------------------------ MultiKueueClusters


@dataclass(frozen=True)
class CreateCluster:
    body: Object


@dataclass(frozen=True)
class UpdateCluster:
    name: str
    patch: Object  # a JSON merge patch (the caller adds the resourceVersion it read)


@dataclass(frozen=True)
class DeleteCluster:
    name: str
    uid: str


@dataclass(frozen=True)
class NameTaken:
    """A matching profile whose name a MultiKueueCluster not made here already has: nothing is made for it."""

    profile: str

    @property
    def message(self) -> str:
        return (f'MultiKueueCluster "{self.profile}" exists and was not made from this ClusterProfile: it is left '
                f"alone and no worker is made for this profile (rename one of them, or label the MultiKueueCluster "
                f"{INVENTORY_LABEL}={FROM_PROFILE} to hand it over)")  # fmt: skip


@dataclass(frozen=True)
class KeepForRuns:
    """Made here and no longer wanted, but a run is recorded on it: kept until none is."""

    name: str


ClusterStep = CreateCluster | UpdateCluster | DeleteCluster | NameTaken | KeepForRuns


def cluster_labels(profile: Object) -> dict[str, str]:
    """The profile's labels, and the mark of a MultiKueueCluster made from one (a profile cannot set that key)."""
    return {**{k: v for k, v in _labels(profile).items() if k != INVENTORY_LABEL}, INVENTORY_LABEL: FROM_PROFILE}


def wanted_cluster(name: str, profile: Object) -> Object:
    """The MultiKueueCluster for a ClusterProfile, in Kueue's v1beta2 shape."""
    return {
        "apiVersion": MULTIKUEUE_CLUSTERS.api_version,
        "kind": MULTIKUEUE_CLUSTERS.kind,
        "metadata": {"name": name, "labels": cluster_labels(profile)},
        "spec": {"clusterSource": {"clusterProfileRef": {"name": name}}},
    }


def cluster_patch(existing: Object, wanted: Object) -> Object:
    """The merge patch that makes a MultiKueueCluster made here what it should be (``{}`` when it is): its labels
    exactly the wanted ones, its source the profile. Annotations and status are others' (the connection's)."""
    patch: Object = {}
    have, want = _labels(existing), wanted["metadata"]["labels"]
    labels = {k: v for k, v in want.items() if have.get(k) != v} | {k: None for k in have if k not in want}
    if labels:
        patch["metadata"] = {"labels": labels}
    source = (existing.get("spec") or {}).get("clusterSource") or {}
    wanted_source = wanted["spec"]["clusterSource"]
    if source != wanted_source:
        patch["spec"] = {"clusterSource": {**{k: None for k in source if k not in wanted_source}, **wanted_source}}
    return patch


def cluster_step(name: str, profile: Object | None, existing: Object | None, matches: Selector, *,
                 held: bool = False) -> ClusterStep | None:  # fmt: skip
    """What to do about the MultiKueueCluster ``name`` given the ClusterProfile of that name (None: there is none).
    ``held``: a run is recorded on it: one made here is kept until none is, even once its profile goes or stops
    matching (deleted, its connection would go with it, and the run would be retried elsewhere while its copy still
    runs there; kept, it keeps its recorded identity, so a profile made again for another cluster is refused)."""
    wanted = profile is not None and not _deleting(profile) and matches.matches(_labels(profile))
    if existing is not None and not made_here(existing, FROM_PROFILE):
        return NameTaken(name) if wanted else None
    if _deleting(existing):
        return None  # going already: made again, if still wanted, once it is gone
    if not wanted or profile is None:
        if existing is None:
            return None
        return KeepForRuns(name) if held else DeleteCluster(name, str(existing["metadata"].get("uid", "")))
    body = wanted_cluster(name, profile)
    if existing is None:
        return CreateCluster(body)
    patch = cluster_patch(existing, body)
    return UpdateCluster(name, patch) if patch else None


# ------------------------------------------------------------------------------------ MultiKueueConfigs


@dataclass(frozen=True)
class ConfigPlan:
    """A MultiKueueConfig's list as it should be, and why it differs from the matching set."""

    clusters: tuple[str, ...]  # sorted
    matched: int = 0  # MultiKueueClusters the selector matches
    left_out: tuple[str, ...] = ()  # matching, over Kueue's limit
    draining: tuple[str, ...] = ()  # no longer matching (or gone), kept while runs are recorded there


def plan_clusters(clusters: Iterable[Object], matches: Selector, current: Collection[str],
                  holding: Collection[str], *, limit: int = MAX_CLUSTERS) -> ConfigPlan:  # fmt: skip
    """The list of a MultiKueueConfig kept by ``matches``: the matching MultiKueueClusters, and those of ``current``
    that no longer match but hold runs (``holding``), kept first when over ``limit``."""
    matching = sorted(c["metadata"]["name"] for c in clusters if not _deleting(c) and matches.matches(_labels(c)))
    kept = sorted(n for n in set(current) if n in holding)[:limit]  # a run recorded there: never cut
    room = max(limit - len(kept), 0)
    rest = [n for n in matching if n not in kept]
    names = sorted({*kept, *rest[:room]})
    draining = tuple(n for n in kept if n not in matching)
    return ConfigPlan(tuple(names), len(matching), tuple(rest[room:]), draining)


@dataclass(frozen=True)
class CreateConfig:
    body: Object


@dataclass(frozen=True)
class PatchConfig:
    name: str
    clusters: tuple[str, ...]


@dataclass(frozen=True)
class DeleteConfig:
    """Made here and no cluster left for it: Kueue's schema has no empty list, and a MultiKueueConfig that does not
    exist is what "no workers" reads as (its AdmissionCheck inactive, nothing admitted through it)."""

    name: str
    uid: str


@dataclass(frozen=True)
class NoClusters:
    """Written by someone else and no cluster left for it: its last list is left (it cannot be empty), and said."""

    name: str


ConfigStep = CreateConfig | PatchConfig | DeleteConfig | NoClusters


def wanted_config(name: str, clusters: tuple[str, ...]) -> Object:
    return {
        "apiVersion": MULTIKUEUE_CONFIGS.api_version,
        "kind": MULTIKUEUE_CONFIGS.kind,
        "metadata": {"name": name, "labels": {INVENTORY_LABEL: FROM_SELECTOR}},
        "spec": {"clusters": list(clusters)},
    }


def listed(config: Object | None) -> list[str]:
    return [str(n) for n in ((config or {}).get("spec") or {}).get("clusters") or []]


def config_step(name: str, plan: ConfigPlan, existing: Object | None) -> ConfigStep | None:
    """What to do about the MultiKueueConfig ``name`` kept by selector."""
    if _deleting(existing):
        return None
    if not plan.clusters:
        if existing is None:
            return None
        if made_here(existing, FROM_SELECTOR):
            return DeleteConfig(name, str(existing["metadata"].get("uid", "")))
        return NoClusters(name)
    if existing is None:
        return CreateConfig(wanted_config(name, plan.clusters))
    return PatchConfig(name, plan.clusters) if listed(existing) != list(plan.clusters) else None


def open_to_new_runs(listed: Iterable[str], clusters: Callable[[str], Object | None], matches: Selector,
                     recorded: str) -> list[str]:  # fmt: skip
    """The clusters of a selector-kept list a run may use: those the selector still matches, and the run's own
    recorded worker. A cluster listed only for the runs recorded there (``ConfigPlan.draining``: deselected, deleting
    or gone) takes no new run and keeps no waiting run's copy: nominated, it would keep a deselected cluster busy for
    as long as runs keep arriving."""
    return [n for n in listed if n == recorded or (not _deleting(c := clusters(n)) and c is not None
                                                   and matches.matches(_labels(c)))]  # fmt: skip


# ------------------------------------------------------------------------------------ runs recorded on a cluster


ANY_CLUSTER = "*"
"""``recorded_cluster``'s value for a run whose eviction is under way: Kueue clears ``clusterName`` in the eviction's
own write while the quota is still reserved, and the run may still run where it was until the dispatcher has it
stopped and removed there; which cluster that is, the Workload no longer says."""


def recorded_cluster(workload: Object) -> list[str]:
    """A Workload's recorded worker (``status.clusterName``) while its run is not finished, as an index value (a
    finished Workload keeps its clusterName for as long as it exists: it holds nothing there); ``ANY_CLUSTER`` while
    its eviction is under way (evicted, its quota not yet released): every cluster is held until the release."""
    status = workload.get("status") or {}
    true = {c.get("type") for c in status.get("conditions") or [] if c.get("status") == "True"}
    name = status.get("clusterName")
    if "Finished" in true:
        return []
    if name:
        return [str(name)]
    return [ANY_CLUSTER] if {"Evicted", "QuotaReserved"} <= true else []


def under_config(workload: Object, config: str, config_of_check: Callable[[str], str | None]) -> bool:
    """Whether one of the Workload's admission checks takes its workers from the MultiKueueConfig ``config``."""
    checks = (workload.get("status") or {}).get("admissionChecks") or []
    return any(config_of_check(str(c.get("name", ""))) == config for c in checks)


def reports(plan: ConfigPlan, step: ConfigStep | None, text: str) -> Mapping[str, tuple[str, str] | None]:
    """What to tell on the MultiKueueConfig, by reason: (type, message), or None while it does not hold."""
    over = (f'{plan.matched} MultiKueueClusters match clusterSelector "{text}" and a MultiKueueConfig lists at most '
            f"{MAX_CLUSTERS}: left out {list(plan.left_out)}")  # fmt: skip
    staying = (f"no longer selected, kept in the list while runs are recorded there, for those runs only (no new run "
               f"goes there; each waits workerLostTimeout if its worker is gone): {list(plan.draining)}")  # fmt: skip
    none = (
        f'no MultiKueueCluster matches clusterSelector "{text}"; this MultiKueueConfig was not made by the '
        "dispatcher, so its last list is left (Kueue needs at least one cluster): delete it, or label a cluster"
    )
    return {
        "TooManyClusters": ("Warning", over) if plan.left_out else None,
        "ClustersKeptForRuns": ("Normal", staying) if plan.draining else None,
        "NoMatchingClusters": ("Warning", none) if isinstance(step, NoClusters) else None,
    }
