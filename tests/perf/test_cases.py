"""The suite's cases (perf.measure.cases): which backend variants, precisions and batches are collected on a device,
the marks (gpu, trt, nsys, ci, skip) each case carries, and -- in real pytest processes of the suite's own files --
that a selected case which cannot run here is collected under its id and skipped with its reason, never dropped."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from detector.backends import variants
from perf.measure.cases import CASE_FIXTURES, make_cases, unavailable_reason

ROOT = Path(__file__).resolve().parents[2]
#: The fixtures of `CASE_FIXTURES` made from the selected cases (`make_cases`), and every benchmark file of the suite
#: whose tests take one.
CASE_ARGS = frozenset({"case", "e2e_case", "pipe_case", "ms_case", "candidate"})


def _takes_a_case(path: Path) -> bool:
    """Whether a test function of ``path`` takes one of `CASE_ARGS`."""
    tests = [n for n in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
             if isinstance(n, ast.FunctionDef) and n.name.startswith("test_")]  # fmt: skip
    return any(a.arg in CASE_ARGS for test in tests for a in test.args.args)


CASE_FILES = sorted(p for p in (ROOT / "perf").glob("test_*.py") if _takes_a_case(p))
#: What the suite says where a case has vanished into an empty parameter set.
VANISHED = ("NOTSET", "empty parameter set")


def _marks(param: object) -> dict[str, object]:
    """A param's marks by name -> the skip reason (a ``skip`` mark) or None."""
    return {m.name: m.kwargs.get("reason") for m in param.marks}  # type: ignore[attr-defined]


def _perf(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``pytest <args>`` in a fresh process started in ``folder`` (the repository's ini and plugins), on the CPU."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:randomly", "-p", "no:xdist",
               "--rootdir", str(ROOT), "--perf-device=cpu", "--perf-cache-dir=cache", "--perf-reports-dir=reports",
               "--benchmark-storage=file://storage", *args]  # fmt: skip
    return subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True, timeout=600, check=False)


def test_every_selected_variant_and_precision_is_a_case_on_the_cpu_too() -> None:
    params = make_cases(("torch", "onnxruntime", "tensorrt"), ("fp32", "fp16"), (1, 8), "cpu", nsys_first=True)
    ids = [p.id for p in params]
    assert ids == [f"{v}-{p}-b{b}" for v in ("torch", "torch-graph", "torch-compile", "onnxruntime", "tensorrt")
                   for p in ("fp32", "fp16") for b in (1, 8)]  # fmt: skip
    marks = {p.id: _marks(p) for p in params}
    # made for CUDA: the gpu marker, which the suite's set-up turns into "needs a CUDA device; --perf-device ..."
    for variant in ("torch-graph", "torch-compile", "tensorrt"):
        assert all("gpu" in marks[i] and "skip" not in marks[i] for i in ids if i.startswith(variant + "-f"))
    assert {"gpu", "trt"} <= set(marks["tensorrt-fp16-b8"])
    # a precision the runner lacks on this device: skipped with the runner's own reason
    assert marks["onnxruntime-fp16-b1"]["skip"] == "onnxruntime has no fp16 mode (it runs fp32)"
    assert marks["torch-fp16-b8"]["skip"] == "fp16 needs a CUDA device (the CPU runs fp32 only)"
    # what runs here carries no gpu marker and no skip; the first such case of each variant is the profiled one
    runnable = [i for i in ids if not {"gpu", "skip"} & set(marks[i])]
    assert runnable == ["torch-fp32-b1", "torch-fp32-b8", "onnxruntime-fp32-b1", "onnxruntime-fp32-b8"]
    assert [i for i in ids if "nsys" in marks[i]] == ["torch-fp32-b1", "onnxruntime-fp32-b1"]


def test_the_profiled_case_of_a_variant_is_its_first_that_can_run() -> None:
    params = make_cases(("onnxruntime",), ("fp16", "fp32"), (1,), "cpu", nsys_first=True)
    assert {p.id: "nsys" in _marks(p) for p in params} == {"onnxruntime-fp16-b1": False, "onnxruntime-fp32-b1": True}


def test_unavailable_reason_names_what_the_backend_lacks_in_one_line() -> None:
    assert unavailable_reason("torch", "cpu", "fp32") is None
    assert unavailable_reason("torch", "cpu", "int8") == "torch has no int8 mode (it runs fp32, fp16)"
    assert unavailable_reason("onnxruntime", "cpu", "fp16") == "onnxruntime has no fp16 mode (it runs fp32)"
    assert unavailable_reason("torch", "cpu", "fp16") == "fp16 needs a CUDA device (the CPU runs fp32 only)"


def test_gpu_cases_mark_gpu_and_trt_and_can_exclude_the_reference() -> None:
    assert "torch-graph" in [v.name for v in variants(("torch",), "cuda:1")]
    params = make_cases(("torch", "tensorrt"), ("fp32", "fp16"), None, "cuda", exclude=("torch", "fp32"))
    labels = [p.id for p in params]
    assert "torch-fp32" not in labels and "torch-fp16" in labels
    trt = next(p for p in params if p.id == "tensorrt-fp32")
    assert {"gpu", "trt"} <= set(_marks(trt))


def test_ci_marker_picks_the_key_variant_at_batch_one_and_the_largest_batch_in_every_family() -> None:
    def ci(params: list) -> list[str]:
        return [p.id for p in params if "ci" in {m.name for m in p.marks}]

    cuda = make_cases(("torch", "onnxruntime"), ("fp32", "fp16"), (1, 8, 32), "cuda")
    assert ci(cuda) == ["torch-fp32-b1", "torch-fp32-b32", "torch-graph-fp16-b1", "torch-graph-fp16-b32",
                        "torch-compile-fp16-b1", "torch-compile-fp16-b32", "onnxruntime-fp32-b1",
                        "onnxruntime-fp32-b32"]  # fmt: skip
    assert ci(make_cases(("torch",), ("fp32",), (1, 8, 32), "cpu")) == ["torch-fp32-b1"]
    assert ci(make_cases(("torch",), ("fp32", "fp16"), None, "cuda", family="end-to-end")) == ["torch-graph-fp16"]
    parity = make_cases(("torch",), ("fp32", "fp16"), None, "cuda", exclude=("torch", "fp32"), family="parity")
    assert ci(parity) == ["torch-graph-fp16", "torch-compile-fp16"]


def test_every_case_fixture_is_parametrised_from_the_one_table() -> None:
    assert CASE_ARGS <= {names.partition(",")[0] for names in CASE_FIXTURES}
    assert {"skip_interval", "batch", "ms_case,streams"} <= set(CASE_FIXTURES)


@pytest.mark.parametrize("case", ["its own"])
def test_a_test_outside_the_benchmark_modules_keeps_its_own_params_of_a_case_fixtures_name(case: str) -> None:
    assert case == "its own"  # perf.plugin's pytest_generate_tests parametrises perf/test_*.py only


def test_a_backend_that_cannot_run_here_is_collected_under_its_case_ids(tmp_path: Path) -> None:
    assert {p.name for p in CASE_FILES} >= {"test_inference_speed.py", "test_end_to_end.py", "test_pipelined.py",
                                            "test_multistream.py", "test_detection_parity.py"}  # fmt: skip
    result = _perf(tmp_path, *map(str, CASE_FILES), "--collect-only", "-q", "--perf-backends=tensorrt",
                   "--perf-precisions=fp32,fp16", "--perf-batch-sizes=1", "--perf-streams=1")  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert not [word for word in VANISHED if word in output], output
    for path in CASE_FILES:
        ids = re.findall(rf"^perf/{path.name}::\w+\[([^\]]+)\]$", result.stdout, flags=re.MULTILINE)
        cases = {re.sub(r"-[bx]\d+$", "", i) for i in ids}  # batch (-b1) and stream count (-x1) set aside
        assert cases == {"tensorrt-fp32", "tensorrt-fp16"}, (path.name, ids)


def test_every_selected_case_that_cannot_run_here_is_skipped_at_set_up_with_its_reason(tmp_path: Path) -> None:
    # every variant in a precision none of them runs on the CPU: nothing may run, nothing may vanish
    result = _perf(tmp_path, *map(str, CASE_FILES), "--perf-backends=torch,onnxruntime,tensorrt",
                   "--perf-precisions=fp16", "--perf-batch-sizes=1", "--perf-streams=1", "-k", "not reference_accuracy",
                   "-v", "-rs", "--setup-show")  # fmt: skip
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert not [word for word in VANISHED if word in output], output
    assert re.search(r" 25 skipped, 1 deselected in ", result.stdout.splitlines()[-1]), result.stdout[-2000:]
    skipped = re.findall(r"perf/(test_\w+)\.py::\w+\[([\w-]+)\] SKIPPED", result.stdout)
    # 5 variants x 5 families (inference, end-to-end, pipelined, multi-stream, parity), under their own ids
    assert {family for family, _ in skipped} == {p.stem for p in CASE_FILES}
    assert sorted({re.sub(r"-fp16(-[bx]1)?$", "", case) for _, case in skipped}) == [
        "onnxruntime", "tensorrt", "torch", "torch-compile", "torch-graph"], skipped  # fmt: skip
    assert len(skipped) == 25, skipped
    reasons = {line.partition(": ")[2] for line in result.stdout.splitlines() if line.startswith("SKIPPED [")}
    assert reasons == {"needs a CUDA device; --perf-device is cpu",  # torch-graph, torch-compile, tensorrt
                       "fp16 needs a CUDA device (the CPU runs fp32 only)",  # torch
                       "onnxruntime has no fp16 mode (it runs fp32)"}, output  # fmt: skip
    # skipped at set-up: no fixture of any benchmark (runners, video, reference, report) was built
    assert "SETUP" not in result.stdout, result.stdout[-3000:]
