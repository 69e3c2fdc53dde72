"""The dispatcher as its own process, as the demo, the tests, the e2e suite and the benchmark start it."""

from __future__ import annotations

import sys
from pathlib import Path


def run_argv(kubeconfig: Path, *args: str) -> list[str]:
    """``python -m multikueue run --kubeconfig KUBECONFIG ARGS...`` with this interpreter."""
    return [sys.executable, "-m", "multikueue", "run", "--kubeconfig", str(kubeconfig), *args]
