"""Suite-wide wiring: the test bed fixtures and the integration marker by folder (anyio runs coroutine tests)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ["multikueue.testing.fixtures"]

_INTEGRATION = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _INTEGRATION in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)
