"""This runner's noise profile (docs/method.md, section 3): `compute_profile` turns the K saved runs of
``--perf-noise=K`` into one `NoiseEntry` per benchmark and metric, saved as ``<storage>/noise/<key>.json``."""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import math
import os
import statistics
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from detector.fileio import atomic_write_text, os_reason, parse_json, read_text
from perf.gate.history import record_median
from perf.gate.judge import MIN_REFERENCE
from perf.gate.stats import log_median_se
from perf.measure.machine import COMPARED_FIELDS
from perf.measure.stability import assess_stability
from perf.runs import HistoryError, SavedRun
from perf.validate import is_number, value_problem

FORMAT = 1
NOISE_DIR = "noise"
#: Fingerprint fields a profile is keyed on: those that make timings comparable, and the host's CPU.
KEY_FIELDS = (*COMPARED_FIELDS, "cpu_model", "cpu_count")
#: The per-process median CV each family should stay under (fractions), for the printed summary.
CV_TARGETS = {"inference torch-graph": 0.005, "inference torch-compile": 0.005, "inference torch": 0.03,
              "end-to-end": 0.02, "pipelined": 0.02, "multistream": 0.03}  # fmt: skip
#: The share of processes whose within-run noise a profile's limit covers (`upper_limit`).
LIMIT_QUANTILE = 0.99
#: The largest ``between_sd`` (of log medians) a profile may hold: e^5, a factor of 148 between identical
#: processes, is no runner's noise (and the floor it sets, ``expm1(between_sd)``, stays a number).
MAX_BETWEEN_SD = 5.0
#: The per-process medians a profile may hold (s): 1 ns to 10,000 s; beyond that a file was edited by hand.
MEDIAN_RANGE_S = (1e-9, 1e4)
#: A `NoiseEntry`'s fields other than ``processes``, ``medians_s`` and ``between_sd``: numbers (NaN: not known).
_FIGURES = ("cv", "max_ratio", "total_sd", "within_se", "max_cv", "max_drift")


class NoiseProfileError(HistoryError):
    """A noise profile file that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class NoiseEntry:
    """Between-process noise of one benchmark metric: each process's median (s), their ``cv``, ``max_ratio`` (max / min
    - 1), the log medians' ``total_sd``, ``within_se`` (RMS of each process's bootstrap standard error of its log
    median), ``between_sd``, ``max_cv`` / ``max_drift`` (`upper_limit` of the processes' robust CV and drift)."""

    processes: int
    medians_s: tuple[float, ...]
    cv: float
    max_ratio: float
    total_sd: float
    within_se: float
    between_sd: float
    max_cv: float = 0.0
    max_drift: float = 0.0


def upper_limit(values: Sequence[float]) -> float:
    """The `LIMIT_QUANTILE` quantile of a log-normal fitted to ``values`` (>= 0, of K processes), at least their
    largest (with K = 8 a new process exceeds the largest one time in 9)."""
    from scipy.stats import norm

    logs = np.log(np.maximum(np.asarray(values, dtype=float), 1e-6))
    if logs.size < 2:
        return float(max(values))
    fitted = float(logs.mean()) + float(norm.ppf(LIMIT_QUANTILE)) * float(logs.std(ddof=1))
    return max(math.exp(min(fitted, math.log(sys.float_info.max))), float(max(values)))  # past a float: the largest


def entry_from_samples(samples: Sequence[np.ndarray]) -> NoiseEntry:
    """The `NoiseEntry` of one metric from its sample in each of >= 2 processes (seconds, any one unit)."""
    samples = [np.asarray(x) for x in samples]
    stability = [assess_stability(x) for x in samples]
    if len(samples) < 2:
        raise ValueError(f"a noise entry needs >= 2 processes, got {len(samples)}")
    medians = np.array([np.median(x) for x in samples])
    if np.any(medians <= 0):
        raise ValueError("a per-process median is 0: cannot take ratios")
    total = float(np.std(np.log(medians), ddof=1))
    within = math.sqrt(statistics.fmean(log_median_se(x) ** 2 for x in samples))
    return NoiseEntry(
        processes=len(samples), medians_s=tuple(float(m) for m in medians),
        cv=float(np.std(medians / np.mean(medians), ddof=1)), max_ratio=float(medians.max() / medians.min() - 1),
        total_sd=total, within_se=within, between_sd=math.sqrt(max(0.0, total**2 - within**2)),
        max_cv=upper_limit([s.cv for s in stability]), max_drift=upper_limit([s.drift or 0.0 for s in stability]),
    )  # fmt: skip


@dataclass
class NoiseProfile:
    """Noise entries by benchmark full name and metric, with where and when they were measured."""

    key: str
    fingerprint: Mapping[str, Any]
    created: str
    commit: str | None
    runs: list[str]
    entries: dict[str, dict[str, NoiseEntry]] = field(default_factory=dict)
    families: dict[str, str] = field(default_factory=dict)
    path: Path | None = None

    @property
    def processes(self) -> int:
        return len(self.runs)

    def entry(self, fullname: str, metric: str) -> NoiseEntry | None:
        return self.entries.get(fullname, {}).get(metric)

    def to_json(self) -> str:
        document = {"format": FORMAT, "key": self.key, "fingerprint": dict(self.fingerprint),
                    "created": self.created, "commit": self.commit, "runs": self.runs, "families": self.families,
                    "entries": {name: {metric: asdict(e) for metric, e in metrics.items()}
                                for name, metrics in self.entries.items()}}  # fmt: skip
        return json.dumps(document, indent=2) + "\n"

    @classmethod
    def from_json(cls, text: str, path: Path | None = None, named: str | None = None) -> NoiseProfile:
        """The profile in JSON ``text``, read from file ``path`` (or None); its errors name ``named``, else the file."""
        where = named or (f"'{path}'" if path else "noise profile")
        try:
            data = parse_json(text)
            if data.get("format") != FORMAT:
                raise NoiseProfileError(f"{where}: format {data.get('format')!r}, expected {FORMAT}")
            if (problem := value_problem(data) or _entries_problem(data["entries"])) is not None:
                raise NoiseProfileError(f"{where}: {problem}")
            entries = {str(name): {str(m): NoiseEntry(**{**e, "medians_s": tuple(e["medians_s"])})
                                   for m, e in metrics.items()} for name, metrics in data["entries"].items()}
            families = dict(data.get("families") or {})
            bad = next((name for name, family in families.items() if not isinstance(family, str)), None)
            if bad is not None:  # an empty name is a bad entry too
                raise NoiseProfileError(f"{where}: families[{bad!r}] is {families[bad]!r}, expected a string")
            if not isinstance(data["runs"], list):  # its length is the profile's processes
                raise NoiseProfileError(f"{where}: runs is {data['runs']!r}, expected a list of saved run names")
            return cls(str(data["key"]), dict(data["fingerprint"]), str(data["created"]), data.get("commit"),
                       [str(r) for r in data["runs"]], entries, families, path)
        except NoiseProfileError:
            raise
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise NoiseProfileError(f"{where}: not a noise profile ({type(e).__name__}: {e})") from e


def _entries_problem(entries: Any) -> str | None:
    """What makes one of a profile's ``entries`` (``{benchmark: {metric: entry}}``) unusable, naming it; None when
    they are not of that shape at all (`NoiseProfile.from_json` says so)."""
    if not isinstance(entries, dict) or not all(isinstance(metrics, dict) for metrics in entries.values()):
        return None
    return next((f"entry {name!r} metric {metric!r}: {problem}" for name, metrics in entries.items()
                 for metric, entry in metrics.items() if (problem := _entry_problem(entry)) is not None), None)


def _entry_problem(entry: Any) -> str | None:
    """What makes one entry unusable: the gate seeds a history with ``medians_s`` (each process's median, seconds,
    `MEDIAN_RANGE_S`; 2 or more) and floors change points with ``between_sd``; every other figure given is a number."""
    if not isinstance(entry, dict):
        return "not an object"
    processes, medians, between = entry.get("processes"), entry.get("medians_s"), entry.get("between_sd")
    if not (type(processes) is int and processes >= 2):
        return f"processes is {processes!r}, expected a whole number >= 2"
    if not isinstance(medians, list) or len(medians) < 2:
        found = f"{len(medians)} value(s)" if isinstance(medians, list) else repr(medians)
        return f"medians_s is {found}, expected a list of 2 or more per-process medians"
    for median in medians:
        if not (is_number(median) and MEDIAN_RANGE_S[0] <= median <= MEDIAN_RANGE_S[1]):
            return f"medians_s holds {median!r}, not a median in seconds (1e-9 to 1e4)"
    if not (is_number(between) and 0 <= between <= MAX_BETWEEN_SD):
        return f"between_sd is {between!r}, expected a number from 0 to {MAX_BETWEEN_SD:g}"
    return next((f"{key} is {entry[key]!r}, not a number" for key in _FIGURES
                 if key in entry and not is_number(entry[key])), None)  # fmt: skip


def profile_key(fingerprint: Mapping[str, Any]) -> str:
    """16 hex digits over the `KEY_FIELDS` of a machine fingerprint: one key per runner and software stack."""
    text = json.dumps({name: fingerprint.get(name) for name in KEY_FIELDS}, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def compute_profile(runs: Sequence[SavedRun], fingerprint: Mapping[str, Any]) -> NoiseProfile:
    """The profile of ``runs`` (processes of identical code): an entry per benchmark and metric two of them measured."""
    if len(runs) < 2:
        raise ValueError(f"a noise profile needs >= 2 runs of separate processes, got {len(runs)}")
    collected: dict[str, dict[str, list[np.ndarray]]] = {}
    families: dict[str, str] = {}
    for run in runs:
        for fullname, bench in run.benchmarks.items():
            families[fullname] = bench.family
            for metric, data in bench.metrics().items():
                if record_median(bench, metric) is not None:  # a NaN round or a median of 0: as the gate, none
                    collected.setdefault(fullname, {}).setdefault(metric, []).append(data)
    entries = {name: {metric: entry_from_samples(values) for metric, values in metrics.items() if len(values) >= 2}
               for name, metrics in collected.items()}  # fmt: skip
    commits = {run.commit for run in runs}
    return NoiseProfile(
        key=profile_key(fingerprint), fingerprint=dict(fingerprint),
        created=_dt.datetime.now(_dt.timezone.utc).isoformat(), commit=commits.pop() if len(commits) == 1 else None,
        runs=[run.path.name for run in runs], entries={k: v for k, v in entries.items() if v}, families=families,
    )  # fmt: skip


def save_profile(storage: str | os.PathLike[str], profile: NoiseProfile) -> Path:
    """Write ``profile`` atomically to ``<storage>/noise/<key>.json``; return the path."""
    profile.path = atomic_write_text(Path(storage) / NOISE_DIR / f"{profile.key}.json", profile.to_json())
    return profile.path


def load_profile(path: str | os.PathLike[str]) -> NoiseProfile:
    """Read a profile file; `NoiseProfileError` names the file when it is missing or not a profile."""
    path = Path(path)
    try:
        text = read_text(path)
    except FileNotFoundError as e:
        raise NoiseProfileError(f"'{path}': no such file") from e
    except OSError as e:
        raise NoiseProfileError(f"'{path}': cannot read: {os_reason(e)}") from e
    except UnicodeDecodeError as e:
        raise NoiseProfileError(f"'{path}': cannot read: {e}") from e
    return NoiseProfile.from_json(text, path)  # outside the try: only reading the file is "cannot read"


def find_profile(storage: str | os.PathLike[str], fingerprint: Mapping[str, Any]) -> NoiseProfile | None:
    """This runner's profile in ``storage`` (``<storage>/noise/<key>.json``), or None when none was measured here."""
    path = Path(storage) / NOISE_DIR / f"{profile_key(fingerprint)}.json"
    return load_profile(path) if path.is_file() else None


#: What a judge does without a stored profile it cannot use (`ignored_profile_line`), and what change points do.
JUDGED_WITHOUT = f"a history of fewer than {MIN_REFERENCE} runs is judged without it"
DEFAULT_FLOOR_WITHOUT = "change points use the default floor"


def ignored_profile_line(error: NoiseProfileError, without: str = JUDGED_WITHOUT) -> str:
    """The one wording of a stored profile left out (gate, perf-history, perf-ab); ``without``: what is done instead."""
    return f"ignored this runner's stored noise profile, {error}: {without}; measure it again with --perf-noise=10"


def runner_profile(warn: Callable[[str], None], *, storage: str | os.PathLike[str] | None = None,
                   fingerprint: Mapping[str, Any] | None = None, stored: str | None = None,
                   stored_in: str | None = None, without: str = JUDGED_WITHOUT) -> NoiseProfile | None:  # fmt: skip
    """The profile that seeds one runner's short history, or None: ``stored``, a history store's JSON of that machine
    (`perf.store.db.HistoryStore.noise_profile_json`) named ``stored_in``, else `find_profile` of ``storage``; one
    that cannot be used is left out and said once through ``warn`` (`ignored_profile_line`, with ``without``)."""
    try:
        if stored is not None:
            return NoiseProfile.from_json(stored, named=stored_in)
        if storage is None or not isinstance(fingerprint, Mapping):
            return None
        return find_profile(storage, fingerprint)
    except NoiseProfileError as e:
        warn(ignored_profile_line(e, without))
        return None


def floors_from_profile(profile: NoiseProfile | None) -> dict[str, float]:
    """Each benchmark's between-process scatter (relative, of its primary metric): the floor its history's change
    points are judged with (`perf.store.changepoints.history_changes`)."""
    entries = profile.entries if profile is not None else {}
    return {name: math.expm1(metrics["time"].between_sd) for name, metrics in entries.items() if "time" in metrics}


def family_rows(profile: NoiseProfile, metric: str = "time") -> list[dict[str, Any]]:
    """Per family: benchmarks, the median and largest per-process median CV, the largest A/A ratio seen, and
    the family's CV target (`CV_TARGETS`) with whether every benchmark meets it."""
    by_family: dict[str, list[NoiseEntry]] = {}
    for name, metrics in profile.entries.items():
        if metric in metrics:
            by_family.setdefault(profile.families.get(name, "?"), []).append(metrics[metric])
    return [{"family": family, "benchmarks": len(entries), "processes": max(e.processes for e in entries),
             "median CV %": 100 * statistics.median(e.cv for e in entries),
             "max CV %": 100 * max(e.cv for e in entries), "max |ratio-1| %": 100 * max(e.max_ratio for e in entries),
             "CV target %": None if (target := CV_TARGETS.get(family)) is None else 100 * target,
             "meets target": "-" if target is None else ("yes" if max(e.cv for e in entries) <= target else "no")}
            for family, entries in sorted(by_family.items())]  # fmt: skip


def benchmark_rows(profile: NoiseProfile) -> list[dict[str, Any]]:
    """One row per benchmark and metric: per-process median CV, largest A/A ratio, between-process sd."""
    return [{"benchmark": name.rpartition("::")[2], "metric": metric, "family": profile.families.get(name, "?"),
             "processes": e.processes, "median of medians ms": 1e3 * statistics.median(e.medians_s), "CV %": 100 * e.cv,
             "max |ratio-1| %": 100 * e.max_ratio, "between sd %": 100 * e.between_sd, "within se %": 100 * e.within_se}
            for name, metrics in sorted(profile.entries.items()) for metric, e in metrics.items()]  # fmt: skip
