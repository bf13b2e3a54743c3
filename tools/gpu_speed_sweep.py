"""Batch-size sweep of the fastest torch paths, A/B over one runner option (GPU only).

    python3 tools/gpu_speed_sweep.py [--batches 1,32,64,128,256] [--calls 200] [--option split_routes]
                                     [--compile] [--profile-batch 1]

For torch-graph fp16 (batch norm folded, channels-last, CUDA graph replay) -- and with ``--compile`` also
torch-compile fp16 (the same through ``torch.compile(mode="reduce-overhead")``) -- with the boolean runner option
``--option`` off and on (``cudnn_benchmark``: cuDNN's algorithm search; ``split_routes``: the convs that grouped
routes slice split per channel group), times ``--calls`` back-to-back ``runner.infer(x, to_host=False)`` calls
between two CUDA events per batch size, on a batch already in the runner's input format, and prints ms per
call, images/s and achieved TFLOP/s (6.9 GFLOPs per 416x416 image). Then, at ``--profile-batch``, a
torch.profiler kernel table of one torch-graph call: what stands between the batch-1 time and the hardware.
Prints only what it measured.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from detector.backends import create_runner
from detector.spec import ModelSpec

GFLOPS_PER_IMAGE = 6.9
PATHS = {
    "torch-graph": {"fuse_bn": True, "channels_last": True, "cuda_graph": True},
    "torch-compile": {"fuse_bn": True, "channels_last": True, "compile": True, "compile_mode": "reduce-overhead"},
}


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
    parser.add_argument("--option", default="cudnn_benchmark", help="boolean torch runner option to A/B")
    parser.add_argument("--compile", action="store_true", help="also the torch-compile path")
    parser.add_argument("--profile-batch", type=int, default=1, help="0: no kernel table")
    args = parser.parse_args()
    batches = [int(b) for b in args.batches.split(",")]
    print(torch.cuda.get_device_name(0), "torch", torch.__version__, "cudnn", torch.backends.cudnn.version())
    spec = ModelSpec.default()
    print(f"{'path':>13s} {args.option:>15s} {'batch':>5s} {'ms/call':>8s} {'images/s':>9s} {'TFLOP/s':>7s} "
          f"{'warm-up s':>9s}")
    for path in ("torch-graph", "torch-compile") if args.compile else ("torch-graph",):
        for value in (False, True):
            options = {**PATHS[path], args.option: value}
            runner = create_runner("torch", spec, device="cuda", precision="fp16", **options)
            runner.activate()
            for batch in batches:
                x = runner.as_input(torch.rand(batch, 3, 416, 416, device="cuda"))
                start = time.perf_counter()
                for _ in range(3):
                    runner.infer(x, to_host=False)
                torch.cuda.synchronize()
                warm = time.perf_counter() - start
                _time_calls(runner, x, 10)
                ms = _time_calls(runner, x, max(20, args.calls // max(1, batch // 32)))
                ips = batch / ms * 1e3
                print(f"{path:>13s} {value!s:>15s} {batch:5d} {ms:8.3f} {ips:9,.0f} "
                      f"{ips * GFLOPS_PER_IMAGE / 1e3:7.0f} {warm:9.2f}", flush=True)
            if args.profile_batch and path == "torch-graph":
                print(f"\n== kernels of one torch-graph fp16 call, batch {args.profile_batch}, {args.option}={value}")
                _kernel_table(runner, runner.as_input(torch.rand(args.profile_batch, 3, 416, 416, device="cuda")))
                print()
            runner.deactivate()
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
