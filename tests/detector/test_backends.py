"""The runner contract, run over every registered backend variant on each of its device types (and a few
more option combinations), plus the registry. A configuration this machine cannot run skips with its reason
("no CUDA device", "tensorrt not installed (...)"); a variant registered in detector.backends is tested here
with nothing to add."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from detector.backends import (
    Variant,
    availability,
    available_backends,
    backend,
    backend_names,
    create_runner,
    register,
    runner_class,
    unregister,
    variant,
    variants,
)
from detector.backends.base import InferTiming, Runner
from detector.errors import BackendError, BackendUnavailable, ModelFileError
from detector.spec import ModelSpec

SIZE = 128  # the packaged cfg at 128x128: same layers, ~10x less compute than 416
no_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


def _precisions(backend_name: str, device: str) -> tuple[str, ...]:
    """fp32, and fp16 on CUDA where the runner has it (a runner whose module cannot load: fp32, then skipped)."""
    try:
        supported = runner_class(backend_name).precisions
    except BackendUnavailable:
        return ("fp32",)
    return tuple(p for p in ("fp32", "fp16") if p in supported and (p == "fp32" or device == "cuda"))


def contract_configs() -> list[Any]:
    """(backend, device, precision, options) of every registered variant on each of its device types, then the
    option combinations no variant covers; ids like ``torch-graph-cuda-fp16``."""
    params = [pytest.param((v.backend, device, precision, dict(v.options)),
                           id=f"{v.name}-{device}" + ("" if precision == "fp32" else f"-{precision}"))
              for v in variants() for device in v.devices for precision in _precisions(v.backend, device)]
    return params + [
        pytest.param(("torch", "cpu", "fp32", {"channels_last": True}), id="torch-cpu-channels_last"),
        pytest.param(("torch", "cpu", "fp32", {"fuse_bn": True}), id="torch-cpu-fuse_bn"),
        pytest.param(("torch", "cuda", "fp32", {"cuda_graph": True}), id="torch-cuda-cuda_graph"),
    ]


CONFIGS = contract_configs()


@pytest.fixture(scope="module")
def batch() -> np.ndarray:
    return np.random.default_rng(0).random((2, 3, SIZE, SIZE), dtype=np.float32)


@pytest.fixture(scope="module")
def reference(spec: ModelSpec, batch: np.ndarray) -> np.ndarray:
    """decoded of the plain fp32 torch model on ``batch``."""
    with torch.no_grad():
        return spec.load_torch()(torch.from_numpy(batch)).numpy()


def _make(request: pytest.FixtureRequest, spec: ModelSpec) -> Runner:
    name, device, precision, options = request.param
    reason = availability(name, device, precision)
    if reason is not None:
        pytest.skip(reason)
    return create_runner(name, spec, device=device, precision=precision, **options)


@pytest.fixture(params=CONFIGS)
def runner(request: pytest.FixtureRequest, spec: ModelSpec) -> Iterator[Runner]:
    """A fresh, inactive runner (for lifecycle tests)."""
    r = _make(request, spec)
    yield r
    r.deactivate()


@pytest.fixture(params=CONFIGS, scope="module")
def active(request: pytest.FixtureRequest, spec: ModelSpec) -> Iterator[Runner]:
    """One active runner per configuration, shared by the tests that only call infer()."""
    with _make(request, spec) as r:
        yield r


def tolerance(runner: Runner) -> str:
    """The tolerance class of a runner's output: its precision, except that fp32 with TF32 convolutions (the
    TensorRT default; ~1e-3 on scores) is held to fp16's."""
    return "fp16" if runner.precision == "fp32" and runner.options.get("tf32") else runner.precision


def assert_decoded_close(got: np.ndarray, want: np.ndarray, precision: str) -> None:
    """Scores within an absolute tolerance; boxes (pixels, up to ~1e3 with random weights) within a
    tolerance relative to the largest coordinate. fp32: 1e-4 and 2e-5 (measured ~1e-6 and ~5e-6)."""
    score_atol, box_rtol = (1e-4, 2e-5) if precision == "fp32" else (2e-2, 1e-2)
    assert got.shape == want.shape
    assert np.abs(got[..., 4:] - want[..., 4:]).max() <= score_atol
    scale = max(1.0, float(np.abs(want[..., :4]).max()))
    assert np.abs(got[..., :4] - want[..., :4]).max() <= box_rtol * scale


# -- the contract, for every configuration ------------------------------------------------------------
def test_infer_returns_float32_decoded_on_the_host(active: Runner, spec: ModelSpec, batch: np.ndarray) -> None:
    out = active.infer(batch)
    n = 3 * ((SIZE // 32) ** 2 + (SIZE // 16) ** 2)
    assert isinstance(out, torch.Tensor)
    assert out.shape == (2, n, 4 + spec.num_classes)
    assert out.dtype == torch.float32 and out.device.type == "cpu"


def test_output_matches_the_torch_model(active: Runner, batch: np.ndarray, reference: np.ndarray) -> None:
    assert_decoded_close(active.infer(batch).numpy(), reference, tolerance(active))


def test_repeated_calls_give_equal_and_independent_results(active: Runner, batch: np.ndarray) -> None:
    first = active.infer(batch)
    kept = first.clone()
    second = active.infer(batch[::-1].copy())
    third = active.infer(batch)
    assert torch.equal(first, kept), "a later call changed an earlier result"
    assert torch.allclose(first, third, rtol=1e-5, atol=1e-4)
    assert torch.allclose(second[0], first[1], rtol=1e-5, atol=1e-4)


def test_batch_sizes_one_and_three_work(active: Runner, batch: np.ndarray, reference: np.ndarray) -> None:
    one = active.infer(batch[:1]).numpy()
    three = active.infer(np.concatenate([batch, batch[:1]])).numpy()
    assert_decoded_close(one, reference[:1], tolerance(active))
    assert_decoded_close(three, np.concatenate([reference, reference[:1]]), tolerance(active))


def test_accepts_numpy_and_torch_and_float64_input(active: Runner, batch: np.ndarray) -> None:
    from_numpy = active.infer(batch)
    from_tensor = active.infer(torch.from_numpy(batch))
    from_float64 = active.infer(batch.astype(np.float64))
    assert torch.allclose(from_numpy, from_tensor, rtol=1e-5, atol=1e-4)
    assert torch.allclose(from_numpy, from_float64, rtol=1e-5, atol=1e-4)


def test_context_manager_activates_and_deactivates(runner: Runner) -> None:
    assert not runner.is_active
    with runner as active:
        assert active is runner and runner.is_active
    assert not runner.is_active


def test_activate_and_deactivate_are_idempotent_and_reactivation_works(runner: Runner, batch: np.ndarray) -> None:
    runner.deactivate()
    runner.activate()
    runner.activate()
    first = runner.infer(batch)
    runner.deactivate()
    runner.deactivate()
    runner.activate()
    assert torch.allclose(runner.infer(batch), first, rtol=1e-5, atol=1e-4)
    runner.deactivate()


def test_infer_before_activate_raises_and_says_what_to_do(runner: Runner, batch: np.ndarray) -> None:
    with pytest.raises(BackendError, match=r"not active: call activate\(\)"):
        runner.infer(batch)


def test_infer_after_deactivate_raises(runner: Runner, batch: np.ndarray) -> None:
    with runner:
        runner.infer(batch[:1])
    with pytest.raises(BackendError, match="not active"):
        runner.infer(batch[:1])


@pytest.mark.parametrize(
    ("shape", "got"),
    [((1, 3, 64, 64), r"\[1, 3, 64, 64\]"), ((3, SIZE, SIZE), r"\[3, 128, 128\]"), ((1, 4, SIZE, SIZE), r"\[1, 4,"),
     ((0, 3, SIZE, SIZE), r"\[0, 3,")],
)
def test_bad_input_shape_names_expected_and_got(active: Runner, shape: tuple[int, ...], got: str) -> None:
    with pytest.raises(BackendError, match=rf"has shape {got}.*expected \[B, 3, {SIZE}, {SIZE}\] with B >= 1"):
        active.infer(np.zeros(shape, dtype=np.float32))


def test_integer_or_non_array_input_is_rejected(active: Runner, batch: np.ndarray) -> None:
    with pytest.raises(BackendError, match="dtype uint8; expected float32"):
        active.infer((batch * 255).astype(np.uint8))
    with pytest.raises(BackendError, match="is a list"):
        active.infer(batch.tolist())


def test_batch_above_max_batch_size_is_rejected(active: Runner, batch: np.ndarray,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(active, "max_batch_size", 1)
    with pytest.raises(BackendError, match="batch size 2 exceeds this runner's maximum 1"):
        active.infer(batch)


def test_last_timing_is_filled_by_infer(runner: Runner, batch: np.ndarray) -> None:
    assert runner.last_timing is None
    with runner:
        runner.infer(batch)
        timing = runner.last_timing
    assert isinstance(timing, InferTiming)
    assert timing.compute_ms is not None and timing.compute_ms > 0
    assert timing.enqueue_ms is not None and timing.enqueue_ms > 0
    assert timing.total_ms >= timing.enqueue_ms
    gpu_copies = runner.device_type == "cuda" and not runner.host_io
    assert (timing.h2d_ms is not None) == gpu_copies
    assert (timing.d2h_ms is not None) == gpu_copies


def test_warmup_runs_the_model(active: Runner) -> None:
    active.warmup(batch_size=1, iterations=2)
    assert active.last_timing is not None


def test_infer_hook_runs_after_every_call_inside_the_compute_time(active: Runner, batch: np.ndarray) -> None:
    calls: list[str] = []

    def slow() -> None:
        calls.append("slow")
        deadline = time.perf_counter() + 0.03
        while time.perf_counter() < deadline:
            pass

    remove_slow = active.add_infer_hook(slow)
    remove_count = active.add_infer_hook(lambda: calls.append("count"))
    try:
        active.infer(batch)
        active.infer(batch[:1])
        timing = active.last_timing
    finally:
        remove_slow()
        remove_count()
    assert calls == ["slow", "count"] * 2  # in the order added, once per call
    assert timing is not None and timing.compute_ms is not None and timing.compute_ms >= 30.0
    active.infer(batch[:1])
    assert len(calls) == 4  # removed: no longer called


def test_infer_hook_must_be_callable(runner: Runner) -> None:
    with pytest.raises(BackendError, match="infer hook 5 is not callable"):
        runner.add_infer_hook(5)  # type: ignore[arg-type]


# -- configuration errors -------------------------------------------------------------------------------
def test_unknown_backend_lists_the_known_ones(spec: ModelSpec) -> None:
    with pytest.raises(BackendError, match=f"unknown backend 'torhc'; known backends: {', '.join(backend_names())}$"):
        create_runner("torhc", spec)


@pytest.mark.parametrize("name", ["torch", "onnxruntime"])
def test_unknown_precision_lists_the_allowed_ones(spec: ModelSpec, name: str) -> None:
    allowed = ", ".join(runner_class(name).precisions)
    with pytest.raises(BackendError, match=f"unknown precision 'fp64'; allowed: {allowed}"):
        create_runner(name, spec, precision="fp64")


def test_precision_a_runner_lacks_is_named_unsupported(spec: ModelSpec) -> None:
    with pytest.raises(BackendError, match="unsupported precision 'int8'; allowed: fp32, fp16"):
        create_runner("torch", spec, precision="int8")


@pytest.mark.parametrize("device", ["gpu", "cuda:x", "cpu:0"])
def test_unknown_device_lists_the_allowed_ones(spec: ModelSpec, device: str) -> None:
    with pytest.raises(BackendError, match=r"unknown device .*; allowed: cpu, cuda \(or cuda:N\)"):
        create_runner("torch", spec, device=device)


def test_unknown_option_lists_the_allowed_ones(spec: ModelSpec) -> None:
    with pytest.raises(BackendError, match="unknown option 'chanels_last'; allowed: channels_last, compile, "):
        create_runner("torch", spec, chanels_last=True)


def test_cuda_graph_on_cpu_is_a_configuration_error(spec: ModelSpec) -> None:
    with pytest.raises(BackendError, match="cuda_graph needs a CUDA device"):
        create_runner("torch", spec, cuda_graph=True)


def test_fp16_on_cpu_is_unavailable_with_a_reason(spec: ModelSpec) -> None:
    runner = create_runner("torch", spec, precision="fp16")
    with pytest.raises(BackendUnavailable, match="fp16 needs a CUDA device"):
        runner.activate()
    assert not runner.is_active


def test_onnxruntime_model_path_of_random_bytes_raises_model_file_error(spec: ModelSpec, tmp_path: Path) -> None:
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(np.random.default_rng(0).bytes(1024))
    runner = create_runner("onnxruntime", spec, model_path=bad)
    with pytest.raises(ModelFileError, match=r"bad\.onnx"):
        runner.activate()
    assert not runner.is_active


def test_onnxruntime_runs_a_model_file_whose_name_is_not_utf8(spec: ModelSpec, tmp_path: Path,
                                                             batch: np.ndarray, reference: np.ndarray) -> None:
    model = tmp_path / os.fsdecode(b"model\xff.onnx")  # a name Linux allows; ONNX Runtime refuses it as a str
    model.write_bytes(spec.onnx_path().read_bytes())
    runner = create_runner("onnxruntime", spec, model_path=model)
    with runner:
        assert_decoded_close(runner.infer(batch).numpy(), reference, "fp32")


def test_onnxruntime_rejects_a_negative_thread_count(spec: ModelSpec) -> None:
    with pytest.raises(BackendError, match="intra_op_threads must be an integer >= 0; got -1"):
        create_runner("onnxruntime", spec, intra_op_threads=-1)


# -- registry -----------------------------------------------------------------------------------------
@pytest.fixture
def scratch_backend() -> Iterator[str]:
    """The name of a backend a test may register; removed afterwards."""
    yield "scratch"
    unregister("scratch")


def test_registry_names_the_three_backends() -> None:
    names = backend_names()[:3]
    assert [runner_class(name).name for name in names] == names == ["torch", "onnxruntime", "tensorrt"]


def test_every_variant_presets_options_its_runner_accepts_on_devices_it_supports() -> None:
    for name in backend_names():
        try:
            cls = runner_class(name)
        except BackendUnavailable:
            continue
        assert backend(name).devices == cls.devices, name
        for preset in variants([name]):
            assert set(preset.options) <= set(cls.options), preset.name
            assert set(preset.devices) <= set(cls.devices), preset.name


def test_variants_are_filtered_by_backend_and_device_in_registration_order() -> None:
    assert [v.name for v in variants(["torch", "tensorrt"], "cuda:1")][:4] == [
        "torch", "torch-graph", "torch-compile", "tensorrt"]
    assert [v.name for v in variants(["torch", "onnxruntime", "tensorrt"], "cpu")][:2] == ["torch", "onnxruntime"]
    graph = variant("torch-graph")
    assert graph.backend == "torch" and graph.devices == ("cuda",) and graph.options["cuda_graph"] is True
    with pytest.raises(TypeError):
        graph.options["cuda_graph"] = False  # type: ignore[index]
    with pytest.raises(BackendError, match="unknown variant 'torch-grpah'; known variants: torch, torch-graph"):
        variant("torch-grpah")


def test_a_backend_registers_with_its_variants_in_one_call(scratch_backend: str) -> None:
    register(scratch_backend, "detector.backends.torch_runner:TorchRunner", title="Scratch", variants=[
        Variant(scratch_backend), Variant(f"{scratch_backend}-fused", {"fuse_bn": True}, ("cpu",))])
    assert backend_names()[-1] == scratch_backend and backend(scratch_backend).title == "Scratch"
    assert [(v.name, v.devices) for v in variants([scratch_backend])] == [
        ("scratch", ("cpu", "cuda")), ("scratch-fused", ("cpu",))]
    unregister(scratch_backend)
    assert scratch_backend not in backend_names() and "scratch-fused" not in [v.name for v in variants()]


@pytest.mark.parametrize(("target", "options", "match"), [
    ("detector.backends.torch_runner.TorchRunner", {}, "is not 'module:Class'"),
    ("m:C", {"devices": ("tpu",)}, r"devices \['tpu'\]; allowed: cpu, cuda"),
    ("m:C", {"devices": ("cuda",), "variants": [Variant("scratch", devices=("cpu",))]}, "variant 'scratch'"),
    ("m:C", {"variants": [Variant("torch-graph")]}, "variant 'torch-graph' .* taken .*'torch'"),
    ("m:C", {"variants": [Variant("a,b")]}, "variant 'a,b'"),
])
def test_register_refuses_what_would_break_a_listing(scratch_backend: str, target: str, options: dict[str, Any],
                                                     match: str) -> None:
    with pytest.raises(BackendError, match=match):
        register(scratch_backend, target, **options)
    assert scratch_backend not in backend_names() and variant("torch-graph").backend == "torch"


def test_backend_whose_module_is_missing_is_unavailable_with_the_reason(scratch_backend: str) -> None:
    register(scratch_backend, "detector.backends.ghost_runner:GhostRunner")
    with pytest.raises(BackendUnavailable, match="backend 'scratch' is unavailable: .*ghost_runner"):
        runner_class(scratch_backend)
    assert "ghost_runner" in (availability(scratch_backend, "cpu") or "")


def test_available_backends_on_the_cpu() -> None:
    found = available_backends("cpu")
    assert found["torch"] is None and found["onnxruntime"] is None
    assert set(found) == set(backend_names())


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_available_backends_without_cuda_gives_reasons() -> None:
    found = available_backends("cuda")
    assert found["torch"] == "no CUDA device"
    assert found["onnxruntime"] in ("no CUDA device", "onnxruntime CUDA provider not installed (onnxruntime-gpu)")


def test_importing_the_registry_imports_no_heavy_module() -> None:
    code = ("import sys, detector.backends, detector.backends.base, detector.spec, detector.export; "
            "detector.backends.runner_class('torch'); detector.backends.runner_class('onnxruntime'); "
            "print(sorted(m for m in ('torch', 'onnx', 'onnxruntime', 'tensorrt') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


# -- CUDA only --------------------------------------------------------------------------------------------
def _cuda_runner(spec: ModelSpec, **options: Any) -> Runner:
    reason = availability("torch", "cuda")
    if reason is not None:
        pytest.skip(reason)
    return create_runner("torch", spec, device="cuda", **options)


@no_cuda
def test_cuda_to_host_false_returns_a_device_tensor_and_timing_resolves_later(
    spec: ModelSpec, batch: np.ndarray, reference: np.ndarray
) -> None:
    with _cuda_runner(spec) as runner:
        out = runner.infer(batch, to_host=False)
        assert out.device.type == "cuda" and out.dtype == torch.float32
        timing = runner.last_timing
        assert timing is not None and timing.h2d_ms is not None and timing.d2h_ms is None
        assert timing.compute_ms is not None and timing.compute_ms > 0
        assert_decoded_close(out.cpu().numpy(), reference, "fp32")


@no_cuda
def test_cuda_device_input_skips_the_host_copy(spec: ModelSpec, batch: np.ndarray, reference: np.ndarray) -> None:
    with _cuda_runner(spec) as runner:
        out = runner.infer(torch.from_numpy(batch).cuda())
        timing = runner.last_timing
    assert timing is not None and timing.h2d_ms is None and timing.d2h_ms is not None
    assert_decoded_close(out.numpy(), reference, "fp32")


@no_cuda
def test_cuda_graph_captures_once_per_batch_size(spec: ModelSpec, batch: np.ndarray, reference: np.ndarray) -> None:
    with _cuda_runner(spec, cuda_graph=True) as runner:
        for _ in range(2):
            assert_decoded_close(runner.infer(batch).numpy(), reference, "fp32")
            assert_decoded_close(runner.infer(batch[:1]).numpy(), reference[:1], "fp32")
        assert sorted(runner._graphs) == [1, 2]


@no_cuda
def test_cuda_deactivate_releases_device_memory(spec: ModelSpec, batch: np.ndarray) -> None:
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    runner = _cuda_runner(spec, cuda_graph=True)
    with runner:
        runner.infer(batch)
        assert torch.cuda.memory_allocated() > before
    assert torch.cuda.memory_allocated() <= before


@no_cuda
def test_cuda_fp32_is_ieee_unless_tf32_is_asked_for_and_the_global_flag_is_restored(
    spec: ModelSpec, batch: np.ndarray, reference: np.ndarray
) -> None:
    before = torch.backends.cudnn.allow_tf32
    with _cuda_runner(spec) as ieee, _cuda_runner(spec, tf32=True) as tf32:
        assert_decoded_close(ieee.infer(batch).numpy(), reference, "fp32")
        assert_decoded_close(tf32.infer(batch).numpy(), reference, "fp16")  # TF32: ~1e-3 on scores
    assert torch.backends.cudnn.allow_tf32 == before


def test_cudnn_flags_hold_for_the_block_and_are_restored_even_when_it_raises() -> None:
    from detector.backends.torch_runner import _cudnn_flags

    cudnn = torch.backends.cudnn
    before = (cudnn.allow_tf32, cudnn.benchmark)
    with pytest.raises(ValueError), _cudnn_flags(True, tf32=not before[0], benchmark=not before[1]):
        assert (cudnn.allow_tf32, cudnn.benchmark) == (not before[0], not before[1])
        raise ValueError("inside the block")
    assert (cudnn.allow_tf32, cudnn.benchmark) == before
    with _cudnn_flags(False, tf32=not before[0], benchmark=not before[1]):  # off CUDA nothing is touched
        assert (cudnn.allow_tf32, cudnn.benchmark) == before


@pytest.mark.parametrize("channels_last", [False, True])
def test_a_batch_in_the_runners_input_format_is_used_without_a_copy(spec: ModelSpec, batch: np.ndarray,
                                                                    reference: np.ndarray, channels_last: bool) -> None:
    layout = torch.channels_last if channels_last else torch.contiguous_format
    with create_runner("torch", spec, device="cpu", channels_last=channels_last) as runner:
        assert runner.input_format == (torch.float32, layout)
        given = torch.from_numpy(batch)
        ready = runner.as_input(given)
        assert ready.is_contiguous(memory_format=layout) and ready.dtype == torch.float32
        assert runner.as_input(ready) is ready  # already in the format: no copy
        assert (ready is given) == (not channels_last)
        assert_decoded_close(runner.infer(ready).numpy(), reference, "fp32")
