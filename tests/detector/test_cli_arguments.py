"""What ``detector`` does with its arguments: ``--out`` as a folder or one video, names in any case, errors that
name what was given and what this machine allows, plain help text listing every command, and every argument
checked before torch, OpenCV or ONNX Runtime loads."""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.backends import available_backends, backend, backend_names
from detector.choices import check_names
from detector.cli import build_parser, main
from detector.synthetic import make_synthetic_video
from detector.video import open_video

REPO = Path(__file__).resolve().parents[2]
CFG = REPO / "detector" / "data" / "yolov4-tiny.cfg"
FRAMES = 3
no_cuda_here = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the message of a machine without CUDA")


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_synthetic_video(tmp_path_factory.mktemp("clip") / "clip.mp4", width=96, height=64, frames=FRAMES,
                                seed=2).video


@pytest.fixture
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.getbasetemp() / "cache")


def _error_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line the command printed on stderr."""
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("detector: error: "), err
    return err[0]


# -- --out: a folder, or the one detected video ---------------------------------------------------------------


def test_out_with_a_video_suffix_is_the_detected_video_with_its_results_beside_it(
    clip: Path, tmp_path: Path, cache: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs" / "result.mp4"
    assert main(["detect", "--video", str(clip), "--out", str(out), "--device", "cpu", "--cache-dir", cache]) == 0
    with open_video(out) as reader:
        assert len(list(reader)) == FRAMES
    results = json.loads((tmp_path / "runs" / "result-detect-results.json").read_text())
    assert results["runs"][0]["output"] == str(out)
    assert sorted(p.name for p in out.parent.iterdir()) == ["result-detect-results.json", "result.mp4"]
    assert f"wrote {out} ({FRAMES} frames)" in capsys.readouterr().out


def test_an_existing_folder_named_like_a_video_stays_a_folder(clip: Path, tmp_path: Path, cache: str) -> None:
    out = tmp_path / "old.mp4"
    out.mkdir()
    assert main(["detect", "--video", str(clip), "--out", str(out), "--device", "cpu", "--cache-dir", cache,
                 "--frames", "1"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["clip-torch-detected.mp4", "detect-results.json"]


def test_a_video_out_with_several_backends_is_one_line_naming_the_value_and_what_to_do(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "result.mp4"
    assert main(["detect", "--backend", "torch,onnxruntime", "--out", str(out), "--device", "cpu"]) == 2
    assert _error_line(capsys) == (
        f"detector: error: --out '{out}' names one video file, but --backend torch,onnxruntime writes 2 videos; "
        "give a folder for --out (one video per backend goes in it) or one backend")
    assert not any(tmp_path.iterdir())


def test_a_video_out_naming_the_input_video_is_refused(clip: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = clip.read_bytes()
    assert main(["detect", "--video", str(clip), "--out", str(clip), "--device", "cpu"]) == 2
    assert "is the input video itself" in _error_line(capsys)
    assert clip.read_bytes() == before


# -- errors name what was given and what runs here ----------------------------------------------------------------


def test_a_cuda_only_backend_on_the_cpu_names_the_backends_for_the_cpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detect", "--backend", "tensorrt", "--device", "cpu"]) == 2
    for_cpu = ", ".join(b for b in backend_names() if "cpu" in backend(b).devices)
    assert _error_line(capsys) == ("detector: error: --backend tensorrt runs on cuda only, not on --device cpu "
                                   f"(backends for cpu: {for_cpu})")


@no_cuda_here
def test_a_cuda_only_backend_without_a_cuda_device_says_so_and_lists_the_backends_that_run_here(
    capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["detect", "--backend", "tensorrt"]) == 2
    run_here = ", ".join(name for name, reason in available_backends("cpu").items() if reason is None)
    line = _error_line(capsys)
    assert line == ("detector: error: --backend tensorrt needs a CUDA device; this machine has none (backends that "
                    f"run here: {run_here})")
    assert "unknown device" not in line


@pytest.mark.parametrize(("device", "message"), [
    ("cpu", "unsupported precision 'int8' for --backend torch on cpu; allowed there: fp32"),
    ("auto", "unsupported precision 'int8' for --backend torch; allowed: fp32 on cpu; fp32, fp16 on cuda"),
])  # fmt: skip
def test_an_unsupported_precision_names_what_the_backend_allows_on_the_device(
    device: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["detect", "--backend", "torch", "--precision", "int8", "--device", device]) == 2
    assert _error_line(capsys) == f"detector: error: {message}"


@no_cuda_here
def test_fp16_without_a_cuda_device_names_what_the_cpu_allows(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["detect", "--precision", "fp16"]) == 2
    assert _error_line(capsys) == ("detector: error: --precision fp16 with --backend torch needs a CUDA device; this "
                                   "machine has none (allowed on cpu: fp32)")


def test_onnx_with_cfg_warns_of_random_weights_only_for_the_backends_that_run_them(
    clip: Path, tmp_path: Path, cache: str, caplog: pytest.LogCaptureFixture
) -> None:
    model = tmp_path / "model.onnx"
    assert main(["export-onnx", "--out", str(model), "--cache-dir", cache]) == 0
    common = ["--onnx", str(model), "--cfg", str(CFG), "--video", str(clip), "--device", "cpu", "--cache-dir", cache,
              "--frames", "1"]
    with caplog.at_level(logging.WARNING, logger="detector"):
        assert main(["detect", "--backend", "onnxruntime", "--out", str(tmp_path / "a"), *common]) == 0
        assert not [r for r in caplog.records if "random weights" in r.getMessage()]
        assert main(["detect", "--backend", "torch,onnxruntime", "--out", str(tmp_path / "b"), *common]) == 0
    warned = [r.getMessage() for r in caplog.records if "random weights" in r.getMessage()]
    assert warned == [f"no --weights given with --cfg {CFG}: torch runs seeded random weights (seed 0)"]


# -- --skip-interval: DeepStream's interval -----------------------------------------------------------------------


def test_skip_interval_is_passed_to_the_pipeline_and_recorded_in_the_results(
    clip: Path, tmp_path: Path, cache: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    assert main(["detect", "--video", str(clip), "--out", str(out), "--device", "cpu", "--cache-dir", cache,
                 "--skip-interval", "2"]) == 0
    run = json.loads((out / "detect-results.json").read_text())["runs"][0]
    assert (run["frames"], run["skip_interval"], run["inferred_frames"]) == (FRAMES, 2, 1)  # frame 0 of 0, 1, 2
    assert "| PyTorch fp32 (cpu, batch 1, interval 2) |" in capsys.readouterr().out
    assert build_parser().parse_args(["detect"]).skip_interval == 0


@pytest.mark.parametrize("value", ["-1", "x", "1.5"])
def test_a_bad_skip_interval_is_argparses_one_line_error_and_exit_2(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["detect", "--skip-interval", value])
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip().splitlines() == [
        f"detector detect: error: argument --skip-interval: Could not parse value: {value!r} (expected an integer "
        ">= 0). (see 'detector detect --help')"]


# -- help, names in any case ------------------------------------------------------------------------------------


def _commands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    return next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices


@pytest.mark.parametrize("entry", ["detector", "python3 -m detector.train"])
def test_help_is_plain_text_and_names_every_command(entry: str) -> None:
    from detector.train.__main__ import build_parser as build_train_parser

    parser = build_parser() if entry == "detector" else build_train_parser()
    commands = _commands(parser)
    top = " ".join(parser.format_help().split())
    assert "``" not in top and ":func:" not in top
    assert all(name in top.partition("positional arguments")[0] for name in commands), top
    for name, command in commands.items():
        assert "``" not in command.format_help(), name
    if entry == "detector":
        assert "anchors" in commands and f"Commands: {', '.join(commands)}." in top


def test_names_are_read_in_any_case() -> None:
    detect = build_parser().parse_args(["detect", "--device", "CUDA:1", "--precision", "FP16", "--resize",
                                        "LetterBox", "--nms", "DIoUNMS"])
    assert (detect.device, detect.precision, detect.resize, detect.nms) == ("cuda:1", "fp16", "letterbox", "diounms")
    train = build_parser().parse_args(["train", "--out", "w.weights", "--amp", "BF16", "--device", "CPU"])
    assert (train.amp, train.device) == ("bf16", "cpu")
    assert check_names(["ONNXRuntime", "Torch"], "CPU", "fp32") == ["onnxruntime", "torch"]


def test_detect_runs_with_names_in_any_case(
    clip: Path, tmp_path: Path, cache: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["detect", "--backend", "ONNXRuntime", "--device", "CPU", "--precision", "FP32", "--video", str(clip),
                 "--out", str(tmp_path / "out"), "--cache-dir", cache, "--frames", "1"]) == 0
    assert "| ONNX Runtime fp32 (cpu, batch 1) |" in capsys.readouterr().out


# -- every argument is checked before anything heavy loads -----------------------------------------------------

PROBE = """
import json, sys
from detector.cli import main
code = main(json.loads(sys.argv[1]))
heavy = ("torch", "cv2", "onnxruntime", "onnx", "tensorrt")
print(json.dumps({"code": code, "loaded": [name for name in heavy if name in sys.modules]}))
"""


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(["detect", "eval", "train"]), st.integers(2**31, 10**40))
def test_a_batch_no_array_can_index_is_a_usage_error(command: str, batch: int) -> None:
    """Past 2^31 - 1 frames (an int32 axis: TensorRT's, and numpy's whole index range with an 8192x8192 input) a
    batch is refused as an argument: numpy's 'Maximum allowed dimension exceeded' was a traceback after the model
    loaded (1000000000 still fits the index: 'not enough memory')."""
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args([command, "--batch", str(batch)])
    assert exit_.value.code == 2


def test_the_largest_batch_is_taken(capsys: pytest.CaptureFixture[str]) -> None:
    assert build_parser().parse_args(["detect", "--batch", str(2**31 - 1)]).batch == 2**31 - 1
    with pytest.raises(SystemExit):
        main(["detect", "--batch", str(2**31)])
    assert capsys.readouterr().err == (f"detector detect: error: argument --batch: Could not parse value: '{2**31}' "
                                       "(expected an integer from 1 to 2147483647). (see 'detector detect --help')\n")


@pytest.mark.parametrize(("option", "value", "allowed"), [
    ("--seed", str(2**64 - 1), "an integer from 0 to 18446744073709551614"),
    ("--seed", "-1", "an integer from 0 to 18446744073709551614"),
    ("--lr", "1e308", "a number > 0, at most 1e37"),
    ("--lr", "inf", "a number > 0, at most 1e37"),
    ("--workers", str(10**12), f"an integer from 0 to {4 * len(os.sched_getaffinity(0))}, 4 per CPU this process may "
     "use"),
])  # fmt: skip
def test_train_past_torchs_seeds_a_float32_step_or_the_cpus_is_a_usage_error(
    option: str, value: str, allowed: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Past 2^64 - 2 torch's seed overflowed in a traceback after the data were rendered, --lr 1e308 mid-training;
    --workers 10^12 started render processes until the machine ran out."""
    with pytest.raises(SystemExit) as exit_:
        build_parser().parse_args(["train", "--out", "w.weights", option, value])
    assert exit_.value.code == 2
    assert capsys.readouterr().err == (f"detector train: error: argument {option}: Could not parse value: {value!r} "
                                       f"(expected {allowed}). (see 'detector train --help')\n")


@pytest.mark.parametrize(("option", "value", "allowed"), [
    ("--width", 2**64, "an even integer from 64 to 2147483646 (pixels)"),
    ("--height", 2**63, "an even integer from 64 to 2147483646 (pixels)"),
    ("--width", 2**31, "an even integer from 64 to 2147483646 (pixels)"),
    ("--fps", 10**12, "a number > 0 and < 10000 (frames per second)"),
])  # fmt: skip
def test_make_video_past_what_a_frame_or_encoder_holds_is_one_line_saying_what_is_allowed(
    option: str, value: int, allowed: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A side past 2^63 was numpy's OverflowError traceback; one past 2^31 (OpenCV's and FFmpeg's int) was 'not
    enough memory' after the scene's background was drawn; an fps of 10^12 was refused as not 'a number > 0'."""
    assert main(["make-video", "--out", str(tmp_path / "x.mp4"), "--frames", "1", option, str(value)]) == 2
    name = option.removeprefix("--")
    assert _error_line(capsys) == f"detector: error: synthetic video: {name} must be {allowed}, got {value}"
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(("argv", "piece"), [
    (["detect", "--backend", "tensorflow"], "unknown backend 'tensorflow'"),
    (["detect", "--backend", "torch,nope"], "unknown backend 'nope'"),
    (["detect", "--precision", "fp8"], "unknown precision 'fp8'"),
    (["detect", "--backend", "onnxruntime", "--precision", "int8"], "unsupported precision 'int8'"),
    (["detect", "--backend", "torch", "--precision", "int8", "--device", "cpu"], "allowed there: fp32"),
    (["detect", "--device", "gpu"], "unknown device 'gpu'"),
    (["detect", "--backend", "tensorrt", "--device", "cpu"], "--backend tensorrt runs on cuda only"),
    (["detect", "--video", "{tmp}/nope.mp4"], "nope.mp4': no such file"),
    (["detect", "--cfg", "{tmp}/nope.cfg"], "nope.cfg"),
    (["detect", "--weights", "{tmp}/nope.weights"], "nope.weights"),
    (["detect", "--backend", "onnxruntime", "--onnx", "{tmp}/nope.onnx"], "nope.onnx': no such file"),
    (["detect", "--onnx", "{tmp}/m.onnx"], "--onnx"),
    (["detect", "--backend", "torch,onnxruntime", "--out", "{tmp}/r.mp4"], "names one video file"),
    (["detect", "--skip-interval", "2", "--batch", "4"], "--skip-interval 2 needs --batch 1"),
    (["export-onnx", "--out", "{tmp}/m.onnx", "--cfg", "{tmp}/nope.cfg"], "nope.cfg"),
    (["eval", "--backend", "nope"], "unknown backend 'nope'"),
    (["eval", "--video", "{tmp}/nope.mp4"], "nope.mp4': no such file"),
    (["eval", "--cfg", "{tmp}/nope.cfg"], "nope.cfg"),
    (["eval", "--weights", "{tmp}/nope.weights"], "nope.weights"),
    (["train", "--out", "{tmp}/w.weights", "--device", "gpu"], "unknown device 'gpu'"),
    (["train", "--out", "{tmp}/w.weights", "--cfg", "{tmp}/nope.cfg"], "nope.cfg"),
])  # fmt: skip
def test_a_bad_argument_fails_in_one_line_before_torch_opencv_or_onnxruntime_load(
    argv: list[str], piece: str, tmp_path: Path
) -> None:
    argv = [arg.replace("{tmp}", str(tmp_path)) for arg in argv]
    result = subprocess.run([sys.executable, "-c", PROBE, json.dumps(argv)], cwd=tmp_path, text=True,
                            capture_output=True, timeout=120, check=False)
    probe = json.loads(result.stdout.strip().splitlines()[-1])
    err = result.stderr.strip().splitlines()
    assert probe["code"] == 2 and len(err) == 1 and err[0].startswith("detector: error: "), (probe, err)
    assert piece in err[0] and "Traceback" not in result.stderr
    assert probe["loaded"] == [], err[0]
    assert not any(tmp_path.iterdir())
