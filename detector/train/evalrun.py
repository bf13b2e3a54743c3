"""Accuracy on held-out synthetic videos through the real pipeline pieces.

The video is the cached synthetic video (:func:`detector.synthetic.synthetic_video`, mp4v, 960x540) of each
held-out seed, read through :func:`detector.frames.open_frames` (OpenCV) and run through the loops' stage chain
(:class:`detector.stages.StageChain`: letterbox, a runner (``evaluate_weights``) or an in-memory model
(``evaluate_model``, used during training), postprocess) and scored by :func:`detector.evaluate.evaluate_coco`
(pycocotools). Several seeds are scored as one data set
(their ground truths merged, image ids offset per seed). :func:`evaluate_video` scores a user's labelled video
the same way against its COCO ground truth (image id = frame index + 1, category id = class + 1, as
:func:`detector.synthetic.make_synthetic_video` writes them).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from detector.errors import DetectorError
from detector.groundtruth import check_categories, check_labels, load_ground_truth
from detector.progress import progress

if TYPE_CHECKING:
    import torch

    from detector.darknet import NmsConfig
    from detector.evaluate import EvalResult
    from detector.postprocess import Detections
    from detector.spec import ModelSpec
    from detector.stages import StageChain

log = logging.getLogger(__name__)

__all__ = ["DEFAULT_EVAL_SEEDS", "VideoScore", "check_categories", "default_ground_truth", "detect_video",
           "eval_chain", "evaluate_model", "evaluate_seeds", "evaluate_video", "evaluate_weights",
           "require_pycocotools", "video_cache"]

DEFAULT_EVAL_SEEDS = (7,)
"""Held-out generator seeds scored by default (7, 8 and 9 are held out; see detector.train.data)."""
EVAL_CONF_THRESHOLD = 0.001  # the usual COCO-mAP setting: keep nearly every candidate, rank by score
EVAL_IOU_THRESHOLD = 0.45
_IMAGE_ID_STRIDE = 1_000_000  # merged ground truth: image id = seed index * stride + frame index + 1

Infer = Callable[[np.ndarray], Any]  # float32 [B, 3, H, W] RGB [0, 1] -> decoded [B, N, 4 + C]


def require_pycocotools() -> None:
    """DetectorError with the fix when pycocotools (the COCO evaluator) cannot be imported."""
    try:
        import pycocotools.cocoeval  # noqa: F401
    except ImportError as e:
        raise DetectorError("mAP needs pycocotools, which is not installed here: pip install pycocotools "
                            "(or a carried wheel); the weights are saved, score them later with 'detector eval'") from e


def eval_chain(spec: ModelSpec, *, conf_threshold: float = EVAL_CONF_THRESHOLD,
               iou_threshold: float = EVAL_IOU_THRESHOLD, letterbox: bool | None = None,
               nms: NmsConfig | str | None = None) -> StageChain:
    """The stage chain that scores a model of ``spec``: the loops' :class:`~detector.pipeline.LoopSettings` with the
    evaluation's thresholds, and a frame's `COCO_MAX_DETECTIONS` best kept (all that COCO scores: the detections of a
    long video at a score of 0.001 need not all be held); ``letterbox`` and ``nms`` None: the cfg's
    (:func:`detector.pipeline.cfg_processing`)."""
    from detector.evaluate import COCO_MAX_DETECTIONS
    from detector.pipeline import LoopSettings
    from detector.stages import StageChain

    settings = LoopSettings(conf_threshold=conf_threshold, iou_threshold=iou_threshold, letterbox=letterbox, nms=nms)
    return dataclasses.replace(StageChain.of(spec, settings), max_detections=COCO_MAX_DETECTIONS)


def detect_video(infer: Infer, video: str | os.PathLike[str], chain: StageChain, *, frames: int | None = None,
                 batch: int = 16) -> dict[int, Detections]:
    """Detections (frame pixels) of the first ``frames`` frames of ``video``, ``batch`` frames per ``infer`` call,
    through ``chain``, keyed by COCO image id (frame index + 1, the synthetic ground truth's convention)."""
    from detector.frames import open_frames

    out: dict[int, Detections] = {}
    with open_frames(video) as source:
        known = [n for n in (frames, source.frame_count) if n]  # frame_count 0: the container does not say
        total = min(known) if known else None
        index = 0
        with progress(total=total, desc=f"detecting {Path(video).name}", unit="frame") as bar:
            while chunk := source.read(batch if frames is None else min(batch, frames - index)):
                for det in chain.detect(source, chunk, infer):
                    index += 1
                    out[index] = det
                bar.update(len(chunk))
    return out


def _merged_ground_truth(gt_paths: Sequence[Path], frames: int, folder: Path) -> Path:
    """One COCO json of the first ``frames`` images of each ground truth, image ids offset per file."""
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    categories: list[dict[str, Any]] = []
    for k, path in enumerate(gt_paths):
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        categories = data["categories"]
        offset = k * _IMAGE_ID_STRIDE
        keep = {img["id"] for img in data["images"] if img["id"] <= frames}
        images += [{**img, "id": img["id"] + offset} for img in data["images"] if img["id"] in keep]
        for ann in data["annotations"]:
            if ann["image_id"] in keep:
                annotations.append({**ann, "id": len(annotations) + 1, "image_id": ann["image_id"] + offset})
    path = folder / "ground-truth.json"
    path.write_text(json.dumps({"images": images, "annotations": annotations, "categories": categories}),
                    encoding="utf-8")
    return path


def _evaluate(infer: Infer, chain: StageChain, *, names: Sequence[str] | None, video_seeds: Sequence[int],
              frames: int, cache_dir: Path, batch: int, per_seed: bool = False) -> dict[str, EvalResult]:
    """``{"all": result}`` over all seeds together, plus ``{"seed N": result}`` each when ``per_seed``."""
    from detector.evaluate import evaluate_coco
    from detector.synthetic import synthetic_video

    require_pycocotools()
    if not video_seeds:
        raise DetectorError("no video seed to evaluate on; give at least one (held out: 7, 8, 9)")
    detections: list[dict[int, Detections]] = []
    gts = []
    for seed in video_seeds:
        video = synthetic_video(cache_dir, seed=int(seed), frames=frames)
        gts.append(video.gt_json)
        detections.append(detect_video(infer, video.video, chain, frames=frames, batch=batch))
    results = {}
    with tempfile.TemporaryDirectory(prefix="detector-eval-") as tmp:
        merged = {k * _IMAGE_ID_STRIDE + i: d for k, dets in enumerate(detections) for i, d in dets.items()}
        results["all"] = evaluate_coco(_merged_ground_truth(gts, frames, Path(tmp)), merged, names=names)
        if per_seed and len(video_seeds) > 1:
            for seed, gt, dets in zip(video_seeds, gts, detections):
                one = Path(tmp) / f"seed{seed}"
                one.mkdir()
                results[f"seed {seed}"] = evaluate_coco(_merged_ground_truth([gt], frames, one), dets, names=names)
    return results


def video_cache(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """Where the evaluation videos are cached: ``<cache_dir>/videos``, by default under the detector cache
    (``$DETECTOR_CACHE`` or ``~/.cache/detector``), shared with the CLI and the suite."""
    from detector.spec import default_cache_dir

    return (Path(cache_dir) if cache_dir else default_cache_dir()) / "videos"


def evaluate_model(model: torch.nn.Module, *, video_seeds: Sequence[int] = DEFAULT_EVAL_SEEDS, frames: int = 300,
                   cache_dir: str | os.PathLike[str] | None = None, batch: int = 32,
                   conf_threshold: float = EVAL_CONF_THRESHOLD, iou_threshold: float = EVAL_IOU_THRESHOLD,
                   names: Sequence[str] | None = None, net_size: tuple[int, int] | None = None) -> EvalResult:
    """Score an in-memory :class:`~detector.model.DarknetModel` (on its own device and dtype, in eval mode for
    the call) on held-out videos, cached under ``<cache_dir>/videos`` (see :func:`video_cache`)."""
    import torch

    from detector.stages import StageChain

    param = next(model.parameters())
    was_training = model.training
    model.eval()
    channels_last = param.dim() == 4 and param.is_contiguous(memory_format=torch.channels_last)

    def infer(x: np.ndarray) -> torch.Tensor:
        t = torch.from_numpy(x).to(param.device, param.dtype, non_blocking=True)
        if channels_last:
            t = t.contiguous(memory_format=torch.channels_last)
        with torch.no_grad():
            return model(t).float()

    try:
        # the cfg's NMS, as `detector eval` scores the saved weights (`eval_chain`); letterbox, as training feeds it
        chain = StageChain(tuple(net_size or model.input_size), "letterbox", model.cfg.nms, conf_threshold,
                           iou_threshold)  # fmt: skip
        return _evaluate(infer, chain, names=names or model.names, video_seeds=video_seeds, frames=frames,
                         cache_dir=video_cache(cache_dir), batch=batch)["all"]
    finally:
        model.train(was_training)


def model_spec(cfg: str | os.PathLike[str] | None, weights: str | os.PathLike[str] | None,
               cache_dir: str | os.PathLike[str] | None = None) -> Any:
    """The :class:`~detector.spec.ModelSpec` of ``cfg`` / ``weights`` (defaults: the shipped ones; a cfg without
    weights: seeded random ones), its files checked (:meth:`~detector.spec.ModelSpec.check_files`, and the class
    names beside the cfg read; no torch)."""
    from detector.spec import ModelSpec

    base = ModelSpec.default(cache_dir=cache_dir)
    spec = ModelSpec(cfg=Path(cfg) if cfg else base.cfg,
                     weights=Path(weights) if weights else (base.weights if cfg is None else None),
                     cache_dir=base.cache_dir)
    spec.check_files()
    spec.names  # noqa: B018 - an unreadable classes.names beside the cfg is refused before the model loads
    return spec


def _spec_and_device(cfg: str | os.PathLike[str] | None, weights: str | os.PathLike[str] | None,
                     cache_dir: str | os.PathLike[str] | None, device: str) -> tuple[Any, str]:
    """The :class:`~detector.spec.ModelSpec` of ``cfg`` / ``weights`` (defaults: the shipped ones) and the device,
    ``auto`` resolved."""
    from detector.choices import resolve_device

    spec = model_spec(cfg, weights, cache_dir)
    device = resolve_device(device)
    if spec.weights is None:
        log.warning("evaluating seeded random weights: no --weights given and none shipped")
    return spec, device


def evaluate_seeds(cfg: str | os.PathLike[str] | None = None, weights: str | os.PathLike[str] | None = None, *,
                     video_seeds: Sequence[int] = DEFAULT_EVAL_SEEDS, frames: int = 300, device: str = "auto",
                     precision: str = "fp32", backend: str = "torch", batch: int = 16,
                     cache_dir: str | os.PathLike[str] | None = None, conf_threshold: float = EVAL_CONF_THRESHOLD,
                     iou_threshold: float = EVAL_IOU_THRESHOLD, letterbox: bool | None = None,
                     nms: NmsConfig | str | None = None,
                     runner_options: dict[str, Any] | None = None) -> dict[str, EvalResult]:
    """mAP@0.5 and mAP@0.5:0.95 (overall and per class) of a Darknet model on held-out synthetic videos:
    ``{"all": all seeds scored together, "seed 7": ..., "seed 8": ...}`` (per-seed entries only for several
    seeds). The detections are computed once per video.

    Args:
        cfg, weights: Darknet files (defaults: the shipped cfg and weights; no weights -> seeded random ones).
        video_seeds: generator seeds of the videos (held out from training: 7, 8, 9), scored together.
        frames: frames per video (its first ``frames``). device: ``auto``, ``cpu``, ``cuda``, ``cuda:N``.
        precision, backend, runner_options: what runs the model (:func:`detector.backends.create_runner`).
        batch: frames per inference. cache_dir: detector cache (videos under ``videos/``).
        conf_threshold, iou_threshold: postprocess thresholds (COCO-mAP practice: 0.001 and 0.45).
        letterbox, nms: letterbox (True) or plain resize (False), and the NMS; None (default): what the cfg says,
            as the pipeline's options (:func:`detector.pipeline.cfg_processing`).

    Returns:
        name -> :class:`detector.evaluate.EvalResult` (``.table()`` prints the per-class AP table).
    """
    from detector.backends import create_runner

    spec, device = _spec_and_device(cfg, weights, cache_dir, device)
    require_pycocotools()
    chain = eval_chain(spec, conf_threshold=conf_threshold, iou_threshold=iou_threshold, letterbox=letterbox, nms=nms)
    with create_runner(backend, spec, device=device, precision=precision, **(runner_options or {})) as runner:
        return _evaluate(lambda x: runner.infer(x), chain, names=spec.names, video_seeds=video_seeds, frames=frames,
                         cache_dir=video_cache(spec.cache_dir), batch=batch, per_seed=True)


def evaluate_weights(cfg: str | os.PathLike[str] | None = None, weights: str | os.PathLike[str] | None = None, *,
                     video_seeds: Sequence[int] = DEFAULT_EVAL_SEEDS, frames: int = 300, device: str = "auto",
                     precision: str = "fp32", **options: Any) -> EvalResult:
    """:func:`evaluate_seeds` scored over all ``video_seeds`` together (same arguments): one
    :class:`detector.evaluate.EvalResult` with per-class AP@0.5 and AP@0.5:0.95."""
    return evaluate_seeds(cfg, weights, video_seeds=video_seeds, frames=frames, device=device, precision=precision,
                          **options)["all"]


def default_ground_truth(video: str | os.PathLike[str]) -> Path:
    """The ground truth of ``video`` when none is named: ``<video stem>.json`` beside it, where
    :func:`detector.synthetic.make_synthetic_video` writes it."""
    return Path(video).with_suffix(".json")


@dataclasses.dataclass(frozen=True)
class VideoScore:
    """The score of a labelled video: ``result`` over its first ``frames`` frames against ``ground_truth``."""

    video: Path
    ground_truth: Path
    frames: int
    result: EvalResult


def evaluate_video(video: str | os.PathLike[str], ground_truth: str | os.PathLike[str] | None = None, *,
                   cfg: str | os.PathLike[str] | None = None, weights: str | os.PathLike[str] | None = None,
                   frames: int | None = None, device: str = "auto", precision: str = "fp32", backend: str = "torch",
                   batch: int = 16, cache_dir: str | os.PathLike[str] | None = None,
                   conf_threshold: float = EVAL_CONF_THRESHOLD, iou_threshold: float = EVAL_IOU_THRESHOLD,
                   letterbox: bool | None = None, nms: NmsConfig | str | None = None,
                   runner_options: dict[str, Any] | None = None) -> VideoScore:
    """mAP@0.5 and mAP@0.5:0.95 (overall and per class) of a Darknet model on a user's labelled video.

    Args:
        video: the video file. ground_truth: its COCO json (default: :func:`default_ground_truth`); image id
            ``i`` labels frame ``i - 1``, category id ``k + 1`` is class ``k`` named ``names[k]``
            (:func:`check_categories`). Frames without an image in it are not scored.
        frames: score the first ``frames`` frames (default: all). The other arguments: as :func:`evaluate_seeds`.

    Raises:
        DetectorError: (one line naming the file) the video or ground truth is missing, unreadable or malformed,
            its categories are not the model's classes, it labels none of the frames to score or no box in them,
            frames the video does not have (counted by decoding) or frames of another size
            (:func:`~detector.groundtruth.check_labels`); raised before the model is loaded.
    """
    from detector.backends import create_runner
    from detector.evaluate import evaluate_coco
    from detector.video import open_video

    require_pycocotools()
    video = Path(video)
    gt_path = Path(ground_truth) if ground_truth is not None else default_ground_truth(video)
    open_video(video).close()
    data = load_ground_truth(gt_path)
    spec, device = _spec_and_device(cfg, weights, cache_dir, device)
    check_categories(data, spec.names, gt_path)
    scored = check_labels(data, gt_path, video, frames=frames)
    chain = eval_chain(spec, conf_threshold=conf_threshold, iou_threshold=iou_threshold, letterbox=letterbox, nms=nms)
    with create_runner(backend, spec, device=device, precision=precision, **(runner_options or {})) as runner:
        detections = detect_video(lambda x: runner.infer(x), video, chain, frames=frames, batch=batch)
    decoded = len(detections)
    if max(scored) > decoded:
        raise DetectorError(f"ground truth '{gt_path}' labels image id {max(scored)} (frame {max(scored) - 1}) but "
                            f"'{video}' has only {decoded} frames; image id = frame index + 1")
    if len(scored) < decoded:
        log.info("%s labels %d of the %d frames scored; the others are left out", gt_path, len(scored), decoded)
    subset = {"images": [{**img, "id": int(img["id"])} for img in data["images"] if int(img["id"]) in scored],
              "annotations": [{**ann, "image_id": int(ann["image_id"])} for ann in data["annotations"]
                              if int(ann["image_id"]) in scored],
              "categories": data["categories"]}
    with tempfile.TemporaryDirectory(prefix="detector-eval-") as tmp:
        path = Path(tmp) / "ground-truth.json"
        path.write_text(json.dumps(subset), encoding="utf-8")
        result = evaluate_coco(path, {i: d for i, d in detections.items() if i in scored}, names=spec.names)
    return VideoScore(video, gt_path, decoded, result)
