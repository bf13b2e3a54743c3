"""A backend is one registration: a toy backend with two variants, registered by one ``register`` call in its
own module, shows up in the perf suite's cases, in ``detector detect --backend`` and in the runner contract tests
with nothing else edited. Each check runs in a child process that loads the toy module (``-p toy_backend``), so
the registration never reaches this process's registry."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[2]

#: The whole toy backend: the torch model on the CPU as a runner, and its one registration.
TOY_BACKEND = '''
"""A toy backend for the registry tests: the torch model on the CPU, optionally with batch norm folded."""

import torch

from detector.backends import Variant, register
from detector.backends.base import Runner


class ToyRunner(Runner):
    name = "toy"
    precisions = ("fp32",)
    devices = ("cpu",)
    options = {"fold": False}

    def _activate(self):
        model = self.spec.load_torch()
        if self.options["fold"]:
            model.fuse_batchnorm()
        self._model = model.eval().requires_grad_(False)

    def _deactivate(self):
        self._model = None

    def _infer(self, x):
        with torch.no_grad():
            return self._model(x)


register("toy", "toy_backend:ToyRunner", title="Toy", devices=("cpu",), marks=("toy",),
         variants=[Variant("toy"), Variant("toy-folded", {"fold": True})])
'''

#: Runs ``detector`` commands (argv lists, JSON in argv[1]) in one process with the toy backend loaded; each
#: command's output ends with a line ``== exit <status>``.
CLI_DRIVER = '''
import json
import sys

import toy_backend  # noqa: F401 - registers the toy backend
from detector.cli import main

for argv in json.loads(sys.argv[1]):
    try:
        code = main(argv)
    except SystemExit as e:
        code = e.code
    print(f"== exit {code}", flush=True)
'''


@pytest.fixture
def toy(pytester: pytest.Pytester) -> pytest.Pytester:
    """A folder holding the toy backend's module, the working directory of the child processes."""
    pytester.makepyfile(toy_backend=TOY_BACKEND)
    return pytester


def _perf_case_ids(toy: pytest.Pytester, *options: str) -> set[str]:
    """The case ids ``pytest perf/test_inference_speed.py --collect-only`` collects on the CPU with the toy loaded."""
    result = toy.runpytest_subprocess(str(ROOT / "perf" / "test_inference_speed.py"), "-p", "toy_backend",
                                      "--collect-only", "-q", "--perf-device=cpu", "--perf-precisions=fp32",
                                      "--perf-batch-sizes=1", "-p", "no:cacheprovider", *options)
    ids = {line.rpartition("[")[2].rstrip("]") for line in result.stdout.lines if "::" in line}
    assert ids, result.stdout.str()
    return ids


def test_a_registered_variant_is_collected_by_the_perf_suite(toy: pytest.Pytester) -> None:
    assert {"torch-fp32-b1", "onnxruntime-fp32-b1", "toy-fp32-b1", "toy-folded-fp32-b1"} <= _perf_case_ids(toy)
    assert _perf_case_ids(toy, "--perf-backends=toy") == {"toy-fp32-b1", "toy-folded-fp32-b1"}
    # its marker is declared by the suite (no "unknown marker" under --strict-markers) and selects its cases
    assert _perf_case_ids(toy, "--strict-markers", "-m", "toy") == {"toy-fp32-b1", "toy-folded-fp32-b1"}


def test_a_registered_backend_is_offered_and_run_by_the_cli(toy: pytest.Pytester) -> None:
    toy.makepyfile(cli_driver=CLI_DRIVER)
    cache, video, out = (str(toy.path / name) for name in ("cache", "clip.mp4", "out"))
    commands = [
        ["detect", "--help"],
        ["make-video", "--out", video, "--width", "320", "--height", "180", "--frames", "3"],
        ["detect", "--backend", "torch,nope", "--video", video, "--device", "cpu", "--cache-dir", cache, "--out", out],
        ["detect", "--backend", "toy", "--video", video, "--device", "cpu", "--cache-dir", cache, "--out", out],
    ]
    result = subprocess.run([sys.executable, "cli_driver.py", json.dumps(commands)], cwd=toy.path, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300, check=False,
                            env={**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(toy.path)])})
    runs = re.findall(r"(.*?)== exit (\S+)\n", result.stdout, flags=re.DOTALL)
    assert [status for _, status in runs] == ["0", "0", "2", "0"], result.stdout
    (help_text, _), _, (unknown, _), (detected, _) = runs
    assert "comma-separated: torch, onnxruntime, tensorrt, toy" in " ".join(help_text.split())
    assert "detector: error: unknown backend 'nope'; known backends: torch, onnxruntime, tensorrt, toy" in unknown
    assert "| Toy fp32 (cpu, batch 1) |" in detected, detected


def test_a_registered_backend_passes_the_runner_contract(toy: pytest.Pytester) -> None:
    contract = str(ROOT / "tests" / "detector" / "test_backends.py")
    collected = toy.runpytest_subprocess(contract, "-p", "toy_backend", "-k", "toy", "--collect-only", "-q",
                                         "-p", "no:cacheprovider")
    configs = [re.search(r"\[(toy-cpu|toy-folded-cpu)\b", line) for line in collected.stdout.lines if "::" in line]
    assert all(configs) and {m.group(1) for m in configs if m} == {"toy-cpu", "toy-folded-cpu"}, \
        collected.stdout.str()
    expected = sum(1 for m in configs if m and m.group(1) == "toy-cpu")
    result = toy.runpytest_subprocess(contract, "-p", "toy_backend", "-k", "toy-cpu", "-p", "no:cacheprovider",
                                      "-q", "-rs")  # one variant is run: the contract's every test passes
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == expected >= 15 and set(outcomes) == {"passed", "deselected"}, result.stdout.str()


def test_a_cpu_backend_with_its_own_marker_runs_on_the_cpu_and_skips_the_precision_it_lacks(
    toy: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)  # pytest-benchmark would switch itself off
    result = toy.runpytest_subprocess(str(ROOT / "perf" / "test_inference_speed.py"), "-p", "toy_backend",
                                      "-p", "no:cacheprovider", "--perf-device=cpu", "--perf-backends=toy",
                                      "--perf-precisions=fp32,fp16", "--perf-batch-sizes=1", "--perf-cache-dir=cache",
                                      "--perf-reports-dir=reports", "--benchmark-storage=file://storage",
                                      "--benchmark-max-time=0.02", "--benchmark-min-rounds=3", "-k", "toy-fp",
                                      "-v", "-rs", "--setup-show")  # fmt: skip
    output = result.stdout.str()
    assert result.ret == 0, output
    assert result.parseoutcomes() == {"passed": 1, "skipped": 1, "deselected": 2}, output
    # its marker ("toy") gates it like TensorRT's, but a CPU backend is not sent to look for a CUDA device
    assert re.search(r"test_inference_speed\[toy-fp32-b1\] .*PASSED", output), output
    assert re.search(r"SKIPPED \[1\] .*test_inference_speed\.py: toy has no fp16 mode \(it runs fp32\)$", output,
                     flags=re.MULTILINE), output
    assert re.search(r"SETUP +S runner_pool\b", output), output  # only the case that runs builds a runner
