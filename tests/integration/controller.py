"""Starting the controller as its own process, as the tests that kill or replicate it need."""

from __future__ import annotations

from pathlib import Path

import yaml

from multikueue_testbed import TestBed
from multikueue_testbed.dispatcher import run_argv as dispatcher_argv


def run_argv(bed: TestBed, directory: Path, config_text: str, *extra: str) -> list[str]:
    """``multikueue run`` against the bed's manager, with ``config_text`` as its configuration file; its endpoints
    on free ports unless ``extra`` says otherwise (the last of a repeated flag wins)."""
    kubeconfig, config = directory / "manager.kubeconfig", directory / "config.yaml"
    kubeconfig.write_text(yaml.safe_dump(bed.cluster("manager").kubeconfig))
    config.write_text(config_text)
    ports = ("--metrics-bind-address", "127.0.0.1:0", "--health-probe-bind-address", "127.0.0.1:0")
    return dispatcher_argv(kubeconfig, *ports, "--config-file", str(config), "--log-format", "json", *extra)
