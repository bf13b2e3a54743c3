"""Batch-size sweep of the fastest torch paths, with and without cuDNN's algorithm search (GPU only).

    python3 tools/gpu_speed_sweep.py [--batches 1,32,64,128,256] [--calls 200] [--profile-batch 1]

For torch-graph fp16 (batch norm folded, channels-last, CUDA graph replay) with ``cudnn_benchmark`` off and on,
times ``--calls`` back-to-back ``runner.infer(x, to_host=False)`` calls between two CUDA events per batch size
and prints ms per call, images/s and achieved TFLOP/s (6.9 GFLOPs per 416x416 image). Then, at
``--profile-batch``, a torch.profiler kernel table of one graph replay: kernel count and the top kernels, which
is what stands between the batch-1 time and the hardware. Prints only what it measured.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from detector.backends import create_runner
from detector.spec import ModelSpec

GFLOPS_PER_IMAGE = 6.9
GRAPH = {"fuse_bn": True, "channels_last": True, "cuda_graph": True}


def _time_calls(runner: object, x: torch.Tensor, calls: int) -> float:
    """GPU ms per call of ``calls`` back-to-back inferences (events around the whole loop)."""
    begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin.record()
    for _ in range(calls):
        runner.infer(x, to_host=False)  # type: ignore[attr-defined]
    end.record()
    end.synchronize()
    return begin.elapsed_time(end) / calls


def _kernel_table(runner: object, x: torch.Tensor, iters: int = 20) -> None:
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            runner.infer(x, to_host=False)  # type: ignore[attr-defined]
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_time_total > 0]
    total = sum(e.self_device_time_total for e in events)
    kernels = sum(e.count for e in events) // iters
    print(f"{kernels} GPU activities per call, {total / 1e3 / iters:.3f} ms of kernel time per call "
          f"(sum, gaps excluded)")
    print(f"{'kernel':88s} {'calls':>5s} {'us/call':>8s} {'share':>6s}")
    for e in sorted(events, key=lambda e: -e.self_device_time_total)[:16]:
        print(f"{e.key[:88]:88s} {e.count // iters:5d} {e.self_device_time_total / iters:8.1f} "
              f"{e.self_device_time_total / total:6.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", default="1,32,64,128,256")
    parser.add_argument("--calls", type=int, default=200)
    parser.add_argument("--profile-batch", type=int, default=1)
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    print(torch.cuda.get_device_name(0), "torch", torch.__version__, "cudnn", torch.backends.cudnn.version())
    spec = ModelSpec.default()
    print(f"{'cudnn_benchmark':>15s} {'batch':>5s} {'ms/call':>8s} {'images/s':>9s} {'TFLOP/s':>7s} {'warm-up s':>9s}")
    for search in (False, True):
        runner = create_runner("torch", spec, device="cuda", precision="fp16", cudnn_benchmark=search, **GRAPH)
        runner.activate()
        for batch in batches:
            x = torch.rand(batch, 3, 416, 416, device="cuda")
            start = time.perf_counter()
            runner.warmup(batch, iterations=3)
            warm = time.perf_counter() - start
            _time_calls(runner, x, 10)
            ms = _time_calls(runner, x, max(20, args.calls // max(1, batch // 32)))
            ips = batch / ms * 1e3
            print(f"{search!s:>15s} {batch:5d} {ms:8.3f} {ips:9,.0f} {ips * GFLOPS_PER_IMAGE / 1e3:7.0f} {warm:9.2f}",
                  flush=True)
        if args.profile_batch:
            print(f"\n== kernels of one torch-graph fp16 call, batch {args.profile_batch}, cudnn_benchmark={search}")
            _kernel_table(runner, torch.rand(args.profile_batch, 3, 416, 416, device="cuda"))
            print()
        runner.deactivate()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
