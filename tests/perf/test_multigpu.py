"""One GPU per xdist worker, the file barrier (real processes) and the speed-up table."""

from __future__ import annotations

import multiprocessing
import os
import time
from pathlib import Path
from typing import Any

import pytest

from perf.measure.multigpu import barrier, bind_worker_gpu, usable_gpus
from perf.report.suite import speedup_rows


def test_worker_gets_the_gpu_of_its_index_round_robin() -> None:
    env = {"PYTEST_XDIST_WORKER": "gw3", "CUDA_VISIBLE_DEVICES": "4,5"}
    assert bind_worker_gpu(env) == "5"
    assert env["CUDA_VISIBLE_DEVICES"] == "5"


def test_a_worker_is_bound_by_uuid_as_nvidia_smi_lists_the_gpus(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    # nvidia-smi numbers GPUs in PCI order, CUDA fastest first: only a UUID names the same GPU to both.
    smi = tmp_path / "nvidia-smi"
    smi.write_text('#!/bin/sh\ncase "$*" in\n  *--query-gpu=uuid*) printf "GPU-aaa\\nGPU-bbb\\n" ;;\n'
                   '  *--query-gpu=index*) printf "0\\n1\\n" ;;\n  *) exit 2 ;;\nesac\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    env = {"PYTEST_XDIST_WORKER": "gw3"}
    assert usable_gpus(env) == ["GPU-aaa", "GPU-bbb"]
    assert bind_worker_gpu(env) == "GPU-bbb" and env["CUDA_VISIBLE_DEVICES"] == "GPU-bbb"


def test_given_uuids_are_kept_as_they_are() -> None:
    env = {"PYTEST_XDIST_WORKER": "gw0", "CUDA_VISIBLE_DEVICES": "GPU-ccc, MIG-ddd"}
    assert bind_worker_gpu(env) == "GPU-ccc" and env["CUDA_VISIBLE_DEVICES"] == "GPU-ccc"


def test_no_binding_outside_a_worker_or_when_switched_off() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "0,1"}
    assert bind_worker_gpu(env) is None and env["CUDA_VISIBLE_DEVICES"] == "0,1"
    env = {"PYTEST_XDIST_WORKER": "gw1", "CUDA_VISIBLE_DEVICES": "0,1", "PERF_GPU_PER_WORKER": "0"}
    assert bind_worker_gpu(env) is None and env["CUDA_VISIBLE_DEVICES"] == "0,1"


def test_empty_visible_set_means_no_gpu() -> None:
    env = {"PYTEST_XDIST_WORKER": "gw0", "CUDA_VISIBLE_DEVICES": ""}
    assert usable_gpus(env) == [] and bind_worker_gpu(env) is None


def _arrive(folder: str, rank: int, last_let_in: Any, released: Any) -> None:
    """Rank 2 reaches the barrier only once the test lets it in; every rank reports whether it had been let in
    when the barrier released it."""
    if rank == 2:
        last_let_in.wait(60)
    barrier(Path(folder), "go", rank, 3, timeout_s=60)
    released.put((rank, last_let_in.is_set()))


def test_barrier_releases_every_process_only_after_the_last_arrives(tmp_path: Path) -> None:
    # Ordering by an event, not by wall-clock windows: ranks 0 and 1 are waiting at the barrier (their files
    # exist) before rank 2 is let in, so a rank released without rank 2 reports False however slow the machine.
    ctx = multiprocessing.get_context("spawn")
    last_let_in, released = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_arrive, args=(str(tmp_path), r, last_let_in, released)) for r in range(3)]
    for p in procs:
        p.start()
    deadline = time.monotonic() + 60
    while not ((tmp_path / "go.0").exists() and (tmp_path / "go.1").exists()):
        assert time.monotonic() < deadline, "ranks 0 and 1 did not reach the barrier within 60 s"
        time.sleep(0.01)
    assert not (tmp_path / "go.2").exists()
    last_let_in.set()
    reports = sorted(released.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(30)
    assert reports == [(0, True), (1, True), (2, True)]
    assert [p.exitcode for p in procs] == [0, 0, 0]


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


def test_a_visible_set_ends_where_cuda_stops_reading_it() -> None:
    # CUDA sees the devices before the first entry it cannot read: "0,-1,1" is GPU 0 alone.
    assert usable_gpus({"CUDA_VISIBLE_DEVICES": "0,-1,1"}) == ["0"]
    assert usable_gpus({"CUDA_VISIBLE_DEVICES": " 1 , GPU-aaa, MIG-bbb,x,2"}) == ["1", "GPU-aaa", "MIG-bbb"]
    env = {"PYTEST_XDIST_WORKER": "gw1", "CUDA_VISIBLE_DEVICES": "0,-1,1"}
    assert bind_worker_gpu(env) == "0"  # never the hidden GPU 1, nor "-1"


def test_throughput_counts_every_image_of_every_call() -> None:
    """images = calls x batch, and images/s = images / seconds (a host runner: no stream to wait for)."""
    import numpy as np

    from perf.measure.multigpu import throughput

    class Runner:
        stream = None
        calls = 0

        def infer(self, x: Any, to_host: bool = True) -> None:
            assert to_host
            Runner.calls += 1

    got = throughput(Runner(), np.zeros((3, 3, 8, 8), np.float32), seconds=0.0)
    assert got["calls"] == Runner.calls == 20 and got["images"] == 60
    assert got["images_per_s"] == pytest.approx(60 / got["seconds"])
