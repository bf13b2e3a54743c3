"""Multi-stream batching: N streams of the perf video, one inference at batch N per tick.

Each N of ``--perf-streams`` is one test: N reader threads decode the perf video, each starting ``OFFSET``
frames after the previous one (so a batch holds different frames) and looping at its end. An untimed run of
``WARMUP_TICKS`` ticks through the very same code comes first, so CUDA graph capture or torch.compile of batch
N (and of the exact input layout the ticks hand over) happens there, not in the measured region. The
benchmark's samples are seconds per tick in blocks of ticks (`perf.measure.samples`); on a GPU in CPU-reference units
(`perf.measure.speedref`: a reference reading on the calling thread, which does the ticks' work, after every block of
ticks through ``on_progress``; over 8 processes on the H100 machine the normalised figure's CV was 3.6% against
9.4% for the wall clock, which is kept as the ``wall`` metric and gives the FPS); the report's table gives
aggregate FPS (N over the median tick time), FPS per stream and per-frame latency (decoded -> detections on the
host) p50/p99 per N.
"""

from __future__ import annotations

from typing import Any

import pytest

from perf.report import schema

pytestmark = [pytest.mark.benchmark(group="multistream", warmup=False)]

#: Measured ticks per run, per device type (each tick is one frame of every stream).
TICKS = {"cuda": 300, "cpu": 10}
#: Ticks of the untimed run before the measured one.
WARMUP_TICKS = {"cuda": 20, "cpu": 2}
#: Frames between the starting points of consecutive streams.
OFFSET = 7
#: Frames each stream may decode ahead.
QUEUE_DEPTH = 2
TABLE = schema.MULTISTREAM


def test_multistream(benchmark: Any, ms_case: Any, streams: int, runner_pool: Any, perf_video: Any,
                     perf_report: Any, measured_region: Any, perf_controls: Any, perf_samples: Any) -> None:
    import contextlib
    import statistics
    from collections.abc import Iterator

    from detector.multistream import run_multistream
    from perf.measure.controls import reading_on, warm_page_cache
    from perf.measure.samples import TimedPasses, block_size

    runner = runner_pool.get(ms_case.backend, ms_case.precision, **ms_case.options)
    kind = "cuda" if runner.device.startswith("cuda") else "cpu"
    if "page-cache" in perf_controls:
        warm_page_cache(perf_video.path)
    passes = TimedPasses(block_size(TICKS[kind]), perf_controls, on_gpu=kind == "cuda")

    def run(ticks: int, warmup_ticks: int, on_progress: Any = None) -> Any:
        return run_multistream(runner, [perf_video.path] * streams, ticks=ticks, warmup_ticks=warmup_ticks,
                               offsets=[k * OFFSET for k in range(streams)], queue_depth=QUEUE_DEPTH,
                               keep_detections=False, on_progress=on_progress)  # fmt: skip

    try:
        run(WARMUP_TICKS[kind], 1)  # untimed: capture / compile at batch N through the ticks' own path
    except MemoryError as e:  # more streams than the machine holds: refused before any opened
        pytest.skip(f"{streams} streams do not fit in this machine's memory ({e})")
    readers: list[list[float]] = []  # the reference on each reader's CPU, before and after the measured run

    def read_readers() -> None:
        if passes.reference is not None:
            readers.append([reading_on(f"stream{k}-read", passes.reference) for k in range(streams)])

    @contextlib.contextmanager
    def around_run() -> Iterator[None]:
        read_readers()
        yield
        read_readers()

    passes.run(benchmark, lambda probe: run(TICKS[kind], 2, probe), 1,
               measured_region(f"multistream[{ms_case.id}-x{streams}]", runner, benchmark.extra_info), around_run())
    result = passes.results[-1]
    assert result.frames == streams * TICKS[kind] == len(result.latencies_ms)
    wall = passes.record(benchmark, perf_samples, per="tick").wall
    if passes.reference is not None:
        benchmark.extra_info["cpu_reference"]["readers_ms"] = [[1e3 * r for r in at] for at in readers]
    tick_s = statistics.median(wall)
    perf_report.add(TABLE, {
        "case": f"{ms_case.label} ({runner.device})", "streams": streams, "ticks": result.ticks,
        "aggregate FPS": streams / tick_s, "FPS per stream": 1 / tick_s,
        "latency p50 ms": result.latency_ms(50), "latency p99 ms": result.latency_ms(99),
        "queue depth": QUEUE_DEPTH,
    })  # fmt: skip
    benchmark.extra_info.update({"backend": ms_case.backend, "variant": ms_case.variant,
                                 "precision": ms_case.precision, **result.summary(), "fps": streams / tick_s,
                                 "per_stream_fps": 1 / tick_s})  # fmt: skip
