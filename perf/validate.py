"""The one check of saved data every reader runs first: saved benchmark runs and the suite's ``perf-report.json``.

Readers (`perf.runs`, `perf.report.inputs`, `perf.preflight`) call `run_problem` / `report_problem` on the parsed
JSON and turn a problem into a one-line error naming the file; a file that passes has every key a reader indexes,
with the type it expects. `perf.report.suite.PerfReport.add` checks each row with `row_problem` before saving it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol

#: The kinds of a report column (`perf.report.schema` declares each column's): a number (None or NaN when not
#: measured), text (anything, shown as written), a list of numbers, a list of strings.
NUMBER, TEXT, NUMBERS, TEXTS = "number", "text", "numbers", "texts"


class Table(Protocol):
    """What `row_problem` reads of a report table (`perf.report.schema.TableSpec`)."""

    title: str

    def column(self, key: str) -> Any:
        """The declared column ``key`` (with a ``kind``), or None."""
        ...

#: The stats pytest-benchmark's ``--benchmark-compare`` table reads from every benchmark of a saved run.
BENCHMARK_STATS = ("min", "max", "mean", "stddev", "median", "iqr", "rounds", "iterations")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number")


def _numbers_problem(where: str, values: Any) -> str | None:
    if not isinstance(values, list):
        return f"{where} is {_kind(values)}, expected a list of numbers"
    for i, value in enumerate(values):
        if not _is_number(value):
            return f"{where}[{i}] is {value!r}, not a number"
    return None


def _first(problems: Iterable[str | None]) -> str | None:
    return next((p for p in problems if p is not None), None)


def _benchmark_problem(bench: Any, i: int, complete: bool) -> str | None:
    if not isinstance(bench, dict):
        return f"benchmarks[{i}] is {_kind(bench)}, expected an object"
    for key in ("name", "fullname"):
        if not isinstance(bench.get(key), str):
            return f"benchmarks[{i}] has no string '{key}'"
    where = f"benchmark {bench['fullname']!r}"
    stats = bench.get("stats")
    if not isinstance(stats, dict):
        return f"{where} has no 'stats' object"
    for key in BENCHMARK_STATS if complete else ("median",):
        if key not in stats:
            return f"{where}: stats.{key} is missing"
    for key, value in stats.items():
        if key == "data":
            problem = _numbers_problem(f"{where}: stats.data", value)
            if problem:
                return problem
        elif key == "outliers":
            if not isinstance(value, str):
                return f"{where}: stats.outliers is {value!r}, expected a string"
        elif not _is_number(value):
            return f"{where}: stats.{key} is {value!r}, not a number"
    for key in ("extra_info", "params"):
        if bench.get(key) is not None and not isinstance(bench[key], dict):
            return f"{where}: '{key}' is {_kind(bench[key])}, expected an object"
    if bench.get("group") is not None and not isinstance(bench["group"], str):
        return f"{where}: 'group' is {_kind(bench['group'])}, expected a string"
    extra = bench.get("extra_info") or {}
    if extra.get("e2e_fps") is not None and not _is_number(extra["e2e_fps"]):
        return f"{where}: extra_info.e2e_fps is {extra['e2e_fps']!r}, not a number"
    if extra.get("stage_ms_per_frame") is not None and not isinstance(extra["stage_ms_per_frame"], dict):
        return f"{where}: extra_info.stage_ms_per_frame is {_kind(extra['stage_ms_per_frame'])}, expected an object"
    metrics = extra.get("metrics")
    if metrics is None:
        return None
    if not isinstance(metrics, dict):
        return f"{where}: extra_info.metrics is {_kind(metrics)}, expected an object"
    return _first(f"{where}: extra_info.metrics.{name} is {_kind(m)}, expected an object"
                  if not isinstance(m, dict) else
                  _numbers_problem(f"{where}: extra_info.metrics.{name}.data", m["data"]) if m.get("data") is not None
                  else None
                  for name, m in metrics.items())  # fmt: skip


def run_problem(doc: Any, *, complete: bool = False) -> str | None:
    """What makes ``doc`` (a parsed JSON document) unusable as a saved benchmark run (pytest-benchmark's
    ``NNNN_*.json`` or a ``--benchmark-json`` file), or None when it is usable.

    Required: ``benchmarks``, a list of objects with a string ``name`` and ``fullname`` and a numeric
    ``stats.median``; where present, other stats are numbers (``outliers`` a string), ``stats.data`` (seconds) and
    ``extra_info.metrics[*].data`` lists of numbers, ``extra_info``, ``params``, ``machine_info`` and
    ``commit_info`` objects, ``datetime`` a string. ``complete``: also what ``--benchmark-compare`` reads
    (`BENCHMARK_STATS` of every benchmark, ``machine_info``).
    """
    if not isinstance(doc, dict):
        return f"the top level is {_kind(doc)}, expected an object with a 'benchmarks' list"
    if not isinstance(doc.get("benchmarks"), list):
        found = "missing" if "benchmarks" not in doc else _kind(doc["benchmarks"])
        return f"'benchmarks' is {found}, expected a list"
    if complete and "machine_info" not in doc:
        return "'machine_info' is missing"
    for key in ("machine_info", "commit_info"):
        if doc.get(key) is not None and not isinstance(doc[key], dict):
            return f"'{key}' is {_kind(doc[key])}, expected an object"
    if doc.get("datetime") is not None and not isinstance(doc["datetime"], str):
        return f"'datetime' is {_kind(doc['datetime'])}, expected a string"
    return _first(_benchmark_problem(bench, i, complete) for i, bench in enumerate(doc["benchmarks"]))


def row_problem(table: Table, row: Mapping[str, Any], where: str | None = None) -> str | None:
    """What makes a value of ``row`` the wrong kind for its column of ``table`` (`perf.report.schema`: a number,
    a list of numbers or of strings; text is anything), or None. Keys the table does not declare are not looked
    at here (`perf.report.schema.TableSpec.check` refuses them when a row is added)."""
    where = where or f"table {table.title!r}"
    for key, value in row.items():
        column = table.column(key) if isinstance(key, str) else None
        if column is None or value is None:
            continue
        if column.kind == NUMBER and not _is_number(value):
            return f"{where}: {key!r} is {value!r}, not a number"
        if column.kind == NUMBERS:
            problem = _numbers_problem(f"{where}: {key!r}", value)
            if problem:
                return problem
        if column.kind == TEXTS and not (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            return f"{where}: {key!r} is {value!r}, expected a list of strings"
    return None


def _row_problem(spec: Table | None, table: str, i: int, row: Any) -> str | None:
    where = f"table {table!r} row {i}"
    if not isinstance(row, dict):
        return f"{where} is {_kind(row)}, expected an object"
    return None if spec is None else row_problem(spec, row, where)


def report_problem(doc: Any, find_table: Callable[[str], Table | None]) -> str | None:
    """What makes ``doc`` unusable as the suite's ``perf-report.json`` (``{"tables": {title: [row objects]}}``,
    each cell of a table that ``find_table`` knows (`perf.report.schema.find_suite_table`) of its column's kind),
    or None. Tables it does not know (a report of another version) are only checked for shape."""
    tables = doc.get("tables") if isinstance(doc, dict) else None
    if not isinstance(tables, dict):
        return 'not a perf report: expected {"tables": {name: [rows]}}'
    for name, rows in tables.items():
        if not isinstance(rows, list):
            return f"table {name!r} is {_kind(rows)}, expected a list of rows"
        spec = find_table(name)
        problem = _first(_row_problem(spec, name, i, row) for i, row in enumerate(rows))
        if problem:
            return problem
    return None
