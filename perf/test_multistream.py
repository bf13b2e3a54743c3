"""Multi-stream batching: N streams of the perf video, one inference at batch N per tick.

Each N of ``--perf-streams`` is one test: N reader threads decode the perf video, each starting ``OFFSET``
frames after the previous one (so a batch holds different frames) and looping at its end; the runner is
warmed up at batch N first (a CUDA graph per batch size). The report's table gives aggregate FPS, FPS per
stream and per-frame latency (decoded -> detections on the host) p50/p99 per N. The benchmark's time is
the whole call (thread start and warm-up ticks included); the table's numbers cover the measured ticks only.
"""

from __future__ import annotations

from typing import Any

import pytest

from perf.cases import make_cases

pytestmark = [pytest.mark.benchmark(group="multistream", warmup=False)]

#: Measured ticks per run, per device type (each tick is one frame of every stream).
TICKS = {"cuda": 150, "cpu": 2}
WARMUP_TICKS = {"cuda": 5, "cpu": 1}
#: Frames between the starting points of consecutive streams.
OFFSET = 7
#: Frames each stream may decode ahead.
QUEUE_DEPTH = 2
TABLE = "Multi-stream batching"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "ms_case" in metafunc.fixturenames:
        from perf.plugin import PERF_SESSION

        session = metafunc.config.stash[PERF_SESSION]
        o = session.options
        metafunc.parametrize("ms_case", make_cases(o.backends, o.precisions, None, session.device))
        metafunc.parametrize("streams", o.streams_for(session.device), ids=lambda n: f"x{n}")


def test_multistream(benchmark: Any, ms_case: Any, streams: int, runner_pool: Any, perf_video: Any,
                     perf_report: Any) -> None:
    from detector.multistream import run_multistream

    runner = runner_pool.get(ms_case.backend, ms_case.precision, **ms_case.options)
    kind = "cuda" if runner.device.startswith("cuda") else "cpu"
    runner.warmup(batch_size=streams, iterations=3)
    results = []

    def run() -> None:
        results.append(run_multistream(runner, [perf_video.path] * streams, ticks=TICKS[kind],
                                       warmup_ticks=WARMUP_TICKS[kind], offsets=[k * OFFSET for k in range(streams)],
                                       queue_depth=QUEUE_DEPTH, keep_detections=False))

    benchmark.pedantic(run, rounds=1, iterations=1, warmup_rounds=0)
    if not results:
        run()
    result = results[-1]
    assert result.frames == streams * TICKS[kind] == len(result.latencies_ms)
    perf_report.add(TABLE, {
        "case": f"{ms_case.label} ({runner.device})", "streams": streams, "ticks": result.ticks,
        "aggregate FPS": result.fps, "FPS per stream": result.per_stream_fps,
        "latency p50 ms": result.latency_ms(50), "latency p99 ms": result.latency_ms(99),
        "queue depth": QUEUE_DEPTH,
    })  # fmt: skip
    benchmark.extra_info.update({"backend": ms_case.backend, "variant": ms_case.variant,
                                 "precision": ms_case.precision, **result.summary()})
