"""The machine fingerprint saved with benchmark runs, and the refusal of other machines' runs by --benchmark-compare
and --perf-compare."""

from __future__ import annotations

import importlib.metadata
import json
from pathlib import Path
from typing import Any

import pytest

from perf.measure.machine import COMPARED_FIELDS, cuda_device_count, fingerprint_differences, machine_fingerprint

pytest_plugins = ["pytester"]
# pytest-benchmark's own "machine_info is different" warning, raised by the in-process runs' configure.
pytestmark = [pytest.mark.filterwarnings("ignore:Benchmark machine_info is different"),
              pytest.mark.usefixtures("lazy_imports_done_outside_pytester")]

# The inner runs' conftest: the perf plugin and the gate's (--perf-compare), and pytest-benchmark's own
# machine_info without py-cpuinfo's one-second probe (machine_info["perf"] is what these tests are about).
CONFTEST = """
pytest_plugins = ["perf.plugin"]

def pytest_benchmark_generate_machine_info():
    return {"node": "test"}
"""

GPU_FIELDS = (
    "gpu_name", "compute_capability", "gpu_memory_mib", "driver_version", "cuda_driver_version",
    "sm_clock_max_mhz", "mem_clock_max_mhz", "power_limit_w",
)  # fmt: skip
OTHER_FIELDS = (
    "gpu_index", "gpu_count", "cuda_version", "cudnn_version", "torch_version", "onnxruntime_version",
    "tensorrt_version", "tensorrt_module", "opencv_version", "numpy_version", "cpu_model", "cpu_count",
)  # fmt: skip
# Benchmarks as short as pytest-benchmark allows: the tests check records, not timings.
QUICK = ("--benchmark-min-rounds=1", "--benchmark-max-time=0.000001", "--benchmark-warmup=off", "--perf-device=cpu")


def _has_gpu() -> bool:
    """An NVIDIA driver device node or a CUDA device visible to torch."""
    return Path("/dev/nvidiactl").exists() or cuda_device_count() > 0


def test_fingerprint_has_every_key_and_is_json() -> None:
    info = machine_fingerprint()
    assert set(info) == set(GPU_FIELDS) | set(OTHER_FIELDS)
    assert json.loads(json.dumps(info)) == info


def test_fingerprint_records_installed_versions_and_cpu() -> None:
    info = machine_fingerprint()
    assert info["numpy_version"] == importlib.metadata.version("numpy")
    assert info["torch_version"] == importlib.metadata.version("torch")
    assert isinstance(info["cpu_count"], int) and info["cpu_count"] >= 1


@pytest.mark.skipif(_has_gpu(), reason="this machine has a GPU")
def test_fingerprint_gpu_fields_are_none_without_a_gpu() -> None:
    info = machine_fingerprint()
    assert {field: info[field] for field in GPU_FIELDS} == dict.fromkeys(GPU_FIELDS)
    assert info["gpu_count"] == 0 and info["gpu_index"] is None


@pytest.mark.parametrize("field", COMPARED_FIELDS)
def test_differences_list_only_compared_fields_that_differ(field: str) -> None:
    current = {name: f"now-{name}" for name in COMPARED_FIELDS} | {"sm_clock_mhz": 1980, "torch_version": "2.13"}
    saved = dict(current, sm_clock_mhz=1410, torch_version="2.12") | {field: "then"}
    assert fingerprint_differences(saved, current) == [(field, "then", f"now-{field}")]
    assert fingerprint_differences(current, current) == []


def test_compared_fields_are_gpu_driver_cuda_and_device() -> None:
    assert set(COMPARED_FIELDS) == {"device", "gpu_name", "compute_capability", "driver_version", "cuda_version"}


def test_differences_with_unrecorded_fingerprint_name_every_known_field() -> None:
    current = dict.fromkeys(COMPARED_FIELDS) | {"device": "cpu"}
    assert fingerprint_differences(None, current) == [("device", "<not recorded>", "cpu")]


@pytest.fixture
def saved_run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Path:
    """One benchmark run saved (--benchmark-autosave) to pytester's storage/; returns the JSON file."""
    # Under xdist, pytest-benchmark would see the worker's variable in the inner runs and disable itself.
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_bench="def test_noop(benchmark):\n    benchmark(lambda: None)\n")
    result = pytester.runpytest("--benchmark-storage=storage", "--benchmark-autosave", *QUICK)
    result.assert_outcomes(passed=1)
    (path,) = (pytester.path / "storage").glob("*/0001_*.json")
    return path


def _edit(path: Path, **perf: Any) -> None:
    run = json.loads(path.read_text())
    run["machine_info"]["perf"].update(perf)
    path.write_text(json.dumps(run))


def test_saved_run_records_the_fingerprint(saved_run: Path) -> None:
    perf = json.loads(saved_run.read_text())["machine_info"]["perf"]
    assert set(COMPARED_FIELDS) <= set(perf)
    assert perf["device"] == "cpu"


def test_compare_on_the_same_machine_passes(pytester: pytest.Pytester, saved_run: Path) -> None:
    result = pytester.runpytest("--benchmark-storage=storage", "--benchmark-compare=0001", *QUICK)
    result.assert_outcomes(passed=1)
    assert "different machine" not in result.stdout.str() + result.stderr.str()


@pytest.mark.parametrize("option", ["--benchmark-compare", "--perf-compare"])
@pytest.mark.parametrize(
    ("field", "value"),
    [("gpu_name", "NVIDIA Imaginary GPU"), ("driver_version", "999.99")],
)
def test_compare_refuses_a_run_from_another_machine(
    pytester: pytest.Pytester, saved_run: Path, option: str, field: str, value: str
) -> None:
    _edit(saved_run, **{field: value})
    result = pytester.runpytest("--benchmark-storage=storage", f"{option}=0001", *QUICK)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        [
            f"ERROR: {option}: the saved run in * comes from a different machine:",
            f"  {field}: saved '{value}', current *",
            "*pass --perf-allow-machine-mismatch to compare anyway.",
        ]
    )


def test_compare_refuses_a_run_saved_without_fingerprint(pytester: pytest.Pytester, saved_run: Path) -> None:
    run = json.loads(saved_run.read_text())
    del run["machine_info"]["perf"]
    saved_run.write_text(json.dumps(run))
    result = pytester.runpytest("--benchmark-storage=storage", "--benchmark-compare=0001", *QUICK)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["  device: saved '<not recorded>', current 'cpu'"])


def test_allow_machine_mismatch_compares_with_a_warning(pytester: pytest.Pytester, saved_run: Path) -> None:
    _edit(saved_run, gpu_name="NVIDIA Imaginary GPU")
    result = pytester.runpytest(
        "--benchmark-storage=storage", "--benchmark-compare=0001", "--perf-allow-machine-mismatch", *QUICK
    )
    result.assert_outcomes(passed=1)
    output = result.stdout.str() + result.stderr.str()
    assert "gpu_name: saved 'NVIDIA Imaginary GPU'" in output
    assert "Comparing anyway (--perf-allow-machine-mismatch)" in output


def test_fingerprint_leaves_out_current_clocks_that_change_between_runs() -> None:
    info = machine_fingerprint()
    assert "sm_clock_mhz" not in info and "mem_clock_mhz" not in info


def test_the_fingerprint_of_a_bare_cuda_is_of_torchs_current_device(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    import torch

    from perf.measure.machine import device_fingerprint, torch_gpu_pci_bus_id

    def properties(index: int) -> object:
        return types.SimpleNamespace(name=f"GPU {index}", major=9, minor=0, total_memory=80 * 2**30, uuid=None,
                                     pci_domain_id=0, pci_bus_id=0x1B + index, pci_device_id=0)  # fmt: skip

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a host of two GPUs whose current device is 1
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 1)
    monkeypatch.setattr(torch.cuda, "get_device_properties", properties)
    got = device_fingerprint("cuda")
    assert (got["gpu_index"], got["gpu_name"], got["device"]) == (1, "GPU 1", "cuda")
    assert (device_fingerprint("cuda:0")["gpu_name"], device_fingerprint("cpu")["device"]) == ("GPU 0", "cpu")
    assert set(got) == {*GPU_FIELDS, *OTHER_FIELDS, "device"}
    assert torch_gpu_pci_bus_id(1) == "0000:1c:00.0"
