"""Rows of the bad-input matrix (tests/bad_inputs.py) for the perf suite's option values: one per option fault.

Each row runs ``python -m pytest perf`` from the repository root with one bad value and expects exactly one
stderr line, ``argument --perf-x: Could not parse value: 'v'. <what is allowed>`` (pytest's usage block is four),
and a non-zero exit. bad_inputs imports this module after it has defined `Row`.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from bad_inputs import Made, Row, Shared


def _pytest_option(option: str, value: str, allowed: str) -> Callable[[Path, Shared], Made]:
    """``pytest perf <option>=<value>``; the line must name the option and the value and say what is allowed."""

    def make(folder: Path, shared: Shared) -> Made:
        args = ["-m", "pytest", "perf", "-q", "-p", "no:cacheprovider", f"{option}={value}"]
        return args, [f"argument {option}: Could not parse value: {value!r}. {allowed}"]

    return make


def _row(row_id: str, option: str, value: str, allowed: str) -> Row:
    return Row(f"pytest-{row_id}", _pytest_option(option, value, allowed), in_repo=True)


def _missing_cuda_device(folder: Path, shared: Shared) -> Made:
    return (["-m", "pytest", "perf", "-q", "-p", "no:cacheprovider", "--perf-device=cuda:99"],
            ["--perf-device cuda:99: no CUDA device 99 (found "])  # fmt: skip


ROWS: tuple[Row, ...] = (
    _row("streams-not-a-number", "--perf-streams", "1,x", "Expected comma-separated positive integers"),
    _row("skip-interval-negative", "--perf-skip-interval", "-1", "Expected comma-separated integers >= 0"),
    _row("sources-unknown-codec", "--perf-sources", "av1", "Expected comma-separated sources <codec>[+nvdec]"),
    _row("frames-zero", "--perf-frames", "0", "Expected a positive integer."),
    _row("frames-superscript-digit", "--perf-frames", "\u00b2", "Expected a positive integer."),
    _row("inject-delay-negative", "--perf-inject-delay", "-1", "Expected a finite number of milliseconds >= 0"),
    _row("clock-lead-in-negative", "--perf-clock-lead-in", "-0.5", "Expected a finite number of milliseconds >= 0"),
    _row("clock-lead-in-infinite", "--perf-clock-lead-in", "inf", "Expected a finite number of milliseconds >= 0"),
    _row("inject-delay-past-int64-cycles", "--perf-inject-delay", "1e13",
         "Expected a finite number of milliseconds >= 0, at most 1e12 (a GPU sleep counts int64 cycles)"),
    _row("profile-unknown", "--perf-profile", "perf", "Expected one of: none, torch."),
    _row("controls-unknown", "--perf-controls", "pins", "Expected all, none, or names from"),
    _row("regression-no-percent", "--perf-regression", "layer", "Expected KIND:PERCENT"),
    _row("min-effect-not-a-fraction", "--perf-min-effect", "lots", "Expected a fraction >= 0 and < 1"),
    _row("max-cv-over-100-percent", "--perf-max-cv", "150%", "Expected a fraction >= 0 and < 1"),
    _row("max-drift-negative", "--perf-max-drift", "-0.1", "Expected a fraction >= 0 and < 1"),
    _row("max-remeasure-negative", "--perf-max-remeasure", "-1", "Expected a number of measurements from 0 to 20."),
    _row("max-remeasure-past-days", "--perf-max-remeasure", "1000000000000",
         "Expected a number of measurements from 0 to 20."),
    _row("selftest-trials-zero", "--perf-selftest-trials", "0", "Expected a number of trials from 1 to 1000."),
    _row("selftest-trials-past-days", "--perf-selftest-trials", "1000000000000",
         "Expected a number of trials from 1 to 1000."),
    _row("selftest-levels-zero", "--perf-selftest-levels", "0", "Expected percentages > 0"),
    _row("noise-one-process", "--perf-noise", "1", "Expected a number of processes from 2 to 1000."),
    _row("selftest-processes-not-a-number", "--perf-selftest-processes", "x",
         "Expected a number of processes from 2 to 1000."),
    _row("noise-past-a-plan", "--perf-noise", "1000000000000", "Expected a number of processes from 2 to 1000."),
    _row("confirm-past-a-plan", "--perf-confirm", "1000000000000", "Expected a number of pairs from 0 to 1000."),
    _row("selftest-regressions-zero", "--perf-selftest-regressions", "layer:0%", "Expected KIND:PERCENT"),
    _row("processes-budget-zero", "--perf-processes-budget", "0", "Expected seconds > 0"),
    _row("benchmark-max-time-negative", "--benchmark-max-time", "-1", "Expected seconds > 0"),
    _row("benchmark-max-time-zero", "--benchmark-max-time", "0", "Expected seconds > 0"),
    _row("benchmark-max-time-past-a-round-count", "--benchmark-max-time", "1E+308",
         "Expected seconds > 0, at most 1e9"),
    _row("benchmark-min-time-negative", "--benchmark-min-time", "-0.001", "Expected seconds >= 0"),
    _row("benchmark-calibration-precision-zero", "--benchmark-calibration-precision", "0",
         "Expected an integer >= 1."),
    _row("benchmark-warmup-iterations-negative", "--benchmark-warmup-iterations", "-1", "Expected an integer >= 0."),
    Row("pytest-device-cuda-missing", _missing_cuda_device, in_repo=True),
)
