"""Every result in bench/results/*.json as one table (bench/results/README.md) and one plot (bench/results/plot.png);
for bench/results, also the README's comparison with Kueue (bench/claims.py).

python -m bench.report                      # bench/results
python -m bench.report --results /tmp/sbs   # another directory's results (its README.md and plot.png)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
Result = dict[str, Any]


def row_label(r: Result) -> str:
    if r.get("dispatcher") == "kueue":
        return "Kueue's own MultiKueue"
    if r.get("dispatcher") == "kueue-fixed":
        return "Kueue's own MultiKueue, with the fix"
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
    ("CPU s/1000 runs", lambda r: f"{cpu_per_thousand(r):.1f}"),
    ("peak RSS MiB", lambda r: f"{r['controller_peak_rss_mib']:.0f}"),
    ("MiB/1000 in flight", lambda r: f"{r['rss_per_1000_in_flight_mib']:.1f}"),
    ("requests/object: manager", lambda r: f"{r['requests_per_object'].get('manager', 0):.2f}"),
    ("busiest worker", lambda r: f"{max(v for k, v in r['requests_per_object'].items() if k != 'manager'):.2f}"),
    ("copies > 1", lambda r: r["objects_created_more_than_once"]),
    ("runs on 2 workers", lambda r: r.get("runs_on_two_workers", "-")),
)


def cpu_per_thousand(r: Result) -> float:
    """The measured process's CPU seconds (user + system, over the measured phases) per 1,000 runs; computed for
    results older than the field."""
    return float(r.get("cpu_seconds_per_1000_runs", 1000 * r["controller_cpu_seconds"] / r["objects"]))


def load(kind: str = "run", directory: Path = RESULTS) -> list[Result]:
    """The results of one kind: ``run`` (python -m bench.run) or ``ceiling`` (python -m bench.ceiling)."""
    key = {"run": "dispatch_throughput_per_s", "ceiling": "ceiling_objects_per_s"}[kind]
    results = [r for p in sorted(directory.glob("*.json")) if key in (r := json.loads(p.read_text()))]
    return sorted(results, key=lambda r: (str(r["mode"]), r["workers"], r["objects"], str(r.get("backlog")),
                                          bool(r.get("split_cores"))))  # fmt: skip


def ceilings(results: list[dict[str, Any]]) -> str:
    rows = ["| mode | commit | W | N | mix replayed (requests/run) | ceiling objects/s (requests/s) "
            "| dispatcher drain /s | fraction |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in results:
        replay = r["replay"]
        rows.append(f"| {row_label(r)} | {r.get('mix_source') or 'older'} | {r['workers']} | {r['objects']} "
                    f"| {r.get('replayed_mix', 'own')} ({r['requests_per_object_replayed']:.2f}) "
                    f"| {r['ceiling_objects_per_s']:.1f} ({replay['requests_per_s']:.0f}) "
                    f"| {r['dispatcher_objects_per_s']:.1f} | {r['fraction_of_ceiling']:.2f} |")  # fmt: skip
    overheads = [r for r in results if r.get("replayed_mix") == "minimal"]
    for r in overheads:
        extra = "; ".join(f"{cluster}: " + ", ".join(f"{k} {v / r['objects']:.2f}" for k, v in sorted(counts.items()))
                          for cluster, counts in r["overhead_requests"].items())  # fmt: skip
        rows.append(f"\n{row_label(r)}, W = {r['workers']}, from {r['mix']} ({r.get('mix_source') or 'older'}): "
                    f"{r['requests_per_run_own_mix']:.2f} requests per run against a minimal "
                    f"{r['requests_per_run_minimal_mix']:.2f}; beyond it, per run: {extra or 'nothing'}.")  # fmt: skip
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

    together = bool(groups(results))
    figure, grid = plt.subplots(3 if together else 2, 3, figsize=(15, 13.5 if together else 9))
    axes = grid[0]
    by_workers(results, grid[1])
    if together:
        plot_side_by_side(results, grid[2])
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
    _legend(axes[0])
    figure.suptitle("multikueue dispatcher on the local test bed (2 cores shared with etcd and every kube-apiserver)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def _legend(ax: Any) -> None:
    """A legend where there are curves (a directory of side-by-side runs alone has none by N or W)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)


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
        _legend(ax)


KUEUES = {"kueue": "Kueue v0.19.2 as released", "kueue-fixed": "Kueue with the fix"}
"""The Kueue variants of the side by side (bench/sidebyside.py), in their columns' order."""
Figure = Callable[[Result, Result | None], float | None]


def _busiest(r: Result) -> float:
    return float(max(v for k, v in r["requests_per_object"].items() if k != "manager"))


def _manager(r: Result) -> float:
    return float(r["requests_per_object"].get("manager", 0))


def _ours_and_kueue(ours: Figure, kueue: Figure) -> Figure:
    """One figure read one way for this project's run and another for Kueue's (``core``: Kueue's core beside
    this project, what Kueue's own process also spends and this project's dispatcher does not)."""
    return lambda r, core: ours(r, core) if variant(r) == "multikueue" else kueue(r, core)


def _same(read: Callable[[Result], float]) -> Figure:
    return lambda r, core: read(r)


FIGURES: tuple[tuple[str, Figure, bool], ...] = (
    ("dispatched/s", _same(lambda r: r["dispatch_throughput_per_s"]), True),
    ("end-to-end/s", _same(lambda r: r["end_to_end_throughput_per_s"]), True),
    ("dispatch latency p50 s", _same(lambda r: r["dispatch_latency_s"]["p50"]), False),
    ("dispatch latency p99 s", _same(lambda r: r["dispatch_latency_s"]["p99"]), False),
    ("status lag p50 s", _same(lambda r: r["status_sync_lag_s"]["p50"]), False),
    ("status lag p99 s", _same(lambda r: r["status_sync_lag_s"]["p99"]), False),
    ("CPU s per 1,000 runs, whole manager side", _ours_and_kueue(
        lambda r, core: cpu_per_thousand(r) + (1000 * core["cpu_seconds"] / r["objects"] if core else 0.0),
        lambda r, core: cpu_per_thousand(r)), False),
    ("CPU s per 1,000 runs, the dispatcher (Kueue: minus its core's)", _ours_and_kueue(
        lambda r, core: cpu_per_thousand(r),
        lambda r, core: cpu_per_thousand(r) - 1000 * core["cpu_seconds"] / r["objects"] if core else None), False),
    ("idle RSS MiB (this dispatcher / Kueue process)", _same(lambda r: r["controller_rss_baseline_mib"]), False),
    ("peak RSS MiB (this dispatcher / Kueue process)", _same(lambda r: r["controller_peak_rss_mib"]), False),
    ("requests/object on the manager, whole side", _ours_and_kueue(
        lambda r, core: _manager(r) + (_manager(core) if core else 0.0), lambda r, core: _manager(r)), False),
    ("requests/object on the manager, the dispatcher", _ours_and_kueue(
        lambda r, core: _manager(r), lambda r, core: _manager(r) - _manager(core) if core else None), False),
    ("requests/object on the busiest worker", _same(_busiest), False),
)  # fmt: skip


def ratio(mine: float | None, theirs: float | None, *, higher_is_better: bool) -> float | None:
    """How many times better this project's figure is than Kueue's (``None`` where either is missing or zero)."""
    if not mine or not theirs:
        return None
    return mine / theirs if higher_is_better else theirs / mine


def variant(r: Result) -> str | None:
    """``multikueue`` (this project beside real Kueue), ``kueue`` or ``kueue-fixed``; ``None`` off the side by side."""
    return str(r.get("dispatcher", "multikueue")) if r.get("kueue") == "real" else None


def groups(results: list[Result]) -> dict[tuple[str, int, int, int], dict[str, Result]]:
    """The side by side's runs that belong together: one ``--dispatchers`` session's round at (W, N); runs from
    before sessions (separate invocations) pair by (W, N) alone, session ``""``."""
    grouped: dict[tuple[str, int, int, int], dict[str, Result]] = {}
    for r in results:
        if (v := variant(r)) is None:
            continue
        session = r.get("side_by_side") or {}
        key = (str(session.get("session", "")), int(session.get("round", 0)), r["workers"], r["objects"])
        grouped.setdefault(key, {})[v] = r
    return {k: g for k, g in sorted(grouped.items()) if "multikueue" in g and g.keys() & KUEUES.keys()}


def side_by_side(results: list[Result]) -> str:
    """This dispatcher beside real Kueue's scheduler against Kueue's own MultiKueue as released and with the fix,
    same bed, same workload: the whole manager side (Kueue + this dispatcher, or Kueue alone) and the dispatcher's
    share, with ratios."""
    rows = []
    for (session, round_, workers, objects), group in groups(results).items():
        ours, core = group["multikueue"], group["multikueue"].get("kueue_beside")
        kueues = [k for k in KUEUES if k in group]
        where = f" (one invocation: session {session}, round {round_})" if session else ""
        rows.append(f"\n**W = {workers}, N = {objects}**{where}\n")
        rows.append("| figure | this project | " + " | ".join(KUEUES[k] for k in kueues) + " | "
                    + " | ".join(f"better than {KUEUES[k]} by" for k in kueues) + " |")  # fmt: skip
        rows.append("|---|---|" + "---|" * (2 * len(kueues)))
        for name, figure, higher_is_better in FIGURES:
            mine, theirs = figure(ours, core), [figure(group[k], core) for k in kueues]
            ratios = [ratio(mine, x, higher_is_better=higher_is_better) for x in theirs]
            rows.append(f"| {name} | {_cell(mine)} | " + " | ".join(_cell(x) for x in theirs) + " | "
                        + " | ".join("-" if x is None else f"{x:.1f}x" for x in ratios) + " |")  # fmt: skip
    return "\n".join(rows)


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def plot_side_by_side(results: list[Result], axes: Any) -> None:
    """One bar per variant and side-by-side group: dispatched/s, status lag p50 (log), CPU s per 1,000 runs."""
    panels: tuple[tuple[str, Callable[[Result], float]], ...] = (
        ("dispatched per second", lambda r: r["dispatch_throughput_per_s"]),
        ("status lag p50 (s, log)", lambda r: r["status_sync_lag_s"]["p50"]),
        ("CPU s per 1,000 runs (dispatching process)", cpu_per_thousand),
    )
    grouped = groups(results)
    names = ["multikueue", *KUEUES]
    width = 0.8 / len(names)
    for ax, (title, read) in zip(axes, panels, strict=True):
        for i, name in enumerate(names):
            xs = [x + i * width for x, g in enumerate(grouped.values()) if name in g]
            ys = [read(g[name]) for g in grouped.values() if name in g]
            ax.bar(xs, ys, width, label=KUEUES.get(name, "this project"))
        ax.set_xticks([x + width for x in range(len(grouped))])
        ax.set_xticklabels([f"W={w} N={n}" + (f" r{r}" if s else "") for s, r, w, n in grouped], fontsize=8)
        ax.set_title(title)
        ax.grid(True, axis="y", alpha=0.3)
        if "log" in title:
            ax.set_yscale("log")
    _legend(axes[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--results", type=Path, default=RESULTS, help="the results' directory (bench/results)")
    parser.add_argument("--no-plot", action="store_true", help="the tables only (no matplotlib needed)")
    args = parser.parse_args(argv)
    directory = args.results
    results = load(directory=directory)
    if not results:
        print(f"no results in {directory}; run python -m bench.run first", file=sys.stderr)
        return 1
    text = table(results)
    readme = directory / "README.md"
    intro = readme.read_text().split("<!-- table -->")[0] if readme.exists() else "# Results\n\n"
    versus = side_by_side(results)
    tail = f"\n## Side by side with Kueue (generated)\n{versus}\n" if versus else ""
    limits = load("ceiling", directory)
    tail += f"\n## The machine's ceiling (generated)\n\n{ceilings(limits)}\n" if limits else ""
    readme.write_text(f"{intro}<!-- table -->\n{text}\n{tail}")
    if directory == RESULTS:
        from bench import claims  # it reads this module's figures

        if claims.write(results):
            print(f"wrote the comparison in {claims.README}", file=sys.stderr)
    if not args.no_plot:
        plot(results, directory / "plot.png")
    print(text)
    print(f"\nwrote {readme}{'' if args.no_plot else ' and ' + str(directory / 'plot.png')}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
