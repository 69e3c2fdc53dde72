"""Real Kueue on the bench's manager (#8, side by side): its scheduler reserves quota and runs the admission checks,
and with ``multikueue=True`` its own MultiKueue dispatches PipelineRuns through the generic adapter.

Kueue is the interop profile's build (``sigs.k8s.io/kueue`` at the CRDs' version, from its Go module, cached) with
its shipped defaults except what the bed needs (webhooks and metrics on 127.0.0.1, leader election off, log level
info). Its requests are counted by the apiservers' audit logs (bench/audit.py).

"Kueue with the fix" (``--dispatcher kueue-fixed``) is the same Kueue built with
bench/kueue-patches/worker-client-connection.patch (the release-0.19 cherry-pick kubernetes-sigs/kueue#15294 of
#15280: its worker clients take the manager's clientConnection QPS and burst, behind an alpha gate), run with the
gate on and clientConnection at Kueue v0.20's defaults, 1000/1000 (#15206): what Kueue >= v0.19.x does with that
gate on.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio

from bench import proc
from multikueue.kube.client import ApiClient
from multikueue.pki import CertificateAuthority
from multikueue_testbed.interop import KueueProcess

MULTIKUEUE_CONTROLLER = "kueue.x-k8s.io/multikueue"
PIPELINERUN = "PipelineRun.v1.tekton.dev"
KUEUE_DISPATCHERS = ("kueue", "kueue-fixed")  # --dispatcher values where Kueue's own MultiKueue dispatches
FIX_PATCH = Path(__file__).resolve().parent / "kueue-patches" / "worker-client-connection.patch"
FIX_GATE = "MultiKueueReuseClientConnectionConfigForWorkers"
FIXED_CLIENT_CONNECTION = {"qps": 1000, "burst": 1000}  # Kueue v0.20's defaults (kubernetes-sigs/kueue#15206)


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
    def configuration(*, multikueue: bool, fixed: bool = False) -> dict[str, Any]:
        """Kueue's Configuration beyond the bed's: its MultiKueue with the generic adapter for PipelineRuns; with the
        fix, the clientConnection its worker clients then take too."""
        extra: dict[str, Any] = {"multiKueue": {"externalFrameworks": [{"name": PIPELINERUN}]}} if multikueue else {}
        if fixed:
            extra["clientConnection"] = dict(FIXED_CLIENT_CONNECTION)
        return extra

    @staticmethod
    def feature_gates(*, fixed: bool) -> tuple[str, ...]:
        return (f"{FIX_GATE}=true",) if fixed else ()

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
