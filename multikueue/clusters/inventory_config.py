"""The ``dispatcher.inventory`` section of the configuration (``config.py`` reads it under ``dispatcher``): workers
kept from the cluster inventory, selected with Kubernetes' ``metav1.LabelSelector`` shape, validated as the rest of the
configuration is (every error names the field and the value; docs/configuration.md, "Workers kept from the
inventory")."""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def _label_key(value: Any) -> str:
    """A label key as apimachinery's ``IsQualifiedName`` takes it: ``[prefix/]name``, the prefix a DNS subdomain."""
    text = value if isinstance(value, str) else ""
    prefix, _, name = text.rpartition("/")
    if (not name or len(name) > 63 or not _QUALIFIED_NAME.match(name)
            or ("/" in text and (not prefix or len(prefix) > 253 or not _DNS_SUBDOMAIN.match(prefix)))):  # fmt: skip
        raise ValueError(f"must be a label key such as example.com/pool or pool, got {value!r}")
    return text


def _label_value(value: Any) -> str:
    if not isinstance(value, str) or len(value) > 63 or not _LABEL_VALUE.match(value):
        raise ValueError(f"must be a label value (63 characters of [A-Za-z0-9-_.]), got {value!r}")
    return value


LabelKey = Annotated[str, BeforeValidator(_label_key)]
LabelValue = Annotated[str, BeforeValidator(_label_value)]


class _Model(BaseModel):  # config.py's: camelCase keys, unknown keys refused, frozen
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class LabelSelectorRequirement(_Model):
    """One of a ``metav1.LabelSelector``'s ``matchExpressions``, with its validation."""

    key: LabelKey
    operator: Literal["In", "NotIn", "Exists", "DoesNotExist"]
    values: tuple[LabelValue, ...] = ()

    @model_validator(mode="after")
    def _values_fit_the_operator(self) -> LabelSelectorRequirement:
        if self.operator in ("In", "NotIn") and not self.values:
            raise ValueError(f"@values: must be non-empty with operator {self.operator}")
        if self.operator in ("Exists", "DoesNotExist") and self.values:
            raise ValueError(f"@values: must be empty with operator {self.operator}, got {list(self.values)}")
        return self

    def text(self) -> str:
        """The requirement in the selector string form (``key in (a,b)``, ``!key``)."""
        if self.operator in ("Exists", "DoesNotExist"):
            return ("!" if self.operator == "DoesNotExist" else "") + self.key
        return f"{self.key} {'in' if self.operator == 'In' else 'notin'} ({','.join(sorted(set(self.values)))})"


class ObjectSelector(_Model):
    """Kubernetes' ``metav1.LabelSelector`` (``matchLabels`` and ``matchExpressions``, all of them must hold); ``{}``
    selects every object."""

    match_labels: dict[LabelKey, LabelValue] = Field(default_factory=dict)
    match_expressions: tuple[LabelSelectorRequirement, ...] = ()

    def text(self) -> str:
        """The same selector in its string form (``pool=batch,region in (eu,us)``): what messages show."""
        parts = [f"{k}={v}" for k, v in sorted(self.match_labels.items())]
        return ",".join(parts + [r.text() for r in self.match_expressions])


class InventoryProfiles(_Model):
    """A MultiKueueCluster for each ClusterProfile of ``dispatcher.namespace`` that ``selector`` matches."""

    selector: ObjectSelector  # required: ``{}`` takes every profile of the namespace, which must be said


class SelectorConfig(_Model):
    """A MultiKueueConfig whose ``spec.clusters`` is kept equal to the MultiKueueClusters ``clusterSelector``
    matches."""

    name: str
    cluster_selector: ObjectSelector

    @field_validator("name")
    @classmethod
    def _object_name(cls, value: str) -> str:
        if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
            raise ValueError(f"must be a MultiKueueConfig name (a DNS subdomain, such as fleet-gpu), got {value!r}")
        return value


class Inventory(_Model):
    """Workers kept from the cluster inventory (docs/configuration.md, "Workers kept from the inventory")."""

    cluster_profiles: InventoryProfiles | None = None
    multi_kueue_configs: tuple[SelectorConfig, ...] = ()

    @model_validator(mode="after")
    def _unique_configs(self) -> Inventory:
        names = [c.name for c in self.multi_kueue_configs]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"@multiKueueConfigs: duplicate names {duplicates}")
        return self
