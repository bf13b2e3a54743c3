"""The suite's cases (perf.measure.cases): which backend variants, precisions and batches run on a device, and the
marks (gpu, trt, nsys, ci) each case carries."""

from __future__ import annotations

from perf.measure.cases import make_cases, variants_for


def test_cpu_cases_leave_out_gpu_only_variants_and_mark_nothing_gpu() -> None:
    params = make_cases(("torch", "onnxruntime", "tensorrt"), ("fp32",), (1, 8), "cpu", nsys_first=True)
    ids = [p.id for p in params]
    assert ids == ["torch-fp32-b1", "torch-fp32-b8", "onnxruntime-fp32-b1", "onnxruntime-fp32-b8"]
    assert all("gpu" not in {m.name for m in p.marks} for p in params)
    nsys = [p.id for p in params if "nsys" in {m.name for m in p.marks}]
    assert nsys == ["torch-fp32-b1", "onnxruntime-fp32-b1"]  # the first benchmark of each backend


def test_gpu_cases_mark_gpu_and_trt_and_can_exclude_the_reference() -> None:
    assert "torch-graph" in variants_for(("torch",), "cuda:1")
    params = make_cases(("torch", "tensorrt"), ("fp32", "fp16"), None, "cuda", exclude=("torch", "fp32"))
    labels = [p.id for p in params]
    assert "torch-fp32" not in labels and "torch-fp16" in labels
    trt = next(p for p in params if p.id == "tensorrt-fp32")
    assert {m.name for m in trt.marks} == {"gpu", "trt"}


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
