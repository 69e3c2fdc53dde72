"""The dispatcher with Python's allocation tracing on, for finding what its memory in flight is made of.

``python -m bench.traced OUT run ARGS...`` runs ``multikueue run ARGS...``; on SIGUSR1 it writes the live
allocations, grouped by where they were made (a few frames up, so a decoded JSON object shows which cache keeps
it), to OUT, then renames it into place. Tracing slows the process: use it to see shares, not to time anything.
"""

from __future__ import annotations

import gc
import os
import signal
import sys
import tracemalloc
from types import FrameType

from multikueue.cli import main

FRAMES = 12
TOP = 30


def _dump(out: str) -> None:
    before = tracemalloc.get_traced_memory()[0]
    unreachable = gc.collect()  # what only waited for the cycle collector is not what the process keeps
    snapshot = tracemalloc.take_snapshot().filter_traces([tracemalloc.Filter(False, tracemalloc.__file__)])
    total = sum(s.size for s in snapshot.statistics("filename"))
    lines = [
        f"traced memory before a full collection: {before / 2**20:.1f} MiB; {unreachable} unreachable objects freed",
        f"live traced memory: {total / 2**20:.1f} MiB",
        "",
    ]
    for title, key in (("by line", "lineno"), ("by traceback", "traceback")):
        lines.append(f"## {title}")
        for stat in snapshot.statistics(key)[:TOP]:
            lines.append(f"{stat.size / 2**20:8.2f} MiB {stat.count:9d} blocks")
            frames = stat.traceback.format() if key == "traceback" else [str(stat.traceback[0])]
            lines.extend(f"        {line.strip()}" for line in frames if line.strip())
        lines.append("")
    with open(f"{out}.tmp", "w") as f:
        f.write("\n".join(lines))
    os.replace(f"{out}.tmp", out)


if __name__ == "__main__":
    out, *argv = sys.argv[1:]
    tracemalloc.start(FRAMES)

    def on_signal(_signum: int, _frame: FrameType | None) -> None:
        _dump(out)

    signal.signal(signal.SIGUSR1, on_signal)
    sys.exit(main(argv))
