"""The noise profile and the gate's use of it: between-process noise from K runs, the widened interval, the
stability limits it sets, multi-metric verdicts (host latency, pipeline stages) and the cross-process tables."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perf.gate.compare import GateSettings, compare_benchmark
from perf.crossprocess import IDENTICAL, compare_fail_rows, identical_rows, judge_pairs, regression_rows
from perf.runs import BenchmarkRecord, run_from_json
from perf.gate.noise import (NoiseProfileError, compute_profile, entry_from_samples, family_rows, find_profile,
                        load_profile, profile_key, save_profile, stability_limits, upper_limit)  # fmt: skip
from perf.gate.stats import BetweenNoise, compare_samples, widen

FINGERPRINT = {"device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
               "driver_version": "580.159.04", "cuda_version": "13.0", "cpu_model": "Xeon", "cpu_count": 16}  # fmt: skip


def _sample(median: float, seed: int, n: int = 200, spread: float = 0.01) -> list[float]:
    rng = np.random.default_rng(seed)
    return list(median * np.exp(spread * rng.standard_normal(n)))


def _bench(name: str, data: list[float], group: str = "inference", **extra: object) -> dict:
    return {"fullname": f"perf/t.py::{name}", "name": name, "group": group,
            "stats": {"median": float(np.median(data)), "data": data}, "extra_info": extra}  # fmt: skip


def _run(*benches: dict, number: int = 1) -> object:
    doc = {"benchmarks": list(benches), "machine_info": {"perf": FINGERPRINT}, "datetime": "2026-11-23",
           "commit_info": {"id": "abc"}}  # fmt: skip
    return run_from_json(doc, f"{number:04d}_x.json")


# -- the decision rule with a between-process part ---------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(ratio=st.floats(0.5, 2.0), below=st.floats(0.0, 0.2), above=st.floats(0.0, 0.2), extra=st.floats(0.0, 0.3))
def test_widening_keeps_the_ratio_inside_and_never_narrows(ratio: float, below: float, above: float,
                                                           extra: float) -> None:  # fmt: skip
    lo, hi = ratio * math.exp(-below), ratio * math.exp(above)
    wide_lo, wide_hi = widen(ratio, lo, hi, extra)
    assert wide_lo <= lo + 1e-12 and wide_hi >= hi - 1e-12 and wide_lo <= ratio <= wide_hi
    assert math.log(hi) - math.log(ratio) <= math.log(wide_hi) - math.log(ratio) <= (
        math.log(hi) - math.log(ratio) + extra + 1e-9)


def test_between_process_part_turns_a_shift_within_this_runners_noise_into_no_change() -> None:
    base, shifted = _sample(1e-3, 1), _sample(1.04e-3, 2)
    assert compare_samples(base, shifted).verdict == "slower"  # within one process' view: a clear 4% slowdown
    noisy = BetweenNoise(sd=0.02, processes=10)  # identical code moves by ~2% between processes here
    result = compare_samples(base, shifted, between=noisy)
    assert result.verdict == "no change" and result.between == pytest.approx(noisy.half_width())
    assert compare_samples(base, _sample(1.2e-3, 3), between=noisy).verdict == "slower"


def test_fewer_profiled_processes_widen_the_interval_more() -> None:
    assert BetweenNoise(0.01, 3).half_width() > BetweenNoise(0.01, 10).half_width() > 2 * math.sqrt(2) * 0.01 * 0.9


@pytest.mark.parametrize(("sd", "processes"), [(-0.1, 5), (float("nan"), 5), (0.01, 1)])
def test_between_noise_refuses_nonsense(sd: float, processes: int) -> None:
    with pytest.raises(ValueError, match="between-process noise"):
        BetweenNoise(sd, processes)


# -- the profile ---------------------------------------------------------------------------------------------------


def test_profile_entry_separates_between_process_spread_from_sampling_noise() -> None:
    steady = entry_from_samples([np.array(_sample(1e-3, seed)) for seed in range(8)])
    assert steady.processes == 8 and steady.cv < 0.003 and steady.between_sd < 0.002
    shifted = entry_from_samples([np.array(_sample(1e-3 * (1 + 0.05 * (k % 2)), k)) for k in range(8)])
    assert 0.02 < shifted.between_sd < 0.04 and shifted.max_ratio == pytest.approx(0.05, abs=0.01)
    assert shifted.cv == pytest.approx(np.std(shifted.medians_s, ddof=1) / np.mean(shifted.medians_s))


def test_profile_is_saved_beside_the_runs_keyed_by_machine_and_read_back(tmp_path: Path) -> None:
    runs = [_run(_bench("a", _sample(1e-3, k)), _bench("e2e", _sample(8e-3, 10 + k, spread=0.05), "end-to-end",
                 metrics={"stage:read": {"data": _sample(1e-3, 20 + k)}}), number=k + 1) for k in range(4)]  # fmt: skip
    profile = compute_profile(runs, FINGERPRINT)
    assert set(profile.entries["perf/t.py::e2e"]) == {"time", "stage:read"}
    assert profile.families == {"perf/t.py::a": "inference", "perf/t.py::e2e": "end-to-end"}
    path = save_profile(tmp_path, profile)
    assert path == tmp_path / "noise" / f"{profile_key(FINGERPRINT)}.json"
    again = find_profile(tmp_path, FINGERPRINT)
    assert again is not None and again.entries == profile.entries and again.processes == 4
    assert find_profile(tmp_path, {**FINGERPRINT, "driver_version": "590.1"}) is None
    assert [row["family"] for row in family_rows(again)] == ["end-to-end", "inference"]


@pytest.mark.parametrize(("content", "problem"), [("{", "not a noise profile"), ('{"format": 9}', "format 9"),
                                                  ('{"format": 1}', "not a noise profile (KeyError")])  # fmt: skip
def test_a_bad_profile_is_one_error_naming_the_file(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(NoiseProfileError, match=f"'{path}': {problem.replace('(', '[(]')}"):
        load_profile(path)
    with pytest.raises(NoiseProfileError, match="no such file"):
        load_profile(tmp_path / "missing.json")


def test_stability_limits_follow_this_runners_normal_noise_but_never_drop_below_the_fixed_ones() -> None:
    quiet = entry_from_samples([np.array(_sample(1e-3, k)) for k in range(6)])
    assert stability_limits(quiet, 0.10, 0.05) == (0.10, 0.05)
    noisy = entry_from_samples([np.array(_sample(1e-3, k, spread=0.3)) for k in range(6)])
    assert stability_limits(noisy, 0.10, 0.05)[0] >= noisy.max_cv > 0.25
    assert stability_limits(None, 0.1, 0.05) == (0.1, 0.05)


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.001, 0.5), min_size=2, max_size=12))
def test_upper_limit_covers_every_value_seen(values: list[float]) -> None:
    assert upper_limit(values) >= max(values)


# -- verdicts on several metrics ------------------------------------------------------------------------------


def _record(name: str, data: list[float], group: str = "inference", **extra: object) -> BenchmarkRecord:
    return BenchmarkRecord.from_json(_bench(name, data, group, **extra))


def test_launch_bound_call_is_judged_on_host_latency_and_the_row_says_which_moved() -> None:
    gpu = _sample(1e-3, 1)
    base = _record("b1", gpu, launch_bound=True, metrics={"host": {"label": "host latency (sync)",
                                                                   "data": _sample(3e-3, 2)}})  # fmt: skip
    slower_host = _record("b1", _sample(1e-3, 3), launch_bound=True,
                          metrics={"host": {"label": "host latency (sync)", "data": _sample(3.6e-3, 4)}})
    row = compare_benchmark(base, slower_host, GateSettings())
    assert row.verdict == "slower" and "host latency (sync) 1.2" in row.moved and "slower" in row.moved
    not_bound = compare_benchmark(_record("b1", gpu, metrics={"host": {"data": _sample(3e-3, 2)}}),
                                  _record("b1", _sample(1e-3, 3), metrics={"host": {"data": _sample(3.6e-3, 4)}}),
                                  GateSettings())  # fmt: skip
    assert not_bound.verdict == "no change"  # shown, not judged: the GPU bounds this call


def test_a_stage_that_grew_by_a_tenth_of_the_frame_makes_the_pipeline_slower_and_is_named() -> None:
    def e2e(pre_ms: float, seed: int) -> BenchmarkRecord:
        stages = {"stage:preprocess": {"label": "stage preprocess", "judged": True, "data": _sample(pre_ms, seed)},
                  "stage:write": {"label": "stage write", "judged": True, "data": _sample(6e-3, seed + 1, spread=0.05)}}
        frame = [a + b for a, b in zip(stages["stage:preprocess"]["data"], stages["stage:write"]["data"])]
        return _record("e2e", frame, "end-to-end", metrics=stages)

    row = compare_benchmark(e2e(1e-3, 1), e2e(1.7e-3, 11), GateSettings())
    assert row.verdict == "slower" and row.moved.startswith("stage preprocess +0.7 ms/frame")
    assert compare_benchmark(e2e(1e-3, 1), e2e(1e-3, 21), GateSettings()).verdict == "no change"


def test_pipelined_stages_are_shown_but_not_judged() -> None:
    base = _record("p", _sample(4e-3, 1), "pipelined", metrics={"stage:read": {"judged": False, "data": _sample(1e-3, 2)}})
    cand = _record("p", _sample(4e-3, 3), "pipelined", metrics={"stage:read": {"judged": False, "data": _sample(2e-3, 4)}})
    row = compare_benchmark(base, cand, GateSettings())
    assert row.verdict == "no change" and row.metrics[1].judged is False and row.metrics[1].verdict == "slower"


# -- the cross-process self-test's tables ------------------------------------------------------------------------


def test_cross_process_pairs_count_false_verdicts_detections_and_leave_each_pair_out_of_its_profile() -> None:
    identical = {f"a{k}": _run(_bench("x[b32]", _sample(1e-3 * (1 + 0.01 * (k % 3)), k), batch=32), number=k + 1)
                 for k in range(6)}  # fmt: skip
    regressed = {"layer:5%": {"layer0": _run(_bench("x[b32]", _sample(1.08e-3, 99), batch=32,
                                                    injected={"regression": "layer:5%"}), number=7)}}  # fmt: skip
    verdicts = judge_pairs(identical, regressed, GateSettings(), FINGERPRINT, {"layer:5%": ("inference",)})
    assert sum(v.kind == IDENTICAL for v in verdicts) == 15 and sum(v.kind != IDENTICAL for v in verdicts) == 6
    (aa_all,) = [r for r in identical_rows(verdicts) if r["family"] == "all"]
    assert aa_all["false verdicts"] == "0/15 (0.0%)" and aa_all["meets targets"] == "yes"
    (detect,) = regression_rows(verdicts)
    assert detect["batch"] == 32 and detect["slower"] == "6/6 (100.0%)" and detect["meets target"] == "yes"
    fail = compare_fail_rows(identical, "median:5%")
    assert fail["ordered pairs"] == 30 and fail["pairs passing"] == "30/30 (100.0%)"
    assert json.dumps(fail)
