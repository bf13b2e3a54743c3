"""``perf-history``: the history store from the command line (``import``, ``runs``, ``changes``, ``comparable``,
``judge``, ``simulate``; their help says what each does). ``--store WHERE``: a path, ``sqlite:///path`` or
``postgresql://...``, default ``$PERF_STORE``, else `DEFAULT_STORE`. Bad input: one line on stderr, exit status 2."""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from detector.argtypes import OneLineParser
from detector.errors import catch_sigterm, escape_stdout, interrupted, log_to_stderr
from detector.fileio import unwritable
from perf import crossprocess
from perf.gate.compare import VERDICTS, Baseline, GateSettings, budget, judge_benchmark
from perf.gate.history import DEFAULT_LAST, comparable_groups, history_runs
from perf.gate.noise import DEFAULT_FLOOR_WITHOUT, NoiseProfile, floors_from_profile, profile_key, runner_profile
from perf.gate.table import format_lines, summary, write_verdicts
from perf.measure.machine import device_fingerprint, fingerprint_differences
from perf.options import parse_fraction, parse_machine_device, parse_positive_int, parse_store
from perf.runs import HistoryError, SavedRun, load_run, load_runs, mapping, run_files
from perf.store.changepoints import HistoryChange, history_changes
from perf.store.db import machine_key, open_store
from perf.subject import describe_subject, subject_line
from perf.tabletext import markdown_table

DEFAULT_STORE = ".benchmarks/history.sqlite"


def _parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="perf-history", description="The results history in a database: import saved "
                           "runs, list them, find change points.")  # fmt: skip
    parser.add_argument("--store", type=parse_store, default=None, help="the store: a path, sqlite:///path or "
                        f"postgresql://... (default: $PERF_STORE, else {DEFAULT_STORE})")  # fmt: skip
    sub = parser.add_subparsers(dest="command", required=True)
    imported = sub.add_parser("import", help="store every saved run of a benchmark storage, each with the noise "
                              "profile measured there for its runner")
    imported.add_argument("storage", nargs="?", default=".benchmarks", help="the storage folder (default .benchmarks)")
    sub.add_parser("runs", help="list the stored runs, oldest first, each with its model and video")
    changes = sub.add_parser("changes", help="change points of every benchmark's history, as a markdown table")
    changes.add_argument("--branch", default=None, help="only this branch's runs (default: every branch, each its "
                         "own history)")  # fmt: skip
    changes.add_argument("--min-effect", type=parse_fraction, default=0.02,
                         help="smallest change of level reported (default 2%%)")  # fmt: skip
    comparable = sub.add_parser("comparable", help="whether a saved run can be a baseline on this machine: exit 0, "
                                "or exit 1 naming each fingerprint field that changed (a driver, CUDA or GPU update)")
    comparable.add_argument("run", type=Path, help="the saved run (a .benchmarks/<machine>/NNNN_*.json file)")
    comparable.add_argument("--device", type=parse_machine_device, default="cuda",
                            help="the device this machine would measure on (default cuda)")
    judge = sub.add_parser("judge", help="judge a saved run against the history before it, as --perf-compare does")
    judge.add_argument("--storage", type=Path, default=None, help="a benchmark storage folder to read instead of the "
                       "store (its noise profile too)")  # fmt: skip
    judge.add_argument("--run", default=None, help="the run judged: its number, id or label (default the latest)")
    judge.add_argument("--processes", type=parse_positive_int, default=1, help="judge the last N runs up to --run "
                       "together, as N processes of the same code (default 1)")  # fmt: skip
    judge.add_argument("--history", type=parse_positive_int, default=DEFAULT_LAST, help="latest comparable runs "
                       f"that make the history (default {DEFAULT_LAST})")  # fmt: skip
    judge.add_argument("--branch", default=None, help="only history runs of this branch (default: any)")
    judge.add_argument("--min-effect", type=parse_fraction, default=0.02, help="the floor (default 2%%)")
    judge.add_argument("--out", type=Path, default=None, help="also write the verdicts here (perf-compare.json / .md)")
    crossprocess.add_arguments(sub.add_parser("simulate", help="simulated CI runs (history, first pass, confirmation) "
                                              "from the runs of --perf-selftest-processes or --perf-noise folders"))
    return parser


def changes_table(changes: Sequence[HistoryChange]) -> str:
    """The change points as a markdown table."""
    rows = [[item.name, f"{str(item.commit or '?')[:12]} ({item.saved_at or 'no date'})",
             f"{c.before_s * 1e3:.4g} ms", f"{c.after_s * 1e3:.4g} ms", f"{100 * (c.ratio - 1):+.1f}%",
             str(c.points_after)] for item in changes for c in [item.change]]  # fmt: skip
    headers = ["benchmark", "changed at (commit, run date)", "before", "after", "size", "runs after"]
    return "\n".join(markdown_table(headers, rows)) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    log_to_stderr(logging.WARNING, logging.Formatter("%(message)s"))
    from_env = os.environ.get("PERF_STORE", "").strip()  # read as the suite reads it: `perf.options.parse_store`
    try:
        where = args.store or (parse_store(from_env) if from_env else None) or DEFAULT_STORE
    except argparse.ArgumentTypeError as e:
        print(f"perf-history: error: $PERF_STORE: {e}", file=sys.stderr)
        return 2
    reads_store = args.command not in ("simulate", "comparable") and not (args.command == "judge" and args.storage)
    if where.lower() == "none" and reads_store:
        named = "--store none" if args.store else "$PERF_STORE=none"
        print(f"perf-history: error: {named}: there is no store to read", file=sys.stderr)
        return 2
    escape_stdout()
    restore = catch_sigterm()  # SIGTERM stops it as Ctrl-C does: one line, each run stored whole or not at all
    try:
        if args.command == "simulate":
            return crossprocess.simulate_command(args)
        if args.command == "comparable":  # one line per fingerprint field that differs from this machine
            differences = fingerprint_differences(load_run(args.run).fingerprint, device_fingerprint(args.device))
            for field, old, new in differences:
                print(f"{field}: saved {old!r}, this machine {new!r}")
            return 1 if differences else 0
        if args.command == "judge":
            return _judge(args, where)
        if args.command == "import":
            runs = [load_run(path) for path in run_files(args.storage)]  # read first
            stored = list(zip(runs, _storage_profiles(args.storage, runs)))
            with open_store(where) as store:
                new = sum(store.save_run(run.raw, source=str(run.path), noise=noise)[1] for run, noise in stored)
            print(f"{new} run(s) stored, {len(runs) - new} already in {store.shown}")
        elif args.command == "runs":
            with open_store(where, create=False) as store:
                for run in store.runs(include_injected=True):
                    marked = f" [injected: {run.injected}]" if run.injected else ""
                    print(f"{run.run_id}  {run.label}  {subject_line(run.machine_info.get('perf_subject'))}  "
                          f"{len(run.benchmarks)} benchmark(s){marked}")  # fmt: skip
        else:
            with open_store(where, create=False) as store:
                runs = store.runs(branch=args.branch)
                profiles = {key: store.noise_profile_json(key) for key, _, _ in store.machines()}
            found = _changes(runs, profiles, args.min_effect)
            print(changes_table(found), end="")
            names = {b for run in runs for b in run.benchmarks}
            print(f"{len(found)} change point(s) in {len(names)} benchmark(s) of {len(runs)} run(s)")
    except HistoryError as e:
        print(f"perf-history: error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        return interrupted("perf-history", e, "; what it had stored stays stored, each run whole")
    finally:
        restore()
    return 0


def _warn(line: str) -> None:
    print(f"perf-history: warning: {line}", file=sys.stderr)


def _storage_profiles(storage: str | os.PathLike[str], runs: list[SavedRun]) -> list[dict[str, Any] | None]:
    """Each run's noise profile to store with it: the one measured in ``storage`` for its runner, as the gate
    stores the one it judged with, so that the store's newest profile of a machine (`HistoryStore.noise_profile_json`,
    which `changes` and `judge` read) is the storage's; each runner's profile is read (and a bad one said) once."""
    found: dict[str, dict[str, Any] | None] = {}
    for run in runs:
        if (key := profile_key(fingerprint := mapping(run.fingerprint))) not in found:
            profile = runner_profile(_warn, storage=storage, fingerprint=fingerprint,
                                     without="the runs are stored without it")
            found[key] = None if profile is None else json.loads(profile.to_json())
    return [found[profile_key(mapping(run.fingerprint))] for run in runs]


def _changes(runs: list[SavedRun], profiles: dict[str, str | None], min_effect: float) -> list[HistoryChange]:
    """The change points of one history per machine, model and video (the gate's comparability rule), each
    judged against its machine's noise profile (``profiles``: the stored JSON by machine key) if any."""
    found = []
    for group in comparable_groups(runs):
        key = machine_key(group[0].machine_info)
        floors = floors_from_profile(None if (text := profiles.get(key)) is None else runner_profile(
            _warn, stored=text, stored_in=f"the store's noise profile of machine {key}", without=DEFAULT_FLOOR_WITHOUT))
        found += history_changes(group, min_effect=min_effect, floors=floors)
    return sorted({(c.fullname, c.machine_key, c.branch, c.run_id): c for c in found}.values(),
                  key=lambda c: (c.fullname, c.saved_at or ""))  # fmt: skip


def _judge(args: argparse.Namespace, where: str) -> int:
    """The last ``--processes`` runs up to ``--run`` (number, id or label; the latest by default) judged
    together against the history before them, as ``--perf-compare --perf-confirm=0``; exit 1 when slower. An
    ``--out`` folder that cannot be written is refused before judging; the verdicts are written before printed."""
    if args.out is not None and (why := unwritable(args.out, folder=True)):
        raise HistoryError(f"--out: cannot write the verdicts to '{args.out}': {why}; make it writable or "
                           "choose another folder with --out")  # fmt: skip
    if args.storage is not None:
        runs = load_runs(args.storage)
    else:
        with open_store(where, create=False) as store:
            runs = store.runs(include_injected=True)
    if not runs:
        raise HistoryError(f"no saved runs in {args.storage or where}")
    wanted = args.run
    matches = [i for i, run in enumerate(runs) if wanted in (None, run.run_id, run.label, run.name)
               or (wanted.isdecimal() and run.number == int(wanted))]  # fmt: skip
    if not matches:
        raise HistoryError(f"--run {wanted!r}: no such saved run (give its number, id or label)")
    judged = runs[max(0, matches[-1] - args.processes + 1): matches[-1] + 1]
    run = judged[-1]
    kept = history_runs(runs[: matches[-1] - len(judged) + 1], fingerprint=run.fingerprint, last=args.history,
                        identity=run.machine_info.get("perf_subject") or None, branch=args.branch)
    if not kept:
        raise HistoryError(f"{run.name}: no comparable run before it (same machine, model and video, no "
                           "test-only options) to judge it against")  # fmt: skip
    baseline, settings = Baseline(kept, _judge_profile(args, where, run)), GateSettings(args.min_effect)
    plan = budget(baseline, settings, list(run.benchmarks))
    rows = [judge_benchmark(baseline, bench, plan, args.min_effect,
                            [r.benchmarks[name] for r in judged[:-1] if name in r.benchmarks])
            for name, bench in run.benchmarks.items()]  # fmt: skip
    header = (f"perf-history judge: {', '.join(r.name for r in judged)} against {baseline.describe()}: "
              f"{plan.describe()}; offline, so suspects are not confirmed: a slower row is a suspect to confirm "
              "with --perf-compare on the runner, or with more processes (--processes)")  # fmt: skip
    if args.out is not None:
        try:
            write_verdicts(args.out, rows, baseline, settings, header, budget=plan,
                           current={"run_id": run.run_id, "injected": dict(run.injected)},
                           subject=describe_subject(run.machine_info.get("perf_subject"), run.fingerprint,
                                                    run.machine_info.get("node") or run.machine_id))  # fmt: skip
        except OSError as e:  # a full disk, a folder made read-only meanwhile: nothing printed as judged
            raise HistoryError(f"--out: cannot write the verdicts to '{args.out}': {e.strerror or e}") from e
    print(header, *format_lines(rows), sep="\n")
    counts = summary(rows, settings)
    print(", ".join(f"{counts[v]} {v}" for v in VERDICTS))
    return 1 if counts["failed"] else 0


def _judge_profile(args: argparse.Namespace, where: str, run: SavedRun) -> NoiseProfile | None:
    """The noise profile that seeds a short history of ``run``'s runner, as the gate's: the one measured in
    ``--storage``, else the store's of its machine; one that cannot be used is a warning line, and none."""
    if args.storage is not None:
        return runner_profile(_warn, storage=args.storage, fingerprint=run.fingerprint)
    with open_store(where, create=False) as store:
        key = machine_key(run.machine_info)
        stored, named = store.noise_profile_json(key), f"store '{store.shown}', machine {key}"
    return runner_profile(_warn, stored=stored, stored_in=named)


if __name__ == "__main__":
    sys.exit(main())
