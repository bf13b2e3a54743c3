"""Nsight Systems support: finding nsys, the profile/export command lines, the child runner's verdicts and errors,
GPU idle time and the summary of a capture's SQLite export (the trimmed real exports in tests/data/nsys and
hand-made ones, `nsys_capture`).

No nsys runs here. Small shell scripts stand in for the nsys executable where the test is about *our* side of the
process boundary (discovery, error reporting, which files we pick up); the summary only ever sees SQLite exports.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsys_capture import CONV, DATA, LEAKY, MAIN, PID, HandMade, clock_capture
from perf.gate.processes import NSYS_DROPPED, forwarded_options
from perf.profile.capture_db import CaptureError, busy_ns, is_suite_kernel, read_capture, stats_api_name
from perf.profile.nsys import (
    NSYS_CHILD_FLAG,
    NSYS_NOT_FOUND_REASON,
    NsysError,
    export_sqlite,
    find_nsys,
    nsys_not_found_reason,
    nsys_profile_command,
    report_dir_for,
    run_child_under_nsys,
    summarize_report,
)
from perf.profile.nsys_summary import (
    DATA_NAMES,
    TIMING_EVENT_LABEL,
    is_timing_event_api,
    summarize,
    write_summary,
)

REPO = Path(__file__).resolve().parents[2]
#: The trimmed real H100 exports (tests/data/nsys/README.md).
REAL = sorted(DATA.glob("h100_*.sqlite"))


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
        'while [ $# -gt 0 ]; do case "$1" in --output=*) out="${1#--output=}"; shift;; '
        '--*) shift;; *) break;; esac; done\n'
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


# --- the SQLite export and the summary of a report ------------------------------------------------------------------


def _nsys_exporting(path: Path, export: str) -> Path:
    """Stands in for nsys: ``export`` runs the shell line ``export`` (with ``$out``, the --output path)."""
    return _script(path, (
        'out=""; for a in "$@"; do [ "$prev" = "--output" ] && out="$a"; prev="$a"; done\n'
        f'if [ "$1" = "export" ]; then\n{export}\nfi\nexit 9\n'
    ))  # fmt: skip


def _report(tmp_path: Path) -> Path:
    rep = tmp_path / "t" / "capture.nsys-rep"
    rep.parent.mkdir(parents=True)
    rep.write_bytes(b"")
    return rep


def test_summarize_report_reads_the_one_sqlite_export_for_summary_and_critical_path(tmp_path: Path) -> None:
    nsys = _nsys_exporting(tmp_path / "fake" / "nsys", f'cp "{DATA / "h100_e2e_torch_fp32.sqlite"}" "$out"; exit 0')
    rep = _report(tmp_path)
    summary = summarize_report(nsys, rep)
    assert (rep.parent / "capture.sqlite").is_file() and summary.missing == []
    assert summary.critical_path is not None and summary.critical_path.source == "capture.sqlite"
    assert summary.critical_path.region == summary.region  # one region for both
    assert summary.stages["infer"] == {"total_ns": 28_960_548, "instances": 4}
    data = json.loads((rep.parent / "summary.json").read_text())
    assert data["critical_path"]["by_kind"]["host"] == summary.critical_path.by_kind["host"]
    md = (rep.parent / "summary.md").read_text()
    assert "#### Critical path: capture.sqlite" in md and "- Bounded by: host CPU" in md
    assert md.index("### Nsight Systems") < md.index("#### Critical path")


def test_failed_sqlite_export_is_an_nsys_error_quoting_nsys(tmp_path: Path) -> None:
    nsys = _nsys_exporting(tmp_path / "fake" / "nsys", "echo 'ERROR: export of capture.nsys-rep failed' >&2; exit 3")
    rep = _report(tmp_path)
    with pytest.raises(NsysError, match=r"(?s)nsys export failed on .*capture\.nsys-rep \(exit 3, no capture\.sqlite\)"
                                        r".*> ERROR: export of capture\.nsys-rep failed"):  # fmt: skip
        summarize_report(nsys, rep)
    assert "ERROR: export of capture.nsys-rep failed" in (rep.parent / "nsys-export.log").read_text()
    assert not (rep.parent / "summary.json").exists()


def test_unreadable_sqlite_export_is_an_nsys_error_naming_it(tmp_path: Path) -> None:
    nsys = _nsys_exporting(tmp_path / "fake" / "nsys", 'echo garbage > "$out"; exit 0')
    with pytest.raises(NsysError, match="is not an Nsight Systems SQLite export"):
        summarize_report(nsys, _report(tmp_path))


#: (table, column, an SQL value nsys never writes there: NOT NULL columns hold no NULL); values it may write.
_WRONG = [(t, c, v) for t, cs in {"CUPTI_ACTIVITY_KIND_KERNEL": ("start", "end", "streamId", "demangledName"),
                                  "CUPTI_ACTIVITY_KIND_RUNTIME": ("start", "end", "globalTid", "nameId"),
                                  "NVTX_EVENTS": ("start", "end"), "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": ("eventId",)
                                  }.items() for c in cs for v in ("'abc'", "X'00ff'", "3.5")]  # fmt: skip
_WRONG += [("StringIds", "value", "X'00ff'"),
           ("NVTX_EVENTS", "text", "X'00'"), ("CUPTI_ACTIVITY_KIND_KERNEL", "end", "start - 1")]
_FINE = [("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId", "NULL"), ("NVTX_EVENTS", "text", "'abc'"),
         ("CUPTI_ACTIVITY_KIND_KERNEL", "streamId", "-5")]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.sampled_from(_WRONG + _FINE))
def test_an_export_holding_a_value_of_the_wrong_type_is_one_error_naming_the_column(
        tmp_path: Path, change: tuple[str, str, str]) -> None:
    """A NULL, text, blob or float where nsys writes an integer (a number where it writes text), or an end before
    its start, is one CaptureError naming the table, column and value: never a TypeError from sorting."""
    table, column, value = change
    path = tmp_path / "capture.sqlite"
    shutil.copy(DATA / "h100_e2e_torch_fp32.sqlite", path)
    with contextlib.closing(sqlite3.connect(path)) as conn, conn:
        conn.execute(f"UPDATE {table} SET {column} = {value}")
    if change in _FINE:
        summarize(read_capture(path))
        return
    with pytest.raises(CaptureError, match=rf"^cannot read nsys SQLite export '.*capture\.sqlite': {table}\.\w+ "
                                           r"holds .*, expected (an integer|text|no earlier than its start \d+)$"):
        read_capture(path)


def test_export_sqlite_command_and_missing_nsys(tmp_path: Path) -> None:
    rep, out = tmp_path / "capture.nsys-rep", tmp_path / "capture.sqlite"
    nsys = _nsys_exporting(tmp_path / "fake" / "nsys", 'printf "%s\\n" "$@" > "$out"; exit 0')
    assert export_sqlite(nsys, rep, out).read_text().splitlines() == [
        "export", "--type", "sqlite", "--force-overwrite=true", "--output", str(out), str(rep)]  # fmt: skip
    with pytest.raises(NsysError, match="cannot run nsys export"):
        export_sqlite(tmp_path / "no" / "nsys", rep, out)


# --- idle fraction --------------------------------------------------------------------------------------------------

_spans = st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 5_000)).map(lambda t: (t[0], t[0] + t[1])),
                  max_size=40)  # fmt: skip


@given(_spans, st.integers(0, 10_000), st.integers(1, 10_000))
def test_busy_time_never_exceeds_the_region_so_idle_is_a_fraction(spans, start, length) -> None:
    end = start + length
    busy = busy_ns(spans, start, end)
    assert 0 <= busy <= length  # the summary's idle fraction, 1 - busy / length, lies in 0..1
    assert busy <= sum(max(0, min(b, end) - max(a, start)) for a, b in spans)  # overlaps count once


@given(_spans, st.integers(1, 10_000))
def test_busy_time_matches_a_unit_grid_count(spans, length) -> None:
    covered = {t for a, b in spans for t in range(max(a, 0), min(b, length))}
    assert busy_ns(spans, 0, length) == len(covered)


@pytest.mark.parametrize(("start", "end", "idle"), [(1_000, 1_100, 0.3), (1_050, 1_070, 0.5), (1_010, 1_010, None)])
def test_idle_fraction_of_overlapping_streams(tmp_path: Path, start: int, end: int, idle: float | None) -> None:
    c = HandMade()
    main = c.thread("python", PID)
    c.nvtx(main, "measured", start, end)
    c.kernel(c.cuda(main, "cudaLaunchKernel_v7000", 900, 905), 1_000, 1_040, "k1", stream=7)
    c.kernel(c.cuda(main, "cudaLaunchKernel_v7000", 910, 915), 1_020, 1_060, "k2", stream=8)
    c.memcpy(c.cuda(main, "cudaMemcpyAsync_v3020", 920, 925), 1_080, 1_090, 1, 64, stream=7)
    summary = summarize(read_capture(c.write(tmp_path / "c.sqlite")))  # busy [1000, 1060) and [1080, 1090)
    if idle is None:  # an empty measured region has no idle fraction
        assert summary.idle_fraction is None
    else:
        assert summary.idle_fraction == pytest.approx(idle)


# --- the summary of a capture ---------------------------------------------------------------------------------------


def _independent_busy(path: Path, start: int, end: int) -> int:
    """ns of [start, end) covered by the export's kernels and copies, counted on a plain union (no perf code)."""
    conn = sqlite3.connect(path)
    spans = sorted(conn.execute("SELECT start, end FROM CUPTI_ACTIVITY_KIND_KERNEL UNION ALL "
                                "SELECT start, end FROM CUPTI_ACTIVITY_KIND_MEMCPY").fetchall())  # fmt: skip
    conn.close()
    busy, reach = 0, start
    for a, b in spans:
        a, b = max(a, reach), min(b, end)
        if b > a:
            busy, reach = busy + b - a, b
    return busy


def test_summary_of_a_real_capture(tmp_path: Path) -> None:
    path = DATA / "h100_e2e_torch_fp32.sqlite"  # eager torch fp32, the sequential loop, 4 frames
    summary = summarize(read_capture(path), report_path=tmp_path / "capture.nsys-rep", top_n=3)
    assert len(summary.top_kernels) == 3 and summary.top_kernels[0]["total_ns"] == 2_926_496
    assert summary.top_kernels[0]["instances"] == 76
    assert summary.top_kernels[0]["percent"] == pytest.approx(74.49, abs=0.01)
    assert list(summary.stages) == ["read", "preprocess", "infer", "postprocess", "write"]
    assert all(stage["instances"] == 4 for stage in summary.stages.values())
    assert summary.h2d == {"bytes": 4 * 2_076_672, "ns": 221_988, "count": 4}  # one 416x416x3 fp32 frame each
    assert summary.d2h == {"bytes": 4 * 60_840, "ns": 11_616, "count": 4}
    region = summary.region
    assert region["source"] == "NVTX range 'measured'" and region["end_ns"] - region["start_ns"] == 82_900_306
    busy = _independent_busy(path, region["start_ns"], region["end_ns"])
    assert summary.idle_fraction == pytest.approx(1 - busy / 82_900_306)
    assert summary.missing == [] and summary.top_api[0]["name"] == "cudaLaunchKernel"


@pytest.mark.parametrize("path", REAL, ids=lambda p: p.name)
def test_every_capture_summarises_with_the_suite_activity_apart(path: Path) -> None:
    """The model's and the suite's figures add up to the export's own totals, counted in SQL here."""
    summary = summarize(read_capture(path), top_n=1_000)
    conn = sqlite3.connect(path)
    kernels = conn.execute("SELECT SUM(end - start), COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL").fetchone()
    events = conn.execute("SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds s ON s.id = r.nameId "
                          "WHERE s.value LIKE 'cudaEvent%'").fetchone()[0]  # fmt: skip
    conn.close()
    assert (summary.kernel_total_ns + summary.suite_kernel_ns, summary.kernel_instances
            + summary.suite_kernel_instances) == kernels  # fmt: skip
    assert sum(k["total_ns"] for k in summary.top_kernels) == summary.kernel_total_ns
    assert sum(k["percent"] for k in summary.top_kernels) == pytest.approx(100.0)
    assert not any(is_suite_kernel(k["name"]) for k in summary.top_kernels)
    assert not any(is_timing_event_api(a["name"]) for a in summary.top_api)
    assert summary.timing_event_api_calls == events > 0  # these captures hold event calls and no spin_kernel
    assert summary.suite_kernel_instances == 0 and 0.0 < summary.idle_fraction < 1.0
    assert summary.to_markdown().startswith("### Nsight Systems")


def test_summary_markdown_and_json_written_beside_the_report(tmp_path: Path) -> None:
    summary = summarize(read_capture(DATA / "h100_e2e_torch_fp32.sqlite"), report_path=tmp_path / "capture.nsys-rep")
    json_path, md_path = write_summary(summary, tmp_path)
    assert (json_path, md_path) == (tmp_path / "summary.json", tmp_path / "summary.md")
    data = json.loads(json_path.read_text())
    assert data["stages"]["preprocess"]["instances"] == 4 and data["report"].endswith("capture.nsys-rep")
    assert set(data) == {f.name for f in dataclasses.fields(summary)}
    md = md_path.read_text()
    assert "### Nsight Systems: capture.nsys-rep" in md
    assert "sm80_xmma_fprop_implicit_gemm" in md and "GPU idle" in md and "Host-to-device: 8.307 MB in 4" in md
    for stage in ("read", "preprocess", "infer", "postprocess", "write"):
        assert f"| {stage} |" in md
    assert "cudaLaunchKernel" in md and "cudaEvent" not in md


def test_summary_of_nothing_is_empty_but_valid(tmp_path: Path) -> None:
    summary = summarize(read_capture(HandMade().write(tmp_path / "empty.sqlite")))
    assert summary.top_kernels == [] and summary.region is None and summary.idle_fraction is None
    assert json.loads(summary.to_json())["missing"] == list(DATA_NAMES)
    assert "Kernels: 0.000 ms in 0 launches" in summary.to_markdown()


def test_copies_are_summed_by_direction_over_the_whole_capture(tmp_path: Path) -> None:
    c = HandMade()
    main = c.thread("python", PID)
    c.nvtx(main, "measured", 0, 100)
    for i, (kind, size) in enumerate([(1, 1_000), (1, 3_000), (11, 500), (2, 40), (8, 9_999)]):  # 8: DtoD
        c.memcpy(c.cuda(main, "cudaMemcpyAsync_v3020", 10 * i, 10 * i + 5), 200 + 10 * i, 206 + 10 * i, kind, size)
    c.memset(c.cuda(main, "cudaMemsetAsync_v3020", 60, 65), 300, 302)
    summary = summarize(read_capture(c.write(tmp_path / "c.sqlite")))
    assert summary.h2d == {"bytes": 4_500, "ns": 18, "count": 3}  # after the region: the whole capture counts
    assert summary.d2h == {"bytes": 40, "ns": 6, "count": 1}
    assert summary.missing == ["cuda_gpu_kern_sum"] and summary.idle_fraction == 1.0


@pytest.mark.parametrize(
    ("name", "shown"),
    [("cudaLaunchKernel_v7000", "cudaLaunchKernel"), ("cudaEventSynchronize_v3020", "cudaEventSynchronize"),
     ("cudaLaunchKernelExC_v11060", "cudaLaunchKernelExC_v11060"), ("cuKernelGetName", "cuKernelGetName")],
)  # fmt: skip
def test_api_names_are_spelled_as_nsys_stats_spells_them(name: str, shown: str) -> None:
    assert stats_api_name(name) == shown


# --- the suite's own activity (clock busy-wait, event API calls) ----------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["at::cuda::(anonymous namespace)::spin_kernel(long)", "void at::cuda::<unnamed>::spin_kernel(long)",
     "at::cuda::spin_kernel(int64_t)", "spin_kernel", "at::cuda::<unnamed>::spin_kernel",
     "_ZN2at4cuda12_GLOBAL__N_111spin_kernelEl"],
)  # fmt: skip
def test_every_spelling_of_the_torch_sleep_kernel_is_a_suite_kernel(name: str) -> None:
    assert is_suite_kernel(name)


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


def test_suite_clock_kernels_are_left_out_of_top_kernels_and_idle_time(tmp_path: Path) -> None:
    capture = read_capture(clock_capture(tmp_path / "clock.sqlite"))
    summary = summarize(capture)
    # the model: 3 x (conv 120 us + leaky ReLU 30 us); the 81.6 % of kernel time in spin_kernel is not among them
    assert (summary.kernel_total_ns, summary.kernel_instances) == (450_000, 6)
    assert [(k["name"], k["total_ns"], k["instances"]) for k in summary.top_kernels] == [
        (CONV, 360_000, 3), (LEAKY, 90_000, 3)]  # fmt: skip
    assert [k["percent"] for k in summary.top_kernels] == pytest.approx([80.0, 20.0])
    # the suite: 4 busy-waits of 0.5 ms, the last one running 60 us past the end of the 2.5 ms region
    assert (summary.suite_kernel_ns, summary.suite_kernel_instances) == (2_000_000, 4)
    assert summary.region == {"start_ns": 10_000_000, "end_ns": 12_500_000, "source": "NVTX range 'measured'"}
    assert summary.idle_fraction == pytest.approx(1 - 450_000 / 2_500_000)  # 0.82: busy-wait spans count as idle
    assert summary.suite_busy_fraction == pytest.approx(1_940_000 / 2_500_000)  # 0.776 of the region
    everything = 1 - busy_ns([(op.start_ns, op.end_ns) for op in capture.gpu_ops], 10_000_000, 12_500_000) / 2_500_000
    assert everything == pytest.approx(1 - 2_390_000 / 2_500_000)  # 0.044 had the busy-wait counted as GPU work
    assert summary.idle_fraction == pytest.approx(everything + summary.suite_busy_fraction)  # they never overlap
    assert summary.missing == ["cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum"]  # no copies


def test_event_api_calls_leave_the_api_table_for_the_suite_line(tmp_path: Path) -> None:
    summary = summarize(read_capture(clock_capture(tmp_path / "clock.sqlite")))
    assert [(a["name"], a["calls"]) for a in summary.top_api] == [("cudaLaunchKernel", 10), ("cudaProfilerStop", 1)]
    # cudaEventSynchronize 1,560,000 + Record 21,000 + CreateWithFlags 8,400 + ElapsedTime 4,500 + Destroy 2,700
    assert (summary.timing_event_api_ns, summary.timing_event_api_calls) == (1_596_600, 3 + 7 + 7 + 3 + 3)


def test_without_the_nvtx_range_the_region_spans_the_model_work_not_the_busy_wait(tmp_path: Path) -> None:
    summary = summarize(read_capture(clock_capture(tmp_path / "clock.sqlite", nvtx=False)))
    assert summary.region == {"start_ns": 10_525_000, "end_ns": 12_036_000, "source": "first to last GPU activity"}
    assert summary.idle_fraction == pytest.approx(1 - 450_000 / 1_511_000)
    assert summary.suite_busy_fraction == pytest.approx(1_000_000 / 1_511_000)  # the 2nd and 3rd busy-waits


def test_suite_clock_line_in_markdown_and_json(tmp_path: Path) -> None:
    summary = summarize(read_capture(clock_capture(tmp_path / "clock.sqlite")))
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


def test_no_suite_line_without_suite_activity(tmp_path: Path) -> None:
    c = HandMade()
    c.nvtx(MAIN, "measured", 0, 1_000)
    c.kernel(c.cuda(MAIN, "cudaLaunchKernel_v7000", 0, 10), 100, 600)  # no spin_kernel, no event calls
    summary = summarize(read_capture(c.write(tmp_path / "c.sqlite")))
    assert (summary.suite_kernel_ns, summary.suite_kernel_instances, summary.timing_event_api_calls) == (0, 0, 0)
    assert summary.suite_busy_fraction == 0.0 and summary.idle_fraction == 0.5
    assert "Suite clock" not in summary.to_markdown()
    events_only = dataclasses.replace(summary, timing_event_api_ns=3_200_000, timing_event_api_calls=2_000)
    assert f"- Suite clock (left out of the figures and tables): {TIMING_EVENT_LABEL} 3.200 ms in 2,000 API calls" \
        in events_only.to_markdown().splitlines()

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
    ``nsys profile``, touches the report, and answers ``nsys export`` with a real export."""
    return _script(folder / "nsys", (
        f'if [ "$1" = export ]; then cp "{DATA / "h100_e2e_torch_fp32.sqlite"}" "$6"; exit 0; fi\n'
        f'printf "%s\\n" "$@" > "{folder}/argv.txt"\npwd > "{folder}/cwd.txt"\n'
        'shift\nout=""\n'
        'while [ $# -gt 0 ]; do case "$1" in --output=*) out="${1#--output=}"; shift;; '
        '--*) shift;; *) break;; esac; done\n'
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
    (root / "pytest.ini").write_text("[pytest]\naddopts = -p no:randomly --benchmark-autosave\n"
                                     "perf_names = names.txt\n")
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


@pytest.mark.parametrize("markexpr, asked", [
    ("nsys", True), ("ci or nsys", True), ("(nsys)", True), ("not ci and nsys", True), ("nsys and not gpu", True),
    ("not nsys", False), ("not  (nsys)", False), ("ci", False), (None, False),
    ("nsys_slow", False), ("not nsys_slow", False), ("mynsys or ci", False)])
def test_captures_are_asked_for_by_a_marker_expression_naming_nsys_itself(markexpr: str | None, asked: bool) -> None:
    from types import SimpleNamespace

    from perf.roles.nsys import nsys_selected

    assert nsys_selected(SimpleNamespace(nsys=False, nsys_child=False), markexpr) is asked  # type: ignore[arg-type]
