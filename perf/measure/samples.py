"""Block samples of the video pipelines as the benchmark's rounds, and `TimedPasses` (docs/method.md, section 1)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from perf.measure.speedref import NOMINAL_S, CpuReference, ReferenceProbe, normalize
from perf.measure.speedref import summary as reference_summary
from perf.measure.stability import StabilityRule, replace_rounds, stability_record
from perf.runs import PRIMARY

TARGET_BLOCKS = 30  # blocks per pass the block size aims at
R = TypeVar("R")  # a loop's result of one pass


def block_size(iterations: int) -> int:
    """Iterations per block so that a pass of ``iterations`` gives about `TARGET_BLOCKS` blocks (>= 1)."""
    return max(1, iterations // TARGET_BLOCKS)


def pass_frames(path: str | os.PathLike[str], frames: int | None, fallback: int) -> int:
    """Frames of a pass over ``path``: ``frames``, else its container's count, else ``fallback``."""
    if frames:
        return frames
    from detector.video import open_video

    with open_video(path) as reader:
        return reader.frame_count or fallback


def block_samples(passes: Sequence[Sequence[float]], block: int, skip: int = 0) -> list[float]:
    """Seconds per iteration of each whole ``block`` of ``passes`` (ms per iteration), the first ``skip`` left out."""
    if block < 1 or skip < 0:
        raise ValueError(f"block must be >= 1 and skip >= 0, got {block} and {skip}")
    return [sum(usable[start : start + block]) / 1e3 / block
            for usable in (list(iterations)[skip:] for iterations in passes)
            for start in range(0, len(usable) - block + 1, block)]  # fmt: skip


def record_samples(benchmark: Any, samples_s: Sequence[float], *, rule: StabilityRule, label: str, unit: str,
                   block: int, metrics: Mapping[str, Mapping[str, Any]] | None = None) -> None:  # fmt: skip
    """Make ``samples_s`` the benchmark's rounds; ``extra_info`` says how ("samples", "metrics", "stability")."""
    benchmark.extra_info["samples"] = {"metric": PRIMARY, "label": label, "unit": unit, "block": block,
                                       "count": len(samples_s)}  # fmt: skip
    if metrics:
        benchmark.extra_info.setdefault("metrics", {}).update({name: dict(m) for name, m in metrics.items()})
    if not samples_s:
        return
    benchmark.extra_info["stability"] = stability_record([rule.assess(samples_s)])
    if benchmark.stats is not None:
        replace_rounds(benchmark.stats, list(samples_s))


def stage_metrics(passes: Sequence[Mapping[str, Sequence[float]]], block: int, skip: int = 0, *,
                  judged: bool = True) -> dict[str, dict[str, Any]]:  # fmt: skip
    """``stage:<name>`` metrics (s per frame) of the stages every pass has; ``judged``: as a share of the frame time."""
    names = [name for name in (passes[0] if passes else {}) if all(name in p for p in passes)]
    blocks = {name: block_samples([p[name] for p in passes], block, skip) for name in names}
    return {f"stage:{name}": {"label": f"stage {name}", "unit": "s per frame", "data": data, "judged": judged}
            for name, data in blocks.items() if data}  # fmt: skip


@dataclass(frozen=True)
class PassSamples:
    """What `TimedPasses.record` recorded (s per frame or tick; stage passes in ms per iteration)."""

    wall: list[float]
    stage_passes: list[dict[str, list[float]]]
    stages: dict[str, dict[str, Any]]


class TimedPasses(Generic[R]):
    """Timed passes of a video loop (`run`) recorded as block samples (`record`), with the CPU reference if on."""

    def __init__(self, block: int, controls: Collection[str], on_gpu: bool) -> None:
        self.block = block
        self.reference = CpuReference() if "cpu-reference" in controls and on_gpu else None
        self.results: list[R] = []
        self.probes: list[ReferenceProbe | None] = []

    def probe(self) -> ReferenceProbe | None:
        """A fresh `ReferenceProbe` (a loop's ``on_progress``: a reading after every block), or None."""
        return ReferenceProbe(self.reference, self.block) if self.reference is not None else None

    def run(self, benchmark: Any, one_pass: Callable[[ReferenceProbe | None], R], rounds: int,
            *regions: contextlib.AbstractContextManager[Any]) -> None:  # fmt: skip
        """``rounds`` passes ``one_pass(probe)`` through ``benchmark.pedantic`` inside ``regions`` (in order)."""

        def timed() -> None:
            probe = self.probe()
            self.results.append(one_pass(probe))
            self.probes.append(probe)

        with contextlib.ExitStack() as stack:
            for region in regions:
                stack.enter_context(region)
            benchmark.pedantic(timed, rounds=rounds, iterations=1, warmup_rounds=0)
        if not self.results:  # --benchmark-disable still runs the function once; --benchmark-skip never reaches here
            timed()

    @property
    def readings_s(self) -> list[list[float]] | None:
        """Each pass's reference readings (s), or None without the reference."""
        return None if self.reference is None else [p.readings_s for p in self.probes if p is not None]

    def record(self, benchmark: Any, record: Callable[..., None], per: str = "frame") -> PassSamples:
        """Record the passes through ``record`` (``perf_samples``), in CPU-reference units where read."""
        if per == "frame":
            iterations = [r.iteration_ms for r in self.results]
            stage_passes = [{k: v[: len(r.iteration_ms)] for k, v in r.stage_samples_ms.items()} for r in self.results]
        else:
            iterations, stage_passes = [r.tick_ms for r in self.results], []
        block, readings_s = self.block, self.readings_s
        wall, stages = block_samples(iterations, block), stage_metrics(stage_passes, block)
        samples, label, unit = wall, f"{per} time", f"s per {per}"
        if readings_s is not None:  # each pass's blocks at the reference's nominal speed
            samples = normalize([block_samples([i], block) for i in iterations], readings_s, NOMINAL_S)
            for name, metric in stages.items():
                per_pass = [block_samples([p[name.removeprefix("stage:")]], block) for p in stage_passes]
                metric.update(data=normalize(per_pass, readings_s, NOMINAL_S), unit="s per frame at reference speed")
            label, unit = f"{per} time (CPU-reference units)", f"s per {per} at reference speed"
            benchmark.extra_info["cpu_reference"] = {**reference_summary(readings_s), "nominal_ms": NOMINAL_S * 1e3}
        metrics = {**stages, "wall": {"label": f"{per} time (wall clock)", "unit": f"s per {per}", "data": wall}}
        record(benchmark, samples, label=label, unit=unit, block=block, metrics=metrics)
        return PassSamples(wall, stage_passes, stages)
