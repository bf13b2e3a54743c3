"""Every option of the perf suite (``--perf-*``, ``perf_*`` ini settings) with its parser, default and help
(`all_options`); the parsers also serve the suite's commands; a bad value is one usage line (`start_up_errors`)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from detector import devices
from detector.argtypes import split_list, value_error, value_parser
from detector.devices import DEVICE_FORMS, PRECISIONS
from perf.store import in_memory_sqlite

if TYPE_CHECKING:
    import pytest

    from perf.gate.regressions import Regression
    from perf.measure.controls import Controls

PROFILERS = ("none", "torch")
DEFAULT_PRECISIONS = ("fp32", "fp16")
#: Regressions --perf-selftest-processes injects when --perf-selftest-regressions is not given.
DEFAULT_REGRESSIONS = "layer:5%,preprocess:5%"


class BadValue(str):
    """What a parser said of an option value it rejected."""


def deferred(parse: Callable[[str], Any]) -> Callable[[str], Any]:
    """``parse`` returning a `BadValue` instead of raising, so that `bad_values` reports it in one line."""

    def parse_or_keep(value: str) -> Any:
        try:
            return parse(value)
        except argparse.ArgumentTypeError as e:
            return BadValue(str(e))

    parse_or_keep.__name__ = parse.__name__
    return parse_or_keep


def bad_values(option: Any) -> list[str]:
    """``argument --perf-x: Could not parse value: ...`` for every `BadValue` in pytest's ``config.option``."""
    return [f"argument --{dest.replace('_', '-')}: {value}" for dest, value in sorted(vars(option).items())
            if isinstance(value, BadValue)]


def _decimal(text: str) -> int | None:
    """Digits only (no sign, no underscore): ``"60"`` -> 60, else None."""
    return int(text) if text.strip().isdecimal() else None


def _integers(minimum: int, expected: str, maximum: int | None = None) -> Callable[[str], tuple[int, ...]]:
    """A parser of comma-separated integers from ``minimum`` (to ``maximum``): ``"1,8,32"`` -> ``(1, 8, 32)``."""
    return value_parser(lambda text: tuple(map(_decimal, split_list(text))) or None,
                        lambda values: None not in values and min(values) >= minimum
                        and (maximum is None or max(values) <= maximum), expected)  # fmt: skip


def _percent(text: str) -> float:
    """``"2%"`` or ``"0.02"`` -> 0.02 (ValueError for another text)."""
    text = text.strip()
    return float(text[:-1]) / 100 if text.endswith("%") else float(text)


def _device(text: str) -> str:
    """``text`` lower-cased where `detector.devices.parse_device` reads it (ValueError for another name)."""
    devices.parse_device(device := text.strip().lower())
    return device


def _store(text: str) -> str | None:
    text = text.strip()
    if text.lower() == "none":
        return "none"
    if in_memory_sqlite(text):
        raise value_error(text, "a store that keeps its runs: a path or sqlite:///path naming a file (an in-memory "
                          "SQLite database loses them), postgresql://... or none")  # fmt: skip
    known = ("sqlite:///", "postgresql://", "postgres://", "postgresql+psycopg://")
    return None if "://" in text and not text.startswith(known) else text


# a batch is an int32 axis (TensorRT's; numpy indexes no larger batch): past it, a MemoryError traceback in the test
parse_batch_sizes = _integers(1, "comma-separated positive integers up to 2147483647, e.g. '1,8,32'", 2**31 - 1)
parse_skip_intervals = _integers(0, "comma-separated integers >= 0 (frames skipped between inferences), e.g. '0,1,2,4'")
parse_positive_int = value_parser(_decimal, lambda v: v >= 1, "a positive integer")


def _bounded(minimum: int, maximum: int, what: str) -> Callable[[str], int]:
    """A parser of one count of ``what`` from ``minimum`` to ``maximum`` (why each maximum: beside it)."""
    return value_parser(_decimal, lambda v: minimum <= v <= maximum, f"a number of {what} from {minimum} to {maximum}")


#: The most processes, or pairs of them, one plan holds: it is laid out before its first process starts (a larger
#: one was built until memory ran out), and 1000 processes of the CI selection take the runner about a day.
MAX_PROCESSES = 1000
parse_processes = _bounded(2, MAX_PROCESSES, "processes")
parse_pairs = _bounded(0, MAX_PROCESSES, "pairs")
#: ``perf-ab --pairs``: an interval needs two.
parse_ab_pairs = _bounded(2, MAX_PROCESSES, "pairs")
#: ``--perf-kernels``: torch.profiler holds every profiled call's events until it stops (2.4 GiB for 1000 calls of a
#: 40-convolution model on the CPU, 2026-11-27): past 1000 calls a run is out of memory before its table.
MAX_KERNEL_CALLS = 1000
parse_kernel_calls = _bounded(0, MAX_KERNEL_CALLS, "calls")
#: ``perf-history simulate --draws``: simulated runs per saved process, every one kept for the tables.
MAX_DRAWS = 1000
parse_draws = _bounded(1, MAX_DRAWS, "draws")
#: ``--perf-max-remeasure``: each one measures the benchmark whole again; a benchmark still unstable after 20 is
#: unstable on this machine, and measuring until one sample passes would only keep a lucky one.
MAX_REMEASURE = 20
parse_remeasure = _bounded(0, MAX_REMEASURE, "measurements")
#: ``--perf-selftest-trials``: 1000 trials read a 95% detection rate to +-1.4% (95% binomial interval), finer than
#: the targets need, and each trial measures every level again.
MAX_TRIALS = 1000
parse_trials = _bounded(1, MAX_TRIALS, "trials")
parse_fraction = value_parser(_percent, lambda v: 0 <= v < 1, "a fraction >= 0 and < 1 (100%), e.g. 2% or 0.02")
#: ``perf-report --change-threshold``.
parse_threshold = value_parser(_percent, lambda v: 0 < v < math.inf, "a change > 0, e.g. 10%",
                               unreadable="e.g. 10% or 0.1")
#: A GPU sleep (``torch.cuda._sleep``) counts int64 clock cycles: at ~2e6 cycles per ms, past ~4.6e12 ms torch's
#: ValueError (OverflowError at 1e308) failed every test; 1e12 ms (32 years) keeps 3 GHz clocks in range.
parse_delay_ms = value_parser(lambda text: float(text.strip().lower().removesuffix("ms")),
                              lambda v: 0 <= v <= 1e12, "a finite number of milliseconds >= 0, at most 1e12 "
                              "(a GPU sleep counts int64 cycles), e.g. 0.2ms", unreadable="milliseconds, e.g. 0.2ms")
parse_seconds = value_parser(lambda text: float(text.strip().lower().removesuffix("s")), lambda v: v > 0,
                             "seconds > 0, e.g. 540")
#: ``"2,5,10"`` -> (0.02, 0.05, 0.1): slowdowns in percent, sorted, duplicates dropped.
parse_levels = value_parser(lambda text: tuple(sorted({float(item.removesuffix("%")) / 100
                                                       for item in split_list(text)})) or None,
                            lambda levels: all(0 < level < 10 for level in levels), "percentages > 0, e.g. 2,5,10")
parse_profiler = value_parser(lambda text: text.strip().lower(), lambda name: name in PROFILERS,
                              f"one of: {', '.join(PROFILERS)}")
parse_precisions = value_parser(lambda text: tuple(split_list(text.lower())) or None,
                                lambda names: set(names) <= set(PRECISIONS),
                                f"comma-separated precisions from: {', '.join(PRECISIONS)}")  # fmt: skip
parse_device = value_parser(_device, bool, DEVICE_FORMS)
#: A device a machine measures on (``perf-history comparable --device``): not ``auto``.
parse_machine_device = value_parser(_device, lambda device: device != "auto", "cpu, cuda or cuda:N")
#: A history store: ``none``, a path (SQLite), ``sqlite:///path`` or ``postgresql://...``; never in-memory SQLite.
parse_store = value_parser(_store, bool, "a path, sqlite:///path, postgresql://... or none")


def parse_backends(value: str) -> tuple[str, ...]:
    """``"torch,onnxruntime"`` -> ``("torch", "onnxruntime")``, each a backend registered at parse time."""
    from perf.session import backend_names

    known = backend_names()
    return value_parser(lambda text: tuple(split_list(text)) or None, lambda names: set(names) <= set(known),
                        f"comma-separated backends from: {', '.join(known)}")(value)  # fmt: skip


def parse_sources(value: str) -> tuple[Any, ...]:
    """``"mp4v,h264+nvdec"`` -> the `perf.measure.sources.Source` of each item (``<codec>[+nvdec][+noencode]``)."""
    from perf.measure.sources import parse_source

    expected = "comma-separated sources <codec>[+nvdec][+noencode], codec mp4v or h264"
    try:
        sources = tuple(parse_source(item) for item in split_list(value))
    except ValueError as e:
        raise value_error(value, f"{expected} ({e})") from None
    if not sources:
        raise value_error(value, expected)
    return sources


def parse_controls(value: str) -> Controls:
    """``"all"``, ``"none"``, or a comma list of `perf.measure.controls.NAMES`, or of ``-name`` to leave them out."""
    from perf.measure.controls import NAMES, Controls

    items = split_list(value.lower(), unique=False)
    if items in (["all"], []):
        return Controls()
    if items == ["none"]:
        return Controls(frozenset())
    if any(i.lstrip("-") not in NAMES for i in items):
        raise value_error(value, f"all, none, or names from {', '.join(NAMES)} (a leading - leaves one out)")
    if all(i.startswith("-") for i in items):
        return Controls(frozenset(NAMES) - {i[1:] for i in items})
    return Controls(frozenset(i for i in items if not i.startswith("-")))


def parse_regression(value: str) -> Regression:
    """``"layer:5%"`` -> ``Regression("layer", 0.05)``; KIND in `perf.gate.regressions.KINDS`, PERCENT in (0, 100]."""
    from perf.gate.regressions import KINDS, Regression  # here, not with this module: it loads the model code

    def convert(text: str) -> Regression:
        kind, _, amount = text.strip().lower().partition(":")
        return Regression(kind, float(amount.strip().removesuffix("%")) / 100)

    return value_parser(convert, lambda r: r.kind in KINDS and 0 < r.fraction <= 1,
                        f"KIND:PERCENT with KIND one of {', '.join(KINDS)}, e.g. layer:5%")(value)


#: ``"layer:5%,preprocess:5%"`` -> one `perf.gate.regressions.Regression` per item (`parse_regression`), an item
#: again (``layer:5%,layer:5.0%``) once: its children would take the same labels.
parse_regressions = value_parser(lambda text: tuple(dict.fromkeys(parse_regression(item) for item in text.split(",")
                                                                  if item.strip())) or None,
                                 bool, f"e.g. {DEFAULT_REGRESSIONS}")  # fmt: skip
#: pytest-benchmark's options whose values its own parsers accept although they cannot work: flag -> its check.
_BENCHMARK_LIMITS: dict[str, Callable[[str], float]] = {
    # its rounds are ceil(max-time / a round's time): past ~1e299 s that is inf, an OverflowError in every benchmark
    "--benchmark-max-time": value_parser(float, lambda v: 0 < v <= 1e9,
                                         "seconds > 0, at most 1e9 (32 years), e.g. 1.0"),
    "--benchmark-min-time": value_parser(float, lambda v: 0 <= v < math.inf, "seconds >= 0, e.g. 0.000005"),
    "--benchmark-min-rounds": value_parser(float, lambda v: v >= 1, "an integer >= 1"),
    "--benchmark-calibration-precision": value_parser(float, lambda v: v >= 1, "an integer >= 1"),
    "--benchmark-warmup-iterations": value_parser(float, lambda v: v >= 0, "an integer >= 0"),
}


def benchmark_option_errors(getoption: Callable[..., Any]) -> list[str]:
    """``argument --benchmark-x: ...`` for each pytest-benchmark option value `_BENCHMARK_LIMITS` refuses."""
    values = {flag: getoption(flag.removeprefix("--").replace("-", "_"), None) for flag in _BENCHMARK_LIMITS}
    parsed = {flag: deferred(_BENCHMARK_LIMITS[flag])(str(v)) for flag, v in values.items() if v is not None}
    return [f"argument {flag}: {v}" for flag, v in parsed.items() if isinstance(v, BadValue)]


def _join(values: tuple[Any, ...]) -> str:
    return ",".join(map(str, values))


@dataclass(frozen=True)
class Option:
    """One option: ``flag`` ``--perf-<name>`` (dest ``perf_<name>``), ``help`` (None: hidden), ``shown`` default;
    ``metavar`` None: a switch; ``parse`` None: text; ``const``: value optional; ``ini``: also an ini setting."""

    flag: str
    metavar: str | None
    help: str | None
    shown: str = "False"
    parse: Callable[[str], Any] | None = None
    default: Any = None
    const: Any = None
    aliases: tuple[str, ...] = ()
    ini: bool = False

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")

    def argparse_kwargs(self) -> dict[str, Any]:
        """``group.addoption`` keywords; the help's % signs escaped (argparse formats help with %)."""
        where = f" Ini setting: {self.dest}." if self.ini else ""
        text = argparse.SUPPRESS if self.help is None else f"{self.help}{where} Default: {self.shown}."
        kwargs: dict[str, Any] = {"dest": self.dest, "help": text.replace("%", "%%"), "default": self.default}
        if self.metavar is None:
            return {**kwargs, "action": "store_true", "default": False}
        typed = {} if self.parse is None else {"type": deferred(self.parse)}
        optional = {} if self.const is None else {"nargs": "?", "const": self.const}
        return {**kwargs, "metavar": self.metavar, **typed, **optional}


def all_options() -> tuple[Option, ...]:
    """Every option of the suite, in the order --help lists them (the library's defaults imported on first call)."""
    from perf.gate.history import DEFAULT_LAST
    from perf.gate.judge import DEFAULT_BUDGET_S, DEFAULT_PAIRS, DEFAULT_FLOOR as DEFAULT_MIN_EFFECT
    from perf.measure.clock import DEFAULT_LEAD_IN_MS
    from perf.measure.controls import NAMES as CONTROL_NAMES, Controls
    from perf.measure.sources import DEFAULT_SOURCES
    from perf.measure.stability import DEFAULT_MAX_CV, DEFAULT_MAX_DRIFT, DEFAULT_MAX_REMEASURE
    from perf.profile.kernels import DEFAULT_CALLS as KERNEL_CALLS
    from perf.profile.nsys import NSYS_CHILD_FLAG
    from perf.session import DEFAULT_BATCH_SIZES, DEFAULT_FRAMES, DEFAULT_SKIP_INTERVALS, DEFAULT_STREAMS, backend_names

    return (
        # -- what runs, where, and what it is compared with ------------------------------------------------------
        Option("--perf-backends", "NAMES", "Comma-separated backends to run.",
               f"all registered ({_join(backend_names())})", parse_backends),
        Option("--perf-device", "DEVICE", "Device to run on: auto, cpu, cuda or cuda:N; a CUDA device named here must "
               "exist (else a usage error), auto falls back to cpu where none is visible and GPU tests skip.",
               "auto (cuda if available, else cpu)", parse_device, default="auto"),
        Option("--perf-batch-sizes", "SIZES", "Comma-separated batch sizes for the inference benchmarks.",
               f"{_join(DEFAULT_BATCH_SIZES['cuda'])} on CUDA, {_join(DEFAULT_BATCH_SIZES['cpu'])} on CPU",
               parse_batch_sizes),
        Option("--perf-precisions", "NAMES", f"Comma-separated precisions from {', '.join(PRECISIONS)}; each runs only "
               "where the backend and device support it and skips elsewhere.", _join(DEFAULT_PRECISIONS),
               parse_precisions, default=DEFAULT_PRECISIONS),
        Option("--perf-sources", "LIST", "Frames of the end-to-end and pipelined tests: comma-separated "
               "<codec>[+nvdec][+noencode] (codec mp4v or h264 for the synthetic video; +nvdec decodes on the GPU's "
               "hardware decoder; +noencode writes no video). Every case runs on mp4v; the others run for the key "
               "cases (perf/measure/sources.py).", DEFAULT_SOURCES, parse_sources,
               default=parse_sources(DEFAULT_SOURCES)),
        Option("--perf-allow-machine-mismatch", None, "With --benchmark-compare, accept a saved run recorded on "
               "another GPU, driver, CUDA version or device (warn instead of failing)."),
        Option("--perf-allow-model-mismatch", None, "With --perf-compare or --benchmark-compare, accept a saved run "
               "of another model or video (warn instead of failing)."),
        # -- the model and the video (perf/subject.py); each also an ini setting -----------------------------------
        Option("--perf-cfg", "PATH", "Darknet .cfg of the model under test (input size and classes are read from it).",
               "the shipped yolov4-tiny.cfg", ini=True),
        Option("--perf-weights", "PATH", "Darknet .weights of --perf-cfg.",
               "the shipped weights with the shipped cfg, else seeded random weights", ini=True),
        Option("--perf-names", "PATH", "Class names, one per line.", "classes.names beside the cfg or ONNX file",
               ini=True),
        Option("--perf-onnx", "PATH", "ONNX file ([B,3,H,W] -> [B,N,4+C]) run by ONNX Runtime and TensorRT instead "
               "of the cfg's export; without --perf-cfg it is the model itself (the torch backends then skip).", "none",
               ini=True),
        Option("--perf-engine", "PATH", "Prebuilt TensorRT engine of the model, loaded instead of built (checked "
               "against the model's input and classes; skipped where TensorRT is missing).",
               "none (engines are built from the ONNX model)", ini=True),
        Option("--perf-engine-precision", "VALUE", "Precision --perf-engine was built as: fp32, fp16 or int8.", "fp16",
               ini=True),
        Option("--perf-video", "PATH", "Video for the end-to-end and parity tests instead of the synthetic one.",
               "the synthetic video", ini=True),
        Option("--perf-ground-truth", "PATH", "COCO JSON ground truth of the video, for mAP and the "
               "reference-accuracy floor.", "<video stem>.json beside the video, if present", ini=True),
        Option("--perf-min-map", "VALUE", "mAP@0.5 the reference backend must reach on the ground truth.",
               "0.5 for the shipped model; for another model the mAP is reported, not checked", ini=True),
        # -- how it runs --------------------------------------------------------------------------------------------
        Option("--perf-cache-dir", "DIR", "Directory for generated videos, exported models and engines (relative to "
               "the current directory), shared with the detector CLI.", "$DETECTOR_CACHE, else ~/.cache/detector"),
        Option("--perf-frames", "N", "Frames of the synthetic video for the end-to-end and parity tests.",
               f"{DEFAULT_FRAMES['cuda']} on CUDA, {DEFAULT_FRAMES['cpu']} on CPU", parse_positive_int),
        Option("--perf-streams", "COUNTS", "Comma-separated stream counts for the multi-stream test (one inference at "
               "batch N per tick).", f"{_join(DEFAULT_STREAMS['cuda'])} on CUDA, "
               f"{_join(DEFAULT_STREAMS['cpu'])} on CPU", parse_batch_sizes),
        Option("--perf-skip-interval", "LIST", "Comma-separated skip intervals N of the skip-interval test: frames "
               "skipped between inferences, as DeepStream's interval (N=0 infers every frame, N=1 frames 0,2,4,..., "
               "N=2 frames 0,3,6,..., N=4 frames 0,5,10,...; a tracker moves the boxes over the skipped frames).",
               _join(DEFAULT_SKIP_INTERVALS), parse_skip_intervals, default=DEFAULT_SKIP_INTERVALS),
        Option("--perf-nsys", None, "Profile the nsys-marked tests under Nsight Systems."),
        Option("--perf-nsys-path", "PATH", "The nsys executable.", "$NSYS, else nsys on PATH or in NVIDIA's install "
               "folders", default="nsys", aliases=("--nsys-path",)),
        Option("--perf-inject-delay", "MS", "Deliberately slow every runner by MS milliseconds per inference (GPU "
               "sleep on its stream), to check that --benchmark-compare-fail catches a regression.", "0 (off)",
               parse_delay_ms, default=0.0),
        Option("--perf-regression", "KIND:PERCENT", "Test only: inject a real code change that makes the suite "
               "slower, calibrated on this machine: layer:5% (an extra layer in the model, +5% per inference call at "
               "batch 32; its width kept in the model's cache folder), layer1:3% (the same at batch 1), "
               "preprocess:10% (+10% per frame end to end) or write:10% (the pipelined writer); runs made with it "
               "are marked injected.", "none", parse_regression),
        Option("--perf-controls", "NAMES", f"Noise sources controlled while measuring: all, none, or names from "
               f"{', '.join(CONTROL_NAMES)} (a leading - leaves one out, e.g. -pin). See perf/measure/controls.py.",
               "all", parse_controls, default=Controls()),
        Option("--perf-clock-lead-in", "MS", "GPU busy-wait enqueued ahead of each timed call's start event, so that "
               "the host's launch latency stays out of the CUDA-event reading; 0 = off (time from an idle GPU).",
               f"{DEFAULT_LEAD_IN_MS:g}ms", parse_delay_ms, default=DEFAULT_LEAD_IN_MS),
        Option("--perf-profile", "NAME", f"Profiler around the benchmarks: {' or '.join(PROFILERS)}.", "none",
               parse_profiler, default="none"),
        Option("--perf-kernels", "CALLS", "After each inference benchmark, profile CALLS more calls with "
               "torch.profiler and keep its top kernels with the run: what --perf-compare shows under a slower "
               f"benchmark (perf/profile/kernels.py); 0 = off, at most {MAX_KERNEL_CALLS}. Off inside nsys and with "
               "--perf-profile.",
               str(KERNEL_CALLS), parse_kernel_calls, default=KERNEL_CALLS),
        Option(NSYS_CHILD_FLAG, None, None),  # the run inside nsys (perf/roles/nsys.py)
        # -- the regression gate (perf/roles/gate.py) ----------------------------------------------------------------
        Option("--perf-compare", "NUM|ID", "Judge this run against main's history on this runner (the last "
               "--perf-history comparable saved runs; up to run NUM / ID when given): one line per benchmark with the "
               "ratio to the history, its interval, the smallest slowdown it could detect and the verdict slower / "
               "faster / no change / inconclusive / missing; suspects are confirmed in fresh processes "
               "(--perf-confirm) and a confirmed slower fails the run.", "off", const=True),
        Option("--perf-history", "N", "How many of the latest comparable saved runs (same machine, model and video, no "
               "test-only options) make the history --perf-compare judges against.", str(DEFAULT_LAST),
               parse_positive_int, default=DEFAULT_LAST),
        Option("--perf-confirm", "PAIRS", "With --perf-compare, confirm each suspect in at most PAIRS pairs of fresh "
               "processes of the base (a git worktree of the history's latest commit) and this tree, alternating, "
               "only the suspects' tests, 2 pairs per look; 0 = no confirmation (then the first pass alone spends "
               "the error budget).", str(DEFAULT_PAIRS), parse_pairs, default=DEFAULT_PAIRS),
        Option("--perf-confirm-budget", "SECONDS", "With --perf-compare, a look of the confirmation (2 pairs) that "
               "would likely end after this many seconds of its processes runs only the pairs that would not and is "
               "the last (none: the last look run is); fewer than 3 pairs confirm nothing.",
               f"{DEFAULT_BUDGET_S:.0f}", parse_seconds, default=DEFAULT_BUDGET_S),
        Option("--perf-min-effect", "FRACTION", "Smallest change --perf-compare calls slower or faster (the floor: "
               "the change must also be significant).", f"{DEFAULT_MIN_EFFECT:.0%}", parse_fraction,
               default=DEFAULT_MIN_EFFECT),
        Option("--perf-max-cv", "FRACTION", "Robust coefficient of variation above which a benchmark is unstable.",
               f"{DEFAULT_MAX_CV:.0%}", parse_fraction, default=DEFAULT_MAX_CV),
        Option("--perf-max-drift", "FRACTION", "Spread of the medians of 4 consecutive windows above which (and "
               "above their noise) a benchmark drifts, so is unstable.", f"{DEFAULT_MAX_DRIFT:.0%}", parse_fraction,
               default=DEFAULT_MAX_DRIFT),
        Option("--perf-max-remeasure", "N", "Extra measurements of an unstable benchmark before it is reported "
               f"unstable; at most {MAX_REMEASURE}.", str(DEFAULT_MAX_REMEASURE), parse_remeasure,
               default=DEFAULT_MAX_REMEASURE),
        Option("--perf-fail-inconclusive", None, "With --perf-compare, fail the run on inconclusive benchmarks too "
               "(suspects the confirmation could neither confirm nor clear, their estimate still at or above the "
               "floor; else they are reported and counted)."),
        Option("--perf-noise-profile", "PATH|none", "The noise profile that seeds a history of fewer than 3 runs for "
               "--perf-compare: a file written by --perf-noise, or none.",
               "this runner's profile in the benchmark storage (<storage>/noise/), if any"),
        Option("--perf-selftest", None, "Run only the gate's self-checks: clock truth, and detection / false-alarm "
               "rates of injected slowdowns."),
        Option("--perf-selftest-trials", "N", f"Trials per slowdown level of --perf-selftest, at most {MAX_TRIALS}.",
               "20 on a GPU, 30 on a CPU", parse_trials),
        Option("--perf-selftest-levels", "PERCENTS", "Slowdowns injected by --perf-selftest, in percent of the "
               "median.", "2,5,10 on a GPU, 2,5,10,20 on a CPU", parse_levels),
        # -- measurements across processes (perf/roles/processes.py) -----------------------------------------------
        Option("--perf-noise", "K", "Run the selected benchmarks in K fresh processes of this code and save this "
               "runner's noise profile (the spread of per-process medians), which --perf-compare uses.", "off",
               parse_processes),
        Option("--perf-selftest-processes", "K", "The gate's self-test across processes: K identical processes and "
               "K/5 (>= 2) per injected regression, then false verdicts, unstable and detection rates over every "
               "pair; saves the noise profile too.", "off", parse_processes),
        Option("--perf-selftest-regressions", "LIST", "Regressions --perf-selftest-processes injects (KIND:PERCENT, "
               "see --perf-regression).", DEFAULT_REGRESSIONS, parse_regressions),
        Option("--perf-processes-budget", "SECONDS", "Start no child process that would likely end after this many "
               "seconds; the plan can be resumed with the same --perf-runs-dir.", "no limit", parse_seconds),
        Option("--perf-runs-dir", "DIR", "Folder for the child processes' runs and logs; a plan already there is "
               "resumed.", "a new folder under <reports>/processes/"),
        # -- the history store (perf/store/) ----------------------------------------------------------------------
        Option("--perf-store", "WHERE", "History store every saved run (--benchmark-autosave / --benchmark-save) also "
               "goes into, with its verdicts and noise profile: a path (an SQLite file), sqlite:///path, "
               "postgresql://user@host/db (one store for a fleet of runners, with the postgres extra: pip install -e "
               "'.[postgres]'; the PERF_STORE environment variable keeps a password off the command line), or none. "
               "A green run the store cannot take exits with status 6, the run saved.",
               "$PERF_STORE, else history.sqlite in the benchmark storage", parse_store, ini=True),
        # -- reports (perf/roles/report.py) --------------------------------------------------------------------------
        Option("--perf-reports-dir", "DIR", "Folder for the suite's reports (tables, detected videos, profiles).",
               "reports in the rootdir"),
        Option("--perf-html", "DIR", "At the end of the session write DIR/index.html (figures) and DIR/summary.md "
               "from the saved runs and the reports (see python -m perf.report_cli; the report extra: pip install -e "
               "'.[report]').", "off"),
    )  # fmt: skip


def start_up_errors(config: pytest.Config) -> list[str]:
    """What is wrong with the option values, one line each. With none, pytest-benchmark's default storage
    (``./.benchmarks``) becomes ``<rootdir>/.benchmarks``: every file of the suite lives under the rootdir."""
    errors = bad_values(config.option) + benchmark_option_errors(config.getoption)
    if not errors and getattr(config.option, "benchmark_storage", None) == "file://./.benchmarks":
        config.option.benchmark_storage = f"file://{config.rootpath / '.benchmarks'}"
    return errors


def add_options(parser: pytest.Parser) -> None:
    """Register `all_options` in the ``perf`` group of ``parser``, and the ini settings of those that have one."""
    group = parser.getgroup("perf", "perf suite (perf/)")
    for option in all_options():
        group.addoption(option.flag, *option.aliases, **option.argparse_kwargs())
        if option.ini:
            parser.addini(option.dest, f"{option.help} Default: {option.shown}.", default=None)
