"""Every result in bench/results/*.json as one table (bench/results/README.md) and one plot (bench/results/plot.png).

python -m bench.report
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
COLUMNS = (
    ("mode", lambda r: r["mode"] + (" +faults" if r.get("faults") else "") + (" backlog" if r.get("backlog") else "")),
    ("W", lambda r: r["workers"]),
    ("N", lambda r: r["objects"]),
    ("dispatched/s", lambda r: f"{r['dispatch_throughput_per_s']:.1f}"),
    ("end-to-end/s", lambda r: f"{r['end_to_end_throughput_per_s']:.1f}"),
    ("latency p50/p95/p99 s", lambda r: "/".join(f"{r['dispatch_latency_s'][q]:.2f}" for q in ("p50", "p95", "p99"))),
    ("status lag p50/p99 s", lambda r: f"{r['status_sync_lag_s']['p50']:.2f}/{r['status_sync_lag_s']['p99']:.2f}"),
    ("CPU s", lambda r: f"{r['controller_cpu_seconds']:.1f}"),
    ("peak RSS MiB", lambda r: f"{r['controller_peak_rss_mib']:.0f}"),
    ("MiB/1000 in flight", lambda r: f"{r['rss_per_1000_in_flight_mib']:.1f}"),
    ("requests/object: manager", lambda r: f"{r['requests_per_object'].get('manager', 0):.2f}"),
    ("busiest worker", lambda r: f"{max(v for k, v in r['requests_per_object'].items() if k != 'manager'):.2f}"),
    ("copies > 1", lambda r: r["objects_created_more_than_once"]),
)


def load() -> list[dict[str, Any]]:
    results = [json.loads(p.read_text()) for p in sorted(RESULTS.glob("*.json"))]
    return sorted(
        results, key=lambda r: (r["mode"], bool(r.get("faults")), bool(r.get("backlog")), r["workers"], r["objects"])
    )


def table(results: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(name for name, _ in COLUMNS) + " |"
    rule = "|" + "---|" * len(COLUMNS)
    rows = ["| " + " | ".join(str(cell(r)) for _, cell in COLUMNS) + " |" for r in results]
    return "\n".join([head, rule, *rows])


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(15, 4.5))
    plain = [r for r in results if not r.get("faults") and not r.get("backlog")]
    for mode, marker in (("kueue", "o"), ("direct", "s")):
        for workers in sorted({r["workers"] for r in plain}):
            series = sorted(
                (r for r in plain if r["mode"] == mode and r["workers"] == workers), key=lambda r: r["objects"]
            )
            if not series:
                continue
            n = [r["objects"] for r in series]
            label = f"{mode}, W={workers}"
            axes[0].plot(n, [r["dispatch_throughput_per_s"] for r in series], marker=marker, label=label)
            axes[1].plot(n, [r["dispatch_latency_s"]["p99"] for r in series], marker=marker, label=label)
            axes[2].plot(n, [r["controller_peak_rss_mib"] for r in series], marker=marker, label=label)
    for ax, title in zip(
        axes, ("objects dispatched per second", "dispatch latency p99 (s)", "controller peak RSS (MiB)"), strict=True
    ):
        ax.set_xscale("log")
        ax.set_xlabel("objects (N)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
    axes[0].legend(fontsize=8)
    figure.suptitle("multikueue dispatcher on the local test bed (2 cores shared with etcd and every kube-apiserver)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> int:
    results = load()
    if not results:
        print(f"no results in {RESULTS}; run python -m bench.run first", file=sys.stderr)
        return 1
    text = table(results)
    readme = RESULTS / "README.md"
    intro = readme.read_text().split("<!-- table -->")[0] if readme.exists() else "# Results\n\n"
    readme.write_text(f"{intro}<!-- table -->\n{text}\n")
    plot(results, RESULTS / "plot.png")
    print(text)
    print(f"\nwrote {readme} and {RESULTS / 'plot.png'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
