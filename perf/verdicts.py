"""The gate's verdict files: what ``--perf-compare`` wrote (``<reports>/perf-compare.json``, `VERDICT_FILE`; see
`perf.gate.table.write_verdicts` for the format), read back for the reports and the store.

The verdicts belong to the run whose ``perf_run.run_id`` is ``current.run_id`` and to no other (`Verdicts.judges`);
a file without it (an older one, or another tool's) belongs to no run. Formats 2 and 3 are read, and other tools'
verdict files (`load_verdicts`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from perf.runs import HistoryError, SavedRun, read_json, text_value

#: What ``--perf-compare`` writes into the reports folder (and ``perf-compare.md`` beside it).
VERDICT_FILE = "perf-compare.json"


@dataclass(frozen=True)
class Verdicts:
    """A verdict file: ``document`` as read (``verdicts["rows"]``) and its ``entries``, each a dict with ``name``
    and/or ``fullname`` and a lower-case ``verdict``. ``current_*``: the run judged (its ``run_id``, None: no run)
    and its test-only options; ``baseline_*``: the run it was judged against, as far as the file says."""

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
        """The baseline as a person reads it: ``run 0002 (commit abc1234, file 0002_abc.json)``, or what the file
        says of it; ``"not named in the file"`` when it says nothing."""
        about = [f"commit {self.baseline_commit[:7]}" if self.baseline_commit else "",
                 f"file {Path(self.baseline_path).name}" if self.baseline_path else ""]  # fmt: skip
        about_text = ", ".join(a for a in about if a)
        number = f"run {self.baseline_number:04d}" if self.baseline_number is not None else "a run"
        return f"{number} ({about_text})" if about_text else number if self.baseline_number is not None else (
            "not named in the file")

    def entry(self, fullname: str, name: str | None = None) -> dict[str, Any] | None:
        """The entry of a benchmark, by full name first, then by short name; None when it has none."""
        for entry in self.entries:
            if fullname in (entry.get("fullname"), entry.get("name")):
                return entry
        return next((e for e in self.entries if name is not None and e.get("name") == name), None)


_FIGURES = re.compile(r"\s[-+]?\d.*$")  # " 1.085 [1.051, 1.120] slower": a moved metric's figures
_CANNOT_RULE_OUT = re.compile(r"cannot rule out \+[\d.]+%(?: of the frame)?")


def note_phrase(entry: Mapping[str, Any]) -> str:
    """A verdict's note column without the figures (they stay in the file's row): the metrics that moved
    (``moved: host latency (sync) slower``), the note's first clause before its details (``history too short``)
    and an inconclusive row's ``cannot rule out +3.1%``; "" when there is nothing to say. Any format's rows."""
    parts: list[str] = []
    moved = [item.strip() for item in str(entry.get("moved") or "").split(";") if item.strip()]
    if moved:
        parts.append("moved: " + ", ".join(f"{_FIGURES.sub('', item)} {item.split()[-1]}" for item in moved))
    note = str(entry.get("note") or "")
    first = _without_details(note.split(";")[0].split(": ")[0]).strip()
    found = _CANNOT_RULE_OUT.search(note)
    if first == str(entry.get("verdict") or ""):  # "inconclusive: cannot rule out ...": the verdict column says it
        first = ""
    parts += [p for p in (first, found.group(0) if found else "") if p and p not in parts]
    return "; ".join(parts)


def _without_details(text: str) -> str:
    """``text`` without its parenthesised asides (`` (2 comparable run(s), ...)``, nested ones too); a word's own
    parenthesis (``pair(s)``) stays."""
    out, depth = [], 0
    for i, char in enumerate(text):
        if char == "(" and (depth or (i > 0 and text[i - 1] == " ")):
            depth += 1
            if depth == 1 and out and out[-1] == " ":
                out.pop()
            continue
        if depth:
            depth -= char == ")"
            continue
        out.append(char)
    return "".join(out)


def _verdict_entries(doc: Any) -> Sequence[Any]:
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
    """The verdicts of the last ``--perf-compare`` (``<reports_dir>/perf-compare.json``; None when there is none),
    or of the verdict file ``path`` (which must exist). Besides the gate's ``{"rows": [entries]}``: a list of
    entries, ``{"verdicts" | "benchmarks" | "results": [entries]}``, ``{name: entry}`` or ``{name: "slower"}``; an
    entry has ``name`` and/or ``fullname`` and ``verdict`` (or ``status``). `HistoryError`: unreadable, or no verdicts.
    """
    if path is None:
        path = Path(reports_dir) / VERDICT_FILE
        if not path.exists():
            return None
    path = Path(path)
    document = read_json(path, "the verdicts")
    entries = []
    for entry in _verdict_entries(document):
        verdict = entry.get("verdict", entry.get("status")) if isinstance(entry, dict) else None
        if verdict is not None and (entry.get("name") or entry.get("fullname")):
            entries.append({**entry, "verdict": str(verdict).lower()})
    if not entries:
        raise HistoryError(f"'{path}': holds no compare verdicts (entries with a name and a 'verdict')")
    current = _section(document, "current")
    baseline = _section(document, "baseline")
    injected = current.get("injected")
    number = baseline.get("number")
    return Verdicts(path, document, tuple(entries), current_run_id=text_value(current.get("run_id")),
                    current_injected=dict(injected) if isinstance(injected, Mapping) else {},
                    baseline_run_id=text_value(baseline.get("run_id")), baseline_path=text_value(baseline.get("path")),
                    baseline_number=number if isinstance(number, int) and not isinstance(number, bool) else None,
                    baseline_commit=text_value(baseline.get("commit")))  # fmt: skip


def _section(document: Any, key: str) -> Mapping[str, Any]:
    """``document[key]`` when the document is an object and that is one; {} otherwise."""
    value = document.get(key) if isinstance(document, dict) else None
    return value if isinstance(value, Mapping) else {}
