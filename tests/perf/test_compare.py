"""The gate's comparison of two runs (perf.gate.compare) without pytest runs: one row per benchmark of either run
with its verdict and why, the printed lines, the verdict files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from perf.gate.compare import GateSettings, Row, compare_runs, format_lines, summary, write_verdicts
from perf.measure.stability import StabilityRule
from perf.runs import BenchmarkRecord, run_from_json
from perf.verdicts import load_verdicts


def _bench(fullname: str, data: list[float] | None, **extra: object) -> dict:
    stats = {"median": 1e-3} if data is None else {"median": float(np.median(data)), "data": data}
    return {"fullname": fullname, "name": fullname.split("::")[-1], "group": "g", "stats": stats,
            "extra_info": extra}  # fmt: skip


def _run(*benches: dict) -> dict:
    return {"benchmarks": list(benches), "machine_info": {"perf": {"device": "cpu"}}, "datetime": "2026-01-01",
            "commit_info": {"id": "abc"}}  # fmt: skip


STEADY = list(1e-3 * (1 + 0.01 * np.random.default_rng(0).standard_normal(40)))


def test_rows_cover_both_runs_and_say_why_a_benchmark_is_missing_or_unstable() -> None:
    baseline = run_from_json(_run(_bench("t::a", STEADY), _bench("t::b", None), _bench("t::gone", STEADY),
                                  _bench("t::deselected", STEADY), _bench("t::shaky", STEADY)))  # fmt: skip
    current = {b["fullname"]: BenchmarkRecord.from_json(b) for b in [
        _bench("t::a", [x * 1.3 for x in STEADY]), _bench("t::b", STEADY), _bench("t::new", STEADY),
        _bench("t::shaky", STEADY, stability={"verdict": "unstable", "reason": "robust CV 30% > 10%"}),
    ]}  # fmt: skip
    rows = {r.name: r for r in compare_runs(baseline, current, GateSettings(), expected=["t::a", "t::gone"])}
    assert set(rows) == {"a", "b", "new", "shaky", "gone"}
    assert rows["a"].verdict == "slower" and rows["a"].ratio == pytest.approx(1.3)
    assert rows["b"].verdict == "missing" and "--benchmark-save-data" in rows["b"].note
    assert rows["new"].note == "not in the baseline" and rows["gone"].note.startswith("not measured")
    assert rows["shaky"].verdict == "unstable" and rows["shaky"].note == "current: robust CV 30% > 10%"
    assert rows["shaky"].ratio == pytest.approx(1.0)  # shown, not judged
    counts = summary(list(rows.values()), GateSettings())
    assert counts["failed"] and counts["slower"] == 1 and counts["missing"] == 3 and counts["unstable"] == 1
    assert not summary([rows["shaky"]], GateSettings())["failed"]
    assert summary([rows["shaky"]], GateSettings(fail_unstable=True))["failed"]


def test_lines_show_medians_ratio_interval_between_process_part_verdict_and_note() -> None:
    rows = [Row("t::a", "a", None, "slower", "", 1e-3, 1.1e-3, 1.1, 1.05, 1.15, 40, 40, noise="±1.2%"),
            Row("t::b", "b", None, "no change", "", 1e-3, 1e-3, 1.0, 0.99, 1.01, 40, 40),
            Row("t::long_name", "long_name", None, "missing", "not in the baseline", None, 2e-3)]  # fmt: skip
    header, first, second, third = format_lines(rows)
    assert header.split() == ["benchmark", "baseline", "current", "ratio", "[95%", "CI]", "between", "verdict"]
    assert first.split() == ["a", "1", "ms", "1.1", "ms", "1.100", "[1.050,", "1.150]", "±1.2%", "slower"]
    assert second.split()[-3:] == ["n/a", "no", "change"]
    assert third.endswith("missing  (not in the baseline)") and " - " in third


def test_verdict_files_are_written_and_read_back(tmp_path: Path) -> None:
    baseline = run_from_json(_run(_bench("t::a", STEADY)), tmp_path / "0001_x.json")
    rows = compare_runs(baseline, {"t::a": BenchmarkRecord.from_json(_bench("t::a", STEADY))}, GateSettings())
    write_verdicts(tmp_path, rows, baseline, GateSettings(), "header line")
    verdicts = load_verdicts(tmp_path)
    assert verdicts is not None and verdicts["rows"][0]["verdict"] == "no change"
    assert verdicts["baseline"]["number"] == 1 and verdicts["settings"]["min_effect"] == 0.02
    assert (tmp_path / "perf-compare.md").read_text().startswith("header line\n")
    assert load_verdicts(tmp_path / "elsewhere") is None


def test_a_large_move_with_an_interval_reaching_no_change_is_inconclusive_not_no_change() -> None:
    # Half the current rounds are 7x slower: the median moves ~4x, but the interval reaches down to ~1.
    noisy = STEADY[:20] + [7 * x for x in STEADY[20:21]] + [7 * x for x in STEADY[21:]]
    baseline = run_from_json(_run(_bench("t::a", STEADY)))
    current = {"t::a": BenchmarkRecord.from_json(_bench("t::a", noisy))}
    lenient = GateSettings(min_effect=0.02, rule=StabilityRule(max_cv=10.0, max_drift=10.0))  # passes the rule
    (row,) = compare_runs(baseline, current, lenient)
    assert row.lo is not None and row.lo < 1.02 < row.ratio  # decide() alone would say "no change"
    assert row.verdict == "unstable" and row.note.startswith("inconclusive: the median moved")
    assert summary([row], GateSettings(fail_unstable=True))["failed"]


def test_a_failed_row_is_one_line_naming_the_ratio_threshold_and_baseline() -> None:
    from perf.gate.compare import compare_benchmark, describe_failure

    baseline = run_from_json(_run(_bench("t::a", STEADY)), Path("storage/m/0003_base.json"))
    row = compare_benchmark(baseline.benchmarks["t::a"], BenchmarkRecord.from_json(
        _bench("t::a", [x * 1.3 for x in STEADY])), GateSettings())  # fmt: skip
    line = describe_failure(row, GateSettings(), baseline)
    assert "\n" not in line
    assert line.startswith("perf-compare: slower: 0.9987 ms -> 1.298 ms, ratio 1.300 [")
    assert "beyond +2.0%" in line and line.endswith("(baseline 0003_base.json, commit abc)")


def test_a_slower_row_lists_the_kernels_that_moved_and_how_much_of_the_change_they_explain() -> None:
    from perf.gate.compare import compare_benchmark, why_lines

    def table(**us: float) -> dict:
        return {"device": "cuda", "calls": 20, "rows": [{"name": n, "us_per_call": v, "count_per_call": 1}
                                                        for n, v in us.items()]}  # fmt: skip

    base = BenchmarkRecord.from_json(_bench("t::a", STEADY, kernels=table(conv=700.0, leaky=100.0)))
    slow = BenchmarkRecord.from_json(_bench("t::a", [x * 1.3 for x in STEADY], kernels=table(conv=700.0, where=350.0)))
    row = compare_benchmark(base, slow, GateSettings())
    assert row.verdict == "slower" and [c["name"] for c in row.why] == ["where", "leaky", "conv"]
    first, *kernels = why_lines(row)
    assert first.startswith("the kernels moved +0.25 ms of the +0.3") and kernels[0].startswith("+350.0 us/call  where")
    same = compare_benchmark(base, BenchmarkRecord.from_json(_bench("t::a", STEADY)), GateSettings())
    assert same.verdict == "no change" and same.why == [] and why_lines(same) == []
