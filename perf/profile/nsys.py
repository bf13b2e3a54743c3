"""Nsight Systems captures of single tests: find nsys, run a test in a child pytest under ``nsys profile``
(the child, given `NSYS_CHILD_FLAG`, brackets only the measured region with cudaProfilerStart/Stop), export
the report to SQLite once and summarize it with its critical path (docs/method.md, sections 10 and 13). The
child's JUnit XML says whether the *test* passed; `NsysError` means *nsys* failed.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import re
import shutil
import subprocess
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from detector.errors import DetectorError, one_line
from perf.profile.capture_db import CaptureError, read_capture
from perf.profile.child import child_command, run_pytest_child
from perf.profile.critical_path import analyze, summarize_path
from perf.profile.nsys_summary import NsysSummary, summarize, write_summary

log = logging.getLogger(__name__)
StrPath = str | os.PathLike[str]

NSYS_CHILD_FLAG = "--perf-nsys-child"
#: Install locations searched after --nsys-path, $NSYS and PATH, in order; newest version first within each.
NSYS_GLOBS = ("opt/nvidia/nsight-systems/*/bin/nsys", "opt/nvidia/nsight-systems/*/target-linux-x64/nsys",
              "usr/local/cuda*/bin/nsys", "opt/nvidia/nsight-compute/*/host/target-linux-x64/nsys")
NSYS_NOT_FOUND_REASON = ("nsys (Nsight Systems) not found: looked at --nsys-path, $NSYS, PATH, /opt/nvidia/"
                         "nsight-systems/*/, /usr/local/cuda*/bin and /opt/nvidia/nsight-compute/*/host/"
                         "target-linux-x64; point at it with --nsys-path=/path/to/nsys or NSYS=/path/to/nsys")
#: nsys output that means its importer or exporter broke (the report is missing or incomplete).
_NSYS_FAILURE = re.compile(r"error while loading shared libraries|cannot open shared object file|Importer error"
                           r"|Importation failed|QdstrmImporter.*(?:error|fail)|Failed to create .*\.nsys-rep"
                           r"|Report file .* could not be generated", re.IGNORECASE)  # fmt: skip


class NsysError(DetectorError):
    """nsys itself failed (not the profiled test): a headline, then the last lines nsys printed."""

    def __str__(self) -> str:
        return "\n".join(one_line(line) for line in Exception.__str__(self).split("\n"))


def _tail(text: str) -> str:
    return "\n".join(text.rstrip().splitlines()[-30:])


def nsys_error(headline: str, output: str) -> NsysError:
    """An `NsysError`: ``headline`` (one line), then the last lines of ``output`` quoted with ``> ``."""
    quoted = "\n".join(f"    > {line}" for line in _tail(output).splitlines()) or "    > (no output)"
    return NsysError(f"{headline}\n  last lines of nsys output:\n{quoted}")


def _executable(path: Path) -> Path | None:
    path = path / "nsys" if path.is_dir() else path
    return path if path.is_file() and os.access(path, os.X_OK) else None


def find_nsys(explicit: str | None, env: Mapping[str, str] = os.environ, *, root: Path = Path("/")) -> Path | None:
    """The nsys executable: ``explicit`` (--nsys-path: a file, a folder holding nsys, or a name on PATH),
    ``$NSYS``, ``PATH``, then `NSYS_GLOBS` under ``root`` (newest first). A given path that is no executable
    gives None (no fall-through); the bare name ``nsys`` falls through."""
    for value in (explicit, env.get("NSYS")):
        if value and value != "nsys":
            if os.sep not in value and not Path(value).exists():
                found = shutil.which(value, path=env.get("PATH", ""))
                return Path(found) if found else None
            return _executable(Path(value).expanduser())
    if found := shutil.which("nsys", path=env.get("PATH", "")):
        return Path(found)
    # each pattern's matches newest first, version numbers compared as numbers (2024.10 > 2024.4)
    matches = (Path(match) for pattern in NSYS_GLOBS for match in sorted(glob.glob(str(root / pattern)), reverse=True,
               key=lambda p: [(0, int(x)) if x.isdigit() else (1, x) for x in re.split(r"(\d+)", p) if x]))
    return next((match for match in matches if _executable(match)), None)


def nsys_not_found_reason(explicit: str | None, env: Mapping[str, str] = os.environ) -> str:
    """Why `find_nsys` returned None, naming a bad --nsys-path / $NSYS value when there was one."""
    for name, value in (("--nsys-path ", explicit), ("NSYS=", env.get("NSYS"))):
        if value and value != "nsys":
            return f"{name}{value!r} is not an nsys executable (nor a folder holding one); {NSYS_NOT_FOUND_REASON}"
    return NSYS_NOT_FOUND_REASON


def nsys_profile_command(nsys: StrPath, output_base: StrPath, child_argv: Sequence[str]) -> list[str]:
    """``nsys profile`` argv recording ``child_argv`` from cudaProfilerStart to the first cudaProfilerStop
    into ``<output_base>.nsys-rep``: CUDA, NVTX and OS calls, each kernel of a CUDA graph, no CPU sampling."""
    return [os.fspath(nsys), "profile", "--trace=cuda,nvtx,osrt", "--capture-range=cudaProfilerApi",
            "--capture-range-end=stop", "--cuda-graph-trace=node", "--force-overwrite=true", "--sample=none",
            "--cpuctxsw=none", f"--output={os.fspath(output_base)}", *child_argv]  # fmt: skip


def report_dir_for(nodeid: str, root: StrPath) -> Path:
    """``root/<safe name>-<8 hex>``: ``perf/test_x.py::test_infer[torch-fp16-8]`` ->
    ``root/test_x.py-test_infer-torch-fp16-8-<hash of the id>`` (anything but ``[A-Za-z0-9._-]`` replaced)."""
    module, _, rest = nodeid.partition("::")
    readable = f"{Path(module).name}-{rest}" if rest else Path(module).name
    safe = re.sub(r"[^A-Za-z0-9._-]+", "-", readable).strip("-.") or "test"
    return Path(root) / f"{safe[:110]}-{hashlib.sha256(nodeid.encode('utf-8')).hexdigest()[:8]}"


@dataclass
class NsysResult:
    """One ``nsys profile`` child run: the child test's ``outcome`` ("passed", "failed": also errored or none collected,
    "skipped": ``skip_reason``) and the first ``.nsys-rep`` (None: the child never reached cudaProfilerStart)."""

    command: list[str]
    returncode: int
    outcome: str
    report_dir: Path
    report: Path | None
    output_tail: str
    skip_reason: str | None
    log_path: Path


def _junit_outcome(path: Path) -> tuple[str, str | None] | None:
    """("passed"|"failed"|"skipped", skip reason) from the child's JUnit XML; None if unreadable."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return None
    cases = list(root.iter("testcase"))
    if not cases or any(n.tag in ("failure", "error") for n in root.iter()):
        return "failed", None
    skipped = [case.find("skipped") for case in cases]
    if all(node is not None for node in skipped):
        return "skipped", "; ".join(sorted({node.get("message", "") for node in skipped if node is not None}))
    return "passed", None


def run_child_under_nsys(nsys: StrPath, nodeid: str, rootdir: StrPath, extra_pytest_args: Sequence[str] = (),
                         env: Mapping[str, str] | None = None, *, report_root: StrPath, cwd: StrPath | None = None,
                         timeout_s: float = 1800.0) -> NsysResult:  # fmt: skip
    """Run test ``nodeid`` in a child pytest under ``nsys profile`` into `report_dir_for` (log: ``nsys-run.log``), in
    ``cwd`` (default ``rootdir``, where ``extra_pytest_args`` read paths). A failing or skipped test is returned;
    `NsysError` when nsys failed: no JUnit XML, or after a passing test an nsys error, non-zero exit, no .nsys-rep."""
    rootdir = Path(rootdir).resolve()
    report_dir = report_dir_for(nodeid, report_root)
    report_dir.mkdir(parents=True, exist_ok=True)
    junit, log_path = report_dir / "child-junit.xml", report_dir / "nsys-run.log"
    for stale in (*report_dir.glob("*.nsys-rep"), junit):
        stale.unlink(missing_ok=True)
    path, sep, rest = nodeid.partition("::")
    command = nsys_profile_command(nsys, report_dir / "capture", child_command([
        f"{rootdir / path}{sep}{rest}", f"--rootdir={rootdir}", "-p", "no:cacheprovider", NSYS_CHILD_FLAG,
        f"--junitxml={junit}", "-q", "-rfEs", *extra_pytest_args]))  # fmt: skip
    log.info("profiling %s: %s", nodeid, " ".join(command))
    try:
        run = run_pytest_child(command, rootdir if cwd is None else cwd, os.environ if env is None else env,
                               log_path, timeout_s=timeout_s)  # fmt: skip
    except subprocess.TimeoutExpired as e:
        raise nsys_error(f"nsys profile of {nodeid} did not finish within {timeout_s:.0f} s",
                         log_path.read_text(encoding="utf-8", errors="replace")) from e  # fmt: skip
    except OSError as e:
        raise NsysError(f"cannot run nsys at {os.fspath(nsys)!r} for {nodeid}: {e}") from e
    output, code, reports = run.output(), run.returncode, sorted(report_dir.glob("*.nsys-rep"))
    verdict, full = _junit_outcome(junit), f"full output in {log_path}"
    if verdict is None:
        raise nsys_error(f"nsys profile of {nodeid} failed (exit {code}) before the child test finished "
                         f"(no {junit.name}); {full}", output)  # fmt: skip
    if verdict[0] == "passed":  # a failed test's own errors are never taken for nsys's
        if broken := _NSYS_FAILURE.search(output):
            raise nsys_error(f"nsys failed while profiling {nodeid}: {broken.group(0)!r} (exit {code}); {full}", output)
        if code != 0:
            raise nsys_error(f"nsys exited {code} although {nodeid} passed; {full}", output)
        if not reports:
            raise nsys_error(f"nsys wrote no .nsys-rep for {nodeid} in {report_dir} (did the test reach "
                             f"cudaProfilerStart?); {full}", output)  # fmt: skip
    return NsysResult(command, code, verdict[0], report_dir, reports[0] if reports else None, _tail(output),
                      verdict[1], log_path)  # fmt: skip


def export_sqlite(nsys: StrPath, rep_path: StrPath, out: StrPath, *, timeout_s: float = 600.0) -> Path:
    """``nsys export --type sqlite`` of ``rep_path`` into ``out`` (returned), its output in
    ``nsys-export.log`` beside it; `NsysError` quoting nsys when it cannot run, fails or writes no file."""
    rep_path, out = Path(rep_path), Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.unlink(missing_ok=True)
    command = [os.fspath(nsys), "export", "--type", "sqlite", "--force-overwrite=true", "--output", os.fspath(out),
               os.fspath(rep_path)]  # fmt: skip
    try:
        proc = subprocess.run(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              errors="replace", timeout=timeout_s, check=False)  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as e:
        raise NsysError(f"cannot run nsys export on {rep_path}: {e}") from e
    output = proc.stdout or ""
    (out.parent / "nsys-export.log").write_text(output, encoding="utf-8")
    if proc.returncode != 0 or not out.is_file() or _NSYS_FAILURE.search(output):
        raise nsys_error(f"nsys export failed on {rep_path} (exit {proc.returncode}"
                         f"{'' if out.is_file() else f', no {out.name}'})", output)  # fmt: skip
    return out


def summarize_report(nsys: StrPath, rep_path: StrPath) -> NsysSummary:
    """Export ``rep_path`` to ``<report>.sqlite`` once, read it once, summarize it with its critical path and
    write ``summary.json`` / ``summary.md`` beside it; `NsysError` when the export fails or cannot be read."""
    rep_path = Path(rep_path)
    try:
        capture = read_capture(export_sqlite(nsys, rep_path, rep_path.with_suffix(".sqlite")))
    except CaptureError as e:
        raise NsysError(f"cannot summarize {rep_path}: {e}") from e
    summary = summarize(capture, report_path=rep_path)
    summary.critical_path = summarize_path(analyze(capture))
    write_summary(summary, rep_path.parent)
    return summary
