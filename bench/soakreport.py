"""The soak's one-page report: the verdict, the invariants, faults, recovery and latency figures, and a timeline
plot of load, faults and runs in flight (matplotlib, the bench's extra; the page is written without it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLOURS = {"worker-pause": "tab:orange", "worker-kill": "tab:red", "leader-kill": "tab:purple",
           "manager-restart": "tab:brown", "etcd-pause": "tab:pink", "secret-rotate": "tab:olive",
           "config-reload": "tab:cyan", "crd-upgrade": "tab:gray"}  # fmt: skip


def verdict(r: dict[str, Any]) -> str:
    broken = {k: v for k, v in r["invariants"].items() if v}
    gave_up = (r.get("harness_gave_up") or {}).get("count", 0)
    why = broken or (f"the harness gave up on {gave_up} writes" if gave_up else "runs still in flight at the drain "
                     "deadline")  # fmt: skip
    held = "every invariant held" if r["held"] else f"BROKEN: {why}"
    return (f"soak {r['mode']} mode, {r['runs']} runs at {r['rate_per_s']:g}/s over W = {r['workers']}, "
            f"{r['replicas']} replicas, {len(r['faults'])} faults: {held}")  # fmt: skip


def _figures(values: list[float]) -> str:
    if not values:
        return "none"
    ordered = sorted(values)
    return f"median {ordered[len(ordered) // 2]:.1f} s, max {ordered[-1]:.1f} s (n = {len(values)})"


def page(r: dict[str, Any], plot: str | None) -> str:
    lines = [f"# Soak: {verdict(r)}", "",
             f"`python -m bench.soak --mode {r['mode']} --workers {r['workers']} --replicas {r['replicas']} "
             f"--rate {r['rate_per_s']:g} --duration {r['duration_s']:g} --fault-interval {r['fault_interval_s']:g} "
             f"--seed {r['seed']}` (commit {r['source']})", "",
             "| invariant | violations |", "|---|---|"]  # fmt: skip
    lines += [f"| {name} | {count} |" for name, count in r["invariants"].items()]
    lines += ["", "| fault | injected |", "|---|---|"]
    lines += [f"| {kind} | {count} |" for kind, count in r["fault_counts"].items()]
    recovery = r["recovery_s"]
    lines += ["", f"Runs: {r['runs']} ({', '.join(f'{k} {v}' for k, v in r['fates'].items())}); finished on the "
              f"manager {r['finished_on_the_manager']}.",
              "Recovery: a leader killed -> the Lease renewed by a live leader: "
              f"{_figures(recovery.get('leader_kill_to_new_leader', []))}; -> the next object it dispatched: "
              f"{_figures(recovery['leader_kill_to_next_dispatch'])}; "
              f"a worker back -> the Workload copies it kept for runs decided elsewhere gone: "
              f"{_figures(recovery['worker_back_to_stale_copies_gone'])}.",
              "Latency (s): " + "; ".join(f"{step} " + ", ".join(f"{q} {v:.2f}" for q, v in p.items() if v is not None)
                                          for step, p in r["latency_s"].items())]  # fmt: skip
    if r["violations"]:
        lines += ["", "First violations:", "", *(f"- {v}" for v in r["violations"][:20])]
    if plot:
        lines += ["", f"![timeline]({plot})"]
    return "\n".join(lines) + "\n"


def plot(r: dict[str, Any], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    t = [s[0] for s in r["timeline"]]
    fig, ax = plt.subplots(figsize=(11, 4))
    ax.plot(t, [s[2] for s in r["timeline"]], label="runs in flight", color="tab:blue")
    rate = [0.0] + [
        (b[1] - a[1]) / max(b[0] - a[0], 1e-9) for a, b in zip(r["timeline"], r["timeline"][1:], strict=False)
    ]
    ax.plot(t, rate, label="submitted per s", color="tab:green", linewidth=0.8)
    seen: set[str] = set()
    for f in r["faults"]:
        label = f["kind"] if f["kind"] not in seen else None
        seen.add(f["kind"])
        colour = COLOURS.get(f["kind"], "black")
        if f["seconds"]:
            ax.axvspan(f["at"], f["at"] + f["seconds"], color=colour, alpha=0.2, label=label)
        else:
            ax.axvline(f["at"], color=colour, linewidth=1, label=label)
    ax.set_xlabel("seconds")
    ax.set_title(verdict(r), fontsize=9)
    ax.legend(fontsize=7, ncol=3, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def write(r: dict[str, Any], out: Path) -> list[Path]:
    png = out.with_suffix(".png")
    drawn = plot(r, png)
    md = out.with_suffix(".md")
    md.write_text(page(r, png.name if drawn else None))
    return [md, png] if drawn else [md]
