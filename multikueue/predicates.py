"""Whether a configured ``Predicate`` (a JSONPath and a test on its values) holds on an object. Pure.

The adapter (suspended, finished, failed, removeWhen) and the integration (pod sets' ``when``) read the same
predicates from configuration.
"""

from __future__ import annotations

from typing import Any

from multikueue import jsonpaths
from multikueue.config import Predicate

Object = dict[str, Any]


def holds(predicate: Predicate, obj: Object) -> bool:
    values = jsonpaths.find(obj, predicate.path)
    if predicate.exists is not None:
        return bool(values) == predicate.exists
    if predicate.in_ is not None:
        # ``null`` listed: no value holds too (an absent field that means its default).
        return any(v in predicate.in_ for v in values) or (not values and None in predicate.in_)
    if predicate.not_in is not None:
        return bool(values) and all(v not in predicate.not_in for v in values)
    return any(v == predicate.equals for v in values)
