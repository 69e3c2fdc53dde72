from __future__ import annotations

import pytest

from multikueue.config import (
    DEFAULT_CONTROLLER_NAME,
    DISPATCHER_INCREMENTAL,
    KUEUE_MULTIKUEUE_CONTROLLER,
    ConfigError,
    parse_configuration,
    parse_duration,
)
from multikueue.kube.addresses import GroupVersionKind

KUEUE_TEXT = """
apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
integrations:
  frameworks: ["batch/job"]
  externalFrameworks: ["PipelineRun.v1.tekton.dev"]
featureGates:
  MultiKueueAdaptersForCustomJobs: true
multiKueue:
  gcInterval: 1m
  origin: multikueue
  workerLostTimeout: 15m
  dispatcherName: kueue.x-k8s.io/multikueue-dispatcher-all-at-once
  externalFrameworks:
  - name: PipelineRun.v1.tekton.dev
"""


def test_kueues_own_configuration_text_configures_the_dispatcher() -> None:
    config = parse_configuration(KUEUE_TEXT)
    assert config.multi_kueue.gvks == (GroupVersionKind("tekton.dev", "v1", "PipelineRun"),)
    assert config.multi_kueue.gc_interval == 60
    assert config.multi_kueue.worker_lost_timeout == 900
    # Side by side with Kueue's built-in MultiKueue by default, accepting what tekton-kueue sets.
    assert config.dispatcher.controller_name == DEFAULT_CONTROLLER_NAME != KUEUE_MULTIKUEUE_CONTROLLER
    assert config.dispatcher.managed_by == KUEUE_MULTIKUEUE_CONTROLLER


def test_an_empty_document_has_kueues_defaults() -> None:
    mk = parse_configuration("").multi_kueue
    assert (mk.gc_interval, mk.origin, mk.worker_lost_timeout) == (60, "multikueue", 900)
    assert mk.dispatcher_name == "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
    assert mk.external_frameworks == ()


def test_incremental_dispatcher_gets_kueues_default_step() -> None:
    mk = parse_configuration(f"multiKueue: {{dispatcherName: {DISPATCHER_INCREMENTAL}}}").multi_kueue
    assert mk.incremental_dispatcher_config is not None
    assert mk.incremental_dispatcher_config.step_size == 3


def test_own_settings() -> None:
    config = parse_configuration(
        "dispatcher: {controllerName: example.com/mk, concurrency: 8,"
        " workerClient: {qps: 20, burst: 40, timeout: 5s, maxConnections: 8}}"
    )
    assert config.dispatcher.controller_name == "example.com/mk"
    assert config.dispatcher.concurrency == 8
    assert (config.dispatcher.worker_client.qps, config.dispatcher.worker_client.timeout) == (20, 5)
    assert config.dispatcher.worker_client.max_connections == 8
    assert parse_configuration("").dispatcher.worker_client.max_connections == 100
    assert parse_configuration(
        "dispatcher: {shard: {objectSelector: 'team in (a,b)'}}"
    ).dispatcher.shard.object_selector
    assert parse_configuration("").dispatcher.shard.object_selector == "", "not sharded: every object"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        (
            "multiKueue: {externalFrameworks: [{name: pipelineruns.tekton.dev}, {name: Job}]}",
            "multiKueue.externalFrameworks[1].name: must be in 'Kind.version.group' format "
            "(e.g. PipelineRun.v1.tekton.dev), got 'Job'",
        ),
        (
            "multiKueue: {externalFrameworks: [{name: A.v1.x.io}, {name: A.v1.x.io}]}",
            "multiKueue.externalFrameworks: duplicate entries ['A.v1.x.io']",
        ),
        ("multiKueue: {gcInterval: -1m}", "multiKueue.gcInterval: must not be negative, got '-1m'"),
        ("multiKueue: {workerLostTimeout: soon}", "multiKueue.workerLostTimeout: not a duration like 30s"),
        ("multiKueue: {origin: 'two words'}", "multiKueue.origin: must be a non-empty label value"),
        ("multiKueue: {gcIntervall: 1m}", "multiKueue.gcIntervall: Extra inputs are not permitted (got '1m')"),
        ("multiKueue: {incrementalDispatcherConfig: {stepSize: 2}}", "multiKueue.incrementalDispatcherConfig: only"),
        ("dispatcher: {concurrency: 0}", "dispatcher.concurrency: Input should be greater than or equal to 1 (got 0)"),
        (
            "dispatcher: {workerClient: {maxConnections: 0}}",
            "dispatcher.workerClient.maxConnections: Input should be greater than or equal to 1 (got 0)",
        ),
        (
            "dispatcher: {shard: {objectSelector: 'team in ()'}}",
            "dispatcher.shard.objectSelector: label selector 'team in ()': bad value list in 'team in ()'",
        ),
        ("kind: Deployment", "kind: Input should be 'Configuration' (got 'Deployment')"),
        ("[1, 2]", "(document): must be a mapping, got list"),
        ("multiKueue: [", "not valid YAML"),
    ],
)
def test_errors_name_the_field_and_the_bad_value(text: str, expected: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_configuration(text, source="ConfigMap ns/name key k")
    assert str(e.value).startswith("invalid configuration in ConfigMap ns/name key k:")
    assert any(p.startswith(expected) for p in e.value.problems), e.value.problems


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as e:
        parse_configuration("multiKueue: {gcInterval: x, origin: ''}\ndispatcher: {concurrency: -1}")
    assert len(e.value.problems) == 3


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("0", 0), ("30s", 30), ("1m", 60), ("1h30m", 5400), ("500ms", 0.5), ("1.5h", 5400), ("2m3.5s", 123.5)],
)
def test_go_durations(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "1", "1d", "m", "1m x", "1mm"])
def test_bad_go_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_gvk_follows_parse_kind_arg() -> None:
    gvk = GroupVersionKind.parse("PipelineRun.v1.tekton.dev")
    assert (gvk.kind, gvk.version, gvk.group, gvk.api_version) == ("PipelineRun", "v1", "tekton.dev", "tekton.dev/v1")
    assert str(gvk) == "tekton.dev/v1, Kind=PipelineRun"
    # Kind is case-sensitive and taken verbatim, as in Kueue: the KEP's lowercase example never matches owners.
    assert GroupVersionKind.parse("pipelinerun.v1.tekton.dev").kind == "pipelinerun"


@pytest.mark.parametrize(
    ("integration", "message"),
    [
        ("{suspend: {path: '.spec.x[0]', value: true}, podSets: [{}]}", "integration.suspend.path: must be a plain"),
        ("{suspend: {path: .spec.suspend}, podSets: [{}]}", "integration.suspend.value: Field required"),
        ("{suspend: {path: .spec.suspend, value: true}}", "integration.podSets: at least one pod set"),
        (
            "{suspend: {path: .spec.suspend, value: true}, podSets: [{requests: {cpu: 1x}}]}",
            "integration.podSets[0].requests.cpu: must be a non-negative resource quantity such as 500m, 2Gi or 1, "
            "got '1x'",
        ),
        (
            "{suspend: {path: .spec.suspend, value: true}, podSets: [{template: .spec.t, requests: {cpu: '1'}}]}",
            "integration.podSets[0].template: requests come from the template",
        ),
        ("{suspend: {path: .spec.suspend, value: true}, podSets: [{}, {}]}", "duplicate names ['main']"),
    ],
)
def test_bad_integration_options_name_the_field_and_value(integration: str, message: str) -> None:
    text = f"""
multiKueue: {{externalFrameworks: [{{name: PipelineRun.v1.tekton.dev}}]}}
dispatcher: {{adapters: [{{name: PipelineRun.v1.tekton.dev, integration: {integration}}}]}}
"""
    with pytest.raises(ConfigError) as error:
        parse_configuration(text)
    assert message in str(error.value)


def test_an_integration_cannot_be_direct() -> None:
    text = """
multiKueue: {externalFrameworks: [{name: PipelineRun.v1.tekton.dev}]}
dispatcher: {adapters: [{name: PipelineRun.v1.tekton.dev, mode: Direct,
                         integration: {suspend: {path: .spec.suspend, value: true}, podSets: [{}]}}]}
"""
    with pytest.raises(ConfigError, match=r"adapters\[0\]\.integration: queues the kind with Kueue"):
        parse_configuration(text)


def test_kueue_mode_takes_a_worker_selector_and_refuses_the_rest_of_a_placement() -> None:
    text = """
multiKueue: {{externalFrameworks: [{{name: PipelineRun.v1.tekton.dev}}]}}
dispatcher: {{adapters: [{{name: PipelineRun.v1.tekton.dev, placement: {placement}}}]}}
"""
    config = parse_configuration(text.format(placement='{workerSelector: "region in (eu)"}'))
    assert config.adapter(config.multi_kueue.gvks[0]).placement.worker_selector == "region in (eu)"
    with pytest.raises(ConfigError) as error:
        parse_configuration(text.format(placement="{workerSelector: region, maxPerWorker: 3}"))
    assert "adapters[0].placement.maxPerWorker: Direct mode only (in Kueue mode, the workers' quota decides)" in str(
        error.value
    )


def test_retention_is_a_duration() -> None:
    text = """
multiKueue: {{externalFrameworks: [{{name: PipelineRun.v1.tekton.dev}}]}}
dispatcher: {{adapters: [{{name: PipelineRun.v1.tekton.dev, {options}}}]}}
"""
    config = parse_configuration(text.format(options="retention: 1h"))
    assert config.adapter(config.multi_kueue.gvks[0]).retention == 3600.0
    with pytest.raises(ConfigError) as error:
        parse_configuration(text.format(options="retention: an hour"))
    assert "adapters[0].retention: not a duration" in str(error.value)
