"""The critical path and waits of an nsys capture (`perf.profile.critical_path`), on SQLite exports: hand-made ones
whose path is known by construction, random ones (the path tiles the region), and trimmed real H100 captures
(tests/data/nsys/*.sqlite, see its README)."""

from __future__ import annotations

import dataclasses
import json
import sqlite3
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nsys_capture import DATA, MAIN, MS, PID, US, HandMade
from perf.profile.capture_db import (
    Capture,
    CaptureError,
    GpuOp,
    HostCall,
    NvtxRange,
    Region,
    ThreadInfo,
    read_capture,
)
from perf.profile.critical_path import CriticalPathSummary, Segment, analyze, summarize_path
from perf.profile.timeline import innermost_pieces


def critical_path_summary(sqlite_path: Path) -> CriticalPathSummary:
    """The summarized critical path of the nsys SQLite export at ``sqlite_path``, as `summarize_report` makes it."""
    return summarize_path(analyze(read_capture(sqlite_path)))


def _launch_then_sync(c: HandMade) -> HandMade:
    """Host work 2 ms (preprocess), a launch (10 us), a 5 ms kernel starting 40 us after the launch returned, an
    event record, a cudaEventSynchronize until 10 us after the kernel ended, then 1 ms of postprocess."""
    main = c.thread("python", PID)
    c.nvtx(main, "measured", 0, 8_060 * US)
    c.nvtx(main, "preprocess", 0, 2 * MS)
    c.nvtx(main, "infer", 2 * MS, 7_060 * US)
    c.nvtx(main, "postprocess", 7_060 * US, 8_060 * US)
    launch = c.cuda(main, "cudaLaunchKernel_v7000", 2_000 * US, 2_010 * US)
    c.kernel(launch, 2_050 * US, 7_050 * US)
    record = c.cuda(main, "cudaEventRecord", 2_010 * US, 2_020 * US)
    c.event_sync(record, c.cuda(main, "cudaEventSynchronize_v3020", 2_020 * US, 7_060 * US))
    return c


# --- hand-made captures: the path known by construction ------------------------------------------------------------


def test_launch_kernel_sync_path_is_host_then_launch_then_gpu_then_host(tmp_path: Path) -> None:
    path = analyze(read_capture(_launch_then_sync(HandMade()).write(tmp_path / "c.sqlite")))
    assert [(s.kind, s.name, s.start_ns, s.end_ns) for s in path.segments] == [
        ("host", "preprocess", 0, 2 * MS),
        ("host", "infer", 2 * MS, 2_010 * US),  # the launch call itself
        ("launch", "cudaLaunchKernel", 2_010 * US, 2_050 * US),
        ("gpu", "conv_kernel", 2_050 * US, 7_050 * US),
        ("host", "infer", 7_050 * US, 7_060 * US),  # cudaEventSynchronize returning
        ("host", "postprocess", 7_060 * US, 8_060 * US),
    ]  # fmt: skip
    assert [s.where for s in path.segments] == ["python:4242"] * 3 + ["stream 7"] + ["python:4242"] * 2
    [wait] = path.waits
    assert (wait.name, wait.kind, wait.duration_ns, wait.released_by) == (
        "cudaEventSynchronize", "gpu", 5_040 * US, "conv_kernel (stream 7)")  # fmt: skip


def test_summary_shares_add_up_to_the_region_and_say_what_bounded_it(tmp_path: Path) -> None:
    summary = critical_path_summary(_launch_then_sync(HandMade()).write(tmp_path / "c.sqlite"))
    assert summary.region_ns == 8_060 * US and summary.region["source"] == "NVTX range 'measured'"
    assert sum(s.ns for s in summary.shares) == summary.region_ns == sum(summary.by_kind.values())
    assert summary.by_kind == {"host": 3_020 * US, "launch": 40 * US, "gpu": 5 * MS}
    assert summary.bounded_by() == ("Bounded by: host CPU 37.5 % (preprocess 24.8 %, postprocess 12.4 %, ...), "
                                    "GPU 62.0 % (conv_kernel 62.0 %), launch latency 0.5 %")  # fmt: skip
    [thread] = summary.threads
    assert (thread.where, thread.active_ns, thread.gpu_wait_ns, thread.os_wait_ns) == ("python:4242", 8_060 * US,
                                                                                      5_040 * US, 0)  # fmt: skip
    assert thread.busy_ns == 3_020 * US and thread.on_path_ns == 3_020 * US
    [stream] = summary.streams
    assert (stream.where, stream.busy_ns, stream.idle_ns, stream.on_path_ns) == ("stream 7", 5 * MS, 3_060 * US, 5 * MS)


def test_queued_kernels_continue_on_their_stream(tmp_path: Path) -> None:
    c = HandMade()
    main = c.thread("python", PID)
    c.nvtx(main, "measured", 0, 10 * MS)
    first, second = c.cuda(main, "cudaLaunchKernel", 1 * MS, 1_010 * US), c.cuda(main, "cudaLaunchKernel",
                                                                                   1_020 * US, 1_030 * US)
    c.kernel(first, 1_015 * US, 5 * MS, "void a_kernel()")
    c.kernel(second, 5_001 * US, 9 * MS, "void b_kernel()")  # launched long before a_kernel ended: queued
    c.cuda(main, "cudaDeviceSynchronize", 1_040 * US, 9_005 * US)
    path = analyze(read_capture(c.write(tmp_path / "c.sqlite")))
    assert [(s.kind, s.name, s.start_ns, s.end_ns) for s in path.segments] == [
        ("host", "python:4242 (no range)", 0, 1_010 * US),
        ("launch", "cudaLaunchKernel", 1_010 * US, 1_015 * US),
        ("gpu", "a_kernel", 1_015 * US, 5 * MS),
        ("gpu", "b_kernel", 5 * MS, 9 * MS),  # the 1 us gap after a_kernel counts with b_kernel
        ("host", "python:4242 (no range)", 9 * MS, 10 * MS),
    ]  # fmt: skip


def test_cross_thread_wait_jumps_to_the_thread_that_woke_it(tmp_path: Path) -> None:
    c = HandMade()
    main, worker = c.thread("python", PID), c.thread("python", PID + 1)
    c.nvtx(main, "measured", 0, 6 * MS)
    c.os(main, "pthread_cond_wait", 1 * MS, 5 * MS)
    c.nvtx(worker, "decode", 500 * US, 4_900 * US)
    c.os(worker, "pthread_cond_signal", 4_900 * US, 4_950 * US)
    path = analyze(read_capture(c.write(tmp_path / "c.sqlite")))
    assert [(s.kind, s.where, s.name, s.start_ns, s.end_ns) for s in path.segments] == [
        ("host", "python:4242", "python:4242 (no range)", 0, 500 * US),  # before the worker's first event
        ("host", "python:4243", "decode", 500 * US, 4_900 * US),
        ("host", "python:4243", "python:4243 (no range)", 4_900 * US, 4_950 * US),
        ("wait", "python:4242", "pthread_cond_wait (wake-up)", 4_950 * US, 5 * MS),
        ("host", "python:4242", "python:4242 (no range)", 5 * MS, 6 * MS),
    ]  # fmt: skip
    assert [(w.where, w.name, w.released_by) for w in path.waits] == [("python:4242", "pthread_cond_wait",
                                                                        "python:4243")]  # fmt: skip


def test_wait_nobody_released_stays_on_the_path_as_unresolved(tmp_path: Path) -> None:
    c = HandMade()
    main = c.thread("python", PID)
    c.nvtx(main, "measured", 0, 3 * MS)
    c.os(main, "sem_wait", 1 * MS, 2 * MS)
    c.os(main, "nanosleep", 2_200 * US, 2_700 * US)
    summary = critical_path_summary(c.write(tmp_path / "c.sqlite"))
    assert {(s.kind, s.name): s.ns for s in summary.shares} == {
        ("host", "python:4242 (no range)"): 1_500 * US, ("wait", "sem_wait (unresolved)"): 1 * MS,
        ("wait", "nanosleep"): 500 * US}  # fmt: skip
    assert [(w.name, w.released_by) for w in summary.top_waits] == [("sem_wait", None), ("nanosleep", None)]
    assert summary.threads[0].os_wait_ns == 1_500 * US and summary.threads[0].busy_ns == 1_500 * US


def test_missing_tables_are_empty_data(tmp_path: Path) -> None:
    c = _launch_then_sync(HandMade())
    only_host = read_capture(c.write(tmp_path / "host.sqlite", ("NVTX_EVENTS", "ThreadNames")))
    assert only_host.gpu_ops == [] and only_host.cuda_calls == [] and only_host.region.length_ns == 8_060 * US
    summary = summarize_path(analyze(only_host))
    assert summary.by_kind == {"host": 8_060 * US} and summary.streams == []
    assert "no OS runtime calls traced" in summary.notes[0]
    nothing = critical_path_summary(c.write(tmp_path / "nothing.sqlite", ()))
    assert nothing.segments == 0 and nothing.region["source"] == "nothing traced"
    assert "Bounded by: nothing traced" in nothing.to_markdown()


def test_without_the_measured_range_the_region_spans_the_gpu_work(tmp_path: Path) -> None:
    c = _launch_then_sync(HandMade())
    c.rows["NVTX_EVENTS"] = [row for row in c.rows["NVTX_EVENTS"] if row[3] != "measured"]
    capture = read_capture(c.write(tmp_path / "c.sqlite"))
    assert capture.region == Region(2_050 * US, 7_050 * US, "first to last GPU activity")
    assert capture.region_thread == MAIN  # the thread with the most CUDA API time
    path = analyze(capture)
    assert [(s.kind, s.start_ns, s.end_ns) for s in path.segments] == [("gpu", 2_050 * US, 7_050 * US)]


@pytest.mark.parametrize("content", [b"", b"not a database at all\n" * 40, b"SQLite format 3\x00" + b"\x00" * 200])
def test_a_file_that_is_no_nsys_export_gives_one_line_naming_it(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "capture.sqlite"
    bad.write_bytes(content)
    with pytest.raises(CaptureError) as info:
        read_capture(bad)
    assert "\n" not in str(info.value) and str(bad) in str(info.value)


def test_an_sqlite_file_of_something_else_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.sqlite"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE t (x INTEGER)")
    with pytest.raises(CaptureError, match="not an Nsight Systems export"):
        read_capture(other)
    with pytest.raises(CaptureError, match="no such file"):
        read_capture(tmp_path / "absent.sqlite")


def test_innermost_nvtx_range_names_each_piece() -> None:
    ranges = [(0, 100, "infer"), (10, 60, "torch.infer"), (20, 30, "conv"), (120, 130, "write")]
    assert innermost_pieces(ranges) == [(0, 10, "infer"), (10, 20, "torch.infer"), (20, 30, "conv"),
                                        (30, 60, "torch.infer"), (60, 100, "infer"), (120, 130, "write")]  # fmt: skip


def test_summary_json_round_trips_and_markdown_lists_the_tables(tmp_path: Path) -> None:
    summary = critical_path_summary(_launch_then_sync(HandMade()).write(tmp_path / "c.sqlite"))
    again = CriticalPathSummary.from_dict(json.loads(json.dumps(dataclasses.asdict(summary))))
    assert again == summary
    md = summary.to_markdown()
    assert md.startswith("#### Critical path: c.sqlite") and summary.bounded_by() in md
    for heading in ("| Thread / stream |", "| Longest on the path |", "| Longest waits |", "| Waits in all |"):
        assert heading in md
    assert "| cudaEventSynchronize | python:4242 | 5.040 | conv_kernel (stream 7) |" in md


# --- random captures: the invariants ------------------------------------------------------------------------------

_T = st.integers(0, 1000)


@st.composite
def captures(draw: st.DrawFn) -> Capture:
    """1-3 threads with random CUDA launches, syncs and OS waits, 1-2 streams of kernels, nested NVTX ranges;
    with or without a region thread."""
    end = 1000 * US
    gtids = [(PID << 24) | (PID + i) for i in range(draw(st.integers(1, 3)))]
    calls, oscalls, ops, ranges = [], [], [], [NvtxRange(0, end, gtids[0], "measured")]
    for corr in range(draw(st.integers(0, 12))):
        a = draw(_T) * US
        b = a + draw(st.integers(1, 200)) * US
        gtid = draw(st.sampled_from(gtids))
        name = draw(st.sampled_from(["cudaLaunchKernel", "cudaStreamSynchronize", "cudaMemcpyAsync"]))
        calls.append(HostCall(a, b, gtid, name, corr))
        if name != "cudaStreamSynchronize" and draw(st.booleans()):
            start = a + draw(st.integers(-5, 300)) * US
            ops.append(GpuOp(start, start + draw(st.integers(1, 300)) * US, draw(st.sampled_from([7, 13])), "k",
                             correlation_id=corr))  # fmt: skip
    for _ in range(draw(st.integers(0, 8))):
        a = draw(_T) * US
        name = draw(st.sampled_from(["pthread_cond_wait", "sem_post", "poll", "nanosleep", "read"]))
        oscalls.append(HostCall(a, a + draw(st.integers(1, 400)) * US, draw(st.sampled_from(gtids)), name))
    for gtid in gtids:
        a = draw(_T) * US
        ranges.append(NvtxRange(a, a + draw(st.integers(1, 300)) * US, gtid, "stage"))
    return Capture(Path("random.sqlite"), Region(0, end, "test"), {g: ThreadInfo(g, "python") for g in gtids},
                   sorted(calls, key=lambda c: c.start_ns), sorted(oscalls, key=lambda c: c.start_ns),
                   sorted(ops, key=lambda o: o.start_ns), sorted(ranges, key=lambda r: (r.start_ns, -r.end_ns)),
                   region_thread=draw(st.sampled_from([gtids[0], None])))  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(captures())
def test_path_segments_tile_the_region_exactly(capture: Capture) -> None:
    path = analyze(capture)
    region = capture.region
    assert path.segments[0].start_ns == region.start_ns and path.segments[-1].end_ns == region.end_ns
    for before, after in zip(path.segments, path.segments[1:]):
        assert before.end_ns == after.start_ns
    assert all(s.duration_ns > 0 for s in path.segments)
    assert not any(s.name == "(walk stopped)" for s in path.segments)  # no cycle ran out the step budget
    summary = summarize_path(path)
    assert sum(s.ns for s in summary.shares) == region.length_ns
    assert sum(s.share for s in summary.shares) == pytest.approx(1.0)


@settings(max_examples=200, deadline=None)
@given(captures())
def test_busy_and_waiting_add_up_for_every_stream_and_thread(capture: Capture) -> None:
    path = analyze(capture)
    for stream in path.streams:
        assert stream.busy_ns + stream.idle_ns == capture.region.length_ns
        assert stream.on_path_ns <= capture.region.length_ns  # with the short gaps between queued work
    for thread in path.threads:
        assert thread.busy_ns + thread.gpu_wait_ns + thread.os_wait_ns == thread.active_ns
        assert min(thread.busy_ns, thread.gpu_wait_ns, thread.os_wait_ns) >= 0
        assert thread.active_ns <= capture.region.length_ns


# --- trimmed H100 captures (tests/data/nsys/*.sqlite) -------------------------------------------------------------

REAL = sorted(DATA.glob("h100_*.sqlite"))


@pytest.mark.parametrize("sqlite", REAL, ids=lambda p: p.stem)
def test_real_capture_paths_tile_their_region(sqlite: Path) -> None:
    path = analyze(read_capture(sqlite))
    assert path.segments[0].start_ns == path.capture.region.start_ns
    assert all(a.end_ns == b.start_ns for a, b in zip(path.segments, path.segments[1:]))
    assert path.segments[-1].end_ns == path.capture.region.end_ns
    assert not any(s.name in ("(walk stopped)", "(no dependency found)") for s in path.segments)


def test_sequential_eager_loop_is_bounded_by_its_host_stages() -> None:
    summary = critical_path_summary(DATA / "h100_e2e_torch_fp32.sqlite")  # eager torch fp32, 4 frames
    region = summary.region_ns
    assert summary.by_kind["host"] > 0.95 * region and "gpu" not in summary.by_kind  # launch-bound: GPU ~95 % idle
    host = [s.name for s in summary.shares if s.kind == "host"]
    assert host[:2] == ["torch.infer", "write"] and {"read", "preprocess", "postprocess"} <= set(host)
    assert summary.threads[0].where == "python:565" and summary.threads[0].on_path_ns > 0.95 * region
    gpu_waits = [w for w in summary.wait_totals if w["kind"] == "gpu"]
    assert [(w["name"], w["calls"]) for w in gpu_waits] == [("cudaEventSynchronize", 12)]  # the timers' syncs
    assert summary.streams[0].busy_ns < 0.1 * region


def test_graph_runner_loop_has_its_kernels_on_the_path() -> None:
    path = analyze(read_capture(DATA / "h100_e2e_torch_graph_fp32.sqlite"))  # CUDA graph, 3 frames
    summary = summarize_path(path)
    assert 0.05 * summary.region_ns < summary.by_kind["gpu"] < 0.1 * summary.region_ns
    assert any(s.kind == "gpu" and s.name.startswith("sm80_xmma_fprop") for s in path.segments)
    released = [w.released_by for w in path.waits if w.kind == "gpu" and w.released_by]
    assert released and all(r.endswith("(stream 13)") for r in released)


def test_pipelined_loop_spreads_its_path_over_its_threads() -> None:
    summary = critical_path_summary(DATA / "h100_pipelined_torch_graph_fp16.sqlite")  # 4 frames, 3 threads
    on_path = {t.where for t in summary.threads if t.on_path_ns > 0.01 * summary.region_ns}
    assert {"python:2092", "python:2429", "python:2430"} <= on_path  # calling, reader and writer threads
    waiting = {w.where for w in summary.top_waits}
    assert {"python:2429"} <= waiting and any(w["name"] == "sem_clockwait" and w["threads"] >= 2
                                              for w in summary.wait_totals)  # fmt: skip
    assert [w["name"] for w in summary.wait_totals if w["kind"] == "gpu"] == ["cudaStreamSynchronize"]
    assert summary.by_kind["wait"] > 0.03 * summary.region_ns  # wake-ups of the queue waits


def test_real_summary_markdown_is_short(tmp_path: Path) -> None:
    for sqlite in REAL:
        md = critical_path_summary(sqlite).to_markdown()
        assert len(md.splitlines()) < 60 and max(len(line) for line in md.splitlines()) < 400


def test_segment_is_a_plain_record() -> None:
    s = Segment("host", "python:1", "write", 10, 25)
    assert s.duration_ns == 15 and dataclasses.asdict(s)["name"] == "write"


# --- the suite's HTML/markdown report -----------------------------------------------------------------------------


def test_report_lists_each_capture_with_what_bounded_it(tmp_path: Path) -> None:
    from perf.profile.nsys_summary import summarize, write_summary
    from perf.report.captures import load_captures
    from perf.report.html import render, to_html
    from perf.report.inputs import ReportInputs

    folder = tmp_path / "reports" / "nsys" / "test_end_to_end.py-test_end_to_end-torch-fp32-1234abcd"
    folder.mkdir(parents=True)
    summary = summarize(read_capture(DATA / "h100_e2e_torch_fp32.sqlite"), report_path=folder / "capture.nsys-rep")
    summary.critical_path = critical_path_summary(DATA / "h100_e2e_torch_fp32.sqlite")
    write_summary(summary, folder)
    (tmp_path / "reports" / "nsys" / "broken").mkdir()
    (tmp_path / "reports" / "nsys" / "broken" / "summary.json").write_text("{not json")
    warnings: list[str] = []
    rows = load_captures(tmp_path / "reports", warnings)
    assert [r.name for r in rows] == [folder.name] and rows[0].critical_path == summary.critical_path
    assert len(warnings) == 1 and "broken" in warnings[0]
    report = render(ReportInputs(captures=rows))
    assert "### Nsight Systems captures" in report.markdown
    line = next(x for x in report.markdown.splitlines() if x.startswith(f"| {folder.name} |"))
    assert "host CPU 99.6 % (torch.infer 34.7 %" in line and "pthread_cond_wait on python:746" in line
    page = to_html(report)
    assert "<h2>Nsight Systems captures</h2>" in page and "critical path and waits</summary>" in page
