"""Parity: every candidate backend and precision against the reference, torch fp32 on the same device.

Two levels, with the pass criteria in :data:`perf.parity.TOLERANCES` (per candidate precision):

* tensor level -- the decoded outputs before NMS: max / mean / p99 absolute error of boxes (network pixels,
  over candidates the reference scores >= 0.05) and of the per-class scores;
* detection level -- after NMS, per frame, detections matched one-to-one by IoU >= 0.5 (Hungarian assignment,
  class-agnostic): match rate (unmatched detections within the score tolerance of the confidence threshold
  count as borderline, not as misses), mean IoU of the matches, largest score difference of a match, class
  agreement among the matches. A failure lists the worst frames.

mAP@0.5 and mAP@0.5:0.95 against the synthetic video's ground truth are reported for the reference and for
every candidate.
"""

from __future__ import annotations

from typing import Any

import pytest

from perf.cases import Case, make_cases
from perf.parity import TOLERANCES, compare_detections, compare_tensors, format_worst_frames, report_row

pytestmark = pytest.mark.parity

#: Frames per inference call in the parity runs.
PARITY_BATCH = 8
#: The reference: (variant, precision).
REFERENCE = ("torch", "fp32")
#: mAP@0.5 the reference must reach on the held-out synthetic video when trained weights are shipped: a floor
#: that catches broken pre/post-processing or weights (random weights score ~0), not the model's quality target
#: (the shipped model's own held-out figures are in detector/data/yolov4-tiny.weights.txt).
MIN_REFERENCE_MAP50 = 0.50


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "candidate" in metafunc.fixturenames:
        from perf.plugin import PERF_SESSION

        session = metafunc.config.stash[PERF_SESSION]
        o = session.options
        metafunc.parametrize("candidate", make_cases(o.backends, o.precisions, None, session.device,
                                                     exclude=REFERENCE, family="parity"))


def _run(runner: Any, batches: list[Any]) -> tuple[Any, list[Any]]:
    import numpy as np

    from detector.postprocess import postprocess

    decoded, detections = [], []
    for tensor, transforms in batches:
        out = runner.infer(tensor)
        decoded.append(out.numpy())
        detections.extend(postprocess(out, transforms))
    return np.concatenate(decoded), detections


@pytest.fixture(scope="module")
def parity_batches(perf_video: Any, runner_pool: Any) -> list[Any]:
    """The video's frames, preprocessed, in batches of PARITY_BATCH: list of (tensor, transforms)."""
    from detector.preprocess import preprocess
    from detector.video import read_frames

    frames = read_frames(perf_video.path, limit=perf_video.frames)
    size = runner_pool.spec.input_size
    return [preprocess(frames[i:i + PARITY_BATCH], size) for i in range(0, len(frames), PARITY_BATCH)]


@pytest.fixture(scope="module")
def reference(parity_batches: list[Any], runner_pool: Any) -> tuple[Any, list[Any]]:
    """Decoded outputs [F, N, 4+C] and per-frame detections of the reference runner."""
    runner = runner_pool.get(REFERENCE[0], REFERENCE[1])
    return _run(runner, parity_batches)


def _accuracy(perf_video: Any, detections: list[Any], names: Any) -> Any:
    from detector.evaluate import evaluate_coco

    return evaluate_coco(perf_video.ground_truth, {i + 1: d for i, d in enumerate(detections)}, names=names)


def _accuracy_row(label: str, result: Any) -> dict[str, Any]:
    return {"backend": label, "mAP@0.5": result.map50, "mAP@0.5:0.95": result.map50_95,
            "per class AP@0.5": ", ".join(f"{k} {v.ap50:.3f}" for k, v in result.per_class.items())}


def test_reference_accuracy(reference: Any, perf_video: Any, runner_pool: Any, perf_report: Any) -> None:
    if perf_video.ground_truth is None:
        pytest.skip("--perf-video has no ground truth")
    result = _accuracy(perf_video, reference[1], runner_pool.spec.names)
    perf_report.add("Accuracy vs ground truth", _accuracy_row("torch fp32 (reference)", result))
    if runner_pool.spec.weights is None:
        pytest.skip(f"seeded random weights: mAP@0.5 {result.map50:.3f} reported, not checked")
    assert result.map50 >= MIN_REFERENCE_MAP50, (
        f"reference mAP@0.5 {result.map50:.3f} < {MIN_REFERENCE_MAP50} on {perf_video.path}\n{result.table()}")


def test_detection_parity(candidate: Case, reference: Any, parity_batches: list[Any], runner_pool: Any,
                          perf_video: Any, perf_report: Any) -> None:
    runner = runner_pool.get(candidate.backend, candidate.precision, **candidate.options)
    decoded, detections = _run(runner, parity_batches)
    tol = TOLERANCES[candidate.precision]

    tensors = compare_tensors(reference[0], decoded)
    parity = compare_detections(reference[1], detections, score_tolerance=tol.score_abs)
    failures = tensors.failures(tol) + parity.failures(tol)

    perf_report.add("Parity vs torch fp32",
                    report_row(candidate.label, candidate.backend, candidate.precision, failures, tensors, parity))
    if perf_video.ground_truth is not None:
        perf_report.add("Accuracy vs ground truth",
                        _accuracy_row(candidate.label, _accuracy(perf_video, detections, runner_pool.spec.names)))

    assert not failures, (
        f"{candidate.label} on {runner.device} disagrees with torch fp32 over {len(detections)} frames: "
        + "; ".join(failures) + f"\ntensor stats: {tensors}\n" + format_worst_frames(parity))
