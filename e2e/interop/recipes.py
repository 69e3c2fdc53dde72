"""The adapter lines docs/integration.md gives for a kind: what a user copies is what the parity tests run."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import yaml

DOCS = Path(__file__).parents[2] / "docs" / "integration.md"


def recipe(title: str) -> dict[str, Any]:
    """The one adapter in the first YAML block under the ``### title`` heading."""
    block = DOCS.read_text().split(f"### {title}", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    [adapter] = yaml.safe_load(block)
    return cast(dict[str, Any], adapter)
