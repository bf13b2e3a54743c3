"""The suite on a user's own model and video (perf.subject): a 320-pixel, 3-class Darknet cfg with weights written
here, a video with its COCO ground truth beside it, the same model as an ONNX file; the identity every saved run
records and the comparisons it refuses. Real pytest processes on the CPU."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from perf.subject import Subject, subject_differences

ROOT = Path(__file__).resolve().parents[2]
FAST = ("-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist", "--rootdir", str(ROOT), "--perf-device=cpu",
        "--perf-batch-sizes=1", "--perf-precisions=fp32", "--benchmark-max-time=0.02", "--benchmark-min-rounds=3",
        "-k", "not multistream and not pipelined and not harness", "-rs")  # fmt: skip


def _pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    return subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "perf"), *FAST, "--perf-cache-dir=cache",
                           "--perf-reports-dir=reports", "--benchmark-storage=file://storage", *args], cwd=folder,
                          env=env, capture_output=True, text=True, timeout=600)  # fmt: skip


def write_model(packaged: Path, classes: int) -> tuple[Path, Path]:
    """``packaged`` (the packaged cfg at some size, from the packaged_cfg fixture) with ``classes`` classes (head
    convs resized) as ``model<size>.cfg`` beside it, its seeded random weights and a classes.names; returns
    (cfg, weights)."""
    from detector.darknet import parse_cfg
    from detector.model import random_weights_file

    size, _ = parse_cfg(packaged).input_size
    text = re.sub(r"^classes=\d+", f"classes={classes}", packaged.read_text(encoding="utf-8"), flags=re.MULTILINE)
    heads = text.split("[yolo]")
    heads[:-1] = [re.sub(r"filters=\d+(?![\s\S]*filters=)", f"filters={3 * (classes + 5)}", h) for h in heads[:-1]]
    cfg = packaged.with_name(f"model{size}.cfg")
    cfg.write_text("[yolo]".join(heads), encoding="utf-8")
    assert parse_cfg(cfg).input_size == (size, size) and parse_cfg(cfg).classes == classes
    (cfg.parent / "classes.names").write_text("".join(f"kind{i}\n" for i in range(classes)), encoding="utf-8")
    return cfg, random_weights_file(cfg, cfg.with_suffix(".weights"), seed=3)


@pytest.fixture(scope="module")
def user(tmp_path_factory: pytest.TempPathFactory, packaged_cfg: Callable[[Path, int], Path]) -> Path:
    """A folder holding the user's model (cfg, weights, names, ONNX export) and a video with its ground truth."""
    from detector.cli import main

    folder = tmp_path_factory.mktemp("user")
    cfg, weights = write_model(packaged_cfg(folder, 320), classes=3)
    assert main(["make-video", "--out", str(folder / "clip.mp4"), "--frames", "8", "--width", "320", "--height",
                 "180"]) == 0  # fmt: skip
    assert main(["export-onnx", "--cfg", str(cfg), "--weights", str(weights), "--out", str(folder / "model.onnx")]) == 0
    return folder


def _saved_identity(folder: Path) -> dict:
    (run,) = sorted((folder / "storage").glob("*/*.json"))[-1:]
    return json.loads(run.read_text())["machine_info"]["perf_subject"]


def test_a_darknet_model_and_labelled_video_given_as_options_are_what_the_suite_measures(user: Path) -> None:
    result = _pytest(user, "--perf-cfg=model320.cfg", "--perf-weights=model320.weights", "--perf-video=clip.mp4",
                     "--benchmark-autosave")  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    for test in ("test_inference_speed[torch-fp32-b1]", "test_inference_speed[onnxruntime-fp32-b1]",
                 "test_end_to_end[torch-fp32]", "test_end_to_end[onnxruntime-fp32]"):  # fmt: skip
        assert test in result.stdout
    assert "mAP@0.5 0.000 reported, not checked: no --perf-min-map for this model" in result.stdout
    report = (user / "reports" / "perf-report.md").read_text()
    assert "| torch fp32 (reference) |" in report and "| onnxruntime fp32 | pass |" in report
    identity = _saved_identity(user)
    assert identity["input_size"] == "320x320" and identity["classes"] == 3 and identity["model"] == "model320.cfg"
    assert identity["video"] == "clip.mp4" and identity["frames"] == "all" and identity["ground_truth_sha256"]


def test_ini_settings_pin_the_model_relative_to_the_ini_file(user: Path) -> None:
    (user / "sub").mkdir(exist_ok=True)
    # -o sets ini values: relative paths are read from the ini file's folder (here the rootdir), not the cwd
    result = _pytest(user / "sub", f"-o=perf_cfg={user / 'model320.cfg'}", f"-o=perf_video={user / 'clip.mp4'}",
                     "-o=perf_min_map=0.9", "-k", "reference_accuracy")  # fmt: skip
    assert result.returncode == 1, result.stdout[-3000:]
    assert "reference mAP@0.5 0.000 < 0.9" in result.stdout  # the floor from the ini, on the user's ground truth
    missing = _pytest(user, "-o=perf_cfg=nowhere.cfg")
    assert missing.returncode == pytest.ExitCode.USAGE_ERROR
    assert f"perf_cfg (ini): cannot open '{ROOT / 'nowhere.cfg'}': no such file" in missing.stderr


def test_an_onnx_file_alone_is_the_model_and_onnxruntime_its_reference(user: Path) -> None:
    result = _pytest(user, "--perf-onnx=model.onnx", "--perf-video=clip.mp4")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert "the model is the ONNX file" in result.stdout and "the torch backends run a Darknet cfg" in result.stdout
    report = (user / "reports" / "perf-report.md").read_text()
    assert "| onnxruntime fp32 (reference) |" in report
    assert re.search(r"test_end_to_end\[onnxruntime-fp32\]\s", result.stdout)


def test_a_compare_across_models_is_refused_naming_what_differs(
    user: Path, packaged_cfg: Callable[[Path, int], Path]
) -> None:
    write_model(packaged_cfg(user / "other", 416), classes=2)
    args = ("--perf-cfg=other/model416.cfg", "--perf-video=clip.mp4", "-k", "inference_speed and torch")
    baseline = _pytest(user, "--perf-cfg=model320.cfg", "--perf-video=clip.mp4", "-k", "inference_speed and torch",
                       "--benchmark-save=m320")  # fmt: skip
    assert baseline.returncode == 0, baseline.stdout[-2000:]
    for option in ("--perf-compare", "--benchmark-compare"):  # the latest saved run: the 320-pixel model
        refused = _pytest(user, *args, option)
        assert refused.returncode == pytest.ExitCode.USAGE_ERROR, refused.stdout[-2000:]
        assert "measured another model or video" in refused.stderr
        assert "input_size: saved '320x320', current '416x416'" in refused.stderr
        assert "classes: saved 3, current 2" in refused.stderr and "model: saved 'model320.cfg'" in refused.stderr
    allowed = _pytest(user, *args, "--perf-compare", "--perf-allow-model-mismatch")
    assert allowed.returncode == 0, allowed.stdout[-2000:]
    assert "Comparing anyway (--perf-allow-model-mismatch)" in allowed.stdout + allowed.stderr


@pytest.mark.parametrize(
    ("settings", "message"),
    [({"weights": "w.weights"}, "weights need the Darknet cfg they belong to"),
     ({"engine": "e.engine"}, "a prebuilt engine needs the model it was built from"),
     ({"engine_precision": "fp8"}, "'fp8'; expected one of fp32, fp16, int8"),
     ({"min_map": "1.5"}, "'1.5'; expected a number from 0 to 1"),
     ({"cfg": "bad.cfg"}, "bad.cfg:2: unknown key 'widht' in [net]"),
     ({"onnx": "e.engine"}, "--perf-onnx: cannot load ONNX model"),
     ({"video": "nowhere.mp4"}, "--perf-video: cannot open")],
)
def test_settings_that_cannot_work_are_one_line_each(tmp_path: Path, settings: dict, message: str) -> None:
    for name in ("w.weights", "e.engine"):
        (tmp_path / name).write_bytes(b"x")
    (tmp_path / "bad.cfg").write_text("[net]\nwidht=416\n")
    subject = Subject.from_config(lambda name: settings.get(name[len("perf_"):]), lambda name: None, tmp_path,
                                  tmp_path)  # fmt: skip
    problems = subject.problems()
    assert len(problems) == 1 and message in problems[0] and "\n" not in problems[0]


def test_identities_differ_only_on_what_makes_figures_incomparable() -> None:
    saved = {"model": "a.cfg", "input_size": "416x416", "classes": 2, "frames": 300, "precisions": ["fp32"]}
    assert subject_differences(saved, {**saved, "precisions": ["fp16"]}) == []
    assert subject_differences(saved, {**saved, "frames": 60}) == [("frames", 300, 60)]
    assert subject_differences(None, saved) == []  # a run saved before identities: compared, with a warning


@pytest.fixture(scope="module")
def user_run(user: Path) -> Path:
    """One saved run of the user's 320x320 3-class model (torch inference), its report in ``reports-run/`` and its
    storage in ``storage-run/``."""
    result = _pytest(user, "--perf-cfg=model320.cfg", "--perf-weights=model320.weights", "--perf-video=clip.mp4",
                     "-k", "inference_speed and torch", "--perf-reports-dir=reports-run",
                     "--benchmark-storage=file://storage-run", "--benchmark-autosave", "--perf-store=none")  # fmt: skip
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    return user


def test_the_report_of_a_user_model_names_its_model_input_size_and_classes(user_run: Path) -> None:
    markdown = (user_run / "reports-run" / "perf-report.md").read_text()
    subject = markdown.split("### Inference")[0]
    assert subject.startswith("### Subject") and "- model: model320.cfg (cfg sha256 " in subject
    assert "- input size: 320x320 px" in subject and "- classes: 3: kind0, kind1, kind2" in subject
    assert "- video: clip.mp4 (sha256 " in subject and "all frames" in subject
    assert "- backends: torch, onnxruntime, tensorrt" in subject and "- device: cpu" in subject and "- machine: " in subject
    saved = json.loads((user_run / "reports-run" / "perf-report.json").read_text())["subject"]
    assert saved["input size"] == "320x320 px" and saved["classes"] == "3: kind0, kind1, kind2"


def test_the_html_report_and_the_verdict_files_of_a_user_model_name_it(user_run: Path, tmp_path: Path) -> None:
    import shutil

    from perf.report_cli import main as report_main
    from perf.store.cli import main as history_main

    (run,) = sorted((user_run / "storage-run").glob("*/0001_*.json"))
    storage = tmp_path / "storage" / run.parent.name
    storage.mkdir(parents=True)
    shutil.copy(run, storage / run.name)
    again = json.loads(run.read_text())  # the same run once more: a history of one to judge it against
    again["perf_run"]["run_id"] = "second-process"
    (storage / run.name.replace("0001_", "0002_")).write_text(json.dumps(again))
    assert report_main(["--storage", str(tmp_path / "storage"), "--reports", str(user_run / "reports-run"),
                        "--out", str(tmp_path / "html")]) == 0  # fmt: skip
    page = (tmp_path / "html" / "index.html").read_text()
    assert "<title>Performance report: model320.cfg 320x320</title>" in page
    assert "<li>classes: 3: kind0, kind1, kind2</li>" in page and "<li>input size: 320x320 px</li>" in page
    assert "- model: model320.cfg (cfg sha256 " in (tmp_path / "html" / "summary.md").read_text()
    history_main(["--store", str(tmp_path / "unused.sqlite"), "judge", "--storage", str(tmp_path / "storage"), "--out",
                  str(tmp_path / "v")])
    verdicts = json.loads((tmp_path / "v" / "perf-compare.json").read_text())
    assert verdicts["subject"]["model"].startswith("model320.cfg") and verdicts["subject"]["input size"] == "320x320 px"
    assert "- classes: 3: kind0, kind1, kind2" in (tmp_path / "v" / "perf-compare.md").read_text()


def test_saved_params_are_json_that_pytest_benchmark_compare_prints_as_fields(user_run: Path) -> None:
    (run,) = sorted((user_run / "storage-run").glob("*/0001_*.json"))
    saved = json.loads(run.read_text())["benchmarks"]
    assert "UNSERIALIZABLE" not in run.read_text()
    case = next(b for b in saved if b["name"] == "test_inference_speed[torch-fp32-b1]")["params"]["case"]
    assert case == {"id": "torch-fp32-b1", "variant": "torch", "backend": "torch", "precision": "fp32", "batch": 1,
                    "options": {}, "source": "mp4v"}  # fmt: skip
    csv = run.parent / "compare.csv"
    result = subprocess.run([sys.executable, "-c", "from pytest_benchmark.cli import main; main()", "compare",
                             str(run), f"--csv={csv.with_suffix('')}"], capture_output=True, text=True, timeout=120,
                            check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "UNSERIALIZABLE" not in csv.read_text() and "'precision': 'fp32'" in csv.read_text()
