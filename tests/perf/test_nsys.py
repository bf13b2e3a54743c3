"""Nsight Systems support: finding nsys, the profile/stats command lines, the child runner's verdicts and errors,
the ``nsys stats`` CSV parsers (on the CSVs in tests/data/nsys), GPU idle time and the summary.

No nsys runs here. Small shell scripts stand in for the nsys executable where the test is about *our* side of the
process boundary (discovery, error reporting, which files we pick up); the parsers only ever see CSV files.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from perf.profile.nsys import (
    NSYS_CHILD_FLAG,
    NSYS_NOT_FOUND_REASON,
    NsysError,
    csvs_in,
    export_command,
    export_sqlite,
    export_stats,
    find_nsys,
    nsys_not_found_reason,
    nsys_profile_command,
    report_dir_for,
    run_child_under_nsys,
    summarize_report,
)
from perf.profile.nsys_stats import (
    STATS_REPORTS,
    TIMING_EVENT_LABEL,
    GpuActivity,
    NsysParseError,
    busy_ns,
    copy_direction,
    gpu_idle_fraction,
    is_suite_activity,
    is_suite_kernel,
    is_timing_event_api,
    measured_span,
    parse_api_summary,
    parse_gpu_trace,
    parse_kernel_summary,
    parse_memcpy_summary,
    parse_nvtx_summary,
    parse_nvtx_trace,
    read_table,
    split_range_name,
    summarize,
    write_summary,
)
from perf.gate.processes import NSYS_DROPPED, forwarded_options

DATA = Path(__file__).parents[1] / "data" / "nsys"
REPO = Path(__file__).resolve().parents[2]


def _files(report: str) -> list[Path]:
    """Every CSV of ``report`` in tests/data/nsys: the hand-made ones and, once committed, the captured ones."""
    return sorted(DATA.glob(f"*_{report}.csv"))


def _bases() -> list[str]:
    """Capture names in tests/data/nsys that have a kernel summary (one per capture)."""
    return sorted(p.name.removesuffix("_cuda_gpu_kern_sum.csv") for p in _files("cuda_gpu_kern_sum")
                  if p.stat().st_size > 200)  # fmt: skip


def _script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body, encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


# --- discovery ------------------------------------------------------------------------------------------------------


@pytest.fixture
def install_tree(tmp_path: Path) -> dict[str, Path]:
    """A fake filesystem root with an nsys in every kind of place find_nsys looks, older and newer versions."""
    root = tmp_path / "root"
    made = {
        "explicit": _script(tmp_path / "mine" / "nsys", "exit 0\n"),
        "env": _script(tmp_path / "from_env" / "nsys", "exit 0\n"),
        "path": _script(tmp_path / "bin" / "nsys", "exit 0\n"),
        "systems_bin": _script(root / "opt/nvidia/nsight-systems/2025.3.1/bin/nsys", "exit 0\n"),
        "systems_bin_old": _script(root / "opt/nvidia/nsight-systems/2024.10.2/bin/nsys", "exit 0\n"),
        "systems_target": _script(root / "opt/nvidia/nsight-systems/2025.5.1/target-linux-x64/nsys", "exit 0\n"),
        "cuda": _script(root / "usr/local/cuda-12.8/bin/nsys", "exit 0\n"),
        "cuda_old": _script(root / "usr/local/cuda-12.4/bin/nsys", "exit 0\n"),
        "compute": _script(root / "opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys", "exit 0\n"),
    }
    made["root"] = root
    return made


def test_find_nsys_prefers_explicit_then_env_then_path_then_install_folders(install_tree: dict[str, Path]) -> None:
    t = install_tree
    env = {"NSYS": str(t["env"]), "PATH": str(t["path"].parent)}
    assert find_nsys(str(t["explicit"]), env, root=t["root"]) == t["explicit"]
    assert find_nsys(None, env, root=t["root"]) == t["env"]
    assert find_nsys(None, {"PATH": env["PATH"]}, root=t["root"]) == t["path"]
    assert find_nsys(None, {"PATH": ""}, root=t["root"]) == t["systems_bin"]
    t["systems_bin"].unlink()
    assert find_nsys(None, {"PATH": ""}, root=t["root"]) == t["systems_bin_old"]
    t["systems_bin_old"].unlink()
    assert find_nsys(None, {"PATH": ""}, root=t["root"]) == t["systems_target"]
    t["systems_target"].unlink()
    assert find_nsys(None, {"PATH": ""}, root=t["root"]) == t["cuda"]  # cuda-12.8 before cuda-12.4
    t["cuda"].unlink()
    t["cuda_old"].unlink()
    assert find_nsys(None, {"PATH": ""}, root=t["root"]) == t["compute"]
    t["compute"].unlink()
    assert find_nsys(None, {"PATH": ""}, root=t["root"]) is None


def test_find_nsys_accepts_a_folder_holding_nsys(install_tree: dict[str, Path]) -> None:
    folder = install_tree["compute"].parent
    assert find_nsys(str(folder), {"PATH": ""}, root=install_tree["root"]) == install_tree["compute"]


def test_default_name_nsys_falls_through_to_install_folders(install_tree: dict[str, Path]) -> None:
    # the plugin's --nsys-path default is the bare name "nsys": not on PATH, the install folders still count
    assert find_nsys("nsys", {"PATH": ""}, root=install_tree["root"]) == install_tree["systems_bin"]


def test_a_bad_explicit_path_is_not_replaced_by_another_nsys(install_tree: dict[str, Path], tmp_path: Path) -> None:
    missing = tmp_path / "nowhere" / "nsys"
    assert find_nsys(str(missing), {"PATH": str(install_tree["path"].parent)}, root=install_tree["root"]) is None
    assert repr(str(missing)) in nsys_not_found_reason(str(missing), {})


def test_non_executable_files_are_not_nsys(tmp_path: Path) -> None:
    plain = tmp_path / "opt/nvidia/nsight-systems/2025.1.1/bin/nsys"
    plain.parent.mkdir(parents=True)
    plain.write_text("not a program")
    assert find_nsys(None, {"PATH": ""}, root=tmp_path) is None


def test_not_found_reason_says_how_to_point_at_nsys() -> None:
    assert "--nsys-path" in NSYS_NOT_FOUND_REASON and "NSYS=" in NSYS_NOT_FOUND_REASON
    assert nsys_not_found_reason(None, {}) == NSYS_NOT_FOUND_REASON
    assert "NSYS='/x/nsys'" in nsys_not_found_reason(None, {"NSYS": "/x/nsys"})


# --- command lines and report folders -------------------------------------------------------------------------------


def test_profile_command_limits_capture_to_the_profiler_api_range(tmp_path: Path) -> None:
    cmd = nsys_profile_command("/opt/nsys", tmp_path / "r" / "capture", ["python", "-m", "pytest", "t.py::x"])
    assert cmd[:2] == ["/opt/nsys", "profile"]
    for flag in ("--trace=cuda,nvtx,osrt", "--capture-range=cudaProfilerApi", "--capture-range-end=stop",
                 "--force-overwrite=true", f"--output={tmp_path / 'r' / 'capture'}"):  # fmt: skip
        assert flag in cmd
    assert cmd[-4:] == ["python", "-m", "pytest", "t.py::x"]  # the application comes last, untouched


@pytest.mark.parametrize(
    "nodeid",
    ["perf/test_inference_speed.py::test_infer[torch-cuda-fp16-8]", "perf/test_e2e.py::TestVideo::test_run[a/b c]",
     "x.py", "perf/t.py::test[" + "long-" * 60 + "]", "../../etc/passwd::t[..]"],
)  # fmt: skip
def test_report_dir_is_one_safe_folder_under_root(tmp_path: Path, nodeid: str) -> None:
    folder = report_dir_for(nodeid, tmp_path)
    assert folder.parent == tmp_path
    assert len(folder.name) <= 120
    assert set(folder.name) <= set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")
    assert not folder.name.startswith(".")
    assert report_dir_for(nodeid, tmp_path) == folder


def test_report_dirs_keep_the_test_name_and_differ_between_ids(tmp_path: Path) -> None:
    a = report_dir_for("perf/t.py::test_infer[a/b]", tmp_path)
    b = report_dir_for("perf/t.py::test_infer[a_b]", tmp_path)
    assert a != b
    assert a.name.startswith("t.py-test_infer-a-b-")


# --- the child runner -----------------------------------------------------------------------------------------------


@pytest.fixture
def child_project(tmp_path: Path) -> Path:
    """A project whose conftest registers the child flag (the perf plugin's job), with a passing, a failing and a
    skipped test."""
    root = tmp_path / "proj"
    root.mkdir()
    (root / "conftest.py").write_text(
        f"def pytest_addoption(parser):\n    parser.addoption({NSYS_CHILD_FLAG!r}, action='store_true')\n"
    )
    (root / "test_child.py").write_text(
        "import os, pytest\n"
        "def test_ok(request):\n    assert request.config.getoption('perf_nsys_child')\n"
        "    assert 'PYTEST_XDIST_WORKER' not in os.environ\n"
        "def test_bad():\n    assert 1 == 2, 'child says no'\n"
        "def test_skip():\n    pytest.skip('no CUDA device: libcuda.so.1: cannot open shared object file')\n"
    )
    return root


def _fake_nsys(folder: Path, *, write_report: bool, after: str = "") -> Path:
    """Runs the application part of an ``nsys profile`` argv, then ``after`` (shell) and, if asked, touches
    ``<output>.nsys-rep``; exits with the application's status, as nsys does."""
    touch = 'touch "$out.nsys-rep"\n' if write_report else ""
    return _script(folder / "nsys", (
        'shift\nout=""\n'
        'while [ $# -gt 0 ]; do case "$1" in --output=*) out="${1#--output=}"; shift;; --*) shift;; *) break;; esac; done\n'
        'echo "Collecting data..."\n"$@"\nrc=$?\n' + after + touch + "exit $rc\n"
    ))  # fmt: skip


def test_passing_child_returns_its_report(child_project: Path, tmp_path: Path) -> None:
    nsys = _fake_nsys(tmp_path / "fake", write_report=True)
    result = run_child_under_nsys(nsys, "test_child.py::test_ok", child_project, report_root=tmp_path / "reports")
    assert result.outcome == "passed" and result.returncode == 0
    assert result.report == result.report_dir / "capture.nsys-rep"
    assert result.report_dir.parent == tmp_path / "reports"
    assert "1 passed" in result.output_tail and result.log_path.is_file()
    assert NSYS_CHILD_FLAG in result.command and "-p" in result.command and "no:cacheprovider" in result.command


def test_failing_child_is_a_test_failure_not_an_nsys_error(child_project: Path, tmp_path: Path) -> None:
    nsys = _fake_nsys(tmp_path / "fake", write_report=False)
    result = run_child_under_nsys(nsys, "test_child.py::test_bad", child_project, report_root=tmp_path / "r")
    assert result.outcome == "failed" and result.returncode != 0
    assert "child says no" in result.output_tail


def test_skipped_child_reports_the_skip_reason(child_project: Path, tmp_path: Path) -> None:
    nsys = _fake_nsys(tmp_path / "fake", write_report=False)
    result = run_child_under_nsys(nsys, "test_child.py::test_skip", child_project, report_root=tmp_path / "r")
    assert result.outcome == "skipped" and "no CUDA device" in result.skip_reason


def test_passing_child_without_a_report_is_an_nsys_error(child_project: Path, tmp_path: Path) -> None:
    nsys = _fake_nsys(tmp_path / "fake", write_report=False)
    with pytest.raises(NsysError, match=r"nsys wrote no \.nsys-rep for test_child.py::test_ok"):
        run_child_under_nsys(nsys, "test_child.py::test_ok", child_project, report_root=tmp_path / "r")


def test_nsys_importer_failure_quotes_the_end_of_nsys_output(child_project: Path, tmp_path: Path) -> None:
    lines = "".join(f"echo 'progress line {i}'\n" for i in range(50))
    nsys = _script(tmp_path / "fake" / "nsys", lines + (
        "echo 'Generating /tmp/nsys-report-1a2b.qdstrm'\n"
        "echo '/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/QdstrmImporter: error while loading "
        "shared libraries: libdw.so.1: cannot open shared object file: No such file or directory' >&2\n"
        "exit 1\n"
    ))  # fmt: skip
    with pytest.raises(NsysError) as info:
        run_child_under_nsys(nsys, "test_child.py::test_ok", child_project, report_root=tmp_path / "r")
    message = str(info.value)
    headline, _, quoted = message.partition("\n")
    assert "test_child.py::test_ok" in headline and "exit 1" in headline
    assert "    > " in quoted and "libdw.so.1: cannot open shared object file" in quoted
    assert "progress line 49" in quoted and "progress line 0\n" not in quoted  # the end, not the start


def test_importer_error_after_a_passing_child_is_still_an_nsys_error(child_project: Path, tmp_path: Path) -> None:
    after = 'echo "Importer error status: Importation failed."\n'
    nsys = _fake_nsys(tmp_path / "fake", write_report=False, after=after)
    with pytest.raises(NsysError, match="Importation failed"):
        run_child_under_nsys(nsys, "test_child.py::test_ok", child_project, report_root=tmp_path / "r")


def test_missing_nsys_executable_is_an_nsys_error(child_project: Path, tmp_path: Path) -> None:
    with pytest.raises(NsysError, match="cannot run nsys"):
        run_child_under_nsys(tmp_path / "no" / "nsys", "test_child.py::test_ok", child_project, report_root=tmp_path)


# --- nsys stats export ----------------------------------------------------------------------------------------------


def test_export_stats_collects_written_csvs_and_tolerates_skipped_reports(tmp_path: Path) -> None:
    # stands in for `nsys stats`: writes the kernel summary, says SKIPPED for the rest (as nsys does without data)
    nsys = _script(tmp_path / "fake" / "nsys", (
        'out=""; for a in "$@"; do [ "$prev" = "--output" ] && out="$a"; prev="$a"; done\n'
        f'cp "{DATA / "handmade_cuda_gpu_kern_sum.csv"}" "${{out}}_cuda_gpu_kern_sum.csv"\n'
        "echo 'SKIPPED: capture.sqlite does not contain NV Tools Extension (NVTX) data.'\nexit 0\n"
    ))  # fmt: skip
    rep = tmp_path / "t" / "capture.nsys-rep"
    rep.parent.mkdir()
    rep.write_bytes(b"")
    csvs = export_stats(nsys, rep, tmp_path / "t" / "stats")
    assert csvs == {"cuda_gpu_kern_sum": tmp_path / "t" / "stats" / "capture_cuda_gpu_kern_sum.csv"}
    summary = summarize(csvs)
    assert summary.top_kernels and summary.stages == {} and "nvtx_sum" in summary.missing


def test_export_stats_failure_quotes_nsys(tmp_path: Path) -> None:
    nsys = _script(tmp_path / "nsys", "echo 'ERROR: report file is corrupt' >&2\nexit 3\n")
    with pytest.raises(NsysError, match=r"(?s)nsys stats failed.*exit 3.*> ERROR: report file is corrupt"):
        export_stats(nsys, tmp_path / "capture.nsys-rep", tmp_path / "stats")


def _nsys_exporting(path: Path, export: str) -> Path:
    """Stands in for nsys: ``stats`` writes the hand-made CSVs, ``export`` runs the shell line ``export`` (with
    ``$out``, the --output path)."""
    copies = "".join(f'cp "{DATA / f"handmade_{r}.csv"}" "${{out}}_{r}.csv"\n' for r in STATS_REPORTS)
    return _script(path, (
        'out=""; for a in "$@"; do [ "$prev" = "--output" ] && out="$a"; prev="$a"; done\n'
        f'if [ "$1" = "stats" ]; then\necho "$@" > "$(dirname "$0")/stats-argv"\n{copies}exit 0\nfi\n'
        f'if [ "$1" = "export" ]; then\n{export}\nfi\nexit 9\n'
    ))  # fmt: skip


def _report(tmp_path: Path) -> Path:
    rep = tmp_path / "t" / "capture.nsys-rep"
    rep.parent.mkdir(parents=True)
    rep.write_bytes(b"")
    return rep


def test_summarize_report_adds_the_critical_path_from_the_sqlite_export(tmp_path: Path) -> None:
    nsys = _nsys_exporting(tmp_path / "fake" / "nsys", f'cp "{DATA / "h100_e2e_torch_fp32.sqlite"}" "$out"; exit 0')
    rep = _report(tmp_path)
    summary = summarize_report(nsys, rep)
    assert (rep.parent / "capture.sqlite").is_file() and summary.missing == []
    stats_argv = (tmp_path / "fake" / "stats-argv").read_text().split()  # the stats read the one export
    assert stats_argv[-1] == str(rep.parent / "capture.sqlite") and "--force-export=true" not in stats_argv
    assert summary.critical_path is not None and summary.critical_path.source == "capture.sqlite"
    assert summary.stages["infer"] == {"total_ns": 2_444_850, "instances": 3}  # the stats part as before
    data = json.loads((rep.parent / "summary.json").read_text())
    assert data["critical_path"]["by_kind"]["host"] == summary.critical_path.by_kind["host"]
    md = (rep.parent / "summary.md").read_text()
    assert "#### Critical path: capture.sqlite" in md and "- Bounded by: host CPU" in md
    assert md.index("### Nsight Systems") < md.index("#### Critical path")


def test_failed_sqlite_export_keeps_the_stats_summary_and_says_why(tmp_path: Path) -> None:
    nsys = _nsys_exporting(tmp_path / "fake" / "nsys", "echo 'ERROR: export of capture.nsys-rep failed' >&2; exit 3")
    rep = _report(tmp_path)
    summary = summarize_report(nsys, rep)
    assert summary.critical_path is None and summary.top_kernels
    assert summary.missing == ["critical path: nsys export failed on " + str(rep) + " (exit 3, no capture.sqlite)"]
    assert "critical path: nsys export failed" in (rep.parent / "summary.md").read_text()
    assert json.loads((rep.parent / "summary.json").read_text())["critical_path"] is None
    assert "ERROR: export of capture.nsys-rep failed" in (rep.parent / "nsys-export.log").read_text()


def test_unreadable_sqlite_export_is_a_missing_part_not_a_crash(tmp_path: Path) -> None:
    nsys = _nsys_exporting(tmp_path / "fake" / "nsys", 'echo garbage > "$out"; exit 0')
    summary = summarize_report(nsys, _report(tmp_path))
    assert summary.critical_path is None and len(summary.missing) == 1
    assert "is not an Nsight Systems SQLite export" in summary.missing[0]


def test_export_sqlite_command_and_missing_nsys(tmp_path: Path) -> None:
    rep, out = tmp_path / "capture.nsys-rep", tmp_path / "capture.sqlite"
    assert export_command("nsys", rep, out) == ["nsys", "export", "--type", "sqlite", "--force-overwrite=true",
                                                 "--output", str(out), str(rep)]  # fmt: skip
    with pytest.raises(NsysError, match="cannot run nsys export"):
        export_sqlite(tmp_path / "no" / "nsys", rep, out)


# --- parsers --------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", _files("cuda_gpu_kern_sum"), ids=lambda p: p.name)
def test_kernel_summary_rows_are_consistent(path: Path) -> None:
    rows = parse_kernel_summary(path)
    total = sum(r.total_ns for r in rows)
    for r in rows:
        assert r.name and r.instances > 0 and r.total_ns > 0
        assert r.min_ns <= r.avg_ns <= r.max_ns
        assert r.avg_ns == pytest.approx(r.total_ns / r.instances, rel=1e-3, abs=0.1)
        assert r.time_pct == pytest.approx(100 * r.total_ns / total, abs=0.1)
    assert [r.total_ns for r in rows] == sorted((r.total_ns for r in rows), reverse=True)


def test_kernel_summary_skips_progress_lines_and_keeps_quoted_commas() -> None:
    rows = parse_kernel_summary(DATA / "handmade_cuda_gpu_kern_sum.csv")
    assert len(rows) == 5
    assert rows[0].total_ns == 1_218_000 and rows[0].instances == 63
    assert any("max_pool_forward_nchw<float, float>(int, const T1 *" in r.name for r in rows)


def test_empty_and_skipped_reports_are_empty_tables(tmp_path: Path) -> None:
    assert parse_kernel_summary(DATA / "empty_cuda_gpu_kern_sum.csv") == []
    assert parse_nvtx_summary(DATA / "skipped_nvtx_sum.csv") == []
    assert parse_api_summary(tmp_path / "never_written.csv") == []
    assert parse_gpu_trace(None) == []


def test_a_csv_of_another_report_is_a_parse_error_naming_the_file() -> None:
    path = DATA / "handmade_cuda_api_sum.csv"
    expected = r"handmade_cuda_api_sum\.csv: no CSV header row with columns 'Total Time', 'Instances'"
    with pytest.raises(NsysParseError, match=expected):
        parse_kernel_summary(path)


def test_units_come_from_the_headers(tmp_path: Path) -> None:
    path = tmp_path / "x_cuda_api_sum.csv"
    path.write_text(
        "NOTICE: something first\n"
        '"Time (%)","Total Time (us)","Num Calls","Avg (us)","Max (us)","Name"\n'
        '"100.0","1,250.5","2","625.25","700","cudaLaunchKernel"\n'
    )
    [row] = parse_api_summary(path)
    assert row.total_ns == 1_250_500 and row.calls == 2 and row.avg_ns == pytest.approx(625_250)
    table = read_table(path, ("Total Time",))
    assert table.columns["Total Time"] == (1, "us")


@pytest.mark.parametrize("path", _files("cuda_api_sum"), ids=lambda p: p.name)
def test_api_summary_rows(path: Path) -> None:
    rows = parse_api_summary(path)
    assert rows and all(r.name.startswith("cu") and r.calls > 0 and r.total_ns > 0 for r in rows)


@pytest.mark.parametrize("path", [p for p in _files("nvtx_sum") if "skipped" not in p.name], ids=lambda p: p.name)
def test_nvtx_summary_names_lose_the_domain_prefix(path: Path) -> None:
    rows = parse_nvtx_summary(path)
    assert rows and all(not r.name.startswith(":") for r in rows)
    if "infer_" not in path.name:  # pipeline captures (hand-made, end-to-end) carry the stage ranges
        assert {"preprocess", "infer", "postprocess"} <= {r.name for r in rows}


@pytest.mark.parametrize(
    ("full", "expected"),
    [(":infer", ("", "infer")), ("perf:infer", ("perf", "infer")), ("aten::conv2d", ("", "aten::conv2d")),
     (":aten::add", ("", "aten::add")), ("plain", ("", "plain")),
     ("TensorRT:conv1 + leaky", ("TensorRT", "conv1 + leaky"))],
)  # fmt: skip
def test_split_range_name(full: str, expected: tuple[str, str]) -> None:
    assert split_range_name(full) == expected


@pytest.mark.parametrize(
    ("name", "direction"),
    [("[CUDA memcpy Host-to-Device]", "h2d"), ("[CUDA memcpy HtoD]", "h2d"), ("[CUDA memcpy Device-to-Host]", "d2h"),
     ("[CUDA memcpy DtoH]", "d2h"), ("[CUDA memcpy Device-to-Device]", None), ("[CUDA memset]", None)],
)  # fmt: skip
def test_copy_direction_reads_both_spellings(name: str, direction: str | None) -> None:
    assert copy_direction(name) == direction


def test_memcpy_totals_from_time_and_size_reports() -> None:
    totals = parse_memcpy_summary(
        DATA / "handmade_cuda_gpu_mem_time_sum.csv", DATA / "handmade_cuda_gpu_mem_size_sum.csv"
    )
    assert (totals.h2d_count, totals.h2d_ns, totals.d2h_count, totals.d2h_ns) == (3, 516_000, 3, 29_400)
    assert totals.h2d_bytes == pytest.approx(3 * 2_076_672, abs=500)  # MB with 3 decimals
    assert totals.d2h_bytes == pytest.approx(3 * 60_840, abs=500)


@pytest.mark.parametrize("base", _bases())
def test_reports_of_one_capture_agree(base: str) -> None:
    """Kernel and copy totals of the summaries equal the sums over the GPU trace of the same capture."""
    csvs = csvs_in(DATA, base)
    if "cuda_gpu_trace" not in csvs:
        pytest.skip(f"{base}: no cuda_gpu_trace CSV")
    trace = parse_gpu_trace(csvs["cuda_gpu_trace"])
    kernels = parse_kernel_summary(csvs["cuda_gpu_kern_sum"])
    assert sum(a.duration_ns for a in trace if a.kind == "kernel") == sum(k.total_ns for k in kernels)
    assert sum(1 for a in trace if a.kind == "kernel") == sum(k.instances for k in kernels)
    copies = parse_memcpy_summary(csvs.get("cuda_gpu_mem_time_sum"), csvs.get("cuda_gpu_mem_size_sum"))
    assert sum(a.duration_ns for a in trace if copy_direction(a.name) == "h2d") == copies.h2d_ns
    assert sum(a.duration_ns for a in trace if copy_direction(a.name) == "d2h") == copies.d2h_ns


def test_gpu_trace_rows_have_kinds_and_copy_sizes() -> None:
    rows = parse_gpu_trace(DATA / "handmade_cuda_gpu_trace.csv")
    assert [r.start_ns for r in rows] == sorted(r.start_ns for r in rows)
    assert {r.kind for r in rows} == {"kernel", "memcpy", "memset"}
    h2d = [r for r in rows if copy_direction(r.name) == "h2d"]
    assert h2d and all(r.bytes == 2_077_000 for r in h2d)  # "2.077" MB


def test_measured_span_is_the_nvtx_range_else_first_to_last_activity() -> None:
    nvtx = parse_nvtx_trace(DATA / "handmade_nvtx_pushpop_trace.csv")
    trace = parse_gpu_trace(DATA / "handmade_cuda_gpu_trace.csv")
    start, end, source = measured_span(trace, nvtx)
    assert (start, end) == (1_000_010_000, 1_014_614_850) and "measured" in source
    first, last, fallback = measured_span(trace, [])
    assert first == trace[0].start_ns and last == max(r.end_ns for r in trace) and "activity" in fallback
    assert measured_span([], []) is None


# --- idle fraction --------------------------------------------------------------------------------------------------

_spans = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 5_000)).map(lambda t: (t[0], t[0] + t[1])),
                  max_size=40)  # fmt: skip


@given(_spans, st.integers(0, 10_000), st.integers(1, 10_000))
def test_busy_time_never_exceeds_the_region_and_idle_is_a_fraction(spans, start, length) -> None:
    end = start + length
    busy = busy_ns(spans, start, end)
    assert 0 <= busy <= length
    assert busy <= sum(max(0, min(b, end) - max(a, start)) for a, b in spans)  # overlaps count once
    idle = gpu_idle_fraction(spans, start, end)
    assert 0.0 <= idle <= 1.0 and idle == pytest.approx(1 - busy / length)


@given(_spans, st.integers(1, 10_000))
def test_busy_time_matches_a_unit_grid_count(spans, length) -> None:
    covered = {t for a, b in spans for t in range(max(a, 0), min(b, length))}
    assert busy_ns(spans, 0, length) == len(covered)


def test_idle_fraction_of_overlapping_streams() -> None:
    rows = [GpuActivity(0, 40, "k1", "kernel"), GpuActivity(20, 40, "k2", "kernel"), GpuActivity(80, 10, "c", "memcpy")]
    assert gpu_idle_fraction(rows, 0, 100) == pytest.approx(0.3)  # busy [0, 60) and [80, 90)
    assert gpu_idle_fraction(rows, 50, 70) == pytest.approx(0.5)
    with pytest.raises(ValueError, match="empty measured region"):
        gpu_idle_fraction(rows, 10, 10)


# --- summary --------------------------------------------------------------------------------------------------------


def test_summary_of_a_capture(tmp_path: Path) -> None:
    csvs = csvs_in(DATA, "handmade")
    assert set(csvs) == set(STATS_REPORTS)
    summary = summarize(csvs, report_path=tmp_path / "capture.nsys-rep", top_n=3)
    assert len(summary.top_kernels) == 3 and summary.top_kernels[0]["total_ns"] == 1_218_000
    assert sum(k["percent"] for k in summary.top_kernels) <= 100.0
    assert list(summary.stages) == ["read", "preprocess", "infer", "postprocess", "write"]
    assert summary.stages["infer"] == {"total_ns": 2_444_850, "instances": 3}
    assert summary.h2d["count"] == 3 and summary.d2h["ns"] == 29_400
    assert summary.region["source"] == "NVTX range 'measured'"
    busy = sum(a.duration_ns for a in parse_gpu_trace(csvs["cuda_gpu_trace"]))  # no overlaps in this capture
    assert summary.idle_fraction == pytest.approx(1 - busy / 14_604_850)
    assert summary.missing == []


def test_summary_markdown_and_json_written_beside_the_report(tmp_path: Path) -> None:
    summary = summarize(csvs_in(DATA, "handmade"), report_path=tmp_path / "capture.nsys-rep")
    json_path, md_path = write_summary(summary, tmp_path)
    assert (json_path, md_path) == (tmp_path / "summary.json", tmp_path / "summary.md")
    data = json.loads(json_path.read_text())
    assert data["stages"]["preprocess"]["instances"] == 3 and data["report"].endswith("capture.nsys-rep")
    md = md_path.read_text()
    assert "### Nsight Systems: capture.nsys-rep" in md
    assert "sm90_xmma_fprop_implicit_gemm" in md and "GPU idle" in md and "Host-to-device: 6.230 MB in 3" in md
    for stage in ("read", "preprocess", "infer", "postprocess", "write"):
        assert f"| {stage} |" in md
    assert "cudaStreamSynchronize" in md
    assert [line for line in md.splitlines() if line.startswith("| 1 |")][0].count("|") == 7  # '|' escaped in names


def test_summary_of_nothing_is_empty_but_valid() -> None:
    summary = summarize({})
    assert summary.top_kernels == [] and summary.region is None and summary.idle_fraction is None
    assert json.loads(summary.to_json())["missing"] == list(STATS_REPORTS)
    assert "Kernels: 0.000 ms in 0 launches" in summary.to_markdown()


# --- the suite's own activity (clock busy-wait, event API calls) ----------------------------------------------------

CLOCK = "handmade_infer_clock_b1"  # 3 timed calls between 4 clock readings, each with a 0.5 ms busy-wait


@pytest.mark.parametrize(
    "name",
    ["at::cuda::(anonymous namespace)::spin_kernel(long)", "void at::cuda::<unnamed>::spin_kernel(long)",
     "at::cuda::spin_kernel(int64_t)", "spin_kernel", "at::cuda::<unnamed>::spin_kernel",
     "_ZN2at4cuda12_GLOBAL__N_111spin_kernelEl"],
)  # fmt: skip
def test_every_spelling_of_the_torch_sleep_kernel_is_a_suite_kernel(name: str) -> None:
    assert is_suite_kernel(name)
    assert is_suite_activity(GpuActivity(0, 1, name, "kernel"))


@pytest.mark.parametrize(
    "name",
    ["spin_kernels", "my_spin_kernel", "void at::native::spin_kernel_v2(long)", "sleep_kernel",
     "void at::native::vectorized_elementwise_kernel<4, at::native::leaky_relu_kernel(at::TensorIteratorBase&)>"],
)  # fmt: skip
def test_other_kernels_are_the_models(name: str) -> None:
    assert not is_suite_kernel(name)


@pytest.mark.parametrize(
    ("name", "timing"),
    [("cudaEventRecord", True), ("cudaEventRecordWithFlags_v11010", True), ("cudaEventSynchronize", True),
     ("cudaEventElapsedTime", True), ("cudaEventElapsedTime_v2", True), ("cudaEventCreate", True),
     ("cudaEventCreateWithFlags", True), ("cudaEventDestroy", True), ("cudaEventQuery", True),
     ("cuEventRecord", True), ("cudaStreamWaitEvent", False), ("cudaLaunchKernel", False),
     ("cudaStreamSynchronize", False), ("cudaDeviceSynchronize", False)],
)  # fmt: skip
def test_event_api_calls_are_timing_machinery(name: str, timing: bool) -> None:
    assert is_timing_event_api(name) is timing


def test_suite_clock_kernels_are_left_out_of_top_kernels_and_idle_time() -> None:
    csvs = csvs_in(DATA, CLOCK)
    summary = summarize(csvs)
    # the model: 3 x (conv 120 us + leaky ReLU 30 us); the kernel summary's 81.6 % spin_kernel row is not among them
    assert (summary.kernel_total_ns, summary.kernel_instances) == (450_000, 6)
    assert [(k["total_ns"], k["instances"]) for k in summary.top_kernels] == [(360_000, 3), (90_000, 3)]
    assert [k["percent"] for k in summary.top_kernels] == pytest.approx([80.0, 20.0])
    assert not any("spin_kernel" in k["name"] for k in summary.top_kernels)
    # the suite: 4 busy-waits of 0.5 ms, the last one running 60 us past the end of the 2.5 ms region
    assert (summary.suite_kernel_ns, summary.suite_kernel_instances) == (2_000_000, 4)
    assert summary.region == {"start_ns": 10_000_000, "end_ns": 12_500_000, "source": "NVTX range 'measured'"}
    assert summary.idle_fraction == pytest.approx(1 - 450_000 / 2_500_000)  # 0.82: busy-wait spans count as idle
    assert summary.suite_busy_fraction == pytest.approx(1_940_000 / 2_500_000)  # 0.776 of the region
    everything = gpu_idle_fraction(parse_gpu_trace(csvs["cuda_gpu_trace"]), 10_000_000, 12_500_000)
    assert everything == pytest.approx(1 - 2_390_000 / 2_500_000)  # 0.044 had the busy-wait counted as GPU work
    assert summary.idle_fraction == pytest.approx(everything + summary.suite_busy_fraction)  # they never overlap


def test_event_api_calls_leave_the_api_table_for_the_suite_line() -> None:
    summary = summarize(csvs_in(DATA, CLOCK))
    assert [(a["name"], a["calls"]) for a in summary.top_api] == [("cudaLaunchKernel", 10), ("cudaProfilerStop", 1)]
    # cudaEventSynchronize 1,560,000 + Record 21,000 + CreateWithFlags 8,400 + ElapsedTime 4,500 + Destroy 2,700
    assert (summary.timing_event_api_ns, summary.timing_event_api_calls) == (1_596_600, 3 + 7 + 7 + 3 + 3)


def test_without_the_nvtx_range_the_region_spans_the_model_work_not_the_busy_wait() -> None:
    csvs = {k: v for k, v in csvs_in(DATA, CLOCK).items() if k != "nvtx_pushpop_trace"}
    summary = summarize(csvs)
    assert summary.region == {"start_ns": 10_525_000, "end_ns": 12_036_000, "source": "first to last GPU activity"}
    assert summary.idle_fraction == pytest.approx(1 - 450_000 / 1_511_000)
    assert summary.suite_busy_fraction == pytest.approx(1_000_000 / 1_511_000)  # the 2nd and 3rd busy-waits


def test_suite_clock_line_in_markdown_and_json(tmp_path: Path) -> None:
    summary = summarize(csvs_in(DATA, CLOCK))
    md = summary.to_markdown()
    assert ("- Suite clock (left out of the figures and tables): 2.000 ms busy-wait in 4 launches (77.6 % of the "
            f"region); {TIMING_EVENT_LABEL} 1.597 ms in 23 API calls") in md.splitlines()  # fmt: skip
    assert "GPU idle 82.0 % of it" in md and "Kernels: 0.450 ms in 6 launches" in md
    assert "spin_kernel" not in md and "cudaEvent" not in md
    data = json.loads(write_summary(summary, tmp_path)[0].read_text())
    assert {k: data[k] for k in ("suite_kernel_ns", "suite_kernel_instances", "suite_busy_fraction",
                                 "timing_event_api_ns", "timing_event_api_calls")} == {
        "suite_kernel_ns": 2_000_000, "suite_kernel_instances": 4, "suite_busy_fraction": pytest.approx(0.776),
        "timing_event_api_ns": 1_596_600, "timing_event_api_calls": 23}  # fmt: skip
    many = dataclasses.replace(summary, suite_kernel_instances=1_000, timing_event_api_calls=2_000, region=None,
                               suite_busy_fraction=None)  # fmt: skip
    assert ": 2.000 ms busy-wait in 1,000 launches; timing events" in many.to_markdown()  # no region, no share
    assert "in 2,000 API calls" in many.to_markdown()


def test_no_suite_line_without_suite_activity() -> None:
    summary = summarize(csvs_in(DATA, "handmade"))  # no spin_kernel, no event calls
    assert (summary.suite_kernel_ns, summary.suite_kernel_instances, summary.timing_event_api_calls) == (0, 0, 0)
    assert summary.suite_busy_fraction == 0.0 and "Suite clock" not in summary.to_markdown()
    events_only = dataclasses.replace(summary, timing_event_api_ns=3_200_000, timing_event_api_calls=2_000)
    assert f"- Suite clock (left out of the figures and tables): {TIMING_EVENT_LABEL} 3.200 ms in 2,000 API calls" \
        in events_only.to_markdown().splitlines()


@pytest.mark.parametrize("base", _bases())
def test_every_capture_summarises_with_the_suite_activity_apart(base: str) -> None:
    """Captured (H100) and hand-made sets alike: the model's and the suite's figures add up to the reports' totals."""
    csvs = csvs_in(DATA, base)
    summary = summarize(csvs, top_n=100)
    kernels = parse_kernel_summary(csvs["cuda_gpu_kern_sum"])
    assert summary.kernel_total_ns + summary.suite_kernel_ns == sum(k.total_ns for k in kernels)
    assert summary.kernel_instances + summary.suite_kernel_instances == sum(k.instances for k in kernels)
    assert not any(is_suite_kernel(k["name"]) for k in summary.top_kernels)
    if summary.top_kernels:
        assert sum(k["percent"] for k in summary.top_kernels) == pytest.approx(100.0)
    api = parse_api_summary(csvs.get("cuda_api_sum"))
    assert not any(is_timing_event_api(a["name"]) for a in summary.top_api)
    assert summary.timing_event_api_calls == sum(a.calls for a in api if a.name.startswith("cudaEvent"))
    if base.startswith("h100_"):  # these captures hold no spin_kernel; their event API calls move to the suite line
        assert summary.suite_kernel_instances == 0 and summary.timing_event_api_calls > 0
    assert summary.to_markdown().startswith("### Nsight Systems")


def test_child_runs_under_this_python_without_xdist_worker_env(child_project: Path, tmp_path: Path) -> None:
    nsys = _fake_nsys(tmp_path / "fake", write_report=True)
    result = run_child_under_nsys(nsys, "test_child.py::test_ok", child_project, report_root=tmp_path / "r",
                                  env={**os.environ, "PYTEST_XDIST_WORKER": "gw3"})  # fmt: skip
    assert result.command[result.command.index(f"--output={result.report_dir / 'capture'}") + 1] == sys.executable
    assert result.outcome == "passed"


# --- what the child is told: the parent's own options --------------------------------------------------------------


def test_nsys_child_options_are_the_parents_less_saving_comparing_and_selection() -> None:
    args = ["perf", "-m", "nsys", "-kgraph", "--perf-frames=7", "--benchmark-autosave", "--perf-compare", "0003",
            "-n", "4", "--perf-cfg", "models/m.cfg", "--benchmark-compare-fail", "min:5%", "mean:0.001",
            "--perf-nsys", "--benchmark-json=out.json", "-x", "--perf-compare", "--perf-future-knob=on", "-nauto",
            "--perf-reports-dir", "out", "-p", "no:randomly", "-k", "not slow", "--basetemp=/tmp/b"]  # fmt: skip
    kept = forwarded_options(args, ["perf"], dropped=NSYS_DROPPED)
    assert kept == ["--perf-frames=7", "--perf-cfg", "models/m.cfg", "-x", "--perf-future-knob=on",
                    "--perf-reports-dir", "out", "-p", "no:randomly"]  # fmt: skip


def test_an_optional_value_is_taken_only_where_argparse_takes_it() -> None:
    assert forwarded_options(["--perf-compare", "-x"], [], dropped=NSYS_DROPPED) == ["-x"]
    assert forwarded_options(["--perf-compare", "0003", "-x"], [], dropped=NSYS_DROPPED) == ["-x"]
    assert forwarded_options(["--perf-compare", "0003"], [], {"--perf-compare": None}, NSYS_DROPPED) == ["0003"]


def _recording_nsys(folder: Path) -> Path:
    """An nsys that writes its argv (one a line) and its working directory beside itself, runs the application of
    ``nsys profile``, touches the report, and answers ``nsys stats`` and ``nsys export`` with no files."""
    return _script(folder / "nsys", (
        'if [ "$1" = stats ] || [ "$1" = export ]; then exit 0; fi\n'
        f'printf "%s\\n" "$@" > "{folder}/argv.txt"\npwd > "{folder}/cwd.txt"\n'
        'shift\nout=""\n'
        'while [ $# -gt 0 ]; do case "$1" in --output=*) out="${1#--output=}"; shift;; --*) shift;; *) break;; esac; done\n'
        '"$@"\nrc=$?\ntouch "$out.nsys-rep"\nexit $rc\n'
    ))  # fmt: skip


@pytest.fixture
def parent_project(tmp_path: Path) -> Path:
    """A project using the perf plugins, with a pytest.ini setting ``perf_names`` (relative to the ini), a plugin of
    its own adding a future option, a copy of the shipped cfg, and one nsys-marked test that writes what its
    process saw (options, model settings, where it started) to ``$SEEN``."""
    root = tmp_path / "proj"
    (root / "work").mkdir(parents=True)
    shutil.copy(REPO / "detector" / "data" / "yolov4-tiny.cfg", root / "m.cfg")
    (root / "names.txt").write_text("class0\nclass1\n")  # the shipped cfg's 2 classes: a names file that fits it
    (root / "pytest.ini").write_text("[pytest]\naddopts = -p no:randomly --benchmark-autosave\nperf_names = names.txt\n")
    (root / "conftest.py").write_text(
        "import pytest\n"
        "pytest_plugins = ['perf.plugin', 'perf.fixtures.reporting']\n"
        "def pytest_addoption(parser):\n    parser.addoption('--perf-future-knob', default=None)\n"
    )  # fmt: skip
    (root / "test_marked.py").write_text(
        "import json, os, pytest\n"
        "from perf.session import PERF_SESSION\n"
        "@pytest.mark.nsys\n"
        "def test_marked(request):\n"
        "    config = request.config\n"
        "    subject = config.stash[PERF_SESSION].subject\n"
        "    seen = {'child': config.getoption('perf_nsys_child'), 'frames': config.getoption('perf_frames'),\n"
        "            'knob': config.getoption('perf_future_knob'), 'cfg': str(subject.cfg),\n"
        "            'names': str(subject.names), 'autosave': config.getoption('benchmark_autosave'),\n"
        "            'json': config.getoption('benchmark_json'),\n"
        "            'keyword': config.getoption('keyword'), 'cwd': os.getcwd(), 'rootdir': str(config.rootpath)}\n"
        "    with open(os.environ['SEEN'], 'w') as f:\n        json.dump(seen, f)\n"
    )  # fmt: skip
    return root


def test_the_nsys_child_gets_every_option_of_the_parent_but_saving_and_selection(
    parent_project: Path, tmp_path: Path
) -> None:
    fake = _recording_nsys(tmp_path / "fake")
    seen = tmp_path / "seen.json"
    env = {**os.environ, "SEEN": str(seen), "PYTEST_ADDOPTS": "--benchmark-json=../out.json --perf-frames=5"}
    env.pop("PYTEST_XDIST_WORKER", None)
    parent = [sys.executable, "-m", "pytest", "../test_marked.py", "-m", "nsys", "-k", "marked",
              f"--perf-nsys-path={fake}", "--perf-frames=7", "--perf-cfg=../m.cfg", "--perf-future-knob=on",
              "--benchmark-storage=../bench", "-p", "no:cacheprovider"]  # fmt: skip
    result = subprocess.run(parent, cwd=parent_project / "work", env=env, capture_output=True, text=True,
                            timeout=300, check=False)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "nsys summaries" in result.stdout
    argv = (tmp_path / "fake" / "argv.txt").read_text().splitlines()
    child = argv[argv.index(sys.executable) + 3 :]  # after "python -m pytest"
    assert "--perf-frames=7" in child and "--perf-cfg=../m.cfg" in child and "--perf-future-knob=on" in child
    for token in ("--benchmark-autosave", "-k", "marked", "-m", "nsys", "--benchmark-storage=../bench", "-n"):
        assert token not in child, token
    assert (tmp_path / "fake" / "cwd.txt").read_text().strip() == str(parent_project / "work")
    assert json.loads(seen.read_text()) == {
        "child": True, "frames": 7, "knob": "on", "cfg": str(parent_project / "m.cfg"),
        "names": str(parent_project / "names.txt"), "autosave": None, "json": None, "keyword": "",
        "cwd": str(parent_project / "work"), "rootdir": str(parent_project),
    }  # fmt: skip
