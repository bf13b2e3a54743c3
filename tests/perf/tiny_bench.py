"""A tiny benchmark project on a virtual clock, for tests that run the gate in real pytest subprocesses.

A call of the benchmark moves the clock by 1 ms times a per-process offset (``OFFSET`` in the generated module:
identical code that differs between processes, as on a real runner) times a seeded log-normal factor (the k-th process started in the folder draws seed k: its own noise, the same in every test run), plus
``--perf-inject-delay``'s milliseconds; each reading moves it by 1 ns (pytest-benchmark's precision probe needs a
clock that moves). pytest, pytest-benchmark, the stability gate, the compare and the cross-process runs all run for
real; only the time source is fixed: a CPU clock on a 2-core machine read the same work as 1.01 ms and 1.77 ms a
few seconds apart, which no gate can call "no change".
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

CONFTEST = """
pytest_plugins = {plugins!r}

def pytest_benchmark_generate_machine_info():
    return {{"node": "test"}}  # skip py-cpuinfo's one-second probe
"""
BENCH = """
import os

import numpy as np
import pytest


def _process_number():
    # The k-th process started in this folder draws seed k: each process its own noise, the same in every test run
    fd = os.open(os.path.join(os.path.dirname(__file__), ".processes"), os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(fd, b"x")
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


class VirtualClock:
    def __init__(self):
        self.now = 0.0
        self.rng = np.random.default_rng(_process_number())
        self.offset = 1 + self.rng.uniform(-{offset}, {offset})
        self.__name__ = "VirtualClock"

    def __call__(self):
        self.now += 1e-9
        return self.now


CLOCK = VirtualClock()


@pytest.mark.benchmark(timer=CLOCK)
def test_busy(benchmark, perf_measure, pytestconfig):
    delay_s = pytestconfig.getoption("perf_inject_delay") / 1e3

    def call():
        CLOCK.now += 1e-3 * CLOCK.offset * CLOCK.rng.lognormal(0.0, {spread}) + delay_s

    perf_measure(benchmark, call)
"""


def write_project(folder: Path, plugins: list[str], *, offset: float = 0.0, spread: float = 0.03) -> Path:
    """``conftest.py`` loading ``plugins`` and ``test_tiny.py`` (one benchmark, ``test_busy``) in ``folder``;
    ``offset``: each process's clock runs up to that fraction fast or slow; ``spread``: per-call noise."""
    (folder / "conftest.py").write_text(CONFTEST.format(plugins=plugins))
    (folder / "test_tiny.py").write_text(BENCH.format(offset=offset, spread=spread))
    return folder


def child_env(**extra: str) -> dict[str, str]:
    """This process's environment for a child pytest: the repository first on ``PYTHONPATH``, pytest-xdist's
    worker variable left out (pytest-benchmark switches itself off under it), then ``extra``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_XDIST_WORKER"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    return env | extra
