"""Kubernetes label selectors in their string form (``tier=cloud,region in (eu,us),!legacy``), parsed and matched.

No maintained Python library parses them; this follows apimachinery's ``labels.Parse`` grammar: requirements
separated by commas, each ``key``, ``!key``, ``key=value``, ``key==value``, ``key!=value``, ``key in (a,b)`` or
``key notin (a,b)``. ``!=`` and ``notin`` also match objects without the key, as in Kubernetes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_KEY = r"[A-Za-z0-9](?:[-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET = re.compile(rf"^\s*({_KEY})\s+(in|notin)\s+\(([^)]*)\)\s*$")
_EQ = re.compile(rf"^\s*({_KEY})\s*(==|=|!=)\s*({_VALUE})\s*$")
_EXISTS = re.compile(rf"^\s*(!?)\s*({_KEY})\s*$")
_VALUE_ONLY = re.compile(rf"^{_VALUE}$")


@dataclass(frozen=True)
class Requirement:
    key: str
    operator: str  # "in", "notin", "exists", "!exists"
    values: frozenset[str] = frozenset()

    def matches(self, labels: dict[str, str]) -> bool:
        if self.operator == "exists":
            return self.key in labels
        if self.operator == "!exists":
            return self.key not in labels
        if self.operator == "in":
            return labels.get(self.key) in self.values
        return labels.get(self.key) not in self.values  # notin: a missing key matches

    def __str__(self) -> str:
        if self.operator in ("exists", "!exists"):
            return ("!" if self.operator == "!exists" else "") + self.key
        return f"{self.key} {self.operator} ({','.join(sorted(self.values))})"


@dataclass(frozen=True)
class Selector:
    text: str
    requirements: tuple[Requirement, ...]

    def matches(self, labels: dict[str, str] | None) -> bool:
        return all(r.matches(labels or {}) for r in self.requirements)

    def unmet(self, labels: dict[str, str] | None) -> list[Requirement]:
        return [r for r in self.requirements if not r.matches(labels or {})]


def _split(text: str) -> list[str]:
    """Split on commas outside parentheses."""
    parts, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    parts.append(current)
    return parts


def parse(text: str) -> Selector:
    """The selector; ``ValueError`` quotes the part it cannot read. An empty string selects everything."""
    requirements: list[Requirement] = []
    if text.strip():
        for part in _split(text):
            if match := _SET.match(part):
                values = [v.strip() for v in match.group(3).split(",") if v.strip()]
                if not values or not all(_VALUE_ONLY.match(v) for v in values):
                    raise ValueError(f"label selector {text!r}: bad value list in {part.strip()!r}")
                requirements.append(Requirement(match.group(1), match.group(2), frozenset(values)))
            elif match := _EQ.match(part):
                operator = "notin" if match.group(2) == "!=" else "in"
                requirements.append(Requirement(match.group(1), operator, frozenset([match.group(3)])))
            elif match := _EXISTS.match(part):
                requirements.append(Requirement(match.group(2), "!exists" if match.group(1) else "exists"))
            else:
                raise ValueError(f"label selector {text!r}: cannot read {part.strip()!r}")
    return Selector(text, tuple(requirements))
