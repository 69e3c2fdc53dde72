"""CPU per key of the controllers' work queue with idle workers (issue #46), a dev tool run by hand:

    .venv/bin/python -m bench.queue_cost          # the queue of this tree
    .venv/bin/python -m bench.queue_cost --source /tmp/other-worktree

32 workers (the dispatcher's default concurrency) take keys added one every 0.5 ms and spend 1 ms on each (a round
trip): most workers are idle most of the time, as under the bench's load. Prints the process CPU seconds per 1,000
keys (median of three runs) on uvloop, as the dispatcher runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import anyio

KEYS, WORKERS = 5000, 32


async def one_run() -> float:
    from multikueue.runtime.workqueue import ShutDown, WorkQueue

    queue: WorkQueue[int] = WorkQueue()
    handled = 0
    finished = anyio.Event()

    async def worker() -> None:
        nonlocal handled
        while True:
            try:
                key = await queue.get()
            except ShutDown:
                return
            await anyio.sleep(0.001)
            queue.done(key)
            handled += 1
            if handled == KEYS:
                finished.set()

    began = time.process_time()
    async with anyio.create_task_group() as tg:
        for _ in range(WORKERS):
            tg.start_soon(worker)
        for key in range(KEYS):
            queue.add(key)
            await anyio.sleep(0.0005)
        with anyio.fail_after(120):
            await finished.wait()
        queue.shut_down()
    return (time.process_time() - began) / KEYS * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--source", help="a worktree whose multikueue/ to measure (default: this one)")
    args = parser.parse_args()
    if args.source:
        sys.path.insert(0, args.source)
    runs = [anyio.run(one_run, backend_options={"use_uvloop": True}) for _ in range(3)]
    print(f"{statistics.median(runs):.3f} CPU s per 1,000 keys ({WORKERS} workers, median of 3)")


if __name__ == "__main__":
    main()
