"""``--split-cores``: the API servers and etcd on one core, everything that loads them on the other.

On a 2-core machine the bench's API servers, its load generator and the dispatcher take CPU from each other, so a
drain rate mixes how fast the dispatcher drives the servers with how much CPU it takes from them. A deployed
dispatcher runs in a Pod of its own, away from its API servers. With the cores split, the servers get the same one
core in a benchmark run and in its ceiling's replay (``bench.ceiling``): the fraction then says how close the
dispatcher drives them to what they can do, not how much CPU it costs them.
"""

from __future__ import annotations

import os
from pathlib import Path

from multikueue_testbed.testbed import TestBed

SERVERS = frozenset({0})
"""The core etcd and every kube-apiserver run on."""
LOAD = frozenset({1})
"""The core the bench, the dispatcher and the replayer run on (set on the bench's own process: inherited)."""


def check() -> str | None:
    """Why the cores cannot be split here, or ``None``."""
    available = os.sched_getaffinity(0)
    if not (SERVERS | LOAD).issubset(available):
        return f"--split-cores needs CPUs {sorted(SERVERS | LOAD)}; this process may use {sorted(available)}"
    return None


def pin(pid: int, cpus: frozenset[int]) -> None:
    """Every thread of ``pid`` onto ``cpus`` (threads it starts later inherit their creator's)."""
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            os.sched_setaffinity(int(task.name), cpus)
        except ProcessLookupError:  # a thread that ended meanwhile
            continue


def load_here() -> None:
    """This process (and what it starts from now on) onto the load's core."""
    pin(os.getpid(), LOAD)


def servers_apart(bed: TestBed) -> None:
    """etcd and the bed's kube-apiservers onto the servers' core."""
    processes = [bed.etcd, *(c.process for c in bed.clusters.values())]
    for process in processes:
        if process is not None and process.pid is not None:
            pin(process.pid, SERVERS)
