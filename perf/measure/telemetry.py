"""GPU telemetry: `NvmlSampler` samples NVML on a thread and summarises it (docs/method.md, section 10)."""

from __future__ import annotations

import contextlib
import functools
import logging
import operator
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from perf.measure.machine import nvml_handle, torch_gpu_uuid

log = logging.getLogger(__name__)

METRICS = ("gpu_util_pct", "sm_clock_mhz", "mem_used_mib", "temperature_c", "power_w")  # summarized; units in names
CLOCK_DROP = 0.10  # an SM clock this far below the run's highest (fraction) counts as throttling
#: NVML clock event / throttle reason bits (nvmlClocksEventReason*; the older *ThrottleReason* values are the same).
REASONS = {0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
           0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
           0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting"}  # fmt: skip
BENIGN_REASONS = 0x1 | 0x2 | 0x100  # not throttling: an idle GPU and clocks pinned by the user
#: Why a MIG slice has no telemetry.
MIG = "NVML reads no utilisation of a slice, and its clocks, power and temperature are the whole GPU's"


@dataclass(frozen=True)
class Sample:
    """One NVML reading; None where the device does not report a value. ``t_s`` is ``time.monotonic()``."""

    t_s: float
    gpu_util_pct: float | None = None
    sm_clock_mhz: float | None = None
    mem_used_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    reasons: int | None = None  # clock event / throttle reason bitmask


def reason_names(mask: int) -> list[str]:
    """Names of the bits set in an NVML clock-reason ``mask`` (unknown bits as hex)."""
    unknown = mask & ~sum(REASONS)
    return [name for bit, name in REASONS.items() if mask & bit] + ([f"0x{unknown:x}"] if unknown else [])


def summarize_samples(samples: Sequence[Sample]) -> dict[str, float | int]:
    """``{"samples": n, "<metric>_min"/"_mean"/"_max": ...}`` over the samples that report each metric."""
    out: dict[str, float | int] = {"samples": len(samples)}
    for metric in METRICS:
        if values := [v for s in samples if (v := getattr(s, metric)) is not None]:
            out.update({f"{metric}_min": min(values), f"{metric}_mean": sum(values) / len(values),
                        f"{metric}_max": max(values)})  # fmt: skip
    return out


def detect_throttle(samples: Sequence[Sample], clock_drop: float = CLOCK_DROP) -> tuple[bool, list[str]]:
    """(throttled, reasons): the busy SM clock fell over ``clock_drop`` below its top, or a non-benign reason."""
    busy = [s.sm_clock_mhz for s in samples if s.sm_clock_mhz is not None and not (s.reasons or 0) & 0x1]
    top, low = max(busy, default=0.0), min(busy, default=0.0)
    reasons = [f"sm_clock_dropped {top:.0f}->{low:.0f} MHz ({100 * (top - low) / top:.0f} %)"
               ] if top > 0 and low < (1.0 - clock_drop) * top else []  # fmt: skip
    seen = functools.reduce(operator.or_, (s.reasons or 0 for s in samples), 0)
    reasons += reason_names(seen & ~BENIGN_REASONS)
    return bool(reasons), reasons


def _nvml_reader(nvml: Any, handle: Any) -> Callable[[], Sample]:
    """A reader of one `Sample` from an NVML device handle (None where unsupported)."""
    reasons_fn = (getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
                  or getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None))  # fmt: skip

    def get(fn: Callable[[], Any]) -> Any:
        with contextlib.suppress(nvml.NVMLError):
            return fn()
        return None

    return lambda: Sample(
        t_s=time.monotonic(),
        gpu_util_pct=get(lambda: nvml.nvmlDeviceGetUtilizationRates(handle).gpu),
        sm_clock_mhz=get(lambda: nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM)),
        mem_used_mib=get(lambda: nvml.nvmlDeviceGetMemoryInfo(handle).used / 2**20),
        temperature_c=get(lambda: nvml.nvmlDeviceGetTemperature(handle, nvml.NVML_TEMPERATURE_GPU)),
        power_w=get(lambda: nvml.nvmlDeviceGetPowerUsage(handle) / 1e3),
        reasons=get(lambda: reasons_fn(handle)) if reasons_fn else None,
    )


def _mig(nvml: Any, handle: Any) -> bool:
    """Whether ``handle`` is a MIG slice or a GPU in MIG mode (CUDA sees only its slices); False if NVML can't say."""
    with contextlib.suppress(nvml.NVMLError, AttributeError):
        if nvml.nvmlDeviceIsMigDeviceHandle(handle):
            return True
    with contextlib.suppress(nvml.NVMLError, AttributeError):
        return nvml.nvmlDeviceGetMigMode(handle)[0] == nvml.NVML_DEVICE_MIG_ENABLE
    return False


class NvmlSampler:
    """Samples GPU cuda:``device_index`` every ``interval_s`` s on a thread (and on entry and exit); not a MIG slice."""

    def __init__(self, device_index: int = 0, interval_s: float = 0.05, *, read: Callable[[], Sample] | None = None):
        if not interval_s > 0:  # 0 or NaN would spin the sampling thread
            raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
        self.device_index, self.interval_s, self._read = device_index, interval_s, read
        self.samples: list[Sample] = []
        self.unavailable_reason: str | None = None
        self.read_errors = 0
        self._nvml: Any = None
        self._thread: threading.Thread | None = None

    @staticmethod
    def available(device_index: int = 0) -> tuple[bool, str | None]:
        """(True, None) if NVML can read GPU ``device_index`` here, else (False, why)."""
        try:
            import pynvml as nvml  # from nvidia-ml-py
        except ImportError as e:
            return False, f"pynvml not importable (nvidia-ml-py, in the gpu extra: pip install -e '.[gpu]'): {e}"
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            return False, f"NVML unavailable: {e}"
        try:
            count = nvml.nvmlDeviceGetCount()
        finally:
            nvml.nvmlShutdown()
        return (True, None) if device_index < count else (False, f"no GPU {device_index} (NVML sees {count})")

    def __enter__(self) -> NvmlSampler:
        self.samples, self.read_errors, self._stop = [], 0, threading.Event()
        if self._read is None:
            ok, self.unavailable_reason = self.available(self.device_index)
            if ok:
                import pynvml as nvml

                nvml.nvmlInit()
                handle = nvml_handle(nvml, self.device_index, torch_gpu_uuid(self.device_index))
                if handle is None or _mig(nvml, handle):
                    nvml.nvmlShutdown()
                    self.unavailable_reason = (f"NVML cannot find the GPU torch calls cuda:{self.device_index}"
                                               if handle is None else f"cuda:{self.device_index} is a MIG slice: {MIG}")
                else:
                    self._nvml, self._read = nvml, _nvml_reader(nvml, handle)
            if self.unavailable_reason is not None:
                log.info("GPU telemetry off: %s", self.unavailable_reason)
                return self
        self._sample()
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()
            self._thread = None
            self._sample()
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
            self._nvml, self._read = None, None

    def _sample(self) -> None:
        try:
            self.samples.append(self._read())
        except Exception as e:  # noqa: BLE001  (a failing reader must not kill the benchmark)
            self.read_errors += 1
            if self.read_errors == 1:
                log.warning("GPU telemetry read failed: %s", e)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def summary(self) -> dict[str, Any]:
        """Flat dict for ``benchmark.extra_info``; ``{"available": False, "reason": ...}`` without telemetry."""
        if self.unavailable_reason is not None:
            return {"available": False, "reason": self.unavailable_reason}
        throttled, reasons = detect_throttle(self.samples)
        return {"available": True, **summarize_samples(self.samples), "throttled": throttled,
                "throttle_reasons": reasons, "interval_s": self.interval_s,
                **({"read_errors": self.read_errors} if self.read_errors else {})}
