"""``perf-ab``: a paired A/B of a pull request against its merge base, on one runner, in fresh processes.

    perf-ab --base origin/main --pairs 5 -- perf -m ci --perf-device cuda

What it does:

1. The base is ``git merge-base HEAD <--base>`` (default ``origin/main``, else ``main``), checked out as a git
   worktree under the output folder; the candidate is this working tree, as it is.
2. K pairs of fresh pytest processes (`perf.gate.processes.run_children`: each saves its run, logs in the output
   folder, a plan that a second call resumes), alternating the order (base first in odd pairs, candidate first in
   even ones), so that a runner warming up or slowing down in the course of the job favours neither side. Each side
   keeps its own cache folder (exported models, engines): a change to the exporter must not reach the other side.
3. Per benchmark, the ratio of each pair's medians; the verdict is on the K ratios
   (`perf.gate.stats.paired_ratio_interval`: their geometric mean and its Student-t interval), with the gate's
   one rule (`perf.gate.stats.decide`, and "unstable" when inconclusive, as ``--perf-compare`` does). A pair is
   back to back on one runner, so the between-process noise is in the pairs' scatter: no noise profile is needed.

Writes ``<out>/perf-ab.json`` and ``perf-ab.md`` (a verdict table), prints the table and the seconds the processes
took, and exits 1 when a benchmark is slower, 2 on bad input (one line, nothing run).
"""

from __future__ import annotations

import argparse
import json
import logging
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from statistics import geometric_mean

log = logging.getLogger(__name__)

DEFAULT_TESTS = ("perf", "-m", "ci")
BASE, CANDIDATE = "base", "candidate"


class ABError(Exception):
    """Bad input to perf-ab: one line."""


@dataclass
class PairedRow:
    """One benchmark judged on K pairs: per-pair ratios, their geometric mean and interval, the verdict."""

    fullname: str
    name: str
    pairs: int
    base_median_s: float
    candidate_median_s: float
    ratios: list[float]
    ratio: float
    lo: float
    hi: float
    verdict: str
    note: str = ""


def _git(repo: Path, *args: str) -> str:
    result = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines()
        raise ABError(f"git {' '.join(args)}: {lines[-1] if lines else f'exit {result.returncode}'}")
    return result.stdout.strip()


def merge_base(repo: Path, base: str | None) -> tuple[str, str]:
    """(the ref used, the merge base's commit) of HEAD and ``base`` (default origin/main, else main)."""
    candidates = [base] if base else ["origin/main", "main"]
    for ref in candidates:
        check = subprocess.run(["git", "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"], cwd=repo,
                               capture_output=True, text=True, check=False)  # fmt: skip
        if check.returncode == 0:
            return ref, _git(repo, "merge-base", "HEAD", ref)
    raise ABError(f"--base {base or 'origin/main or main'}: no such commit in '{repo}' (fetch it, e.g. "
                  "git fetch origin main)")  # fmt: skip


def plan_pairs(pairs: int, base_tree: Path, options: Sequence[str], base_cache: Path) -> list[object]:
    """The children of ``pairs`` pairs, ABBA order: base first in odd pairs, candidate first in even ones."""
    from perf.gate.processes import Child

    children = []
    for i in range(1, pairs + 1):
        base = Child(f"{BASE}-{i:02d}", BASE, (), (f"--perf-cache-dir={base_cache}",), str(base_tree))
        candidate = Child(f"{CANDIDATE}-{i:02d}", CANDIDATE, (), ())
        children += [base, candidate] if i % 2 else [candidate, base]
    return children


def judge(storage: Path, pairs: int, min_effect: float) -> list[PairedRow]:
    """One row per benchmark that every pair measured on both sides."""
    from perf.gate.compare import UNSTABLE
    from perf.gate.stats import NO_CHANGE, decide, inconclusive, paired_ratio_interval
    from perf.runs import load_runs

    by_label = {run.path.stem.split("_", 1)[1]: run for run in load_runs(storage)}
    sides = {side: [by_label.get(f"{side}-{i:02d}") for i in range(1, pairs + 1)] for side in (BASE, CANDIDATE)}
    complete = [i for i in range(pairs) if sides[BASE][i] is not None and sides[CANDIDATE][i] is not None]
    if len(complete) < 2:
        raise ABError(f"only {len(complete)} complete pair(s) saved a run in '{storage}': need 2 or more (see the logs)")
    rows = []
    names = set.intersection(*(set(sides[s][i].benchmarks) for s in (BASE, CANDIDATE) for i in complete))
    for fullname in sorted(names):
        base = [sides[BASE][i].benchmarks[fullname] for i in complete]
        cand = [sides[CANDIDATE][i].benchmarks[fullname] for i in complete]
        base_m = [b.median_s for b in base]
        cand_m = [c.median_s for c in cand]
        ratio, lo, hi = paired_ratio_interval(base_m, cand_m)
        verdict, note = decide(lo, hi, min_effect), ""
        if verdict == NO_CHANGE and inconclusive(ratio, min_effect):
            verdict, note = UNSTABLE, "inconclusive: the pairs disagree too much to call it a change or no change"
        rows.append(PairedRow(fullname, base[0].name, len(complete), geometric_mean(base_m), geometric_mean(cand_m),
                              [c / b for b, c in zip(base_m, cand_m)], ratio, lo, hi, verdict, note))  # fmt: skip
    return rows


def to_markdown(rows: Sequence[PairedRow], header: str) -> str:
    lines = [header, "", "| benchmark | base | candidate | ratio [95% CI] | pairs | verdict |", "|---|---|---|---|---|---|"]
    lines += [f"| {r.name} | {r.base_median_s * 1e3:.4g} ms | {r.candidate_median_s * 1e3:.4g} ms | {r.ratio:.3f} "
              f"[{r.lo:.3f}, {r.hi:.3f}] | {r.pairs} | {r.verdict}{' (' + r.note + ')' if r.note else ''} |"
              for r in rows]  # fmt: skip
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    from perf.options import parse_fraction, parse_positive_int

    class Parser(argparse.ArgumentParser):
        def error(self, message: str) -> None:
            self.exit(2, f"perf-ab: error: {message}\n")

    parser = Parser(prog="perf-ab", description="Paired A/B of this working tree against its merge base, in "
                    "alternating fresh pytest processes on this runner.")  # fmt: skip
    parser.add_argument("--base", default=None, help="the branch or commit to compare with; the merge base of HEAD "
                        "and it is measured (default: origin/main, else main)")  # fmt: skip
    parser.add_argument("--pairs", type=parse_positive_int, default=5, help="pairs of processes, >= 2 (default 5)")
    parser.add_argument("--min-effect", type=parse_fraction, default=0.02, help="smallest change called slower or "
                        "faster (default 2%%)")  # fmt: skip
    parser.add_argument("--out", type=Path, default=Path("reports/ab"), help="output folder: worktree, runs, logs, "
                        "verdicts (default reports/ab); an unfinished plan there is resumed")  # fmt: skip
    parser.add_argument("--keep-worktree", action="store_true", help="leave the base's worktree in place")
    parser.add_argument("pytest_args", nargs="*", help=f"after --: what to run (default: {' '.join(DEFAULT_TESTS)})")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.pairs < 2:
        print("perf-ab: error: --pairs: need at least 2 pairs for an interval", file=sys.stderr)
        return 2
    from perf.gate.processes import load_plan, run_children, save_plan

    try:
        repo = Path(_git(Path.cwd(), "rev-parse", "--show-toplevel"))
        ref, sha = merge_base(repo, args.base)
        out = args.out.resolve()
        tree = out / "base-src"
        if not (tree / ".git").exists():
            out.mkdir(parents=True, exist_ok=True)
            _git(repo, "worktree", "add", "--detach", str(tree), sha)
        elif _git(tree, "rev-parse", "HEAD") != sha:
            raise ABError(f"'{tree}' holds another base ({_git(tree, 'rev-parse', 'HEAD')[:12]}, not {sha[:12]}); "
                          "give a new --out or delete it")  # fmt: skip
        options = list(args.pytest_args or DEFAULT_TESTS)
        plan = plan_pairs(args.pairs, tree, options, out / "cache-base")
        existing = load_plan(out)
        if existing is not None and existing != plan:
            raise ABError(f"'{out}' holds another plan (other pairs or base); give a new --out or delete it")
        save_plan(out, plan)  # type: ignore[arg-type]
        started = time.monotonic()
        results = run_children(plan, options, out, repo)  # type: ignore[arg-type]
        spent = sum(r.seconds for r in results)
        rows = judge(out / "storage", args.pairs, args.min_effect)
    except ABError as e:
        print(f"perf-ab: error: {e}", file=sys.stderr)
        return 2
    header = (f"perf-ab: {args.pairs} pairs of fresh processes, candidate = this working tree, base = merge base "
              f"{sha[:12]} of HEAD and {ref}; slower/faster = the whole 95% interval of the pair ratios beyond "
              f"{args.min_effect:.1%}; the processes took {spent:.0f} s ({time.monotonic() - started:.0f} s this call)")
    markdown = to_markdown(rows, header)
    from detector.fileio import atomic_write_text

    atomic_write_text(out / "perf-ab.md", markdown)
    atomic_write_text(out / "perf-ab.json", json.dumps({"base": sha, "ref": ref, "pairs": args.pairs,
                      "min_effect": args.min_effect, "seconds": spent, "rows": [asdict(r) for r in rows]},
                      indent=2) + "\n")  # fmt: skip
    print(markdown, end="")
    if not args.keep_worktree:
        subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=repo, capture_output=True, check=False)
    failed = [r for r in rows if r.verdict == "slower"]
    print(f"perf-ab {'FAILED' if failed else 'passed'}: {len(failed)} slower of {len(rows)}; {out / 'perf-ab.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
