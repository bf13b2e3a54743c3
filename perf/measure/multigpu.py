"""Several GPUs via pytest-xdist: a GPU per worker, a file barrier, a throughput loop (docs/method.md, section 7)."""

from __future__ import annotations

import itertools
import logging
import os
import subprocess
import time
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def usable_gpus(env: MutableMapping[str, str] | None = None) -> list[str]:
    """The GPUs this process may use, as ``CUDA_VISIBLE_DEVICES`` entries: its own, else ``nvidia-smi``'s UUIDs
    (not its indices: CUDA numbers the GPUs in its own order, ``CUDA_DEVICE_ORDER``)."""
    env = os.environ if env is None else env
    if (visible := env.get("CUDA_VISIBLE_DEVICES")) is not None:  # CUDA stops at the first entry it cannot read
        entries = [v.strip() for v in visible.split(",")]
        return list(itertools.takewhile(lambda v: v.isdigit() or v.startswith(("GPU-", "MIG-")), entries))
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=uuid", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=20, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.strip()]


def bind_worker_gpu(env: MutableMapping[str, str] | None = None) -> str | None:
    """In xdist worker ``gwN``, set ``CUDA_VISIBLE_DEVICES`` to the N-th usable GPU and return it; else None."""
    env = os.environ if env is None else env
    worker = env.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or env.get("PERF_GPU_PER_WORKER", "1") == "0" or not (gpus := usable_gpus(env)):
        return None
    chosen = gpus[int(worker[2:]) % len(gpus)]
    env["CUDA_VISIBLE_DEVICES"] = chosen
    log.info("xdist worker %s uses GPU %s", worker, chosen)
    return chosen


def barrier(folder: Path, name: str, rank: int, parties: int, *, timeout_s: float = 300.0) -> None:
    """Wait until ranks 0..parties-1 reached barrier ``name`` (a file per rank in ``folder``), or TimeoutError."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.{rank}").touch()
    deadline = time.monotonic() + timeout_s
    while missing := [r for r in range(parties) if not (folder / f"{name}.{r}").exists()]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"barrier {name!r} in {folder}: ranks {missing} did not arrive within {timeout_s:.0f} s")
        time.sleep(0.01)


def throughput(runner: Any, x: Any, seconds: float) -> dict[str, float]:
    """Back-to-back ``runner.infer(x)`` (output on the device) for about ``seconds`` of wall time, device finished."""
    on_gpu, calls, elapsed, start = runner.stream is not None, 0, 0.0, time.perf_counter()
    while calls == 0 or elapsed < seconds:
        for _ in range(20):
            runner.infer(x, to_host=not on_gpu)
        calls += 20
        if on_gpu:
            runner.stream.synchronize()
        elapsed = time.perf_counter() - start
    images = calls * int(x.shape[0])
    return {"calls": calls, "images": images, "seconds": elapsed, "images_per_s": images / elapsed}
