"""Every model and video setting of ``pytest perf`` is checked at start-up, before any test runs (perf.subject): a
setting that cannot work is one line and exit status 4; ground-truth categories unlike the model's class names are
one warning. Real files: a 3-class cfg at 128 pixels with weights, names, a tiny ONNX file, video and ground truth."""

from __future__ import annotations

import json
import os
import re
import struct
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from perf.subject import Subject

ROOT = Path(__file__).resolve().parents[2]


def _write_model(packaged: Path, classes: int) -> tuple[Path, Path]:
    """The packaged cfg at ``packaged`` with ``classes`` classes (head convs resized) as ``c<classes>.cfg`` beside
    it, and its seeded random weights; returns (cfg, weights)."""
    from detector.model import random_weights_file

    text = re.sub(r"^classes=\d+", f"classes={classes}", packaged.read_text(encoding="utf-8"), flags=re.MULTILINE)
    heads = text.split("[yolo]")
    heads[:-1] = [re.sub(r"filters=\d+(?![\s\S]*filters=)", f"filters={3 * (classes + 5)}", h) for h in heads[:-1]]
    cfg = packaged.with_name(f"c{classes}.cfg")
    cfg.write_text("[yolo]".join(heads), encoding="utf-8")
    return cfg, random_weights_file(cfg, cfg.with_suffix(".weights"), seed=3)


def _write_onnx(path: Path, size: int, classes: int) -> Path:
    """A valid ONNX model taking [1, 3, size, size] and giving [1, N, 4 + classes] (a reshape)."""
    import onnx
    from onnx import TensorProto, helper

    columns = 4 + classes
    rows = 3 * size * size // columns
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [1, rows, columns])
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["images", "shape"], ["decoded"])], "tiny",
        [helper.make_tensor_value_info("images", TensorProto.FLOAT, [1, 3, size, size])],
        [helper.make_tensor_value_info("decoded", TensorProto.FLOAT, [1, rows, columns])], [shape])  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory, packaged_cfg: Callable[[Path, int], Path]) -> Path:
    """A folder: ``c3.cfg`` / ``c3.weights`` (3 classes, 128 pixels), ``c2.weights`` (the 2-class model's),
    ``classes.names`` (car, person, bike), a 3-frame clip with its ground truth (1 person, 2 vehicle)."""
    from detector.synthetic import make_synthetic_video

    folder = tmp_path_factory.mktemp("start-up")
    packaged = packaged_cfg(folder, 128)
    _write_model(packaged, classes=2)
    _write_model(packaged, classes=3)
    (folder / "classes.names").write_text("car\nperson\nbike\n", encoding="utf-8")
    make_synthetic_video(folder / "clip.mp4", seed=1, width=96, height=64, frames=3)
    return folder


def _pytest_perf(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    return subprocess.run([sys.executable, "-m", "pytest", str(ROOT / "perf"), "-p", "no:cacheprovider", "-p",
                           "no:randomly", "--rootdir", str(ROOT), "--perf-device=cpu", "--perf-cache-dir=cache",
                           "--perf-reports-dir=reports", *args], cwd=folder, env=env, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip


def test_weights_of_another_cfg_stop_the_run_in_one_line_with_exit_status_4(files: Path) -> None:
    result = _pytest_perf(files, "--perf-cfg=c3.cfg", "--perf-weights=c2.weights", "-k", "inference_speed")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout[-3000:] + result.stderr[-3000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"ERROR: --perf-weights: {files / 'c2.weights'}: truncated: file has ")
    assert "cfg 'c3.cfg' needs" in lines[0] and "wrong cfg for these weights" in lines[0]
    assert result.stdout.strip() == ""  # no test ran, nothing partial
    assert not (files / "reports").exists()


def _subject(folder: Path, **settings: str) -> Subject:
    return Subject.from_config(lambda name: settings.get(name[len("perf_"):]), lambda name: None, folder, folder)


#: settings -> the one line they must give (a regular expression matched at its start)
BAD_FILES = {
    "truncated-weights": ({"cfg": "c3.cfg", "weights": "short.weights"}, (
        r"--perf-weights: .*short\.weights: truncated: file has \d+ bytes, cfg 'c3\.cfg' needs \d+: wrong cfg for "
        r"these weights, or an incomplete file\?")),
    "trailing-bytes": ({"cfg": "c3.cfg", "weights": "long.weights"}, (
        r"--perf-weights: .*long\.weights: 8 trailing bytes after the last layer at offset \d+; cfg 'c3\.cfg' needs "
        r"exactly \d+ bytes: wrong cfg for these weights\?")),
    "nan-weights": ({"cfg": "c3.cfg", "weights": "nan.weights"}, (
        r"--perf-weights: .*nan\.weights: conv #0 \(layer 0\) holds NaN at byte offset 20 \(1 of its \d+ values are "
        r"not finite\)")),
    "names": ({"cfg": "c3.cfg", "names": "two.names"},
              r"--perf-names: .*two\.names: 2 names for the 3 classes of '.*c3\.cfg'"),
    "onnx-of-another-model": ({"cfg": "c3.cfg", "onnx": "c2-128.onnx"},
                              r"--perf-onnx: ONNX model '.*c2-128\.onnx' outputs \[1, \d+, 6\]; cfg '.*c3\.cfg' has 3"),
    "text-as-video": ({"video": "notes.mp4"},
                      r"--perf-video: cannot open '.*notes\.mp4': it is a text file, not a video"),
    "ground-truth": ({"video": "clip.mp4", "ground_truth": "broken.json"},
                     r"--perf-ground-truth: ground truth '.*broken\.json': not valid JSON at line 1 column 2"),
}


@pytest.mark.parametrize("case", BAD_FILES)
def test_every_model_and_video_file_is_checked_at_start_up_in_one_line(files: Path, case: str) -> None:
    settings, message = BAD_FILES[case]
    weights = (files / "c3.weights").read_bytes()
    (files / "short.weights").write_bytes(weights[:-100])
    (files / "long.weights").write_bytes(weights + bytes(8))
    (files / "nan.weights").write_bytes(weights[:20] + struct.pack("<f", float("nan")) + weights[24:])  # a bias
    (files / "two.names").write_text("a\nb\n", encoding="utf-8")
    (files / "notes.mp4").write_text("not a video\n", encoding="utf-8")
    (files / "broken.json").write_text("{,}", encoding="utf-8")
    _write_onnx(files / "c2-128.onnx", size=128, classes=2)
    problems = _subject(files, **settings).problems()
    assert len(problems) == 1 and "\n" not in problems[0], problems
    assert re.match(message, problems[0]), problems[0]


def test_a_ground_truth_without_its_video_is_refused_not_ignored(files: Path) -> None:
    assert _subject(files, ground_truth="clip.json").problems() == [
        "--perf-ground-truth: a ground truth labels the video it belongs to: give --perf-video"]
    result = _pytest_perf(files, "-o", f"perf_ground_truth={files / 'clip.json'}", "--collect-only", "-q")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        "ERROR: perf_ground_truth (ini): a ground truth labels the video it belongs to: give --perf-video"]


def test_an_engine_precision_without_its_engine_is_refused_not_ignored(files: Path) -> None:
    (files / "prebuilt.engine").write_bytes(b"not checked before TensorRT loads it")
    assert _subject(files, cfg="c3.cfg", engine="prebuilt.engine", engine_precision="int8").problems() == []
    result = _pytest_perf(files, "--perf-engine-precision=int8", "--collect-only", "-q")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [
        "ERROR: --perf-engine-precision: the precision a prebuilt engine was built as, and no engine is given: give "
        "--perf-engine"]


def test_ground_truth_categories_unlike_the_class_names_are_one_warning_naming_both(files: Path) -> None:
    result = _pytest_perf(files, "--perf-cfg=c3.cfg", "--perf-video=clip.mp4", "--collect-only", "-q")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (warning,) = [line for line in result.stdout.splitlines() if "SubjectWarning: " in line]
    assert f"--perf-video (its ground truth): ground truth '{files / 'clip.json'}': its 2 categories (1='person', " \
           "2='vehicle') do not match the model's 3 classes (1='car', 2='person', 3='bike'" in warning
    assert "(--perf-names); the accuracy figures score category id k + 1 as class k" in warning
    labels = json.loads((files / "clip.json").read_text())
    labels["categories"] = [{"id": 1, "name": "car"}, {"id": 2, "name": "person"}, {"id": 3, "name": "bike"}]
    (files / "matching.json").write_text(json.dumps(labels), encoding="utf-8")
    assert _subject(files, cfg="c3.cfg", video="clip.mp4", ground_truth="matching.json").warnings() == []


def _unreadable(folder: Path) -> dict[str, tuple[dict[str, str], str]]:
    """name -> (settings, the exact start-up line): files that once stopped the suite with an INTERNALERROR."""
    (folder / "latin1.names").write_bytes("car\npersonne\nv\u00e9lo\n".encode("latin-1"))  # 0xe9 at byte 14
    for name in ("loop.mp4", "loop.cfg", "loop"):
        if not (folder / name).is_symlink():
            (folder / name).symlink_to(name)  # a link to itself
    labels = json.loads((folder / "clip.json").read_text())
    labels["annotations"][0]["area"] = "big"
    (folder / "area.json").write_text(json.dumps(labels), encoding="utf-8")
    (folder / "empty.engine").write_bytes(b"")
    for name in ("fifo.names", "fifo.json"):
        if not (folder / name).exists():
            os.mkfifo(folder / name)
    loop = "a symbolic link loop (too many levels of symbolic links)"
    first = labels["annotations"][0]["id"]
    return {
        "names-not-utf8": ({"cfg": "c3.cfg", "names": "latin1.names"}, (
            f"--perf-names: cannot read class names '{folder / 'latin1.names'}': not UTF-8 text (byte 14: 0xe9); save "
            "it as UTF-8")),
        "video-symlink-loop": ({"video": "loop.mp4"}, f"--perf-video: cannot open '{folder / 'loop.mp4'}': {loop}"),
        "cfg-symlink-loop": ({"cfg": "loop.cfg"}, f"--perf-cfg: cannot open '{folder / 'loop.cfg'}': {loop}"),
        "ground-truth-area-not-a-number": ({"video": "clip.mp4", "ground_truth": "area.json"}, (
            f"--perf-ground-truth: ground truth '{folder / 'area.json'}': annotation 0 (id {first}): area 'big': "
            "expected a finite number")),
        "names-fifo": ({"cfg": "c3.cfg", "names": "fifo.names"}, (
            f"--perf-names: cannot open '{folder / 'fifo.names'}': it is a FIFO (named pipe), not a regular file")),
        "ground-truth-fifo": ({"video": "clip.mp4", "ground_truth": "fifo.json"}, (
            f"--perf-ground-truth: cannot open '{folder / 'fifo.json'}': it is a FIFO (named pipe), not a regular "
            "file")),
        "engine-empty": ({"cfg": "c3.cfg", "engine": "empty.engine"}, (
            f"--perf-engine: cannot read TensorRT engine '{folder / 'empty.engine'}': the file is empty (0 bytes)")),
        "video-folder": ({"video": "."},
                         f"--perf-video: cannot open '{folder}': it is a directory, not a regular file"),
    }


@pytest.mark.parametrize("case", ["names-not-utf8", "video-symlink-loop", "cfg-symlink-loop",
                                  "ground-truth-area-not-a-number", "names-fifo", "ground-truth-fifo", "video-folder",
                                  "engine-empty"])
def test_a_file_that_cannot_be_read_is_one_exact_start_up_problem(files: Path, case: str) -> None:
    settings, line = _unreadable(files)[case]
    assert _subject(files, **settings).problems() == [line]


@pytest.mark.parametrize("case", ["names-not-utf8", "video-symlink-loop", "cfg-symlink-loop", "cache-dir-symlink-loop",
                                  "names-fifo", "engine-empty"])
def test_a_file_that_cannot_be_read_stops_collection_in_one_line_with_exit_status_4(files: Path, case: str) -> None:
    unreadable = _unreadable(files)
    if case == "cache-dir-symlink-loop":
        options = ["--perf-cache-dir=loop"]
        line = (f"--perf-cache-dir: cannot use '{files / 'loop'}': a symbolic link loop (too many levels of symbolic "
                "links)")
    else:
        settings, line = unreadable[case]
        options = [f"--perf-{key.replace('_', '-')}={value}" for key, value in settings.items()]
    result = _pytest_perf(files, *options, "--collect-only", "-q")
    assert result.returncode == pytest.ExitCode.USAGE_ERROR, result.stdout[-3000:] + result.stderr[-3000:]
    assert result.stderr.strip().splitlines() == [f"ERROR: {line}"]
    assert "INTERNALERROR" not in result.stdout + result.stderr
