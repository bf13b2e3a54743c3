"""``perf-ab``: a paired A/B of a pull request against its merge base, on one runner, in fresh processes.

    perf-ab --base origin/main --pairs 5 -- perf -m ci --perf-device cuda

How it pairs and judges: docs/method.md, section 11. Writes ``<out>/perf-ab.json`` and ``perf-ab.md``, prints the
table and the seconds the processes took; exits 1 when a benchmark is slower, 2 on bad input (one line, nothing run).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from detector.argtypes import OneLineParser
from detector.errors import catch_sigterm, escape_stdout, interrupted, log_to_stderr
from detector.fileio import atomic_write_text, unwritable
from perf.gate.compare import Baseline, GateSettings, Row, judge_paired, judged_names
from perf.gate.confirm import BASE, CANDIDATE, Sides, abba_children, confirm_rows
from perf.gate.history import history_runs
from perf.gate.judge import Budget
from perf.gate.noise import runner_profile
from perf.gate.processes import (GitError, base_worktree, git, load_plan, remove_worktree, run_children,
                                 save_plan)  # fmt: skip
from perf.gate.table import to_markdown
from perf.options import parse_ab_pairs, parse_fraction, parse_pairs
from perf.runs import HistoryError, SavedRun, load_run, load_runs

DEFAULT_TESTS = ("perf", "-m", "ci")


class ABError(Exception):
    """Bad input to perf-ab: one line."""


def merge_base(repo: Path, base: str | None) -> tuple[str, str]:
    """(the ref used, the merge base's commit) of HEAD and ``base`` (default origin/main, else main)."""
    for ref in [base] if base else ["origin/main", "main"]:
        try:
            git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
        except GitError:
            continue
        return ref, git(repo, "merge-base", "HEAD", ref)
    raise ABError(f"--base {base or 'origin/main or main'}: no such commit in '{repo}' (fetch it, e.g. "
                  "git fetch origin main)")  # fmt: skip


def judge(storage: Path, pairs: int, min_effect: float, confirm: bool, baseline: Baseline | None) -> list[Row]:
    """One row per benchmark that every complete pair measured on both sides."""
    by_label = {run.path.stem.split("_", 1)[1]: run for run in load_runs(storage)}
    saved = [(by_label.get(f"{BASE}-{i:02d}"), by_label.get(f"{CANDIDATE}-{i:02d}")) for i in range(1, pairs + 1)]
    complete = [(base, cand) for base, cand in saved if base is not None and cand is not None]
    if len(complete) < 2:
        raise ABError(f"only {len(complete)} complete pair(s) saved a run in '{storage}': need 2 or more (see the "
                      "logs)")
    names = set.intersection(*(set(run.benchmarks) for pair in complete for run in pair))
    plan = Budget(sum(len(judged_names(complete[0][1].benchmarks[name])) for name in names), confirm)
    return [judge_paired([base.benchmarks[name] for base, _ in complete],
                         [cand.benchmarks[name] for _, cand in complete], plan, min_effect, baseline)
            for name in sorted(names)]


def _history(path: Path, saved: list[SavedRun], sample: SavedRun | None) -> Baseline | None:
    """Main's history, the ``saved`` runs of storage ``path``, for the machine of ``sample`` (a saved run, or None),
    or None; with the noise profile measured there for that runner, which seeds a history of fewer than 3 runs as
    the gate's does."""
    if sample is None:
        return None
    runs = history_runs(saved, fingerprint=sample.fingerprint, identity=sample.machine_info.get("perf_subject") or None)
    return Baseline(runs, runner_profile(_warn, storage=path, fingerprint=sample.fingerprint)) if runs else None


def _warn(line: str) -> None:
    print(f"perf-ab: warning: {line}", file=sys.stderr)


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="perf-ab", description="Paired A/B of this working tree against its merge base, "
                           "in alternating fresh pytest processes on this runner.")  # fmt: skip
    parser.add_argument("--base", default=None, help="the branch or commit to compare with; the merge base of HEAD "
                        "and it is measured (default: origin/main, else main)")  # fmt: skip
    parser.add_argument("--pairs", type=parse_ab_pairs, default=3, help="pairs of processes, >= 2 (default 3)")
    parser.add_argument("--confirm", type=parse_pairs, default=2, help="pairs at most to confirm each suspect, "
                        "0 for none (default 2)")  # fmt: skip
    parser.add_argument("--history", type=Path, default=Path(".benchmarks"), help="benchmark storage with main's "
                        "history of this runner and its noise profile, pooled into the pairs' spread (default "
                        ".benchmarks, if there)")  # fmt: skip
    parser.add_argument("--min-effect", type=parse_fraction, default=0.02, help="smallest change called slower or "
                        "faster (default 2%%)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("reports/ab"), help="output folder: worktree, runs, logs, "
                        "verdicts (default reports/ab); an unfinished plan there is resumed")  # fmt: skip
    parser.add_argument("--keep-worktree", action="store_true", help="leave the base's worktree in place")
    parser.add_argument("pytest_args", nargs="*", help=f"after --: what to run (default: {' '.join(DEFAULT_TESTS)})")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    log_to_stderr(logging.INFO, logging.Formatter("%(message)s"))
    escape_stdout()
    tree, restore = None, catch_sigterm()  # SIGTERM stops it as Ctrl-C does: a child is killed, the worktree removed
    try:
        repo = Path(git(Path.cwd(), "rev-parse", "--show-toplevel"))
        ref, sha = merge_base(repo, args.base)
        out = args.out.resolve()
        if why := unwritable(out, folder=True):
            raise ABError(f"--out: cannot write to '{out}': {why}; make it writable or choose another folder with "
                          "--out")
        existing = load_plan(out)  # a plan.json that is not one is refused before the worktree is made
        saved = load_runs(args.history) if args.history.is_dir() else []  # a bad run there too, before any child
        try:
            tree = base_worktree(repo, sha, out / "base-src")
        except GitError as e:
            raise ABError(f"{e}; give a new --out or delete it" if "holds another base" in str(e) else str(e)) from None
        options = list(args.pytest_args or DEFAULT_TESTS)
        sides = Sides(repo, tree, out / "cache-base")
        plan = abba_children(sides, 1, args.pairs)
        if existing is not None and existing != plan:
            raise ABError(f"'{out}' holds another plan (other pairs or base); give a new --out or delete it")
        save_plan(out, plan)
        started = time.monotonic()
        results = run_children(plan, options, out, repo)
        spent = sum(r.seconds for r in results)
        baseline = _history(args.history, saved, next((load_run(r.run) for r in results if r.run is not None), None))
        rows = judge(out / "storage", args.pairs, args.min_effect, args.confirm > 0, baseline)
        confirmed = 0.0
        if args.confirm > 0 and any(r.verdict == "slower" for r in rows):
            confirmed = confirm_rows(rows, baseline, GateSettings(args.min_effect, confirm=args.confirm),
                                     sides, out / "confirm", options)  # fmt: skip
    except (ABError, GitError, HistoryError) as e:  # HistoryError: a plan or a saved run that is not one
        print(f"perf-ab: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        return interrupted("perf-ab", e, f"; the processes that ended are kept in '{args.out}': the same command "
                           "resumes the plan")  # fmt: skip
    finally:
        restore()
        if tree is not None and not args.keep_worktree:  # the base's code is no longer needed (nor after an error)
            remove_worktree(repo, tree)
    history = f"; pooled with {baseline.describe()}" if baseline is not None else ""
    header = (f"perf-ab: {args.pairs} pairs of fresh processes, candidate = this working tree, base = merge base "
              f"{sha[:12]} of HEAD and {ref}; every judged metric on the pair ratios{history}; suspects confirmed in "
              f"at most {args.confirm} more pairs; slower/faster = significant and beyond {args.min_effect:.1%}; the "
              f"processes took {spent + confirmed:.0f} s ({spent:.0f} s the pairs, {confirmed:.0f} s the "
              f"confirmation; {time.monotonic() - started:.0f} s this call)")
    markdown = to_markdown(rows, header)
    atomic_write_text(out / "perf-ab.md", markdown)
    atomic_write_text(out / "perf-ab.json", json.dumps({"base": sha, "ref": ref, "pairs": args.pairs,
                      "min_effect": args.min_effect, "seconds": spent + confirmed, "rows": [asdict(r) for r in rows]},
                      indent=2) + "\n")  # fmt: skip
    print(markdown, end="")
    failed = [r for r in rows if r.verdict == "slower"]
    print(f"perf-ab {'FAILED' if failed else 'passed'}: {len(failed)} slower of {len(rows)}; {out / 'perf-ab.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
