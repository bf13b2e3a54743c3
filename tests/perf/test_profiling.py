"""The torch.profiler path: a real (CPU) trace of a small torch workload carries the pipeline stage names."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from detector import timing
from detector.timing import STAGES, annotate, annotations_enabled
from perf.profile.torch_profiler import MEASURED_RANGE, capture_range, torch_profile

torch = pytest.importorskip("torch")


def trace_event_names(trace_path: Path) -> set[str]:
    """Names of all events in a Chrome trace JSON (``{"traceEvents": [...]}`` or a bare list)."""
    data = json.loads(Path(trace_path).read_text(encoding="utf-8"))
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    return {event["name"] for event in events if isinstance(event, dict) and "name" in event}


def trace_stage_names(trace_path: Path) -> set[str]:
    """The pipeline stage names that appear as events in the trace at ``trace_path``."""
    return trace_event_names(trace_path) & set(STAGES)


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
