"""The noise profile: between-process noise from K runs, saved beside the runs and read back, its limits; the
profile's processes seed a short history (tests/perf/test_history.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perf.runs import run_from_json
from perf.gate.noise import (NoiseProfileError, compute_profile, entry_from_samples, family_rows, find_profile,
                        floors_from_profile, load_profile, profile_key, save_profile, upper_limit)  # fmt: skip

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
    floors = floors_from_profile(again)
    assert floors["perf/t.py::e2e"] == pytest.approx(np.expm1(again.entries["perf/t.py::e2e"]["time"].between_sd))
    assert set(floors) == set(again.entries) and floors_from_profile(None) == {}


@pytest.mark.parametrize(("content", "problem"), [("{", "not a noise profile"), ('{"format": 9}', "format 9"),
                                                  ('{"format": 1}', "not a noise profile (KeyError")])  # fmt: skip
def test_a_bad_profile_is_one_error_naming_the_file(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(NoiseProfileError, match=f"'{path}': {problem.replace('(', '[(]')}"):
        load_profile(path)
    with pytest.raises(NoiseProfileError, match="no such file"):
        load_profile(tmp_path / "missing.json")


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.001, 0.5), min_size=2, max_size=12))
def test_upper_limit_covers_every_value_seen(values: list[float]) -> None:
    assert upper_limit(values) >= max(values)
