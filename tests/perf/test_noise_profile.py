"""The noise profile: between-process noise from K runs, saved beside the runs and read back, its limits; the
profile's processes seed a short history (tests/perf/test_history.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from perf.runs import run_from_json
from perf.gate.noise import (NoiseProfile, NoiseProfileError, compute_profile, entry_from_samples, family_rows,
                        find_profile, floors_from_profile, load_profile, profile_key, save_profile,
                        upper_limit)  # fmt: skip

FINGERPRINT = {"device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
               "driver_version": "580.159.04", "cuda_version": "13.0", "cpu_model": "Xeon",
               "cpu_count": 16}  # fmt: skip


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


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["nan-round", "zero-median", "huge-round"]), st.integers(3, 8))
def test_a_saved_series_with_no_median_is_left_out_of_the_profile_and_a_huge_one_has_finite_limits(
        kind: str, at: int) -> None:  # fmt: skip
    """The runs of ``perf-history simulate`` are saved files: once ValueError and OverflowError tracebacks."""
    odd = _sample(1e-3, 9, n=9)
    if kind == "zero-median":
        odd = [0.0] * 9
    odd[at] = {"nan-round": float("nan"), "zero-median": 1e-3, "huge-round": 8e269}[kind]
    runs = [_run(_bench("a", _sample(1e-3, k)), number=k + 1) for k in range(2)]
    runs.append(_run(_bench("a", _sample(1e-3, 5)), _bench("b", _sample(1e-3, 6)), number=3))
    runs.append(_run(_bench("a", odd), _bench("b", _sample(1e-3, 7)), number=4))
    profile = compute_profile(runs, FINGERPRINT)
    entry = profile.entries["perf/t.py::a"]["time"]
    assert entry.processes == (4 if kind == "huge-round" else 3)
    assert profile.entries["perf/t.py::b"]["time"].processes == 2
    assert all(np.isfinite([entry.max_cv, entry.max_drift, entry.between_sd]))


@pytest.mark.parametrize(("content", "problem"), [("{", "not a noise profile"), ('{"format": 9}', "format 9"),
                                                  ('{"format": 1}', "not a noise profile (KeyError")])  # fmt: skip
def test_a_bad_profile_is_one_error_naming_the_file(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(NoiseProfileError, match=f"'{path}': {problem.replace('(', '[(]')}"):
        load_profile(path)
    with pytest.raises(NoiseProfileError, match="no such file"):
        load_profile(tmp_path / "missing.json")


def test_a_profile_behind_a_symbolic_link_loop_is_one_error_naming_the_file_once(tmp_path: Path) -> None:
    path = tmp_path / "p.json"
    path.symlink_to(path)  # "cannot read: [Errno 40] Too many levels of symbolic links: '.../p.json'"
    with pytest.raises(NoiseProfileError) as err:
        load_profile(path)
    assert str(err.value) == f"'{path}': cannot read: Too many levels of symbolic links"


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(0.001, 0.5), min_size=2, max_size=12))
def test_upper_limit_covers_every_value_seen(values: list[float]) -> None:
    assert upper_limit(values) >= max(values)


def _profile_text(**entry: object) -> str:
    """A profile of one entry, with ``entry``'s fields replacing a good entry's."""
    good = {"processes": 3, "medians_s": [1e-3, 1.01e-3, 0.99e-3], "cv": 0.01, "max_ratio": 0.02, "total_sd": 0.01,
            "within_se": 0.002, "between_sd": 0.0098, "max_cv": 0.02, "max_drift": 0.01}  # fmt: skip
    return json.dumps({"format": 1, "key": "k", "fingerprint": FINGERPRINT, "created": "2026-11-23", "commit": None,
                       "runs": ["0001_x.json"], "entries": {"perf/t.py::a": {"time": {**good, **entry}}}})


@pytest.mark.parametrize(("entry", "problem"), [
    ({"between_sd": "0.01"}, "between_sd is '0.01', expected a number from 0 to 5"),
    ({"between_sd": 1e6}, "between_sd is 1000000.0, expected a number from 0 to 5"),
    ({"medians_s": ["0.001", "0.001", "0.001"]}, "medians_s holds '0.001', not a median in seconds (1e-9 to 1e4)"),
    ({"medians_s": [0, 0, 0]}, "medians_s holds 0, not a median in seconds (1e-9 to 1e4)"),
    ({"medians_s": [1e-3, None]}, "medians_s holds None, not a median in seconds (1e-9 to 1e4)"),
    ({"medians_s": [1e-3]}, "medians_s is 1 value(s), expected a list of 2 or more per-process medians"),
    ({"medians_s": [1e308, 1e308]}, "medians_s holds 1e+308, not a median in seconds (1e-9 to 1e4)"),
    ({"medians_s": [5e-324, 5e-324]}, "medians_s holds 5e-324, not a median in seconds (1e-9 to 1e4)"),
    ({"processes": "3"}, "processes is '3', expected a whole number >= 2"),
    ({"cv": [0.01]}, "cv is [0.01], not a number"),
])  # fmt: skip
def test_a_profile_entry_of_the_wrong_type_is_one_error_naming_the_file_and_the_entry(
        tmp_path: Path, entry: dict, problem: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(_profile_text(**entry))
    with pytest.raises(NoiseProfileError) as e:
        load_profile(path)
    assert str(e.value) == f"'{path}': entry 'perf/t.py::a' metric 'time': {problem}"
    path.write_text(_profile_text())
    assert load_profile(path).entry("perf/t.py::a", "time") is not None  # the good entry


@pytest.mark.parametrize("name", ["", "perf/t.py::a"])
def test_a_family_that_is_no_string_is_one_error_whatever_its_benchmarks_name(tmp_path: Path, name: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(json.dumps({**json.loads(_profile_text()), "families": {name: 5}}))
    with pytest.raises(NoiseProfileError) as e:
        load_profile(path)
    assert str(e.value) == f"'{path}': families[{name!r}] is 5, expected a string"


@settings(max_examples=20, deadline=None)
@given(st.one_of(st.text(max_size=12), st.dictionaries(st.text(max_size=4), st.integers(), max_size=3),
                 st.integers(), st.none()))
def test_a_profiles_runs_that_are_no_list_are_one_error_never_a_count_of_processes(runs: object) -> None:
    """``processes`` is the length of ``runs``: a string "0001_x.json" is no 11 processes, a mapping no count."""
    with pytest.raises(NoiseProfileError) as e:
        NoiseProfile.from_json(json.dumps({**json.loads(_profile_text()), "runs": runs}), named="'p.json'")
    assert str(e.value) == f"'p.json': runs is {runs!r}, expected a list of saved run names"


@pytest.mark.parametrize(("content", "problem"), [
    ("[" * 100_000, "not a noise profile (ValueError: not valid JSON: nested too deeply)"),
    ('{"format": ' + "1" * 5000 + "}", "not a noise profile (ValueError: not valid JSON: Exceeds the limit (4300"),
])  # fmt: skip
def test_a_profile_pythons_parser_refuses_is_one_error_naming_the_file(tmp_path: Path, content: str,
                                                                       problem: str) -> None:
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(NoiseProfileError) as e:
        load_profile(path)
    assert str(e.value).startswith(f"'{path}': {problem}") and "\n" not in str(e.value)


def test_perf_report_says_it_ignored_a_bad_stored_profile_and_reports_the_runs(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from perf.report_cli import main

    machine = tmp_path / "storage" / "m"
    machine.mkdir(parents=True)
    for number in (1, 2, 3):
        (machine / f"000{number}_x.json").write_text(json.dumps(_run(_bench("a", _sample(1e-3, number))).raw))
    stored = tmp_path / "storage" / "noise" / f"{profile_key(FINGERPRINT)}.json"
    stored.parent.mkdir()
    stored.write_text(_profile_text(between_sd=1e6))
    assert main(["--storage", str(tmp_path / "storage"), "--out", str(tmp_path / "out")]) == 0
    assert capsys.readouterr().err.splitlines() == [
        f"perf-report: warning: ignored this runner's stored noise profile, '{stored}': entry 'perf/t.py::a' metric "
        "'time': between_sd is 1000000.0, expected a number from 0 to 5: change points use the default floor; "
        "measure it again with --perf-noise=10"]
    assert "3 saved run(s)" in (tmp_path / "out" / "summary.md").read_text()


def test_a_process_whose_median_squared_passes_a_float_has_the_cv_of_the_medians_not_infinity() -> None:
    medians = [1e-3, 1.1e-3, 1e270]  # a hand-edited saved run among perf-history simulate's: once inf and a warning
    with np.errstate(all="raise"):
        entry = entry_from_samples([np.array(_sample(m, k, n=40)) for k, m in enumerate(medians)])
    assert entry.cv == pytest.approx(np.std(np.array(entry.medians_s) / np.mean(entry.medians_s), ddof=1))
    assert 1.5 < entry.cv < 2
