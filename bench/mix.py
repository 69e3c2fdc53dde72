"""The requests one dispatch cannot do without, and what a measured run sent beyond them.

A dispatch's *minimal mix* is what MultiKueue's model itself asks of the clusters, whoever dispatches:

Kueue mode (Kueue's AllAtOnce race), per run over W workers:
- a copy of the Workload on every worker of its MultiKueueConfig (W creates), so every worker's Kueue can admit it;
- two writes to the manager Workload's status: the nomination (``status.nominatedClusterNames``, where copies are)
  and the record of the winner (the admission check ``Ready``, ``status.clusterName``) — the record comes before
  the object is created, so no lost answer can send the run to a second worker;
- the run's object created on the winner (1), the losers' Workload copies deleted (W - 1).

Direct mode (this project's own placement), per run: the placement recorded on the manager object (an annotation,
written before the create for the same reason) and the object created on the chosen worker: 2 requests.

Status mirroring and clean-up come after the dispatch phase (the bench's runs do not change status while being
dispatched), and reads are served by watches. What a run sends beyond the minimal mix is this dispatcher's
overhead; ``overhead`` lists it per cluster.
"""

from __future__ import annotations

import math

Mix = dict[str, dict[str, int]]
"""Requests by cluster (audit-log names: ``manager``, ``bench-worker1``...), then by ``"<verb> <resource>"``."""

KEPT = {
    "create events": "the Event on the Workload or object naming the worker a run went to, where users look "
    "(kubectl describe); Kueue's own MultiKueue writes about three Events per run",
    "patch pipelineruns/status": "Direct mode's MultiKueuePlacement condition on the object: the placement and its "
    "reason where users look (kubectl get -o wide, explain); the annotation beside it is the durable record",
}
"""Overhead requests kept on purpose, and why: they are what a user sees of a dispatch."""

ONE_OFF = ("watch ", "list ", "get /")
"""Start-up and connection upkeep (watches, lists, discovery, health probes): not per run."""


def minimal_mix(mode: str, workers: int, n: int, kind: str = "pipelineruns") -> Mix:
    """The minimal mix for ``n`` runs over ``workers`` workers (each worker takes an equal share of the runs)."""
    names = [f"bench-worker{i + 1}" for i in range(workers)]
    share = {name: math.floor(n * (i + 1) / workers) - math.floor(n * i / workers) for i, name in enumerate(names)}
    if mode == "kueue":
        mix: Mix = {"manager": {"patch workloads/status": 2 * n}}
        for name in names:  # every run's copy everywhere; its object on its winner; the other copies go
            mix[name] = {"create workloads": n, f"create {kind}": share[name], "delete workloads": n - share[name]}
        return mix
    if mode == "direct":
        return {"manager": {f"patch {kind}": n}, **{name: {f"create {kind}": share[name]} for name in names}}
    raise ValueError(f"mode {mode!r}: expected kueue or direct")


def _per_run(key: str) -> bool:
    # "<verb> <resource> <code>" counts a failed request a second time (bench/audit.py): it is in its request's count
    return not key.startswith(ONE_OFF) and len(key.split(" ")) == 2


def per_run(mix: Mix) -> int:
    """Requests of the mix that are per run (start-up, watches and probes left out)."""
    return sum(v for counts in mix.values() for k, v in counts.items() if _per_run(k))


def overhead(measured: Mix, minimal: Mix) -> Mix:
    """What ``measured`` sent beyond ``minimal``, per cluster (a failed request counted under its request). The
    race does not split the runs between the workers exactly evenly: a few more objects on one worker and fewer
    copies deleted there are not overhead (at most one per worker is let pass)."""
    slack = sum(1 for cluster in minimal if cluster != "manager")
    out: Mix = {}
    for cluster, counts in measured.items():
        inherent = minimal.get(cluster, {})
        extra = {k: v - inherent.get(k, 0) for k, v in counts.items() if _per_run(k)}
        if kept := {k: v for k, v in extra.items() if v > (slack if cluster != "manager" else 0)}:
            out[cluster] = kept
    return out
