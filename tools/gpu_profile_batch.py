"""Where the time goes at large batch: torch.profiler kernel tables of the fastest torch paths (GPU only).

    python3 tools/gpu_profile_batch.py [--batch 256] [--iters 20]

For eager fp16 channels-last with batch norm folded (the kernels the CUDA-graph variant replays) and for
``torch.compile`` (Inductor, mode "default": the kernels "reduce-overhead" replays), prints the GPU time per
call and per image, images/s, achieved TFLOP/s at 6.9 GFLOPs per 416x416 image, and the top kernels by GPU
time with their share. Prints only what it measured.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from detector.backends import create_runner
from detector.spec import ModelSpec
from detector.stagespeed import infer_ms_per_call

GFLOPS_PER_IMAGE = 6.9  # YOLOv4-tiny at 416x416 (see ../shared/reference/yolov4-tiny.md)
VARIANTS = {
    "eager fp16 channels-last fused-BN (= torch-graph's kernels)": {"fuse_bn": True, "channels_last": True},
    "torch.compile default (= torch-compile's kernels)": {"fuse_bn": True, "channels_last": True, "compile": True,
                                                         "compile_mode": "default"},
}


def kernel_table(runner: Any, x: torch.Tensor, iters: int, top: int = 14) -> None:
    """Print the GPU activities of ``iters`` calls (torch.profiler): count and kernel time per call, then the
    ``top`` kernels by GPU time with calls per call, ms per call and share."""
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(iters):
            runner.infer(x, to_host=False)
        torch.cuda.synchronize()
    events = [e for e in prof.key_averages() if e.device_time_total > 0]
    total = sum(e.self_device_time_total for e in events)
    print(f"{sum(e.count for e in events) // iters} GPU activities per call, {total / 1e3 / iters:.3f} ms of kernel "
          "time per call (sum, gaps excluded)")
    print(f"{'kernel':90s} {'calls':>6s} {'ms/call':>8s} {'share':>6s}")
    for e in sorted(events, key=lambda e: -e.self_device_time_total)[:top]:
        print(f"{e.key[:90]:90s} {e.count // iters:6d} {e.self_device_time_total / 1e3 / iters:8.3f} "
              f"{e.self_device_time_total / total:6.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--iters", type=int, default=20)
    args = parser.parse_args()
    print(torch.cuda.get_device_name(0), "torch", torch.__version__)
    spec = ModelSpec.default()
    x = torch.rand(args.batch, 3, 416, 416, device="cuda")
    for label, options in VARIANTS.items():
        runner = create_runner("torch", spec, device="cuda", precision="fp16", **options)
        runner.activate()
        x = runner.as_input(x)  # fp16 channels-last, as the suite's inference benchmark feeds it
        start = time.perf_counter()
        for _ in range(5):
            runner.infer(x, to_host=False)
        torch.cuda.synchronize()
        print(f"\n== {label}, batch {args.batch}: warm-up {time.perf_counter() - start:.1f} s")
        ms = infer_ms_per_call(runner, x, args.iters)
        ips = args.batch / ms * 1e3
        print(f"{ms:.3f} ms per call, {ms / args.batch * 1e3:.1f} us per image, {ips:,.0f} images/s, "
              f"{ips * GFLOPS_PER_IMAGE / 1e3:.0f} TFLOP/s achieved")
        kernel_table(runner, x, args.iters)
        runner.deactivate()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
