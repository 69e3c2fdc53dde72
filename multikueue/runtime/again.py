"""A reconciler asking for keys to be looked at again, without holding its controller.

What a reconcile learns outside an informer event (a slow write ended, capacity was freed on a worker) sends keys
back through a ``Signal`` the reconciler owns, named ``again``, as controller-runtime's ``source.Channel`` fed by the
reconciler itself. Its ``watches()`` declares ``again.watch()`` beside its other triggers, so the generation wires it
like every other ``Watch`` and no reconciler takes its controller's ``enqueue``.
"""

from __future__ import annotations

from typing import TypeVar

from multikueue.runtime.signal import Signal
from multikueue.runtime.watches import Watch

K = TypeVar("K")


class Again(Signal[K]):
    """Keys a reconciler wants looked at again (``emit(key)``); ``why`` is its trigger in words."""

    def watch(self) -> Watch[K]:
        """The trigger its reconciler declares: each key emitted goes to its controller's queue at once, at normal
        priority (as ``Controller.enqueue`` did), re-queued if it is being reconciled just then."""
        return Watch(self.name, self, _itself)


def _itself(key: K) -> list[K]:
    return [key]
