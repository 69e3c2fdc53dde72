"""JSONPath over Kubernetes objects (jsonpath-ng's extended grammar, filters included), as the adapter options
use it: find, remove, set, and project a subset of an object. Pure functions over plain dicts.

Paths are written as kubectl writes them (``.spec.managedBy``) or with the root (``$.spec.managedBy``);
filters select list items (``.status.conditions[?type=="Succeeded"].status``).
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from functools import lru_cache
from typing import Any

from jsonpath_ng import Child, Fields, JSONPath, Root
from jsonpath_ng.ext.parser import parse as _parse

Object = dict[str, Any]


class InvalidPath(ValueError):
    pass


@lru_cache(maxsize=512)
def compile_path(text: str) -> JSONPath:
    """The parsed path; ``InvalidPath`` quotes the text and the parser's complaint."""
    if not isinstance(text, str) or not text.strip():
        raise InvalidPath(f"must be a JSONPath such as .spec.managedBy, got {text!r}")
    source = text.strip()
    if source.startswith("."):
        source = "$" + source
    try:
        return _parse(source)
    except Exception as e:  # JsonPathParserError, JsonPathLexerError, and bare Exceptions from the lexer
        raise InvalidPath(f"not a valid JSONPath: {text!r} ({e})") from None


def field_names(path: str) -> list[str] | None:
    """The field names of a path that is only a chain of single fields (``.spec.runPolicy.managedBy`` →
    ``["spec", "runPolicy", "managedBy"]``); ``None`` for any other (indexes, filters, wildcards)."""
    names: list[str] = []
    node = compile_path(path)
    for _ in range(64):  # a path's depth: bounded
        if isinstance(node, Root):
            return names[::-1]
        if not isinstance(node, Child) or not isinstance(node.right, Fields) or len(node.right.fields) != 1:
            return None
        names.append(node.right.fields[0])
        node = node.left
    return None


def find(obj: Any, path: str) -> list[Any]:
    """Every value at ``path`` (none when it does not exist)."""
    return [match.value for match in compile_path(path).find(obj)]


def first(obj: Any, path: str, default: Any = None) -> Any:
    values = find(obj, path)
    return values[0] if values else default


def remove(obj: Object, path: str) -> Object:
    """A copy of ``obj`` without the fields at ``path``."""
    result = copy.deepcopy(obj)
    compile_path(path).filter(lambda _: True, result)
    return result


def set_value(obj: Object, path: str, value: Any) -> Object:
    """A copy of ``obj`` with ``value`` at ``path``, creating the maps on the way."""
    result = copy.deepcopy(obj)
    compiled = compile_path(path)
    if compiled.find(result):
        compiled.update(result, copy.deepcopy(value))
    else:
        compiled.update_or_create(result, copy.deepcopy(value))
    return result


def set_in_place(obj: Object, path: str, value: Any) -> None:
    """Put ``value`` at ``path``, a chain of single fields (``field_names``), in ``obj`` itself, creating the maps
    on the way."""
    names = field_names(path)
    if not names:
        raise InvalidPath(f"must be a plain field path such as .spec.template, got {path!r}")
    node = obj
    for name in names[:-1]:
        if not isinstance(node.get(name), dict):
            node[name] = {}
        node = node[name]
    node[names[-1]] = value


def project(obj: Object, paths: Sequence[str], exclude: Sequence[str] = ()) -> Object:
    """Only the fields at ``paths`` (at their own positions), less those at ``exclude``."""
    result: Object = {}
    for path in paths:
        for match in compile_path(path).find(obj):
            match.full_path.update_or_create(result, copy.deepcopy(match.value))
    for path in exclude:
        compile_path(path).filter(lambda _: True, result)
    return result
