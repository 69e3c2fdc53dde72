"""Every result in bench/results/*.json as one table (bench/results/README.md) and one plot (bench/results/plot.png).

python -m bench.report
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def row_label(r: dict[str, Any]) -> str:
    if r.get("dispatcher") == "kueue":
        return "Kueue's own MultiKueue"
    text = str(r["mode"]) + (" +faults" if r.get("faults") else "") + (" backlog" if r.get("backlog") else "")
    text += " fault soak" if r.get("faults_injected") and not r.get("faults") else ""
    text += f" {r['rate_per_s']:g}/s" if r.get("rate_per_s") else ""
    text += f" {r['shards']} shards" if r.get("shards", 1) > 1 else ""
    text += " (cores split)" if r.get("split_cores") else ""
    return text + (" (real Kueue)" if r.get("kueue") == "real" else "")


COLUMNS = (
    ("mode", row_label),
    ("commit", lambda r: r.get("source") or "older"),
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
    ("runs on 2 workers", lambda r: r.get("runs_on_two_workers", "-")),
)


def load(kind: str = "run") -> list[dict[str, Any]]:
    """The results of one kind: ``run`` (python -m bench.run) or ``ceiling`` (python -m bench.ceiling)."""
    key = {"run": "dispatch_throughput_per_s", "ceiling": "ceiling_objects_per_s"}[kind]
    results = [r for p in sorted(RESULTS.glob("*.json")) if key in (r := json.loads(p.read_text()))]
    return sorted(results, key=lambda r: (str(r["mode"]), r["workers"], r["objects"], str(r.get("backlog")),
                                          bool(r.get("split_cores"))))  # fmt: skip


def ceilings(results: list[dict[str, Any]]) -> str:
    rows = ["| mode | W | N | ceiling objects/s (requests/s) | dispatcher drain /s | fraction | requests/object |",
            "|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        replay = r["replay"]
        rows.append(f"| {row_label(r)} | {r['workers']} | {r['objects']} "
                    f"| {r['ceiling_objects_per_s']:.1f} ({replay['requests_per_s']:.0f}) "
                    f"| {r['dispatcher_objects_per_s']:.1f} | {r['fraction_of_ceiling']:.2f} "
                    f"| {r['requests_per_object_replayed']:.2f} |")  # fmt: skip
    return "\n".join(rows)


def table(results: list[dict[str, Any]]) -> str:
    head = "| " + " | ".join(name for name, _ in COLUMNS) + " |"
    rule = "|" + "---|" * len(COLUMNS)
    rows = ["| " + " | ".join(str(cell(r)) for _, cell in COLUMNS) + " |" for r in results]
    return "\n".join([head, rule, *rows])


def plot(results: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, grid = plt.subplots(2, 3, figsize=(15, 9))
    axes = grid[0]
    by_workers(results, grid[1])
    plain = [r for r in results if row_label(r) in ("kueue", "direct")]
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


def by_workers(results: list[dict[str, Any]], axes: Any) -> None:
    """The curves by W at N = 1,000: rate, the dispatcher's CPU per object, its idle RSS."""
    plain = [r for r in results if row_label(r) in ("kueue", "direct") and r["objects"] == 1000 and r.get("source")]
    for mode, marker in (("kueue", "o"), ("direct", "s")):
        for source in sorted({r["source"] for r in plain if r["mode"] == mode}):  # one line per commit measured
            series = sorted(
                (r for r in plain if r["mode"] == mode and r["source"] == source), key=lambda r: r["workers"]
            )
            w, label = [r["workers"] for r in series], f"{mode} @{source}"
            axes[0].plot(w, [r["dispatch_throughput_per_s"] for r in series], marker=marker, label=label)
            cpu = [1000 * r["controller_cpu_seconds"] / r["objects"] for r in series]
            axes[1].plot(w, cpu, marker=marker, label=label)
            axes[2].plot(w, [r["controller_rss_baseline_mib"] for r in series], marker=marker, label=label)
    titles = ("dispatched per second, N = 1,000", "dispatcher CPU ms per object", "dispatcher idle RSS (MiB)")
    for ax, title in zip(axes, titles, strict=True):
        ax.set_xlabel("workers (W)")
        ax.set_title(title)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)


def side_by_side(results: list[dict[str, Any]]) -> str:
    """This dispatcher beside real Kueue's scheduler against Kueue's own MultiKueue, same bed, same workload: the
    whole manager side (Kueue + this dispatcher, or Kueue alone) and the dispatcher's share, with ratios."""
    ours = {(r["workers"], r["objects"]): r for r in results if r.get("kueue") == "real" and r["dispatcher"] != "kueue"}
    theirs = {(r["workers"], r["objects"]): r for r in results if r.get("dispatcher") == "kueue"}
    rows = []
    for key in sorted(ours.keys() & theirs.keys()):
        a, b = ours[key], theirs[key]
        core = a["kueue_beside"]
        figures = [
            ("dispatched/s", a["dispatch_throughput_per_s"], b["dispatch_throughput_per_s"], True),
            ("end-to-end/s", a["end_to_end_throughput_per_s"], b["end_to_end_throughput_per_s"], True),
            ("dispatch latency p50 s", a["dispatch_latency_s"]["p50"], b["dispatch_latency_s"]["p50"], False),
            ("dispatch latency p99 s", a["dispatch_latency_s"]["p99"], b["dispatch_latency_s"]["p99"], False),
            ("status lag p50 s", a["status_sync_lag_s"]["p50"], b["status_sync_lag_s"]["p50"], False),
            ("status lag p99 s", a["status_sync_lag_s"]["p99"], b["status_sync_lag_s"]["p99"], False),
            ("CPU s, whole manager side", a["controller_cpu_seconds"] + core["cpu_seconds"],
             b["controller_cpu_seconds"], False),
            ("CPU s, the dispatcher (Kueue: minus its core's)", a["controller_cpu_seconds"],
             b["controller_cpu_seconds"] - core["cpu_seconds"], False),
            ("peak RSS MiB (this dispatcher / Kueue process)", a["controller_peak_rss_mib"],
             b["controller_peak_rss_mib"], False),
            ("requests/object on the manager, whole side", a["requests_per_object"].get("manager", 0)
             + core["requests_per_object"].get("manager", 0), b["requests_per_object"].get("manager", 0), False),
            ("requests/object on the manager, the dispatcher", a["requests_per_object"].get("manager", 0),
             b["requests_per_object"].get("manager", 0) - core["requests_per_object"].get("manager", 0), False),
            ("requests/object on the busiest worker", _busiest(a), _busiest(b), False),
        ]  # fmt: skip
        rows.append(f"\n**W = {key[0]}, N = {key[1]}**\n")
        rows.append("| figure | this project | Kueue's MultiKueue | better by |")
        rows.append("|---|---|---|---|")
        for name, mine, kueue, higher_is_better in figures:
            ratio = (mine / kueue if higher_is_better else kueue / mine) if mine and kueue else float("nan")
            rows.append(f"| {name} | {mine:.2f} | {kueue:.2f} | {ratio:.1f}x |")
    return "\n".join(rows)


def _busiest(r: dict[str, Any]) -> float:
    return float(max(v for k, v in r["requests_per_object"].items() if k != "manager"))


def main() -> int:
    results = load()
    if not results:
        print(f"no results in {RESULTS}; run python -m bench.run first", file=sys.stderr)
        return 1
    text = table(results)
    readme = RESULTS / "README.md"
    intro = readme.read_text().split("<!-- table -->")[0] if readme.exists() else "# Results\n\n"
    versus = side_by_side(results)
    tail = f"\n## Side by side with Kueue (generated)\n{versus}\n" if versus else ""
    limits = ceilings(load("ceiling"))
    tail += f"\n## The machine's ceiling (generated)\n\n{limits}\n" if load("ceiling") else ""
    readme.write_text(f"{intro}<!-- table -->\n{text}\n{tail}")
    plot(results, RESULTS / "plot.png")
    print(text)
    print(f"\nwrote {readme} and {RESULTS / 'plot.png'}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
