"""The README's comparison with Kueue is written from the side-by-side results (bench/claims.py): the newest
one-invocation session per worker count, each figure where Kueue with the fix leads named, the README's text outside
its markers untouched."""

from __future__ import annotations

from typing import Any

import pytest

from bench import claims


def result(dispatcher: str, *, rate: float, cpu: float, session: str = "20261126T010000", workers: int = 3) -> Any:
    return {
        "dispatcher": dispatcher, "kueue": "real", "workers": workers, "objects": 1000, "source": "abc1234",
        "side_by_side": {"session": session, "round": 1, "variant": dispatcher},
        "dispatch_throughput_per_s": rate, "end_to_end_throughput_per_s": rate / 2,
        "dispatch_latency_s": {"p50": 1.0, "p99": 2.0}, "status_sync_lag_s": {"p50": 0.3, "p99": 0.5},
        "cpu_seconds_per_1000_runs": cpu, "controller_cpu_seconds": cpu, "controller_rss_baseline_mib": 60.0,
        "controller_peak_rss_mib": 80.0,
        "requests_per_object": ({"manager": 5.0, "w1": 3.0} if dispatcher == "multikueue"
                                else {"manager": 12.0, "w1": 11.0}),
        **({"kueue_beside": {"cpu_seconds": 10.0, "requests_per_object": {"manager": 4.0}}}
           if dispatcher == "multikueue" else {}),
    }  # fmt: skip


def session(ours_cpu: float = 30.0, **kw: Any) -> list[Any]:
    return [result("kueue", rate=1.3, cpu=90.0, **kw), result("kueue-fixed", rate=6.0, cpu=80.0, **kw),
            result("multikueue", rate=10.0, cpu=ours_cpu, **kw)]  # fmt: skip


def test_the_paragraph_carries_each_dispatchers_figures_and_says_when_kueue_leads_on_none() -> None:
    text = claims.claims(session())
    assert text.startswith("**W = 3, N = 1,000** (session 20261126T010000, commit abc1234)")
    assert "as released dispatches 1.3/s, Kueue with its worker-client fix 6/s, this dispatcher 10/s (1.7x" in text
    # Kueue's CPU less its core's (10 s for 1,000 runs beside this dispatcher): 80 - 10 = 70 against 30
    assert "CPU per 1,000 runs 70 s for the fixed Kueue's MultiKueue against 30 s" in text
    assert text.endswith("Kueue with the fix leads on none of these.")


def test_a_figure_where_kueue_with_the_fix_leads_is_named_as_the_next_target() -> None:
    text = claims.claims(session(ours_cpu=75.0))
    assert "CPU s per 1,000 runs, the dispatcher (Kueue: minus its core's) (70 against 75)" in text
    assert "Kueue with the fix leads on CPU s per 1,000 runs, whole manager side (80 against 85)" in text
    assert text.endswith(": the next target.")


def test_per_worker_count_the_newest_session_that_ran_all_three() -> None:
    older, newer = session(session="20261125T000000"), session(session="20261126T000000")
    partial = [r for r in session(session="20261127T000000") if r["dispatcher"] != "kueue"]
    ten = session(session="20261126T000000", workers=10)
    found = claims.latest(older + newer + partial + ten)
    assert [(w, s) for w, _, s, _ in found] == [(3, "20261126T000000"), (10, "20261126T000000")]


def test_only_the_text_between_the_markers_is_replaced() -> None:
    text = f"before\n{claims.START}\nold claim\n{claims.END}\nafter\n"
    assert claims.rewrite(text, "new claim") == f"before\n{claims.START}\nnew claim\n{claims.END}\nafter\n"
    with pytest.raises(ValueError, match="no <!-- side-by-side -->"):
        claims.rewrite("a README without markers", "new claim")


def test_the_committed_readme_says_what_the_committed_results_say() -> None:
    from bench import report

    generated = claims.claims(report.load())
    assert generated, "bench/results has a side by side of all three"
    assert f"{claims.START}\n{generated}\n{claims.END}" in claims.README.read_text()
