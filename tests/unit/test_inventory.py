"""The inventory's decisions (``clusters/inventory.py``), pure: which MultiKueueClusters the ClusterProfiles make, what
a MultiKueueConfig kept by selector lists, and the configuration section that asks for them."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from multikueue.clusters.inventory import (
    ANY_CLUSTER,
    FROM_PROFILE,
    FROM_SELECTOR,
    INVENTORY_LABEL,
    MAX_CLUSTERS,
    ConfigPlan,
    CreateCluster,
    CreateConfig,
    DeleteCluster,
    DeleteConfig,
    KeepForRuns,
    NameTaken,
    NoClusters,
    PatchConfig,
    UpdateCluster,
    cluster_step,
    config_step,
    plan_clusters,
    recorded_cluster,
    reports,
    selector,
    under_config,
)
from multikueue.clusters.inventory_config import ObjectSelector
from multikueue.config import ConfigError, parse_configuration
from multikueue.selectors import Selector

Object = dict[str, Any]
ACCESS = """
multiKueue:
  clusterProfile:
    accessProviders:
    - {name: fleet, execConfig: {apiVersion: client.authentication.k8s.io/v1, command: /plugin, interactiveMode: Never}}
"""
OURS = {INVENTORY_LABEL: FROM_PROFILE}


def obj(name: str, labels: dict[str, str] | None = None, *, deleting: bool = False, **spec: Any) -> Object:
    meta: Object = {"name": name, "uid": f"uid-{name}", "resourceVersion": "7", "labels": dict(labels or {})}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-27T10:00:00Z"
    return {"metadata": meta, "spec": spec}


def made(name: str, labels: dict[str, str] | None = None, **kwargs: Any) -> Object:
    """A MultiKueueCluster as this controller makes it from the profile ``name``."""
    return obj(name, {**(labels or {}), **OURS}, clusterSource={"clusterProfileRef": {"name": name}}, **kwargs)


def sel(text: str) -> Selector:
    """A ``metav1.LabelSelector`` written as in the configuration, as the inventory matches with it."""
    return selector(ObjectSelector.model_validate(yaml.safe_load(text)))


# ------------------------------------------------------------------------------------ the configuration


def test_the_section_reads_kueues_label_selector_shape() -> None:
    config = parse_configuration(ACCESS + """
dispatcher:
  inventory:
    clusterProfiles:
      selector:
        matchLabels: {x-k8s.io/cluster-manager: fleet}
        matchExpressions: [{key: region, operator: In, values: [us, eu]}, {key: legacy, operator: DoesNotExist}]
    multiKueueConfigs:
    - {name: gpu, clusterSelector: {matchLabels: {gpu: "true"}}}
    - {name: everything, clusterSelector: {}}
""")  # fmt: skip
    inventory = config.dispatcher.inventory
    assert inventory is not None
    assert inventory.cluster_profiles is not None
    assert inventory.cluster_profiles.selector.text() == "x-k8s.io/cluster-manager=fleet,region in (eu,us),!legacy"
    assert [(c.name, c.cluster_selector.text()) for c in inventory.multi_kueue_configs] == [
        ("gpu", "gpu=true"), ("everything", ""),
    ]  # fmt: skip
    assert parse_configuration("").dispatcher.inventory is None  # off unless asked for


@pytest.mark.parametrize(
    ("section", "expected"),
    [
        ("{clusterProfiles: {}}", "dispatcher.inventory.clusterProfiles.selector: Field required"),
        ("{multiKueueConfigs: [{name: Fleet, clusterSelector: {}}]}",
         "dispatcher.inventory.multiKueueConfigs[0].name: must be a MultiKueueConfig name (a DNS subdomain, such as "
         "fleet-gpu), got 'Fleet'"),
        ("{multiKueueConfigs: [{name: a}]}",
         "dispatcher.inventory.multiKueueConfigs[0].clusterSelector: Field required"),
        ("{multiKueueConfigs: [{name: a, clusterSelector: {}}, {name: a, clusterSelector: {}}]}",
         "dispatcher.inventory.multiKueueConfigs: duplicate names ['a']"),
        ("{multiKueueConfigs: [{name: a, clusterSelector: {matchExpressions: [{key: k, operator: in, values: [x]}]}}]}",
         "dispatcher.inventory.multiKueueConfigs[0].clusterSelector.matchExpressions[0].operator: Input should be "
         "'In', 'NotIn', 'Exists' or 'DoesNotExist' (got 'in')"),
        ("{multiKueueConfigs: [{name: a, clusterSelector: {matchExpressions: [{key: k, operator: NotIn}]}}]}",
         "dispatcher.inventory.multiKueueConfigs[0].clusterSelector.matchExpressions[0].values: must be non-empty "
         "with operator NotIn"),
        ("{multiKueueConfigs: [{name: a, clusterSelector: {matchExpressions: [{key: k, operator: Exists, "
         "values: [x]}]}}]}",
         "dispatcher.inventory.multiKueueConfigs[0].clusterSelector.matchExpressions[0].values: must be empty with "
         "operator Exists, got ['x']"),
        ("{multiKueueConfigs: [{name: a, clusterSelector: {matchLabels: {k: 'two words'}}}]}",
         "dispatcher.inventory.multiKueueConfigs[0].clusterSelector.matchLabels.k: must be a label value "
         "(63 characters of [A-Za-z0-9-_.]), got 'two words'"),
        ("{multiKueueConfigs: [{name: a, clusterSelector: {matchLabels: {'Example.com/k': x}}}]}",
         "dispatcher.inventory.multiKueueConfigs[0].clusterSelector.matchLabels.Example.com/k.[key]: must be a label "
         "key such as example.com/pool or pool, got 'Example.com/k'"),
        ("{multiKueueConfigs: [{name: a, clusterSelector: {matchLabel: {k: v}}}]}",
         "dispatcher.inventory.multiKueueConfigs[0].clusterSelector.matchLabel: Extra inputs are not permitted"),
    ],
)  # fmt: skip
def test_a_bad_section_is_one_line_naming_the_field_and_value(section: str, expected: str) -> None:
    with pytest.raises(ConfigError) as error:
        parse_configuration(ACCESS + f"dispatcher: {{inventory: {section}}}")
    assert error.value.problems == [expected]


def test_clusters_from_profiles_need_an_access_provider_to_reach_them() -> None:
    with pytest.raises(ConfigError) as error:
        parse_configuration("dispatcher: {inventory: {clusterProfiles: {selector: {}}}}")
    assert error.value.problems == [
        "dispatcher.inventory.clusterProfiles: the MultiKueueClusters made from ClusterProfiles are reached through "
        "multiKueue.clusterProfile.accessProviders, and none is configured"
    ]
    parse_configuration("dispatcher: {inventory: {multiKueueConfigs: [{name: a, clusterSelector: {}}]}}")  # no need


@pytest.mark.parametrize(
    ("text", "labels", "matches"),
    [
        ("{}", {}, True),
        ("{matchLabels: {pool: batch}}", {"pool": "batch", "x": "y"}, True),
        ("{matchLabels: {pool: batch}}", {"pool": "gpu"}, False),
        ("{matchLabels: {pool: batch}}", {}, False),
        ("{matchExpressions: [{key: region, operator: In, values: [eu, us]}]}", {"region": "us"}, True),
        ("{matchExpressions: [{key: region, operator: In, values: [eu, us]}]}", {"region": "ap"}, False),
        ("{matchExpressions: [{key: region, operator: NotIn, values: [eu]}]}", {}, True),  # a missing key: not in
        ("{matchExpressions: [{key: region, operator: NotIn, values: [eu]}]}", {"region": "eu"}, False),
        ("{matchExpressions: [{key: gpu, operator: Exists}]}", {"gpu": ""}, True),
        ("{matchExpressions: [{key: gpu, operator: DoesNotExist}]}", {"gpu": "a100"}, False),
        ("{matchLabels: {pool: batch}, matchExpressions: [{key: gpu, operator: Exists}]}", {"pool": "batch"}, False),
    ],
)
def test_selectors_match_as_kubernetes_matches_them(text: str, labels: dict[str, str], matches: bool) -> None:
    assert sel(text).matches(labels) is matches


# ------------------------------------------------------------------------------------ MultiKueueClusters


EU = sel("{matchLabels: {region: eu}}")


def test_a_selected_profile_gets_a_multikueuecluster_of_its_name_with_its_labels() -> None:
    profile = obj("east", {"region": "eu", "x-k8s.io/cluster-manager": "ocm"})
    step = cluster_step("east", profile, None, EU)
    assert step == CreateCluster({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueCluster",
        "metadata": {"name": "east", "labels": {"region": "eu", "x-k8s.io/cluster-manager": "ocm", **OURS}},
        "spec": {"clusterSource": {"clusterProfileRef": {"name": "east"}}},
    })  # fmt: skip


@pytest.mark.parametrize(
    ("profile", "existing"),
    [
        (None, None),  # nothing either way
        (obj("east", {"region": "us"}), None),  # not selected
        (obj("east", {"region": "eu"}), made("east", {"region": "eu"})),  # as it should be
        (obj("east", {"region": "us"}), obj("east", {"region": "us"})),  # someone's own, not selected: not ours to say
        (obj("east", {"region": "eu"}), made("east", {"region": "eu"}, deleting=True)),  # going: made again once gone
    ],
)
def test_nothing_to_do(profile: Object | None, existing: Object | None) -> None:
    assert cluster_step("east", profile, existing, EU) is None


@pytest.mark.parametrize(
    "profile",
    [None, obj("east", {"region": "us"}), obj("east", {"region": "eu"}, deleting=True)],
    ids=["deleted", "no longer selected", "being deleted"],
)
def test_a_profile_gone_or_unselected_takes_its_multikueuecluster_along(profile: Object | None) -> None:
    assert cluster_step("east", profile, made("east", {"region": "eu"}), EU) == DeleteCluster("east", "uid-east")


@pytest.mark.parametrize("profile", [None, obj("east", {"region": "us"})], ids=["deleted", "no longer selected"])
def test_a_multikueuecluster_a_run_is_recorded_on_is_kept_until_none_is(profile: Object | None) -> None:
    """Deleted, its connection would go with it and the run be retried elsewhere while its copy still ran there."""
    assert cluster_step("east", profile, made("east", {"region": "eu"}), EU, held=True) == KeepForRuns("east")


def test_labels_follow_the_profile_exactly() -> None:
    existing = made("east", {"region": "eu", "tier": "gold", "old": "x"})
    step = cluster_step("east", obj("east", {"region": "eu", "tier": "silver", "new": "y"}), existing, EU)
    assert step == UpdateCluster("east", {"metadata": {"labels": {"tier": "silver", "new": "y", "old": None}}})


def test_a_profile_cannot_take_the_mark_of_what_was_made_here() -> None:
    profile = obj("east", {"region": "eu", INVENTORY_LABEL: "something-else"})
    assert cluster_step("east", profile, made("east", {"region": "eu"}), EU) is None


def test_a_source_changed_by_hand_is_put_back() -> None:
    existing = made("east", {"region": "eu"})
    existing["spec"]["clusterSource"] = {"kubeConfig": {"location": "s", "locationType": "Secret"}}
    step = cluster_step("east", obj("east", {"region": "eu"}), existing, EU)
    assert step == UpdateCluster(
        "east", {"spec": {"clusterSource": {"kubeConfig": None, "clusterProfileRef": {"name": "east"}}}}
    )


def test_a_multikueuecluster_written_by_hand_is_never_touched_and_is_said() -> None:
    hand = obj("east", {"team": "a"}, clusterSource={"kubeConfig": {"location": "east-kubeconfig"}})
    step = cluster_step("east", obj("east", {"region": "eu"}), hand, EU)
    assert step == NameTaken("east")
    assert isinstance(step, NameTaken)
    assert step.message.startswith('MultiKueueCluster "east" exists and was not made from this ClusterProfile')
    assert cluster_step("east", None, hand, EU) is None  # no profile: not ours either


# ------------------------------------------------------------------------------------ MultiKueueConfigs


BATCH = sel("{matchLabels: {pool: batch}}")


def test_the_list_is_the_selected_clusters_sorted() -> None:
    clusters = [obj("c", {"pool": "batch"}), obj("a", {"pool": "batch"}), obj("b", {"pool": "gpu"}),
                obj("d", {"pool": "batch"}, deleting=True)]  # fmt: skip
    assert plan_clusters(clusters, BATCH, current=[], holding=[]) == ConfigPlan(("a", "c"), matched=2)


def test_a_cluster_that_leaves_stays_listed_while_runs_are_recorded_there() -> None:
    clusters = [obj("a", {"pool": "batch"}), obj("b", {"pool": "gpu"})]  # b relabelled; c deleted
    plan = plan_clusters(clusters, BATCH, current=["a", "b", "c"], holding=["c"])
    assert plan == ConfigPlan(("a", "c"), matched=1, draining=("c",))
    # Not listed before: never added for its runs (they are another list's).
    assert plan_clusters(clusters, BATCH, current=["a"], holding=["b"]).clusters == ("a",)


def test_kueues_limit_leaves_the_last_names_out_and_never_a_cluster_kept_for_runs() -> None:
    clusters = [obj(f"w{i:02}", {"pool": "batch"}) for i in range(MAX_CLUSTERS + 2)]
    plan = plan_clusters(clusters, BATCH, current=["gone"], holding=["gone"])
    assert len(plan.clusters) == MAX_CLUSTERS
    assert "gone" in plan.clusters
    assert plan.left_out == ("w19", "w20", "w21")
    assert plan.matched == MAX_CLUSTERS + 2


def test_what_the_config_becomes() -> None:
    ours = {INVENTORY_LABEL: FROM_SELECTOR}
    plan = ConfigPlan(("a", "b"), matched=2)
    assert config_step("fleet", plan, None) == CreateConfig({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "MultiKueueConfig",
        "metadata": {"name": "fleet", "labels": ours}, "spec": {"clusters": ["a", "b"]},
    })  # fmt: skip
    assert config_step("fleet", plan, obj("fleet", clusters=["a", "b"])) is None
    assert config_step("fleet", plan, obj("fleet", clusters=["b", "a"])) == PatchConfig("fleet", ("a", "b"))
    assert config_step("fleet", plan, obj("fleet", clusters=["a"])) == PatchConfig("fleet", ("a", "b"))
    assert config_step("fleet", plan, obj("fleet", deleting=True, clusters=["a"])) is None
    empty = ConfigPlan(())
    assert config_step("fleet", empty, None) is None  # Kueue's schema has no empty list: nothing to make
    assert config_step("fleet", empty, obj("fleet", ours, clusters=["a"])) == DeleteConfig("fleet", "uid-fleet")
    assert config_step("fleet", empty, obj("fleet", clusters=["a"])) == NoClusters("fleet")  # someone's own


def test_what_is_told_on_the_config() -> None:
    plan = ConfigPlan(("a", "gone"), matched=23, left_out=("x", "y", "z"), draining=("gone",))
    told = reports(plan, PatchConfig("fleet", plan.clusters), "pool=batch")
    assert told["TooManyClusters"] == (
        "Warning",
        '23 MultiKueueClusters match clusterSelector "pool=batch" and a MultiKueueConfig lists at most 20: '
        "left out ['x', 'y', 'z']",
    )
    assert told["ClustersKeptForRuns"] == ("Normal", "no longer selected, kept in the list while runs are recorded "
                                                     "there, for those runs only (no new run goes there; each waits "
                                                     "workerLostTimeout if its worker is gone): ['gone']")  # fmt: skip
    assert told["NoMatchingClusters"] is None
    quiet = reports(ConfigPlan(("a",), matched=1), None, "pool=batch")
    assert set(quiet.values()) == {None}  # each report is withdrawn once it no longer holds
    none = reports(ConfigPlan(()), NoClusters("fleet"), "pool=batch")["NoMatchingClusters"]
    assert none is not None
    assert none[1].startswith('no MultiKueueCluster matches clusterSelector "pool=batch"')


def test_the_runs_a_cluster_holds_are_found_through_their_checks() -> None:
    workload = {"status": {"clusterName": "east", "admissionChecks": [{"name": "other"}, {"name": "mk"}]}}
    configs = {"mk": "fleet", "other": None}
    assert recorded_cluster(workload) == ["east"]
    assert recorded_cluster({"status": {}}) == []
    assert under_config(workload, "fleet", configs.get)
    assert not under_config(workload, "gpu", configs.get)


def true(kind: str) -> Object:
    return {"type": kind, "status": "True"}


def test_a_run_whose_eviction_is_under_way_holds_every_cluster() -> None:
    """Kueue clears ``clusterName`` in the eviction's own write, its quota still reserved: the run may still run
    where it was until the dispatcher has it stopped there. Taken as recorded nowhere, a deselected cluster it ran
    on was deleted at once, its connection with it, and nothing stopped or removed the run there."""
    evicting = {"status": {"conditions": [true("QuotaReserved"), true("Evicted")]}}
    assert recorded_cluster(evicting) == [ANY_CLUSTER]
    released = {"status": {"conditions": [{"type": "QuotaReserved", "status": "False"}, true("Evicted")]}}
    assert recorded_cluster(released) == []
    finished = {"status": {"conditions": [true("QuotaReserved"), true("Evicted"), true("Finished")]}}
    assert recorded_cluster(finished) == []
