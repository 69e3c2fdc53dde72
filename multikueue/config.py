"""The controller's configuration: Kueue's ``Configuration`` document plus this controller's own settings.

The ``multiKueue`` section has Kueue's exact shape and defaults (``apis/config/v1beta2``), so the text that
configures Kueue's MultiKueue configures this controller too; Kueue's other top-level sections (``integrations``,
``featureGates``, ...) are accepted and ignored. This controller's own settings live under ``dispatcher``, a key
Kueue does not have. Every error names the field and the bad value.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainValidator,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic.alias_generators import to_camel

# Module-level names: pydantic resolves them in the models' annotations.
from multikueue.clusters.inventory_config import Inventory
from multikueue.kube.addresses import GroupVersionKind

KUEUE_MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
DEFAULT_CONTROLLER_NAME = "multikueue.x-k8s.io/external-dispatcher"
DISPATCHER_ALL_AT_ONCE = "kueue.x-k8s.io/multikueue-dispatcher-all-at-once"
DISPATCHER_INCREMENTAL = "kueue.x-k8s.io/multikueue-dispatcher-incremental"

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h)")
_DURATION_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


class ConfigError(ValueError):
    """An invalid configuration; ``problems`` lists each as ``field: message (got value)``."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.source = source
        self.problems = problems
        super().__init__(f"invalid configuration in {source}:\n" + "\n".join(f"  - {p}" for p in problems))


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string (``1m``, ``1h30m``, ``500ms``, ``0``), as Kueue's config accepts."""
    if text in ("0", "-0", "+0"):
        return 0.0
    sign = -1.0 if text.startswith("-") else 1.0
    body = text.lstrip("+-")
    position, total = 0, 0.0
    for match in _DURATION_PART.finditer(body):
        if match.start() != position:
            break
        total += float(match.group(1)) * _DURATION_UNITS[match.group(2)]
        position = match.end()
    if not body or position != len(body):
        raise ValueError(f"not a duration like 30s, 1m or 1h30m: {text!r}")
    return sign * total


def _duration(value: Any) -> float:
    """Validate a non-negative duration; errors quote the value as written."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"must be a duration string such as 30s or 1m, got {value!r}")
    seconds = float(value) if not isinstance(value, str) else parse_duration(value)
    if seconds < 0:
        raise ValueError(f"must not be negative, got {value!r}")
    return seconds


Duration = Annotated[float, BeforeValidator(_duration)]
"""Seconds, written in the document as a non-negative Go duration string."""


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class ExternalFramework(_Model):
    name: str

    @field_validator("name")
    @classmethod
    def _gvk(cls, value: str) -> str:
        GroupVersionKind.parse(value)
        return value

    @property
    def gvk(self) -> GroupVersionKind:
        return GroupVersionKind.parse(self.name)


class IncrementalDispatcherConfig(_Model):
    step_size: int = Field(default=3, ge=1)


class ExecEnvVar(_Model):
    name: str = Field(min_length=1)
    value: str = ""


class ExecConfig(_Model):
    """client-go's ``ExecConfig`` (a kubeconfig user's ``exec``), as Kueue's access providers take it: the credential
    plugin run for a worker reached through a ClusterProfile."""

    command: str = Field(min_length=1)
    api_version: str = Field(min_length=1)
    args: tuple[str, ...] = ()
    env: tuple[ExecEnvVar, ...] = ()
    install_hint: str = ""
    provide_cluster_info: bool = False
    # Required as in Kueue's validation; the plugin is always run with "Never" (nobody to prompt), as upstream's
    # access library does.
    interactive_mode: Literal["Never", "IfAvailable", "Always"]


class ClusterProfileAccessProvider(_Model):
    name: str = Field(min_length=1)
    exec_config: ExecConfig


class ClusterProfileAccess(_Model):
    """Kueue's ``multiKueue.clusterProfile``: how to reach workers named by a ClusterProfile (SIG-Multicluster's
    cluster inventory API). The plugins run are only these, configured by the administrator here: nothing in a
    ClusterProfile or a Secret can name a command."""

    access_providers: tuple[ClusterProfileAccessProvider, ...] = ()
    credentials_providers: tuple[ClusterProfileAccessProvider, ...] = ()  # deprecated in Kueue for accessProviders

    @model_validator(mode="after")
    def _one_list(self) -> ClusterProfileAccess:
        if self.access_providers and self.credentials_providers:
            raise ValueError("@credentialsProviders: must not be specified when accessProviders is specified")
        for field, providers in (("accessProviders", self.access_providers),
                                 ("credentialsProviders", self.credentials_providers)):  # fmt: skip
            names = [p.name for p in providers]
            duplicates = sorted({n for n in names if names.count(n) > 1})
            if duplicates:
                raise ValueError(f"@{field}: duplicate names {duplicates}")
        return self

    @property
    def providers(self) -> tuple[ClusterProfileAccessProvider, ...]:
        return self.access_providers or self.credentials_providers


class MultiKueue(_Model):
    """Kueue's ``multiKueue`` section, with Kueue's defaults."""

    gc_interval: Duration = 60.0
    origin: str = "multikueue"
    worker_lost_timeout: Duration = 900.0
    dispatcher_name: str = DISPATCHER_ALL_AT_ONCE
    incremental_dispatcher_config: IncrementalDispatcherConfig | None = None
    external_frameworks: tuple[ExternalFramework, ...] = ()
    cluster_profile: ClusterProfileAccess | None = None

    @field_validator("origin")
    @classmethod
    def _label_value(cls, value: str) -> str:
        if not value or len(value) > 63 or not _LABEL_VALUE.match(value):
            raise ValueError(f"must be a non-empty label value (63 characters of [A-Za-z0-9-_.]), got {value!r}")
        return value

    @model_validator(mode="after")
    def _cross_field(self) -> MultiKueue:
        names = [f.name for f in self.external_frameworks]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"@externalFrameworks: duplicate entries {duplicates}")
        if self.dispatcher_name == DISPATCHER_INCREMENTAL:
            if self.incremental_dispatcher_config is None:
                object.__setattr__(self, "incremental_dispatcher_config", IncrementalDispatcherConfig())
        elif self.incremental_dispatcher_config is not None:
            raise ValueError(
                f"@incrementalDispatcherConfig: only valid with dispatcherName {DISPATCHER_INCREMENTAL!r}, "
                f"got dispatcherName {self.dispatcher_name!r}"
            )
        return self

    @property
    def gvks(self) -> tuple[GroupVersionKind, ...]:
        return tuple(f.gvk for f in self.external_frameworks)


class WorkerClient(_Model):
    """How this controller talks to each worker's API server."""

    # AllAtOnce sends each worker about two requests per dispatched object (a copy, then its deletion or the
    # object itself): 200 QPS leaves room for 100 objects/s. Kueue's clients: 5 QPS, burst 10 (1.3 workloads/s).
    qps: float = Field(default=200.0, gt=0)
    burst: int = Field(default=400, ge=1)
    # Connections kept open to each worker: every request in flight needs one (HTTP/1.1), each costs a TLS
    # handshake and ~256 KiB of buffer; fewer trade latency for memory (multikueue/kube/client.py).
    max_connections: int = Field(default=100, ge=1, le=1000)
    timeout: Duration = 15.0
    # A partitioned worker leaves a watch's socket open and silent for minutes; a GET /version this often (each
    # bounded by `timeout`) notices it within probeInterval + timeout, as client-go's HTTP/2 pings do.
    probe_interval: Duration = 10.0


def _jsonpath(value: Any) -> str:
    from multikueue.jsonpaths import InvalidPath, compile_path

    try:
        compile_path(value)
    except InvalidPath as e:
        raise ValueError(str(e)) from None
    return str(value)


JsonPath = Annotated[str, BeforeValidator(_jsonpath)]
"""A JSONPath into an object (``.spec.managedBy``, ``.status.conditions[?type=="Succeeded"].status``)."""


class Predicate(_Model):
    """A test on the values at ``path``: exactly one of ``equals``, ``in``, ``notIn``, ``exists``.

    ``equals``/``in`` hold when some value there matches; ``null`` listed in ``in`` also holds when there is no
    value (a field whose absence means a default, e.g. ``in: [K8sJobMode, null]``); ``notIn`` when values exist
    and none is listed; ``exists`` when there is (true) or is not (false) a value.
    """

    path: JsonPath
    equals: Any = None
    in_: tuple[Any, ...] | None = Field(default=None, alias="in")
    not_in: tuple[Any, ...] | None = None
    exists: bool | None = None

    @model_validator(mode="after")
    def _one_test(self) -> Predicate:
        given = [k for k, v in (("equals", self.equals), ("in", self.in_), ("notIn", self.not_in),
                                ("exists", self.exists)) if v is not None]  # fmt: skip
        if len(given) != 1:
            raise ValueError(
                f"@path: needs exactly one of equals, in, notIn, exists besides path, got {given or 'none'}"
            )
        return self


_COPYABLE = (".spec", ".metadata.labels", ".metadata.annotations")


class SetField(_Model):
    path: JsonPath
    value: Any


class CreateTransforms(_Model):
    """How the worker copy differs from the manager object, beyond Kueue's (managedBy removed, labels added)."""

    remove: tuple[JsonPath, ...] = ()  # e.g. TTL fields: the worker must not delete the copy before its final status
    remove_when: tuple[Predicate, ...] = ()  # remove ``path`` when the predicate on it holds
    set: tuple[SetField, ...] = ()

    @model_validator(mode="after")
    def _copyable_paths(self) -> CreateTransforms:
        paths = [*self.remove, *(p.path for p in self.remove_when), *(s.path for s in self.set)]
        for path in paths:
            if not path.lstrip("$").startswith(_COPYABLE):
                raise ValueError(f"a copy carries only {', '.join(_COPYABLE)}; got path {path!r}")
        return self


class SpecSync(_Model):
    """A field carried from the manager object to the worker copy after creation (e.g. a cancel request)."""

    path: JsonPath
    values: tuple[Any, ...] | None = None  # only these manager values are carried; any value when absent


class StatusMapping(_Model):
    """What of the worker's status reaches the manager object: the whole ``.status`` by default (Kueue's)."""

    paths: tuple[JsonPath, ...] = (".status",)
    exclude: tuple[JsonPath, ...] = ()

    @field_validator("paths")
    @classmethod
    def _under_status(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for path in value:
            if not path.lstrip("$").startswith(".status"):
                raise ValueError(f"must select fields under .status, got {path!r}")
        return value


def _selector(value: Any) -> str:
    from multikueue.selectors import parse

    if not isinstance(value, str):
        raise ValueError(f"must be a label selector string such as 'tier=cloud', got {value!r}")
    parse(value)
    return value


LabelSelector = Annotated[str, BeforeValidator(_selector)]
"""A label selector in its string form (``tier=cloud,region in (eu,us)``)."""


class Placement(_Model):
    """Direct mode: how this controller picks a worker itself (no Workload, no race). Kueue mode reads only
    ``workerSelector``: the workers a run is nominated to (its quota on them decides the rest)."""

    worker_selector: LabelSelector = ""  # on the MultiKueueCluster's labels
    tiers: tuple[LabelSelector, ...] = ()  # spill-over order: a later tier only when no worker of an earlier fits
    max_per_worker: int | None = Field(default=None, ge=1)  # objects of this kind running at once per worker
    lost_worker_policy: Literal["AtLeastOnce", "AtMostOnce"] = "AtLeastOnce"


_FIELD_PATH = re.compile(r"^\$?(\.[A-Za-z_][A-Za-z0-9_-]*)+$")
_QUANTITY = re.compile(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)([KMGTPE]i|[numkMGTPE]|[eE][+-]?[0-9]+)?$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_LABEL = DNS_LABEL


def _field_path(value: Any) -> str:
    """A plain field path (``.spec.suspend``): what a JSON patch and a merge patch can both address."""
    path = _jsonpath(value)
    if not _FIELD_PATH.match(path):
        raise ValueError(f"must be a plain field path such as .spec.suspend (no filters or indexes), got {path!r}")
    return path


FieldPath = Annotated[str, BeforeValidator(_field_path)]
Quantity = Annotated[str, BeforeValidator(lambda v: check_quantity(v))]


def check_quantity(value: Any) -> str:
    """A non-negative Kubernetes resource quantity (``500m``, ``2Gi``, ``1``), as written."""
    text = str(value).strip() if isinstance(value, int | float | str) and not isinstance(value, bool) else None
    if text is None or not _QUANTITY.match(text):
        raise ValueError(f"must be a non-negative resource quantity such as 500m, 2Gi or 1, got {value!r}")
    return text


class Suspend(_Model):
    """How an object is held back from running: the field and the value that mean "do not run"."""

    path: FieldPath  # .spec.status (PipelineRun), .spec.suspend (Job-like kinds)
    value: Any  # PipelineRunPending, true
    run_value: Any = None  # written on admission; absent: the field is removed
    stop_value: Any = None  # written on eviction (StoppedRunFinally); absent: ``value``
    # A suspension this controller did not make (at creation, or on a running object): false, Kueue's convention for
    # Jobs, takes it as "for the queue" and releases it on admission; true leaves it the user's own hold
    # (tekton-kueue#540): the Workload is deactivated, and queued again once the user clears the field.
    honor_user_suspend: bool = False

    @model_validator(mode="after")
    def _value_given(self) -> Suspend:
        if self.value is None:
            raise ValueError("@value: the suspended value is required (e.g. PipelineRunPending or true)")
        if self.run_value == self.value:
            raise ValueError(f"@runValue: must differ from value, got {self.run_value!r}")
        return self

    @property
    def stop(self) -> Any:
        return self.value if self.stop_value is None else self.stop_value


@dataclass(frozen=True)
class CountConst:
    value: int


@dataclass(frozen=True)
class CountPath:
    path: str  # in the object, or in the item of a ``podSetsFrom`` array
    default: CountExpression | None = None  # when the path has no value; absent: the object is refused, naming it


@dataclass(frozen=True)
class CountOp:
    op: Literal["min", "max", "sum", "product"]
    args: tuple[CountExpression, ...]


CountExpression = CountConst | CountPath | CountOp
COUNT_OPS = ("min", "max", "sum", "product")


def parse_count(value: Any) -> CountExpression:
    """A pod count: a number, a path (``.spec.parallelism``), ``{path, default}`` (the default another count), or
    ``{min|max|sum|product: [counts]}``. Kueue's Job count is
    ``{min: [{path: .spec.parallelism, default: 1}, {path: .spec.completions, default: {path: .spec.parallelism,
    default: 1}}]}``."""
    if isinstance(value, CountConst | CountPath | CountOp):
        return value
    if isinstance(value, bool):
        raise ValueError(f"a count is a number, a path or an expression, got {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"must not be negative, got {value!r}")
        return CountConst(value)
    if isinstance(value, str):
        return CountPath(_jsonpath(value))
    if isinstance(value, dict) and "path" in value:
        unknown = sorted(set(value) - {"path", "default"})
        if unknown:
            raise ValueError(f"a path count takes path and default, got {unknown}")
        default = value.get("default")
        return CountPath(_jsonpath(value["path"]), None if default is None else parse_count(default))
    if isinstance(value, dict) and len(value) == 1 and next(iter(value)) in COUNT_OPS:
        op, args = next(iter(value.items()))
        if not isinstance(args, list) or not args:
            raise ValueError(f"{op}: a list of counts, got {args!r}")
        return CountOp(op, tuple(parse_count(a) for a in args))
    raise ValueError(f"a count is a number, a path, {{path, default}} or one of {list(COUNT_OPS)} with a list, "
                     f"got {value!r}")  # fmt: skip


Count = Annotated[CountExpression, PlainValidator(parse_count)]


class Topology(_Model):
    """What Kueue's topology-aware scheduling needs beyond the pod template's annotations (which are read as Kueue
    reads them): the label holding a pod's index, and for pods in groups (a JobSet's Jobs) the group's index label
    and the number of groups. Kueue's JobSet: ``batch.kubernetes.io/job-completion-index``,
    ``jobset.sigs.k8s.io/job-index`` and the replicatedJob's ``replicas``."""

    pod_index_label: str | None = None
    sub_group_index_label: str | None = None
    sub_group_count: Count | None = None


_TEMPLATE_FIELD = re.compile(r"^(\.[A-Za-z_][A-Za-z0-9_-]*(\[[0-9]+\])*)+$")
_TEMPLATE_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_-]*)|\[([0-9]+)\]")


def template_steps(path: str) -> list[str | int]:
    """``.spec.containers[0].image`` → ``["spec", "containers", 0, "image"]``: keys and list indexes."""
    return [key if key else int(index) for key, index in _TEMPLATE_STEP.findall(path)]


class TemplateFill(_Model):
    """A field of a default template read from the object: ``path`` in the template (keys and ``[index]``),
    ``from`` a path in the object. No value there leaves the field out (as Go's ``omitempty`` writes it)."""

    path: str
    from_: JsonPath = Field(alias="from")

    @field_validator("path")
    @classmethod
    def _plain(cls, value: str) -> str:
        if not _TEMPLATE_FIELD.match(value):
            raise ValueError(f"must be a field path such as .spec.containers[0].image, got {value!r}")
        return value


def _check_requests(container: Any, where: str) -> None:
    where = f"{where}." if where else ""
    resources = container.get("resources") or {}
    if not isinstance(resources, dict):
        raise ValueError(f"{where}resources must be a mapping, got {resources!r}")
    for kind in ("requests", "limits"):
        if not isinstance(resources.get(kind) or {}, dict):
            raise ValueError(f"{where}resources.{kind} must be a mapping, got {resources[kind]!r}")
        for resource, quantity in (resources.get(kind) or {}).items():
            try:
                resources[kind][resource] = check_quantity(quantity)
            except ValueError as e:
                raise ValueError(f"{where}resources.{kind}.{resource} {e}") from None


def _container(value: Any, where: str) -> Any:
    """A container written in the configuration: a mapping with a name; its requests and limits quantities (as
    text, as Go writes them)."""
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        raise ValueError(f"{where or 'a container'} must be a container with a name, got {value!r}")
    value = copy.deepcopy(value)
    _check_requests(value, where)
    return value


class AddedContainer(_Model):
    """A container the kind's controller adds to the pods of a pod set when ``when`` holds, counted in the
    Workload's pod set only (KubeRay's SidecarMode submitter in the head pod)."""

    when: Predicate
    container: Annotated[dict[str, Any], BeforeValidator(lambda v: _container(v, ""))]


class DefaultTemplate(_Model):
    """The pod template of a pod set whose ``template`` path has no value in the object (KubeRay's default
    submitter): a PodTemplateSpec written here, with fields filled from the object."""

    template: dict[str, Any]
    fill: tuple[TemplateFill, ...] = ()

    @field_validator("template", mode="before")
    @classmethod
    def _pod_template(cls, value: Any) -> Any:
        containers = ((value.get("spec") or {}) if isinstance(value, dict) else {}).get("containers")
        if not isinstance(containers, list) or not containers:
            raise ValueError(f"must be a pod template with spec.containers, got {value!r}")
        value = copy.deepcopy(value)
        value["spec"]["containers"] = [_container(c, f"spec.containers[{i}]") for i, c in enumerate(containers)]
        return value

    @model_validator(mode="after")
    def _fill_in_template(self) -> DefaultTemplate:
        for i, fill in enumerate(self.fill):
            node: Any = self.template
            for step in template_steps(fill.path)[:-1]:
                in_map = isinstance(node, dict) and isinstance(step, str)
                in_list = isinstance(node, list) and isinstance(step, int) and step < len(node)
                inside = in_map or in_list
                if not inside:
                    raise ValueError(f"@fill: [{i}].path {fill.path!r} is not inside the template")
                node = node[step]
            if not isinstance(node, dict):
                raise ValueError(f"@fill: [{i}].path {fill.path!r} does not end in a field of a mapping")
        return self


class PodSetSource(_Model):
    """One pod set of the Workload: a count and the requests of each pod, read from the object or written here."""

    name: str = "main"
    count: Count = CountConst(1)  # a number, or read from the object (``parse_count``)
    count_path: JsonPath | None = None  # ``count: <path>`` spelt the old way; ``count`` is then its default
    template: JsonPath | None = None  # a PodTemplateSpec in the object, copied whole (Kueue's own integrations)
    requests: dict[str, Quantity] = Field(default_factory=dict)  # per pod, e.g. {tekton.dev/pipelineruns: "1"}
    requests_from_annotations: str | None = None  # a prefix: <prefix><resource>: <quantity> (tekton-kueue's)
    topology: Topology | None = None
    when: Predicate | None = None  # the pod set is in the Workload only when this holds on the object
    default_template: DefaultTemplate | None = None  # the template when ``template`` has no value in the object
    add_containers: tuple[AddedContainer, ...] = ()  # only with ``template``

    @field_validator("name")
    @classmethod
    def _dns_label(cls, value: str) -> str:
        if not _DNS_LABEL.match(value) or len(value) > 63:
            raise ValueError(f"must be a DNS label (a-z, 0-9, '-', at most 63), got {value!r}")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> PodSetSource:
        if self.template is not None and (self.requests or self.requests_from_annotations):
            raise ValueError("@template: requests come from the template's containers; drop requests and "
                             "requestsFromAnnotations, or drop template")  # fmt: skip
        return self

    @model_validator(mode="after")
    def _with_template(self) -> PodSetSource:
        if self.add_containers and self.template is None:
            raise ValueError("@addContainers: only with template (the containers are added to it)")
        if self.default_template is not None and self.template is None:
            raise ValueError("@defaultTemplate: only with template (the path it stands in for)")
        if self.default_template is not None and self.template is not None:
            from multikueue.jsonpaths import field_names

            if not field_names(self.template):
                raise ValueError(f"@template: with defaultTemplate, a plain field path where the default is written "
                                 f"(such as .spec.submitterPodTemplate), got {self.template!r}")  # fmt: skip
        return self

    @property
    def pod_count(self) -> CountExpression:
        """The count to evaluate: ``countPath`` with ``count`` as its default when both are given."""
        if self.count_path is None:
            return self.count
        return CountPath(self.count_path, self.count if "count" in self.model_fields_set else None)


class PodSetsFrom(_Model):
    """Pod sets derived from an array of the object, one per item (JobSet's ``replicatedJobs``, RayJob's worker
    groups); every path below is read in the item."""

    path: JsonPath  # the items, e.g. .spec.replicatedJobs[*]
    name: JsonPath = ".name"  # the pod set's name (a DNS label)
    count: Count  # e.g. JobSet: {product: [.replicas, <the Job count of .template.spec>]}
    template: JsonPath  # the PodTemplateSpec, e.g. .template.spec.template
    topology: Topology | None = None  # counts in it are read in the item too


class PodsReady(_Model):
    """When every pod of the object is ready, written as the Workload's ``PodsReady`` condition (what Kueue's
    ``waitForPodsReady`` waits for): a predicate on the object (``when``), or counts read from it: the sum of the
    numbers at ``readyCounts`` reaching the sum at ``expectedCounts`` (the Workload's pod count when absent)."""

    when: Predicate | None = None
    ready_counts: tuple[JsonPath, ...] = ()  # e.g. JobSet: .status.replicatedJobsStatus[*].ready and [*].succeeded
    expected_counts: tuple[JsonPath, ...] = ()  # e.g. JobSet: .spec.replicatedJobs[*].replicas

    @model_validator(mode="after")
    def _one_test(self) -> PodsReady:
        if (self.when is None) == (not self.ready_counts):
            raise ValueError("@when: give either when (a predicate on the object) or readyCounts, not both or none")
        if self.expected_counts and not self.ready_counts:
            raise ValueError("@expectedCounts: only with readyCounts")
        return self


class Integration(_Model):
    """Queue this kind on its own cluster with no code: suspend on create, a Workload, run on admission."""

    suspend: Suspend
    pod_sets: tuple[PodSetSource, ...] = ()
    pod_sets_from: tuple[PodSetsFrom, ...] = ()  # after ``podSets``, in order
    # "Pods still run": after an eviction the quota is released once this is false. Absent: once suspended.
    # (When the run is over comes from the adapter's ``finished``/``failed``, read here on the object itself.)
    active: Predicate | None = None
    # Absent: no PodsReady condition is written (as Kueue without waitForPodsReady).
    pods_ready: PodsReady | None = None
    # The Workload's Finished message: the first text at these paths (Kueue's integrations copy the kind's own
    # finish condition message). Absent or not found: "<Kind> <name> finished".
    finished_message: tuple[JsonPath, ...] = ()

    @model_validator(mode="after")
    def _pod_sets(self) -> Integration:
        if not self.pod_sets and not self.pod_sets_from:
            raise ValueError("@podSets: at least one pod set is required (podSets, or podSetsFrom an array)")
        names = [p.name for p in self.pod_sets]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"@podSets: duplicate names {duplicates}")
        return self


class Webhook(_Model):
    """The mutating admission webhook that holds new queued objects suspended (see config/webhook)."""

    host: str = "0.0.0.0"  # the Service reaches the pod on its IP
    port: int = Field(default=9443, ge=0, le=65535)  # 0: any free port (tests)
    # tls.crt and tls.key supplied (cert-manager, a Secret volume); when absent, a CA and a serving certificate are
    # generated at start for ``hosts`` and the CA is written into ``configurationName``'s caBundle.
    cert_dir: str | None = None
    hosts: tuple[str, ...] = ("multikueue-webhook.multikueue-system.svc",)
    secret_name: str = "multikueue-webhook-cert"  # in ``dispatcher.namespace``: the generated one, shared by replicas
    configuration_name: str | None = "multikueue-mutating-webhook"


class LogsShape(_Model):
    """How a run's pods and containers are shown by ``multikueue logs``, as its kind's own tool shows them (tkn for
    PipelineRun: task after task in the pipeline's order, each step's lines prefixed ``[task : step]``)."""

    group_label: str  # the pod label naming the part of the run a pod belongs to (a task): the prefix, ``--task``
    # On the run (its status as mirrored from the worker): the parts' names in the run's order, path after path.
    # Parts not named come after, oldest pod first.
    order: tuple[JsonPath, ...] = ()
    # Only containers whose name starts with this (Tekton's steps: "step-"), shown without it; empty: every one.
    container_prefix: str = ""


class Adapter(ExternalFramework):
    """Per-kind behaviour for one ``externalFrameworks`` entry (by ``name``); every default is Kueue's generic
    adapter."""

    managed_by_path: JsonPath = ".spec.managedBy"
    create: CreateTransforms = CreateTransforms()
    spec_sync: tuple[SpecSync, ...] = ()
    status: StatusMapping = StatusMapping()
    suspended: Predicate | None = None  # on the manager object: status sync waits while it holds
    finished: Predicate | None = None  # on the worker object: the run is over without a worker-side Workload finish
    failed: Predicate | None = None  # with ``finished``: the Workload finishes as Failed instead of Succeeded
    conflict_policy: Literal["Abort", "Adopt"] = "Abort"
    worker_events: bool = True  # surface the worker's warnings and pending reasons on the manager object
    # Kueue: a Workload and MultiKueue's race decide (the default); Direct: no Workload, this controller places it.
    mode: Literal["Kueue", "Direct"] = "Kueue"
    placement: Placement = Placement()
    integration: Integration | None = None  # off: the kind's own integration (e.g. tekton-kueue) makes Workloads
    # The run's pods on its worker, for `multikueue logs`: a label selector, {name} and {namespace} filled in
    # (PipelineRun: tekton.dev/pipelineRun={name}).
    pod_selector: str | None = None
    logs: LogsShape | None = None  # absent: every container of every pod at once, ``[pod/container]`` prefixed
    # A finished run's object (and through it its pods, for `multikueue logs`) is kept on its worker this long after
    # it finished (Kueue mode: the manager Workload's Finished; its Workload copy goes at once, no quota held).
    retention: Duration | None = None

    @classmethod
    def defaults(cls, gvk: GroupVersionKind) -> Adapter:
        return cls(name=f"{gvk.kind}.{gvk.version}.{gvk.group}")

    @model_validator(mode="after")
    def _failed_needs_finished(self) -> Adapter:
        if self.failed is not None and self.finished is None:
            raise ValueError("@failed: only meaningful together with finished")
        if self.integration is not None and self.mode == "Direct":
            raise ValueError("@integration: queues the kind with Kueue; mode Direct places it without a Workload")
        if self.mode == "Kueue":
            _placement_for_kueue_mode(self.placement)
        return self


def _placement_for_kueue_mode(placement: Placement) -> None:
    """Kueue mode narrows the race by ``workerSelector``; the rest of a placement is Direct mode's own decision."""
    direct_only = Placement.model_fields.keys() - {"worker_selector"}
    for name in sorted(direct_only & placement.model_fields_set):
        alias = Placement.model_fields[name].alias or name
        raise ValueError(f"@placement.{alias}: Direct mode only (in Kueue mode, the workers' quota decides)")


class Shard(_Model):
    """Several dispatcher deployments splitting one manager's work (docs/scaling.md). Kueue mode needs nothing here:
    each deployment serves the AdmissionChecks naming its own ``controllerName``. Direct mode: each places only the
    manager objects whose labels match ``objectSelector``; the deployments' selectors must not overlap and, to leave
    nothing out, must cover every object (``team in (a,b)`` beside ``team notin (a,b)``)."""

    object_selector: LabelSelector = ""  # on the Direct-mode objects' labels; empty: every object


class TokenRenewal(_Model):
    """Renewing a worker's ServiceAccount token before it lapses, for the MultiKueueClusters that opt in (annotation
    ``multikueue.x-k8s.io/renew-token: "true"``; docs/configuration.md)."""

    # The share of a token's lifetime after which a new one is asked for: 0.8, as the kubelet renews projected
    # tokens (and at the latest once a day). Smaller renews earlier (a test need not wait for real expiry).
    renew_after: float = 0.8
    # The lifetime asked for; unset: the current token's own. The API server refuses less than 10 minutes.
    expiration: Duration | None = None

    @field_validator("renew_after", mode="before")
    @classmethod
    def _fraction(cls, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
            raise ValueError(f"must be a fraction of the token's lifetime between 0 and 1 (such as 0.8), got {value!r}")
        return float(value)

    @field_validator("expiration")
    @classmethod
    def _at_least_ten_minutes(cls, value: float | None) -> float | None:
        if value is not None and value < 600:
            raise ValueError(f"must be at least 10m (the API server refuses shorter tokens), got {value:g}s")
        return value


class Dispatcher(_Model):
    """This controller's own settings (not part of Kueue's Configuration)."""

    controller_name: str = DEFAULT_CONTROLLER_NAME
    managed_by: str = KUEUE_MULTIKUEUE_CONTROLLER
    namespace: str = "multikueue-system"
    # Reconciles in flight at once. They wait on API round trips far more than they compute (profiled: the
    # process idles in select at 4), so a few dozen keep one core busy.
    concurrency: int = Field(default=32, ge=1, le=256)
    worker_client: WorkerClient = WorkerClient()
    # Worker events for one Workload coalesce over this period (Kueue: a fixed 1 s). The work queue already
    # merges repeated keys; 250 ms keeps bursts to one reconcile while keeping status lag well under a second.
    events_batch_period: Duration = 0.25
    incremental_round_timeout: Duration = 300.0  # Kueue's fixed 5-minute round, configurable here
    # false: a run that goes as planned records no Normal Event (Kueue mode: "admitted on <worker>"; Direct mode:
    # "Placed") and, in Direct mode, no MultiKueuePlacement condition (its annotations still say where it runs):
    # two writes fewer per run. Problems are recorded all the same, and a problem's record is cleared when it ends.
    routine_records: bool = True
    # A run no worker can ever take for this long gives up, with each worker's reason. Kueue mode: every worker's
    # Kueue says so (exceeds the maximum quota, no matching flavor or resource, no such queue, namespace not
    # selected): the check is Rejected. Direct mode: no worker matches its selectors or serves it: marked Failed.
    # Unset: it waits for ever, as in Kueue.
    inadmissible_timeout: Duration | None = None
    # Per-kind adapter options, by externalFrameworks name. Kept out of Kueue's own `externalFrameworks` entries so
    # the same document still configures Kueue, whose schema has only `name` there.
    adapters: tuple[Adapter, ...] = ()
    webhook: Webhook | None = None  # served only when set (and some adapter has an integration)
    shard: Shard = Shard()
    token_renewal: TokenRenewal = TokenRenewal()
    inventory: Inventory | None = None  # MultiKueueClusters and MultiKueueConfigs kept from labels

    @model_validator(mode="after")
    def _unique_adapters(self) -> Dispatcher:
        names = [a.name for a in self.adapters]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"@adapters: duplicate entries {duplicates}")
        return self


class Configuration(_Model):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="ignore", frozen=True)

    api_version: Literal["config.kueue.x-k8s.io/v1beta2", "config.kueue.x-k8s.io/v1beta1"] = (
        "config.kueue.x-k8s.io/v1beta2"
    )
    kind: Literal["Configuration"] = "Configuration"
    multi_kueue: MultiKueue = MultiKueue()
    dispatcher: Dispatcher = Dispatcher()

    @model_validator(mode="after")
    def _adapters_name_frameworks(self) -> Configuration:
        frameworks = [f.name for f in self.multi_kueue.external_frameworks]
        for i, adapter in enumerate(self.dispatcher.adapters):
            if adapter.name not in frameworks:
                raise ValueError(
                    f"@dispatcher.adapters[{i}].name: {adapter.name!r} is not in multiKueue.externalFrameworks "
                    f"({', '.join(frameworks) or 'none'})"
                )
        return self

    @model_validator(mode="after")
    def _inventory_reaches_profiles(self) -> Configuration:
        inventory, access = self.dispatcher.inventory, self.multi_kueue.cluster_profile
        profiles = inventory.cluster_profiles if inventory is not None else None
        if profiles is not None and (access is None or not access.providers):
            raise ValueError(
                "@dispatcher.inventory.clusterProfiles: the MultiKueueClusters made from ClusterProfiles are reached "
                "through multiKueue.clusterProfile.accessProviders, and none is configured"
            )
        return self

    def adapter(self, gvk: GroupVersionKind) -> Adapter:
        """The options of a configured kind (Kueue's generic behaviour when none are given)."""
        for adapter in self.dispatcher.adapters:
            if adapter.gvk == gvk:
                return adapter
        return Adapter.defaults(gvk)

    @property
    def integrations(self) -> dict[GroupVersionKind, Integration]:
        """The kinds this controller queues itself (an ``integration`` section), with their options."""
        return {a.gvk: a.integration for a in self.dispatcher.adapters if a.integration is not None}


def _location(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "(document)"


def _problems(error: ValidationError) -> list[str]:
    problems = []
    for item in error.errors():
        loc = item["loc"]
        message = str(item["msg"]).removeprefix("Value error, ")
        if message.startswith("@"):  # a model-level check naming its own field: "@field: message"
            field, message = message[1:].split(": ", 1)
            loc = (*loc, field)
        value = item.get("input")
        problem = f"{_location(loc)}: {message}"
        if item["type"] not in ("value_error",) and not isinstance(value, dict):
            problem += f" (got {value!r})"
        problems.append(problem)
    return problems


def parse_configuration(text: str, *, source: str = "configuration") -> Configuration:
    """Parse and validate a YAML document; raises ``ConfigError`` naming every bad field and value."""
    try:
        document = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ConfigError(source, [f"not valid YAML: {e}"]) from None
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise ConfigError(source, [f"(document): must be a mapping, got {type(document).__name__}"])
    try:
        return Configuration.model_validate(document)
    except ValidationError as e:
        raise ConfigError(source, _problems(e)) from None
