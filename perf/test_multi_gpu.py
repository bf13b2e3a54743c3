"""Several GPUs: one pytest-xdist worker per GPU, per-GPU and aggregate inference throughput, from one run.

Run as ``pytest perf/test_multi_gpu.py -n <GPUs> --dist each`` (every worker runs this test; the plugin binds
worker ``gwN`` to GPU N). In one run: first worker 0 measures alone (the others wait), then all workers measure
at the same time; the report's "Multi-GPU throughput" table gives each GPU's images/s, the aggregate, and the
aggregate over the one-GPU figure (scaling; ideal = number of GPUs). Without xdist it skips with that command.
Records; never asserts a speed.
"""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from detector.backends import variant
from perf.measure.multigpu import barrier, throughput
from perf.report import schema

#: Batch and seconds per measurement, per device type: throughput-sized batches on a GPU.
BATCH = {"cuda": 32, "cpu": 1}
SECONDS = {"cuda": 10.0, "cpu": 2.0}
TABLE = schema.MULTI_GPU


def _runner(runner_pool: Any, device: str, precisions: tuple[str, ...]) -> tuple[str, Any]:
    if device.startswith("cuda"):
        precision = "fp16" if "fp16" in precisions else precisions[0]
        graph = variant("torch-graph")
        return f"{graph.name} {precision}", runner_pool.get(graph.backend, precision, **graph.options)
    return "torch fp32", runner_pool.get("torch", "fp32")


def test_multi_gpu_throughput(request: pytest.FixtureRequest, runner_pool: Any, input_frames: Any,
                              perf_report: Any, perf_cache_dir: Any, perf_device: str) -> None:
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    argv = getattr(request.config, "workerinput", {}).get("mainargv", [])  # a worker's own --dist reads "no"
    each = "--dist=each" in argv or any(a == "--dist" and b == "each" for a, b in zip(argv, argv[1:]))
    if worker is None or not each:
        pytest.skip("needs one pytest-xdist worker per GPU: pytest perf/test_multi_gpu.py -n <GPUs> --dist each")
    import torch

    from perf.session import PERF_SESSION

    rank, parties = int(worker[2:]), int(os.environ["PYTEST_XDIST_WORKER_COUNT"])
    folder = perf_cache_dir / "multi-gpu" / request.config.workerinput["testrunuid"]
    device_type = perf_device.partition(":")[0]
    label, runner = _runner(runner_pool, perf_device, request.config.stash[PERF_SESSION].options.precisions)
    x = torch.from_numpy(input_frames(BATCH[device_type])).to(runner.torch_device)
    x = runner.as_input(x) if device_type == "cuda" else x  # the model's dtype and layout, as the benchmarks feed it
    throughput(runner, x, 1.0)  # warm-up: graph capture, cuDNN algorithm choice, clocks up
    seconds = SECONDS[device_type]

    barrier(folder, "ready", rank, parties)
    alone = throughput(runner, x, seconds) if rank == 0 else None
    barrier(folder, "alone-done", rank, parties)
    together = throughput(runner, x, seconds)
    name = torch.cuda.get_device_name(runner.torch_device) if runner.stream is not None else "cpu"
    result = {"rank": rank, "gpu": os.environ.get("CUDA_VISIBLE_DEVICES", "-"), "name": name,
              "alone": alone, "together": together}
    (folder / f"result.{rank}.json").write_text(json.dumps(result))
    barrier(folder, "results", rank, parties)
    if rank != 0:
        return
    results = [json.loads((folder / f"result.{r}.json").read_text()) for r in range(parties)]
    one = results[0]["alone"]["images_per_s"]
    aggregate = sum(r["together"]["images_per_s"] for r in results)
    for r in results:
        perf_report.add(TABLE, {"worker": f"gw{r['rank']}", "GPU": f"{r['gpu']} {r['name']}", "case": label,
                                "batch": BATCH[device_type], "images/s (all at once)": r["together"]["images_per_s"],
                                "images/s (alone)": r["alone"]["images_per_s"] if r["alone"] else None})
    perf_report.add(TABLE, {"worker": f"all {parties}", "GPU": "aggregate", "case": label, "batch": BATCH[device_type],
                            "images/s (all at once)": aggregate, "images/s (alone)": one,
                            "scaling": aggregate / one})
    request.node.user_properties.append(("multi_gpu", {"per_gpu": results, "aggregate": aggregate,
                                                       "scaling": aggregate / one}))
