"""The ``detector`` command line: ``detect``, ``export-onnx``, ``make-video``, ``check-cache``, ``train``, ``eval``.

User errors (bad files, unknown names, unwritable outputs, a full disk) print one line, ``detector: error: ...``,
and exit with status 2; nothing partial is left behind because every output is written under a temporary name
and renamed on success. Ctrl-C (SIGINT) exits with 130 and SIGTERM with 143 (128 + the signal), each after
removing its temporary files and printing one line.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NoReturn

from detector.argtypes import add_inference_args as _add_inference_args
from detector.argtypes import positive_int as _positive_int
from detector.argtypes import processing_overrides as _processing_overrides
from detector.errors import DetectorError, VideoError, one_line

log = logging.getLogger("detector")


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr (exit status 2), without the usage block.

    Abbreviated options are refused (``allow_abbrev=False``): ``eval --video`` once parsed as ``--video-seed``.
    Subparsers are made with the parent's class, so they refuse them too.
    """

    def __init__(self, *args: Any, allow_abbrev: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def resolve_device(device: str) -> str:
    """``auto`` -> ``cuda`` when torch sees a CUDA device, else ``cpu``; other names pass through."""
    if device != "auto":
        return device
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def _model_spec(args: argparse.Namespace) -> Any:
    from detector.spec import ModelSpec

    base = ModelSpec.default()
    cfg = Path(args.cfg) if args.cfg else base.cfg
    weights = Path(args.weights) if args.weights else (base.weights if not args.cfg else None)
    if args.cfg and not args.weights:
        log.warning("no --weights given with --cfg %s: using seeded random weights (seed %d)", cfg, args.seed)
    kwargs: dict[str, Any] = {"cfg": cfg, "weights": weights, "seed": args.seed}
    if args.cache_dir:
        kwargs["cache_dir"] = Path(args.cache_dir)
    spec = ModelSpec(**kwargs)
    if spec.weights is None and not args.cfg:
        log.warning("no trained weights shipped or given: using seeded random weights (seed %d)", args.seed)
    return spec


def _default_video(args: argparse.Namespace, spec: Any) -> Path:
    from detector.synthetic import synthetic_video

    frames = args.frames if args.frames else 300
    log.info("no --video given: using the synthetic video (seed %d, %d frames)", args.video_seed, frames)
    return synthetic_video(spec.cache_dir / "videos", seed=args.video_seed, frames=frames).video


def format_table(rows: Sequence[dict[str, Any]]) -> str:
    """The lab's table as markdown: Model Type | Model Input Size | Inference Speed (FPS) | End-to-end speed (FPS)."""
    header = ["Model Type", "Model Input Size", "Inference Speed (FPS)", "End-to-end speed (FPS)"]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    for row in rows:
        cells = [row["model_type"], row["input_size"], f"{row['infer_fps']:.2f}", f"{row['e2e_fps']:.2f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def cmd_detect(args: argparse.Namespace) -> int:
    from detector.backends import create_runner, display_name
    from detector.fileio import atomic_write_text
    from detector.pipeline import default_output_path, run_pipeline

    spec = _model_spec(args)
    device = resolve_device(args.device)
    if args.video:  # fail on a bad video or cfg in a fraction of a second, before a model is loaded
        from detector.video import MIN_FRAME_SIDE, open_video

        with open_video(args.video) as reader:
            if min(reader.width, reader.height) < MIN_FRAME_SIDE:
                raise VideoError(f"cannot detect on '{args.video}': its frames are {reader.width}x{reader.height} "
                                 f"pixels; the detected video needs at least {MIN_FRAME_SIDE}x{MIN_FRAME_SIDE} (the "
                                 "video encoders refuse a side of 1 pixel)")
    spec.net  # noqa: B018 - parses the cfg (CfgError)
    if spec.weights is not None:  # header and size against the cfg, reading 20 bytes
        from detector.darknet import check_weights_size

        check_weights_size(spec.weights, spec.net)
    video = Path(args.video) if args.video else _default_video(args, spec)
    out_dir = Path(args.out)
    if args.onnx and "onnxruntime" not in args.backend:
        raise DetectorError(f"--onnx '{args.onnx}' runs only with --backend onnxruntime (got {','.join(args.backend)})")
    # Every runner is created (names, device, precision and options checked) before the first one runs, so a bad
    # name later in --backend fails before anything is written.
    runners = [create_runner(backend, spec, device=device, precision=args.precision,
                             **({"model_path": Path(args.onnx)} if args.onnx and backend == "onnxruntime" else {}))
               for backend in args.backend]
    rows: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    for backend, runner in zip(args.backend, runners):
        output = default_output_path(video, backend, out_dir)
        with runner:
            result = run_pipeline(
                runner,
                video,
                output,
                batch=args.batch,
                names=spec.names,
                conf_threshold=args.conf,
                iou_threshold=args.iou,
                max_frames=args.frames if args.video else None,
                **_processing_overrides(args),
            )
        h, w = spec.input_size
        model_type = f"{display_name(backend)} {args.precision} ({device}, batch {args.batch})"
        rows.append(
            {"model_type": model_type, "input_size": f"{w}x{h}", "infer_fps": result.infer_fps, "e2e_fps": result.e2e_fps}
        )
        summaries.append(result.summary())
        print(f"wrote {output} ({result.frames} frames)")
    table = format_table(rows)
    print(table)
    json_path = Path(args.json) if args.json else out_dir / "detect-results.json"
    atomic_write_text(json_path, json.dumps({"table": rows, "runs": summaries}, indent=2) + "\n")
    print(f"wrote {json_path}")
    return 0


def cmd_export_onnx(args: argparse.Namespace) -> int:
    from detector.export import export_onnx

    spec = _model_spec(args)
    path = export_onnx(spec.load_torch(), Path(args.out), opset=args.opset, dynamic_batch=not args.static_batch)
    print(f"wrote {path} (opset {args.opset}, {'static' if args.static_batch else 'dynamic'} batch)")
    return 0


def cmd_make_video(args: argparse.Namespace) -> int:
    from detector.synthetic import make_synthetic_video

    made = make_synthetic_video(
        Path(args.out), seed=args.seed, width=args.width, height=args.height, fps=args.fps, frames=args.frames
    )
    print(f"wrote {made.video} and {made.gt_json}")
    return 0


def cmd_check_cache(args: argparse.Namespace) -> int:
    """Exit 0 when every cache entry is usable; else one ``detector: error:`` line per unusable entry, exit 2."""
    from detector.cachecheck import check_cache
    from detector.spec import default_cache_dir

    cache_dir = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    report = check_cache(cache_dir)
    for problem in report.problems:
        print(f"detector: error: {problem}", file=sys.stderr)
    leftovers = f"; {len(report.leftovers)} temporary files of interrupted runs (ignored, safe to delete)"
    print(f"checked {report.checked} entries in {cache_dir}: {len(report.problems)} unusable"
          f"{leftovers if report.leftovers else ''}")
    return 2 if report.problems else 0


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cfg", help="Darknet .cfg (default: the shipped two-class yolov4-tiny.cfg)")
    p.add_argument("--weights", help="Darknet .weights (default: the shipped weights, else seeded random weights)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random weights used when none are given (default: 0)")
    p.add_argument("--cache-dir", help="cache for ONNX files, engines and videos (default: $DETECTOR_CACHE or ~/.cache/detector)")


def _version() -> str:
    """This package's installed version, from its metadata (``unknown`` when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("detector-perf")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``detector`` command."""
    parser = OneLineParser(prog="detector", description=__doc__.splitlines()[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="log progress (default: warnings only)")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True)

    from detector.backends import backend_names

    p = sub.add_parser("detect", help="run the video pipeline and print the lab's FPS table")
    _add_model_args(p)
    p.add_argument(
        "--backend",
        type=lambda s: [b.strip() for b in s.split(",") if b.strip()],
        default=["torch"],
        help=f"backend name(s), comma-separated: {', '.join(backend_names())} (default: torch)",
    )
    p.add_argument("--onnx", help="ONNX file for the onnxruntime backend instead of the model's own export; its input "
                   "size and classes must match the cfg (default: export the model)")
    p.add_argument("--video", help="input video (default: the synthetic 960x540 video with ground truth)")
    p.add_argument("--video-seed", type=int, default=0, help="seed of the default synthetic video (default: 0)")
    p.add_argument("--frames", type=_positive_int, help="frames to process (default: all; 300 for the synthetic video)")
    p.add_argument("--out", default="detector-out", help="folder for the detected videos and JSON (default: detector-out)")
    p.add_argument("--json", help="path of the results JSON (default: <out>/detect-results.json)")
    _add_inference_args(p, precisions="fp32, fp16 or int8", batch=1, conf=0.25)
    p.set_defaults(func=cmd_detect)

    p = sub.add_parser("export-onnx", help="export the model to ONNX (decode included)")
    _add_model_args(p)
    p.add_argument("--out", required=True, help="output .onnx path")
    p.add_argument("--opset", type=_positive_int, default=17, help="ONNX opset, 17 or newer (default: 17)")
    p.add_argument("--static-batch", action="store_true", help="fix the batch axis at 1 (default: dynamic batch)")
    p.set_defaults(func=cmd_export_onnx)

    p = sub.add_parser("make-video", help="write a synthetic video with COCO ground truth beside it")
    p.add_argument("--out", required=True, help="output .mp4 path (ground truth goes to <stem>.json beside it)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--width", type=_positive_int, default=960, help="frame width in pixels (default: 960)")
    p.add_argument("--height", type=_positive_int, default=540, help="frame height in pixels (default: 540)")
    p.add_argument("--fps", type=_positive_int, default=30, help="frames per second (default: 30)")
    p.add_argument("--frames", type=_positive_int, default=300, help="number of frames (default: 300)")
    p.set_defaults(func=cmd_make_video)

    p = sub.add_parser("check-cache", help="report cache entries that cannot be used (ONNX, TensorRT engines, videos)")
    p.add_argument("--cache-dir", help="the cache (default: $DETECTOR_CACHE or ~/.cache/detector)")
    p.set_defaults(func=cmd_check_cache)

    from detector.train.cli import add_anchors_parser, add_eval_parser, add_train_parser

    add_train_parser(sub)
    add_eval_parser(sub)
    add_anchors_parser(sub)
    for command in sub.choices.values():  # global options after the subcommand too: `detector detect -v`
        command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                             help="log progress (default: warnings only)")
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM (what ``timeout``, a CI cancel and ``docker stop`` send), raised where the program is, like Ctrl-C:
    every ``with`` block and ``finally`` on the way out runs, so temporary files are removed."""


def _on_sigterm(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not cut the clean-up short
    raise Terminated


class _OneLineFormatter(logging.Formatter):
    """Log records as one line each: control characters in the message (a file name's newline) are escaped."""

    def format(self, record: logging.LogRecord) -> str:
        return one_line(super().format(record))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``detector`` console script; returns the exit status: 0, 2 for a user error, 130 when
    interrupted (Ctrl-C, SIGINT), 143 when terminated (SIGTERM). An interrupted or terminated run removes its
    temporary files and prints one line."""
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = logging.StreamHandler()
    handler.setFormatter(_OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING, handlers=[handler])
    main_thread = threading.current_thread() is threading.main_thread()
    previous = signal.signal(signal.SIGTERM, _on_sigterm) if main_thread else None
    try:
        return int(args.func(args) or 0)
    except DetectorError as exc:
        print(f"detector: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # an output folder that cannot be created or written, a full disk
        message = f"{exc.filename or ''}: {exc.strerror or exc}".replace(": : ", ": ").removeprefix(": ")
        print(f"detector: error: {one_line(message)}", file=sys.stderr)
        return 2
    except Terminated:
        print("detector: terminated (SIGTERM); nothing partial was saved", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("detector: interrupted", file=sys.stderr)
        return 130
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
