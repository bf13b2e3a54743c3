"""The perf plugin's options, parsers, markers and fixtures, exercised through real pytest runs (pytester)."""

from __future__ import annotations

import argparse
import re

import pytest

from perf.options import (
    FALLBACK_BACKENDS,
    backend_names,
    parse_backends,
    parse_batch_sizes,
    parse_device,
    parse_positive_int,
    parse_precisions,
    resolve_device,
)
from perf.machine import machine_fingerprint
from perf.plugin import MARKERS

pytest_plugins = ["pytester"]

OPTIONS = (
    "--perf-backends", "--perf-device", "--perf-video", "--perf-batch-sizes", "--perf-precisions",
    "--perf-allow-machine-mismatch", "--perf-cache-dir", "--perf-frames", "--perf-nsys", "--perf-nsys-path",
    "--nsys-path", "--perf-profile", "--perf-inject-delay", "--perf-streams", "--perf-clock-lead-in",
    "--perf-regression", "--perf-controls", "--perf-allow-model-mismatch", "--perf-cfg", "--perf-weights",
    "--perf-names", "--perf-onnx", "--perf-engine", "--perf-engine-precision", "--perf-ground-truth", "--perf-min-map",
)  # fmt: skip


@pytest.fixture(autouse=True, scope="module")
def _lazy_imports_done_outside_pytester() -> None:
    """Import what the plugin imports lazily (torch, pynvml) before pytester's in-process runs: pytester drops
    the modules first imported during a run, and torch cannot be imported twice in one process."""
    machine_fingerprint()


@pytest.fixture
def perf_pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory whose conftest loads the perf plugin, as the repository's root conftest does."""
    pytester.makeconftest('pytest_plugins = ["perf.plugin"]')
    return pytester


@pytest.mark.parametrize(
    ("value", "expected"), [("1,8,32", (1, 8, 32)), (" 4 ", (4,)), ("2,2,16", (2, 16)), ("8,", (8,))]
)
def test_batch_sizes_parse_to_unique_positive_ints(value: str, expected: tuple[int, ...]) -> None:
    assert parse_batch_sizes(value) == expected


@pytest.mark.parametrize("value", ["0", "-1", "1,0", "x", "1.5", "", ",", "1,eight"])
def test_batch_sizes_reject_non_positive_or_non_integer(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"Could not parse value: {value!r}.")):
        parse_batch_sizes(value)


def test_backends_parse_registered_names_in_given_order() -> None:
    assert parse_backends("onnxruntime, torch,torch") == ("onnxruntime", "torch")


@pytest.mark.parametrize("value", ["trt", "", "torch,pytorch"])
def test_backends_reject_unknown_names_listing_known_ones(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError) as info:
        parse_backends(value)
    assert str(info.value).startswith(f"Could not parse value: {value!r}.")
    assert ", ".join(backend_names()) in str(info.value)


def test_backend_names_include_the_fallback_backends() -> None:
    assert {"torch", "onnxruntime"} <= set(backend_names())
    assert set(backend_names()) <= set(FALLBACK_BACKENDS) | set(backend_names())


@pytest.mark.parametrize(
    ("value", "expected"),
    [("auto", "auto"), ("cpu", "cpu"), ("cuda", "cuda"), ("cuda:1", "cuda:1"), (" CUDA:0 ", "cuda:0")],
)
def test_device_accepts_auto_cpu_cuda_and_indexed_cuda(value: str, expected: str) -> None:
    assert parse_device(value) == expected


@pytest.mark.parametrize("value", ["gpu", "cuda:", "cuda:-1", "cuda:x", "", "cpu:0", "mps"])
def test_device_rejects_other_values(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"Could not parse value: {value!r}.")):
        parse_device(value)


@pytest.mark.parametrize(("value", "expected"), [("fp32,fp16", ("fp32", "fp16")), ("INT8", ("int8",))])
def test_precisions_parse_known_names(value: str, expected: tuple[str, ...]) -> None:
    assert parse_precisions(value) == expected


@pytest.mark.parametrize("value", ["fp64", "", "fp32,bf16"])
def test_precisions_reject_unknown_names(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="Could not parse value: .*fp32, fp16, int8"):
        parse_precisions(value)


@pytest.mark.parametrize("value", ["0", "-3", "2.5", "many"])
def test_frames_reject_non_positive_integers(value: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match=re.escape(f"Could not parse value: {value!r}.")):
        parse_positive_int(value)


@pytest.mark.parametrize(
    ("requested", "count", "expected"),
    [
        ("auto", 0, ("cpu", None)),
        ("auto", 2, ("cuda", None)),
        ("cpu", 2, ("cpu", None)),
        ("cuda", 1, ("cuda", None)),
        ("cuda", 0, ("cuda", "no CUDA device")),
        ("cuda:1", 2, ("cuda:1", None)),
        ("cuda:2", 2, ("cuda:2", "no CUDA device 2 (found 2)")),
    ],
)
def test_resolve_device_skips_rather_than_fails_without_cuda(
    requested: str, count: int, expected: tuple[str, str | None]
) -> None:
    assert resolve_device(requested, count) == expected


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


@pytest.mark.parametrize(
    ("option", "value"),
    [("--perf-batch-sizes", "0"), ("--perf-device", "gpu"), ("--perf-backends", "trt"), ("--perf-frames", "0"),
     ("--perf-streams", "1,x")],
)
def test_bad_option_value_is_a_usage_error_naming_the_option(
    perf_pytester: pytest.Pytester, option: str, value: str
) -> None:
    result = perf_pytester.runpytest(f"{option}={value}")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*argument {option}*: Could not parse value: '{value}'.*"])


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


def test_cache_dir_defaults_to_perf_cache_in_rootdir(perf_pytester: pytest.Pytester) -> None:
    perf_pytester.makepyfile(
        "def test_dir(perf_cache_dir, pytestconfig, perf_frames):\n"
        "    assert perf_cache_dir == pytestconfig.rootpath / '.perf-cache'\n"
        "    assert perf_frames == 7\n"
    )
    perf_pytester.runpytest("--perf-device=cpu", "--perf-frames=7").assert_outcomes(passed=1)


def test_requested_cuda_without_a_device_skips_tests_using_perf_device(perf_pytester: pytest.Pytester) -> None:
    pytest.importorskip("torch")
    from perf.machine import cuda_device_count  # noqa: PLC0415

    if cuda_device_count() > 0:
        pytest.skip("this machine has a CUDA device")
    perf_pytester.makepyfile("def test_gpu(perf_device):\n    pass\n")
    result = perf_pytester.runpytest("--perf-device=cuda", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*no CUDA device*"])
