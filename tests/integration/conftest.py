"""Integration fixtures shared across modules (the dispatch scenario harness)."""

from tests.integration.scenario import multikueue_config, scenario, widgets

__all__ = ["multikueue_config", "scenario", "widgets"]
