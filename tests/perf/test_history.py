"""Main's history as the gate's noise model (perf.gate.history, perf.gate.compare.Baseline): which saved runs are
the history, each metric's reference with change points and a noise profile's seed, the run's verdict rows, and
simulated CI runs (perf.crossprocess) over saved processes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from perf.crossprocess import IDENTICAL, identical_rows, regression_rows, simulate
from perf.gate.compare import Baseline, GateSettings, budget, compare_runs, judge_benchmark, judge_paired
from perf.gate.history import history_runs, reference_for
from perf.runs import BenchmarkRecord, SavedRun, run_from_json

FINGERPRINT = {"device": "cuda", "gpu_name": "NVIDIA H100 80GB HBM3", "compute_capability": "9.0",
               "driver_version": "580.159.04", "cuda_version": "13.0"}  # fmt: skip
SUBJECT = {"model": "yolov4-tiny.cfg", "input_size": "416x416", "classes": 2, "video": "synthetic seed 7"}


def _bench(name: str, median_s: float, seed: int, group: str = "inference", spread: float = 0.002,
           **extra: Any) -> dict[str, Any]:  # fmt: skip
    data = list(median_s * np.exp(spread * np.random.default_rng(seed).standard_normal(60)))
    return {"fullname": f"perf/t.py::{name}", "name": name, "group": group,
            "stats": {"median": float(np.median(data)), "data": data}, "extra_info": extra}  # fmt: skip


def _run(number: int, *benches: dict[str, Any], fingerprint: dict[str, Any] | None = None,
         subject: dict[str, Any] | None = None, injected: dict[str, Any] | None = None,
         branch: str = "main") -> SavedRun:  # fmt: skip
    doc = {"benchmarks": list(benches), "datetime": f"2026-11-01T{number // 60:02d}:{number % 60:02d}:00",
           "machine_info": {"perf": fingerprint or FINGERPRINT, "perf_subject": subject or SUBJECT},
           "commit_info": {"id": f"c{number:03d}", "branch": branch},
           "perf_run": {"run_id": f"r{number}", "injected": injected or {}}}  # fmt: skip
    return run_from_json(doc, f"{number:04d}_x.json")


def _process_medians(n: int, sd: float, seed: int, level: float = 1e-3) -> list[float]:
    return list(level * np.exp(sd * np.random.default_rng(seed).standard_normal(n)))


def test_the_history_is_the_last_comparable_clean_runs_of_this_machine_model_and_branch() -> None:
    runs = [_run(k, _bench("a", 1e-3, k)) for k in range(1, 26)]
    runs.append(_run(26, _bench("a", 2e-3, 26), injected={"regression": "layer:5%"}))
    runs.append(_run(27, _bench("a", 1e-3, 27), fingerprint={**FINGERPRINT, "driver_version": "590.1"}))
    runs.append(_run(28, _bench("a", 1e-3, 28), subject={**SUBJECT, "input_size": "320x320"}))
    kept = history_runs(runs, fingerprint=FINGERPRINT, identity=SUBJECT, last=20)
    assert [r.run_id for r in kept] == [f"r{k}" for k in range(6, 26)]
    assert len(history_runs(runs, fingerprint=None, identity=None, last=0)) == 27  # the injected run never
    runs += [_run(29, _bench("a", 1e-3, 29), branch="feature"), _run(30, _bench("a", 1e-3, 30), branch="HEAD")]
    on_main = history_runs(runs, fingerprint=FINGERPRINT, identity=SUBJECT, branch="main")
    assert [r.run_id for r in on_main[-2:]] == ["r25", "r30"]  # another branch's run left out, a detached one kept
    anywhere = history_runs(runs, fingerprint=FINGERPRINT, identity=SUBJECT)
    assert [r.run_id for r in anywhere[-3:]] == ["r25", "r29", "r30"]  # branch None: any


def test_a_change_point_restarts_the_reference_and_keeps_the_spread_from_before() -> None:
    before = _process_medians(12, 0.01, 1)
    after = _process_medians(2, 0.01, 2, level=1.2e-3)
    runs = [_run(k + 1, _bench("a", m, k)) for k, m in enumerate(before + after)]
    found = reference_for(runs, "perf/t.py::a")
    assert found is not None and found.restarted_at == "commit c013"
    assert found.reference.n == 2 and found.reference.median_s == pytest.approx(1.2e-3, rel=0.02)
    assert found.reference.df >= 9  # the spread of the (up to 12, outliers left out) runs before the change


def test_the_gate_restarts_its_history_only_at_shifts_past_its_floor_and_the_benchmarks_profiled_scatter() -> None:
    from perf.gate.noise import NoiseEntry, NoiseProfile

    medians = _process_medians(10, 0.002, 1) + _process_medians(6, 0.002, 2, level=1.03e-3)  # +3% after run 10
    runs = [_run(k + 1, _bench("a", m, k)) for k, m in enumerate(medians)]
    found = Baseline(runs).reference("perf/t.py::a", "time")
    assert found is not None and found.restarted_at == "commit c011"  # at the default 2% floor
    bigger_floor = Baseline(runs).reference("perf/t.py::a", "time", min_effect=0.05)
    assert bigger_floor is not None and bigger_floor.restarted_at is None  # --perf-min-effect=5%: not a change
    scatter = NoiseEntry(3, (1e-3, 1.05e-3, 0.95e-3), 0.05, 0.1, 0.05, 0.001, 0.05)  # 5% between processes
    profile = NoiseProfile("k", FINGERPRINT, "2026-11-26", None, ["p1", "p2", "p3"],
                           {"perf/t.py::a": {"time": scatter}})  # fmt: skip
    profiled = Baseline(runs, profile).reference("perf/t.py::a", "time")
    assert profiled is not None and profiled.restarted_at is None  # within this benchmark's own scatter


def test_a_short_history_is_seeded_by_the_noise_profiles_processes() -> None:
    runs = [_run(1, _bench("a", 1e-3, 1))]
    assert reference_for(runs, "perf/t.py::a") is None
    seeded = reference_for(runs, "perf/t.py::a", seed_medians_s=_process_medians(6, 0.01, 3))
    assert seeded is not None and seeded.reference.n == 7 and seeded.seeded == 6


def _history(n: int, sd: float = 0.01, level: float = 1e-3, seed: int = 0, **extra: Any) -> Baseline:
    medians = _process_medians(n, sd, seed, level)
    return Baseline([_run(k + 1, _bench("a", m, 100 + k, **extra)) for k, m in enumerate(medians)])


def test_a_run_is_judged_against_the_distribution_of_the_history_not_one_process() -> None:
    baseline = _history(15, sd=0.01)
    level = budget(baseline, GateSettings()).first_level
    same = judge_benchmark(baseline, BenchmarkRecord.from_json(_bench("a", baseline.reference(
        "perf/t.py::a", "time").reference.median_s * 1.01, 7)), level)  # fmt: skip
    assert same.verdict == "no change" and same.reference_runs == 15 and 0.02 <= same.detectable < 0.06
    slow = judge_benchmark(baseline, BenchmarkRecord.from_json(_bench("a", 1.1e-3, 8)), level)
    assert slow.verdict == "slower" and slow.suspect == ["time"] and slow.lo > 1


def test_a_stage_that_grew_by_a_tenth_of_the_frame_makes_the_pipeline_slower_and_is_named() -> None:
    def e2e(pre_s: float, seed: int, frame_s: float = 10e-3) -> dict[str, Any]:
        noise = np.exp(0.003 * np.random.default_rng(seed).standard_normal(40))
        stages = {"stage:preprocess": {"label": "stage preprocess", "judged": True, "data": list(pre_s * noise)}}
        return _bench("e2e", frame_s, seed, "end-to-end", spread=0.05, metrics=stages)

    rng = np.random.default_rng(5)
    runs = [_run(k + 1, e2e(1e-3 * np.exp(0.02 * rng.standard_normal()), k,
                            10e-3 * np.exp(0.05 * rng.standard_normal()))) for k in range(12)]  # fmt: skip
    baseline = Baseline(runs)
    level = budget(baseline, GateSettings()).first_level
    row = judge_benchmark(baseline, BenchmarkRecord.from_json(e2e(2e-3, 50, 10.5e-3)), level)
    assert row.verdict == "slower" and row.moved.startswith("stage preprocess +1 ms/frame")
    assert row.metrics[0].verdict == "no change"  # the frame alone is within its noise
    same = judge_benchmark(baseline, BenchmarkRecord.from_json(e2e(1e-3, 51)), level)
    assert same.verdict == "no change"


def test_a_slower_frame_names_the_stage_with_most_of_the_change_when_no_stage_is_beyond_its_own_noise() -> None:
    def loop(write_s: float, read_s: float, frame_s: float, seed: int) -> dict[str, Any]:
        noisy = np.random.default_rng(seed)
        stages = {name: {"label": name.replace(":", " "), "judged": True,
                         "data": list(s * np.exp(0.15 * noisy.standard_normal(40)))}
                  for name, s in (("stage:write", write_s), ("stage:read", read_s))}  # a wall clock: 15% per block
        return _bench("pipe", frame_s, seed, "pipelined", spread=0.01, metrics=stages)

    rng = np.random.default_rng(3)
    runs = [_run(k + 1, loop(3e-3 * np.exp(0.12 * rng.standard_normal()), 0.6e-3 * np.exp(0.08 * rng.standard_normal()),
                             2e-3 * np.exp(0.01 * rng.standard_normal()), k)) for k in range(12)]  # fmt: skip
    baseline = Baseline(runs)
    level = budget(baseline, GateSettings()).first_level
    row = judge_benchmark(baseline, BenchmarkRecord.from_json(loop(3.3e-3, 0.6e-3, 2.2e-3, 60)), level)
    assert row.verdict == "slower" and row.metrics[0].verdict == "slower"
    assert [m.verdict for m in row.metrics[1:]] == ["no change", "no change"]
    assert row.moved.endswith("moved most") and "stage write" in row.moved.split("; ")[-1]
    same = judge_benchmark(baseline, BenchmarkRecord.from_json(loop(3e-3, 0.6e-3, 2e-3, 61)), level)
    assert "moved most" not in same.moved


def test_launch_bound_calls_are_also_judged_on_host_latency() -> None:
    def bench(gpu_s: float, host_s: float, seed: int, bound: bool = True) -> dict[str, Any]:
        host = {"host": {"label": "host latency (sync)", "data": [host_s] * 30}}
        return _bench("b1", gpu_s, seed, launch_bound=bound, metrics=host)

    rng = np.random.default_rng(9)
    runs = [_run(k + 1, bench(1e-3, 3e-3 * np.exp(0.01 * rng.standard_normal()), k)) for k in range(10)]
    baseline = Baseline(runs)
    level = budget(baseline, GateSettings()).first_level
    row = judge_benchmark(baseline, BenchmarkRecord.from_json(bench(1e-3, 3.6e-3, 11)), level)
    assert row.verdict == "slower" and row.suspect == ["host"] and "host latency (sync) 1.2" in row.moved
    unbound = judge_benchmark(baseline, BenchmarkRecord.from_json(bench(1e-3, 3.6e-3, 11, bound=False)), level)
    assert unbound.verdict == "no change" and [m.metric for m in unbound.metrics] == ["time"]


def test_rows_cover_both_runs_and_say_why_a_benchmark_is_missing() -> None:
    baseline = Baseline([_run(k + 1, _bench("a", 1e-3, k), _bench("gone", 1e-3, k)) for k in range(5)])
    current = {"perf/t.py::a": BenchmarkRecord.from_json(_bench("a", 1e-3, 50)),
               "perf/t.py::new": BenchmarkRecord.from_json(_bench("new", 1e-3, 51))}  # fmt: skip
    rows = {r.name: r for r in compare_runs(baseline, current, GateSettings(), ["perf/t.py::a", "perf/t.py::gone"])}
    assert rows["new"].verdict == "missing" and rows["new"].note == "not in the history"
    assert rows["gone"].verdict == "missing" and rows["gone"].note.startswith("not measured")
    assert rows["a"].verdict == "no change"
    collected = iter(["perf/t.py::a", "perf/t.py::gone"])  # the session's node ids, as an iterator
    again = {r.name: r.verdict for r in compare_runs(baseline, current, GateSettings(), collected)}
    assert again == {name: row.verdict for name, row in rows.items()}


def test_paired_processes_judge_every_judged_metric_on_their_ratios() -> None:
    base = [BenchmarkRecord.from_json(_bench("a", m, k)) for k, m in enumerate(_process_medians(4, 0.05, 1))]
    cand = [BenchmarkRecord.from_json(_bench("a", b.median_s * 1.1, 10 + k)) for k, b in enumerate(base)]
    row = judge_paired(base, cand, 0.01)
    assert row.verdict == "slower" and row.ratio == pytest.approx(1.1, rel=0.01)
    assert judge_paired(base, base, 0.01).verdict == "no change"


def test_simulated_ci_runs_count_red_runs_detections_and_confirmation_processes() -> None:
    def pool(label: str, count: int, level: float, seed: int, injected: dict[str, Any] | None = None) -> dict:
        medians = _process_medians(count, 0.01, seed, level)
        return {f"{label}{k}": _run(k + 1 + seed, _bench("x[b32]", m, seed + k, batch=32), injected=injected)
                for k, m in enumerate(medians)}  # fmt: skip

    identical = pool("a", 14, 1e-3, 0)
    regressed = {"layer:5%": pool("l", 5, 1.05e-3, 100, {"regression": "layer:5%"})}
    runs = simulate(identical, regressed, GateSettings(confirm=4), history=8, draws=4)
    assert sum(r.kind == IDENTICAL for r in runs) == 56 and sum(r.kind != IDENTICAL for r in runs) == 20
    assert all(r.history == 8 for r in runs if r.kind != IDENTICAL)
    (overall,) = [r for r in identical_rows(runs) if r["family"] == "all"]
    assert overall["red runs"].startswith("0/56")
    (detected,) = regression_rows(runs)
    assert detected["slower"] == "20/20 (100.0%)" and detected["meets target"] == "yes"
    assert detected["confirmation processes"] >= 20  # every detection was confirmed in fresh processes



def test_a_simulated_confirmation_sizes_its_looks_as_the_gate_does() -> None:
    identical = {f"a{k}": _run(k + 1, _bench("x[b32]", m, k, batch=32))
                 for k, m in enumerate(_process_medians(16, 0.01, 0))}  # fmt: skip
    regressed = {f"l{k}": _run(40 + k, _bench("x[b32]", m, 40 + k, batch=32), injected={"regression": "layer:5%"})
                 for k, m in enumerate(_process_medians(8, 0.01, 40, 1.05e-3))}  # fmt: skip
    runs = simulate(identical, {"layer:5%": regressed}, GateSettings(confirm=3), history=8, draws=2)
    confirmed = [r.confirmation_processes for r in runs if r.kind != IDENTICAL and r.suspects]
    # --perf-confirm=3: a look of 2 pairs (which cannot confirm: MIN_CONFIRM is 3), then one of 1; never 4 pairs
    assert confirmed and max(confirmed) == 6

def _save(folder: Any, run_number: int, median_s: float, seed: int, **marks: Any) -> None:
    import json

    doc = {"benchmarks": [_bench("a", median_s, seed)], "datetime": f"2026-11-{run_number:02d}T00:00:00",
           "machine_info": {"perf": FINGERPRINT, "perf_subject": SUBJECT}, "commit_info": {"id": f"c{run_number:03d}"},
           "perf_run": {"run_id": f"r{run_number}", "injected": marks.get("injected", {})}}  # fmt: skip
    (folder / f"{run_number:04d}_run.json").write_text(json.dumps(doc))


def _judge_cli(*args: str) -> Any:
    """``perf-history judge`` with ``args`` (``--store WHERE`` first goes before ``judge``)."""
    import subprocess
    import sys

    store, args = (args[:2], args[2:]) if args[:1] == ("--store",) else ((), args)
    return subprocess.run([sys.executable, "-m", "perf.store.cli", *store, "judge", *args], capture_output=True,
                          text=True, timeout=120)  # fmt: skip


def test_the_offline_judge_judges_a_saved_run_against_the_history_before_it(tmp_path: Any) -> None:
    storage = tmp_path / "storage" / "machine"
    storage.mkdir(parents=True)
    for k, m in enumerate(_process_medians(8, 0.005, 4)):
        _save(storage, k + 1, m, k)
    _save(storage, 9, 1.2e-3, 9)
    slow = _judge_cli("--storage", str(tmp_path / "storage"), "--out", str(tmp_path / "verdicts"))
    assert slow.returncode == 1, slow.stdout + slow.stderr
    assert slow.stdout.startswith("perf-history judge: 0009 against main's history of 8 comparable run(s)")
    assert "a slower row is a suspect to confirm" in slow.stdout and "1 slower, 0 faster" in slow.stdout
    assert (tmp_path / "verdicts" / "perf-compare.json").is_file()
    earlier = _judge_cli("--storage", str(tmp_path / "storage"), "--run", "8")
    assert earlier.returncode == 0 and "history of 7 comparable run(s)" in earlier.stdout
    assert "0 slower, 0 faster, 1 no change" in earlier.stdout


def test_the_offline_judge_takes_several_processes_of_one_code_together_and_refuses_a_bad_run(tmp_path: Any) -> None:
    storage = tmp_path / "storage"
    storage.mkdir()
    for k, m in enumerate(_process_medians(8, 0.01, 5)):
        _save(storage, k + 1, m, k)
    for k in range(3):
        _save(storage, 9 + k, 1.03e-3 * (1 + 0.002 * k), 20 + k)
    together = _judge_cli("--storage", str(storage), "--processes", "3", "--history", "8")
    assert together.stdout.startswith("perf-history judge: 0009, 0010, 0011 against main's history of 8")
    missing = _judge_cli("--storage", str(storage), "--run", "0042")
    assert missing.returncode == 2 and missing.stderr.strip() == (
        "perf-history: error: --run '0042': no such saved run (give its number, id or label)")


def _noisy_profile(storage: Path) -> Path:
    """This runner's noise profile in ``storage``: 6 processes of benchmark a whose medians move 5% between them."""
    from perf.gate.noise import compute_profile, save_profile

    processes = [_run(k + 1, _bench("a", m, 50 + k)) for k, m in enumerate(_process_medians(6, 0.05, 6))]
    return save_profile(storage, compute_profile(processes, FINGERPRINT))


def _short_history(storage: Path) -> None:
    """Saved runs 1 (the history: one process) and 2 (judged: 4% slower than run 1, within the profile's noise)."""
    storage.mkdir(parents=True, exist_ok=True)
    _save(storage, 1, 1e-3, 1)
    _save(storage, 2, 1.04e-3, 2)


def test_the_offline_judge_seeds_a_short_history_with_the_storages_noise_profile_and_warns_of_a_bad_one(
        tmp_path: Path) -> None:  # fmt: skip
    storage = tmp_path / "storage"
    _short_history(storage)
    alone = _judge_cli("--storage", str(storage))  # one run's own spread: 4% is slower
    assert alone.returncode == 1 and "(no noise profile)" in alone.stdout and "1 slower" in alone.stdout
    path = _noisy_profile(storage)
    seeded = _judge_cli("--storage", str(storage))  # 6 processes 5% apart: 4% is within identical code's noise
    assert (seeded.returncode, seeded.stderr) == (0, ""), seeded.stdout + seeded.stderr
    assert "noise profile" not in seeded.stdout and "0 slower" in seeded.stdout
    profile = json.loads(path.read_text())
    profile["entries"]["perf/t.py::a"]["time"]["medians_s"] = [0, 0]
    path.write_text(json.dumps(profile))
    bad = _judge_cli("--storage", str(storage))  # said in one line, as the gate says it, and judged without it
    assert bad.returncode == 1 and "(no noise profile)" in bad.stdout and "1 slower" in bad.stdout
    assert bad.stderr.splitlines() == [
        f"perf-history: warning: ignored this runner's stored noise profile, '{path}': entry 'perf/t.py::a' metric "
        "'time': medians_s holds 0, not a median in seconds (1e-9 to 1e4): a history of fewer than 3 runs is judged "
        "without it; measure it again with --perf-noise=10"]


def test_the_offline_judge_of_a_store_seeds_a_short_history_with_the_stores_noise_profile_of_that_machine(
        tmp_path: Path) -> None:  # fmt: skip
    pytest.importorskip("sqlalchemy")
    from perf.runs import load_runs
    from perf.store.db import machine_key, open_store

    storage, where = tmp_path / "storage", str(tmp_path / "h.sqlite")
    _short_history(storage)
    profile = json.loads(_noisy_profile(tmp_path / "elsewhere").read_text())
    first, second = load_runs(storage)
    with open_store(where) as store:
        store.save_run(first.raw, noise=profile)  # stored by a gate run that judged with the profile
        store.save_run(second.raw)
    seeded = _judge_cli("--store", where)
    assert (seeded.returncode, seeded.stderr) == (0, ""), seeded.stdout + seeded.stderr
    assert "noise profile" not in seeded.stdout and "0 slower" in seeded.stdout
    profile["entries"]["perf/t.py::a"]["time"]["between_sd"] = "0.05"
    with open_store(where) as store:
        store.save_run({**first.raw, "perf_run": {"run_id": "r0", "injected": {}}, "datetime": "2026-11-03T00:00:00"},
                       noise=profile)  # the store's newest profile of this machine: a bad one
    bad = _judge_cli("--store", where, "--run", "r2")
    assert bad.returncode == 1 and "(no noise profile)" in bad.stdout and "1 slower" in bad.stdout
    assert bad.stderr.splitlines() == [
        f"perf-history: warning: ignored this runner's stored noise profile, store 'sqlite:///{where}', machine "
        f"{machine_key(first.machine_info)}: entry 'perf/t.py::a' metric 'time': between_sd is '0.05', expected a "
        "number from 0 to 5: a history of fewer than 3 runs is judged without it; measure it again with "
        "--perf-noise=10"]


@pytest.mark.parametrize("out", ["a-file", "a-file/sub", "/dev/null", "read-only"])
def test_the_offline_judge_refuses_an_out_folder_it_cannot_write_before_judging(tmp_path: Any, out: str) -> None:
    import os
    import subprocess

    storage = tmp_path / "storage"
    storage.mkdir()
    for k, m in enumerate(_process_medians(4, 0.005, 4)):
        _save(storage, k + 1, m, k)
    (tmp_path / "a-file").write_text("kept\n")
    folder = tmp_path / out if out != "/dev/null" else Path(out)
    if out == "read-only":
        folder.mkdir()
        folder.chmod(0o555)
        if os.geteuid() == 0 and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
            pytest.skip("running as root and chattr +i is not allowed here: no folder is read-only to root")
    try:
        result = _judge_cli("--storage", str(storage), "--out", str(folder))
    finally:
        if out == "read-only":
            subprocess.run(["chattr", "-i", str(folder)], capture_output=True)
            folder.chmod(0o755)
    assert (result.returncode, result.stdout) == (2, ""), result.stdout + result.stderr  # nothing judged, as said
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"perf-history: error: --out: cannot write the verdicts to '{folder}': ")
    if out != "read-only":  # the file in the way is named
        assert f"'{folder if out == '/dev/null' else tmp_path / 'a-file'}' is not a folder" in line
    assert (tmp_path / "a-file").read_text() == "kept\n" and not list(tmp_path.glob("**/perf-compare*"))


def test_a_suspect_is_confirmed_cleared_left_inconclusive_or_bounded_by_its_confirmation_pairs() -> None:
    from perf.gate.confirm import BASE, CANDIDATE, Process, judge_suspect

    baseline = _history(12, sd=0.01)
    level = budget(baseline, GateSettings(confirm=4)).first_level

    def suspect() -> Any:
        row = judge_benchmark(baseline, BenchmarkRecord.from_json(_bench("a", 1.1e-3, 70)), level)
        assert row.verdict == "slower" and row.suspect == ["time"]
        return row

    def pairs(ratios: list[float]) -> list[Process]:
        out = []
        for k, ratio in enumerate(ratios):
            out += [Process(BASE, _run(80 + k, _bench("a", 1e-3, 80 + k))),
                    Process(CANDIDATE, _run(90 + k, _bench("a", 1e-3 * ratio, 90 + k)))]
        return out

    confirmed = suspect()
    assert not judge_suspect(confirmed, baseline, GateSettings(), pairs([1.1, 1.1]), 0.025, True, final=False)
    assert confirmed.verdict == "slower" and confirmed.confirmation is None  # two pairs confirm nothing yet
    assert judge_suspect(confirmed, baseline, GateSettings(), pairs([1.1, 1.1, 1.1]), 0.025, True, final=False)
    assert confirmed.verdict == "slower" and confirmed.confirmation["processes"] == 3
    last = suspect()  # a --perf-confirm of 2 pairs: its last look may confirm on them
    assert judge_suspect(last, baseline, GateSettings(), pairs([1.1, 1.1]), 0.025, True, final=True)
    assert last.verdict == "slower" and last.confirmation["processes"] == 2
    cleared = suspect()
    assert judge_suspect(cleared, baseline, GateSettings(), pairs([1.0, 1.0]), 0.025, True, final=False)
    assert cleared.verdict == "no change" and "cleared by 2 pair(s)" in cleared.note
    open_ = suspect()  # leaning slower (above the 2% floor), the pairs disagree: inconclusive
    assert not judge_suspect(open_, baseline, GateSettings(), pairs([1.06, 0.99]), 0.025, True, final=False)
    assert judge_suspect(open_, baseline, GateSettings(), pairs([1.06, 0.99]), 0.025, True, final=True)
    assert open_.verdict == "inconclusive" and open_.note.startswith("inconclusive: cannot rule out +")
    under = suspect()  # not cleared, but the estimate is under the floor: no change, its bound said
    assert judge_suspect(under, baseline, GateSettings(), pairs([1.03, 0.99]), 0.025, True, final=True)
    assert under.verdict == "no change" and "not confirmed by 2 pair(s) of fresh processes: under the floor, " \
        "at most +" in under.note


def test_one_confirmation_pair_without_a_history_says_it_has_no_spread_not_that_nothing_was_saved() -> None:
    from perf.gate.confirm import BASE, CANDIDATE, Process, judge_suspect

    row = judge_benchmark(_history(12, sd=0.01), BenchmarkRecord.from_json(_bench("a", 1.1e-3, 70)), 0.05)
    assert row.verdict == "slower" and row.suspect == ["time"]
    pair = [Process(BASE, _run(80, _bench("a", 1e-3, 80))), Process(CANDIDATE, _run(90, _bench("a", 1.1e-3, 90)))]
    assert judge_suspect(row, None, GateSettings(), pair, 0.025, True, final=True)  # perf-ab --confirm 1, no history
    assert row.verdict == "inconclusive" and "saved no result" not in row.note
    assert "1 pair(s) and no reference" in row.note


def test_a_simulated_confirmation_takes_the_processes_saved_closest_in_time_to_the_first_pass() -> None:
    from perf.crossprocess import _nearest, _when

    runs = {f"p{k}": _run(k, _bench("a", 1e-3, k)) for k in (1, 5, 9, 30)}  # saved 00:01, 00:05, 00:09, 00:30
    labels = list(runs)
    first_pass = _when(_run(8, _bench("a", 1e-3, 8)))
    assert [_nearest(labels, runs, first_pass) for _ in range(3)] == [runs["p9"], runs["p5"], runs["p1"]]
    assert labels == ["p30"]

def test_a_history_whose_first_pass_flags_its_own_runs_often_makes_the_confirmation_stricter() -> None:
    from perf.gate.judge import CONFIRM_LEVEL, RUN_BUDGET

    medians = _process_medians(10, 0.002, seed=3)
    calm = Baseline([_run(k, _bench("a", m, k)) for k, m in enumerate(medians)])
    assert budget(calm, GateSettings(confirm=4)).confirm_level == CONFIRM_LEVEL
    slow = {2, 5, 8}  # three processes of ten in a slow state of the runner, 10% above the rest
    mixed = Baseline([_run(k, _bench("a", m * (1.1 if k in slow else 1.0), k)) for k, m in enumerate(medians)])
    plan = budget(mixed, GateSettings(confirm=4))
    assert (plan.flagged, plan.judged) == (3, 10)
    assert plan.confirm_level == pytest.approx(RUN_BUDGET / 0.3) and plan.confirm_level < CONFIRM_LEVEL
    assert "flagged 3 of the history's 10 runs" in plan.describe()
    assert budget(mixed, GateSettings(confirm=0)).judged == 0  # no confirmation: nothing to make stricter
