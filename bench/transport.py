"""HTTP/1.1 (aiohttp, what kube/'s client uses) against HTTP/2 (httpx with h2) as a controller's transport to
one kube-apiserver: memory held by connections, CPU per request, and rate, with C requests in flight.

    python -m bench.transport --concurrency 128 --requests 20000

One kube-apiserver of the test bed; 256 ConfigMaps the size of a cached Workload (~5 KB) read and merge-patched
in turn; each transport runs in a fresh process (``--one``), so its RSS growth is its own. A benchmark: nothing is
asserted. Needs ``httpx[http2]`` (not a dependency of the controller): ``pip install 'httpx[http2]'``.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import ssl
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

from bench import proc
from bench.run import say
from multikueue_testbed.testbed import TestBed

NAME, NAMESPACE = "transport", "default"
OBJECTS = 256  # request i reads or writes ConfigMap i % OBJECTS: no two writes in flight queue on one object


def path(i: int) -> str:
    return f"/api/v1/namespaces/{NAMESPACE}/configmaps/{NAME}-{i % OBJECTS}"


TRANSPORTS = ("aiohttp", "httpx-h2", "httpx-h1")


def rss() -> int:
    return proc.memory(os.getpid())[0]


async def drive(send: Any, concurrency: int, requests: int) -> float:
    """``requests`` requests, ``concurrency`` in flight, alternating GET and PATCH; the wall seconds."""
    limiter = anyio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with limiter:
            await send(i)

    start = time.monotonic()
    async with anyio.create_task_group() as tg:
        for i in range(requests):
            await limiter.acquire()
            limiter.release()
            tg.start_soon(one, i)
    return time.monotonic() - start


def patch_body(i: int) -> bytes:
    return json.dumps({"data": {"step": str(i)}}).encode()


async def aiohttp_transport(server: str, certs: dict[str, str], concurrency: int, requests: int) -> dict[str, float]:
    import aiohttp

    context = ssl.create_default_context(cafile=certs["ca"])
    context.load_cert_chain(certs["cert"], certs["key"])
    base = rss()
    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100, ssl=context)) as session:

        async def send(i: int) -> None:
            if i % 2:
                headers = {"Content-Type": "application/merge-patch+json"}
                async with session.patch(server + path(i), data=patch_body(i), headers=headers) as r:
                    await r.read()
            else:
                async with session.get(server + path(i)) as r:
                    await r.read()

        cpu, seconds = time.process_time(), await drive(send, concurrency, requests)
        return {"rss_growth_mib": (rss() - base) / 2**20, "cpu_s": time.process_time() - cpu, "seconds": seconds}


async def httpx_transport(
    server: str, certs: dict[str, str], concurrency: int, requests: int, *, http2: bool = True
) -> dict[str, float]:
    import httpx

    context = ssl.create_default_context(cafile=certs["ca"])
    context.load_cert_chain(certs["cert"], certs["key"])
    base = rss()
    limits = httpx.Limits(max_connections=100, max_keepalive_connections=100)
    async with httpx.AsyncClient(http2=http2, verify=context, limits=limits, base_url=server) as client:

        async def send(i: int) -> None:
            if i % 2:
                headers = {"Content-Type": "application/merge-patch+json"}
                r = await client.patch(path(i), content=patch_body(i), headers=headers)
            else:
                r = await client.get(path(i))
            assert r.http_version == ("HTTP/2" if http2 else "HTTP/1.1"), r.http_version

        cpu, seconds = time.process_time(), await drive(send, concurrency, requests)
        return {"rss_growth_mib": (rss() - base) / 2**20, "cpu_s": time.process_time() - cpu, "seconds": seconds}


async def create_config_map(kubeconfig: dict[str, Any]) -> None:
    from multikueue.kube.client import api_client_from_kubeconfig

    async with await api_client_from_kubeconfig(kubeconfig) as api:
        for i in range(OBJECTS):
            body = {"metadata": {"name": f"{NAME}-{i}"}, "data": {"payload": "x" * 5000}}
            await api.send("POST", f"/api/v1/namespaces/{NAMESPACE}/configmaps", body=body)


def one(args: argparse.Namespace) -> int:
    certs = json.loads(args.one)
    transports: dict[str, Callable[..., Awaitable[dict[str, float]]]] = {
        "aiohttp": aiohttp_transport,
        "httpx-h2": httpx_transport,
        "httpx-h1": functools.partial(httpx_transport, http2=False),
    }
    run = transports[args.transport]
    result = anyio.run(run, certs["server"], certs, args.concurrency, args.requests)
    result["requests_per_s"] = args.requests / result["seconds"]
    result["cpu_ms_per_request"] = 1000 * result["cpu_s"] / args.requests
    print(json.dumps(result))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.transport", description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, default=128)
    parser.add_argument("--requests", type=int, default=20000)
    parser.add_argument("--transport", choices=TRANSPORTS, help=argparse.SUPPRESS)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    if args.one:
        return one(args)
    results: dict[str, Any] = {"concurrency": args.concurrency, "requests": args.requests}
    with tempfile.TemporaryDirectory() as scratch, TestBed(clusters=("manager",)) as bed:
        cluster = bed.cluster("manager")
        files = {"ca": cluster.ca_pem, "cert": cluster.admin.cert_pem, "key": cluster.admin.key_pem}
        certs: dict[str, str] = {"server": cluster.url}
        for key, pem in files.items():
            (Path(scratch) / key).write_bytes(pem)
            certs[key] = str(Path(scratch) / key)
        anyio.run(create_config_map, cluster.kubeconfig)
        for transport in TRANSPORTS:
            say(f"{transport}: {args.requests} requests, {args.concurrency} in flight")
            out = subprocess.run(
                [sys.executable, "-m", "bench.transport", "--transport", transport, "--one", json.dumps(certs),
                 "--concurrency", str(args.concurrency), "--requests", str(args.requests)],
                capture_output=True, text=True, check=True, timeout=1200,
            )  # fmt: skip
            results[transport] = json.loads(out.stdout)
            say(f"{transport}: {results[transport]}")
    text = json.dumps(results, indent=2)
    if args.out:
        args.out.write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
