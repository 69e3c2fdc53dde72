"""The dispatcher as the bench runs it: its own process (or ``--shards`` of them), with CPU time, peak RSS and
its /metrics at hand."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import ClassVar

import aiohttp
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from bench import proc
from multikueue_testbed.dispatcher import run_argv
from multikueue_testbed.testbed import free_port
from multikueue_testbed.waiting import eventually

ROOT = Path(__file__).resolve().parents[1]


def _plain_metrics(checkout: Path, port: int) -> list[str]:
    """/metrics in plain HTTP on ``port``, no health port: the bench reads its own dispatcher on the loopback, and
    the TokenReview and SubjectAccessReview a secure scrape makes would count among the requests measured. A
    checkout from before the HTTPS endpoint (--source) had one --http-address for everything."""
    if not (checkout / "multikueue" / "endpoints.py").exists():
        return ["--http-address", f"127.0.0.1:{port}"]
    return ["--metrics-bind-address", f"127.0.0.1:{port}", "--metrics-secure=false", "--health-probe-bind-address="]


class Dispatcher:
    """The controller as its own process, with its CPU time, peak RSS and /metrics at hand."""

    started: ClassVar[list[Dispatcher]] = []  # stopped when the bench ends, however it ends

    def __init__(
        self,
        kubeconfig: Path,
        config: str | None,
        workdir: Path,
        *,
        traced: Path | None = None,
        source: Path | None = None,
        interpreter: str | None = None,
        extra: tuple[str, ...] = (),
        identity: str = "",
    ) -> None:
        self.port = free_port()
        self.identity = identity  # its leader-election identity, when it runs as one of several replicas
        source_args: tuple[str, ...] = ()  # no file: the configuration's ConfigMap, reloaded on change as deployed
        if config is not None:
            (workdir / "config.yaml").write_text(config)
            source_args = ("--config-file", str(workdir / "config.yaml"))
        self.argv = run_argv(
            kubeconfig,
            *source_args,
            *_plain_metrics((source or ROOT).resolve(), self.port),
            *("--log-format", "json", "--log-level", "warning"),
            *extra,
        )
        self.argv[0] = interpreter or self.argv[0]
        self.traced = traced
        if traced is not None:  # python -m bench.traced OUT run ...: the same command under tracemalloc
            self.argv[1:3] = ["-m", "bench.traced", str(traced.resolve())]
        self.log = workdir / "dispatcher.log"
        # Started in its checkout (this one, or --source's): ``-m`` puts the working directory first on the path.
        self.cwd = (source or ROOT).resolve()
        self.process: subprocess.Popen[bytes] | None = None
        self.cpu_before_restarts = 0.0
        self.peak_rss = 0
        self.exits: list[int] = []  # exit codes of the times it ended by itself

    def start(self) -> None:
        Dispatcher.started.append(self)
        with self.log.open("ab") as log:
            self.process = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.cwd)

    def cpu_seconds(self) -> float:
        assert self.process is not None
        return self.cpu_before_restarts + proc.cpu_seconds(self.process.pid)

    def rss(self) -> int:
        """Current RSS in bytes; the peak is tracked across restarts."""
        assert self.process is not None
        current, peak = proc.memory(self.process.pid)
        self.peak_rss = max(self.peak_rss, peak)
        return current

    def kill(self) -> None:
        assert self.process is not None
        if self.process.poll() is not None:  # it ended by itself: a finding, kept for the result
            self.exits.append(self.process.returncode)
            return
        self.rss()
        self.cpu_before_restarts = self.cpu_seconds()
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)

    def pause(self) -> None:
        """Stop it gracefully, keeping its CPU time and peak RSS for the totals (backlog runs start it again)."""
        assert self.process is not None
        self.rss()
        self.cpu_before_restarts = self.cpu_seconds()
        self.process.terminate()
        self.process.wait(timeout=60)

    async def dump_allocations(self) -> None:
        """With --tracemalloc: have the process write its live allocations (bench/traced.py) and wait for them."""
        assert self.process is not None
        assert self.traced is not None
        self.traced.unlink(missing_ok=True)
        self.process.send_signal(signal.SIGUSR1)
        traced = self.traced

        async def written() -> bool:
            return traced.exists()

        await eventually(written, timeout=300, what="the allocation dump")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            self.process.wait(timeout=60)

    async def _samples(self, name: str) -> list[Sample]:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=10)) as http,
            http.get(f"http://127.0.0.1:{self.port}/metrics") as response,
        ):
            text = await response.text()
        return [s for family in text_string_to_metric_families(text) for s in family.samples if s.name == name]

    async def requests(self) -> dict[str, float]:
        """The dispatcher's own request counter, per cluster and method (the bench counts from the audit logs)."""
        totals: dict[str, float] = {}
        for sample in await self._samples("multikueue_api_requests_total"):
            key = f"{sample.labels['cluster']} {sample.labels['method']}"
            totals[key] = totals.get(key, 0.0) + sample.value
        return totals

    async def queue_wait(self) -> dict[str, dict[str, float]]:
        """Per controller: reconciles started and their mean wait in the work queue (seconds)."""
        sums = {s.labels["controller"]: s.value for s in await self._samples("multikueue_workqueue_wait_seconds_sum")}
        counts = await self._samples("multikueue_workqueue_wait_seconds_count")
        return {
            c.labels["controller"]: {"reconciles": c.value, "mean_wait_s": sums[c.labels["controller"]] / c.value}
            for c in counts
            if c.value
        }

    async def connected(self) -> set[str]:
        """The workers whose connections are up (its own view: beside Kueue, ``Active`` is written by both)."""
        return {s.labels["cluster"] for s in await self._samples("multikueue_worker_connected") if s.value == 1}


class Shards:
    """``--shards N`` (Direct mode): N dispatcher processes, each placing the objects its ``objectSelector`` selects
    (docs/scaling.md), measured as one: CPU, RSS and requests summed, connected where all are."""

    def __init__(self, members: list[Dispatcher]) -> None:
        self.members = members

    @property
    def peak_rss(self) -> int:
        """The sum of each one's peak (an upper bound of the peak of their sum)."""
        return sum(m.peak_rss for m in self.members)

    def start(self) -> None:
        for m in self.members:
            m.start()

    def stop(self) -> None:
        for m in self.members:
            m.stop()

    def pause(self) -> None:
        for m in self.members:
            m.pause()

    def kill(self) -> None:
        for m in self.members:
            m.kill()

    def cpu_seconds(self) -> float:
        return sum(m.cpu_seconds() for m in self.members)

    def each_cpu_seconds(self) -> list[float]:
        return [m.cpu_seconds() for m in self.members]

    def rss(self) -> int:
        return sum(m.rss() for m in self.members)

    async def requests(self) -> dict[str, float]:
        totals: dict[str, float] = {}
        for m in self.members:
            for key, value in (await m.requests()).items():
                totals[key] = totals.get(key, 0.0) + value
        return totals

    async def queue_wait(self) -> dict[str, dict[str, float]]:
        return {f"shard{i} {c}": v for i, m in enumerate(self.members) for c, v in (await m.queue_wait()).items()}

    async def connected(self) -> set[str]:
        sets = [await m.connected() for m in self.members]
        return set.intersection(*sets) if sets else set()

    async def dump_allocations(self) -> None:
        raise NotImplementedError("--tracemalloc traces one dispatcher: not with --shards")
