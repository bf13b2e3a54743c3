"""Real code changes injected as regressions (``--perf-regression=KIND:PERCENT``, test-only; docs/method.md, section
5): ``layer`` / ``layer1`` (a calibrated residual 1x1 bottleneck after convolution `LAYER_AFTER`), ``preprocess`` and
``write`` (a stage run again on a calibrated share of frames, `SlowedStage`, `slowed_writes`)."""

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
from typing import TYPE_CHECKING, Any

from detector.fileio import atomic_write_text, parse_json, read_text
from detector.spec import ModelSpec
from perf.validate import value_problem

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
#: the steps after; GPU seconds per reading; by device, the fewest calls per reading and the readings per width.
TRIAL_WIDTH, TRIAL_GROWTHS, SECANT_STEPS = 256, 4, 3
#: The widest block the search steps to (16 times its widest trial); a kept width beyond it is no calibration.
MAX_WIDTH = TRIAL_WIDTH * 4**TRIAL_GROWTHS * 16
CALIBRATION_READING_S = 0.25
CALIBRATION_CALLS_ROUNDS = {"cuda": (200, 3), "cpu": (3, 1)}


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
        return ("inference",) if self.kind in LAYER_KINDS else ("pipelined" if self.kind == "write" else "end-to-end",)

    @property
    def min_batch(self) -> int:
        """The smallest batch its detection is judged at (batch 1 is launch-bound for ``layer``)."""
        return 8 if self.kind == "layer" else 1

    def slows(self, group: str | None, batch: int) -> bool:
        """Whether its detection is judged on a benchmark of ``group`` at ``batch``: one of its `groups`, from
        `min_batch`, and at batch 1 alone for ``layer1``."""
        return group in self.groups and batch >= self.min_batch and (self.kind != "layer1" or batch == 1)

    @property
    def calibration_batch(self) -> int:
        """The batch its width is calibrated at (up to this: the largest selected batch not above it)."""
        return 1 if self.kind == "layer1" else CALIBRATION_BATCH


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


def _clock_ms(runner: Any, batch: Any, warmup: int) -> Callable[[int], float]:
    """After ``warmup`` untimed calls on ``batch`` (warm-up, graph capture), a reader of milliseconds per call as the
    inference benchmarks read it: on a GPU the median of ``calls`` calls on the suite's clock (`perf.measure.clock`),
    on a CPU the bare host loop's mean (docs/method.md, section 5)."""
    from detector.stagespeed import infer_ms_per_call

    if runner.stream is None:
        infer_ms_per_call(runner, batch, warmup)
        return lambda calls: infer_ms_per_call(runner, batch, calls)
    import torch

    from detector.timing import CudaEventClock
    from perf.measure.clock import DEFAULT_LEAD_IN_MS, SUITE_CLOCK
    from perf.measure.stability import time_rounds

    x = runner.as_input(batch.to(runner.torch_device))
    clock = CudaEventClock(lead_in_ms=SUITE_CLOCK.lead_in_ms or DEFAULT_LEAD_IN_MS)

    def read(calls: int) -> float:
        with torch.cuda.stream(runner.stream):
            return statistics.median(1e3 * t for t in time_rounds(lambda: runner.infer(x, to_host=False), clock, calls))

    with torch.cuda.stream(runner.stream):
        infer_ms_per_call(runner, x, warmup)
    return read


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
    fewest, rounds = CALIBRATION_CALLS_ROUNDS["cuda" if on_gpu else "cpu"]
    candidate: list[Any] = []  # the latest candidate runner, kept for the benchmark
    base_runner = build(spec)
    try:
        read = _clock_ms(base_runner, batch, max(1, fewest // 10))
        first = read(fewest)
        calls = max(fewest, math.ceil(CALIBRATION_READING_S * 1e3 / max(first, 1e-6))) if on_gpu else fewest
        base = statistics.median(read(calls) for _ in range(rounds))
    finally:
        _release(base_runner)
    try:
        def cost(width: int) -> float:
            """The fraction a call of the model with the block of ``width`` costs more than without it."""
            while candidate:
                _release(candidate.pop())
            candidate.append(build(regressed_spec(spec, width)))
            read = _clock_ms(candidate[0], batch, max(1, calls // 10))
            return statistics.median(read(calls) for _ in range(rounds)) / base - 1

        trial_width, trial = TRIAL_WIDTH, cost(TRIAL_WIDTH)
        for _ in range(TRIAL_GROWTHS):
            if trial >= fraction / 2:
                break
            trial_width, trial = 4 * trial_width, cost(4 * trial_width)
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
    """(the runner with the injected layer, the readings, ``cached``) for variant ``label`` (``torch-compile fp16``):
    the width an earlier process calibrated for this machine, model, batch and fraction (kept in the model's cache: the
    runner built once, as unchanged code's; docs/method.md, section 5), else `calibrate_layer`'s, kept unless 2x off."""
    import torch

    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "cpu"
    key = spec.cache_key("layer-width", label, tuple(batch.shape), fraction, name, torch.__version__)
    path = spec.cache_dir / "regressions" / f"layer-{key}.json"
    kept = None
    with contextlib.suppress(OSError, ValueError):
        kept = parse_json(read_text(path))  # a FIFO there is an OSError, not a hang
    if (isinstance(kept, dict) and type(kept.get("width")) is int and 0 < kept["width"] <= MAX_WIDTH  # 0: unchanged
            and value_problem(kept) is None):  # its readings go into the saved run, which must stay readable
        log.info("layer regression: width %d for %s, calibrated on this machine before (%s)", kept["width"], label,
                 path)  # fmt: skip
        return build(regressed_spec(spec, kept["width"])), {**kept, "cached": True}
    runner, _, readings = calibrate_layer(spec, fraction, batch, build, device)
    if not fraction / 2 <= readings["measured_fraction"] <= 2 * fraction:  # noise, not a calibration to keep
        log.warning("layer regression: width %d read %+.1f%% against %.1f%%; not kept", readings["width"],
                    100 * readings["measured_fraction"], 100 * fraction)  # fmt: skip
    else:
        try:
            atomic_write_text(path, json.dumps(readings))
        except OSError as e:  # a read-only cache: the next process calibrates again
            log.warning("layer regression: the width is not kept: %s", e)
    return runner, {**readings, "cached": False}


def regressed_spec(spec: ModelSpec, width: int) -> LayerRegressedSpec:
    """``spec`` with the injected layer of ``width`` channels."""
    return LayerRegressedSpec(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(ModelSpec)}, width=width)


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
    from perf.measure.stability import time_rounds

    kwargs = kwargs or {}

    def one_pass() -> None:
        for frame in frames:
            fn([frame], *args, **kwargs)

    with conditions() if conditions is not None else contextlib.nullcontext():
        per_pass = time_rounds(one_pass, time.perf_counter, 5)
    bare = statistics.median(seconds * 1e3 / max(len(frames), 1) for seconds in per_pass)
    return fraction * frame_ms / bare, bare


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
