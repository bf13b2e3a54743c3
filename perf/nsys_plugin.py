"""pytest hooks of the Nsight Systems captures (``pytest perf -m nsys`` or ``--perf-nsys``).

In the parent run, each test marked ``nsys`` is not run in-process: it runs again in a child pytest under
``nsys profile --capture-range=cudaProfilerApi``, where the ``measured_region`` fixture brackets only the
measured calls with ``cudaProfilerStart``/``Stop`` and switches NVTX ranges on. The parent test passes, fails
or skips with the child; after a passing child, ``nsys stats`` is exported and summarised (top kernels, time
per NVTX stage, host<->device copies, GPU idle fraction in the measured region), saved as ``summary.json`` /
``summary.md`` beside the ``.nsys-rep`` and printed in the terminal summary. Without the marker selection,
marked tests run as usual.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import pytest

from perf.nsys import NSYS_CHILD_FLAG
from perf.subject import SETTINGS as SUBJECT_SETTINGS

NSYS_CHILD_FLAG_DEST = "perf_nsys_child"
SUMMARIES = pytest.StashKey[list[tuple[str, Any]]]()
#: Options forwarded from the parent to each child run (dest -> flag).
_FORWARDED = {
    "perf_device": "--perf-device", "perf_backends": "--perf-backends", "perf_batch_sizes": "--perf-batch-sizes",
    "perf_precisions": "--perf-precisions", "perf_cache_dir": "--perf-cache-dir", "perf_frames": "--perf-frames",
    "perf_reports_dir": "--perf-reports-dir",
}  # fmt: skip


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("perf").addoption(NSYS_CHILD_FLAG, dest=NSYS_CHILD_FLAG_DEST, action="store_true",
                                      default=False, help=argparse.SUPPRESS)


def nsys_selected(config: pytest.Config) -> bool:
    """True in the parent run when captures were asked for: ``--perf-nsys`` or a ``-m`` selecting ``nsys``."""
    if config.getoption(NSYS_CHILD_FLAG_DEST):
        return False
    markexpr = (config.getoption("markexpr", "") or "").replace(" ", "")
    return bool(config.getoption("perf_nsys")) or ("nsys" in markexpr and "notnsys" not in markexpr)


def pytest_configure(config: pytest.Config) -> None:
    config.stash[SUMMARIES] = []


def _forwarded_args(config: pytest.Config) -> list[str]:
    args = []
    for dest, flag in _FORWARDED.items():
        value = config.getoption(dest, None)
        if value in (None, "", False):
            continue
        if isinstance(value, tuple):
            value = ",".join(str(v) for v in value)
        args.append(f"{flag}={value}")
    from perf.plugin import PERF_SESSION

    subject = config.stash[PERF_SESSION].subject  # the model and video as resolved (absolute paths)
    for name, _, _ in SUBJECT_SETTINGS:
        if getattr(subject, name) is not None:
            args.append(f"--perf-{name.replace('_', '-')}={getattr(subject, name)}")
    # the child saves nothing and compares nothing: the parent's run is the one of record
    return args + ["--benchmark-disable-gc", "-p", "no:randomly"]


def _profile(item: pytest.Item) -> None:
    from perf.nsys import NsysError, find_nsys, nsys_not_found_reason, run_child_under_nsys, summarize_report
    from perf.fixtures.reporting import reports_dir

    config = item.config
    explicit = config.getoption("perf_nsys_path")
    nsys = find_nsys(explicit if explicit != "nsys" else None, os.environ)
    if nsys is None:
        pytest.skip(nsys_not_found_reason(explicit if explicit != "nsys" else None, os.environ))
    try:
        result = run_child_under_nsys(nsys, item.nodeid, config.rootpath, _forwarded_args(config),
                                      report_root=reports_dir(config) / "nsys")
        if result.outcome == "skipped":
            pytest.skip(result.skip_reason or "skipped in the nsys child")
        if result.outcome == "failed":
            pytest.fail(f"child test failed under nsys (log: {result.log_path})\n{result.output_tail}", pytrace=False)
        summary = summarize_report(nsys, result.report)
    except NsysError as exc:
        pytest.fail(str(exc), pytrace=False)
    config.stash[SUMMARIES].append((item.nodeid, summary))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    if item.get_closest_marker("nsys") is None or not nsys_selected(item.config):
        return None
    ihook = item.ihook
    ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    call = pytest.CallInfo.from_call(lambda: _profile(item), when="call")
    report = pytest.TestReport.from_item_and_call(item, call)
    ihook.pytest_runtest_logreport(report=report)
    ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
    return True


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    summaries = config.stash.get(SUMMARIES, [])
    if not summaries:
        return
    terminalreporter.write_sep("=", "nsys summaries")
    for nodeid, summary in summaries:
        terminalreporter.write_line(f"## {nodeid}")
        terminalreporter.write_line(summary.to_markdown())
        if summary.report:
            terminalreporter.write_line(f"saved beside {summary.report}: summary.md, summary.json")
