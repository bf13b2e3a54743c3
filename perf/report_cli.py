"""``perf-report``: ``summary.md`` and ``index.html`` from the saved runs; bad input is one line naming the file,
exit status 2, nothing written (docs/method.md, section 9)."""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from detector.argtypes import OneLineParser
from detector.errors import catch_sigterm, escape_stdout, interrupted, log_to_stderr
from perf.options import parse_store, parse_threshold
from perf.report.changes import DEFAULT_THRESHOLD
from perf.report.html import build_report
from perf.runs import HistoryError

PROG = "perf-report"


def build_parser() -> OneLineParser:
    parser = OneLineParser(
        prog=PROG, description="Markdown summary and HTML report of the perf suite.", allow_abbrev=False)
    add = parser.add_argument
    add("--storage", type=Path, default=Path(".benchmarks"),
        help="pytest-benchmark storage folder (or one machine's folder in it). Default: .benchmarks.")
    add("--store", type=parse_store, default=None, help="Read the runs from this history store (a path, "
        "sqlite:///path or postgresql://...) instead of --storage. Default: the storage folder.")
    add("--reports", type=Path, default=None, help="The suite's reports folder (perf-report.json: end-to-end "
        "stages, parity). Default: reports, when it exists.")
    add("--out", type=Path, default=Path("report"), help="Folder for summary.md and index.html. Default: report.")
    add("--machine-id", default=None, help="Machine folder of the storage to report. Default: the one with the "
        "newest run.")
    add("--verdicts", type=Path, default=None, help="JSON file of compare verdicts per benchmark. Default: "
        "perf-compare.json (what --perf-compare writes) in the reports folder, when there.")
    add("--change-threshold", type=parse_threshold, default=DEFAULT_THRESHOLD, metavar="PCT",
        help="Mark a run in the history when its median moved more than this vs the previous run. Default: "
        f"{DEFAULT_THRESHOLD:.0%}.".replace("%", "%%"))  # argparse formats help with %
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    reports = args.reports or (Path("reports") if Path("reports").is_dir() else None)
    log_to_stderr(logging.WARNING, logging.Formatter("%(message)s"))
    escape_stdout()
    restore = catch_sigterm()  # SIGTERM stops it as Ctrl-C does: one line, no file half written
    try:
        written, warnings = build_report(args.storage, reports, args.out, machine_id=args.machine_id,
                                         verdicts=args.verdicts, threshold=args.change_threshold,
                                         store=None if args.store in (None, "none") else args.store)
    except (HistoryError, OSError) as e:  # bad or unreadable input (build_report names it); an unwritable --out
        problem = str(e) if isinstance(e, HistoryError) else f"cannot write to '{args.out}': {e.strerror or e}"
        print(f"{PROG}: error: {problem}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        return interrupted(PROG, e, "; no file is left half written")
    finally:
        restore()
    for warning in warnings:
        print(f"{PROG}: warning: {warning}", file=sys.stderr)
    for path in written:
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
