"""The gate's parts without pytest subprocesses: verdict rows, saved-run reading, option parsers, re-measuring,
and the self-test loop on a virtual clock."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import numpy as np
import pytest

from perf.gate.compare import GateSettings, Row, compare_runs, format_lines, summary, write_verdicts
from perf.gate.plugin import parse_count, parse_fraction, parse_levels
from perf.runs import BenchmarkRecord, HistoryError, load_run, load_verdicts, run_from_json
from perf.gate.selftest import LevelResult, Trial, run_selftest, suite_rounds, table_rows, threshold
from perf.measure.stability import StabilityRule, time_rounds

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("lazy_imports_done_outside_pytester")


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


@pytest.mark.parametrize(("content", "problem"), [
    (None, "no such file"), ("{not json", "cannot read a saved run"),
    ("[1, 2]", "not a usable saved run: the top level is a list, expected an object with a 'benchmarks' list"),
    ('{"benchmarks": [{"name": "x"}]}', "not a usable saved run: benchmarks[0] has no string 'fullname'"),
])  # fmt: skip
def test_a_bad_saved_run_is_one_error_naming_the_file(tmp_path: Path, content: str | None, problem: str) -> None:
    path = tmp_path / "0003_bad.json"
    if content is not None:
        path.write_text(content)
    with pytest.raises(HistoryError, match=re.escape(f"'{path}': {problem}")):
        load_run(path)


def test_saved_run_gives_raw_rounds_in_seconds_and_its_number(tmp_path: Path) -> None:
    path = tmp_path / "0012_name.json"
    path.write_text(json.dumps(_run(_bench("t::a", [3e-3, 1e-3, 2e-3]))))
    run = load_run(path)
    bench = run.benchmarks["t::a"]
    assert run.number == 12 and run.commit == "abc" and run.fingerprint == {"device": "cpu"}
    assert bench.data is not None and bench.data.tolist() == [3e-3, 1e-3, 2e-3] and bench.median_s == 2e-3


@pytest.mark.parametrize(("text", "value"), [("2%", 0.02), ("0.05", 0.05), (" 10 % ", 0.1), ("0", 0.0)])
def test_fractions_parse_as_percent_or_plain(text: str, value: float) -> None:
    assert parse_fraction(text.replace(" ", "")) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "x", "-1%", "100%", "1.5", "nan"])
def test_fractions_reject_values_outside_zero_to_one(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="Could not parse value"):
        parse_fraction(text)


def test_counts_and_levels_parse_or_name_the_bad_value() -> None:
    assert parse_count("0") == 0 and parse_levels("10,2%,5,5") == (0.02, 0.05, 0.1)
    for parser, text in ((parse_count, "-1"), (parse_levels, "0"), (parse_levels, "a,b")):
        with pytest.raises(argparse.ArgumentTypeError, match=f"Could not parse value: '{text}'"):
            parser(text)


def test_suite_rounds_follow_pytest_benchmark() -> None:
    assert suite_rounds(0.056, 5, 1.0) == 18 and suite_rounds(0.5, 5, 1.0) == 5 and suite_rounds(5e-4, 5, 1.0) == 2000


def test_time_rounds_reads_the_timer_around_each_round_per_call() -> None:
    ticks = iter(range(0, 100, 1))
    calls = []
    out = time_rounds(lambda: calls.append(1), lambda: float(next(ticks)), rounds=3, iterations=4)
    assert out == [0.25, 0.25, 0.25] and len(calls) == 12


class _VirtualClock:
    """A clock that moves only when work or a delay runs: each call of ``work`` takes 1 ms times a seeded
    log-normal factor (3% spread), a delay of ``ms`` takes exactly that. The self-test loop sees realistic noisy
    samples while the verdicts cannot depend on what else runs on the machine (a wall or CPU clock on a shared
    2-core CI machine moved identical trials past a 10% minimum effect)."""

    def __init__(self, seed: int = 0, spread: float = 0.03) -> None:
        self.now = 0.0
        self._rng = np.random.default_rng(seed)
        self._spread = spread

    def __call__(self) -> float:
        return self.now

    def work(self) -> None:
        self.now += 1e-3 * float(self._rng.lognormal(0.0, self._spread))

    def delay(self, ms: float):
        def wait() -> None:
            self.now += ms / 1e3

        return wait


def test_selftest_detects_a_large_slowdown_and_not_identical_code() -> None:
    """The self-test loop on noisy samples (3% spread per call): 3 trials, identical code and a 10% slowdown,
    judged with a 2% minimum effect (detected) and a 20% one (the same trials, not detected)."""
    clock = _VirtualClock(seed=3)
    median = float(np.median(time_rounds(clock.work, clock, 40)))
    results = run_selftest(clock.work, clock.delay, clock, median_s=median, rounds=200, levels=(0.1,), trials=3,
                           settings=GateSettings(min_effect=0.02, rule=StabilityRule(max_cv=0.1, max_drift=0.05)))
    alarms, detected = results
    assert (alarms.level, len(alarms.trials), alarms.slower(0.02), alarms.unstable) == (0.0, 3, 0, 0)
    assert detected.slower(0.02) == 3 and detected.measured == pytest.approx(1.1, abs=0.01)
    assert detected.slower(0.2) == 0  # the same trials, judged with a minimum effect above the slowdown
    assert threshold(results, 0.02) == 0.1 and threshold(results, 0.2) is None


def _level(x: float, ratios: list[float], unstable: int = 0) -> LevelResult:
    """Trials with tight intervals (+-0.5%) around ``ratios``; the first ``unstable`` are unstable."""
    return LevelResult(x, [Trial(r, r - 0.005, r + 0.005, i >= unstable) for i, r in enumerate(ratios)])


def test_threshold_needs_few_false_alarms_and_enough_detections_at_the_given_min_effect() -> None:
    alarms = _level(0, [1.0] * 19 + [1.03])  # one false alarm in 20 at min effect 2%, none at 5%
    results = [alarms, _level(0.05, [1.05] * 18 + [1.0] * 2), _level(0.1, [1.1] * 19 + [1.0]), _level(0.2, [1.2] * 20)]
    assert threshold(results, 0.02) == 0.1 and threshold(results, 0.05) == 0.1 and threshold(results, 0.1) == 0.2
    assert threshold([_level(0, [1.03] * 2 + [1.0] * 18), _level(0.1, [1.1] * 20)], 0.02) is None  # 10% alarms
    assert threshold([alarms, _level(0.1, [1.1] * 20, unstable=2)], 0.02) is None  # unstable trials never count
    dip = [alarms, _level(0.05, [1.05] * 20), _level(0.1, [1.1] * 18 + [1.0] * 2), _level(0.2, [1.2] * 20)]
    assert threshold(dip, 0.02) == 0.2  # every larger slowdown must be caught too
    rows = table_rows(results, (0.02, 0.05))
    assert rows[0]["slower @ min effect 2%"] == "1/20 (5%)" and rows[0]["slower @ min effect 5%"] == "0/20 (0%)"
    assert rows[-1] == {"injected": "threshold (>= 95% detected, <= 5% false alarms)",
                        "slower @ min effect 2%": "10%", "slower @ min effect 5%": "10%"}  # fmt: skip


GATE_OPTIONS = ("--perf-compare", "--perf-min-effect", "--perf-max-cv", "--perf-max-drift", "--perf-max-remeasure",
                "--perf-fail-unstable", "--perf-selftest", "--perf-selftest-trials", "--perf-selftest-levels")


def test_gate_options_are_listed_with_help_ending_in_their_default(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('pytest_plugins = ["perf.plugin", "perf.gate.plugin"]')
    text = pytester.runpytest("--help").stdout.str()
    section = text[text.index("perf suite (perf/):") :].split("\n\n")[0]
    entries = {re.split(r"[= ]", raw.strip(), maxsplit=1)[0]: " ".join(raw.split())
               for raw in re.split(r"\n(?=  -)", section)[1:]}  # fmt: skip
    for option in GATE_OPTIONS:
        assert "Default: " in entries[option] and entries[option].endswith("."), entries[option]


def test_bad_gate_option_is_a_usage_error_naming_the_option(pytester: pytest.Pytester) -> None:
    pytester.makeconftest('pytest_plugins = ["perf.plugin", "perf.gate.plugin"]')
    result = pytester.runpytest("--perf-min-effect=lots")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*argument --perf-min-effect*: Could not parse value: 'lots'.*"])


def test_plugin_points_the_suite_clock_at_the_resolved_device(perf_pytester: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """--perf-device cuda makes the benchmarks' clock the CUDA-event clock (checked where a CUDA device exists: a
    missing one is a usage error), cpu the host clock."""
    from perf.measure.clock import SUITE_CLOCK
    from perf.measure.machine import cuda_device_count

    monkeypatch.setattr(SUITE_CLOCK, "_device", SUITE_CLOCK._device)  # restored after the inner runs
    monkeypatch.setattr(SUITE_CLOCK, "_clock", None)
    perf_pytester.makepyfile(test_kind="from perf.measure.clock import SUITE_CLOCK\n\n"
                                       "def test_kind(request):\n"
                                       "    print('clock kind', SUITE_CLOCK.kind)\n")  # fmt: skip
    cases = (("cuda", "cuda-events"), ("cpu", "perf_counter")) if cuda_device_count() else (("cpu", "perf_counter"),)
    for device, kind in cases:
        result = perf_pytester.runpytest("-s", f"--perf-device={device}")
        result.stdout.fnmatch_lines([f"*clock kind {kind}*"])


def test_clock_reading_errors_are_relative_to_the_known_duration() -> None:
    from perf.measure.clock_truth import reading

    r = reading(cycles=2000, cycles_per_ms=1000.0, event_ms=2.02, host_ms=2.1)
    assert r.known_ms == 2.0 and r.event_error == pytest.approx(0.01) and r.host_error == pytest.approx(0.05)
    assert r.offset_us == pytest.approx(20.0)
