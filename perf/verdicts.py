"""The gate's verdict files (`VERDICT_FILE`; written by `perf.gate.table.write_verdicts`, docs/method.md section
8), read back for the reports. They belong to the run whose ``perf_run.run_id`` is ``current.run_id`` and to no
other (`Verdicts.judges`); a file without it (an older one, or another tool's) belongs to no run."""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perf.runs import HistoryError, SavedRun, mapping, read_json, text_value
from perf.validate import value_problem

#: What ``--perf-compare`` writes into the reports folder (and ``perf-compare.md`` beside it).
VERDICT_FILE = "perf-compare.json"
_FIGURES = re.compile(r"\s[-+]?\d.*$")  # " 1.085 [1.051, 1.120] slower": a moved metric's figures
_CANNOT_RULE_OUT = re.compile(r"(?:cannot rule out|at most) \+[\d.]+%(?: of the frame)?")  # an open or bounded suspect


@dataclass(frozen=True)
class Verdicts:
    """A verdict file: ``document`` as read (``verdicts["rows"]``), its ``entries`` (lower-case ``verdict``),
    the run judged (``current_*``; run id None: no run) and its baseline, as far as the file tells."""

    path: Path
    document: Any
    entries: tuple[dict[str, Any], ...]
    current_run_id: str | None = None
    current_injected: Mapping[str, Any] = field(default_factory=dict)
    baseline_run_id: str | None = None
    baseline_path: str | None = None
    baseline_number: int | None = None
    baseline_commit: str | None = None

    def __getitem__(self, key: str) -> Any:
        return self.document[key]

    def judges(self, run: SavedRun) -> bool:
        """Whether these are ``run``'s verdicts: the file names the run it judged and ``run`` is that run."""
        return self.current_run_id is not None and run.run_id == self.current_run_id

    @property
    def baseline_label(self) -> str:
        """The baseline as a person reads it: ``run 0002 (commit abc1234, file 0002_abc.json)``, or what the
        file says of it; ``"not named in the file"`` when it says nothing."""
        about = ", ".join(([f"commit {self.baseline_commit[:7]}"] if self.baseline_commit else [])
                          + ([f"file {Path(self.baseline_path).name}"] if self.baseline_path else []))
        number = "a run" if self.baseline_number is None else f"run {self.baseline_number:04d}"
        if not about:
            return number if self.baseline_number is not None else "not named in the file"
        return f"{number} ({about})"

    def entry(self, fullname: str, name: str | None = None) -> dict[str, Any] | None:
        """The entry of a benchmark, by full name first, then by short name; None when it has none."""
        return next((e for e in self.entries if fullname in (e.get("fullname"), e.get("name"))),
                    next((e for e in self.entries if name is not None and e.get("name") == name), None))


def note_phrase(entry: Mapping[str, Any]) -> str:
    """A verdict's note column without the figures (they stay in the file's row): the metrics that moved
    (``moved: host latency (sync) slower``), the note's first clause before its details (``history too
    short``) and an inconclusive row's ``cannot rule out +3.1%``; "" when there is nothing to say."""
    moved = [item.strip() for item in str(entry.get("moved") or "").split(";") if item.strip()]
    parts = ["moved: " + ", ".join(f"{_FIGURES.sub('', m)} {m.split()[-1]}" for m in moved)] if moved else []
    note = str(entry.get("note") or "")
    first = _without_details(note.split(";")[0].split(": ")[0]).strip()
    found = _CANNOT_RULE_OUT.search(note)
    if first == str(entry.get("verdict") or ""):  # "inconclusive: cannot rule out ...": the verdict says it
        first = ""
    parts += [p for p in (first, found.group(0) if found else "") if p and p not in parts]
    return "; ".join(parts)


def _without_details(text: str) -> str:
    """``text`` without its parenthesised asides (`` (2 comparable run(s), ...)``, nested ones too); a word's
    own parenthesis (``pair(s)``) stays. A loop, not a regular expression: asides nest."""
    out, depth = [], 0
    for i, char in enumerate(text):
        if char == "(" and (depth or (i > 0 and text[i - 1] == " ")):
            depth += 1
            if depth == 1 and out and out[-1] == " ":
                out.pop()
        elif depth:
            depth -= char == ")"
        else:
            out.append(char)
    return "".join(out)


def _verdict_entries(doc: Any) -> list[Any]:
    if isinstance(doc, dict):
        for key in ("rows", "verdicts", "benchmarks", "results"):
            if isinstance(doc.get(key), list):
                return doc[key]
        if doc and all(isinstance(v, dict) for v in doc.values()):  # {name: {...}}
            return [{"name": k, **v} for k, v in doc.items()]
        if doc and all(isinstance(v, str) for v in doc.values()):  # {name: "slower"}
            return [{"name": k, "verdict": v} for k, v in doc.items()]
    return doc if isinstance(doc, list) else []


def load_verdicts(reports_dir: str | os.PathLike[str] = "reports", *,
                  path: str | os.PathLike[str] | None = None) -> Verdicts | None:  # fmt: skip
    """The verdicts of the last ``--perf-compare`` (``<reports_dir>/perf-compare.json``; None when there is
    none), or of the verdict file ``path`` (which must exist; the shapes read: docs/method.md, section 8).
    `HistoryError`: unreadable, or no entries with a name and a ``verdict`` (or ``status``)."""
    if path is None and not (Path(reports_dir) / VERDICT_FILE).exists():
        return None
    path = Path(reports_dir) / VERDICT_FILE if path is None else Path(path)
    document = read_json(path, "the verdicts")
    if (problem := value_problem(document)) is not None:
        raise HistoryError(f"'{path}': not usable compare verdicts: {problem}")
    entries = tuple({**e, "verdict": str(verdict).lower()} for e in _verdict_entries(document)
                    if (verdict := mapping(e).get("verdict", mapping(e).get("status"))) is not None
                    and (e.get("name") or e.get("fullname")))  # fmt: skip
    if not entries:
        raise HistoryError(f"'{path}': holds no compare verdicts (entries with a name and a 'verdict')")
    current, baseline = mapping(mapping(document).get("current")), mapping(mapping(document).get("baseline"))
    number = baseline.get("number")
    return Verdicts(path, document, entries, text_value(current.get("run_id")), dict(mapping(current.get("injected"))),
                    text_value(baseline.get("run_id")), text_value(baseline.get("path")),
                    number if type(number) is int else None, text_value(baseline.get("commit")))  # fmt: skip
