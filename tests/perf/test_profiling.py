"""The torch.profiler path: a real (CPU) trace of a small torch workload carries the pipeline stage names."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from detector import timing
from detector.timing import STAGES, annotate, annotations_enabled
from perf.profile import torch_profiler as profiling
from perf.profile.torch_profiler import (
    MEASURED_RANGE,
    capture_range,
    measure_annotation_overhead,
    torch_profile,
    trace_event_names,
    trace_stage_names,
)

torch = pytest.importorskip("torch")


def _pipeline_step(x: torch.Tensor) -> torch.Tensor:
    with annotate("read"):
        frame = x.clone()
    with annotate("preprocess"):
        batch = (frame / 255.0).unsqueeze(0)
    with annotate("infer"):
        out = torch.nn.functional.conv2d(batch, torch.ones(4, 3, 3, 3))
    with annotate("postprocess"):
        scores = out.sigmoid().amax()
    with annotate("write"):
        return scores.detach()


def test_trace_is_valid_json_with_all_stage_names(tmp_path: Path) -> None:
    trace = tmp_path / "traces" / "step.json"
    x = torch.rand(3, 32, 32) * 255
    with torch_profile(trace):
        for _ in range(2):
            _pipeline_step(x)
    data = json.loads(trace.read_text())
    assert isinstance(data["traceEvents"], list) and data["traceEvents"]
    assert trace_stage_names(trace) == set(STAGES)
    assert MEASURED_RANGE in trace_event_names(trace)
    assert not list(tmp_path.glob("traces/.*"))  # no temporary file left behind


def test_annotations_are_restored_after_profiling(tmp_path: Path) -> None:
    assert not annotations_enabled()
    with torch_profile(tmp_path / "t.json"):
        assert timing._Annotations.torch_profiler
    assert not annotations_enabled()


def test_no_trace_is_written_when_the_block_fails(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    with pytest.raises(RuntimeError, match="boom"), torch_profile(trace):
        raise RuntimeError("boom")
    assert not trace.exists() and not annotations_enabled()


def test_stage_names_outside_the_profiled_block_are_not_in_the_trace(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    with torch_profile(trace):
        with annotate("infer"):
            torch.ones(8).sum()
    with annotate("write"):
        pass
    assert trace_stage_names(trace) == {"infer"}


def test_capture_range_without_capture_is_just_a_label(tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    with torch_profile(trace), capture_range(capture=False):
        with annotate("preprocess"):
            torch.zeros(4).add_(1)
    assert "preprocess" in trace_stage_names(trace)


@pytest.mark.parametrize("n", [1, 200])
def test_annotation_overhead_is_measured_per_call(monkeypatch: pytest.MonkeyPatch, n: int) -> None:
    """Each annotated block costs a known number of ns on a virtual clock, by the switches on while it runs: the
    figures are that cost per call whatever ``n`` is, each under its own switch, and the switches are restored."""
    now = [0]

    @contextlib.contextmanager
    def costed_annotate(name: str) -> Iterator[None]:
        now[0] += 100 + 1_000 * timing._Annotations.nvtx + 10_000 * timing._Annotations.torch_profiler
        yield

    monkeypatch.setattr(profiling, "annotate", costed_annotate)
    monkeypatch.setattr(profiling, "time", SimpleNamespace(perf_counter_ns=lambda: now[0]))
    result = measure_annotation_overhead(n=n)
    assert result["calls"] == n
    assert (result["disabled_ns_per_call"], result["nvtx_ns_per_call"], result["torch_label_ns_per_call"]) == (
        100, 1_100, 10_100)
    assert result["nvtx_overhead_ns_per_call"] == 1_000
    assert not annotations_enabled()
