"""The README's comparison with Kueue, written from the committed side-by-side results rather than by hand:
``python -m bench.report`` puts one paragraph per worker count (the newest one-invocation session at each W that ran
all three dispatchers) between the README's ``<!-- side-by-side -->`` markers, naming every figure where Kueue with
the worker-client fix leads.
"""

from __future__ import annotations

from pathlib import Path

from bench.report import FIGURES, RESULTS, Figure, Result, groups, ratio

README = RESULTS.parent.parent / "README.md"
START, END = "<!-- side-by-side -->", "<!-- /side-by-side -->"
Group = dict[str, Result]


BY_NAME: dict[str, Figure] = {name: figure for name, figure, _ in FIGURES}


def value(name: str, r: Result, core: Result | None) -> float | None:
    """One of the report's figures (``FIGURES``, by name) for one run of a group."""
    return BY_NAME[name](r, core)


def num(v: float | None) -> str:
    return "-" if v is None else f"{v:.3g}"


def latest(results: list[Result]) -> list[tuple[int, int, str, Group]]:
    """(W, N, session, group): per W, the newest one-invocation session's first round that has all three."""
    found: dict[int, tuple[int, int, str, Group]] = {}
    for (session, round_, workers, objects), group in groups(results).items():
        if session and round_ == 1 and {"kueue", "kueue-fixed", "multikueue"} <= group.keys():
            found[workers] = (workers, objects, session, group)  # sessions sort by their time stamp
    return [found[w] for w in sorted(found)]


def leads(group: Group) -> list[str]:
    """The figures where Kueue with the fix does better than this project, with both values."""
    ours, core, fixed = group["multikueue"], group["multikueue"].get("kueue_beside"), group["kueue-fixed"]
    found = []
    for name, figure, higher in FIGURES:
        mine, theirs = figure(ours, core), figure(fixed, core)
        better = ratio(mine, theirs, higher_is_better=higher)
        if better is not None and better < 1:
            found.append(f"{name} ({num(theirs)} against {num(mine)})")
    return found


def paragraph(workers: int, objects: int, session: str, group: Group) -> str:
    ours, core, fixed, released = (group["multikueue"], group["multikueue"].get("kueue_beside"),
                                   group["kueue-fixed"], group["kueue"])  # fmt: skip

    def of(name: str, r: Result) -> str:
        return num(value(name, r, core))

    times = ratio(value("dispatched/s", ours, core), value("dispatched/s", fixed, core), higher_is_better=True)
    faster = f" ({times:.1f}x the fixed Kueue)" if times else ""
    cpu, rss, idle = (
        "CPU s per 1,000 runs, the dispatcher (Kueue: minus its core's)",
        "peak RSS MiB (this dispatcher / Kueue process)",
        "idle RSS MiB (this dispatcher / Kueue process)",
    )
    lead = leads(group)
    verdict = ("Kueue with the fix leads on none of these." if not lead else
               f"Kueue with the fix leads on {'; '.join(lead)}: the next target.")  # fmt: skip
    return (
        f"**W = {workers}, N = {objects:,}** (session {session}, commit {ours.get('source', '?')}): Kueue v0.19.2 as "
        f"released dispatches {of('dispatched/s', released)}/s, Kueue with its worker-client fix "
        f"{of('dispatched/s', fixed)}/s, this dispatcher {of('dispatched/s', ours)}/s{faster}; status-sync lag p99 "
        f"{of('status lag p99 s', fixed)} s with the fix ({of('status lag p99 s', released)} s without) against "
        f"{of('status lag p99 s', ours)} s here; CPU per 1,000 runs {of(cpu, fixed)} s for the fixed Kueue's "
        f"MultiKueue against {of(cpu, ours)} s; {of('requests/object on the busiest worker', fixed)} requests per "
        f"object on the busiest worker against {of('requests/object on the busiest worker', ours)}; peak RSS "
        f"{of(rss, fixed)} MiB against {of(rss, ours)} MiB (idle {of(idle, fixed)} against {of(idle, ours)}). "
        f"{verdict}"
    )


def claims(results: list[Result]) -> str:
    return "\n\n".join(paragraph(*found) for found in latest(results))


def rewrite(text: str, generated: str) -> str:
    """``text`` with what stands between the markers replaced; a README without them is refused."""
    if START not in text or END not in text:
        raise ValueError(f"the README has no {START} ... {END} markers for the comparison")
    head, rest = text.split(START, 1)
    return f"{head}{START}\n{generated}\n{END}{rest.split(END, 1)[1]}"


def write(results: list[Result], readme: Path = README) -> bool:
    """The README's comparison regenerated; ``False`` when no session has all three dispatchers."""
    generated = claims(results)
    if not generated:
        return False
    readme.write_text(rewrite(readme.read_text(), generated))
    return True
