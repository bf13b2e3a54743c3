"""Video benchmarks' frame sources, ``--perf-sources``: ``<codec>[+nvdec][+noencode]`` (docs/method.md, section 14)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Iterable, Sequence
from typing import Any

import pytest

CODECS: tuple[str, ...] = ("mp4v", "h264")  # of the synthetic video
USER_VIDEO = "video"  # the codec of the user's own video (``--perf-video``)
DEFAULT_SOURCES = "mp4v,h264,h264+nvdec,h264+noencode,h264+nvdec+noencode"
_FLAGS = ("nvdec", "noencode")


@dataclasses.dataclass(frozen=True)
class Source:
    """Where frames come from and whether the output is encoded (see the module docstring)."""

    codec: str = "mp4v"
    decoder: str = "opencv"
    encode: bool = True

    @property
    def suffix(self) -> str:
        """The id suffix: what differs from the default source (``""`` for it), e.g. ``h264-nvdec-noencode``."""
        parts = [self.codec] if self.codec not in ("mp4v", USER_VIDEO) else []
        return "-".join(parts + self.spec.split("+")[1:])

    @property
    def label(self) -> str:
        """For tables: ``h264 video, nvdec decode, no encode``."""
        video = "the video" if self.codec == USER_VIDEO else f"{self.codec} video"
        return f"{video}, {self.decoder} decode, {'mp4v encode' if self.encode else 'no encode'}"

    @property
    def spec(self) -> str:
        """As written in ``--perf-sources``."""
        return "+".join([self.codec] + ["nvdec"] * (self.decoder == "nvdec") + ["noencode"] * (not self.encode))


DEFAULT = Source()


def parse_source(text: str) -> Source:
    """``h264+nvdec+noencode`` -> Source; ValueError naming the part that is not allowed."""
    codec, *flags = [part.strip().lower() for part in text.split("+")]
    if codec not in (*CODECS, USER_VIDEO):
        raise ValueError(f"unknown codec {codec!r} in source {text!r}; allowed: {', '.join(CODECS)}")
    if set(flags) - set(_FLAGS) or len(set(flags)) != len(flags):
        allowed = " and ".join("+" + flag for flag in _FLAGS)
        raise ValueError(f"source {text!r}: after the codec only {allowed} are allowed, each once")
    return Source(codec, "nvdec" if "nvdec" in flags else "opencv", "noencode" not in flags)


def for_video(sources: Iterable[Source], user_video: bool) -> tuple[Source, ...]:
    """``sources`` in order without repeats; with the user's video the codec is its own (``video``)."""
    return tuple(dict.fromkeys(dataclasses.replace(s, codec=USER_VIDEO) if user_video else s for s in sources))


def skip_unless_decodes(source: Source, runner: Any) -> None:
    """Skip the calling test with `detector.gpudecode.nvdec_unavailable`'s reason when ``source`` cannot decode here."""
    if source.decoder == "nvdec":
        from detector.gpudecode import nvdec_unavailable

        if (reason := nvdec_unavailable(runner.device)) is not None:
            pytest.skip(reason)


def with_sources(params: Sequence[Any], sources: Sequence[Source], device: str) -> list[Any]:
    """``params``, then each ``ci`` one on every other source (no ``ci``, ``nsys``; NVDEC skipped where unusable)."""
    from detector.gpudecode import nvdec_unavailable

    out = list(params)
    for param, source in itertools.product(params, [s for s in sources if s.suffix]):
        if not any(mark.name == "ci" for mark in param.marks):
            continue
        marks = [mark for mark in param.marks if mark.name not in ("ci", "nsys")]
        reason = nvdec_unavailable(device, load=False) if source.decoder == "nvdec" else None
        if reason and not any(mark.name == "skip" for mark in marks):
            marks.append(pytest.mark.skip(reason=reason))
        out.append(pytest.param(dataclasses.replace(param.values[0], source=source),
                                id=f"{param.id}-{source.suffix}", marks=marks))
    return out
