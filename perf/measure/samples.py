"""Samples for the video pipelines: seconds per frame (or per tick) in blocks of consecutive iterations.

A pass over a video is one long measurement; three of them are three numbers, too few to judge (pytest-benchmark
would call them rounds). A pass is instead cut into blocks of ``block`` consecutive loop iterations, and each block
gives one sample: its wall time over its frames. Blocks keep every frame's cost in (an encoder's key frames, a
stage that is slow now and then) while giving dozens of samples per pass, and the gate's block bootstrap handles
what autocorrelation is left. The benchmark's rounds (``stats.data``, which pytest-benchmark's own statistics
and ``--benchmark-compare-fail`` read) are replaced by these samples, so the saved figure is the stable one:
the median seconds per frame. The same blocks of each stage's time go into ``extra_info["metrics"]`` as
``stage:<name>``, so a verdict can name the stage that moved. `TimedPasses` is the video benchmarks' one driver:
timed passes through ``benchmark.pedantic`` with a probe of the CPU reference, recorded as such samples (the
end-to-end, skip-interval and multi-stream benchmarks; the pipelined one runs its passes through it and records
its own figures, read on its writer thread).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from perf.measure.speedref import NOMINAL_S, CpuReference, ReferenceProbe, normalize
from perf.measure.speedref import summary as reference_summary
from perf.measure.stability import StabilityRule, replace_rounds, stability_record, summary
from perf.runs import PRIMARY

#: Blocks per pass the block size aims at.
TARGET_BLOCKS = 30
#: A loop's result of one pass.
R = TypeVar("R")


def block_size(iterations: int, target_blocks: int = TARGET_BLOCKS) -> int:
    """Iterations per block so that a pass of ``iterations`` gives about ``target_blocks`` blocks (>= 1)."""
    return max(1, iterations // target_blocks)


def pass_frames(path: str | os.PathLike[str], frames: int | None, fallback: int) -> int:
    """Frames a pass over the video at ``path`` runs: ``frames`` when given, else the count its container states,
    else ``fallback`` (a container that does not say)."""
    if frames:
        return frames
    from detector.video import open_video

    with open_video(path) as reader:
        return reader.frame_count or fallback


def block_samples(passes: Sequence[Sequence[float]], block: int, frames_per_iteration: int = 1,
                  skip: int = 0) -> list[float]:  # fmt: skip
    """Seconds per frame of each whole block of ``block`` iterations, pass after pass.

    ``passes``: per pass, the milliseconds of each iteration (each handles ``frames_per_iteration`` frames). The
    first ``skip`` iterations of each pass (pipeline fill) and an incomplete last block are left out.
    """
    if block < 1 or frames_per_iteration < 1 or skip < 0:
        raise ValueError(f"block and frames per iteration must be >= 1 and skip >= 0, got {block}, "
                         f"{frames_per_iteration}, {skip}")
    out = []
    for iterations in passes:
        usable = list(iterations)[skip:]
        for start in range(0, len(usable) - block + 1, block):
            out.append(sum(usable[start : start + block]) / 1e3 / (block * frames_per_iteration))
    return out


def record_samples(benchmark: Any, samples_s: Sequence[float], *, rule: StabilityRule, label: str, unit: str,
                   block: int, metrics: Mapping[str, Mapping[str, Any]] | None = None) -> None:  # fmt: skip
    """Make ``samples_s`` the benchmark's rounds (see the module docstring) and record how they were made.

    ``extra_info["samples"]`` gets the primary metric's ``label`` ("frame time"), ``unit`` ("s per frame") and
    ``block``; ``metrics`` (name -> {"label", "unit", "data", ...}) are added to ``extra_info["metrics"]``;
    ``extra_info["stability"]`` gets the stability rule's verdict on the samples. With benchmarks disabled
    (``--benchmark-disable``) only ``extra_info`` is written.
    """
    benchmark.extra_info["samples"] = {"metric": PRIMARY, "label": label, "unit": unit, "block": block,
                                       "count": len(samples_s)}  # fmt: skip
    if metrics:
        benchmark.extra_info.setdefault("metrics", {}).update({name: dict(m) for name, m in metrics.items()})
    if not samples_s:
        return
    stability = rule.assess(samples_s)
    benchmark.extra_info["stability"] = stability_record(stability, [summary(stability)])
    if benchmark.stats is not None:
        replace_rounds(benchmark.stats, list(samples_s))


def stage_metrics(passes: Sequence[Mapping[str, Sequence[float]]], block: int, frames_per_iteration: int = 1,
                  skip: int = 0, *, judged: bool = True) -> dict[str, dict[str, Any]]:  # fmt: skip
    """``stage:<name>`` metrics (seconds per frame of each stage, same blocks as the frame time) from each
    pass's per-iteration stage samples (ms). A stage missing from a pass is left out. ``judged``: the gate
    judges each stage's change as a share of the frame time (in the sequential loop the stages add up to the
    frame; in a pipelined loop they overlap, and the slowest bounds it: its writer's busy time per frame is
    what a slower encode shows as)."""
    names = [name for name in (passes[0] if passes else {}) if all(name in p for p in passes)]
    out = {}
    for name in names:
        data = block_samples([p[name] for p in passes], block, frames_per_iteration, skip)
        if data:
            out[f"stage:{name}"] = {"label": f"stage {name}", "unit": "s per frame", "data": data, "judged": judged}
    return out


@dataclass(frozen=True)
class PassSamples:
    """What `TimedPasses.record` recorded: ``wall``, the wall-clock seconds per frame (or tick) of every block, pass
    after pass (what FPS is computed from); ``stage_passes``, each pass's milliseconds per iteration of every stage;
    ``stages``, the ``stage:<name>`` metrics as recorded (normalised like the primary samples where they are)."""

    wall: list[float]
    stage_passes: list[dict[str, list[float]]]
    stages: dict[str, dict[str, Any]]


class TimedPasses(Generic[R]):
    """The benchmark driver of the video loops: timed passes through ``benchmark.pedantic``, each with a probe of
    the CPU reference (`perf.measure.speedref`), then recorded as block samples. ``results`` (each pass's loop
    result) and ``probes`` (its `ReferenceProbe`, None without the reference) are filled by `run`; ``reference`` is
    read where the ``cpu-reference`` control is on and the loop runs on a GPU, else None."""

    def __init__(self, block: int, controls: Collection[str], on_gpu: bool) -> None:
        self.block = block
        self.reference = CpuReference() if "cpu-reference" in controls and on_gpu else None
        self.results: list[R] = []
        self.probes: list[ReferenceProbe | None] = []

    def probe(self) -> ReferenceProbe | None:
        """A fresh `ReferenceProbe` (a loop's ``on_progress``: a reading after every block), or None."""
        return ReferenceProbe(self.reference, self.block) if self.reference is not None else None

    def run(self, benchmark: Any, one_pass: Callable[[ReferenceProbe | None], R], rounds: int,
            *regions: AbstractContextManager[Any]) -> None:  # fmt: skip
        """``rounds`` timed passes, ``one_pass(probe)`` each with a fresh `probe`, through ``benchmark.pedantic`` (one
        iteration a round, no warm-up round) inside ``regions`` (entered in order: the ``measured_region`` first)."""

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
        """Make the passes the benchmark's samples through ``record`` (the ``perf_samples`` fixture): each block's
        seconds per ``per``, divided by the CPU reference where it was read (then ``extra_info["cpu_reference"]``
        summarises the readings), with the ``stage:<name>`` metrics normalised alike and the wall-clock blocks as the
        ``wall`` metric. ``per`` "frame": passes of the sequential loop (:class:`detector.pipeline.PipelineResult`,
        one frame per iteration, with its stages); "tick": of the multi-stream loop (its ``tick_ms``, no stages)."""
        if per == "frame":
            iterations = [r.iteration_ms for r in self.results]
            stage_passes = [{k: v[: len(r.iteration_ms)] for k, v in r.stage_samples_ms.items()} for r in self.results]
        else:
            iterations, stage_passes = [r.tick_ms for r in self.results], []
        block, readings_s = self.block, self.readings_s
        wall = [block_samples([i], block) for i in iterations]
        stages = stage_metrics(stage_passes, block)
        wall_flat = [x for pass_ in wall for x in pass_]
        if readings_s is not None:
            samples = normalize(wall, readings_s, NOMINAL_S)
            for name, metric in stages.items():
                per_pass = [block_samples([p[name.removeprefix("stage:")]], block) for p in stage_passes]
                metric["data"] = normalize(per_pass, readings_s, NOMINAL_S)
                metric["unit"] = "s per frame at reference speed"
            label, unit = f"{per} time (CPU-reference units)", f"s per {per} at reference speed"
            benchmark.extra_info["cpu_reference"] = {**reference_summary(readings_s), "nominal_ms": NOMINAL_S * 1e3}
        else:
            samples, label, unit = wall_flat, f"{per} time", f"s per {per}"
        metrics = {**stages, "wall": {"label": f"{per} time (wall clock)", "unit": f"s per {per}", "data": wall_flat}}
        record(benchmark, samples, label=label, unit=unit, block=block, metrics=metrics)
        return PassSamples(wall_flat, stage_passes, stages)
