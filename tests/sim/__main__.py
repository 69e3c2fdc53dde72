"""Runs schedules of the simulation and prints a summary; a failing schedule prints the one command that replays it.

    python -m tests.sim                          # the default budget (seeds 1-200, both policies)
    python -m tests.sim --seeds 5000 --start 1   # a long run
    python -m tests.sim --replay 1234 --policy AtMostOnce --verbose   # one schedule again, with the dispatcher's log

Each schedule runs on virtual time in this process; string hashing must be fixed for a seed to replay, so the
command re-executes itself with ``PYTHONHASHSEED=0`` when it is not.
"""

from __future__ import annotations

import argparse
import collections
import os
import sys
import tempfile
import time
from pathlib import Path

POLICIES = ("AtLeastOnce", "AtMostOnce")


def _flatten(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup) and error.exceptions:
        error = error.exceptions[0]
    return error


def run_one(seed: int, policy: str, *, faults: bool = True) -> tuple[str | None, dict[str, int], float]:
    """One schedule: its violation (``None`` when every invariant held), the faults it injected, its virtual time."""
    from tests.sim.loop import run
    from tests.sim.world import Violation, World

    world = World(seed, policy=policy, faults=faults)
    with tempfile.TemporaryDirectory(prefix="multikueue-sim-") as tmp:
        try:
            _, loop = run(lambda: world.run(Path(tmp)), seed)
            virtual = loop.now
        except BaseException as e:  # a schedule's failure is its result, whatever it is
            error = _flatten(e)
            if isinstance(error, KeyboardInterrupt):
                raise
            what = str(error) if isinstance(error, Violation) else f"seed {seed}: {type(error).__name__}: {error}"
            return what, world.faults_injected, 0.0
    return None, world.faults_injected, virtual


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.sim", description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=100, help="schedules per policy (default 100)")
    parser.add_argument("--start", type=int, default=1, help="the first seed")
    parser.add_argument("--policy", choices=POLICIES, action="append", help="a lostWorkerPolicy (default: both)")
    parser.add_argument("--replay", type=int, help="one seed, with the dispatcher's log (--verbose) and its steps")
    parser.add_argument("--verbose", action="store_true", help="the dispatcher's log at info level")
    args = parser.parse_args(argv)
    if os.environ.get("PYTHONHASHSEED") != "0":
        os.execve(sys.executable, [sys.executable, "-m", "tests.sim", *(argv or sys.argv[1:])],
                  {**os.environ, "PYTHONHASHSEED": "0"})  # fmt: skip
    from multikueue import logs

    logs.configure(level="info" if args.verbose else "critical")
    policies = args.policy or list(POLICIES)
    seeds = [args.replay] if args.replay is not None else list(range(args.start, args.start + args.seeds))
    started = time.monotonic()
    failures: list[str] = []
    faults: collections.Counter[str] = collections.Counter()
    virtual = 0.0
    done = 0
    for policy in policies:
        for seed in seeds:
            violation, injected, seconds = run_one(seed, policy)
            faults.update(injected)
            virtual += seconds
            done += 1
            if violation is not None:
                failures.append(violation)
                replay = f"python -m tests.sim --replay {seed} --policy {policy} --verbose"
                print(f"VIOLATION ({policy}) {violation}\n  replay: {replay}", flush=True)
            if done % 25 == 0:
                print(f"[{time.monotonic() - started:6.1f}s] {done} schedules, {len(failures)} violations",
                      flush=True)  # fmt: skip
    elapsed = time.monotonic() - started
    print(f"\nschedules {done}  violations {len(failures)}  wall {elapsed:.1f}s  "
          f"({done / elapsed * 60:.0f} per minute)  virtual {virtual / 3600:.1f}h")  # fmt: skip
    print("faults injected: " + (", ".join(f"{k} {v}" for k, v in sorted(faults.items())) or "none"))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
