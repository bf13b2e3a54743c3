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

from detector.backends import create_runner
from detector.spec import ModelSpec
from detector.stagespeed import infer_ms_per_call
from gpu_profile_batch import GFLOPS_PER_IMAGE, kernel_table  # tools/ is sys.path[0]

GRAPH = {"fuse_bn": True, "channels_last": True, "cuda_graph": True}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
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
            infer_ms_per_call(runner, x, 10)
            ms = infer_ms_per_call(runner, x, max(20, args.calls // max(1, batch // 32)))
            ips = batch / ms * 1e3
            print(f"{search!s:>15s} {batch:5d} {ms:8.3f} {ips:9,.0f} {ips * GFLOPS_PER_IMAGE / 1e3:7.0f} {warm:9.2f}",
                  flush=True)
        if args.profile_batch:
            print(f"\n== kernels of one torch-graph fp16 call, batch {args.profile_batch}, cudnn_benchmark={search}")
            kernel_table(runner, torch.rand(args.profile_batch, 3, 416, 416, device="cuda"), 20, top=16)
            print()
        runner.deactivate()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
