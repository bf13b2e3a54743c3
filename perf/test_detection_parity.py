"""Parity: every candidate backend and precision against the reference, torch fp32 on the same device (ONNX Runtime
fp32 when the model under test is an ONNX file without a Darknet cfg).

Two levels, with the pass criteria in :data:`perf.measure.parity.TOLERANCES` (per candidate precision):

* tensor level -- the decoded outputs before NMS: max / mean / p99 absolute error of boxes (network pixels,
  over candidates the reference scores >= 0.05) and of the per-class scores;
* detection level -- after NMS, per frame, detections matched one-to-one by IoU >= 0.5 (Hungarian assignment,
  class-agnostic): match rate (unmatched detections within the score tolerance of the confidence threshold
  count as borderline, not as misses), mean IoU of the matches, largest score difference of a match, class
  agreement among the matches. A failure lists the worst frames.

mAP@0.5 and mAP@0.5:0.95 against the video's ground truth (the synthetic video's, or ``--perf-ground-truth``) are
reported for the reference and for every candidate; the reference must reach ``--perf-min-map`` (by default 0.5
for the shipped model, no floor for another).
"""

from __future__ import annotations

from typing import Any

import pytest

from perf.measure.cases import Case, reference_case
from perf.measure.parity import TOLERANCES, compare_detections, compare_tensors, format_worst_frames, report_row
from perf.report import schema

pytestmark = pytest.mark.parity

#: Frames per inference call in the parity runs.
PARITY_BATCH = 8


def _reference(config: pytest.Config) -> tuple[str, str]:
    """The reference (variant, precision) of this run's model (`perf.measure.cases.reference_case`)."""
    from perf.session import PERF_SESSION

    return reference_case(config.stash[PERF_SESSION].subject)


def _run(runner: Any, batches: list[Any]) -> tuple[Any, list[Any]]:
    import numpy as np

    from detector.postprocess import postprocess

    decoded, detections = [], []
    for tensor, transforms in batches:
        out = runner.infer(tensor)
        decoded.append(out.numpy())
        detections.extend(postprocess(out, transforms, nms=runner.spec.nms))  # the NMS the cfg asks for
    return np.concatenate(decoded), detections


@pytest.fixture(scope="module")
def parity_batches(perf_video: Any, runner_pool: Any) -> list[Any]:
    """The video's frames, preprocessed, in batches of PARITY_BATCH: list of (tensor, transforms)."""
    from detector.preprocess import preprocess
    from detector.video import read_frames

    frames = read_frames(perf_video.path, limit=perf_video.frames)
    size, mode = runner_pool.spec.input_size, runner_pool.spec.preprocess_mode
    return [preprocess(frames[i:i + PARITY_BATCH], size, mode) for i in range(0, len(frames), PARITY_BATCH)]


@pytest.fixture(scope="module")
def reference(pytestconfig: pytest.Config, parity_batches: list[Any], runner_pool: Any) -> tuple[Any, list[Any]]:
    """Decoded outputs [F, N, 4+C] and per-frame detections of the reference runner."""
    runner = runner_pool.get(*_reference(pytestconfig))
    return _run(runner, parity_batches)


def _accuracy(perf_video: Any, detections: list[Any], names: Any) -> Any:
    from detector.evaluate import evaluate_coco

    return evaluate_coco(perf_video.ground_truth, {i + 1: d for i, d in enumerate(detections)}, names=names)


def _accuracy_row(label: str, result: Any) -> dict[str, Any]:
    return {"backend": label, "mAP@0.5": result.map50, "mAP@0.5:0.95": result.map50_95,
            "per class AP@0.5": ", ".join(f"{k} {v.ap50:.3f}" for k, v in result.per_class.items())}


def test_reference_accuracy(pytestconfig: pytest.Config, reference: Any, perf_video: Any, runner_pool: Any,
                            perf_report: Any) -> None:  # fmt: skip
    from perf.session import PERF_SESSION

    if perf_video.ground_truth is None:
        pytest.skip(f"no ground truth for {perf_video.path}: give --perf-ground-truth (or put "
                    f"{perf_video.path.with_suffix('.json').name} beside it) to score it")
    backend, precision = _reference(pytestconfig)
    result = _accuracy(perf_video, reference[1], runner_pool.spec.names)
    perf_report.add(schema.ACCURACY, _accuracy_row(f"{backend} {precision} (reference)", result))
    subject = pytestconfig.stash[PERF_SESSION].subject
    floor = subject.min_map50()
    if floor is None:
        pytest.skip(f"mAP@0.5 {result.map50:.3f} reported, not checked: no --perf-min-map for this model")
    if runner_pool.spec.weights is None and runner_pool.spec.cfg is not None and subject.min_map is None:
        pytest.skip(f"seeded random weights: mAP@0.5 {result.map50:.3f} reported, not checked")
    assert result.map50 >= floor, (
        f"reference mAP@0.5 {result.map50:.3f} < {floor} on {perf_video.path}\n{result.table()}")


def test_detection_parity(pytestconfig: pytest.Config, candidate: Case, reference: Any, parity_batches: list[Any],
                          runner_pool: Any, perf_video: Any, perf_report: Any) -> None:
    runner = runner_pool.get(candidate.backend, candidate.precision, **candidate.options)
    decoded, detections = _run(runner, parity_batches)
    tol = TOLERANCES[candidate.precision]

    tensors = compare_tensors(reference[0], decoded)
    parity = compare_detections(reference[1], detections, score_tolerance=tol.score_abs)
    failures = tensors.failures(tol) + parity.failures(tol)

    perf_report.add(schema.PARITY,  # the table "vs torch fp32" (ONNX Runtime fp32 for an ONNX-only model)
                    report_row(candidate.label, candidate.backend, candidate.precision, failures, tensors, parity))
    if perf_video.ground_truth is not None:
        perf_report.add(schema.ACCURACY,
                        _accuracy_row(candidate.label, _accuracy(perf_video, detections, runner_pool.spec.names)))

    assert not failures, (
        f"{candidate.label} on {runner.device} disagrees with {' '.join(_reference(pytestconfig))} over "
        f"{len(detections)} frames: "
        + "; ".join(failures) + f"\ntensor stats: {tensors}\n" + format_worst_frames(parity))
