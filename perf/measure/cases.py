"""Measured cases (variant x precision x batch), their ``ci`` marks (`KEY_CASES`) and `CASE_FIXTURES`."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import pytest

from detector.backends import availability, runner_class, variants
from detector.backends import backend as registered_backend
from detector.errors import BackendError
from perf.measure.sources import DEFAULT as DEFAULT_SOURCE
from perf.measure.sources import Source, for_video, with_sources
from perf.subject import Subject

#: The key (variant, precision) pairs of each family per device type, which ``-m ci`` selects (inference at batch 1
#: and, on a GPU, the largest batch size); only marks: a variant missing here is still measured by the full suite.
KEY_CASES: dict[str, dict[str, tuple[tuple[str, str], ...]]] = {
    "inference": {"cuda": (("torch", "fp32"), ("torch-graph", "fp16"), ("torch-compile", "fp16"),
                           ("onnxruntime", "fp32"), ("tensorrt", "fp16")),
                  "cpu": (("torch", "fp32"), ("onnxruntime", "fp32"))},
    **dict.fromkeys(("end-to-end", "pipelined", "multistream"),
                    {"cuda": (("torch-graph", "fp16"), ("tensorrt", "fp16")), "cpu": (("torch", "fp32"),)}),
    "parity": {"cuda": (("torch-graph", "fp16"), ("torch-compile", "fp16"), ("tensorrt", "fp16")),
               "cpu": (("onnxruntime", "fp32"),)},
}  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One measured configuration; ``id`` is its pytest id and benchmark name suffix."""

    variant: str
    backend: str
    precision: str
    batch: int = 1
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    source: Source = DEFAULT_SOURCE  # the video pipelines' frames; the default for every other family

    @property
    def id(self) -> str:
        return f"{self.variant}-{self.precision}-b{self.batch}"

    def to_json(self) -> dict[str, Any]:
        """The case as a saved run's ``params["case"]`` (batch in images, the source as in ``--perf-sources``)."""
        from perf.runs import param_json

        return {"id": self.id, "variant": self.variant, "backend": self.backend, "precision": self.precision,
                "batch": self.batch, "options": param_json(self.options), "source": self.source.spec}

    @property
    def label(self) -> str:
        """For tables: ``torch-graph fp16`` (``torch-graph fp16, h264 video, nvdec decode, no encode`` elsewhere)."""
        return f"{self.variant} {self.precision}" + (f", {self.source.label}" if self.source.suffix else "")


def unavailable_reason(backend: str, device: str, precision: str) -> str | None:
    """Why ``backend`` cannot run ``precision`` on ``device`` here (the one wording of these skips), or None."""
    try:
        supported = runner_class(backend).precisions
        if precision not in supported:
            return f"{backend} has no {precision} mode (it runs {', '.join(supported)})"
        return availability(backend, device, precision)
    except BackendError as e:  # not importable here (BackendUnavailable), or a device type the runner does not support
        return str(e)


def make_cases(
    backends: Iterable[str], precisions: Iterable[str], batch_sizes: Sequence[int] | None, device: str,
    *, nsys_first: bool = False, exclude: tuple[str, str] | None = None, family: str | None = None,
) -> list[Any]:
    """pytest params for every variant x precision (x batch size) of ``backends``, skipped where they cannot run;
    ``nsys`` on each variant's first runnable case if ``nsys_first``; ``ci`` on the `KEY_CASES` of ``family``."""
    device_type = device.partition(":")[0]
    key_cases = KEY_CASES.get(family or ("inference" if batch_sizes else ""), {}).get(device_type, ())
    ci_batches = (1, max(batch_sizes) if batch_sizes and device_type == "cuda" else 1)
    reason_of = functools.cache(unavailable_reason)
    params = []
    for preset in variants(backends):  # on every device: a case that cannot run here is a skip, not a gap
        marks = [pytest.mark.gpu] if device_type == "cuda" or "cpu" not in preset.devices else []
        marks += [getattr(pytest.mark, name) for name in registered_backend(preset.backend).marks]
        profiled = False
        for precision in precisions:
            if exclude == (preset.name, precision):
                continue
            if device_type in preset.devices:
                reason = reason_of(preset.backend, device, precision)
            elif device_type == "cpu" and "cuda" in preset.devices:
                reason = None  # its ``gpu`` marker skips it at set-up, in the words of --perf-device
            else:
                reason = f"{preset.name} runs on {', '.join(preset.devices)} only, not {device}"
            for batch in batch_sizes or (1,):
                case = Case(preset.name, preset.backend, precision, batch, dict(preset.options))
                case_marks = [*marks]
                if reason is not None:
                    case_marks.append(pytest.mark.skip(reason=reason))
                elif nsys_first and not profiled and device_type in preset.devices:
                    case_marks.append(pytest.mark.nsys)
                    profiled = True
                if (preset.name, precision) in key_cases and (not batch_sizes or batch in ci_batches):
                    case_marks.append(pytest.mark.ci)
                params.append(pytest.param(case, id=case.id if batch_sizes else case.label.replace(" ", "-"),
                                           marks=case_marks))
    return params


def reference_case(subject: Subject) -> tuple[str, str]:
    """The parity and skip-interval tests' reference (variant, precision): ONNX Runtime for an ONNX-only model."""
    return ("onnxruntime", "fp32") if subject.onnx_only else ("torch", "fp32")


def _video_cases(o: Any, device: str, subject: Subject, family: str, nsys_first: bool = False) -> list[Any]:
    """A video family's cases on the mp4v video, the key ones also on the other ``--perf-sources``."""
    cases = make_cases(o.backends, o.precisions, None, device, nsys_first=nsys_first, family=family)
    return with_sources(cases, for_video(o.sources, subject.video is not None), device)


def _stream_cases(o: Any, device: str, _subject: Subject) -> list[Any]:
    """(case, stream count) pairs; ``ci`` only on the key stream count: 4 if measured, else the middle one."""
    streams = o.streams_for(device)
    key = 4 if 4 in streams else sorted(streams)[len(streams) // 2]
    return [pytest.param(*case.values, n, id=f"{case.id}-x{n}",
                         marks=[m for m in case.marks if m.name != "ci" or n == key])
            for case in make_cases(o.backends, o.precisions, None, device, family="multistream")
            for n in streams]  # fmt: skip


#: Every case fixture of the benchmark modules (comma-separated names for one joint parametrisation) -> how its
#: params are made: (`perf.session.PerfOptions`, resolved device, subject) -> pytest params.
CASE_FIXTURES: dict[str, Callable[[Any, str, Subject], list[Any]]] = {
    "case": lambda o, device, _: make_cases(o.backends, o.precisions, o.batch_sizes_for(device), device,
                                            nsys_first=True),  # inference
    "e2e_case": lambda o, device, subject: _video_cases(o, device, subject, "end-to-end", nsys_first=True),
    "pipe_case": lambda o, device, subject: _video_cases(o, device, subject, "pipelined"),
    "ms_case,streams": _stream_cases,
    "candidate": lambda o, device, subject: make_cases(o.backends, o.precisions, None, device,
                                                       exclude=reference_case(subject), family="parity"),
    "skip_interval": lambda o, _, subject: [pytest.param(n, id="-".join((*reference_case(subject), f"N{n}")))
                                            for n in o.skip_intervals],
    # the harness-overhead test: batch 1 and the largest batch size on a GPU, batch 1 alone on a CPU (skipped)
    "batch": lambda o, device, _: [pytest.param(b, id=f"b{b}") for b in sorted(
        {1, max(o.batch_sizes_for(device))} if device.startswith("cuda") else {1})],
}  # fmt: skip


def parametrize(metafunc: pytest.Metafunc, options: Any, device: str, subject: Subject) -> None:
    """Parametrise the `CASE_FIXTURES` a test asks for (``options``: `perf.session.PerfOptions`)."""
    for names, make in CASE_FIXTURES.items():
        if names.partition(",")[0] in metafunc.fixturenames:
            metafunc.parametrize(names, make(options, device, subject))
