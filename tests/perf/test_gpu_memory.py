"""Out-of-memory errors become skip reasons; releasing a backend frees its runners and records memory figures."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from detector.spec import ModelSpec
from perf.fixtures.models import RunnerPool
from perf.measure.gpu_memory import cuda_memory, oom_skip_reason, release_cuda_memory

H100 = "NVIDIA H100 80GB HBM3"
TORCH_OOM = ("CUDA out of memory. Tried to allocate 126.75 GiB. GPU 0 has a total capacity of 79.19 GiB of which "
             "78.51 GiB is free. Of the allocated memory 8.12 MiB is allocated by PyTorch")


def test_torch_out_of_memory_error_is_a_skip_reason_naming_batch_gpu_and_size() -> None:
    reason = oom_skip_reason(torch.cuda.OutOfMemoryError(TORCH_OOM), 65536, H100)
    assert reason == f"batch 65536 does not fit on {H100} (out of memory: tried to allocate 126.75 GiB)"


def test_out_of_memory_wrapped_in_another_error_is_found() -> None:
    try:
        try:
            raise torch.cuda.OutOfMemoryError(TORCH_OOM)
        except torch.cuda.OutOfMemoryError as e:
            raise RuntimeError("runner 'torch': inference failed") from e
    except RuntimeError as wrapped:
        assert oom_skip_reason(wrapped, 8, H100) is not None


@pytest.mark.parametrize("message", [
    "[TRT] [E] 1: [defaultAllocator.cpp::allocate::31] Error Code 1: Cuda Runtime (out of memory)",
    "onnxruntime: CUDA failure 2: out of memory ; GPU=0",
    "CUDNN_STATUS_ALLOC_FAILED",
])  # fmt: skip
def test_other_backends_out_of_memory_messages_are_skip_reasons(message: str) -> None:
    reason = oom_skip_reason(RuntimeError(message), 4096, H100)
    assert reason is not None and reason.startswith(f"batch 4096 does not fit on {H100} (out of memory: ")


def test_a_batch_too_large_for_host_memory_is_a_skip_reason_not_a_traceback() -> None:
    import numpy as np

    for make in (lambda: np.empty(2**50, dtype=np.float32), lambda: torch.empty(2**50, dtype=torch.float32)):
        with pytest.raises((MemoryError, RuntimeError)) as error:  # 4 PiB: no machine's memory
            make()
        assert oom_skip_reason(error.value, 2**20, "cpu") in (
            "batch 1048576 does not fit on cpu (out of memory: tried to allocate 4.00 PiB)",  # numpy's MemoryError
            "batch 1048576 does not fit on cpu (out of memory: tried to allocate 4503599627370496 bytes)")  # torch's


@pytest.mark.parametrize("error", [RuntimeError("shape mismatch"), ValueError("out of memory"), KeyError("x")])
def test_other_errors_are_not_skip_reasons(error: Exception) -> None:
    assert oom_skip_reason(error, 1, H100) is None


def test_cpu_has_no_cuda_memory_figures_and_release_is_harmless() -> None:
    if torch.cuda.is_available():
        torch.ones(1, device="cuda")  # CUDA started and in use: the device name alone must keep "cpu" empty
        assert set(cuda_memory("cuda")) == {"allocated_mib", "reserved_mib", "device_used_mib"}
    release_cuda_memory()
    assert cuda_memory("cpu") == {}


def test_release_deactivates_the_backend_and_records_it(tmp_path: Path,
                                                        packaged_cfg: Callable[[Path, int], Path]) -> None:
    pool = RunnerPool(ModelSpec(packaged_cfg(tmp_path, 64), cache_dir=tmp_path / "cache"), "cpu")
    first = pool.get("torch")
    assert first.infer(torch.rand(1, 3, 64, 64).numpy()).shape[0] == 1
    assert pool.release_others("torch") == []
    (record,) = pool.release_others("onnxruntime")
    assert record == {"backend": "torch", "runners": 1} and pool.memory_log == [record]
    with pytest.raises(Exception, match="not active"):
        first.infer(torch.rand(1, 3, 64, 64).numpy())
    assert pool.get("torch") is not first  # a later test gets a fresh runner
    pool.close()
