"""The bench's pure parts for the side by side with Kueue (#29): CPU seconds from /proc, the session's plan, the
flags, which Kueue runs, and the report's rows."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from bench import proc, report, run, sidebyside
from bench.kueue import FIX_GATE, FIX_PATCH, RealKueue
from multikueue_testbed.interop import patched_kueue_target

# /proc/<pid>/stat of a process whose command name holds a space and a closing parenthesis: utime 250, stime 50.
STAT = "4242 (kueue) (x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 12 0 100 2000000 3000 0"


def test_cpu_seconds_are_utime_plus_stime_counted_after_the_command_name() -> None:
    assert proc.cpu_seconds_from_stat(STAT, 100) == pytest.approx(3.0)


def test_cpu_seconds_of_this_process_grow_with_work() -> None:
    import os

    before = proc.cpu_seconds(os.getpid())
    assert sum(i * i for i in range(3_000_000)) > 0  # ~0.1-0.3 s of CPU
    assert proc.cpu_seconds(os.getpid()) > before


def test_cpu_per_thousand_runs() -> None:
    assert proc.per_thousand(12.5, 500) == pytest.approx(25.0)
    with pytest.raises(ValueError, match="runs: 0"):
        proc.per_thousand(1.0, 0)


def test_result_gives_the_dispatcher_and_the_whole_manager_side_per_thousand_runs() -> None:
    def after(beside: dict[str, Any] | None) -> run.After:
        return run.After(finished_at=0.0, status_changes=0, cpu=6.0, shard_cpu=[], requests={}, work_queues={},
                         audited={}, beside=beside)  # fmt: skip

    beside_kueue = run._cpu_per_thousand(after({"cpu_seconds": 4.0}), 200)
    assert beside_kueue == {"cpu_seconds_per_1000_runs": 30.0, "manager_side_cpu_seconds_per_1000_runs": 50.0}
    kueue_alone = run._cpu_per_thousand(after(None), 200)
    assert kueue_alone == {"cpu_seconds_per_1000_runs": 30.0, "manager_side_cpu_seconds_per_1000_runs": 30.0}


def test_variants_keep_their_order_and_refuse_unknown_or_repeated_names() -> None:
    assert sidebyside.parse_variants("kueue, kueue-fixed,multikueue") == ["kueue", "kueue-fixed", "multikueue"]
    with pytest.raises(ValueError, match="'kueue-patched' is not one of"):
        sidebyside.parse_variants("kueue,kueue-patched")
    with pytest.raises(ValueError, match="twice"):
        sidebyside.parse_variants("kueue,kueue")
    with pytest.raises(ValueError, match="at least one"):
        sidebyside.parse_variants(" , ")


def test_schedule_rotates_the_order_each_round_and_names_each_result() -> None:
    slots = sidebyside.schedule(["a", "b", "c"], 2, Path("/out"), "side-by-side-w3-n100")
    assert [(s.round, s.variant) for s in slots] == [(1, "a"), (1, "b"), (1, "c"), (2, "b"), (2, "c"), (2, "a")]
    assert slots[3].out == Path("/out/side-by-side-w3-n100-b-r2.json")
    single = sidebyside.schedule(["kueue"], 1, Path("/out"), "s")
    assert [s.out for s in single] == [Path("/out/s-kueue.json")]
    with pytest.raises(ValueError, match="--rounds 0"):
        sidebyside.schedule(["a"], 0, Path("/out"), "s")


def _args(*argv: str) -> Any:
    return run._arguments(["--dev-venv", *argv])  # --dev-venv: no runtime virtualenv built by a unit test


def test_dispatchers_flag_runs_every_variant_beside_real_kueue() -> None:
    args = _args("--workers", "3", "--objects", "100", "--dispatchers", "kueue,kueue-fixed,multikueue")
    assert args.variants == ["kueue", "kueue-fixed", "multikueue"]
    assert args.kueue == "real"
    slot = sidebyside.schedule(args.variants, 1, Path("/tmp/sbs"), "s")[1]
    one = sidebyside.variant_args(args, slot, "20261125T120000")
    assert (one.dispatcher, one.kueue, one.out) == ("kueue-fixed", "real", Path("/tmp/sbs/s-kueue-fixed.json"))
    assert one.side_by_side == {"session": "20261125T120000", "round": 1, "variant": "kueue-fixed"}
    assert args.side_by_side is None  # the session's flags are left alone
    assert args.dispatcher == "multikueue"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dispatchers", "kueue,multikueue", "--backlog"], "Kueue mode only, without --backlog"),
        (["--dispatchers", "kueue", "--mode", "direct"], "Kueue mode only"),
        (["--dispatchers", "kueue", "--out", "x.json"], "--out-dir"),
        (["--dispatchers", "kueue", "--faults"], "this project's dispatcher only"),
        (["--rounds", "2"], "--rounds: with --dispatchers only"),
        (["--dispatchers", "kueue,nope"], "'nope' is not one of"),
        (["--dispatcher", "kueue-fixed", "--backlog"], "Kueue mode only"),
    ],
)
def test_combinations_that_cannot_run_are_refused_in_one_line(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        _args(*argv)
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_kueue_with_the_fix_runs_the_gate_and_v020_client_connection() -> None:
    args = _args("--dispatcher", "kueue-fixed", "--workers", "3", "--objects", "100")
    assert args.kueue == "real"
    assert run._out_path(args).name == "kueue-w3-n100-kueue-fixed-multikueue.json"
    assert run._kueue_build(args) == {
        "version": "v0.19.2",
        "patch": FIX_PATCH.name,
        "feature_gates": [f"{FIX_GATE}=true"],
        "client_connection": {"qps": 1000, "burst": 1000},
    }
    released = _args("--dispatcher", "kueue")
    assert run._kueue_build(released) == {
        "version": "v0.19.2",
        "patch": None,
        "feature_gates": [],
        "client_connection": None,
    }
    assert RealKueue.configuration(multikueue=True, fixed=True)["clientConnection"] == {"qps": 1000, "burst": 1000}
    assert "clientConnection" not in RealKueue.configuration(multikueue=True)


def test_patched_build_is_cached_by_the_patch_digest(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MULTIKUEUE_CACHE_DIR", str(tmp_path / "cache"))
    patch = tmp_path / "a.patch"
    patch.write_text("--- a/x\n+++ b/x\n")
    first = patched_kueue_target(patch)
    assert first.parent.parent == tmp_path / "cache" / "interop"
    assert first.parent.name.startswith("kueue-v0.19.2-")
    patch.write_text("--- a/y\n+++ b/y\n")
    assert patched_kueue_target(patch) != first


# ------------------------------------------------------------------------------------------------- the report


def _result(dispatcher: str, *, session: str | None, rate: float, cpu: float, lag: float) -> dict[str, Any]:
    r: dict[str, Any] = {
        "mode": "kueue", "dispatcher": dispatcher, "kueue": "real", "workers": 3, "objects": 100, "source": "abc",
        "dispatch_throughput_per_s": rate, "end_to_end_throughput_per_s": rate / 2,
        "dispatch_latency_s": {"p50": 1.0, "p95": 2.0, "p99": 4.0},
        "status_sync_lag_s": {"p50": lag, "p99": 2 * lag},
        "controller_cpu_seconds": cpu, "cpu_seconds_per_1000_runs": 10 * cpu,
        "controller_peak_rss_mib": 100.0, "controller_rss_baseline_mib": 50.0, "rss_per_1000_in_flight_mib": 5.0,
        "requests_per_object": {"manager": 10.0, "worker1": 4.0, "worker2": 2.0},
        "objects_created_more_than_once": 0,
        "side_by_side": {"session": session, "round": 1, "variant": dispatcher} if session else None,
        "kueue_beside": None,
    }  # fmt: skip
    if dispatcher == "multikueue":
        r["kueue_beside"] = {"cpu_seconds": 2.0, "requests_per_object": {"manager": 5.0}}
    return r


def test_report_pairs_one_sessions_variants_and_gives_ratios() -> None:
    session = [
        _result("multikueue", session="S", rate=10.0, cpu=3.0, lag=0.25),
        _result("kueue", session="S", rate=1.0, cpu=20.0, lag=25.0),
        _result("kueue-fixed", session="S", rate=5.0, cpu=12.0, lag=1.0),
    ]
    older = _result("kueue-fixed", session="T", rate=99.0, cpu=1.0, lag=0.1)  # another session: not paired
    text = report.side_by_side([*session, older])
    assert "| figure | this project | Kueue v0.19.2 as released | Kueue with the fix |" in text
    assert "(one invocation: session S, round 1)" in text
    assert "| dispatched/s | 10.00 | 1.00 | 5.00 | 10.0x | 2.0x |" in text
    assert "| status lag p50 s | 0.25 | 25.00 | 1.00 | 100.0x | 4.0x |" in text
    # Per 1,000 runs: this dispatcher 30 s, plus Kueue's core beside it 20 s; Kueue's whole process 200 and 120.
    assert "| CPU s per 1,000 runs, whole manager side | 50.00 | 200.00 | 120.00 | 4.0x | 2.4x |" in text
    assert "| CPU s per 1,000 runs, the dispatcher (Kueue: minus its core's) | 30.00 | 180.00 | 100.00 |" in text
    assert "| requests/object on the manager, whole side | 15.00 | 10.00 | 10.00 | 0.7x | 0.7x |" in text
    assert "99.00" not in text


def test_report_keeps_pairing_runs_from_before_sessions() -> None:
    ours = _result("multikueue", session=None, rate=16.0, cpu=6.0, lag=0.3)
    theirs = _result("kueue", session=None, rate=1.35, cpu=30.0, lag=30.0)
    text = report.side_by_side([ours, theirs])
    assert "| figure | this project | Kueue v0.19.2 as released | better than Kueue v0.19.2 as released by |" in text
    assert "session" not in text
    assert report.side_by_side([ours]) == ""  # nothing to compare with


def test_report_table_labels_the_fixed_kueue_and_shows_cpu_per_thousand_runs() -> None:
    fixed = _result("kueue-fixed", session="S", rate=5.0, cpu=12.0, lag=1.0)
    old = copy.deepcopy(fixed)
    del old["cpu_seconds_per_1000_runs"]  # results from before the field: computed
    old["controller_cpu_seconds"] = 7.0
    lines = report.table([fixed, old]).splitlines()
    assert "| CPU s/1000 runs |" in lines[0]
    assert lines[2].startswith("| Kueue's own MultiKueue, with the fix |")
    column = lines[0].split(" | ").index("CPU s/1000 runs")
    assert lines[2].split(" | ")[column] == "120.0"
    assert lines[3].split(" | ")[column] == "70.0"


def test_report_writes_its_tables_into_the_directory_given(tmp_path: Path) -> None:
    # The plot (matplotlib, the bench's extra) is drawn by `make bench`; `make test` installs no bench extras.
    import json

    for i, r in enumerate([_result("multikueue", session="S", rate=10.0, cpu=3.0, lag=0.25),
                           _result("kueue", session="S", rate=1.0, cpu=20.0, lag=25.0)]):  # fmt: skip
        (tmp_path / f"r{i}.json").write_text(json.dumps(r))
    assert report.main(["--results", str(tmp_path), "--no-plot"]) == 0
    assert "## Side by side with Kueue (generated)" in (tmp_path / "README.md").read_text()
    assert not (tmp_path / "plot.png").exists()
