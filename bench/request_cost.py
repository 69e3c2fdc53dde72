"""The CPU one API request costs this process in kube/'s ``ApiClient``, per request shape (a dev tool, run by hand;
not a test, nothing asserted).

    .venv/bin/python -m bench.request_cost                                  # 3,000 of each shape, 16 in flight, x3
    .venv/bin/python -m bench.request_cost --requests 3000 --concurrency 16 --repeats 3 --no-limiter --asyncio
    .venv/bin/python -m bench.request_cost --cprofile /tmp/rc.prof           # cProfile of the measured rounds only
    .venv/bin/python -m bench.request_cost --callgrind --concurrency 1 --requests 300 --repeats 1   # instructions

It starts one kube-apiserver of the test bed (etcd + the manager; binaries from ~/.cache/multikueue, never built
here), installs the tests' small Widget kind and, on uvloop as the dispatcher runs (``multikueue.cli._uvloop``),
issues ``--requests`` requests of each of the shapes the dispatcher issues most, ``--concurrency`` in flight, through
one ``ApiClient`` as a worker's connection builds it (a rate limiter too, at a rate that never makes one wait, so its
bookkeeping is counted; ``--no-limiter`` leaves it out as the manager's client does):

- ``get``: a GET of a small custom object, answer decoded;
- ``status``: a merge patch of its ``/status``, answer decoded (every patch changes the object: the server writes);
- ``event``: a POST of an Event as ``kube.events.record`` writes it, answer read and not decoded.

Each round runs every shape once, one after the other (warm connections: a first pass opens them); the rounds
repeat ``--repeats`` times and the median of the process's CPU seconds (``time.process_time``: user + system, every
thread, the garbage collector included) per 1,000 requests is printed per shape, with the wall-clock rate. What
``kube.client.encode``/``decode`` take of it is timed apart on the same bodies and answers. The API server's own
CPU is not in these figures, but it shares the machine: compare builds back to back on the same machine, with the
load average (printed) alike.

On a machine others are using, CPU seconds moved by 10-25 % between runs of the same build, more than most single
changes to the client. ``--callgrind`` counts instructions instead: it runs the same command under valgrind's
callgrind, which counts only the measured rounds (each starts at a call of ``math.comb`` and ends at one of
``math.perm``, markers nothing else calls), and prints thousands of user-space instructions per request (the
kernel's share is not in them). The count stays within 0.2 % from run to run whatever the machine's load (at 1 or
16 in flight: under valgrind the server always answers first); a run takes about a minute.
"""

from __future__ import annotations

import argparse
import cProfile
import itertools
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anyio

from bench import cores
from multikueue.kube import client as kube_client
from multikueue.kube.client import MERGE_PATCH, ApiClient, api_client_from_kubeconfig, rate_limit
from multikueue_testbed import crds
from multikueue_testbed.binaries import find_binaries
from multikueue_testbed.objects import WIDGET_GROUP, widget, widget_crd
from multikueue_testbed.testbed import MANAGER, TestBed

NAMESPACE = "default"
WIDGETS = "/apis/" + WIDGET_GROUP + "/v1/namespaces/" + NAMESPACE + "/widgets"


@dataclass(frozen=True)
class Shape:
    """One kind of request: how the i-th is sent, its body (``None``: none), and whether its answer is decoded."""

    name: str
    send: Callable[[ApiClient, int], Awaitable[Any]]
    body: Callable[[int], Any] | None
    decoded: bool


def _name(i: int, objects: int) -> str:
    return f"cost-{i % objects}"


def _status(i: int) -> dict[str, Any]:
    return {"status": {"phase": "Running", "message": f"step {i}", "ready": i}}


def _event(i: int) -> dict[str, Any]:
    """As ``kube.events.record`` builds one."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    name = f"cost-{i % 16}"
    return {
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": NAMESPACE},
        "involvedObject": {
            "apiVersion": f"{WIDGET_GROUP}/v1", "kind": "Widget", "name": name, "namespace": NAMESPACE,
            "uid": "5d0f3a1e-8a43-4a0e-9a39-0c0a8f6f3b1d", "resourceVersion": "1234",
        },
        "type": "Normal", "reason": "Placed", "message": f"placed on worker{i % 3} (least loaded of 3)",
        "source": {"component": "multikueue"}, "reportingComponent": "multikueue",
        "firstTimestamp": now, "lastTimestamp": now, "count": 1,
    }  # fmt: skip


def shapes(objects: int) -> list[Shape]:
    async def get(api: ApiClient, i: int) -> Any:
        return await api.request("GET", f"{WIDGETS}/{_name(i, objects)}")

    async def status(api: ApiClient, i: int) -> Any:
        path = f"{WIDGETS}/{_name(i, objects)}/status"
        return await api.request("PATCH", path, body=_status(i), content_type=MERGE_PATCH)

    async def event(api: ApiClient, i: int) -> Any:
        return await api.send("POST", f"/api/v1/namespaces/{NAMESPACE}/events", body=_event(i))

    return [Shape("get", get, None, True), Shape("status", status, _status, True), Shape("event", event, _event, False)]


async def _run(api: ApiClient, shape: Shape, numbers: range, concurrency: int) -> None:
    pending: Iterator[int] = iter(numbers)  # shared: each task takes the next number (one loop, no race)

    async def one_at_a_time() -> None:
        for i in pending:
            await shape.send(api, i)

    async with anyio.create_task_group() as tg:
        for _ in range(concurrency):
            tg.start_soon(one_at_a_time)


@dataclass
class Figures:
    cpu: list[float]  # CPU s per 1,000 requests, one per round
    system: list[float]  # of it in the kernel (system time: sockets, epoll)
    rate: list[float]  # requests per wall-clock second, one per round


async def measure(kubeconfig: dict[str, Any], args: argparse.Namespace, profile: cProfile.Profile | None
                  ) -> tuple[dict[str, Figures], dict[str, Any]]:  # fmt: skip
    limiter = None if args.no_limiter else rate_limit(qps=1e9, burst=400)
    async with await api_client_from_kubeconfig(kubeconfig, limiter=limiter) as api:
        await crds.install_crds(api, [widget_crd(strict_status=True)])
        for i in range(args.objects):
            await api.request("POST", WIDGETS, body=widget(f"cost-{i}"))
        every = shapes(args.objects)
        answers = {s.name: await s.send(api, 0) for s in every}  # a sample of each decoded answer
        for shape in every:  # warm: connections open, code paths taken once
            await _run(api, shape, range(min(args.requests, 500)), args.concurrency)
        figures = {s.name: Figures([], [], []) for s in every}
        starts = itertools.count(args.requests, args.requests)  # every patch a new message: the server writes
        for _ in range(args.repeats):
            for shape in every:
                start = next(starts)
                batch = range(start, start + args.requests)
                started, system, wall = time.process_time(), os.times().system, time.perf_counter()
                if profile is not None:
                    profile.enable()
                math.comb(1, 1)  # callgrind's marks (--callgrind): the round begins
                await _run(api, shape, batch, args.concurrency)
                math.perm(1, 1)  # and ends
                if profile is not None:
                    profile.disable()
                cpu, wall = time.process_time() - started, time.perf_counter() - wall
                figures[shape.name].cpu.append(cpu / args.requests * 1000)
                figures[shape.name].system.append((os.times().system - system) / args.requests * 1000)
                figures[shape.name].rate.append(args.requests / wall)
    return figures, answers


def json_cost(shape: Shape, answer: Any, requests: int, repeats: int) -> tuple[float, float]:
    """Median CPU s per 1,000 of ``encode`` of this shape's bodies and ``decode`` of its answer (0 where none)."""
    bodies = [shape.body(i) for i in range(requests)] if shape.body is not None else []
    data = kube_client.encode(answer) if shape.decoded and answer is not None else b""
    encoding, decoding = [], []
    for _ in range(repeats):
        started = time.process_time()
        for body in bodies:
            kube_client.encode(body)
        encoding.append((time.process_time() - started) / requests * 1000)
        started = time.process_time()
        if data:
            for _ in range(requests):
                kube_client.decode(data)
        decoding.append((time.process_time() - started) / requests * 1000)
    return statistics.median(encoding), statistics.median(decoding)


def report(figures: dict[str, Figures], answers: dict[str, Any], every: list[Shape], args: argparse.Namespace) -> None:
    print(f"{'shape':<8} {'CPU s/1,000 (median)':>21} {'each round':>22} {'kernel':>7} {'req/s':>7} {'encode':>8}"
          f" {'decode':>8}")  # fmt: skip
    for shape in every:
        f = figures[shape.name]
        cpu = statistics.median(f.cpu)
        encoding, decoding = json_cost(shape, answers[shape.name], args.requests, args.repeats)
        rounds = " ".join(f"{c:.3f}" for c in f.cpu)
        print(f"{shape.name:<8} {cpu:>21.3f} {rounds:>22} {statistics.median(f.system):>7.3f}"
              f" {statistics.median(f.rate):>7.0f} "
              f"{encoding:>8.4f} {decoding:>8.4f}  ({(encoding + decoding) / cpu:.1%} of the request)")  # fmt: skip
    print(
        "kernel: the system time of that CPU (median); encode/decode: CPU s per 1,000 of kube.client.encode (request"
        " bodies) and decode (answers), timed apart"
    )


def _summary(dump: str) -> int:
    """The instructions a callgrind dump counts."""
    found = re.search(r"^summary: (\d+)$", dump, re.MULTILINE)
    if found is None:
        raise ValueError("a callgrind dump without its summary line")
    return int(found.group(1))


def callgrind(argv: list[str], args: argparse.Namespace) -> int:
    """This command again under callgrind; the instructions of each measured round, per request and shape."""
    if shutil.which("valgrind") is None:
        print("--callgrind needs valgrind (apt-get install valgrind)", file=sys.stderr)
        return 2
    every = [s.name for s in shapes(args.objects)]
    with tempfile.TemporaryDirectory() as directory:
        command = ["valgrind", "-q", "--tool=callgrind", "--zero-before=math_comb", "--dump-before=math_perm",
                   f"--callgrind-out-file={directory}/callgrind.out", sys.executable, "-m", "bench.request_cost",
                   *(a for a in argv if a != "--callgrind")]  # fmt: skip
        if subprocess.run(command).returncode != 0:
            return 1
        dumps = sorted(Path(directory).glob("callgrind.out.*"), key=lambda p: int(p.suffix[1:]))
        counts = [_summary(d.read_text()) for d in dumps]
    if len(counts) != len(every) * args.repeats:
        print(f"expected {len(every) * args.repeats} measured rounds, callgrind dumped {len(counts)}", file=sys.stderr)
        return 1
    print(f"{'shape':<8} {'k instructions/request (median)':>32} {'each round':>24}")
    for i, name in enumerate(every):
        rounds = [c / args.requests / 1000 for c in counts[i :: len(every)]]
        print(f"{name:<8} {statistics.median(rounds):>32.1f} {' '.join(f'{r:.1f}' for r in rounds):>24}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.request_cost", description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="requests of each shape per round")
    parser.add_argument("--concurrency", type=int, default=16, help="requests in flight")
    parser.add_argument("--repeats", type=int, default=3, help="rounds (the median is reported)")
    parser.add_argument(
        "--objects",
        type=int,
        default=256,
        help="Widgets the GETs and patches go to in turn (more"
        " than the 128 URLs yarl keeps parsed: each path is new to it, as a dispatcher's are)",
    )
    parser.add_argument("--no-limiter", action="store_true", help="no rate limiter (as the manager's client)")
    parser.add_argument("--asyncio", action="store_true", help="asyncio's own event loop instead of uvloop")
    parser.add_argument("--split-cores", action="store_true", help="etcd and the API server on CPU 0, this on CPU 1")
    parser.add_argument("--cprofile", metavar="PATH", help="write a cProfile of the measured rounds to PATH")
    parser.add_argument("--callgrind", action="store_true", help="count instructions under valgrind instead")
    args = parser.parse_args(argv)
    if args.callgrind:
        return callgrind(sys.argv[1:] if argv is None else argv, args)
    profile = cProfile.Profile() if args.cprofile else None
    if args.split_cores and (problem := cores.check()):
        parser.error(problem)
    with TestBed(find_binaries(build=False), clusters=(MANAGER,), progress=lambda _: None) as bed:
        if args.split_cores:
            cores.servers_apart(bed)
            cores.load_here()
        print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; python {sys.version.split()[0]},"
              f" aiohttp {aiohttp.__version__}, {'asyncio' if args.asyncio else 'uvloop'},"
              f" limiter {'off' if args.no_limiter else 'on'}, {args.requests} requests x {args.repeats},"
              f" {args.concurrency} in flight")  # fmt: skip
        figures, answers = anyio.run(
            measure, bed.cluster(MANAGER).kubeconfig, args, profile, backend_options={"use_uvloop": not args.asyncio}
        )
    report(figures, answers, shapes(args.objects), args)
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if profile is not None:
        profile.dump_stats(args.cprofile)
    return 0


if __name__ == "__main__":
    sys.exit(main())
