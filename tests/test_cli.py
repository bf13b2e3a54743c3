"""The ``detector`` CLI end to end on a short synthetic video, and its one-line errors for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from detector.cli import main
from detector.video import open_video

WIDTH, HEIGHT, FRAMES = 320, 180, 12


@pytest.fixture(scope="module")
def short_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("video") / "clip.mp4"
    assert main(["make-video", "--out", str(path), "--width", str(WIDTH), "--height", str(HEIGHT),
                 "--frames", str(FRAMES), "--seed", "3"]) == 0
    return path


@pytest.fixture
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.getbasetemp() / "cache")


def test_make_video_writes_the_video_and_its_ground_truth(short_video: Path) -> None:
    gt = json.loads(short_video.with_suffix(".json").read_text())
    assert len(gt["images"]) == FRAMES
    with open_video(short_video) as reader:
        assert (reader.width, reader.height) == (WIDTH, HEIGHT)


@pytest.mark.parametrize("backend", ["torch", "onnxruntime"])
def test_detect_writes_a_readable_video_and_prints_the_lab_table(
    backend: str, short_video: Path, tmp_path: Path, cache: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["detect", "--backend", backend, "--video", str(short_video), "--out", str(out),
                 "--device", "cpu", "--cache-dir", cache]) == 0
    printed = capsys.readouterr().out
    assert "| Model Type | Model Input Size | Inference Speed (FPS) | End-to-end speed (FPS) |" in printed
    detected = out / f"clip-{backend}-detected.mp4"
    with open_video(detected) as reader:
        frames = list(reader)
        assert (reader.width, reader.height) == (WIDTH, HEIGHT)
    assert len(frames) == FRAMES
    results = json.loads((out / "detect-results.json").read_text())
    assert results["runs"][0]["frames"] == FRAMES and results["table"][0]["e2e_fps"] > 0
    assert not [p for p in out.iterdir() if ".tmp" in p.name]


def _bad_inputs(tmp: Path, short_video: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (detect arguments, a piece of the expected message)."""
    text = tmp / "notes.mp4"
    text.write_text("not a video\n")
    noise = tmp / "noise.mp4"
    noise.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    empty = tmp / "empty.mp4"
    empty.write_bytes(b"")
    zero = tmp / "zero.avi"
    import cv2

    writer = cv2.VideoWriter(str(zero), cv2.VideoWriter_fourcc(*"MJPG"), 30, (64, 64))
    writer.release()
    blocker = tmp / "a-file"
    blocker.write_text("x")
    cfg = (Path(__file__).resolve().parents[1] / "detector" / "data" / "yolov4-tiny.cfg").read_text()
    bad_cfg = tmp / "bad.cfg"
    bad_cfg.write_text(cfg.replace("filters=21", "filters=255", 1))
    truncated = tmp / "truncated.weights"
    truncated.write_bytes(b"\x00" * 20 + b"\x01" * 1000)
    video = ["--video", str(short_video)]
    return {
        "missing video": (["--video", str(tmp / "nope.mp4")], "no such file"),
        "text file": (["--video", str(text)], str(text)),
        "random bytes": (["--video", str(noise)], str(noise)),
        "empty file": (["--video", str(empty)], "empty"),
        "zero frames": (["--video", str(zero)], str(zero)),
        "unwritable output": ([*video, "--out", str(blocker / "sub")], str(blocker)),
        "wrong cfg filters": ([*video, "--cfg", str(bad_cfg)], "bad.cfg"),
        "truncated weights": ([*video, "--weights", str(truncated)], "truncated.weights"),
        "unknown backend": ([*video, "--backend", "tensorflow"], "unknown backend 'tensorflow'"),
        "unknown precision": ([*video, "--precision", "fp8"], "fp8"),
    }


@pytest.mark.parametrize("case", [
    "missing video", "text file", "random bytes", "empty file", "zero frames", "unwritable output",
    "wrong cfg filters", "truncated weights", "unknown backend", "unknown precision",
])  # fmt: skip
def test_bad_input_is_one_line_exit_2_and_no_partial_output(
    case: str, short_video: Path, tmp_path: Path, cache: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args, expected = _bad_inputs(tmp_path, short_video)[case]
    out = tmp_path / "out"
    if "--out" not in args:
        args = [*args, "--out", str(out)]
    assert main(["detect", "--device", "cpu", "--cache-dir", cache, *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("detector: error:"), err
    assert expected in err[0]
    assert "Traceback" not in err[0]
    assert not out.exists() or not any(out.iterdir())
