"""One GPU per xdist worker, the file barrier (real processes) and the speed-up table."""

from __future__ import annotations

import multiprocessing
import time
from pathlib import Path

import pytest

from perf.multigpu import barrier, bind_worker_gpu, gpu_indices
from perf.report import speedup_rows


def test_worker_gets_the_gpu_of_its_index_round_robin() -> None:
    env = {"PYTEST_XDIST_WORKER": "gw3", "CUDA_VISIBLE_DEVICES": "4,5"}
    assert bind_worker_gpu(env) == "5"
    assert env["CUDA_VISIBLE_DEVICES"] == "5"


def test_no_binding_outside_a_worker_or_when_switched_off() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert bind_worker_gpu(env) is None and env["CUDA_VISIBLE_DEVICES"] == "0,1"
    env = {"PYTEST_XDIST_WORKER": "gw1", "CUDA_VISIBLE_DEVICES": "0,1", "PERF_GPU_PER_WORKER": "0"}
    assert bind_worker_gpu(env) is None and env["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_empty_visible_set_means_no_gpu() -> None:
    env = {"PYTEST_XDIST_WORKER": "gw0", "CUDA_VISIBLE_DEVICES": ""}
    assert gpu_indices(env) == [] and bind_worker_gpu(env) is None


def _arrive(folder: str, rank: int, delay: float, stamps: multiprocessing.Queue) -> None:
    time.sleep(delay)
    barrier(Path(folder), "go", rank, 3, timeout_s=30)
    stamps.put(time.monotonic())


def test_barrier_releases_every_process_only_after_the_last_arrives(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    stamps = ctx.Queue()
    start = time.monotonic()
    procs = [ctx.Process(target=_arrive, args=(str(tmp_path), r, d, stamps)) for r, d in enumerate((0.0, 0.1, 1.5))]
    for p in procs:
        p.start()
    released = [stamps.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(30)
    assert all(t - start >= 1.5 for t in released)
    assert max(released) - min(released) < 0.5


def test_barrier_names_the_missing_ranks_on_timeout(tmp_path: Path) -> None:
    with pytest.raises(TimeoutError, match=r"ranks \[1, 2\]"):
        barrier(tmp_path, "go", 0, 3, timeout_s=0.2)


def test_speedups_compare_each_case_with_eager_fp32_at_the_same_batch() -> None:
    rows = [{"case": "torch fp32", "batch": 1, "median ms": 2.0}, {"case": "torch fp32", "batch": 8, "median ms": 4.0},
            {"case": "torch-graph fp16", "batch": 1, "median ms": 0.5},
            {"case": "torch-graph fp16", "batch": 8, "median ms": 1.0},
            {"case": "torch-graph fp16", "batch": 64, "median ms": 3.0}]
    got = {(r["case"], r["batch"]): r["speed-up"] for r in speedup_rows(rows)}
    assert got == {("torch-graph fp16", 1): 4.0, ("torch-graph fp16", 8): 4.0}
