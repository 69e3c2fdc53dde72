"""An event source inside the process, for what is not an informer: a worker connection changing, a worker's
objects changing, an informer listing at last."""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic, TypeVar

E = TypeVar("E")


class Signal(Generic[E]):
    """An event source inside the process (controller-runtime's ``source.Channel``): ``emit`` calls every
    subscriber, in the order they subscribed."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._subscribers: list[Callable[[E], None]] = []

    def subscribe(self, handler: Callable[[E], None]) -> None:
        self._subscribers.append(handler)

    def emit(self, event: E) -> None:
        for handler in self._subscribers:
            handler(event)

    def __repr__(self) -> str:
        return f"Signal({self.name!r})"
