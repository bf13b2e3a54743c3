"""Run the selected benchmarks in fresh pytest processes one after another (`run_children`), each saving its run;
the base commit's worktree (`base_worktree`). `forwarded_options` alone decides which of the user's options a child
repeats (not `DROPPED`; perf.roles.nsys: `NSYS_DROPPED`). ``plan.json`` lets a later call resume; docs/method.md, 3."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from detector.fileio import atomic_write_text, file_kind, parse_json
from perf.profile.child import child_command, run_pytest_child
from perf.runs import RUN_GLOB, HistoryError, saved_run_files

log = logging.getLogger(__name__)

#: How many values follow an option: a count, "?" (an optional one) or "+" (one or more), as argparse's nargs.
Arity = int | str
#: Options that save a run, compare with one, or write into the parent's own places (reports, JUnit XML, its
#: temporary folder): the parent's job, no child repeats them.
PARENT_OUTPUTS: dict[str, Arity] = {"--perf-compare": "?", "--perf-html": 1, "--benchmark-autosave": 0,
    "--benchmark-save": 1, "--benchmark-save-data": 0, "--benchmark-json": 1, "--benchmark-compare": "?",
    "--benchmark-compare-fail": "+", "--benchmark-storage": 1, "--benchmark-histogram": "?", "--junitxml": 1,
    "--benchmark-cprofile-dump": "?", "--junit-xml": 1, "--basetemp": 1, "--perf-store": 1}  # fmt: skip
#: Options a child cannot take: it runs without pytest's cache plugin (``-p no:cacheprovider``) and without a
#: terminal (its output goes to a log), so no last-failed selection, no stepwise, no debugger.
NO_CACHE_NO_TERMINAL: dict[str, Arity] = {"--lf": 0, "--last-failed": 0, "--ff": 0, "--failed-first": 0, "--nf": 0,
    "--new-first": 0, "--lfnf": 1, "--last-failed-no-failures": 1, "--cache-clear": 0, "--cache-show": "?", "--sw": 0,
    "--stepwise": 0, "--sw-skip": 0, "--stepwise-skip": 0, "--sw-reset": 0, "--stepwise-reset": 0, "--pdb": 0,
    "--pdbcls": 1, "--trace": 0}  # fmt: skip
#: Options that plan processes: the parent's alone (a child would start children of its own).
PLANNING: dict[str, Arity] = {"--perf-noise": 1, "--perf-selftest-processes": 1, "--perf-selftest-regressions": 1,
    "--perf-runs-dir": 1, "--perf-processes-budget": 1, "--perf-confirm": 1, "--perf-confirm-budget": 1,
    "--perf-history": 1}  # fmt: skip
#: What the cross-process children (`run_children`) do not get: the above, and the reports folder and injected
#: regression, which each child is given in its own form.
DROPPED: dict[str, Arity] = {**PARENT_OUTPUTS, **NO_CACHE_NO_TERMINAL, **PLANNING,
                             "--perf-reports-dir": 1, "--perf-regression": 1}  # fmt: skip
#: The test-only options that change the code measured: a confirmation's base processes run without them.
INJECTING: dict[str, Arity] = {"--perf-inject-delay": 1, "--perf-regression": 1}
#: What a Nsight Systems child of one test (perf.roles.nsys) does not get: `DROPPED` but the reports folder and
#: regression, plus the parent's selection (it is given one node id), xdist workers and the switch that profiles.
NSYS_DROPPED: dict[str, Arity] = {**PARENT_OUTPUTS, **NO_CACHE_NO_TERMINAL, **PLANNING, "-m": 1, "-k": 1,
    "--deselect": 1, "-n": 1, "--numprocesses": 1, "--maxprocesses": 1, "--dist": 1, "-d": 0, "--tx": 1,
    "--perf-nsys": 0}  # fmt: skip
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")
#: What pytest-benchmark prints when --benchmark-compare-fail finds a regression.
REGRESSED = "Performance has regressed"
#: The line the gate's plugin prints instead of pytest-benchmark's PerformanceRegression traceback.
COMPARE_FAIL_LINE = "--benchmark-compare-fail: {n} benchmark(s) regressed; each is a failed test above"
PLAN = "plan.json"
#: The last line of a child's log: how it ended, read again when a later call resumes the plan.
FOOTER = "# perf child: exit {code} after {seconds:.1f} s"


@dataclass(frozen=True)
class Child:
    """One planned process: ``label`` (its saved run's name), ``kind`` ("identical" or a regression such as
    "layer:5%"), the node ids it runs, extra options, and the source tree it runs (None: the caller's)."""

    label: str
    kind: str
    nodeids: tuple[str, ...]
    options: tuple[str, ...] = ()
    cwd: str | None = None


@dataclass
class ChildResult:
    """What a child did: exit status, seconds, its saved run (None: none), its log, ``compare_fail``
    ("passed" / "failed") when it was asked, and its tests that failed (`_failed_tests`)."""

    label: str
    kind: str
    returncode: int
    seconds: float
    run: Path | None
    log: Path
    compare_fail: str | None = None
    failed_tests: int = 0


def _is_value(token: str) -> bool:
    """Whether argparse takes ``token`` for a value rather than an option (its ``_parse_optional`` rule)."""
    return not token.startswith("-") or token == "-" or " " in token or bool(_NEGATIVE_NUMBER.match(token))


def forwarded_options(args: Sequence[str], positional: Sequence[str], values: Mapping[str, str | None] | None = None,
                      dropped: Mapping[str, Arity] = DROPPED) -> list[str]:
    """The parent's command-line ``args`` without its ``positional`` arguments (paths and node ids) and without
    the ``dropped`` options and their values, read as argparse reads them; ``values`` (option -> the value pytest
    parsed) says whether the token after an option with an optional value is its value."""
    out: list[str] = []
    places, tokens, i = set(positional), list(args), 0
    while i < len(tokens):
        token = tokens[i]
        i += 1
        name, has_value, _ = token.partition("=")  # --name=value, or a short one with its value: -n4, -kgraph
        if name not in dropped and len(token) > 2 and not token.startswith("--") and dropped.get(token[:2], 0) != 0:
            name, has_value = token[:2], "1"
        if name in dropped:
            arity = 0 if has_value else dropped[name]
            if isinstance(arity, int):
                i += arity
            elif arity == "?" and i < len(tokens):
                known = values is not None and name in values
                i += int(tokens[i] == values[name] if known else _is_value(tokens[i]))  # type: ignore[index]
            elif arity == "+":
                while i < len(tokens) and _is_value(tokens[i]) and tokens[i] not in places:
                    i += 1
        elif token != "--" and token not in places:
            out.append(token)
    return out


def _failed_tests(log_text: str, returncode: int) -> int:
    """Tests that failed or errored in a child (pytest's last summary line) less the `COMPARE_FAIL_LINE` verdicts;
    a non-zero exit without a failed test (a crash, a usage error) counts as one."""
    matches = re.findall(r"(\d+) (?:failed|errors?)\b", log_text.rsplit("\n= ", 1)[-1])
    pattern = re.escape(COMPARE_FAIL_LINE).replace(re.escape("{n}"), r"(\d+)")
    regressed = sum(int(n) for n in re.findall(pattern, log_text))
    if matches:
        return max(0, sum(int(m) for m in matches) - regressed)
    return 0 if returncode == 0 or REGRESSED in log_text else 1


class PlanError(HistoryError):
    """A ``plan.json`` that is not a plan: one line naming it; its callers say which option gave the folder."""


def load_plan(folder: Path) -> list[Child] | None:
    """The plan saved in ``folder``, or None; `PlanError` when ``plan.json`` there is not one."""
    path = folder / PLAN
    if not path.exists():
        return None
    try:
        if (kind := file_kind(path.stat())) is not None:
            problem = f"it is {kind}"
        else:
            children = parse_json(path.read_text(encoding="utf-8"))["children"]
            return [Child(c["label"], c["kind"], tuple(c["nodeids"]), tuple(c["options"]), c.get("cwd"))
                    for c in children]  # fmt: skip
    except OSError as e:
        problem = e.strerror or str(e)
    except ValueError as e:  # UnicodeDecodeError, parse_json's: only reading the file raises one
        problem = f"not JSON: {str(e).removeprefix('not valid JSON: ')}"
    except (LookupError, TypeError, AttributeError):
        problem = "not the list of children a plan holds"
    raise PlanError(f"'{path}' is not a plan ({problem}): delete it or give another folder")


def save_plan(folder: Path, children: Sequence[Child]) -> None:
    atomic_write_text(folder / PLAN, json.dumps({"children": [asdict(c) for c in children]}, indent=2) + "\n")


def run_children(children: Sequence[Child], options: Sequence[str], folder: Path, cwd: Path, *,
                 compare_fail: str | None = None, on_done: Callable[[ChildResult, int, int], None] | None = None,
                 deadline: float | None = None) -> list[ChildResult]:
    """Run each child not yet saved in ``folder`` (its log ends with `FOOTER`); return every child's result.
    ``compare_fail`` (e.g. "median:5%"): each "identical" child after the first also runs pytest-benchmark's
    compare against the previous one. ``deadline`` (``time.monotonic()`` seconds): no child starts that would
    likely end after it (by the longest so far)."""
    from detector.progress import progress

    storage = folder / "storage"
    results: list[ChildResult] = []
    previous_identical: Path | None = None
    longest = 0.0
    bar = progress(total=len(children), desc="fresh pytest processes", unit="process")

    def saved_run(label: str) -> Path | None:  # the latest NNNN_<label>.json (run 10000 on too: `RUN_NAME`)
        named = [p for p in storage.glob(f"*/{RUN_GLOB}{label}.json") if p.name.partition("_")[2] == f"{label}.json"]
        return (saved_run_files(named) or [None])[-1]

    for index, child in enumerate(children, 1):
        bar.set_postfix_str(child.label)
        log_path = folder / f"{child.label}.log"
        run = saved_run(child.label)
        if run is None and deadline is not None and time.monotonic() + longest > deadline:
            log.warning("stopping before %s: the time budget would be exceeded; resume with the same --perf-runs-dir",
                        child.label)  # fmt: skip
            break
        compare: list[str] = []
        if compare_fail and child.kind == "identical" and previous_identical is not None:
            compare = [f"--benchmark-compare={previous_identical.name[:4]}", f"--benchmark-compare-fail={compare_fail}",
                       "--perf-confirm=0"]  # one process judged as pytest-benchmark's users run it, no children
        if run is None:
            command = child_command([*options, "-p", "no:cacheprovider", f"--benchmark-storage=file://{storage}",
                                      f"--benchmark-save={child.label}", "--perf-store=none",  # not history
                                      f"--perf-reports-dir={folder / ('reports-' + child.label)}", *compare,
                                      *child.options, *child.nodeids])  # fmt: skip
            env = dict(os.environ)
            if child.cwd is not None:  # that tree's packages, not the installed (editable) ones
                env["PYTHONPATH"] = os.pathsep.join(p for p in (child.cwd, os.environ.get("PYTHONPATH")) if p)
            done = run_pytest_child(command, child.cwd or cwd, env, log_path, echo_command=True)
            code, seconds = done.returncode, done.seconds
            with open(log_path, "a", encoding="utf-8") as out:
                out.write("\n" + FOOTER.format(code=code, seconds=seconds) + "\n")
            run, text = saved_run(child.label), log_path.read_text(encoding="utf-8", errors="replace")
        else:  # saved by an earlier call: how it ended is its log's footer (0, 0.0 without one)
            log.info("%s: already saved (%s), not run again", child.label, run.name)
            text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.is_file() else ""
            found = re.findall(r"^# perf child: exit (-?\d{1,9}) after (\d{1,9}(?:\.\d+)?) s$", text, re.MULTILINE)
            code, seconds = (int(found[-1][0]), float(found[-1][1])) if found else (0, 0.0)
        longest = max(longest, seconds)
        result = ChildResult(child.label, child.kind, code, seconds, run, log_path,
                             "failed" if compare and REGRESSED in text else "passed" if compare else None,
                             _failed_tests(text, code))
        results.append(result)
        if child.kind == "identical" and run is not None:
            previous_identical = run
        if on_done is not None:
            bar.clear()  # the caller's line, then the bar again below it
            on_done(result, index, len(children))
        bar.update(1)
    bar.close()
    return results


class GitError(RuntimeError):
    """A git command that failed; the message is git's reason (see `git`)."""


def git(repo: Path, *args: str) -> str:
    """``git <args>`` in ``repo``; its output, stripped. `GitError` with git's ``fatal:`` / ``error:`` line (else its
    last) when it fails: the hints git prints after it (``git config --global --add safe.directory ...``) say no why."""
    try:
        result = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)
    except OSError as e:  # no git on this machine
        raise GitError(f"git {' '.join(args)}: {e.strerror or e}") from e
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        why = next((line for line in lines if line.startswith(("fatal:", "error:"))), lines[-1] if lines else None)
        raise GitError(f"git {' '.join(args)}: {why or f'exit {result.returncode}'}")
    return result.stdout.strip()


def base_worktree(repo: Path, commit: str, tree: Path) -> Path:
    """A detached git worktree of ``commit`` at ``tree`` (made, or reused when it holds that commit); `GitError`
    when ``tree`` holds another commit or git fails."""
    if not (tree / ".git").exists():
        tree.parent.mkdir(parents=True, exist_ok=True)
        git(repo, "worktree", "add", "--detach", str(tree), commit)
    elif (held := git(tree, "rev-parse", "HEAD")) != git(repo, "rev-parse", f"{commit}^{{commit}}"):
        raise GitError(f"'{tree}' holds another base ({held[:12]}, not {commit[:12]})")
    return tree


def remove_worktree(repo: Path, tree: Path) -> None:
    """Remove a worktree made by `base_worktree` (nothing when it is gone)."""
    subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=repo, capture_output=True, check=False)


def same_code(repo: Path, commit: str | None) -> bool | None:
    """Whether ``repo``'s working tree is ``commit`` unchanged (True), other code (False), or unknown (None)."""
    if not commit:
        return None
    try:
        head = git(repo, "rev-parse", "HEAD")
        full = git(repo, "rev-parse", f"{commit}^{{commit}}")
        dirty = bool(git(repo, "status", "--porcelain", "--untracked-files=no"))
    except GitError:
        return None
    return head == full and not dirty
