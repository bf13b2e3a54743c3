#!/usr/bin/env python3
"""GPU diagnostic for the TensorRT backend: export, build, cache, load, run (or refuse cleanly), unit tests.

Run on a GPU machine with a TensorRT package importable (full ``tensorrt`` or TensorRT-RTX, e.g. the
``tensorrt_rtx_bindings`` wheel unpacked into /tmp/site)::

    PYTHONPATH=/tmp/site python3 tools/gpu_trt_check.py --cache-dir /tmp/trt-check --out /tmp/trt-check.json

For each precision it prints one line per step: the ONNX export, a first engine build (an existing cache
entry is removed first unless ``--keep-cache``, so that this really builds; build seconds printed), a second
build that must come from the cache, deserialization, and the runner's ``activate``. Expected refusals --
TensorRT-RTX on a GPU it does not support (the H100, compute capability 9.0), int8 on a strongly typed
package -- are printed as one line each and are not failures. Where the engine runs, it infers on synthetic
frames and prints the max abs difference to the PyTorch model, the cold-start record, memory and the
slowest layers. Finally it runs the TensorRT unit tests with pytest. A JSON summary goes to ``--out``.

Exit status: 0 if everything expected happened; 1 if anything unexpected did (printed with its traceback:
this is a diagnostic tool) or a unit test failed; 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from detector.errors import BackendUnavailable  # noqa: E402 - after the path setup above

TEST_FILES = ("tests/test_engine.py", "tests/test_tensorrt_cache.py", "tests/test_tensorrt_runner.py")


def parse_batches(text: str) -> tuple[int, ...]:
    try:
        sizes = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"Could not parse value: {text!r}.") from None
    if not sizes or min(sizes) < 1:
        raise argparse.ArgumentTypeError(f"Could not parse value: {text!r}.")
    return sizes


def parse_precisions(text: str) -> tuple[str, ...]:
    names = tuple(v.strip() for v in text.split(",") if v.strip())
    if not names or any(n not in ("fp32", "fp16", "int8") for n in names):
        raise argparse.ArgumentTypeError(f"Could not parse value: {text!r}.")
    return names


class Check:
    """Runs steps, prints one line each, and collects the JSON summary."""

    def __init__(self) -> None:
        self.summary: dict[str, Any] = {"steps": [], "unexpected": []}

    def say(self, line: str) -> None:
        print(line, flush=True)

    def step(self, name: str, fn: Callable[[], Any], *, expect_refusal: bool = True) -> Any:
        """Run ``fn``; a BackendUnavailable is an expected refusal (one line), anything else unexpected."""
        start = time.perf_counter()
        record: dict[str, Any] = {"step": name}
        try:
            result = fn()
        except BackendUnavailable as e:
            record.update(status="refused", reason=str(e))
            self.say(f"[refused] {name}: {e}")
            if not expect_refusal:
                self.summary["unexpected"].append(f"{name}: refused: {e}")
            result = e
        except Exception as e:  # diagnostic tool: report everything, keep going
            record.update(status="error", error=f"{type(e).__name__}: {e}")
            self.say(f"[ERROR] {name}: {type(e).__name__}: {e}")
            traceback.print_exc()
            self.summary["unexpected"].append(f"{name}: {type(e).__name__}: {e}")
            result = e
        else:
            record["status"] = "ok"
        record["seconds"] = round(time.perf_counter() - start, 4)
        self.summary["steps"].append(record)
        return result


def environment(check: Check) -> tuple[Any, str] | None:
    import torch

    from detector.engine import import_tensorrt, rtx_compute_capabilities, tensorrt_version

    env: dict[str, Any] = {"python": platform.python_version(), "torch": torch.__version__,
                           "torch_cuda": torch.version.cuda, "cuda_available": torch.cuda.is_available(),
                           "DETECTOR_TENSORRT": os.environ.get("DETECTOR_TENSORRT")}
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        env.update(gpu=torch.cuda.get_device_name(), compute_capability=f"{major}.{minor}")
    check.summary["environment"] = env
    check.say(f"environment: {json.dumps(env)}")
    found = check.step("import TensorRT", import_tensorrt, expect_refusal=False)
    if isinstance(found, BaseException):
        return None
    trt, flavor = found
    info = {"module": trt.__name__, "flavor": flavor, "version": tensorrt_version(trt),
            "file": getattr(trt, "__file__", None)}
    if flavor == "tensorrt_rtx":
        info["rtx_compute_capabilities"] = [f"{a}.{b}" for a, b in rtx_compute_capabilities(trt)]
    check.summary["tensorrt"] = info
    check.say(f"tensorrt: {json.dumps(info)}")
    return trt, flavor


def check_precision(check: Check, spec: Any, trt: Any, flavor: str, precision: str, args: argparse.Namespace) -> None:
    from detector.engine import (
        cached_engine,
        deserialize_engine,
        fp16_onnx_path,
        precision_unavailable_reason,
        strongly_typed,
    )

    result: dict[str, Any] = {}
    check.summary.setdefault("precisions", {})[precision] = result
    reason = precision_unavailable_reason(trt, flavor, precision)
    if reason is not None:
        result["unavailable"] = reason
        check.say(f"[refused] {precision}: {reason}")
        return
    if precision == "fp16" and strongly_typed(trt, flavor):
        onnx_path = check.step(f"{precision}: export fp16 ONNX", lambda: fp16_onnx_path(spec))
    else:
        onnx_path = spec.onnx_path()
    if isinstance(onnx_path, BaseException):
        return
    result["onnx"] = str(onnx_path)
    cache_dir = Path(args.cache_dir) / "trt"
    if not args.keep_cache:
        for old in (cache_dir / "engines").glob(f"{Path(onnx_path).stem}-{flavor}-{precision}-*.engine*"):
            old.unlink()
    options = {"cache_dir": cache_dir, "precision": precision, "profile_batches": args.batch_sizes,
               "tensorrt": (trt, flavor)}
    if precision == "int8":
        check.say(f"[skipped] {precision}: build here needs the runner's calibrator; see the runner step")
    else:
        first = check.step(f"{precision}: build 1", lambda: cached_engine(onnx_path, **options))
        if isinstance(first, BaseException):
            return
        result.update(build_1_s=first.build_s, engine=str(first.path), engine_bytes=len(first.data),
                      build_1_from_cache=first.from_cache)
        how = f"built in {first.build_s:.2f} s" if first.build_s is not None else "came from the cache (--keep-cache)"
        check.say(f"{precision}: build 1 {how}: {first.path.name} ({len(first.data) / 2**20:.1f} MiB)")
        start = time.perf_counter()
        second = check.step(f"{precision}: build 2", lambda: cached_engine(onnx_path, **options))
        if isinstance(second, BaseException):
            return
        seconds = time.perf_counter() - start
        result.update(build_2_from_cache=second.from_cache, build_2_s=seconds)
        check.say(f"{precision}: build 2 {'came from the cache' if second.from_cache else 'BUILT AGAIN'} in "
                  f"{seconds:.3f} s")
        if not second.from_cache or second.data != first.data:
            check.summary["unexpected"].append(f"{precision}: the second build did not come from the cache")
        loaded = check.step(f"{precision}: deserialize",
                            lambda: deserialize_engine(second.data, tensorrt=(trt, flavor), source=second.path))
        if isinstance(loaded, BaseException):
            result["deserialize"] = str(loaded)
        else:
            result["deserialize_s"] = loaded.deserialize_s
            check.say(f"{precision}: deserialized in {loaded.deserialize_s:.3f} s")
            del loaded
    run_runner(check, spec, precision, args, result)


def run_runner(check: Check, spec: Any, precision: str, args: argparse.Namespace, result: dict[str, Any]) -> None:
    import numpy as np
    import torch

    from detector.backends import create_runner
    from detector.preprocess import preprocess
    from detector.synthetic import render_frames

    runner = create_runner("tensorrt", spec, device="cuda", precision=precision, batch_sizes=args.batch_sizes)
    activated = check.step(f"{precision}: runner.activate", runner.activate)
    if isinstance(activated, BaseException):
        result["runner"] = str(activated)
        return
    try:
        batch_size = min(4, max(args.batch_sizes))
        frames = [frame for frame, _ in render_frames(seed=0, frames=batch_size)]
        batch, _ = preprocess(frames, spec.input_size)
        got = check.step(f"{precision}: infer", lambda: runner.infer(batch).numpy())
        if not isinstance(got, BaseException):
            model = spec.load_torch().cuda().eval()
            with torch.no_grad():
                want = model(torch.from_numpy(batch).cuda()).float().cpu().numpy()
            box = float(np.abs(got[..., :4] - want[..., :4]).max())
            score = float(np.abs(got[..., 4:] - want[..., 4:]).max())
            result.update(max_abs_diff_boxes_px=box, max_abs_diff_scores=score)
            check.say(f"{precision}: outputs vs torch: max abs diff boxes {box:.4f} px, scores {score:.5f}")
        result["cold_start"] = runner.cold_start.as_dict() if runner.cold_start else None
        result["memory"] = runner.memory
        result["engine_info"] = runner.engine_info
        check.say(f"{precision}: cold start {json.dumps(result['cold_start'])}")
        check.say(f"{precision}: memory {json.dumps(result['memory'])}")
        table = check.step(f"{precision}: layer_profile", lambda: runner.layer_profile(batch_size=1, iterations=10))
        if not isinstance(table, BaseException):
            result["top_layers_ms"] = table[:10]
            for name, ms in table[:5]:
                check.say(f"{precision}:   {ms:8.4f} ms  {name}")
    finally:
        runner.deactivate()


def run_tests(check: Check, args: argparse.Namespace) -> None:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *filter(None, [env.get("PYTHONPATH")])])
    command = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *TEST_FILES,
               *args.pytest_args]
    check.say(f"running: {' '.join(command)}")
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=args.test_timeout)
    output = (proc.stdout + proc.stderr).strip()
    print(output[-6000:], flush=True)
    lines = output.splitlines()
    check.summary["tests"] = {"command": command, "returncode": proc.returncode,
                              "result": lines[-1] if lines else "", "output_tail": output[-6000:]}
    if proc.returncode != 0:
        check.summary["unexpected"].append(f"unit tests failed (pytest exit status {proc.returncode})")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0], allow_abbrev=False)
    parser.add_argument("--cache-dir", type=Path, required=True, help="ModelSpec cache folder (ONNX, engines).")
    parser.add_argument("--out", type=Path, required=True, help="where to write the JSON summary.")
    parser.add_argument("--precisions", type=parse_precisions, default=("fp32", "fp16", "int8"),
                        help="comma-separated precisions to check (default: fp32,fp16,int8).")
    parser.add_argument("--batch-sizes", type=parse_batches, default=(1, 8, 32),
                        help="optimization profile batch sizes (default: 1,8,32).")
    parser.add_argument("--keep-cache", action="store_true", help="do not remove cached engines before build 1.")
    parser.add_argument("--skip-tests", action="store_true", help="do not run the unit tests.")
    parser.add_argument("--test-timeout", type=float, default=420.0, help="pytest time limit in s (default: 420).")
    parser.add_argument("--pytest-args", nargs=argparse.REMAINDER, default=[], help="extra pytest arguments.")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    check = Check()
    started = time.time()
    try:
        found = environment(check)
        if found is not None:
            from detector.spec import ModelSpec

            spec = ModelSpec.default(cache_dir=args.cache_dir)
            onnx_path = check.step("export ONNX", spec.onnx_path, expect_refusal=False)
            if not isinstance(onnx_path, BaseException):
                check.say(f"export: {onnx_path} ({onnx_path.stat().st_size / 2**20:.1f} MiB)")
                for precision in args.precisions:
                    check_precision(check, spec, *found, precision, args)
        if not args.skip_tests:
            check.step("unit tests", lambda: run_tests(check, args), expect_refusal=False)
    except BaseException as e:  # KeyboardInterrupt included: still write what we have
        traceback.print_exc()
        check.summary["unexpected"].append(f"top level: {type(e).__name__}: {e}")
    status = 1 if check.summary["unexpected"] else 0
    check.summary.update(exit_status=status, wall_s=round(time.time() - started, 2))
    try:
        from detector.fileio import atomic_write_text

        atomic_write_text(args.out, json.dumps(check.summary, indent=2, default=str))
        check.say(f"summary: {args.out}")
    except Exception:
        traceback.print_exc()
        status = 1
    check.say("RESULT: " + ("OK (expected refusals only)" if status == 0 else
                            "UNEXPECTED: " + " | ".join(check.summary["unexpected"])))
    return status


if __name__ == "__main__":
    sys.exit(main())
