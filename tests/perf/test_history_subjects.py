"""One model's history is never another's: ``perf-history changes``, ``perf-history runs``, the report and
``--perf-compare``'s "latest" keep runs of another model, video or machine apart (the gate's one comparability
rule, `perf.gate.history.comparable`), and a noisy runner's odd run is no change point. Real saved-run files and
a real SQLite store, read by the real commands; ``--perf-compare`` in a real pytest process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from perf.report.changes import history
from perf.report.inputs import load_inputs
from perf.store.cli import main as history_main

pytest.importorskip("sqlalchemy", reason="the history store needs SQLAlchemy (pip install -e '.[test]')")
pytest.importorskip("ruptures", reason="change points need ruptures (pip install -e '.[test]')")

MACHINE = "Linux-CPython-3.11-64bit"
BENCH = "perf/test_inference_speed.py::test_inference_speed[torch-fp32-b1]"
V4 = {"model": "yolov4-tiny-3cls.cfg", "cfg_sha256": "4444444444444444", "weights": "sha256:4a4a4a4a4a4a4a4a",
      "onnx_sha256": None, "engine_sha256": None, "input_size": "320x320", "classes": 3, "video": "clip.mp4",
      "video_sha256": "c1c1c1c1c1c1c1c1", "frames": "all", "precisions": ["fp32"], "backends": ["torch"],
      "class_names": ["car", "person", "bike"]}  # fmt: skip
V3 = {**V4, "model": "yolov3-tiny-3cls.cfg", "cfg_sha256": "3333333333333333", "weights": "sha256:3b3b3b3b3b3b3b3b"}


def _run(median_s: float, run_id: str, identity: dict[str, Any] | None, day: int) -> dict[str, Any]:
    """A saved run of one benchmark with rounds around ``median_s``, of the model ``identity``."""
    rounds = [median_s * f for f in (0.99, 0.995, 1.0, 1.005, 1.01)]
    bench = {"name": "test_inference_speed[torch-fp32-b1]", "fullname": BENCH, "group": "inference",
             "params": {"case": {"id": "torch-fp32-b1", "batch": 1}}, "extra_info": {"variant": "torch", "batch": 1},
             "stats": {"median": median_s, "iqr": median_s * 0.01, "q1": median_s * 0.995, "q3": median_s * 1.005,
                       "min": rounds[0], "max": rounds[-1], "rounds": 5, "data": rounds}}  # fmt: skip
    machine = {"node": "runner-1", "perf": {"device": "cpu", "cpu_model": "Test CPU"},
               **({"perf_subject": identity} if identity is not None else {})}  # fmt: skip
    return {"benchmarks": [bench], "machine_info": machine, "datetime": f"2026-11-{day:02d}T10:00:00",
            "commit_info": {"id": f"c{day:03d}abcdef", "branch": "main", "dirty": False},
            "perf_run": {"run_id": run_id, "injected": {}}}  # fmt: skip


def _storage(tmp_path: Path, runs: list[dict[str, Any]]) -> Path:
    folder = tmp_path / "storage" / MACHINE
    folder.mkdir(parents=True)
    for i, run in enumerate(runs, start=1):
        (folder / f"{i:04d}_run.json").write_text(json.dumps(run))
    return tmp_path / "storage"


def _history_cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    code = history_main(list(args))
    return code, capsys.readouterr().out


def _v4_then_v3(tmp_path: Path) -> Path:
    """Five yolov4 runs at 214 ms, then three yolov3 runs at 716 ms, in one storage."""
    runs = [_run(0.2143 * (1 + 0.002 * (i % 2)), f"v4-{i}", V4, i + 1) for i in range(5)]
    runs += [_run(0.716 * (1 + 0.002 * (i % 2)), f"v3-{i}", V3, i + 6) for i in range(3)]
    return _storage(tmp_path, runs)


def test_changes_never_put_a_change_point_between_two_models_runs(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    storage = _v4_then_v3(tmp_path)
    store = str(tmp_path / "h.sqlite")
    assert _history_cli(capsys, "--store", store, "import", str(storage))[0] == 0
    code, out = _history_cli(capsys, "--store", store, "changes")
    assert code == 0 and out.splitlines()[-1] == "0 change point(s) in 1 benchmark(s) of 8 run(s)", out
    assert "+234" not in out


def test_a_level_change_within_one_models_history_is_still_a_change_point(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    runs = [_run(0.2143, f"a{i}", V4, i + 1) for i in range(4)] + [_run(0.30, f"b{i}", V4, i + 5) for i in range(3)]
    store = str(tmp_path / "h.sqlite")
    assert _history_cli(capsys, "--store", store, "import", str(_storage(tmp_path, runs)))[0] == 0
    code, out = _history_cli(capsys, "--store", store, "changes")
    assert code == 0 and "| test_inference_speed[torch-fp32-b1] | c005abcdef (2026-11-05T10:00:00) |" in out, out


def test_changes_on_a_noisy_unchanged_history_find_no_change_point(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    # A noisy runner: the same code, one process in three or four 15% slow, each alone.
    factors = [1.0, 1.15, 1.0, 1.0, 1.15, 1.0, 1.002, 1.15, 1.0, 0.998, 1.0, 1.15, 1.0, 1.001]
    runs = [_run(0.2 * f, f"n{i}", V4, i + 1) for i, f in enumerate(factors)]
    store = str(tmp_path / "h.sqlite")
    assert _history_cli(capsys, "--store", store, "import", str(_storage(tmp_path, runs)))[0] == 0
    code, out = _history_cli(capsys, "--store", store, "changes")
    assert code == 0 and out.splitlines()[-1].startswith("0 change point(s)"), out


def test_runs_lists_each_runs_model_input_size_classes_and_video(tmp_path: Path,
                                                                 capsys: pytest.CaptureFixture[str]) -> None:
    store = str(tmp_path / "h.sqlite")
    assert _history_cli(capsys, "--store", store, "import", str(_v4_then_v3(tmp_path)))[0] == 0
    code, out = _history_cli(capsys, "--store", store, "runs")
    lines = out.splitlines()
    assert code == 0 and len(lines) == 8
    assert "yolov4-tiny-3cls.cfg 320x320, 3 classes, clip.mp4 (all frames)" in lines[0]
    assert "yolov3-tiny-3cls.cfg 320x320, 3 classes, clip.mp4 (all frames)" in lines[-1]


def test_the_report_draws_only_the_newest_runs_model_and_names_the_others(tmp_path: Path) -> None:
    inputs = load_inputs(_v4_then_v3(tmp_path), None)
    points = history(inputs, BENCH)
    assert [p.run.run_id for p in points] == ["v3-0", "v3-1", "v3-2"]  # never on the yolov4 runs' line
    assert all(p.mark is None and p.level is None for p in points)
    (warning,) = [w for w in inputs.warnings if "another model" in w]
    assert warning.startswith("5 saved run(s) of another model, video or machine are not in this report")
    assert "yolov4-tiny-3cls.cfg 320x320" in warning and "this report is of yolov3-tiny-3cls.cfg" in warning
    assert inputs.subject["model"].startswith("yolov3-tiny-3cls.cfg (cfg sha256 3333333333333333")
    assert inputs.subject["classes"] == "3: car, person, bike"


def test_perf_compare_without_a_comparable_run_suggests_a_run_number_and_perf_history_comparable(
        tmp_path: Path) -> None:  # fmt: skip
    from tiny_bench import child_env, write_project

    folder = write_project(tmp_path, ["perf.plugin", "perf.fixtures.reporting"])
    run = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-p", "no:randomly",
           "--perf-device=cpu", "--benchmark-storage=storage", "--benchmark-max-time=0.02", "--benchmark-min-rounds=5",
           "--benchmark-warmup=off", "--perf-reports-dir=reports", "--perf-store=none"]  # fmt: skip
    saved = subprocess.run([*run, "--benchmark-autosave"], cwd=folder, env=child_env(), capture_output=True,
                           text=True, timeout=300, check=False)  # fmt: skip
    assert saved.returncode == 0, saved.stdout[-2000:] + saved.stderr
    (path,) = (folder / "storage").glob("*/0001_*.json")
    document = json.loads(path.read_text())  # the saved run, as if it had measured another model
    document["machine_info"]["perf_subject"] = {**document["machine_info"]["perf_subject"], **V3}
    path.write_text(json.dumps(document))
    refused = subprocess.run([*run, "--perf-compare"], cwd=folder, env=child_env(), capture_output=True, text=True,
                             timeout=300, check=False)  # fmt: skip
    assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stdout[-2000:]
    assert "model: saved 'yolov3-tiny-3cls.cfg'" in refused.stderr
    assert "there is no latest comparable run" in refused.stderr
    assert "--perf-compare=NUM" in refused.stderr and "perf-history comparable RUN" in refused.stderr
