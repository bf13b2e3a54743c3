"""``detector train`` and ``detector eval``: parsers and handlers, registered on the main CLI by

    from detector.train.cli import add_anchors_parser, add_eval_parser, add_train_parser
    add_train_parser(sub); add_eval_parser(sub); add_anchors_parser(sub)

Nothing heavy is imported until a handler runs (torch, OpenCV and pycocotools load inside the handlers).
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from detector.argtypes import ASIDE, value_parser
from detector.argtypes import add_inference_args as _add_inference_args
from detector.argtypes import batch_size as _batch_size
from detector.argtypes import non_negative_int as _non_negative_int
from detector.argtypes import positive_float as _positive_float
from detector.argtypes import positive_int as _positive_int
from detector.argtypes import processing_overrides as _processing_overrides
from detector.backends import backend_names
from detector.choices import check_names, check_runs_here, device_name
from detector.progress import progress

__all__ = ["add_anchors_parser", "add_eval_parser", "add_train_parser", "cmd_anchors", "cmd_eval", "cmd_train"]


_net_size = value_parser(_positive_int, lambda v: v % 32 == 0, "a multiple of 32", ASIDE)
# torch's generators take 64-bit seeds (seed, and seed + 1 on the device): past them, torch's traceback after the data
_torch_seed = value_parser(int, lambda v: 0 <= v <= 2**64 - 2, "an integer from 0 to 18446744073709551614", ASIDE)
# AdamW's first step (10 x lr) is a float32 in torch: past it, a traceback mid-training
_learning_rate = value_parser(float, lambda v: 0 < v <= 1e37, "a number > 0, at most 1e37", ASIDE)

# a pool starts all its render processes at once (10^12 were started until the machine ran out); a few per CPU is
# oversubscription, which still works
_MOST_WORKERS = 4 * (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1)
_workers = value_parser(int, lambda v: 0 <= v <= _MOST_WORKERS,
                        f"an integer from 0 to {_MOST_WORKERS}, 4 per CPU this process may use", ASIDE)


def _subcommand(subparsers: Any, handler: Callable[[argparse.Namespace], int], help: str,
                description: str) -> argparse.ArgumentParser:  # fmt: skip
    """The parser of subcommand ``handler``'s name without ``cmd_`` on ``subparsers`` (from
    ``ArgumentParser.add_subparsers``): abbreviated options refused, ``handler`` run with the parsed arguments."""
    p = subparsers.add_parser(handler.__name__.removeprefix("cmd_"), allow_abbrev=False, help=help,
                              description=description)  # fmt: skip
    p.set_defaults(func=handler)
    return p


def add_train_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``train`` on ``subparsers`` (from ``ArgumentParser.add_subparsers``); returns its parser."""
    p = _subcommand(subparsers, cmd_train, "train YOLOv4-tiny from scratch on synthetic frames",
                    "Train YOLOv4-tiny from scratch on frames of the synthetic video generator (training seeds 1000 "
                    "and up; 0, 7, 8, 9 are held out) and write Darknet weights plus <out>.txt saying how they were "
                    "made.")
    p.add_argument("--out", required=True, help="output .weights path (provenance goes to <out>.txt)")
    p.add_argument("--cfg", help="Darknet .cfg (default: the shipped two-class yolov4-tiny.cfg)")
    p.add_argument("--seed", type=_torch_seed, default=0, help="seed of init, sampling and augmentation (default: 0)")
    p.add_argument("--time-budget-s", type=_positive_float, default=480.0,
                   help="wall-time budget of the whole run, data and final evaluation included (default: 480)")
    p.add_argument("--steps", type=_positive_int, help="optimizer steps (default: as many as the budget allows)")
    g = p.add_argument_group("data")
    g.add_argument("--frames", type=_positive_int, default=16000, help="training frames in all (default: 16000)")
    g.add_argument("--frames-per-seed", type=_positive_int, default=25,
                   help="frames kept per generator seed / scene (default: 25, so 640 scenes)")
    g.add_argument("--frame-stride", type=_positive_int, default=2, help="keep every n-th rendered frame (default: 2)")
    g.add_argument("--seed-base", type=_positive_int, default=1000, help="first generator seed (default: 1000)")
    g.add_argument("--net-size", type=_net_size, help="train at this square input size (default: the cfg's)")
    g.add_argument("--no-codec", action="store_true", help="skip the mp4v round trip of the frames (default: do it)")
    g.add_argument("--workers", type=_workers,
                   help="render processes, 0 or 1 = in this process (default: CPUs - 1)")
    g = p.add_argument_group("optimisation")
    g.add_argument("--batch", type=_batch_size, default=64, help="images per step (default: 64)")
    g.add_argument("--lr", type=_learning_rate, default=2e-3, help="peak AdamW learning rate (default: 0.002)")
    g.add_argument("--warmup-steps", type=_non_negative_int, default=300, help="linear warm-up steps (default: 300)")
    g.add_argument("--device", type=str.lower, default="auto", help="auto, cpu, cuda or cuda:N, in any case (default: "
                   "auto)")
    g.add_argument("--amp", type=str.lower, choices=("auto", "bf16", "fp16", "off"), default="auto",
                   help="autocast dtype: auto = bf16 on CUDA, off on the CPU (default: auto)")
    g = p.add_argument_group("evaluation")
    g.add_argument("--eval-seed", type=int, action="append", dest="eval_seeds",
                   help="held-out video seed scored mid-run and at the end, repeatable (default: 7)")
    g.add_argument("--eval-frames", type=_non_negative_int, default=300,
                   help="frames of each evaluation video; 0 = no evaluation (default: 300)")
    g.add_argument("--no-mid-eval", action="store_true", help="skip the mid-run evaluation (default: run it)")
    g.add_argument("--cache-dir", help="detector cache; evaluation videos go to <cache>/videos (default: "
                   "$DETECTOR_CACHE or ~/.cache/detector)")
    g.add_argument("--log-every", type=_positive_int, default=100, help="steps between progress lines (default: 100)")
    return p


def add_eval_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``eval`` on ``subparsers``; returns its parser."""
    p = _subcommand(subparsers, cmd_eval, "mAP per class on held-out synthetic videos or a labelled video "
                    "(pycocotools)", "Score a model on held-out synthetic videos (seeds 7, 8, 9 are never trained on) "
                    "or on a labelled video (--video): COCO mAP@0.5 and mAP@0.5:0.95 per class, through the real "
                    "pipeline.")
    p.add_argument("--cfg", help="Darknet .cfg (default: the shipped two-class yolov4-tiny.cfg)")
    p.add_argument("--weights", help="Darknet .weights (default: the shipped weights)")
    source = p.add_mutually_exclusive_group()
    source.add_argument("--video-seed", type=int, action="append", dest="video_seeds",
                        help="held-out video seed, repeatable; several are scored together (default: 7, unless "
                        "--video)")
    source.add_argument("--video", help="score this labelled video instead of synthetic seeds (default: none)")
    p.add_argument("--ground-truth", metavar="JSON",
                   help="COCO json of --video: image id = frame index + 1, category id = class index + 1 named as "
                   "the model's classes (default: <video stem>.json beside the video, as make-video writes it)")
    p.add_argument("--frames", type=_positive_int, metavar="N", help="score the first N frames of each video "
                   "(default: 300 of a synthetic video, all of a --video)")
    p.add_argument("--backend", default="torch", help=f"{', '.join(backend_names())}, in any case (default: torch)")
    _add_inference_args(p, precisions="fp32 or fp16", batch=16, conf=0.001)
    p.add_argument("--cache-dir", help="detector cache: synthetic videos go to <cache>/videos, ONNX files and "
                   "engines beside them (default: $DETECTOR_CACHE or ~/.cache/detector)")
    p.add_argument("--json", help="also write the results as JSON to this path")
    return p


def add_anchors_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register ``anchors`` on ``subparsers``; returns its parser."""
    p = _subcommand(subparsers, cmd_anchors, "fit anchor boxes to the training boxes (k-means, 1 - IoU)",
                    "Render training frames, collect their boxes in network pixels and print k-means anchors for the "
                    "cfg's [yolo] sections, with the mean best-anchor IoU of the fitted and of the cfg's anchors.")
    p.add_argument("--cfg", help="Darknet .cfg whose anchors are compared (default: the shipped one)")
    p.add_argument("--frames", type=_positive_int, default=2000, help="training frames to collect (default: 2000)")
    p.add_argument("--frames-per-seed", type=_positive_int, default=50, help="frames per scene (default: 50)")
    p.add_argument("--seed-base", type=_positive_int, default=1000, help="first generator seed (default: 1000)")
    p.add_argument("--k", type=_positive_int, default=6, help="number of anchors (default: 6)")
    p.add_argument("--seed", type=int, default=0, help="k-means seed (default: 0)")
    return p


def cmd_anchors(args: argparse.Namespace) -> int:
    """Handler of ``anchors``: prints the fitted ``anchors = ...`` line and the two mean IoUs."""
    import numpy as np

    from detector.darknet import parse_cfg
    from detector.shipped import default_cfg_path
    from detector.train.anchors import kmeans_anchors, mean_best_iou
    from detector.train.data import DataParams, render_seed

    cfg = parse_cfg(Path(args.cfg) if args.cfg else default_cfg_path())
    data = DataParams(frames=args.frames, frames_per_seed=args.frames_per_seed, seed_base=args.seed_base,
                      net_size=cfg.input_size, codec=None)
    scenes = progress(enumerate(data.seeds), total=len(data.seeds), desc="rendering scenes", unit="scene")
    boxes = np.concatenate([b for i, seed in scenes for b in render_seed(seed, data, i).boxes])
    wh = boxes[:, 3:5] - boxes[:, 1:3]
    anchors = kmeans_anchors(wh, args.k, seed=args.seed)
    heads = [spec for _, spec in cfg.yolo_layers]
    used = sorted({m for h in heads for m in h.mask})
    current = np.array(heads[0].anchors, np.float64)
    print(f"{len(wh)} boxes from {data.describe()}")
    print("anchors = " + ",  ".join(f"{int(w)},{int(h)}" for w, h in anchors))
    print(f"mean best IoU: fitted {mean_best_iou(wh, anchors):.3f}, cfg's anchors in use {used} "
          f"{mean_best_iou(wh, current[used]):.3f}")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """Handler of ``detector train``."""
    device_name(args.device)  # a mistyped device or a bad cfg fails before torch loads
    cfg_size = _cfg_size(args.cfg)
    from detector.train.data import DataParams
    from detector.train.loop import TrainConfig, train

    net = (args.net_size, args.net_size) if args.net_size else cfg_size
    data = DataParams(frames=args.frames, frames_per_seed=args.frames_per_seed, stride=args.frame_stride,
                      seed_base=args.seed_base, net_size=net, codec=None if args.no_codec else "mp4v")
    config = TrainConfig(
        out=Path(args.out), cfg=Path(args.cfg) if args.cfg else None, seed=args.seed,
        time_budget_s=args.time_budget_s, steps=args.steps, batch=args.batch, device=args.device, data=data,
        lr=args.lr, warmup_steps=args.warmup_steps, amp=args.amp, workers=args.workers,
        eval_seeds=tuple(args.eval_seeds or (7,)) if args.eval_frames else (), eval_frames=args.eval_frames,
        mid_eval=not args.no_mid_eval, cache_dir=Path(args.cache_dir) if args.cache_dir else None,
        log_every=args.log_every,
    )
    result = train(config)
    print(f"wrote {result.weights} and {result.provenance}: {result.steps} steps, {result.images} images, "
          f"{result.wall_s:.0f} s (data {result.data_s:.0f} s, training {result.train_s:.0f} s)")
    if result.evaluation is not None:
        print(result.evaluation.table())
    return 0


def _cfg_size(cfg: str | None) -> tuple[int, int]:
    from detector.darknet import parse_cfg
    from detector.shipped import default_cfg_path

    return parse_cfg(Path(cfg) if cfg else default_cfg_path()).input_size


def cmd_eval(args: argparse.Namespace) -> int:
    """Handler of ``detector eval``: prints the per-class AP table, optionally writes JSON."""
    from detector.errors import DetectorError
    from detector.fileio import atomic_write_text
    from detector.train.evalrun import evaluate_seeds, model_spec

    if args.ground_truth and not args.video:
        raise DetectorError(f"--ground-truth '{args.ground_truth}' needs --video (synthetic seeds bring their own)")
    # names, the video and the model's files fail before torch loads
    args.backend = check_names([args.backend], args.device, args.precision)[0]
    if args.video:
        from detector.video import check_video_file

        check_video_file(args.video)
    spec = model_spec(args.cfg, args.weights, args.cache_dir)
    args.device = check_runs_here([args.backend], args.device, args.precision)  # auto: the device it runs on
    model = _model_fields(args, spec)
    if args.video:
        return _eval_video(args, model)
    seeds = tuple(args.video_seeds or (7,))
    frames = args.frames or 300
    results = evaluate_seeds(args.cfg, args.weights, video_seeds=seeds, frames=frames, device=args.device,
                              precision=args.precision, backend=args.backend, batch=args.batch,
                              cache_dir=args.cache_dir, conf_threshold=args.conf, iou_threshold=args.iou,
                              **_processing_overrides(args))
    for name, result in results.items():
        which = f"held-out seeds {','.join(map(str, seeds))}" if name == "all" else f"held-out {name}"
        print(f"{args.backend} {args.precision} on {args.device}, {which}, {frames} frames each, "
              f"weights {model['weights_shown']}:")
        print(result.table())
    if args.json:
        payload = {"backend": args.backend, "precision": args.precision, "device": args.device,
                   "video_seeds": list(seeds), "frames": frames, **model["json"],
                   "conf_threshold": args.conf, "iou_threshold": args.iou, **results["all"].to_dict(),
                   "per_seed": {name: r.to_dict() for name, r in results.items() if name != "all"}}
        atomic_write_text(Path(args.json), json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


def _model_fields(args: argparse.Namespace, spec: Any) -> dict[str, Any]:
    """What ``eval`` says of the model it scored: ``weights_shown`` for its header line (the file, "shipped", or
    seeded random weights of a cfg without them) and ``json``, its fields of the ``--json`` file."""
    random = spec.weights is None
    shown = "seeded random (no weights for this cfg)" if random else args.weights or "shipped"
    return {"weights_shown": shown,
            "json": {"cfg": str(spec.cfg), "weights": None if random else str(spec.weights), "random_weights": random,
                     "resize": args.resize, "nms": args.nms}}


def _eval_video(args: argparse.Namespace, model: dict[str, Any]) -> int:
    """``detector eval --video``: the AP table of one labelled video, optionally written as JSON."""
    from detector.fileio import atomic_write_text
    from detector.train.evalrun import evaluate_video

    score = evaluate_video(args.video, args.ground_truth, cfg=args.cfg, weights=args.weights, frames=args.frames,
                           device=args.device, precision=args.precision, backend=args.backend, batch=args.batch,
                           cache_dir=args.cache_dir, conf_threshold=args.conf, iou_threshold=args.iou,
                           **_processing_overrides(args))
    print(f"{args.backend} {args.precision} on {args.device}, {score.video}, {score.frames} frames, ground truth "
          f"{score.ground_truth}, weights {model['weights_shown']}:")
    print(score.result.table())
    if args.json:
        payload = {"backend": args.backend, "precision": args.precision, "device": args.device,
                   "video": str(score.video), "ground_truth": str(score.ground_truth), "frames": score.frames,
                   **model["json"], "conf_threshold": args.conf, "iou_threshold": args.iou,
                   **score.result.to_dict()}
        atomic_write_text(Path(args.json), json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0
