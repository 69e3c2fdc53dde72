"""Suite-wide wiring: the test bed fixtures and the integration marker by folder (anyio runs coroutine tests)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog

pytest_plugins = ["multikueue_testbed.fixtures"]

_INTEGRATION = Path(__file__).parent / "integration"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if _INTEGRATION in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.integration)


@pytest.fixture(autouse=True)
def _fresh_logging() -> Iterator[None]:
    """A test that runs a command configures structlog to print to the sys.stderr of that moment, which pytest
    closes when its capture ends: a later test's log line would then fail on a closed file."""
    yield
    structlog.reset_defaults()
