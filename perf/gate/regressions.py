"""Real code changes injected as regressions (``--perf-regression=KIND:PERCENT``, test-only), so the gate's
detection rates are measured on what CI will see: ``layer`` / ``layer1`` (a calibrated residual 1x1 bottleneck after
convolution `LAYER_AFTER`, `LayerRegressedSpec`, `calibrate_layer`, kept per machine by `calibrated_layer`),
``preprocess`` and ``write`` (a stage run again on a calibrated share of frames, `SlowedStage`, `slowed_writes`);
docs/method.md, section 5.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detector.spec import ModelSpec

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

KINDS = ("layer", "layer1", "preprocess", "write")
LAYER_KINDS = ("layer", "layer1")
#: Index (in the cfg's layer list) of the convolution the extra block follows: the first 13x13x512 conv.
LAYER_AFTER = 26
#: Batch the layer's cost is calibrated at (the largest selected batch size up to this).
CALIBRATION_BATCH = 32
#: The calibration's search (docs/method.md, section 5): the first width (a multiple of 8), its fourfold growths,
#: the steps after; the fewest calls and GPU seconds per reading, the readings per width (median).
TRIAL_WIDTH = 256
TRIAL_GROWTHS = 4
SECANT_STEPS = 3
CALIBRATION_CALLS = {"cuda": 200, "cpu": 3}
CALIBRATION_READING_S = 0.25
CALIBRATION_ROUNDS = {"cuda": 3, "cpu": 1}


@dataclass(frozen=True)
class Regression:
    """A requested regression: ``kind`` (one of `KINDS`) and ``fraction`` (0.05 = 5% slower)."""

    kind: str
    fraction: float

    def __str__(self) -> str:
        return f"{self.kind}:{100 * self.fraction:g}%"

    @property
    def groups(self) -> tuple[str, ...]:
        """The benchmark groups it slows (the others measure unchanged code)."""
        if self.kind in LAYER_KINDS:
            return ("inference",)
        return ("pipelined",) if self.kind == "write" else ("end-to-end",)

    @property
    def min_batch(self) -> int:
        """The smallest batch its detection is judged at (batch 1 is launch-bound for ``layer``)."""
        return 8 if self.kind == "layer" else 1

    @property
    def max_batch(self) -> int | None:
        """The largest batch its detection is judged at (None: any)."""
        return 1 if self.kind == "layer1" else None

    @property
    def calibration_batch(self) -> int:
        """The batch its width is calibrated at (up to this: the largest selected batch not above it)."""
        return 1 if self.kind == "layer1" else CALIBRATION_BATCH


# -- layer ------------------------------------------------------------------------------------------------


def _bottleneck(channels: int, width: int, seed: int = 0) -> torch.nn.Module:
    import torch
    from torch import nn

    class Bottleneck(nn.Module):
        """x + expand(leaky(reduce(x))): the injected layer."""

        def __init__(self) -> None:
            super().__init__()
            self.reduce = nn.Conv2d(channels, width, 1, bias=False)
            self.expand = nn.Conv2d(width, channels, 1, bias=False)
            self.act = nn.LeakyReLU(0.1)
            generator = torch.Generator().manual_seed(seed)
            with torch.no_grad():  # small, not zero: zeros can run faster than real data
                for conv in (self.reduce, self.expand):
                    conv.weight.copy_(1e-3 * torch.randn(conv.weight.shape, generator=generator))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + self.expand(self.act(self.reduce(x)))

    return Bottleneck()


@dataclasses.dataclass(frozen=True)
class LayerRegressedSpec(ModelSpec):
    """The model plus the injected bottleneck of ``width`` channels after layer `LAYER_AFTER` (0: unchanged)."""

    width: int = 0

    def load_torch(self) -> Any:
        from torch import nn

        model = super().load_torch()
        if self.width > 0:
            block = model.layers[LAYER_AFTER]
            block.act = nn.Sequential(block.act, _bottleneck(block.spec.filters, self.width))
        return model

    def cache_key(self, *parts: object) -> str:
        return super().cache_key(*parts, "regression-layer", self.width)


def _warm_input(runner: Any, batch: Any, calls: int) -> Any:
    """``batch`` as ``runner``'s input, after ``calls`` untimed calls (warm-up, graph capture)."""
    from detector.stagespeed import infer_ms_per_call

    x = runner.as_input(batch.to(runner.torch_device)) if runner.stream is not None else batch
    with _on_stream(runner):
        infer_ms_per_call(runner, x, calls)
    return x


def _clock_ms(runner: Any, x: Any, calls: int) -> float:
    """Milliseconds per call as the inference benchmarks read it: on a GPU the median of ``calls`` calls on the
    suite's clock (`perf.measure.clock`), on a CPU the bare host loop's mean (docs/method.md, section 5)."""
    from detector.stagespeed import infer_ms_per_call

    if runner.stream is None:
        return infer_ms_per_call(runner, x, calls)
    from detector.timing import CudaEventClock
    from perf.measure.clock import DEFAULT_LEAD_IN_MS, SUITE_CLOCK

    clock = CudaEventClock(lead_in_ms=SUITE_CLOCK.lead_in_ms or DEFAULT_LEAD_IN_MS)
    times = []
    with _on_stream(runner):
        for _ in range(calls):
            start = clock()
            runner.infer(x, to_host=False)
            times.append((clock() - start) * 1e3)
    return statistics.median(times)


def _on_stream(runner: Any) -> Any:
    import torch

    return torch.cuda.stream(runner.stream) if runner.stream is not None else contextlib.nullcontext()


def _release(runner: Any) -> None:
    """Deactivate ``runner`` and free what it held, TorchDynamo's caches included (docs/method.md, section 5)."""
    on_gpu = runner.stream is not None
    runner.deactivate()
    if on_gpu:
        import torch

        from perf.measure.gpu_memory import release_cuda_memory

        if runner.options.get("compile"):
            torch._dynamo.reset()
        release_cuda_memory()


def calibrate_layer(spec: ModelSpec, fraction: float, batch: Any, build: Callable[[ModelSpec], Any],
                    device: str) -> tuple[Any, int, dict[str, float]]:  # fmt: skip
    """(the runner, its bottleneck width, the readings) that make a call on ``batch`` (float32 [B, 3, H, W], host)
    ``fraction`` slower on the suite's clock; ``build(spec)`` makes an activated runner of the judged variant, and
    the runner returned is the one the benchmark times. The search: docs/method.md, section 5."""
    on_gpu = device.startswith("cuda")
    fewest = CALIBRATION_CALLS["cuda" if on_gpu else "cpu"]
    rounds = CALIBRATION_ROUNDS["cuda" if on_gpu else "cpu"]
    candidate: list[Any] = []  # the latest candidate runner, kept for the benchmark
    base_runner = build(spec)
    try:
        base_x = _warm_input(base_runner, batch, max(1, fewest // 10))
        first = _clock_ms(base_runner, base_x, fewest)
        calls = max(fewest, math.ceil(CALIBRATION_READING_S * 1e3 / max(first, 1e-6))) if on_gpu else fewest
        base = statistics.median(_clock_ms(base_runner, base_x, calls) for _ in range(rounds))
    finally:
        _release(base_runner)
    try:
        def cost(width: int) -> float:
            """The fraction a call of the model with the block of ``width`` costs more than without it."""
            while candidate:
                _release(candidate.pop())
            candidate.append(build(regressed_spec(spec, width)))
            x = _warm_input(candidate[0], batch, max(1, calls // 10))
            return statistics.median(_clock_ms(candidate[0], x, calls) for _ in range(rounds)) / base - 1

        trial_width = TRIAL_WIDTH
        trial = cost(trial_width)
        for _ in range(TRIAL_GROWTHS):
            if trial >= fraction / 2:
                break
            trial_width *= 4
            trial = cost(trial_width)
        per_channel = max(trial / trial_width, 1e-12)
        width = min(max(8, 8 * round(fraction / per_channel / 8)), trial_width * 4)
        got = cost(width) if width != trial_width else trial
        for _ in range(SECANT_STEPS):  # a block's cost is not linear in its width at small batches: step again
            if abs(got - fraction) <= fraction / 5 or got <= 0:
                break
            step = min(max(8, 8 * round(width * fraction / got / 8)), trial_width * 16)
            if step == width:
                break
            width, got = step, cost(step)
    except BaseException:
        while candidate:
            _release(candidate.pop())
        raise
    readings = {"width": width, "batch": int(batch.shape[0]), "target": fraction, "base_ms": base,
                "calls_per_reading": calls, "trial_width": trial_width, "trial_fraction": trial,
                "measured_fraction": got}  # fmt: skip
    log.info("layer regression: width %d adds %.1f%% at batch %d (target %.1f%%)", width, 100 * got,
             batch.shape[0], 100 * fraction)  # fmt: skip
    return candidate[0], width, readings


def calibrated_layer(spec: ModelSpec, label: str, fraction: float, batch: Any, build: Callable[[ModelSpec], Any],
                     device: str) -> tuple[Any, dict[str, Any]]:  # fmt: skip
    """(the runner with the injected layer, the readings) for variant ``label`` (``torch-compile fp16``): the
    width this machine (GPU, torch) calibrated for this model, batch and fraction in an earlier process, read from
    the model's cache folder, else `calibrate_layer`'s, kept there. A process that finds it builds the runner once,
    first, as an unchanged process does: a torch.compile fp16 b1 model read 0.2135 and 0.2291 ms for one width
    in two builds of one process (H100), so a runner built after the search's other builds is not what the next
    process builds (docs/method.md, section 5). A search whose last reading was off ``fraction`` by more than a
    factor of 2 (noise: a loaded CPU) is not kept. The readings say ``cached`` when the width was read back."""
    import torch

    from detector import fileio

    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"
    key = spec.cache_key("layer-width", label, tuple(batch.shape), fraction, name, torch.__version__)
    path = spec.cache_dir / "regressions" / f"layer-{key}.json"
    kept = _kept_readings(path)
    if kept is not None:
        log.info("layer regression: width %d for %s, calibrated on this machine before (%s)", kept["width"], label,
                 path)  # fmt: skip
        return build(regressed_spec(spec, kept["width"])), {**kept, "cached": True}
    runner, _, readings = calibrate_layer(spec, fraction, batch, build, device)
    if not fraction / 2 <= readings["measured_fraction"] <= 2 * fraction:  # noise, not a calibration to keep
        log.warning("layer regression: width %d read %+.1f%% against %.1f%%; not kept", readings["width"],
                    100 * readings["measured_fraction"], 100 * fraction)  # fmt: skip
    else:
        try:
            fileio.atomic_write_text(path, json.dumps(readings))
        except OSError as e:  # a read-only cache: the next process calibrates again
            log.warning("layer regression: the width is not kept: %s", e)
    return runner, {**readings, "cached": False}


def _kept_readings(path: Path) -> dict[str, Any] | None:
    """The readings kept at ``path``, or None: none kept, unreadable, or a width that is not a positive whole
    number (width 0 would be the unchanged model: never a regression)."""
    try:
        readings = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    ok = isinstance(readings, dict) and type(readings.get("width")) is int and readings["width"] > 0
    return readings if ok else None


def regressed_spec(spec: ModelSpec, width: int) -> LayerRegressedSpec:
    """``spec`` with the injected layer of ``width`` channels."""
    return LayerRegressedSpec(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(ModelSpec)}, width=width)


# -- preprocess -------------------------------------------------------------------------------------------


class SlowedStage:
    """A stage function that also runs itself ``extra`` more times per call on average, on the same input
    (the extra calls spread evenly: call i adds ``floor((i + 1) * extra) - floor(i * extra)``)."""

    def __init__(self, fn: Callable[..., Any], extra: float) -> None:
        self.fn, self.extra, self.calls = fn, extra, 0

    def extra_calls(self) -> int:
        """The extra calls of the next call (counting it)."""
        i, self.calls = self.calls, self.calls + 1
        return math.floor((i + 1) * self.extra) - math.floor(i * self.extra)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        for _ in range(self.extra_calls()):
            self.fn(*args, **kwargs)
        return self.fn(*args, **kwargs)


def calibrate_stage(fn: Callable[..., Any], frames: Sequence[Any], args: tuple[Any, ...], frame_ms: float,
                    fraction: float, kwargs: dict[str, Any] | None = None,
                    conditions: Callable[[], Any] | None = None) -> tuple[float, float]:  # fmt: skip
    """(extra calls per frame that add ``fraction`` of ``frame_ms``, bare ms per call): ``fn([frame], *args)``
    timed alone on ``frames`` (median of 5 passes) under ``conditions()``, the measured region's noise controls."""
    kwargs = kwargs or {}
    per_pass = []
    with conditions() if conditions is not None else contextlib.nullcontext():
        for _ in range(5):
            start = time.perf_counter()
            for frame in frames:
                fn([frame], *args, **kwargs)
            per_pass.append((time.perf_counter() - start) * 1e3 / max(len(frames), 1))
    bare = statistics.median(per_pass)
    return fraction * frame_ms / bare, bare


# -- write ------------------------------------------------------------------------------------------------


def encode_jpeg(frames: Sequence[Any]) -> None:
    """JPEG-encode each BGR frame (the extra work of the ``write`` regression)."""
    import cv2

    for frame in frames:
        cv2.imencode(".jpg", frame)


@contextlib.contextmanager
def slowed_writes(extra: float) -> Iterator[None]:
    """While open, every `detector.video.VideoWriter.write` also JPEG-encodes its frame ``extra`` more times on
    average (spread as `SlowedStage`), after the real write, inside the caller's write time."""
    from detector.video import VideoWriter

    original, counter = VideoWriter.write, SlowedStage(encode_jpeg, extra)

    def write(self: Any, frame: Any) -> None:
        original(self, frame)
        encode_jpeg([frame] * counter.extra_calls())

    VideoWriter.write = write  # type: ignore[method-assign]
    try:
        yield
    finally:
        VideoWriter.write = original  # type: ignore[method-assign]
