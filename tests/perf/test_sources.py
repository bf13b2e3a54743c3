"""perf.measure.sources: --perf-sources parsed, and the extra sources given to the key cases only."""

from __future__ import annotations

import argparse
import re

import pytest

from perf import options
from perf.measure.cases import make_cases
from perf.measure.sources import DEFAULT, DEFAULT_SOURCES, Source, for_video, parse_source, with_sources


@pytest.mark.parametrize(("text", "source", "suffix"), [
    ("mp4v", Source(), ""),
    ("h264", Source("h264"), "h264"),
    ("H264+NVDEC", Source("h264", "nvdec"), "h264-nvdec"),
    ("h264+noencode+nvdec", Source("h264", "nvdec", False), "h264-nvdec-noencode"),
    ("mp4v+noencode", Source("mp4v", "opencv", False), "noencode"),
])  # fmt: skip
def test_a_source_parses_and_names_what_differs_from_the_default(text: str, source: Source, suffix: str) -> None:
    assert parse_source(text) == source and source.suffix == suffix
    assert parse_source(source.spec) == source


@pytest.mark.parametrize("text", ["av1", "h264+gpu", "h264+nvdec+nvdec", "+nvdec", ""])
def test_a_bad_source_is_refused_naming_the_value(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"Could not parse value: {text!r}.")):
        options.parse_sources(text)


def test_the_default_sources_start_with_the_default_and_hold_gpu_decode() -> None:
    sources = options.parse_sources(DEFAULT_SOURCES)
    assert sources[0] == DEFAULT and Source("h264", "nvdec") in sources and Source("h264", "nvdec", False) in sources


def test_with_a_users_video_sources_differing_only_in_codec_are_one() -> None:
    sources = options.parse_sources("mp4v,h264,h264+nvdec,mp4v+nvdec")
    assert [s.suffix for s in for_video(sources, user_video=True)] == ["", "nvdec"]
    assert [s.label for s in for_video(sources, user_video=True)] == [
        "the video, opencv decode, mp4v encode", "the video, nvdec decode, mp4v encode"]


def test_extra_sources_go_to_the_key_cases_only_without_ci_or_nsys() -> None:
    cases = make_cases(("torch",), ("fp32",), None, "cpu", nsys_first=True, family="end-to-end")
    params = with_sources(cases, options.parse_sources("mp4v,h264,h264+nvdec"), "cpu")
    ids = [p.id for p in params]
    assert ids[: len(cases)] == [p.id for p in cases]  # every case keeps its id on the default source
    assert ids[len(cases):] == ["torch-fp32-h264", "torch-fp32-h264-nvdec"]  # torch fp32 is the CPU's key case
    extra = params[len(cases):]
    assert all(mark.name not in ("ci", "nsys") for p in extra for mark in p.marks)
    assert extra[0].values[0].source == Source("h264") and extra[0].values[0].label == (
        "torch fp32, h264 video, opencv decode, mp4v encode")
    [skip] = [mark for mark in extra[1].marks if mark.name == "skip"]
    assert skip.kwargs["reason"] == "nvdec decodes into CUDA memory; the runner is on cpu"
