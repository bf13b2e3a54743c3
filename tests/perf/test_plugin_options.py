"""The perf plugin's options, parsers, markers and fixtures, exercised through real pytest runs (pytester)."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from perf import options, session
from perf.measure.machine import cuda_device_count
from perf.plugin import MARKERS
from perf.session import resolve_device

pytest_plugins = ["pytester"]
pytestmark = pytest.mark.usefixtures("lazy_imports_done_outside_pytester")

#: Every option of the suite: perf.plugin registers them all (the session reads them once).
OPTIONS = (
    "--perf-backends", "--perf-device", "--perf-video", "--perf-batch-sizes", "--perf-precisions",
    "--perf-allow-machine-mismatch", "--perf-cache-dir", "--perf-frames", "--perf-nsys", "--perf-nsys-path",
    "--nsys-path", "--perf-profile", "--perf-inject-delay", "--perf-streams", "--perf-clock-lead-in",
    "--perf-regression", "--perf-controls", "--perf-allow-model-mismatch", "--perf-cfg", "--perf-weights",
    "--perf-names", "--perf-onnx", "--perf-engine", "--perf-engine-precision", "--perf-ground-truth", "--perf-min-map",
    "--perf-compare", "--perf-min-effect", "--perf-max-cv", "--perf-max-drift", "--perf-max-remeasure",
    "--perf-fail-inconclusive", "--perf-history", "--perf-confirm", "--perf-confirm-budget", "--perf-noise-profile",
    "--perf-selftest", "--perf-selftest-trials",
    "--perf-selftest-levels", "--perf-noise", "--perf-selftest-processes", "--perf-selftest-regressions",
    "--perf-processes-budget", "--perf-runs-dir", "--perf-reports-dir", "--perf-html", "--perf-kernels",
    "--perf-store", "--perf-skip-interval", "--perf-sources",
)  # fmt: skip


#: A bad value of every perf option parsed by a ``type=`` and the one line it must give (after "argument <option>:
#: Could not parse value: '<value>'."). The options' own parsers are unit-tested below.
BAD_VALUES = (
    ("--perf-backends", "trt", "Expected comma-separated backends from:"),
    ("--perf-device", "gpu", "Expected auto, cpu, cuda or cuda:N."),
    ("--perf-batch-sizes", "0", "Expected comma-separated positive integers"),
    ("--perf-precisions", "fp8", "Expected comma-separated precisions from: fp32, fp16, int8."),
    ("--perf-frames", "0", "Expected a positive integer."),
    ("--perf-frames", "\u00b2", "Expected a positive integer."),  # isdigit() but not int()
    ("--perf-streams", "1,x", "Expected comma-separated positive integers"),
    ("--perf-skip-interval", "-1", "Expected comma-separated integers >= 0 (frames skipped between inferences)"),
    ("--perf-sources", "h264+gpu", "Expected comma-separated sources <codec>[+nvdec][+noencode]"),
    ("--perf-inject-delay", "-1", "Expected a finite number of milliseconds >= 0"),
    ("--perf-clock-lead-in", "-0.5", "Expected a finite number of milliseconds >= 0"),
    ("--perf-clock-lead-in", "inf", "Expected a finite number of milliseconds >= 0"),
    ("--perf-regression", "layer", "Expected KIND:PERCENT"),
    ("--perf-controls", "pins", "Expected all, none, or names from"),
    ("--perf-profile", "perf", "Expected one of: none, torch."),
    ("--perf-min-effect", "lots", "Expected a fraction >= 0 and < 1"),
    ("--perf-max-cv", "150%", "Expected a fraction >= 0 and < 1"),
    ("--perf-max-drift", "-0.1", "Expected a fraction >= 0 and < 1"),
    ("--perf-max-remeasure", "-1", "Expected a number of measurements from 0 to 20."),
    ("--perf-max-remeasure", "1000000000000", "Expected a number of measurements from 0 to 20."),  # ran for days
    ("--perf-selftest-trials", "0", "Expected a number of trials from 1 to 1000."),
    ("--perf-selftest-trials", "1000000000000", "Expected a number of trials from 1 to 1000."),  # ran for days
    ("--perf-selftest-levels", "0", "Expected percentages > 0"),
    ("--perf-noise", "1", "Expected a number of processes from 2 to 1000."),
    ("--perf-selftest-processes", "x", "Expected a number of processes from 2 to 1000."),
    ("--perf-selftest-regressions", "layer:0%", "Expected KIND:PERCENT"),
    ("--perf-processes-budget", "0", "Expected seconds > 0"),
    ("--perf-kernels", "-1", "Expected a number of calls from 0 to 1000."),
    ("--perf-kernels", "1000000000000", "Expected a number of calls from 0 to 1000."),  # out of memory before
    ("--perf-history", "0", "Expected a positive integer."),
    ("--perf-confirm", "some", "Expected a number of pairs from 0 to 1000."),
    ("--perf-confirm-budget", "0", "Expected seconds > 0"),
    ("--perf-store", "mysql://db", "Expected a path, sqlite:///path, postgresql://... or none."),
    ("--perf-store", "sqlite:///", "Expected a store that keeps its runs: a path or sqlite:///path naming a file"),
    ("--benchmark-max-time", "-1", "Expected seconds > 0"),
    ("--benchmark-max-time", "0", "Expected seconds > 0"),
    ("--benchmark-min-time", "-0.001", "Expected seconds >= 0"),
    ("--benchmark-calibration-precision", "0", "Expected an integer >= 1."),
    ("--benchmark-warmup-iterations", "-1", "Expected an integer >= 0."),
)  # fmt: skip
#: Options that take a value without a parser of their own (paths, names, checked where they are used).
UNPARSED = (
    "--perf-cache-dir", "--perf-nsys-path", "--nsys-path", "--perf-compare", "--perf-noise-profile", "--perf-runs-dir",
    "--perf-reports-dir", "--perf-html", "--perf-cfg", "--perf-weights", "--perf-names", "--perf-onnx",
    "--perf-engine", "--perf-engine-precision", "--perf-video", "--perf-ground-truth", "--perf-min-map",
)  # fmt: skip
#: The repository's root conftest (every plugin of the suite), as a pytester conftest.
SUITE_PLUGINS = next(block for block in (Path(__file__).parents[2] / "conftest.py").read_text().split("\n\n")
                     if block.startswith("pytest_plugins = ["))


@pytest.fixture
def suite_pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory whose conftest loads every plugin of the suite that adds options."""
    pytester.makeconftest(SUITE_PLUGINS)
    return pytester


def _usage_lines(result: pytest.RunResult) -> list[str]:
    return [line for line in result.stderr.lines if line.strip()]


@pytest.mark.parametrize(
    ("value", "expected"), [("1,8,32", (1, 8, 32)), (" 4 ", (4,)), ("2,2,16", (2, 16)), ("8,", (8,))]
)
def test_batch_sizes_parse_to_unique_positive_ints(value: str, expected: tuple[int, ...]) -> None:
    assert options.parse_batch_sizes(value) == expected


@pytest.mark.parametrize("value", ["0", "-1", "1,0", "x", "1.5", "", ",", "1,eight"])
def test_batch_sizes_reject_non_positive_or_non_integer(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"Could not parse value: {value!r}.")):
        options.parse_batch_sizes(value)


@pytest.mark.parametrize("value", ["2147483648", "1,99999999999999999999"])
def test_batch_sizes_past_an_int32_axis_are_refused_at_start_up(value: str) -> None:
    expected = f"Could not parse value: {value!r}. Expected comma-separated positive integers up to 2147483647"
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(expected)):
        options.parse_batch_sizes(value)
    assert options.parse_batch_sizes("1,2147483647") == (1, 2147483647)


def test_backends_parse_registered_names_in_given_order() -> None:
    assert options.parse_backends("onnxruntime, torch,torch") == ("onnxruntime", "torch")


@pytest.mark.parametrize("value", ["trt", "", "torch,pytorch"])
def test_backends_reject_unknown_names_listing_known_ones(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as info:
        options.parse_backends(value)
    assert str(info.value).startswith(f"Could not parse value: {value!r}.")
    assert ", ".join(session.backend_names()) in str(info.value)


@pytest.mark.parametrize(
    ("value", "expected"),
    [("auto", "auto"), ("cpu", "cpu"), ("cuda", "cuda"), ("cuda:1", "cuda:1"), (" CUDA:0 ", "cuda:0")],
)
def test_device_accepts_auto_cpu_cuda_and_indexed_cuda(value: str, expected: str) -> None:
    assert options.parse_device(value) == expected


@pytest.mark.parametrize("value", ["gpu", "cuda:", "cuda:-1", "cuda:x", "", "cpu:0", "mps"])
def test_device_rejects_other_values(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"Could not parse value: {value!r}.")):
        options.parse_device(value)


@pytest.mark.parametrize(("value", "expected"), [("fp32,fp16", ("fp32", "fp16")), ("INT8", ("int8",))])
def test_precisions_parse_known_names(value: str, expected: tuple[str, ...]) -> None:
    assert options.parse_precisions(value) == expected


@pytest.mark.parametrize("value", ["fp64", "", "fp32,bf16"])
def test_precisions_reject_unknown_names(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="Could not parse value: .*fp32, fp16, int8"):
        options.parse_precisions(value)


@pytest.mark.parametrize("value", ["0", "-3", "2.5", "many", "\u00b2", "+4"])
def test_frames_reject_non_positive_integers(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"Could not parse value: {value!r}.")):
        options.parse_positive_int(value)


@pytest.mark.parametrize(("value", "expected"), [("0,1,2,4", (0, 1, 2, 4)), (" 4, 0 ", (4, 0)), ("2,2,0,", (2, 0))])
def test_skip_intervals_parse_to_unique_integers_of_zero_or_more(value: str, expected: tuple[int, ...]) -> None:
    assert options.parse_skip_intervals(value) == expected
    assert session.DEFAULT_SKIP_INTERVALS == (0, 1, 2, 4)


@pytest.mark.parametrize("value", ["-1", "x", "1.5", "", ",", "0,two", "\u00b2"])
def test_skip_intervals_reject_negative_or_non_integer_values(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"Could not parse value: {value!r}. Expected "
                                                                   "comma-separated integers >= 0")):  # fmt: skip
        options.parse_skip_intervals(value)


def test_skip_intervals_reach_the_session_options(perf_pytester: pytest.Pytester) -> None:
    perf_pytester.makepyfile(
        "def test_values(perf_options):\n"
        "    assert perf_options.skip_intervals == (0, 3)\n"
    )
    perf_pytester.runpytest("--perf-device=cpu", "--perf-skip-interval=0,3").assert_outcomes(passed=1)


@pytest.mark.parametrize(("value", "expected"), [("none", "none"), (" Torch ", "torch")])
def test_profiler_parses_known_names(value: str, expected: str) -> None:
    assert options.parse_profiler(value) == expected


@pytest.mark.parametrize("value", ["", "nsys", "torch,none"])
def test_profiler_rejects_other_names_listing_known_ones(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"Could not parse value: {value!r}. Expected "
                                                                   "one of: none, torch.")):  # fmt: skip
        options.parse_profiler(value)


@pytest.mark.parametrize(("text", "ms"), [("0.3", 0.3), ("0.5ms", 0.5), (" 2MS ", 2.0), ("0", 0.0)])
def test_delay_parses_milliseconds(text: str, ms: float) -> None:
    assert options.parse_delay_ms(text) == ms


@pytest.mark.parametrize("text", ["-1", "fast", "", "nan"])
def test_delay_rejects_bad_values(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"Could not parse value: {text!r}.")):
        options.parse_delay_ms(text)


@pytest.mark.parametrize("text", ["1e13", "1e308ms"])
def test_a_delay_past_a_gpu_sleeps_int64_cycles_is_refused(text: str) -> None:
    """--perf-inject-delay / --perf-clock-lead-in: torch.cuda._sleep's cycles overflowed int64 (1e13 ms on an H200:
    'Overflow when unpacking long long'; 1e308 ms: 'cannot convert float infinity to integer') in every test."""
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape("at most 1e12 (a GPU sleep counts int64 cycles)")):
        options.parse_delay_ms(text)
    assert options.parse_delay_ms("1e12") == 1e12


@pytest.mark.parametrize(("text", "value"), [("2%", 0.02), ("0.05", 0.05), (" 10 % ", 0.1), ("0", 0.0)])
def test_fractions_parse_as_percent_or_plain(text: str, value: float) -> None:
    assert options.parse_fraction(text.replace(" ", "")) == pytest.approx(value)


@pytest.mark.parametrize("text", ["", "x", "-1%", "100%", "1.5", "nan"])
def test_fractions_reject_values_outside_zero_to_one(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"Could not parse value: {text!r}.")):
        options.parse_fraction(text)


def test_counts_and_levels_parse_or_name_the_bad_value() -> None:
    assert options.parse_remeasure("0") == 0 and options.parse_levels("10,2%,5,5") == (0.02, 0.05, 0.1)
    for parser, text in ((options.parse_remeasure, "-1"), (options.parse_levels, "0"), (options.parse_levels, "a,b")):
        with pytest.raises(argparse.ArgumentTypeError, match=f"Could not parse value: '{text}'"):
            parser(text)


@pytest.mark.parametrize("flag", ["--perf-max-remeasure", "--perf-selftest-trials"])
def test_remeasures_and_selftest_trials_past_their_bound_are_refused_not_run_for_days(flag: str) -> None:
    (option,) = [option for option in options.all_options() if option.flag == flag]
    assert option.parse is not None and option.parse("2") == 2
    with pytest.raises(argparse.ArgumentTypeError, match=r"'1000000000000'. Expected a number of \w+ from [01] to "
                                                         r"(20|1000)\.$"):
        option.parse("1000000000000")


@pytest.mark.parametrize(
    ("requested", "count", "expected"),
    [
        ("auto", 0, ("cpu", None)),
        ("auto", 2, ("cuda", None)),
        ("cpu", 2, ("cpu", None)),
        ("cpu", 0, ("cpu", None)),
        ("cuda", 1, ("cuda", None)),
        ("cuda", 0, ("cuda", "no CUDA device (found 0)")),
        ("cuda:0", 0, ("cuda:0", "no CUDA device 0 (found 0)")),
        ("cuda:7", 0, ("cuda:7", "no CUDA device 7 (found 0)")),
        ("cuda:1", 2, ("cuda:1", None)),
        ("cuda:2", 2, ("cuda:2", "no CUDA device 2 (found 2)")),
    ],
)
def test_resolve_device_names_a_missing_cuda_device_and_auto_falls_back_to_cpu(
    requested: str, count: int, expected: tuple[str, str | None]
) -> None:
    assert resolve_device(requested, count) == expected


MAX_TIME = "Expected seconds > 0, at most 1e9 (32 years), e.g. 1.0."


@pytest.mark.parametrize(
    ("values", "errors"),
    [
        ({"benchmark_max_time": "1.0", "benchmark_min_time": "0.000005", "benchmark_min_rounds": 5,
          "benchmark_calibration_precision": 10, "benchmark_warmup_iterations": 0}, []),
        ({}, []),  # pytest-benchmark not loaded
        ({"benchmark_max_time": "-1"},
         [f"argument --benchmark-max-time: Could not parse value: '-1'. {MAX_TIME}"]),
        ({"benchmark_max_time": "0", "benchmark_min_time": "-1E-3"},
         [f"argument --benchmark-max-time: Could not parse value: '0'. {MAX_TIME}",
          "argument --benchmark-min-time: Could not parse value: '-1E-3'. Expected seconds >= 0, e.g. 0.000005."]),
        ({"benchmark_max_time": "Infinity"},
         [f"argument --benchmark-max-time: Could not parse value: 'Infinity'. {MAX_TIME}"]),
        ({"benchmark_max_time": "NaN"},
         [f"argument --benchmark-max-time: Could not parse value: 'NaN'. {MAX_TIME}"]),
        ({"benchmark_max_time": "1e308"},  # once every benchmark's OverflowError: rounds = max-time / a round's time
         [f"argument --benchmark-max-time: Could not parse value: '1e308'. {MAX_TIME}"]),
        ({"benchmark_max_time": "1e9"}, []),
        ({"benchmark_min_rounds": 0},
         ["argument --benchmark-min-rounds: Could not parse value: '0'. Expected an integer >= 1."]),
        ({"benchmark_calibration_precision": 0, "benchmark_warmup_iterations": -1},
         ["argument --benchmark-calibration-precision: Could not parse value: '0'. Expected an integer >= 1.",
          "argument --benchmark-warmup-iterations: Could not parse value: '-1'. Expected an integer >= 0."]),
    ],
)  # fmt: skip
def test_benchmark_options_that_cannot_work_are_named_one_line_each(
    values: dict[str, object], errors: list[str]
) -> None:
    assert options.benchmark_option_errors(lambda dest, default=None: values.get(dest, default)) == errors


def test_every_option_is_listed_with_help_ending_in_its_default(perf_pytester: pytest.Pytester) -> None:
    result = perf_pytester.runpytest("--help")
    assert result.ret == 0
    text = result.stdout.str()
    section = text[text.index("perf suite (perf/):") :].split("\n\n")[0]
    raw_entries = re.split(r"\n(?=  -)", section)[1:]
    names = {name for entry in raw_entries for name in re.findall(r"--[\w-]+", entry.strip().split("  ")[0])}
    assert names == set(OPTIONS)
    for entry in (" ".join(raw.split()) for raw in raw_entries):
        assert "Default: " in entry and entry.endswith("."), entry
        assert ". " not in entry.rsplit("Default: ", 1)[1], f"the default is not the last sentence: {entry}"


def test_help_shows_percent_signs_once_and_the_model_settings_as_ini_values(perf_pytester: pytest.Pytester) -> None:
    """Help texts are written with plain % signs (escaped for argparse in one place), and each model or video
    option, and the history store, is also an ini setting of the same name."""
    text = perf_pytester.runpytest("--help").stdout.str()
    section = " ".join(text[text.index("perf suite (perf/):") :].split("\n\n")[0].split())
    assert "faster / no change / inconclusive / missing" in section and "Default: layer:5%,preprocess:5%." in section
    assert "%%" not in section
    ini = set(re.findall(r"^  (perf_\w+) \(string\)", text, re.MULTILINE))
    assert ini == {f"perf_{name}" for name in ("cfg", "weights", "names", "onnx", "engine", "engine_precision", "video",
                                              "ground_truth", "min_map", "store")}  # fmt: skip


def test_missing_video_is_a_usage_error_naming_the_file(perf_pytester: pytest.Pytester) -> None:
    result = perf_pytester.runpytest("--perf-video=clips/missing.mp4")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*--perf-video: cannot open '{perf_pytester.path}/clips/missing.mp4': no such file*"])


def test_nsys_with_torch_profiler_is_a_usage_error(perf_pytester: pytest.Pytester) -> None:
    result = perf_pytester.runpytest("--perf-nsys", "--perf-profile=torch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--perf-nsys and --perf-profile=torch cannot be combined*"])


def test_markers_are_registered_with_descriptions(perf_pytester: pytest.Pytester) -> None:
    result = perf_pytester.runpytest("--markers")
    result.stdout.fnmatch_lines_random([f"@pytest.mark.{name}: {text}" for name, text in MARKERS.items()])
    assert set(MARKERS) == {"gpu", "trt", "nsys", "slow", "e2e", "parity", "ci"}


def test_strict_markers_accepts_perf_markers_and_rejects_unknown_ones(perf_pytester: pytest.Pytester) -> None:
    perf_pytester.makepyfile(
        test_known="import pytest\n\n@pytest.mark.slow\n@pytest.mark.parity\ndef test_a():\n    pass\n",
        test_unknown="import pytest\n\n@pytest.mark.gpuu\ndef test_b():\n    pass\n",
    )
    assert perf_pytester.runpytest("--strict-markers", "test_known.py").ret == 0
    result = perf_pytester.runpytest("--strict-markers", "test_unknown.py")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*'gpuu' not found in `markers` configuration option*"])


def test_gpu_marked_tests_skip_on_cpu(perf_pytester: pytest.Pytester) -> None:
    perf_pytester.makepyfile("import pytest\n\n@pytest.mark.gpu\ndef test_gpu():\n    pass\n")
    result = perf_pytester.runpytest("--perf-device=cpu", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*needs a CUDA device; --perf-device is cpu*"])


def test_fixtures_give_parsed_options_device_frames_and_cache_dir(perf_pytester: pytest.Pytester) -> None:
    perf_pytester.makepyfile(
        """
        from pathlib import Path

        def test_values(perf_options, perf_device, perf_frames, perf_cache_dir):
            assert perf_options.batch_sizes == (2, 4)
            assert perf_options.precisions == ("fp32",)
            assert perf_device == "cpu"
            assert perf_frames == 60
            assert perf_cache_dir == Path.cwd() / "cache" and perf_cache_dir.is_dir()
        """
    )
    result = perf_pytester.runpytest(
        "--perf-device=cpu", "--perf-batch-sizes=2,4", "--perf-precisions=fp32", "--perf-cache-dir=cache"
    )
    result.assert_outcomes(passed=1)


def test_batch_sizes_default_to_a_smoke_pass_on_the_cpu(perf_pytester: pytest.Pytester) -> None:
    """Batch 32 of the shipped model takes seconds a call on a CPU: the CPU pass measures 1 and 8; a GPU 1, 8, 32."""
    perf_pytester.makepyfile(
        "def test_sizes(pytestconfig, perf_device):\n"
        "    from perf.session import PERF_SESSION\n"
        "    options = pytestconfig.stash[PERF_SESSION].options\n"
        "    assert options.batch_sizes is None\n"
        "    assert options.batch_sizes_for('cpu') == (1, 8) and options.batch_sizes_for('cuda:0') == (1, 8, 32)\n"
    )
    result = perf_pytester.runpytest("--perf-device=cpu")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["perf: device=cpu * batch-sizes=1,8 *"])


def test_cache_dir_defaults_to_the_detector_clis_cache(perf_pytester: pytest.Pytester,
                                                       monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The suite and `detector` share one cache: $DETECTOR_CACHE (else ~/.cache/detector)."""
    monkeypatch.setenv("DETECTOR_CACHE", str(tmp_path / "shared"))
    perf_pytester.makepyfile(
        "import os\n"
        "from pathlib import Path\n"
        "from detector.spec import default_cache_dir\n"
        "def test_dir(perf_cache_dir, perf_frames):\n"
        "    assert perf_cache_dir == default_cache_dir() == Path(os.environ['DETECTOR_CACHE'])\n"
        "    assert perf_frames == 7\n"
    )
    perf_pytester.runpytest("--perf-device=cpu", "--perf-frames=7").assert_outcomes(passed=1)


def test_saved_runs_go_under_the_rootdir_when_pytest_starts_elsewhere(perf_pytester: pytest.Pytester) -> None:
    """Started from a subfolder, the saved run lands in <rootdir>/.benchmarks (beside the reports), and no
    .benchmarks appears in the current directory."""
    perf_pytester.makepyfile(test_saved="def test_one(benchmark):\n    benchmark(sum, [1, 2])\n")
    elsewhere = perf_pytester.path / "sub"
    elsewhere.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("PYTEST_XDIST_WORKER", raising=False)  # pytest-benchmark would switch itself off
        mp.chdir(elsewhere)
        result = perf_pytester.runpytest("--perf-device=cpu", "--benchmark-save=x", "--rootdir",
                                         str(perf_pytester.path), str(perf_pytester.path / "test_saved.py"))
    result.assert_outcomes(passed=1)
    assert list((perf_pytester.path / ".benchmarks").glob("*/0001_x.json"))
    assert not (elsewhere / ".benchmarks").exists()


def test_requested_cuda_device_that_does_not_exist_is_a_one_line_usage_error(perf_pytester: pytest.Pytester) -> None:
    """cuda:<count> never exists: a typo in CI fails at start-up instead of skipping everything and passing."""
    count = cuda_device_count()
    perf_pytester.makepyfile("def test_gpu(perf_device):\n    pass\n")
    result = perf_pytester.runpytest(f"--perf-device=cuda:{count}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert _usage_lines(result) == [f"ERROR: --perf-device cuda:{count}: no CUDA device {count} (found {count})"]
    result.stdout.no_fnmatch_line("*skipped*")


def test_requested_cuda_without_any_device_is_a_usage_error(perf_pytester: pytest.Pytester) -> None:
    if cuda_device_count() > 0:
        pytest.skip("this machine has a CUDA device")
    result = perf_pytester.runpytest("--perf-device=cuda")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert _usage_lines(result) == ["ERROR: --perf-device cuda: no CUDA device (found 0)"]


def test_auto_device_without_cuda_runs_on_cpu_and_skips_gpu_tests(perf_pytester: pytest.Pytester) -> None:
    if cuda_device_count() > 0:
        pytest.skip("this machine has a CUDA device")
    perf_pytester.makepyfile("import pytest\n\n@pytest.mark.gpu\ndef test_gpu():\n    pass\n\n"
                             "def test_cpu(perf_device):\n    assert perf_device == 'cpu'\n")  # fmt: skip
    result = perf_pytester.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(["*needs a CUDA device; --perf-device auto found no CUDA device*"])


@pytest.mark.parametrize(("option", "value", "expected"), BAD_VALUES)
def test_every_bad_option_value_is_one_usage_line(
    suite_pytester: pytest.Pytester, option: str, value: str, expected: str
) -> None:
    value = value.encode().decode("unicode_escape")
    result = suite_pytester.runpytest(f"{option}={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    lines = _usage_lines(result)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"ERROR: argument {option}: Could not parse value: {value!r}. {expected}"), lines


def test_every_option_with_a_value_has_a_bad_value_case(suite_pytester: pytest.Pytester) -> None:
    """A new option with a parser gets a row in BAD_VALUES (or, without a parser, a place in UNPARSED)."""
    result = suite_pytester.runpytest("--help")
    assert result.ret == 0
    text = result.stdout.str()
    section = text[text.index("perf suite (perf/):") :].split("\n\n")[0]
    taking_values = set(re.findall(r"(--perf-[\w-]+|--nsys-path)=", section))
    assert taking_values == {option for option, _, _ in BAD_VALUES if option.startswith("--perf")} | set(UNPARSED)
