"""GPU telemetry: the summary and throttle rules on given samples, the sampler thread with an injected reader, and
the no-NVML path (this machine has no GPU)."""

from __future__ import annotations

import sys
import threading
import time

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perf.measure.telemetry import METRICS, NvmlSampler, Sample, detect_throttle, reason_names, summarize_samples


def _samples(clocks: list[float], reasons: list[int] | None = None) -> list[Sample]:
    reasons = reasons or [0] * len(clocks)
    return [Sample(t_s=i * 0.05, gpu_util_pct=90.0, sm_clock_mhz=c, mem_used_mib=2048.0, temperature_c=60.0 + i,
                   power_w=300.0, reasons=r) for i, (c, r) in enumerate(zip(clocks, reasons))]  # fmt: skip


_values = st.lists(st.floats(0, 5000, allow_nan=False), min_size=1, max_size=30)


@given(_values)
def test_summary_min_mean_max_bracket_each_other(values: list[float]) -> None:
    samples = [Sample(t_s=i, sm_clock_mhz=v, power_w=None) for i, v in enumerate(values)]
    out = summarize_samples(samples)
    assert out["samples"] == len(values)
    assert out["sm_clock_mhz_min"] == min(values) and out["sm_clock_mhz_max"] == max(values)
    slack = 1e-9 * max(values)  # float summation
    assert min(values) - slack <= out["sm_clock_mhz_mean"] <= max(values) + slack
    assert "power_w_mean" not in out  # a metric never reported is left out, not zero


def test_summary_keys_cover_every_metric() -> None:
    out = summarize_samples(_samples([1980, 1980, 1965]))
    assert out["temperature_c_mean"] == pytest.approx(61.0)
    assert {f"{m}_{s}" for m in METRICS for s in ("min", "mean", "max")} <= set(out)
    assert summarize_samples([]) == {"samples": 0}


def test_steady_clocks_are_not_throttling() -> None:
    assert detect_throttle(_samples([1980, 1965, 1980, 1950])) == (False, [])


def test_clock_drop_beyond_ten_percent_is_throttling() -> None:
    throttled, reasons = detect_throttle(_samples([1980, 1980, 1700, 1750]))
    assert throttled and reasons == ["sm_clock_dropped 1980->1700 MHz (14 %)"]


def test_idle_samples_do_not_count_as_a_clock_drop() -> None:
    assert detect_throttle(_samples([1980, 345, 1980], [0, 0x1, 0])) == (False, [])


def test_nvml_throttle_reasons_are_reported_except_benign_ones() -> None:
    throttled, reasons = detect_throttle(_samples([1980, 1980, 1980], [0x2, 0x4, 0x20 | 0x1]))
    assert throttled and reasons == ["sw_power_cap", "sw_thermal_slowdown"]
    assert reason_names(0x40 | 0x1000) == ["hw_thermal_slowdown", "0x1000"]


def test_sampler_thread_samples_until_exit_with_an_injected_reader() -> None:
    calls = []
    lock = threading.Lock()

    def read() -> Sample:
        with lock:
            calls.append(threading.current_thread().name)
        return Sample(t_s=time.monotonic(), gpu_util_pct=50.0, sm_clock_mhz=1500.0)

    sampler = NvmlSampler(interval_s=0.01, read=read)
    with sampler:
        deadline = time.monotonic() + 60  # a loaded machine may run the thread late, never make it sample sooner
        while len(sampler.samples) < 4 and time.monotonic() < deadline:
            time.sleep(0.01)
    count = len(sampler.samples)
    assert count >= 5  # entry + at least three thread samples + exit
    assert "nvml-sampler" in calls and calls[0] == threading.current_thread().name and calls[-1] == calls[0]
    time.sleep(0.05)
    assert len(sampler.samples) == count  # the thread stopped
    assert not any(t.name == "nvml-sampler" for t in threading.enumerate())
    summary = sampler.summary()
    assert summary["available"] and summary["samples"] == count and summary["throttled"] is False
    assert summary["gpu_util_pct_mean"] == 50.0 and summary["throttle_reasons"] == []


def test_a_failing_reader_does_not_break_the_block() -> None:
    def read() -> Sample:
        raise RuntimeError("NVML went away")

    with NvmlSampler(interval_s=0.01, read=read) as sampler:
        time.sleep(0.03)
    assert sampler.samples == [] and sampler.summary()["read_errors"] >= 2


def test_without_nvml_the_sampler_is_a_no_op_that_says_why() -> None:
    ok, reason = NvmlSampler.available()
    if ok:
        pytest.skip("NVML and a GPU are present here")
    assert reason
    with NvmlSampler() as sampler:
        pass
    assert sampler.samples == []
    assert sampler.summary() == {"available": False, "reason": reason}


def test_interval_must_be_positive() -> None:
    for bad in (0, -1.0, float("nan")):
        with pytest.raises(ValueError, match="interval_s must be > 0"):
            NvmlSampler(interval_s=bad)


def test_without_nvidia_ml_py_the_reason_names_the_gpu_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # as where nvidia-ml-py is not installed
    ok, reason = NvmlSampler.available()
    assert not ok and reason is not None
    assert reason.startswith("pynvml not importable (nvidia-ml-py, in the gpu extra: pip install -e '.[gpu]'): ")


class _Nvml:
    """NVML's calls the handle lookup makes, on a host of three GPUs: handles are the GPUs' UUIDs."""

    class NVMLError(Exception):
        pass

    UUIDS = ("GPU-aaa", "GPU-bbb", "GPU-ccc")

    def nvmlDeviceGetHandleByIndex(self, index: int) -> str:  # noqa: N802  (NVML's names)
        if index >= len(self.UUIDS):
            raise self.NVMLError("Invalid Argument")
        return self.UUIDS[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:  # noqa: N802
        if uuid not in self.UUIDS:
            raise self.NVMLError("Not Found")
        return uuid


@pytest.mark.parametrize(("visible", "index", "uuid", "expected"), [
    (None, 1, None, "GPU-bbb"),             # every GPU visible: torch's numbering is NVML's
    ("2", 0, None, "GPU-ccc"),              # NVML ignores CUDA_VISIBLE_DEVICES: torch's cuda:0 is NVML's GPU 2
    ("2,0", 1, None, "GPU-aaa"),
    ("GPU-bbb", 0, None, "GPU-bbb"),        # a UUID in CUDA_VISIBLE_DEVICES
    ("2", 0, "GPU-aaa", "GPU-aaa"),         # the UUID torch gave wins
    ("MIG-1/2/3", 0, None, None),           # not resolvable: no handle, no guess
    ("2", 1, None, None),                   # torch has no cuda:1 here
    ("7", 0, None, None),                   # NVML has no GPU 7
])  # fmt: skip
def test_the_nvml_handle_is_of_the_gpu_torch_calls_cuda_n(monkeypatch: pytest.MonkeyPatch, visible: str | None,
                                                          index: int, uuid: str | None, expected: str | None) -> None:
    from perf.measure.machine import nvml_handle

    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert nvml_handle(_Nvml(), index, uuid) == expected


class _NvmlHost(_Nvml):
    """pynvml on a host of three GPUs where GPU-bbb is in MIG mode with one slice, MIG-b1: what the sampler calls.
    Every GPU reads 50 % busy, the whole GPU's figure, also on GPU-bbb."""

    NVML_CLOCK_SM, NVML_TEMPERATURE_GPU, NVML_DEVICE_MIG_ENABLE = 0, 0, 1

    def nvmlInit(self) -> None:  # noqa: N802  (NVML's names)
        pass

    nvmlShutdown = nvmlInit  # noqa: N815

    def nvmlDeviceGetCount(self) -> int:  # noqa: N802
        return len(self.UUIDS)

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> str:  # noqa: N802
        return uuid if uuid == "MIG-b1" else super().nvmlDeviceGetHandleByUUID(uuid)

    def nvmlDeviceIsMigDeviceHandle(self, handle: str) -> int:  # noqa: N802
        return int(handle.startswith("MIG-"))

    def nvmlDeviceGetMigMode(self, handle: str) -> list[int]:  # noqa: N802
        if handle.startswith("MIG-"):
            raise self.NVMLError("Invalid Argument")
        return [1, 1] if handle == "GPU-bbb" else [0, 0]

    def nvmlDeviceGetUtilizationRates(self, handle: str) -> object:  # noqa: N802
        if handle.startswith("MIG-"):
            raise self.NVMLError("Not Supported")
        return type("Utilization", (), {"gpu": 50, "memory": 10})()

    def nvmlDeviceGetClockInfo(self, handle: str, clock: int) -> int:  # noqa: N802
        return 1980

    def nvmlDeviceGetMemoryInfo(self, handle: str) -> object:  # noqa: N802
        return type("Memory", (), {"used": 2**30})()

    def nvmlDeviceGetTemperature(self, handle: str, sensor: int) -> int:  # noqa: N802
        return 40

    def nvmlDeviceGetPowerUsage(self, handle: str) -> int:  # noqa: N802
        return 300_000


@pytest.mark.parametrize("visible", ["GPU-bbb", "MIG-b1"])
def test_a_mig_slice_has_no_telemetry_and_says_why(monkeypatch: pytest.MonkeyPatch, visible: str) -> None:
    # The GPU itself in MIG mode would give the whole GPU's figures (other slices' work too); the slice, none.
    import perf.measure.telemetry as telemetry

    monkeypatch.setitem(sys.modules, "pynvml", _NvmlHost())
    monkeypatch.setattr(telemetry, "torch_gpu_uuid", lambda index: None)  # torch gives no UUID: found by the entry
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    with NvmlSampler(interval_s=0.01) as sampler:
        pass
    assert sampler.samples == []
    assert sampler.summary() == {"available": False, "reason": f"cuda:0 is a MIG slice: {telemetry.MIG}"}


def test_a_whole_gpu_beside_a_mig_one_is_sampled(monkeypatch: pytest.MonkeyPatch) -> None:
    import perf.measure.telemetry as telemetry

    monkeypatch.setitem(sys.modules, "pynvml", _NvmlHost())
    monkeypatch.setattr(telemetry, "torch_gpu_uuid", lambda index: None)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-ccc")
    with NvmlSampler(interval_s=0.01) as sampler:
        pass
    summary = sampler.summary()
    assert summary["available"] is True and summary["samples"] >= 2 and summary["gpu_util_pct_max"] == 50
