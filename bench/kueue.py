"""Real Kueue on the bench's manager (#8, side by side): its scheduler reserves quota and runs the admission checks,
and with ``multikueue=True`` its own MultiKueue dispatches PipelineRuns through the generic adapter.

Kueue is the interop profile's build (``sigs.k8s.io/kueue`` at the CRDs' version, from its Go module, cached) with
its shipped defaults except what the bed needs (webhooks and metrics on 127.0.0.1, leader election off, log level
info). Its requests are counted by the apiservers' audit logs (bench/audit.py).
"""

from __future__ import annotations

from typing import Any

import anyio

from bench import proc
from multikueue.kube.client import ApiClient
from multikueue.pki import CertificateAuthority
from multikueue.testing.interop import KueueProcess

MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
PIPELINERUN = "PipelineRun.v1.tekton.dev"


class RealKueue:
    """One Kueue manager process on the bed's manager cluster, with its CPU and RSS at hand (its requests are
    counted by the audit logs)."""

    def __init__(self, process: KueueProcess) -> None:
        self.process = process
        self.peak_rss = 0

    @classmethod
    async def start(cls, api: ApiClient, process: KueueProcess) -> RealKueue:
        """Install Kueue's CRDs (with conversion), webhooks and namespace on the manager, start it, wait for it."""
        kueue = cls(process)
        await process.install(api, CertificateAuthority("bench-kueue"), [PIPELINERUN])
        await anyio.to_thread.run_sync(process.wait_ready)
        return kueue

    @staticmethod
    def configuration(*, multikueue: bool) -> dict[str, Any]:
        """Kueue's Configuration beyond the bed's: its MultiKueue with the generic adapter for PipelineRuns."""
        return {"multiKueue": {"externalFrameworks": [{"name": PIPELINERUN}]}} if multikueue else {}

    @property
    def pid(self) -> int:
        pid = self.process.process.pid if self.process.process else None
        assert pid is not None, "Kueue is not running"
        return pid

    def cpu_seconds(self) -> float:
        return proc.cpu_seconds(self.pid)

    def rss(self) -> int:
        current, peak = proc.memory(self.pid)
        self.peak_rss = max(self.peak_rss, peak)
        return current

    def stop(self) -> None:
        self.process.stop()
