"""The ``detector`` command line: ``detect``, ``export-onnx``, ``make-video``, ``check-cache``, ``train``, ``eval``,
``anchors``.

User errors (bad files, unknown names, unwritable outputs, a full disk) print one line, ``detector: error: ...``,
and exit with status 2; nothing partial is left behind because every output is written under a temporary name
and renamed on success. Ctrl-C (SIGINT) exits with 130 and SIGTERM with 143 (128 + the signal), each after
removing its temporary files and printing one line.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from detector.argtypes import add_inference_args as _add_inference_args
from detector.argtypes import non_negative_int as _non_negative_int
from detector.argtypes import positive_int as _positive_int
from detector.argtypes import processing_overrides as _processing_overrides
from detector.choices import backend_list, check_names, check_runs_here
from detector.errors import (DetectorError, Terminated, VideoError, catch_sigterm, escape_stdout, log_to_stderr,
                             one_line)
from detector.memory import is_out_of_memory
from detector.progress import ENV_VAR as PROGRESS_ENV_VAR
from detector.progress import progress, progress_enabled

log = logging.getLogger("detector")

__all__ = ["build_parser", "format_table", "main"]


class OneLineParser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose usage errors are one line on stderr (exit status 2), without the usage block.

    Abbreviated options are refused (``allow_abbrev=False``): ``eval --video`` once parsed as ``--video-seed``.
    Subparsers are made with the parent's class, so they refuse them too.
    """

    def __init__(self, *args: Any, allow_abbrev: bool = False, **kwargs: Any) -> None:
        super().__init__(*args, allow_abbrev=allow_abbrev, **kwargs)

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def _model_spec(args: argparse.Namespace, random_weights_for: Sequence[str] = ("the model",)) -> Any:
    """The model of ``--cfg``, ``--weights``, ``--seed`` and ``--cache-dir``, its files checked
    (:meth:`~detector.spec.ModelSpec.check_files`, and the class names beside the cfg read); then a warning when
    seeded random weights stand in for missing ones, naming ``random_weights_for`` (what runs the cfg's weights;
    none: no warning)."""
    from detector.spec import ModelSpec

    base = ModelSpec.default()
    cfg = Path(args.cfg) if args.cfg else base.cfg
    weights = Path(args.weights) if args.weights else (base.weights if not args.cfg else None)
    kwargs: dict[str, Any] = {"cfg": cfg, "weights": weights, "seed": args.seed}
    if args.cache_dir:
        kwargs["cache_dir"] = Path(args.cache_dir)
    spec = ModelSpec(**kwargs)
    spec.check_files()
    spec.names  # noqa: B018 - reads classes.names beside the cfg: an unreadable file is refused before the model loads
    if spec.weights is None and random_weights_for:
        given = f"no --weights given with --cfg {cfg}" if args.cfg else "no trained weights shipped or given"
        log.warning("%s: %s runs seeded random weights (seed %d)", given, ", ".join(random_weights_for), args.seed)
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


def _video_out(out: str, backends: Sequence[str], video: str | None) -> Path | None:
    """``--out`` as the detected video's path when it names a video file (a video suffix, no existing folder),
    else None (a folder). :class:`DetectorError` for a path through a symbolic link loop, a video path with several
    backends or the input video."""
    from detector.fileio import symlink_loop
    from detector.video import WRITABLE_SUFFIXES

    path = Path(out)
    if symlink_loop(path):
        raise DetectorError(f"--out '{out}': a symbolic link loop (too many levels of symbolic links); give another "
                            "path")
    if path.suffix.lower() not in WRITABLE_SUFFIXES or path.is_dir():
        return None
    if len(backends) > 1:
        raise DetectorError(f"--out '{out}' names one video file, but --backend {','.join(backends)} writes "
                            f"{len(backends)} videos; give a folder for --out (one video per backend goes in it) "
                            "or one backend")
    # (a --video whose links loop is not resolved here: check_video_file names it, next)
    if video is not None and not symlink_loop(video) and path.resolve() == Path(video).resolve():
        raise DetectorError(f"--out '{out}' is the input video itself; give the detected video another name")
    return path


def _advancing(bar: Any) -> Callable[[int], None]:
    """An ``on_progress(frames_done)`` callback of the loops that moves ``bar`` on to ``frames_done``."""
    shown = 0

    def on_progress(frames_done: int) -> None:
        nonlocal shown
        bar.update(frames_done - shown)
        shown = frames_done

    return on_progress


def cmd_detect(args: argparse.Namespace) -> int:
    """Handler of ``detector detect``. Every argument is checked before a model or a video loads: names, the
    output and the files first (nothing heavy imported), then the cfg and weights, then whether the backends run
    on this machine (torch), then the video's frames (OpenCV); a bad name late in --backend fails before
    anything is written."""
    backends = check_names(args.backend, args.device, args.precision)
    if args.onnx and "onnxruntime" not in backends:
        raise DetectorError(f"--onnx '{args.onnx}' runs only with --backend onnxruntime (got {','.join(backends)})")
    video_out = _video_out(args.out, backends, args.video)
    if args.json:  # written last: a path it cannot take must fail before any video is written
        from detector.fileio import unwritable

        if (why := unwritable(args.json)) is not None:
            raise DetectorError(f"cannot write '{args.json}' (--json): {why}")
    if args.skip_interval > 0 and args.batch > 1:
        raise DetectorError(f"--skip-interval {args.skip_interval} needs --batch 1 (one frame per inference), got "
                            f"--batch {args.batch}; give --batch 1 or --skip-interval 0")
    if args.onnx:
        from detector.export import check_onnx_file

        check_onnx_file(args.onnx)
    if args.video:
        from detector.video import check_video_file

        check_video_file(args.video)
    if args.decoder == "nvdec" and args.device == "cpu":
        raise DetectorError("--decoder nvdec decodes into CUDA memory; --device is cpu (give --device cuda or auto)")
    spec = _model_spec(args, [b for b in backends if not (args.onnx and b == "onnxruntime")])
    device = check_runs_here(backends, args.device, args.precision)
    if args.decoder == "nvdec":
        from detector.gpudecode import nvdec_unavailable

        reason = nvdec_unavailable(device)
        if reason is not None:
            raise DetectorError(f"--decoder nvdec: {reason}")
    total: int | None = args.frames or 300  # frames the pass will process, for its bar
    if args.video:
        from detector.video import MIN_FRAME_SIDE, open_video

        with open_video(args.video) as reader:
            if min(reader.width, reader.height) < MIN_FRAME_SIDE:
                raise VideoError(f"cannot detect on '{args.video}': its frames are {reader.width}x{reader.height} "
                                 f"pixels; the detected video needs at least {MIN_FRAME_SIDE}x{MIN_FRAME_SIDE} (the "
                                 "video encoders refuse a side of 1 pixel)")
            known = [n for n in (args.frames, reader.frame_count) if n]  # frame_count 0: the container does not say
            total = min(known) if known else None
    from detector.backends import create_runner, display_name
    from detector.fileio import atomic_write_text
    from detector.pipeline import default_output_path, run_pipeline

    video = Path(args.video) if args.video else _default_video(args, spec)
    runners = [create_runner(backend, spec, device=device, precision=args.precision,
                             **({"model_path": Path(args.onnx)} if args.onnx and backend == "onnxruntime" else {}))
               for backend in backends]
    rows: list[dict[str, Any]] = []
    summaries: list[dict[str, Any]] = []
    for backend, runner in zip(backends, runners):
        output = None if args.no_video else video_out or default_output_path(video, backend, Path(args.out))
        with runner, progress(total=total, desc=f"detecting ({backend})", unit="frame") as bar:
            result = run_pipeline(
                runner,
                video,
                output,
                batch=args.batch,
                names=spec.names,
                conf_threshold=args.conf,
                iou_threshold=args.iou,
                max_frames=args.frames if args.video else None,
                skip_interval=args.skip_interval,
                decoder=args.decoder,
                on_progress=_advancing(bar),
                **_processing_overrides(args),
            )
        h, w = spec.input_size
        interval = f", interval {args.skip_interval}" if args.skip_interval else ""
        model_type = f"{display_name(backend)} {args.precision} ({device}, batch {args.batch}{interval})"
        rows.append(
            {"model_type": model_type, "input_size": f"{w}x{h}", "infer_fps": result.infer_fps,
             "e2e_fps": result.e2e_fps}
        )
        summaries.append(result.summary())
        print(f"wrote {output} ({result.frames} frames)" if output else f"{backend}: {result.frames} frames, no video "
              "written (--no-video)")
    table = format_table(rows)
    print(table)
    if args.json:
        json_path = Path(args.json)
    else:
        json_path = video_out.with_name(f"{video_out.stem}-detect-results.json") if video_out else \
            Path(args.out) / "detect-results.json"
    atomic_write_text(json_path, json.dumps({"table": rows, "runs": summaries}, indent=2) + "\n")
    print(f"wrote {json_path}")
    return 0


def cmd_export_onnx(args: argparse.Namespace) -> int:
    from detector.export import export_onnx

    spec = _model_spec(args, ("the export",))
    path = export_onnx(spec.load_torch(), Path(args.out), opset=args.opset, dynamic_batch=not args.static_batch)
    print(f"wrote {path} (opset {args.opset}, {'static' if args.static_batch else 'dynamic'} batch)")
    return 0


def cmd_make_video(args: argparse.Namespace) -> int:
    from detector.synthetic import make_synthetic_video

    made = make_synthetic_video(
        Path(args.out), seed=args.seed, width=args.width, height=args.height, fps=args.fps, frames=args.frames,
        codec=args.codec,
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


_VERBOSE_HELP = "log what each step does (default: warnings only)"
_PROGRESS_HELP = (f"draw progress bars of the long steps on stderr, or never (default: when stderr is a terminal; "
                  f"${PROGRESS_ENV_VAR}=1 or 0 sets the same)")


def _add_model_args(p: argparse.ArgumentParser, *, cache: bool = True) -> None:
    """--cfg, --weights, --seed and --cache-dir; ``cache=False`` (a command that writes no cache): --cache-dir is
    still accepted, so that older command lines run, but not shown."""
    p.add_argument("--cfg", help="Darknet .cfg (default: the shipped two-class yolov4-tiny.cfg)")
    p.add_argument("--weights", help="Darknet .weights (default: the shipped weights, else seeded random weights)")
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random weights used when none are given (default: 0)")
    p.add_argument("--cache-dir", help="cache for ONNX files, engines and videos (default: $DETECTOR_CACHE or "
                   "~/.cache/detector)" if cache else argparse.SUPPRESS)


def _version() -> str:
    """This package's installed version, from its metadata (``unknown`` when it is not installed)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("detector-perf")
    except PackageNotFoundError:
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``detector`` command."""
    parser = OneLineParser(prog="detector")
    parser.add_argument("-v", "--verbose", action="store_true", help=_VERBOSE_HELP)
    parser.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None, help=_PROGRESS_HELP)
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    from detector.backends import backend_names

    p = _command(sub, "detect", "run the video pipeline and print the lab's FPS table")
    _add_model_args(p)
    p.add_argument("--backend", type=backend_list, default=["torch"],
                   help=f"backend name(s), comma-separated: {', '.join(backend_names())}, in any case (default: torch)")
    p.add_argument("--onnx", help="ONNX file for the onnxruntime backend instead of the model's own export; its input "
                   "size and classes must match the cfg (default: export the model)")
    source = p.add_mutually_exclusive_group()  # a seed picks the synthetic video, which --video replaces
    source.add_argument("--video", help="input video (default: the synthetic 960x540 video with ground truth)")
    source.add_argument("--video-seed", type=int, default=0, help="seed of the default synthetic video (default: 0)")
    p.add_argument("--frames", type=_positive_int, help="frames to process (default: all; 300 for the synthetic video)")
    p.add_argument("--out", default="detector-out",
                   help="folder for the detected videos and the JSON; or, with one backend, the detected video's path "
                   "(a name ending in a video suffix: .mp4, .avi, .mkv, .mov or .m4v) (default: detector-out)")
    p.add_argument("--json", help="path of the results JSON (default: <out>/detect-results.json, or "
                   "<stem>-detect-results.json beside a video --out)")
    _add_inference_args(p, precisions="fp32, fp16 or int8", batch=1, conf=0.25)
    p.add_argument("--skip-interval", type=_non_negative_int, default=0, metavar="N",
                   help="frames skipped between inferences, as DeepStream's interval: 0 infers every frame, 1 frames "
                   "0,2,4,..., 2 frames 0,3,6,..., 4 frames 0,5,10,...; a constant-velocity IoU tracker moves the "
                   "last boxes over the skipped frames; needs --batch 1 (default: 0)")
    p.add_argument("--decoder", type=str.lower, choices=("opencv", "nvdec"), default="opencv",
                   help="opencv decodes on the CPU; nvdec on the GPU's hardware decoder into device memory, with "
                   "preprocess and postprocess on the GPU (needs a CUDA device and PyNvVideoCodec: pip install -e "
                   "'.[gpu]') (default: opencv)")
    p.add_argument("--no-video", action="store_true",
                   help="write no detected video, only the results JSON: no CPU encoding in the loop "
                   "(default: write it)")
    p.set_defaults(func=cmd_detect)

    p = _command(sub, "export-onnx", "export the model to ONNX (decode included)")
    _add_model_args(p, cache=False)
    p.add_argument("--out", required=True, help="output .onnx path")
    p.add_argument("--opset", type=_positive_int, default=17, help="ONNX opset, 17 or newer (default: 17)")
    p.add_argument("--static-batch", action="store_true", help="fix the batch axis at 1 (default: dynamic batch)")
    p.set_defaults(func=cmd_export_onnx)

    p = _command(sub, "make-video", "write a synthetic video with COCO ground truth beside it")
    p.add_argument("--out", required=True, help="output .mp4 path (ground truth goes to <stem>.json beside it)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default: 0)")
    p.add_argument("--width", type=_positive_int, default=960, help="frame width in pixels (default: 960)")
    p.add_argument("--height", type=_positive_int, default=540, help="frame height in pixels (default: 540)")
    p.add_argument("--fps", type=_positive_int, default=30, help="frames per second (default: 30)")
    p.add_argument("--frames", type=_positive_int, default=300, help="number of frames (default: 300)")
    p.add_argument("--codec", type=str.lower, choices=("mp4v", "h264"), default="mp4v",
                   help="mp4v (MPEG-4 Part 2, OpenCV's encoder) or h264 (libx264 through PyAV, as cameras write; "
                        "needs pip install av) (default: mp4v)")
    p.set_defaults(func=cmd_make_video)

    p = _command(sub, "check-cache", "report cache entries that cannot be used (ONNX, TensorRT engines, videos)")
    p.add_argument("--cache-dir", help="the cache (default: $DETECTOR_CACHE or ~/.cache/detector)")
    p.set_defaults(func=cmd_check_cache)

    from detector.train.cli import add_anchors_parser, add_eval_parser, add_train_parser

    add_train_parser(sub)
    add_eval_parser(sub)
    add_anchors_parser(sub)
    for command in sub.choices.values():  # global options after the subcommand too: `detector detect -v`
        command.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS, help=_VERBOSE_HELP)
        command.add_argument("--progress", action=argparse.BooleanOptionalAction, default=argparse.SUPPRESS,
                             help=_PROGRESS_HELP)
    parser.description = (f"Detect objects in videos and measure the lab's FPS table; make, train and score the model. "
                          f"Commands: {', '.join(sub.choices)}. 'detector COMMAND --help' describes one.")
    return parser


def _command(sub: Any, name: str, summary: str) -> argparse.ArgumentParser:
    """Subcommand ``name`` on ``sub`` (from ``add_subparsers``), ``summary`` its line in ``detector --help`` and the
    start of its own help: plain text, as every help text is."""
    return sub.add_parser(name, help=summary, description=summary[0].upper() + summary[1:] + ".")


@contextlib.contextmanager
def _progress_setting(wanted: bool | None) -> Iterator[None]:
    """``--progress`` / ``--no-progress`` as ``DETECTOR_PROGRESS`` for one command (its child processes included),
    restored after. While bars are drawn, log records are written through tqdm, so that none breaks a bar."""
    before = os.environ.get(PROGRESS_ENV_VAR)
    if wanted is not None:
        os.environ[PROGRESS_ENV_VAR] = "1" if wanted else "0"
    try:
        if progress_enabled():
            from tqdm.contrib.logging import logging_redirect_tqdm

            with logging_redirect_tqdm(loggers=[logging.getLogger()]):
                yield
        else:
            yield
    finally:
        if before is None:
            os.environ.pop(PROGRESS_ENV_VAR, None)
        else:
            os.environ[PROGRESS_ENV_VAR] = before


class _OneLineFormatter(logging.Formatter):
    """Log records as one line each: control characters in the message (a file name's newline) are escaped."""

    def format(self, record: logging.LogRecord) -> str:
        return one_line(super().format(record))


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``detector`` console script; returns the exit status: 0, 2 for a user error, 130 when
    interrupted (Ctrl-C, SIGINT), 143 when terminated (SIGTERM). An interrupted or terminated run removes its
    temporary files and prints one line."""
    return run(build_parser().parse_args(argv))


def run(args: argparse.Namespace) -> int:
    """Run the parsed command ``args.func(args)`` with the CLI's logging, its SIGTERM handling and its one-line
    errors (`main`'s exit statuses); ``python -m detector.train`` runs its subcommands here too."""
    log_to_stderr(logging.INFO if args.verbose else logging.WARNING,
                  _OneLineFormatter("%(levelname)s %(name)s: %(message)s"))
    restore = catch_sigterm()
    escape_stdout()  # 'wrote <name>' of a name that is not UTF-8
    try:
        with _progress_setting(getattr(args, "progress", None)):
            return int(args.func(args) or 0)
    except DetectorError as exc:
        print(f"detector: error: {exc}", file=sys.stderr)
        return 2
    except OSError as exc:  # an output folder that cannot be created or written, a full disk
        message = f"{exc.filename or ''}: {exc.strerror or exc}".replace(": : ", ": ").removeprefix(": ")
        print(f"detector: error: {one_line(message)}", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as exc:  # a size this machine cannot hold (--batch, make-video --width,
        if not is_out_of_memory(exc):  # train --batch: torch's allocators raise RuntimeError): nothing was written
            raise
        detail = one_line(str(exc).rpartition("can't allocate memory: ")[2]) or type(exc).__name__
        print(f"detector: error: not enough memory: {detail}", file=sys.stderr)
        return 2
    except Terminated:
        print("detector: terminated (SIGTERM); nothing partial was saved", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("detector: interrupted", file=sys.stderr)
        return 130
    finally:
        restore()


if __name__ == "__main__":
    sys.exit(main())
