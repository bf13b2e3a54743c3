"""What does not fit in memory: the one reading of an out-of-memory error, and a size checked against the machine."""

from __future__ import annotations

import os
import re

__all__ = ["check_fits", "is_out_of_memory"]

#: What an out-of-memory failure says when it comes as a RuntimeError (``torch.cuda.OutOfMemoryError`` is one):
#: CUDA's and torch's CPU allocator, TensorRT's allocator and builder, ONNX Runtime's CUDA provider, cuBLAS/cuDNN.
_OUT_OF_MEMORY = re.compile(r"out of memory|OUT_OF_MEMORY|CUDNN_STATUS_ALLOC_FAILED|CUBLAS_STATUS_ALLOC_FAILED|"
                            r"Failed to allocate memory|Requested amount of GPU memory|can't allocate memory",
                            re.IGNORECASE)  # fmt: skip


def is_out_of_memory(error: BaseException) -> bool:
    """Whether ``error`` says a size did not fit: a ``MemoryError`` (numpy's), or a RuntimeError saying so."""
    return isinstance(error, MemoryError) or (isinstance(error, RuntimeError)
                                              and _OUT_OF_MEMORY.search(str(error)) is not None)


def check_fits(need: int, what: str) -> None:
    """``MemoryError`` (``Unable to allocate N GiB for <what>: the machine has M GiB``) when ``need`` bytes exceed
    the machine's memory: checked before the work, which the kernel would otherwise kill midway."""
    if need > (memory := os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")):
        raise MemoryError(f"Unable to allocate {need / 2**30:.1f} GiB for {what}: the machine has "
                          f"{memory / 2**30:.1f} GiB")
