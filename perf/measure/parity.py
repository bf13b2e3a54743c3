"""Parity of a candidate backend with the reference, before NMS and after it (docs/method.md, section 7)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from detector.postprocess import Detections


@dataclass(frozen=True)
class Tolerance:
    """Pass criteria for one precision (see :data:`TOLERANCES`)."""

    score_abs: float  # max |score_ref - score_cand| over all decoded candidates
    box_abs_px: float  # max |box_ref - box_cand| (network pixels) over candidates scoring >= 0.05 in the reference
    match_rate: float  # matched / (detections - borderline), over all frames, at least
    mean_iou: float  # mean IoU of the matched pairs, at least
    match_score_abs: float  # max |score difference| of a matched pair
    class_agreement: float  # fraction of matched pairs with the same class, at least


#: Criteria per candidate precision. fp32 allows for TF32 convolutions and different kernel orderings; fp16
#: and int8 for their rounding.
TOLERANCES: dict[str, Tolerance] = {
    "fp32": Tolerance(2e-3, box_abs_px=0.5, match_rate=0.99, mean_iou=0.99, match_score_abs=2e-3, class_agreement=1.0),
    "fp16": Tolerance(3e-2, box_abs_px=3.0, match_rate=0.95, mean_iou=0.95, match_score_abs=3e-2, class_agreement=0.99),
    "int8": Tolerance(0.15, box_abs_px=10.0, match_rate=0.85, mean_iou=0.85, match_score_abs=0.15,
                      class_agreement=0.95),
}


@dataclass
class TensorStats:
    """Error statistics of decoded outputs (boxes in network pixels, scores in [0, 1])."""

    box_max_abs: float
    box_mean_abs: float
    box_p99_abs: float
    score_max_abs: float
    score_mean_abs: float
    score_p99_abs: float
    score_max_rel: float  # over reference scores >= 0.05
    candidates: int

    def failures(self, tol: Tolerance) -> list[str]:
        """Human-readable violations of ``tol`` (empty when the tensors agree; NaN fails)."""
        return [text for ok, text in (
            (self.score_max_abs <= tol.score_abs,
             f"score max abs error {self.score_max_abs:.3g} > {tol.score_abs:g}"),
            (self.box_max_abs <= tol.box_abs_px,
             f"box max abs error {self.box_max_abs:.3g} px > {tol.box_abs_px:g} px")) if not ok]  # fmt: skip


def compare_tensors(reference: np.ndarray, candidate: np.ndarray, *, min_score: float = 0.05) -> TensorStats:
    """Error statistics between two decoded outputs [B, N, 4 + C]; box errors only where the best reference score
    is >= ``min_score`` (boxes nobody keeps are irrelevant and, through ``exp``, the noisiest)."""
    ref, cand = np.asarray(reference, dtype=np.float64), np.asarray(candidate, dtype=np.float64)
    if ref.shape != cand.shape:
        raise ValueError(f"decoded shapes differ: reference {ref.shape}, candidate {cand.shape}")
    if ref.ndim != 3 or ref.shape[-1] < 5:
        raise ValueError(f"decoded outputs of shape {ref.shape}: expected [B, N, 4 + C], C >= 1 class scores")
    candidates = int(ref.shape[0] * ref.shape[1])
    if not candidates:  # nothing decoded by either: nothing differs
        return TensorStats(*[0.0] * 7, 0)
    if not np.isfinite(cand).all():
        return TensorStats(*[math.nan] * 7, candidates)
    scores = ref[..., 4:]
    score_err = np.abs(scores - cand[..., 4:])
    box_err = np.abs(ref[..., :4] - cand[..., :4])[scores.max(axis=-1) >= min_score].ravel()
    relevant = scores >= min_score
    rel = score_err[relevant] / scores[relevant] if relevant.any() else np.zeros(1)
    box_err = box_err if box_err.size else np.zeros(1)
    spread = [(e.max(), e.mean(), np.percentile(e, 99)) for e in (box_err, score_err)]
    return TensorStats(*map(float, (*spread[0], *spread[1], rel.max())), candidates)


@dataclass
class FrameParity:
    """Detection-level comparison of one frame."""

    frame: int
    reference: int
    candidate: int
    matched: int
    borderline: int
    mean_iou: float
    max_score_diff: float
    class_disagreements: int
    ious: tuple[float, ...] = ()  # IoU of each matched pair

    @property
    def missed(self) -> int:
        """Unmatched, non-borderline detections on either side."""
        return self.reference + self.candidate - 2 * self.matched - self.borderline


@dataclass
class DetectionParity:
    """Detection-level comparison over all frames, with the per-frame detail for failure messages."""

    frames: list[FrameParity] = field(default_factory=list)

    matched = property(lambda self: sum(f.matched for f in self.frames))
    borderline = property(lambda self: sum(f.borderline for f in self.frames))
    reference_detections = property(lambda self: sum(f.reference for f in self.frames))
    max_score_diff = property(lambda self: max((f.max_score_diff for f in self.frames), default=0.0))

    @property
    def match_rate(self) -> float:
        """Matched pairs over the larger side's detections, borderline ones excluded (1.0 when none)."""
        total = sum(max(f.reference, f.candidate) - f.borderline for f in self.frames)
        return self.matched / total if total > 0 else 1.0

    @property
    def mean_iou(self) -> float:
        return sum(f.mean_iou * f.matched for f in self.frames) / self.matched if self.matched else 1.0

    def ious(self, digits: int = 4) -> list[float]:
        """IoU of every matched pair, frame by frame, rounded to ``digits`` decimals (the report's histogram)."""
        return [round(iou, digits) for f in self.frames for iou in f.ious]

    @property
    def class_agreement(self) -> float:
        return 1.0 - sum(f.class_disagreements for f in self.frames) / self.matched if self.matched else 1.0

    def failures(self, tol: Tolerance) -> list[str]:
        """Human-readable violations of ``tol`` (empty when the detections agree). A reference with no boxes on the
        compared frames is a failure: every other check passes on nothing, so parity would say nothing."""
        if self.reference_detections == 0:
            return [f"the reference found no boxes on the {len(self.frames)} compared frame(s): nothing to compare "
                    "(a model that detects nothing cannot show parity; check the model, its classes and the video)"]
        return [text for bad, text in (
            (self.match_rate < tol.match_rate, f"match rate {self.match_rate:.4f} < {tol.match_rate}"),
            (self.mean_iou < tol.mean_iou, f"mean IoU {self.mean_iou:.4f} < {tol.mean_iou}"),
            (self.max_score_diff > tol.match_score_abs,
             f"matched score difference {self.max_score_diff:.3g} > {tol.match_score_abs:g}"),
            (self.class_agreement < tol.class_agreement,
             f"class agreement {self.class_agreement:.4f} < {tol.class_agreement}")) if bad]  # fmt: skip

    def worst_frames(self, n: int = 5) -> list[FrameParity]:
        """The ``n`` frames with the most unmatched detections, then the lowest mean IoU."""
        return sorted(self.frames, key=lambda f: (-f.missed, -f.class_disagreements, f.mean_iou))[:n]


def compare_frame(frame: int, reference: Detections, candidate: Detections, *, iou_threshold: float = 0.5,
                  conf_threshold: float = 0.25, score_tolerance: float = 0.0) -> FrameParity:  # fmt: skip
    """Match one frame's detections one-to-one by IoU (class-agnostic) and measure the agreement."""
    from detector.boxes import match_detections

    pairs = match_detections(reference.boxes, reference.classes, candidate.boxes, candidate.classes,
                             iou_threshold=iou_threshold, class_aware=False)  # fmt: skip
    matched = ({i for i, _, _ in pairs}, {j for _, j, _ in pairs})
    borderline = sum(k not in side and float(s) <= conf_threshold + score_tolerance
                     for dets, side in zip((reference, candidate), matched)
                     for k, s in enumerate(dets.scores))  # fmt: skip
    ious = tuple(float(iou) for _, _, iou in pairs)
    score_diffs = [abs(float(reference.scores[i]) - float(candidate.scores[j])) for i, j, _ in pairs]
    return FrameParity(frame, len(reference), len(candidate), len(pairs), borderline,
                       sum(ious) / len(ious) if ious else 1.0, max(score_diffs, default=0.0),
                       sum(int(reference.classes[i] != candidate.classes[j]) for i, j, _ in pairs), ious)


def compare_detections(reference: Sequence[Detections], candidate: Sequence[Detections], *, iou_threshold: float = 0.5,
                       conf_threshold: float = 0.25, score_tolerance: float = 0.0) -> DetectionParity:  # fmt: skip
    """Frame-by-frame :func:`compare_frame` over two equally long sequences of detections."""
    if len(reference) != len(candidate):
        raise ValueError(f"frame counts differ: reference {len(reference)}, candidate {len(candidate)}")
    options = {"iou_threshold": iou_threshold, "conf_threshold": conf_threshold, "score_tolerance": score_tolerance}
    return DetectionParity([compare_frame(i, *pair, **options) for i, pair in enumerate(zip(reference, candidate))])


def report_row(label: str, backend: str, precision: str, failures: Sequence[str], tensors: TensorStats,
               parity: DetectionParity) -> dict[str, Any]:
    """The `perf.report.schema.PARITY` row of one candidate, ``ious`` (4 decimals) for the HTML report's histograms."""
    return {"candidate": label, "verdict": "FAIL" if failures else "pass",
            "reference boxes": parity.reference_detections, "match rate": parity.match_rate,
            "mean IoU": parity.mean_iou, "max score diff": parity.max_score_diff,
            "class agreement": parity.class_agreement, "borderline": parity.borderline,
            "score max abs": tensors.score_max_abs, "box max abs px": tensors.box_max_abs, "backend": backend,
            "precision": precision, "failures": list(failures), "ious": parity.ious()}  # fmt: skip


def format_worst_frames(parity: DetectionParity, n: int = 5) -> str:
    """A few lines describing the worst frames, for assertion messages."""
    return "\n".join(["worst frames (frame: ref/cand detections, matched, borderline, mean IoU, max score diff, class "
                      "flips):"] + [f"  frame {f.frame}: {f.reference}/{f.candidate}, matched {f.matched}, borderline "
                                   f"{f.borderline}, IoU {f.mean_iou:.3f}, score diff {f.max_score_diff:.3g}, class "
                                   f"flips {f.class_disagreements}" for f in parity.worst_frames(n)])  # fmt: skip
