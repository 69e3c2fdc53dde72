"""Suite-wide wiring: the test bed fixtures, anyio for coroutine tests, the integration marker by folder."""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

pytest_plugins = ["multikueue.testing.fixtures"]

_INTEGRATION = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if isinstance(item, pytest.Function) and inspect.iscoroutinefunction(item.function):
            item.add_marker(pytest.mark.anyio)
        if _INTEGRATION in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
