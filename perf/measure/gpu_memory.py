"""GPU memory for the suite: an out-of-memory error as a skip reason, and the memory (MiB) in use."""

from __future__ import annotations

import gc
import re
from typing import Any

from detector.devices import device_index
from detector.memory import is_out_of_memory

_TRIED = re.compile(r"(?:tried to|unable to) allocate ([\d.]+ (?:bytes|[KMGTPE]?i?B))", re.IGNORECASE)


def oom_skip_reason(exc: BaseException, batch: int, device_name: str) -> str | None:
    """The skip reason for an out-of-memory ``exc`` (or one it was raised from) running ``batch``, else None."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if is_out_of_memory(error):
            text = " ".join(str(error).split())
            detail = f"tried to allocate {tried.group(1)}" if (tried := _TRIED.search(text)) else text[:120]
            return f"batch {batch} does not fit on {device_name} (out of memory: {detail})"
        error = error.__cause__ or error.__context__
    return None


def release_cuda_memory() -> None:
    """Collect garbage (dropped tensors) and return torch's cached CUDA blocks to the driver (no-op on CPU)."""
    gc.collect()
    import torch

    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


def cuda_memory(device: str) -> dict[str, Any]:
    """MiB in use on ``device``: torch's, and ``device_used`` by every allocator on the GPU; {} before CUDA starts."""
    import torch

    if not device.startswith("cuda") or not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return {}
    index = device_index(device)
    free, total = torch.cuda.mem_get_info(index)
    return {"allocated_mib": torch.cuda.memory_allocated(index) / 2**20,
            "reserved_mib": torch.cuda.memory_reserved(index) / 2**20, "device_used_mib": (total - free) / 2**20}
