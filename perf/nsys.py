"""Nsight Systems captures of single tests: find nsys, run a test in a child pytest under ``nsys profile``,
export ``nsys stats`` reports as CSV and boil them down to a short summary (JSON + markdown beside the report).

The parent pytest process never loads CUDA for a profiled test: it runs

    nsys profile --trace=cuda,nvtx,osrt --capture-range=cudaProfilerApi --capture-range-end=stop ...
        python -m pytest <nodeid> -p no:cacheprovider --perf-nsys-child --junitxml=<dir>/child-junit.xml

and the child (which sees `NSYS_CHILD_FLAG`) runs the test with NVTX ranges on, bracketing only the measured region
with cudaProfilerStart/Stop (`detector.timing.profiler_capture`), so engine builds and warm-up stay out of the report.
The child's JUnit XML says whether the *test* passed, failed or skipped; a missing report or an nsys error message
means *nsys* failed, which raises `NsysError` quoting the end of nsys's output.

CSV facts (Nsight Systems stats reports, ``--format csv --output <base>`` writes ``<base>_<report>.csv``): times are
in ns ("Total Time (ns)", "Start (ns)"), sizes in decimal MB with 3 decimals ("Total (MB)", "Bytes (MB)"), NVTX
ranges are named ``<domain>:<name>`` (``:infer`` in the default domain) and are host (CPU) time. A report with no
data prints "SKIPPED: ... does not contain ..." and writes no file; `export_stats` leaves it out and the summary
treats it as an empty table. The ``parse_*`` functions (through `read_table`) skip anything nsys printed before
the header row and read units from the headers.
"""

from __future__ import annotations

import csv
import glob
import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from detector.errors import DetectorError
from detector.fileio import atomic_write_text
from detector.timing import STAGES
from perf.profiling import MEASURED_RANGE

log = logging.getLogger(__name__)

#: The flag the parent passes to the child pytest; the plugin registers it (store_true, hidden from --help is fine).
NSYS_CHILD_FLAG = "--perf-nsys-child"
#: Where captures go, relative to the rootdir, unless the caller chooses otherwise (reports/ is git-ignored).
DEFAULT_REPORT_ROOT = Path("reports") / "nsys"
#: Install locations searched after --nsys-path, $NSYS and PATH, in this order; newest version first within each.
NSYS_GLOBS = (
    "opt/nvidia/nsight-systems/*/bin/nsys",
    "opt/nvidia/nsight-systems/*/target-linux-x64/nsys",
    "usr/local/cuda*/bin/nsys",
    "opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys",
)
NSYS_NOT_FOUND_REASON = (
    "nsys (Nsight Systems) not found: looked at --nsys-path, $NSYS, PATH, /opt/nvidia/nsight-systems/*/, "
    "/usr/local/cuda*/bin and /opt/nvidia/nsight-compute/*/host/target-linux-x64; "
    "point at it with --nsys-path=/path/to/nsys or NSYS=/path/to/nsys"
)
#: nsys output that means its importer or exporter broke (the report is missing or incomplete).
_NSYS_FAILURE = re.compile(
    r"error while loading shared libraries|cannot open shared object file|Importer error|Importation failed"
    r"|QdstrmImporter.*(?:error|fail)|Failed to create .*\.nsys-rep|Report file .* could not be generated",
    re.IGNORECASE,
)
_TAIL_LINES = 30
#: The ``nsys stats`` reports `export_stats` asks for (Nsight Systems 2023.2+ names).
STATS_REPORTS = (
    "cuda_gpu_kern_sum", "cuda_api_sum", "nvtx_sum", "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum",
    "cuda_gpu_trace", "nvtx_pushpop_trace",
)  # fmt: skip


class NsysError(DetectorError):
    """nsys itself failed (not the profiled test); the message ends with the last lines nsys printed."""


class NsysParseError(DetectorError):
    """An ``nsys stats`` CSV without the expected header row (another report, or a changed format)."""


def _tail(text: str, lines: int = _TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def _quoted(text: str, lines: int = _TAIL_LINES) -> str:
    tail = _tail(text, lines)
    return "\n".join(f"    > {line}" for line in tail.splitlines()) if tail else "    > (no output)"


def nsys_error(headline: str, output: str) -> NsysError:
    """An `NsysError`: ``headline`` (one line), then the last lines of ``output`` quoted with ``> ``."""
    return NsysError(f"{headline}\n  last lines of nsys output:\n{_quoted(output)}")


# --- finding nsys ---------------------------------------------------------------------------------------------------


def _executable(path: Path) -> Path | None:
    if path.is_dir():
        path = path / "nsys"
    return path if path.is_file() and os.access(path, os.X_OK) else None


def _version_key(path: str) -> tuple[tuple[int, int | str], ...]:
    """Natural sort key: ``2025.3.1`` > ``2024.10.2`` > ``2024.4.2`` (numbers compared as numbers)."""
    return tuple((0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"(\d+)", path) if p)


def _given(value: str, env: Mapping[str, str]) -> Path | None:
    """A --nsys-path / $NSYS value: a path (file or folder holding nsys), or a bare name looked up on PATH."""
    if os.sep not in value and not Path(value).exists():
        found = shutil.which(value, path=env.get("PATH", ""))
        return Path(found) if found else None
    return _executable(Path(value).expanduser())


def find_nsys(explicit: str | None, env: Mapping[str, str] = os.environ, *, root: Path = Path("/")) -> Path | None:
    """The nsys executable: ``explicit`` (--nsys-path), then ``$NSYS``, then ``PATH``, then `NSYS_GLOBS` under ``root``.

    A given path (or folder holding ``nsys``) that is not an executable yields None rather than falling through:
    the user asked for that one (`nsys_not_found_reason` says so). The bare name ``nsys`` (the plugin's default)
    is a PATH lookup that does fall through to the install folders. Globs list the newest version first.
    """
    for value in (explicit, env.get("NSYS")):
        if value and value != "nsys":
            return _given(value, env)
    found = shutil.which("nsys", path=env.get("PATH", ""))
    if found:
        return Path(found)
    for pattern in NSYS_GLOBS:
        for match in sorted(glob.glob(str(root / pattern)), key=_version_key, reverse=True):
            if _executable(Path(match)):
                return Path(match)
    return None


def nsys_not_found_reason(explicit: str | None, env: Mapping[str, str] = os.environ) -> str:
    """Why `find_nsys` returned None, naming a bad --nsys-path / $NSYS value when there was one."""
    if explicit and explicit != "nsys":
        return f"--nsys-path {explicit!r} is not an nsys executable (nor a folder holding one); {NSYS_NOT_FOUND_REASON}"
    if env.get("NSYS") and env["NSYS"] != "nsys":
        return f"NSYS={env['NSYS']!r} is not an nsys executable (nor a folder holding one); {NSYS_NOT_FOUND_REASON}"
    return NSYS_NOT_FOUND_REASON


# --- profiling a test in a child process ----------------------------------------------------------------------------


def nsys_profile_command(
    nsys: str | os.PathLike[str], output_base: str | os.PathLike[str], child_argv: Sequence[str]
) -> list[str]:
    """``nsys profile`` argv that records ``child_argv`` between cudaProfilerStart and the first cudaProfilerStop.

    The report is ``<output_base>.nsys-rep`` (overwritten). CPU sampling and context-switch tracing are off to keep
    the capture light; CUDA, NVTX and OS-runtime calls are traced, and the kernels inside CUDA graphs one by one
    (``--cuda-graph-trace=node``; the default traces each graph launch as a whole and hides its kernels).
    """
    return [
        os.fspath(nsys), "profile",
        "--trace=cuda,nvtx,osrt",
        "--capture-range=cudaProfilerApi",
        "--capture-range-end=stop",
        "--cuda-graph-trace=node",
        "--force-overwrite=true",
        "--sample=none",
        "--cpuctxsw=none",
        f"--output={os.fspath(output_base)}",
        *child_argv,
    ]  # fmt: skip


def report_dir_for(nodeid: str, root: str | os.PathLike[str]) -> Path:
    """``root/<safe name>``: the test id with anything but ``[A-Za-z0-9._-]`` replaced, plus a short hash of the id.

    ``perf/test_x.py::test_infer[torch-cuda-fp16-8]`` -> ``root/test_x.py-test_infer-torch-cuda-fp16-8-<8 hex>``.
    The hash keeps ids that differ only in replaced characters apart; the name stays under 120 characters.
    """
    module, _, rest = nodeid.partition("::")
    readable = f"{Path(module).name}-{rest}" if rest else Path(module).name
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", readable).strip("-.") or "test"
    digest = hashlib.sha256(nodeid.encode("utf-8")).hexdigest()[:8]
    return Path(root) / f"{safe[:110]}-{digest}"


@dataclass
class NsysResult:
    """What one ``nsys profile`` child run produced.

    ``outcome`` is the child test's: "passed", "failed" (also: errored, or no test collected) or "skipped"
    (``skip_reason`` says why). ``reports`` are the ``.nsys-rep`` files written (one with --capture-range-end=stop).
    """

    nodeid: str
    command: list[str]
    returncode: int
    outcome: str
    report_dir: Path
    reports: list[Path] = field(default_factory=list)
    output_tail: str = ""
    skip_reason: str | None = None
    log_path: Path | None = None

    @property
    def report(self) -> Path | None:
        """The first ``.nsys-rep`` (None if the child never reached cudaProfilerStart)."""
        return self.reports[0] if self.reports else None


def _junit_outcome(path: Path) -> tuple[str, str | None] | None:
    """("passed"|"failed"|"skipped", skip reason) from the child's JUnit XML; None if it is missing or unreadable."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    cases = list(root.iter("testcase"))
    if not cases or any(case.find("failure") is not None or case.find("error") is not None for case in cases):
        return "failed", None
    if any(node.tag == "error" for node in root.iter()):
        return "failed", None
    skipped = [case.find("skipped") for case in cases]
    if all(node is not None for node in skipped):
        return "skipped", "; ".join(sorted({node.get("message", "") for node in skipped if node is not None}))
    return "passed", None


def run_child_under_nsys(
    nsys: str | os.PathLike[str],
    nodeid: str,
    rootdir: str | os.PathLike[str],
    extra_pytest_args: Sequence[str] = (),
    report_root: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    timeout_s: float = 1800.0,
) -> NsysResult:
    """Run test ``nodeid`` in a child ``python -m pytest`` under ``nsys profile``; report into `report_dir_for`.

    ``extra_pytest_args`` are appended to the child's pytest arguments (forward the ``--perf-*`` options there).
    ``report_root`` defaults to ``rootdir/reports/nsys``. The combined output is saved as ``nsys-run.log`` in the
    report folder. A failing or skipped *test* is returned (``outcome``; its own messages are never taken for nsys
    errors); `NsysError` is raised when *nsys* failed: the child never finished (no JUnit XML), or after a passing
    test nsys printed an importer/loader error, exited non-zero, or left no ``.nsys-rep``.
    """
    rootdir = Path(rootdir)
    report_dir = report_dir_for(nodeid, Path(report_root) if report_root is not None else rootdir / DEFAULT_REPORT_ROOT)
    report_dir.mkdir(parents=True, exist_ok=True)
    for stale in (*report_dir.glob("*.nsys-rep"), report_dir / "child-junit.xml"):
        stale.unlink(missing_ok=True)
    junit = report_dir / "child-junit.xml"
    child = [sys.executable, "-m", "pytest", nodeid, "-p", "no:cacheprovider", NSYS_CHILD_FLAG, f"--junitxml={junit}",
             "-q", "-rfEs", *extra_pytest_args]  # fmt: skip
    command = nsys_profile_command(nsys, report_dir / "capture", child)
    child_env = {key: value for key, value in (os.environ if env is None else env).items()
                 if not key.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}  # the child is a plain session
    child_env["PYTHONUNBUFFERED"] = "1"
    log.info("profiling %s: %s", nodeid, " ".join(command))
    try:
        proc = subprocess.run(command, cwd=rootdir, env=child_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, errors="replace", timeout=timeout_s, check=False)  # fmt: skip
        output, returncode = proc.stdout or "", proc.returncode
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or "")
        raise nsys_error(f"nsys profile of {nodeid} did not finish within {timeout_s:.0f} s", out) from e
    except OSError as e:
        raise NsysError(f"cannot run nsys at {os.fspath(nsys)!r} for {nodeid}: {e}") from e
    log_path = report_dir / "nsys-run.log"
    log_path.write_text(output, encoding="utf-8")
    reports = sorted(report_dir.glob("*.nsys-rep"))
    result = NsysResult(nodeid, command, returncode, "passed", report_dir, reports, _tail(output), None, log_path)
    verdict = _junit_outcome(junit)
    if verdict is None:
        raise nsys_error(f"nsys profile of {nodeid} failed (exit {returncode}) before the child test finished "
                         f"(no {junit.name}); full output in {log_path}", output)  # fmt: skip
    result.outcome, result.skip_reason = verdict
    broken = _NSYS_FAILURE.search(output) if result.outcome == "passed" else None  # a failed test's own errors
    if broken:
        raise nsys_error(f"nsys failed while profiling {nodeid}: {broken.group(0)!r} (exit {returncode}); "
                         f"full output in {log_path}", output)  # fmt: skip
    if result.outcome == "passed" and returncode != 0:
        raise nsys_error(f"nsys exited {returncode} although {nodeid} passed; full output in {log_path}", output)
    if result.outcome == "passed" and not reports:
        raise nsys_error(f"nsys wrote no .nsys-rep for {nodeid} in {report_dir} (did the test reach "
                         f"cudaProfilerStart?); full output in {log_path}", output)  # fmt: skip
    return result


# --- nsys stats -----------------------------------------------------------------------------------------------------


def stats_command(nsys: str | os.PathLike[str], rep_path: Path, output_base: Path, reports: Sequence[str]) -> list[str]:
    """``nsys stats`` argv writing one CSV per report, named ``<output_base>_<report>.csv``."""
    return [os.fspath(nsys), "stats", "--report", ",".join(reports), "--format", "csv",
            "--output", os.fspath(output_base), "--force-export=true", os.fspath(rep_path)]  # fmt: skip


def export_stats(
    nsys: str | os.PathLike[str],
    rep_path: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    reports: Sequence[str] = STATS_REPORTS,
    *,
    timeout_s: float = 600.0,
) -> dict[str, Path]:
    """Run ``nsys stats`` on ``rep_path``; return ``{report name: csv path}`` for the CSVs it wrote.

    Reports without data ("SKIPPED: ... does not contain ...") write no file and are left out of the result, so
    the summary treats them as empty. Raises `NsysError` (quoting nsys's output) when nsys fails and wrote nothing.
    """
    rep_path, out_dir = Path(rep_path), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    base = out_dir / rep_path.name.removesuffix(".nsys-rep")
    for name in reports:
        Path(f"{base}_{name}.csv").unlink(missing_ok=True)
    command = stats_command(nsys, rep_path, base, reports)
    try:
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", timeout=timeout_s, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NsysError(f"cannot run nsys stats on {rep_path}: {e}") from e
    written = {name: Path(f"{base}_{name}.csv") for name in reports if Path(f"{base}_{name}.csv").is_file()}
    (out_dir / "nsys-stats.log").write_text(proc.stdout or "", encoding="utf-8")
    if not written and (proc.returncode != 0 or _NSYS_FAILURE.search(proc.stdout or "")):
        raise nsys_error(f"nsys stats failed on {rep_path} (exit {proc.returncode})", proc.stdout or "")
    for name in sorted(set(reports) - set(written)):
        log.info("nsys stats wrote no %s for %s (no such data in the capture)", name, rep_path)
    return written


def csvs_in(folder: str | os.PathLike[str], base: str | None = None) -> dict[str, Path]:
    """``{report: path}`` for the ``<base>_<report>.csv`` files in ``folder`` (any base if None; first one wins)."""
    found: dict[str, Path] = {}
    for report in STATS_REPORTS:
        pattern = f"{base}_{report}.csv" if base else f"*_{report}.csv"
        matches = sorted(Path(folder).glob(pattern))
        if matches:
            found[report] = matches[0]
    return found


def summarize_report(nsys: str | os.PathLike[str], rep_path: str | os.PathLike[str], **summary_options) -> NsysSummary:
    """Export the stats of ``rep_path`` (into ``<its folder>/stats``), summarize them and write ``summary.json`` and
    ``summary.md`` beside the report; return the summary."""
    rep_path = Path(rep_path)
    csvs = export_stats(nsys, rep_path, rep_path.parent / "stats")
    summary = summarize(csvs, report_path=rep_path, **summary_options)
    write_summary(summary, rep_path.parent)
    return summary


# --- reading the CSVs -----------------------------------------------------------------------------------------------

_TIME_NS = {"ns": 1.0, "us": 1e3, "μs": 1e3, "ms": 1e6, "s": 1e9, "sec": 1e9}
_SIZE_B = {"b": 1.0, "byte": 1.0, "bytes": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9, "kib": 1024.0, "mib": 1024.0**2,
           "gib": 1024.0**3}  # fmt: skip
_HEADER_CELL = re.compile(r"^(.*?)\s*(?:\(([^()]*)\))?$")
_NUMBER = re.compile(r"^-?(?:\d+|\d{1,3}(?:,\d{3})+)(?:\.\d*)?(?:[eE][-+]?\d+)?$")


@dataclass(frozen=True)
class Table:
    """Rows of one stats CSV; ``columns`` maps a header's base name ("Total Time") to (index, unit or None)."""

    path: Path | None
    columns: dict[str, tuple[int, str | None]]
    rows: list[list[str]]

    def text(self, row: list[str], name: str) -> str:
        return row[self.columns[name][0]].strip() if name in self.columns else ""

    def number(self, row: list[str], name: str) -> float | None:
        """The cell as a number scaled by its header unit to ns (times) or bytes (sizes); None if empty or absent."""
        if name not in self.columns:
            return None
        index, unit = self.columns[name]
        cell = row[index].strip()
        if not _NUMBER.match(cell):
            return None
        value = float(cell.replace(",", ""))
        unit = (unit or "").strip().lower()
        return value * _TIME_NS.get(unit, _SIZE_B.get(unit, 1.0))


def read_table(path: str | os.PathLike[str] | None, required: Sequence[str]) -> Table:
    """The table in an ``nsys stats --format csv`` file, from the first row holding all ``required`` column names.

    Lines before that header (progress, NOTICE lines) are skipped, as are later rows of another width. A missing
    path, an empty file or a "SKIPPED: ... does not contain ..." file is an empty table; any other file without
    such a header raises `NsysParseError` naming the file and the columns looked for.
    """
    if path is None or not Path(path).is_file():
        return Table(None if path is None else Path(path), {}, [])
    text = Path(path).read_text(encoding="utf-8", errors="replace").lstrip("\ufeff")
    lines = text.splitlines()
    for number, cells in enumerate(csv.reader(lines)):
        columns = {}
        for index, cell in enumerate(cells):
            base, unit = _HEADER_CELL.match(cell.strip()).groups()
            columns.setdefault(base, (index, unit))
        if all(name in columns for name in required):
            rows = [row for row in csv.reader(lines[number + 1 :]) if len(row) == len(cells)]
            return Table(Path(path), columns, rows)
    if not text.strip() or "does not contain" in text or "SKIPPED" in text:
        return Table(Path(path), {}, [])
    raise NsysParseError(f"{path}: no CSV header row with columns {', '.join(map(repr, required))}")


def _int(value: float | None) -> int:
    return int(round(value)) if value is not None else 0


def split_range_name(full: str) -> tuple[str, str]:
    """``":infer"`` -> ("", "infer"); ``"perf:infer"`` -> ("perf", "infer"); ``"aten::conv2d"`` stays whole.

    nsys names NVTX ranges ``<domain>:<message>``; the default domain is empty.
    """
    match = re.match(r"^([^:]*):(?!:)(.*)$", full)
    return (match.group(1), match.group(2)) if match else ("", full)


@dataclass(frozen=True)
class KernelRow:
    """One kernel of ``cuda_gpu_kern_sum``: times in ns; ``time_pct`` is its share of all kernel time."""

    name: str
    total_ns: int
    instances: int
    avg_ns: float | None = None
    med_ns: float | None = None
    min_ns: float | None = None
    max_ns: float | None = None
    time_pct: float | None = None


@dataclass(frozen=True)
class ApiRow:
    """One CUDA API function of ``cuda_api_sum`` (host time in ns)."""

    name: str
    total_ns: int
    calls: int
    avg_ns: float | None = None
    max_ns: float | None = None
    time_pct: float | None = None


@dataclass(frozen=True)
class NvtxRow:
    """One NVTX range name of ``nvtx_sum``: host (CPU) time in ns; ``name`` without its domain prefix."""

    name: str
    domain: str
    total_ns: int
    instances: int
    avg_ns: float | None = None
    style: str | None = None
    time_pct: float | None = None


@dataclass(frozen=True)
class MemcpyTotals:
    """Host-to-device and device-to-host copies: bytes (from MB with 3 decimals, so +-500 B per row), ns, count."""

    h2d_bytes: int = 0
    h2d_ns: int = 0
    h2d_count: int = 0
    d2h_bytes: int = 0
    d2h_ns: int = 0
    d2h_count: int = 0


@dataclass(frozen=True)
class GpuActivity:
    """One kernel, memcpy or memset of ``cuda_gpu_trace``: start and duration in ns, size in bytes for copies."""

    start_ns: int
    duration_ns: int
    name: str
    kind: str  # "kernel", "memcpy" or "memset"
    bytes: int | None = None
    stream: str = ""

    @property
    def end_ns(self) -> int:
        return self.start_ns + self.duration_ns


@dataclass(frozen=True)
class NvtxInterval:
    """One NVTX push/pop range instance of ``nvtx_pushpop_trace`` (host timestamps in ns, same clock as the GPU's)."""

    name: str
    start_ns: int
    end_ns: int
    level: int = 0


def parse_kernel_summary(path: str | os.PathLike[str] | None) -> list[KernelRow]:
    """Rows of a ``cuda_gpu_kern_sum`` CSV, as written (sorted by total time, largest first)."""
    t = read_table(path, ("Total Time", "Instances", "Name"))
    return [KernelRow(t.text(r, "Name"), _int(t.number(r, "Total Time")), _int(t.number(r, "Instances")),
                      t.number(r, "Avg"), t.number(r, "Med"), t.number(r, "Min"), t.number(r, "Max"),
                      t.number(r, "Time")) for r in t.rows]  # fmt: skip


def parse_api_summary(path: str | os.PathLike[str] | None) -> list[ApiRow]:
    """Rows of a ``cuda_api_sum`` CSV."""
    t = read_table(path, ("Total Time", "Num Calls", "Name"))
    return [ApiRow(t.text(r, "Name"), _int(t.number(r, "Total Time")), _int(t.number(r, "Num Calls")),
                   t.number(r, "Avg"), t.number(r, "Max"), t.number(r, "Time")) for r in t.rows]  # fmt: skip


def parse_nvtx_summary(path: str | os.PathLike[str] | None) -> list[NvtxRow]:
    """Rows of an ``nvtx_sum`` (or older ``nvtx_pushpop_sum``) CSV, range names split from their domain."""
    t = read_table(path, ("Total Time", "Instances", "Range"))
    rows = []
    for r in t.rows:
        domain, name = split_range_name(t.text(r, "Range"))
        rows.append(NvtxRow(name, domain, _int(t.number(r, "Total Time")), _int(t.number(r, "Instances")),
                            t.number(r, "Avg"), t.text(r, "Style") or None, t.number(r, "Time")))  # fmt: skip
    return rows


def copy_direction(name: str) -> str | None:
    """"h2d" / "d2h" for "[CUDA memcpy Host-to-Device]" / "[CUDA memcpy DtoH]" (either spelling), else None."""
    if "memcpy" not in name:
        return None
    if "Host-to-Device" in name or "HtoD" in name:
        return "h2d"
    if "Device-to-Host" in name or "DtoH" in name:
        return "d2h"
    return None


def parse_memcpy_summary(
    time_csv: str | os.PathLike[str] | None, size_csv: str | os.PathLike[str] | None
) -> MemcpyTotals:
    """H2D and D2H totals from ``cuda_gpu_mem_time_sum`` (ns, count) and ``cuda_gpu_mem_size_sum`` (bytes)."""
    totals = {"h2d_bytes": 0, "h2d_ns": 0, "h2d_count": 0, "d2h_bytes": 0, "d2h_ns": 0, "d2h_count": 0}
    times = read_table(time_csv, ("Total Time", "Count", "Operation"))
    for r in times.rows:
        direction = copy_direction(times.text(r, "Operation"))
        if direction:
            totals[f"{direction}_ns"] += _int(times.number(r, "Total Time"))
            totals[f"{direction}_count"] += _int(times.number(r, "Count"))
    sizes = read_table(size_csv, ("Total", "Count", "Operation"))
    for r in sizes.rows:
        direction = copy_direction(sizes.text(r, "Operation"))
        if direction:
            totals[f"{direction}_bytes"] += _int(sizes.number(r, "Total"))
            if not times.rows:
                totals[f"{direction}_count"] += _int(sizes.number(r, "Count"))
    return MemcpyTotals(**totals)


def parse_gpu_trace(path: str | os.PathLike[str] | None) -> list[GpuActivity]:
    """Rows of a ``cuda_gpu_trace`` CSV (kernels, memcpys and memsets, by start time)."""
    t = read_table(path, ("Start", "Duration", "Name"))
    out = []
    for r in t.rows:
        name = t.text(r, "Name")
        kind = "kernel"
        if name.startswith("[CUDA"):
            kind = "memcpy" if "memcpy" in name else "memset" if "memset" in name else "kernel"
        size = t.number(r, "Bytes")
        out.append(GpuActivity(_int(t.number(r, "Start")), _int(t.number(r, "Duration")), name, kind,
                               None if size is None else _int(size), t.text(r, "Strm")))  # fmt: skip
    return out


def parse_nvtx_trace(path: str | os.PathLike[str] | None) -> list[NvtxInterval]:
    """Rows of an ``nvtx_pushpop_trace`` CSV, names without their domain prefix."""
    t = read_table(path, ("Start", "End", "Name"))
    return [NvtxInterval(split_range_name(t.text(r, "Name"))[1], _int(t.number(r, "Start")), _int(t.number(r, "End")),
                         _int(t.number(r, "Lvl"))) for r in t.rows]  # fmt: skip


# --- idle time and the summary --------------------------------------------------------------------------------------


def busy_ns(intervals: Sequence[tuple[int, int]], start_ns: int, end_ns: int) -> int:
    """Length in ns of the union of ``[a, b)`` intervals clipped to ``[start_ns, end_ns)`` (overlaps count once)."""
    total, reach = 0, start_ns
    for a, b in sorted((max(a, start_ns), min(b, end_ns)) for a, b in intervals):
        if b <= reach or b <= a:
            continue
        total += b - max(a, reach)
        reach = b
    return total


def gpu_idle_fraction(gpu_trace_rows: Sequence[GpuActivity | tuple[int, int]], region_start_ns: int,
                      region_end_ns: int) -> float:  # fmt: skip
    """Fraction (0..1) of ``[region_start_ns, region_end_ns)`` in which no kernel, memcpy or memset ran on any
    stream (the union of their intervals). Raises ValueError for an empty region."""
    if region_end_ns <= region_start_ns:
        raise ValueError(f"empty measured region [{region_start_ns}, {region_end_ns}) ns")
    spans = [(r.start_ns, r.end_ns) if isinstance(r, GpuActivity) else (int(r[0]), int(r[1])) for r in gpu_trace_rows]
    return 1.0 - busy_ns(spans, region_start_ns, region_end_ns) / (region_end_ns - region_start_ns)


def measured_region(activities: Sequence[GpuActivity], nvtx: Sequence[NvtxInterval] = (),
                    range_name: str = MEASURED_RANGE) -> tuple[int, int, str] | None:  # fmt: skip
    """(start ns, end ns, source): the span of the NVTX range ``range_name`` if it was recorded, else first GPU
    activity start to last activity end; None when there is neither."""
    marked = [r for r in nvtx if r.name == range_name]
    if marked:
        return min(r.start_ns for r in marked), max(r.end_ns for r in marked), f"NVTX range {range_name!r}"
    if activities:
        return min(a.start_ns for a in activities), max(a.end_ns for a in activities), "first to last GPU activity"
    return None


@dataclass
class NsysSummary:
    """What a capture says, in short: top kernels, time per stage, copies, GPU idle share of the measured region.

    Times are ns. ``stages`` holds the pipeline stages found among the NVTX ranges (host time); ``nvtx_ranges`` the
    largest other ranges (per-call ranges, TensorRT layer names). ``missing`` lists reports that had no data.
    """

    report: str | None
    kernel_total_ns: int
    kernel_instances: int
    top_kernels: list[dict]
    stages: dict[str, dict]
    nvtx_ranges: list[dict]
    h2d: dict
    d2h: dict
    region: dict | None
    idle_fraction: float | None
    top_api: list[dict]
    missing: list[str]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2) + "\n"

    def to_markdown(self, name_width: int = 90) -> str:
        """A few lines and tables for a terminal, a CI job summary or a pull request."""

        def cell(text: str) -> str:
            text = text if len(text) <= name_width else text[: name_width - 1] + "…"
            return text.replace("|", "\\|")

        title = Path(self.report).name if self.report else "capture"
        lines = [f"### Nsight Systems: {title}", ""]
        if self.region:
            length = (self.region["end_ns"] - self.region["start_ns"]) / 1e6
            idle = f"{100 * self.idle_fraction:.1f} %" if self.idle_fraction is not None else "n/a"
            lines.append(f"- Measured region: {length:.3f} ms ({self.region['source']}); GPU idle {idle} of it")
        lines.append(f"- Kernels: {self.kernel_total_ns / 1e6:.3f} ms in {self.kernel_instances} launches")
        for label, copies in (("Host-to-device", self.h2d), ("Device-to-host", self.d2h)):
            lines.append(f"- {label}: {copies['bytes'] / 1e6:.3f} MB in {copies['count']} copies, "
                         f"{copies['ns'] / 1e6:.3f} ms")  # fmt: skip
        if self.missing:
            lines.append(f"- No data: {', '.join(self.missing)}")
        if self.top_kernels:
            lines += ["", "| # | Kernel | Time % | Total ms | Calls | Avg µs |", "|--:|:--|--:|--:|--:|--:|"]
            for i, k in enumerate(self.top_kernels, 1):
                lines.append(f"| {i} | `{cell(k['name'])}` | {k['percent']:.1f} | {k['total_ns'] / 1e6:.3f} | "
                             f"{k['instances']} | {k['avg_ns'] / 1e3:.1f} |")  # fmt: skip
        if self.stages or self.nvtx_ranges:
            lines += ["", "| NVTX range (host time) | Total ms | Calls | Avg ms |", "|:--|--:|--:|--:|"]
            for name, s in [*self.stages.items(), *((r["name"], r) for r in self.nvtx_ranges)]:
                lines.append(f"| {cell(name)} | {s['total_ns'] / 1e6:.3f} | {s['instances']} | "
                             f"{s['total_ns'] / max(s['instances'], 1) / 1e6:.3f} |")  # fmt: skip
        if self.top_api:
            lines += ["", "| CUDA API | Total ms | Calls |", "|:--|--:|--:|"]
            lines += [f"| {cell(a['name'])} | {a['total_ns'] / 1e6:.3f} | {a['calls']} |" for a in self.top_api]
        return "\n".join(lines) + "\n"


def summarize(
    csvs: Mapping[str, str | os.PathLike[str]],
    *,
    report_path: str | os.PathLike[str] | None = None,
    stages: Sequence[str] = STAGES,
    top_n: int = 10,
    range_name: str = MEASURED_RANGE,
) -> NsysSummary:
    """Summarize the stats CSVs ``{report name: path}`` (as `export_stats` returns; absent reports count as empty)."""
    kernels = parse_kernel_summary(csvs.get("cuda_gpu_kern_sum"))
    kernel_total = sum(k.total_ns for k in kernels)
    top = sorted(kernels, key=lambda k: -k.total_ns)[:top_n]
    top_kernels = [{"name": k.name, "total_ns": k.total_ns, "instances": k.instances,
                    "avg_ns": k.total_ns / max(k.instances, 1),
                    "percent": 100.0 * k.total_ns / kernel_total if kernel_total else 0.0} for k in top]  # fmt: skip
    by_name: dict[str, dict] = {}
    for row in parse_nvtx_summary(csvs.get("nvtx_sum")):
        entry = by_name.setdefault(row.name, {"name": row.name, "total_ns": 0, "instances": 0})
        entry["total_ns"] += row.total_ns
        entry["instances"] += row.instances
    stage_rows = {name: {k: v for k, v in by_name[name].items() if k != "name"} for name in stages if name in by_name}
    others = sorted((r for n, r in by_name.items() if n not in stage_rows), key=lambda r: -r["total_ns"])[:top_n]
    copies = parse_memcpy_summary(csvs.get("cuda_gpu_mem_time_sum"), csvs.get("cuda_gpu_mem_size_sum"))
    activities = parse_gpu_trace(csvs.get("cuda_gpu_trace"))
    region = measured_region(activities, parse_nvtx_trace(csvs.get("nvtx_pushpop_trace")), range_name)
    idle = None
    if region and region[1] > region[0] and "cuda_gpu_trace" in csvs:
        idle = gpu_idle_fraction(activities, region[0], region[1])
    api = sorted(parse_api_summary(csvs.get("cuda_api_sum")), key=lambda a: -a.total_ns)[:5]
    return NsysSummary(
        report=os.fspath(report_path) if report_path is not None else None,
        kernel_total_ns=kernel_total,
        kernel_instances=sum(k.instances for k in kernels),
        top_kernels=top_kernels,
        stages=stage_rows,
        nvtx_ranges=others,
        h2d={"bytes": copies.h2d_bytes, "ns": copies.h2d_ns, "count": copies.h2d_count},
        d2h={"bytes": copies.d2h_bytes, "ns": copies.d2h_ns, "count": copies.d2h_count},
        region=None if region is None else {"start_ns": region[0], "end_ns": region[1], "source": region[2]},
        idle_fraction=idle,
        top_api=[{"name": a.name, "total_ns": a.total_ns, "calls": a.calls} for a in api],
        missing=[name for name in STATS_REPORTS if name not in csvs],
    )


def write_summary(summary: NsysSummary, folder: str | os.PathLike[str]) -> tuple[Path, Path]:
    """Write ``summary.json`` and ``summary.md`` into ``folder`` atomically; return their paths."""
    folder = Path(folder)
    return (atomic_write_text(folder / "summary.json", summary.to_json()),
            atomic_write_text(folder / "summary.md", summary.to_markdown()))  # fmt: skip
