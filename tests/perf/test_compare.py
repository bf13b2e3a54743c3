"""The gate's verdict table (perf.gate.compare) without pytest runs: the printed lines, the verdict files, the
one-line failure and "why slower"."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

from perf.gate.compare import (Baseline, GateSettings, Row, budget, compare_runs, explain_slower, judge_benchmark,
                               stage_share)  # fmt: skip
from perf.gate.judge import Budget
from perf.gate.table import describe_failure, format_lines, summary, why_lines, write_verdicts
from perf.runs import BenchmarkRecord, run_from_json
from perf.verdicts import load_verdicts


def _bench(fullname: str, median_s: float, seed: int = 0, **extra: object) -> dict:
    data = list(median_s * (1 + 0.002 * np.random.default_rng(seed).standard_normal(40)))
    return {"fullname": fullname, "name": fullname.split("::")[-1], "group": "g",
            "stats": {"median": float(np.median(data)), "data": data}, "extra_info": extra}  # fmt: skip


def _history(n: int = 6, path: str = "storage/m", **extra: object) -> Baseline:
    levels = 1e-3 * np.exp(0.005 * np.random.default_rng(1).standard_normal(n))
    runs = [run_from_json({"benchmarks": [_bench("t::a", level, k, **extra)], "datetime": f"2026-01-0{k + 1}",
                           "machine_info": {"perf": {"device": "cpu"}}, "commit_info": {"id": f"abc{k}"}},
                          Path(path) / f"{k + 1:04d}_base.json") for k, level in enumerate(levels)]  # fmt: skip
    return Baseline(runs)


def test_lines_show_medians_ratio_interval_detectable_runs_verdict_and_note() -> None:
    rows = [Row("t::a", "a", None, "slower", "", 1e-3, 1.1e-3, 1.1, 1.05, 1.15, detectable=0.031, reference_runs=12),
            Row("t::b", "b", None, "no change", "", 1e-3, 1e-3, 1.0, 0.99, 1.01, detectable=0.02, reference_runs=12),
            Row("t::long_name", "long_name", None, "missing", "not in the history", None, 2e-3)]  # fmt: skip
    header, first, second, third = format_lines(rows)
    assert header.split() == ["benchmark", "history", "this", "run", "ratio", "[interval]", "detectable", "runs",
                              "verdict"]  # fmt: skip
    assert first.split() == ["a", "1", "ms", "1.1", "ms", "1.100", "[1.050,", "1.150]", "+3.1%", "12", "slower"]
    assert second.split()[-3:] == ["12", "no", "change"]
    assert third.endswith("missing  (not in the history)") and " - " in third


def test_verdict_files_are_written_and_read_back_with_the_history_and_the_budget(tmp_path: Path) -> None:
    baseline = _history()
    settings = GateSettings()
    rows = compare_runs(baseline, {"t::a": BenchmarkRecord.from_json(_bench("t::a", 1e-3, 9))}, settings)
    write_verdicts(tmp_path, rows, baseline, settings, "header line", budget=budget(baseline, settings))
    verdicts = load_verdicts(tmp_path)
    assert verdicts is not None and verdicts["rows"][0]["verdict"] == "no change"
    assert verdicts["baseline"]["number"] == 6 and verdicts["baseline"]["history_runs"] == 6
    assert verdicts["settings"]["min_effect"] == 0.02 and verdicts["budget"]["run_budget"] == 0.01
    assert (tmp_path / "perf-compare.md").read_text().startswith("header line\n")
    assert load_verdicts(tmp_path / "elsewhere") is None


def test_a_verdict_row_counts_the_rounds_of_the_judged_run_and_of_the_same_benchmark_in_mains_latest_run(
    tmp_path: Path,
) -> None:
    baseline, settings = _history(), GateSettings()  # 40 rounds a run
    current = _bench("t::a", 1e-3, 9)
    current["stats"]["data"] = current["stats"]["data"][:30]
    rows = compare_runs(baseline, {"t::a": BenchmarkRecord.from_json(current)}, settings)
    write_verdicts(tmp_path, rows, baseline, settings, "header line", budget=budget(baseline, settings))
    verdicts = load_verdicts(tmp_path)
    assert verdicts is not None
    ((n_baseline, n_current, verdict),) = [(r["n_baseline"], r["n_current"], r["verdict"]) for r in verdicts["rows"]]
    assert (n_baseline, n_current, verdict) == (40, 30, "no change")
    without_rounds = _bench("t::a", 1e-3, 7)
    del without_rounds["stats"]["data"]  # saved without --benchmark-save-data: its median only
    latest = run_from_json({"benchmarks": [without_rounds], "datetime": "2026-01-09", "commit_info": {"id": "abc9"},
                            "machine_info": {"perf": {"device": "cpu"}}}, "storage/m/0007_base.json")  # fmt: skip
    row = judge_benchmark(Baseline([*baseline.runs, latest]), BenchmarkRecord.from_json(current), 0.01)
    assert (row.n_baseline, row.n_current, row.verdict) == (None, 30, "no change")


def test_a_failed_row_is_one_line_naming_the_ratio_the_floor_and_the_history() -> None:
    baseline = _history()
    row = judge_benchmark(baseline, BenchmarkRecord.from_json(_bench("t::a", 1.3e-3)), 0.01)
    line = describe_failure(row, GateSettings(), baseline)
    assert "\n" not in line and row.verdict == "slower"
    assert line.startswith("perf-compare: slower: ") and "-> 1.3 ms, ratio 1.29" in line
    assert "beyond +2.0%" in line and line.endswith("(0001 .. 0006, latest commit abc5))")


def test_inconclusive_rows_fail_the_run_only_when_asked() -> None:
    row = Row("t::a", "a", None, "inconclusive", "inconclusive: cannot rule out +4.0%")
    assert not summary([row], GateSettings())["failed"]
    assert summary([row], GateSettings(fail_inconclusive=True))["failed"]
    assert summary([Row("t::b", "b", None, "slower")], GateSettings())["failed"]


def test_a_slower_row_lists_the_kernels_that_moved_and_how_much_of_the_change_they_explain() -> None:
    def table(**us: float) -> dict:
        return {"device": "cuda", "calls": 20, "rows": [{"name": n, "us_per_call": v, "count_per_call": 1}
                                                        for n, v in us.items()]}  # fmt: skip

    baseline = _history(kernels=table(conv=700.0, leaky=100.0))
    slow = BenchmarkRecord.from_json(_bench("t::a", 1.3e-3, kernels=table(conv=700.0, where=350.0)))
    row = judge_benchmark(baseline, slow, 0.01)
    explain_slower(row, baseline, slow)
    assert row.verdict == "slower" and [c["name"] for c in row.why] == ["where", "leaky", "conv"]
    first, *kernels = why_lines(row)
    assert first.startswith("the kernels moved +0.25 ms of the +0.29")
    assert kernels[0].startswith("+350.0 us/call  where")
    same = judge_benchmark(baseline, BenchmarkRecord.from_json(_bench("t::a", 1e-3, 3)), 0.01)
    assert same.verdict == "no change" and same.why == [] and why_lines(same) == []
    with pytest.raises(ValueError, match="at least one saved run"):
        Baseline([])


def test_the_budget_counts_every_benchmark_of_the_selection_when_mains_latest_run_measured_only_some() -> None:
    def run(k: int, *names: str) -> object:
        doc = {"benchmarks": [_bench(name, 1e-3, k) for name in names], "datetime": f"2026-01-0{k + 1}",
               "machine_info": {"perf": {"device": "cpu"}}, "commit_info": {"id": f"abc{k}"}}  # fmt: skip
        return run_from_json(doc, Path("storage/m") / f"{k + 1:04d}_base.json")

    full = ("t::a", "t::b", "t::c")
    partial = Baseline([run(0, *full), run(1, *full), run(2, "t::c")])  # main's latest run: `-k c` only
    assert budget(partial, GateSettings(), [*full, "t::new"]).metrics == budget(
        Baseline([run(0, *full), run(1, *full)]), GateSettings(), full).metrics == 3  # a new benchmark: not judged
    assert partial.judged_metrics() == 1  # without a selection: the latest run's own benchmarks


def test_a_stages_floor_is_the_frames_floor_over_the_stages_share() -> None:
    """A stage of a tenth of the frame must grow 20% to move the frame by the 2% floor; other metrics keep it."""
    assert stage_share("stage:decode", 1e-3, 10e-3, 0.02) == pytest.approx((0.1, 0.2))
    assert stage_share("time", 1e-3, 10e-3, 0.02) == (None, 0.02)


def test_a_budget_flags_slower_at_its_lenient_first_pass_level_and_faster_at_its_strict_one() -> None:
    """With confirmation the first pass flags suspects at 20% (fresh processes confirm them) but calls "faster",
    which nothing confirms, at the run's 1%: a shift of two standard errors is a suspect one way, nothing the other."""
    baseline, level = _history(), Budget(metrics=1, confirm=True)
    assert (level.first_level, level.faster_level) == (0.2, 0.01)
    ref = baseline.reference("t::a", "time", 0.0).reference  # type: ignore[union-attr]
    shift = 2.0 * ref.sd * math.sqrt(1 / ref.n + 1)
    up = judge_benchmark(baseline, BenchmarkRecord.from_json(_bench("t::a", ref.median_s * math.exp(shift), 9)),
                         level, floor=0.0)
    down = judge_benchmark(baseline, BenchmarkRecord.from_json(_bench("t::a", ref.median_s * math.exp(-shift), 9)),
                           level, floor=0.0)
    assert (up.verdict, down.verdict) == ("slower", "no change")


def test_a_median_not_measured_is_judged_missing_never_a_traceback_nor_no_change_against_nan() -> None:
    baseline, settings = _history(), GateSettings()
    plan = budget(baseline, settings)
    unmeasured = BenchmarkRecord.from_json({"fullname": "t::a", "name": "a", "stats": {"median": math.nan}})
    row = judge_benchmark(baseline, unmeasured, plan)  # saved without rounds: once numpy's ValueError
    assert (row.verdict, row.ratio) == ("missing", None)
    with_nan = _bench("t::a", 1e-3)
    with_nan["stats"]["data"][3] = math.nan  # a round not measured: the one history run has no median
    short = Baseline([run_from_json({"benchmarks": [with_nan]}, "storage/m/0001_base.json")])
    row = judge_benchmark(short, BenchmarkRecord.from_json(_bench("t::a", 1e-3, 9)), budget(short, settings))
    assert (row.verdict, row.baseline_median_s) == ("missing", None)  # once "no change" against a median of NaN
