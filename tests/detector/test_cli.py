"""The ``detector`` CLI end to end on a short synthetic video, and its one-line errors for bad input."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pytest

from detector.cli import build_parser, main
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
    cfg = (Path(__file__).resolve().parents[2] / "detector" / "data" / "yolov4-tiny.cfg").read_text()
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


def _refused_inputs(tmp: Path, short_video: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (arguments after the command, the exact error line): inputs that once ended in a traceback."""
    shipped = (Path(__file__).resolve().parents[2] / "detector" / "data" / "yolov4-tiny.cfg").read_text()

    def cfg(name: str, old: str, new: str) -> tuple[Path, int]:
        path = tmp / name
        path.write_text(shipped.replace(old, new, 1))
        return path, path.read_text().splitlines().index(new) + 1

    gray, gray_line = cfg("gray.cfg", "channels=3", "channels=1")
    nan, nan_line = cfg("nan.cfg", "scale_x_y = 1.05", "scale_x_y = nan")
    (tmp / "model").mkdir()
    (tmp / "model" / "yolov4-tiny.cfg").write_text(shipped)
    names = tmp / "model" / "classes.names"
    names.write_bytes("person\nv\u00e9hicule\n".encode("latin-1"))
    loops = {name: tmp / name for name in ("loop.mp4", "loop")}
    for link in loops.values():
        link.symlink_to(link.name)  # a link to itself
    video = ["--video", str(short_video)]
    not_utf8 = f"cannot read class names '{names}': not UTF-8 text (byte 8: 0xe9); save it as UTF-8"
    gray_error = (f"{gray}:{gray_line}: [net] channels=1: only 3-channel (RGB) input is supported (frames are fed to "
                  "the network as RGB)")
    not_finite = "'nan' is not a finite number"
    loop_error = "a symbolic link loop (too many levels of symbolic links); give another path"
    return {
        "grayscale cfg": ([*video, "--cfg", str(gray)], gray_error),
        "nan in cfg": ([*video, "--cfg", str(nan)], f"{nan}:{nan_line}: [yolo] scale_x_y='nan': {not_finite}"),
        "names not utf-8": ([*video, "--cfg", str(tmp / "model" / "yolov4-tiny.cfg")], not_utf8),
        **{f"out {name} a symlink loop": ([*video, "--out", str(link)], f"--out '{link}': {loop_error}")
           for name, link in loops.items()},
    }


@pytest.mark.parametrize("case", ["grayscale cfg", "nan in cfg", "names not utf-8", "out loop.mp4 a symlink loop",
                                  "out loop a symlink loop"])
def test_input_that_once_gave_a_traceback_is_one_exact_line_exit_2(
    case: str, short_video: Path, tmp_path: Path, cache: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args, line = _refused_inputs(tmp_path, short_video)[case]
    out = tmp_path / "out"
    if "--out" not in args:
        args = [*args, "--out", str(out)]
    assert main(["detect", "--device", "cpu", "--cache-dir", cache, *args]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"detector: error: {line}"]
    assert captured.out == "" and not out.exists()


def test_eval_with_class_names_that_are_not_utf8_is_one_exact_line_exit_2(
    short_video: Path, tmp_path: Path, cache: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args, line = _refused_inputs(tmp_path, short_video)["names not utf-8"]
    assert main(["eval", "--device", "cpu", "--cache-dir", cache, *args]) == 2
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [f"detector: error: {line}"] and captured.out == ""


# -- detector eval on a labelled video ----------------------------------------------------------------------


def _eval(video: Path, cache: str, *extra: str) -> int:
    return main(["eval", "--video", str(video), "--device", "cpu", "--cache-dir", cache, *extra])


def test_eval_scores_a_video_against_the_ground_truth_beside_it(
    short_video: Path, tmp_path: Path, cache: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "eval.json"
    assert _eval(short_video, cache, "--json", str(out)) == 0
    printed = capsys.readouterr().out
    assert f"{short_video}, {FRAMES} frames, ground truth {short_video.with_suffix('.json')}" in printed
    assert "person" in printed and "vehicle" in printed
    data = json.loads(out.read_text())
    assert data["video"] == str(short_video) and data["ground_truth"] == str(short_video.with_suffix(".json"))
    assert data["frames"] == FRAMES and data["num_images"] == FRAMES  # default: every frame
    assert set(data["per_class"]) == {"person", "vehicle"} and 0.0 <= data["mAP@0.5"] <= 1.0


def test_eval_reads_an_explicit_ground_truth_and_scores_only_its_labelled_frames(
    short_video: Path, tmp_path: Path, cache: str
) -> None:
    gt = json.loads(short_video.with_suffix(".json").read_text())
    labelled = {1, 2, 3, 8}  # image id = frame index + 1; 8 lies beyond --frames 6
    gt["images"] = [img for img in gt["images"] if img["id"] in labelled]
    gt["annotations"] = [ann for ann in gt["annotations"] if ann["image_id"] in labelled]
    explicit = tmp_path / "labels" / "mine.json"
    explicit.parent.mkdir()
    explicit.write_text(json.dumps(gt))
    out = tmp_path / "eval.json"
    assert _eval(short_video, cache, "--ground-truth", str(explicit), "--frames", "6", "--json", str(out)) == 0
    data = json.loads(out.read_text())
    assert data["ground_truth"] == str(explicit) and data["frames"] == 6 and data["num_images"] == 3
    first_three = sum(1 for ann in gt["annotations"] if ann["image_id"] <= 3)
    assert sum(c["num_gt"] for c in data["per_class"].values()) == first_three


def _bad_ground_truths(tmp: Path, short_video: Path) -> dict[str, tuple[list[str], str]]:
    """name -> (eval arguments after --video, a piece of the expected message, or the whole of it)."""
    gt = json.loads(short_video.with_suffix(".json").read_text())
    alone = tmp / "alone.mp4"
    alone.write_bytes(short_video.read_bytes())  # a video without ground truth beside it

    def variant(name: str, **changes: object) -> str:
        path = tmp / name
        path.write_text(json.dumps({**gt, **changes}))
        return str(path)

    broken = tmp / "broken.json"
    broken.write_text('{"images": [')
    deep = tmp / "deep.json"
    deep.write_text('{"images": ' + "[" * 100_000 + "]" * 100_000 + "}")
    coco80 = [{"id": i + 1, "name": f"c{i}"} for i in range(80)]

    def bad_annotation(name: str, field: str, value: object, problem: str) -> tuple[list[str], str]:
        """The video's own ground truth with ``field`` of its second annotation set to ``value``; the whole message."""
        annotations = [dict(ann) for ann in gt["annotations"]]
        annotations[1][field] = value
        path = variant(name, annotations=annotations)
        return [str(short_video), "--ground-truth", path], f"ground truth '{path}': annotation 1 (id 2): {problem}"

    box = "expected [x, y, w, h], 4 finite numbers with w and h >= 0"
    nested = "not valid JSON: nested too deeply"
    return {
        "missing default": ([str(alone)], f"'{tmp / 'alone.json'}': no such file"),
        "missing explicit": ([str(short_video), "--ground-truth", str(tmp / "nope.json")], "nope.json': no such file"),
        "not json": ([str(short_video), "--ground-truth", str(broken)], "broken.json': not valid JSON"),
        "other names": ([str(short_video), "--ground-truth", variant(
            "cars.json", categories=[{"id": 1, "name": "person"}, {"id": 2, "name": "car"}])],
            "cars.json': its 2 categories (1='person', 2='car') do not match the model's 2 classes"),
        "more classes": ([str(short_video), "--ground-truth", variant("coco.json", categories=coco80, annotations=[])],
                         "coco.json': its 80 categories"),
        "zero-based ids": ([str(short_video), "--ground-truth", variant(
            "zero.json", categories=[{"id": 0, "name": "person"}, {"id": 1, "name": "vehicle"}], annotations=[])],
            "zero.json': its 2 categories (0='person', 1='vehicle')"),
        "no labelled frame": ([str(short_video), "--ground-truth", variant("late.json", images=[
            {"id": 9, "width": WIDTH, "height": HEIGHT}], annotations=[]), "--frames", "4"],
            "late.json' lists no image of the first 4 frames"),
        "frames beyond the video": ([str(short_video), "--ground-truth", variant(
            "long.json", images=[*gt["images"], {"id": FRAMES + 5, "width": WIDTH, "height": HEIGHT}])],
            f"long.json' labels image id {FRAMES + 5} (frame {FRAMES + 4}) but '{short_video}' has only {FRAMES}"),
        "area not a number": bad_annotation("area.json", "area", "big", "area 'big': expected a finite number"),
        "iscrowd a list": bad_annotation("crowd.json", "iscrowd", [1], "iscrowd [1]: expected 0 or 1"),
        "negative width": bad_annotation("width.json", "bbox", [1, 2, -3, 4], f"bbox [1, 2, -3, 4]: {box}"),
        "float image id": bad_annotation("image.json", "image_id", 1.7,
                                         "image_id 1.7: expected an integer id listed in images"),
        "bool category id": bad_annotation("category.json", "category_id", True,
                                           "category_id True: expected an integer id listed in categories"),
        "nested too deeply": ([str(short_video), "--ground-truth", str(deep)], f"ground truth '{deep}': {nested}"),
    }


@pytest.mark.parametrize("case", [
    "missing default", "missing explicit", "not json", "other names", "more classes", "zero-based ids",
    "no labelled frame", "frames beyond the video", "area not a number", "iscrowd a list", "negative width",
    "float image id", "bool category id", "nested too deeply",
])  # fmt: skip
def test_eval_bad_ground_truth_is_one_line_exit_2_and_no_output(
    case: str, short_video: Path, tmp_path: Path, cache: str, capsys: pytest.CaptureFixture[str]
) -> None:
    args, expected = _bad_ground_truths(tmp_path, short_video)[case]
    out = tmp_path / "eval.json"
    assert main(["eval", "--device", "cpu", "--cache-dir", cache, "--json", str(out), "--video", *args]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("detector: error: ") and "ground truth '" in err[0], err
    assert expected in err[0] and "Traceback" not in captured.err
    if expected.startswith("ground truth '"):  # the whole message
        assert err[0] == f"detector: error: {expected}"
    assert not out.exists() and "AP@0.5" not in captured.out


# -- no abbreviated options -----------------------------------------------------------------------------------


def test_eval_video_is_never_read_as_video_seed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = build_parser().parse_args(["eval", "--video", "x.mp4"])
    assert args.video == "x.mp4" and args.video_seeds is None
    assert main(["eval", "--video", str(tmp_path / "x.mp4"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"detector: error: cannot open '{tmp_path / 'x.mp4'}': no such file"]


def test_video_and_video_seed_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["eval", "--video", "x.mp4", "--video-seed", "7"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--video-seed: not allowed with argument --video" in err[0]


def test_abbreviated_option_is_refused_with_a_one_line_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["detect", "--fram", "3"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["detector: error: unrecognized arguments: --fram 3 (see 'detector --help')"]


def _abbreviations(parser: argparse.ArgumentParser) -> list[list[str]]:
    """``[subcommand, required options..., option less its last letter, "1"]`` for every long option of every
    subcommand whose shortened form is not itself an option."""
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = []
    for name, p in sub.choices.items():
        options = {o for a in p._actions for o in a.option_strings}
        required = [x for a in p._actions if a.required for x in (a.option_strings[0], "1")]
        out += [[name, *required, o[:-1], "1"] for o in sorted(options)
                if o.startswith("--") and len(o) > 4 and o[:-1] not in options]
    return out


@pytest.mark.parametrize("entry", ["detector", "python3 -m detector.train"])
def test_no_subcommand_accepts_an_abbreviated_option(entry: str, capsys: pytest.CaptureFixture[str]) -> None:
    from detector.train.__main__ import build_parser as build_train_parser

    parser = build_parser() if entry == "detector" else build_train_parser()
    cases = _abbreviations(parser)
    assert len(cases) > (50 if entry == "detector" else 30)
    for argv in cases:
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args(argv)
        assert exit_.value.code == 2, argv
        assert f"unrecognized arguments: {' '.join(argv[-2:])}" in capsys.readouterr().err, argv


def test_version_prints_the_installed_version_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"detector {version('detector-perf')}"


@pytest.mark.parametrize(("argv", "verbose"), [(["-v", "detect"], True), (["detect", "-v"], True),
                                               (["detect", "--verbose"], True), (["detect"], False),
                                               (["check-cache", "-v"], True), (["eval", "-v"], True)])
def test_verbose_is_accepted_before_and_after_the_subcommand(argv: list[str], verbose: bool) -> None:
    assert build_parser().parse_args(argv).verbose is verbose


@pytest.mark.parametrize("given", ["FP16", "Fp16", "fp16"])
def test_precision_names_are_case_insensitive(given: str) -> None:
    assert build_parser().parse_args(["detect", "--precision", given]).precision == "fp16"
    assert build_parser().parse_args(["eval", "--precision", given]).precision == "fp16"


def _conv_of_wrong_channels(path: Path) -> Path:
    """An ONNX model that passes onnx.checker and fits the packaged cfg's input and classes but that ONNX Runtime
    refuses when it runs: a convolution whose kernel expects 4 input channels, fed 3."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    size, columns = 416, 4 + 2
    rows = 3 * size * size // columns
    graph = helper.make_graph(
        [helper.make_node("Conv", ["images", "w"], ["x"]), helper.make_node("Reshape", ["x", "shape"], ["decoded"])],
        "wrong-channels", [helper.make_tensor_value_info("images", TensorProto.FLOAT, ["B", 3, size, size])],
        [helper.make_tensor_value_info("decoded", TensorProto.FLOAT, ["B", rows, columns])],
        [numpy_helper.from_array(np.zeros((3, 4, 1, 1), np.float32), "w"),
         helper.make_tensor("shape", TensorProto.INT64, [3], [-1, rows, columns])])  # fmt: skip
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def test_a_model_onnx_runtime_refuses_is_our_one_line_naming_the_file_without_its_own_log(
    short_video: Path, tmp_path: Path, cache: str, capfd: pytest.CaptureFixture[str]
) -> None:
    model = _conv_of_wrong_channels(tmp_path / "wrong.onnx")
    assert main(["detect", "--backend", "onnxruntime", "--onnx", str(model), "--video", str(short_video), "--out",
                 str(tmp_path / "out"), "--device", "cpu", "--cache-dir", cache, "--no-video"]) == 2  # fmt: skip
    err = capfd.readouterr().err.strip().splitlines()  # file descriptor 2: ONNX Runtime logs from C++
    assert len(err) == 1, err
    assert err[0].startswith(f"detector: error: runner 'onnxruntime': ONNX model '{model}' failed on a [1, 3, 416, "
                             "416] input: [ONNXRuntimeError]")


def test_eval_names_the_weights_it_scored_and_the_device_it_ran_on(
    short_video: Path, tmp_path: Path, cache: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from detector.model import default_cfg_path, default_weights_path

    cfg = tmp_path / "model.cfg"  # a cfg with no weights beside it: seeded random weights stand in
    cfg.write_text(default_cfg_path().read_text())
    (tmp_path / "classes.names").write_text("person\nvehicle\n")
    out = tmp_path / "random.json"
    assert _eval(short_video, cache, "--device", "auto", "--cfg", str(cfg), "--frames", "2", "--json", str(out)) == 0
    assert "weights seeded random (no weights for this cfg):" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert (data["device"], data["cfg"], data["weights"], data["random_weights"]) == ("cpu", str(cfg), None, True)
    assert (data["resize"], data["nms"]) == ("cfg", "cfg")
    shipped = tmp_path / "shipped.json"
    assert _eval(short_video, cache, "--frames", "2", "--nms", "diounms", "--json", str(shipped)) == 0
    assert "weights shipped:" in capsys.readouterr().out
    data = json.loads(shipped.read_text())
    assert (data["weights"], data["random_weights"], data["nms"]) == (str(default_weights_path()), False, "diounms")


def test_detect_refuses_a_video_seed_beside_a_video_it_would_ignore(
    short_video: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["detect", "--device", "cpu", "--video", str(short_video), "--video-seed", "5", "--no-video"])
    err = capsys.readouterr().err.splitlines()
    assert exit_.value.code == 2 and len(err) == 1 and "--video-seed: not allowed with argument --video" in err[0]


def test_export_onnx_shows_no_cache_option_it_would_not_use(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["export-onnx", "--help"])
    assert "--cache-dir" not in capsys.readouterr().out


def test_check_cache_of_a_symbolic_link_loop_names_the_loop_not_a_missing_folder(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    loop = tmp_path / "cache"
    loop.symlink_to(loop)
    assert main(["check-cache", "--cache-dir", str(loop)]) == 2
    assert capsys.readouterr().err.strip() == (f"detector: error: cannot check cache '{loop}': a symbolic link loop "
                                               "(too many levels of symbolic links)")
