"""The gate's self-test (perf.gate.selftest): the rounds it measures, its loop of identical and slowed-down trials
on a virtual clock, and the smallest slowdown it calls detected."""

from __future__ import annotations

import numpy as np
import pytest

from perf.gate.compare import GateSettings
from perf.gate.selftest import LevelResult, Trial, run_selftest, suite_rounds, table_rows, threshold
from perf.measure.stability import StabilityRule, time_rounds


def test_suite_rounds_follow_pytest_benchmark() -> None:
    assert suite_rounds(0.056, 5, 1.0) == 18 and suite_rounds(0.5, 5, 1.0) == 5 and suite_rounds(5e-4, 5, 1.0) == 2000


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


def test_a_selftest_regression_child_runs_only_the_benchmarks_its_detection_is_judged_on() -> None:
    from types import SimpleNamespace

    from perf.options import parse_regressions
    from perf.roles.processes import _plan

    def item(group: str, batch: int) -> SimpleNamespace:
        mark = SimpleNamespace(kwargs={"group": group})
        return SimpleNamespace(nodeid=f"perf/t.py::test[{group}-b{batch}]", get_closest_marker=lambda name: mark,
                               callspec=SimpleNamespace(params={"case": SimpleNamespace(batch=batch)}))

    items = [item("inference", 1), item("inference", 32), item("end-to-end", 1)]
    plan = _plan(parse_regressions("layer1:3%,layer:5%"), items, "selftest", 2)  # type: ignore[arg-type]
    by_kind = {child.kind: child.nodeids for child in plan if child.kind != "identical"}
    assert by_kind["layer1:3%"] == ("perf/t.py::test[inference-b1]",)  # judged at batch 1 alone
    assert set(by_kind["layer:5%"]) == {"perf/t.py::test[inference-b32]"}  # from its calibration batch
    assert all(child.nodeids == tuple(i.nodeid for i in items) for child in plan if child.kind == "identical")
