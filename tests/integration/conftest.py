"""Integration fixtures shared across modules (the dispatch scenario harness)."""

from tests.integration.clusters import harness
from tests.integration.scenario import multikueue_config, scenario, widgets, worker_kubeconfigs, worker_sources

__all__ = ["harness", "multikueue_config", "scenario", "widgets", "worker_kubeconfigs", "worker_sources"]
