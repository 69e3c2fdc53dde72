"""The dispatcher as its own process (the demo, the e2e suite, the benchmark) or in this one (the tests)."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Literal

import anyio

from multikueue.config import parse_configuration
from multikueue.kube.client import ApiClient
from multikueue.process import Process


def run_argv(kubeconfig: Path, *args: str) -> list[str]:
    """``python -m multikueue run --kubeconfig KUBECONFIG ARGS...`` with this interpreter."""
    return [sys.executable, "-m", "multikueue", "run", "--kubeconfig", str(kubeconfig), *args]


@asynccontextmanager
async def running(api: ApiClient, text: str, *, role: Literal["manager", "worker"] = "manager",
                  temp_dir: Path | None = None, timeout: float = 60.0) -> AsyncIterator[Process]:  # fmt: skip
    """The controller in this process, from a configuration document, until the block ends."""
    manager = Process(api, parse_configuration(text), role=role, temp_dir=temp_dir)
    async with anyio.create_task_group() as tg:
        tg.start_soon(manager.run)
        with anyio.fail_after(timeout):
            await manager.started.wait()
        yield manager
        tg.cancel_scope.cancel()
