#!/usr/bin/env python3
"""Show a user why their run waits, as a spawner (JupyterHub's, a CI runner) would: poll
``multikueue status KIND NAMESPACE/NAME -o json`` and print a line whenever where the run stands changes, with
each worker's reason while it waits. Reads only the documented ``RunStatus`` document (README.md, "Asking why
from a program"), never the human text.

    python examples/why_it_waits.py PipelineRun.v1.tekton.dev team-a/hello --timeout 600 \\
        --kubeconfig ~/.kube/manager --secrets-namespace multikueue-system

Arguments it does not know are passed on to ``multikueue status`` (``--kubeconfig``, ``--context``,
``--secrets-namespace``, ``--worker-kubeconfig``). Exit: 0 when the run finished, 1 when it failed or is gone,
2 when ``--timeout`` passed first, 3 when ``status`` itself cannot answer (its one line is passed on)."""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import time
from typing import Any, TextIO

API_VERSION = "multikueue.x-k8s.io/v1alpha1"
ENDED = {"Finished": 0, "Failed": 1, "NotFound": 1}


def status_command(kind: str, run: str, passed_on: list[str]) -> list[str]:
    found = shutil.which("multikueue")
    base = [found] if found else [sys.executable, "-m", "multikueue"]
    return [*base, "status", kind, run, "-o", "json", *passed_on]


def ask(command: list[str], timeout: float) -> dict[str, Any]:
    """One ``RunStatus`` document; ``RuntimeError`` with ``status``'s own line when it has none to give."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if not done.stdout.strip():
        raise RuntimeError(done.stderr.strip() or f"multikueue status exited {done.returncode} with no output")
    document: dict[str, Any] = json.loads(done.stdout)
    if document.get("apiVersion") != API_VERSION:  # a newer document may mean other things: say so, do not guess
        raise RuntimeError(f"unknown RunStatus version {document.get('apiVersion')!r}, this reads {API_VERSION}")
    return document


def progress(document: dict[str, Any]) -> list[str]:
    """What a user is shown: where the run stands and, while it waits, what each worker says."""
    run, phase, worker = document["run"], document["phase"], document["worker"]
    where = f" on {worker}" if worker else ""
    mode = f" ({document['mode']})" if document["mode"] else ""
    lines = [f"{run['kind']} {run['namespace']}/{run['name']}: {phase}{where}{mode}: {document['why']}"]
    if phase.startswith("Waiting") or phase == "Placed":
        lines.extend(f"    {w['name']}: {w['reason']}" for w in document["workers"])
    return lines


def say(text: str, stream: TextIO = sys.stdout) -> None:
    stream.write(text + "\n")
    stream.flush()  # a spawner's log shows each change as it comes


def follow(command: list[str], interval: float, timeout: float) -> int:
    started = time.monotonic()
    deadline = started + timeout
    shown: list[str] = []
    while time.monotonic() < deadline:  # bounded: every pass either ends it or waits out at most `interval`
        try:
            document = ask(command, timeout=max(1.0, deadline - time.monotonic()))
        except (RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
            say(f"[{time.monotonic() - started:5.0f}s] cannot tell: {e}", sys.stderr)
            return 3
        lines = progress(document)
        if lines != shown:
            say(f"[{time.monotonic() - started:5.0f}s] " + "\n".join(lines))
            shown = lines
        if document["phase"] in ENDED:
            return ENDED[document["phase"]]
        time.sleep(min(interval, max(0.0, deadline - time.monotonic())))
    say(f"[{timeout:5.0f}s] still {shown[0] if shown else 'unknown'}: gave up waiting", sys.stderr)
    return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Follow a run with `multikueue status -o json`, as a spawner would.")
    parser.add_argument("kind", help="as configured, e.g. PipelineRun.v1.tekton.dev")
    parser.add_argument("run", metavar="NAMESPACE/NAME")
    parser.add_argument("--interval", type=float, default=5.0, help="seconds between polls (default 5)")
    parser.add_argument("--timeout", type=float, default=3600.0, help="give up after this many seconds (default 3600)")
    args, passed_on = parser.parse_known_args(argv)
    return follow(status_command(args.kind, args.run, passed_on), args.interval, args.timeout)


if __name__ == "__main__":
    sys.exit(main())
