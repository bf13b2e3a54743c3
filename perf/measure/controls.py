"""The noise sources controlled while measuring (``--perf-controls``, `NAMES`; docs/method.md, section 2)."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from perf.measure.machine import torch_gpu_pci_bus_id

NAMES = ("gc", "torch-threads", "cv2-threads", "decode-threads", "pin", "telemetry", "page-cache", "scratch",
         "cpu-reference", "gpu-warmup")
#: ``gpu-warmup``: seconds of dense matmuls of this size (n x n, fp16 on a GPU) before a GPU run builds a model.
WARMUP_S, WARMUP_SIZE = 3.0, 4096
DECODE_THREADS = 2  # FFmpeg decoder threads inside a controlled region
TELEMETRY_INTERVAL_S, DEFAULT_TELEMETRY_INTERVAL_S = 1.0, 0.05  # NVML sampling period (s) with and without the control
CALLER_CPUS, MIN_CPUS_TO_PIN = 4, 8  # CPUs of the calling thread (and its native threads); fewest worth pinning on
_SHM = Path("/dev/shm")
SYSFS = Path("/sys")  # where `local_cpus` reads a GPU's NUMA-local CPUs
MAX_CPUS = 1 << 16  # a CPU number no host has: a list past it is not the kernel's
WORKER_READINGS = 5  # reference readings per `reading_on`, their median kept


@dataclass(frozen=True)
class Controls:
    """Which controls are on; parsed from ``--perf-controls`` by `perf.options.parse_controls`."""

    active: frozenset[str] = frozenset(NAMES)

    def __contains__(self, name: str) -> bool:
        return name in self.active

    def without(self, name: str) -> Controls:
        return Controls(self.active - {name})

    @property
    def telemetry_interval_s(self) -> float:
        return TELEMETRY_INTERVAL_S if "telemetry" in self else DEFAULT_TELEMETRY_INTERVAL_S


def local_cpus(pci_bus_id: str, sysfs: Path = SYSFS) -> set[int] | None:
    """The CPUs in ``<sysfs>/bus/pci/devices/<pci_bus_id>/local_cpulist`` (NVML's bus id too); None if unreadable."""
    domain, _, rest = pci_bus_id.strip().lower().partition(":")
    try:
        address = f"{int(domain, 16):04x}:{rest}"  # sysfs's 4-digit domain
        text = (sysfs / "bus" / "pci" / "devices" / address / "local_cpulist").read_text()
        spans = [(int(first), int(last if dash else first)) for first, dash, last in
                 (part.partition("-") for part in text.strip().split(",") if part)]  # fmt: skip
    except (OSError, ValueError):  # unreadable, or not a list of CPUs ("a-b", "0-")
        return None
    if not spans or any(not 0 <= first <= last < MAX_CPUS for first, last in spans):
        return None
    return {cpu for first, last in spans for cpu in range(first, last + 1)}


def pin_cpus(allowed: Iterable[int], pci_bus_id: str | None, sysfs: Path = SYSFS) -> list[int]:
    """The ``allowed`` CPUs local to the GPU at ``pci_bus_id`` if `MIN_CPUS_TO_PIN` are, else all, ascending."""
    allowed = sorted(allowed)
    near = sorted(set(allowed) & (local_cpus(pci_bus_id, sysfs) or set())) if pci_bus_id else []
    return near if len(near) >= MIN_CPUS_TO_PIN else allowed


@contextlib.contextmanager
def _pinned(info: dict[str, object], gpu_index: int | None) -> Iterator[None]:
    """Pin the caller on the last `CALLER_CPUS` of `pin_cpus`, workers round robin below; ``info["pin"]`` says where."""
    from detector.handoff import set_thread_placement

    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if len(allowed) < MIN_CPUS_TO_PIN:
        info["pin"] = f"off: {len(allowed)} CPUs (needs {MIN_CPUS_TO_PIN})"
        yield
        return
    cpus = pin_cpus(allowed, None if gpu_index is None else torch_gpu_pci_bus_id(gpu_index))
    caller, pool = set(cpus[-CALLER_CPUS:]), cpus[-CALLER_CPUS - 1 :: -1]
    assigned: dict[str, int] = {}
    previous = set_thread_placement(lambda name: {assigned.setdefault(name, pool[len(assigned) % len(pool)])})
    os.sched_setaffinity(0, caller)
    try:
        yield
    finally:
        os.sched_setaffinity(0, set(allowed))
        set_thread_placement(previous)
        info["pin"] = {"caller": sorted(caller), **assigned}


def _torch_threads(threads: int | None) -> int:
    """Set torch's intra-op threads unless None or already so (no re-trace); returns the count before."""
    import torch

    before = torch.get_num_threads()
    if threads is not None and threads != before:
        torch.set_num_threads(threads)
    return before


_torch_threads_before: int | None = None  # torch's threads before `session_controls` changed them (None: untouched)


_warmed: set[str] = set()  # the devices `warm_up` has run on in this process


def warm_up(controls: Controls, device: str, seconds: float = WARMUP_S, size: int = WARMUP_SIZE) -> float | None:
    """The ``gpu-warmup`` control: ``seconds`` of ``size`` x ``size`` matmuls on ``device`` ("cuda", "cuda:1"), once
    a process and device; the seconds it took, None where it did not run (off, or done earlier in the process).

    On an H100 a process's first benchmark read 3-5% slow after its own warm-up, however long, and as fast as
    later in the process after 3 s of this (docs/results.md, nineteenth session)."""
    if "gpu-warmup" not in controls or device in _warmed:
        return None
    import torch

    _warmed.add(device)
    where = torch.device(device)
    a = torch.randn(size, size, device=where, dtype=torch.float16 if where.type == "cuda" else torch.float32)
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            a @ a
        if where.type == "cuda":
            torch.cuda.synchronize(where)
    return time.perf_counter() - start


def session_controls(controls: Controls, *, device: str) -> None:
    """For a whole GPU run on ``device``, before any model is built: one torch thread (torch.compile guards on it),
    then the ``gpu-warmup``."""
    global _torch_threads_before
    if not device.startswith("cuda"):
        return
    if "torch-threads" in controls and _torch_threads_before is None:
        _torch_threads_before = _torch_threads(1)
    warm_up(controls, device)


@contextlib.contextmanager
def controlled(controls: Controls, *, on_gpu: bool, gpu_index: int | None = None) -> Iterator[dict[str, object]]:
    """The in-region controls for the block, each undone after it; yields what was applied (extra_info["controls"])."""
    from detector.video import set_decode_threads

    info: dict[str, object] = {"active": sorted(controls.active)}
    with contextlib.ExitStack() as stack:
        if on_gpu:
            threads = 1 if "torch-threads" in controls else _torch_threads_before
            stack.callback(_torch_threads, _torch_threads(threads))
        elif "torch-threads" in controls:
            info["torch-threads"] = "off: CPU run (inference needs the pool)"
        if "cv2-threads" in controls:
            import cv2

            stack.callback(cv2.setNumThreads, cv2.getNumThreads())
            cv2.setNumThreads(1)
        if "decode-threads" in controls:
            stack.callback(set_decode_threads, set_decode_threads(DECODE_THREADS))
        if "pin" in controls and on_gpu:
            stack.enter_context(_pinned(info, gpu_index))
        elif "pin" in controls:
            info["pin"] = "off: CPU run (torch's threads need the cores)"
        if "gc" in controls:  # collected, frozen and off; on again (if it was) and unfrozen after
            stack.callback(gc.unfreeze)
            if gc.isenabled():
                stack.callback(gc.enable)
            gc.collect()
            gc.freeze()
            gc.disable()
        yield info


def reading_on(worker: str, reference: Callable[[], float], readings: int = WORKER_READINGS) -> float:
    """The median of ``readings`` calls of ``reference`` (s) on a thread named ``worker``, placed as ``pin`` does."""
    from detector.handoff import Control, start_worker

    control, out = Control(), []
    start_worker(worker, lambda: out.extend(reference() for _ in range(readings)), control).join()
    if control.error is not None:
        raise control.error
    return statistics.median(out)


def warm_page_cache(path: str | os.PathLike[str], chunk: int = 1 << 20) -> int:
    """Read ``path`` once so later reads come from the page cache; returns the bytes read."""
    with open(path, "rb") as f:
        return sum(len(data) for data in iter(lambda: f.read(chunk), b""))


@contextlib.contextmanager
def scratch_dir(controls: Controls, fallback: Path) -> Iterator[Path]:
    """A folder for timed passes' outputs: fresh in ``/dev/shm`` with the ``scratch`` control, else ``fallback``."""
    if "scratch" in controls and _SHM.is_dir() and os.access(_SHM, os.W_OK):
        with tempfile.TemporaryDirectory(prefix="perf-scratch-", dir=_SHM, ignore_cleanup_errors=True) as d:
            yield Path(d)
        return
    fallback.mkdir(parents=True, exist_ok=True)
    yield fallback


def keep_output(produced: Path, final: Path) -> Path:
    """Move a timed pass's output from the scratch folder to ``final``."""
    if produced.resolve() == final.resolve():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    shutil.move(str(produced), str(final))
    return final
