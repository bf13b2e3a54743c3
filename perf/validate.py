"""The one check of saved data every reader runs first: `run_problem` (saved runs) and `report_problem` (the
suite's ``perf-report.json``) give a one-line problem the reader turns into an error naming the file; a file that
passes has every key a reader indexes, with the type it expects. `row_problem` checks a report's rows;
`value_problem`, what no reader can take anywhere in a file (text no file can be written with, an integer no float
holds), is part of both and checks the other files the reports read."""

from __future__ import annotations

import datetime
import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Protocol

#: The kinds of a report column (`perf.report.schema` declares each column's): a number (None or NaN when not
#: measured), text (anything, shown as written), a list of numbers, a list of strings.
NUMBER, TEXT, NUMBERS, TEXTS = "number", "text", "numbers", "texts"
#: The stats pytest-benchmark's ``--benchmark-compare`` table reads from every benchmark of a saved run.
BENCHMARK_STATS = ("min", "max", "mean", "stddev", "median", "iqr", "rounds", "iterations")


class Table(Protocol):
    """A report table (`perf.report.schema.TableSpec`): ``title``; ``column(key)``, a column (``kind``) or None."""

    title: str

    def column(self, key: str) -> Any: ...


def is_number(value: Any) -> bool:
    """Whether ``value`` is an int or float (a bool is not)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def kind_of(value: Any) -> str:
    """What a message calls the JSON type of ``value``: ``an object``, ``a list``, ``a string``, ``a number``, ..."""
    kinds = {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}
    return kinds.get(type(value), "a number")


def _not_number(where: str, value: Any, finite: bool = False) -> str | None:
    """What makes ``value`` no number a reader can take as a float: not an int or float, an integer too large for
    a float, or (``finite``) an infinity or a number that is one once scaled to nano units (seconds drawn as ms,
    ...: above about 1.8e299); NaN, "not measured", passes."""
    if not is_number(value):
        return f"{where} is {value!r}, not a number"
    try:
        number = float(value)
    except OverflowError:
        return f"{where} is an integer of about 10^{int(math.log10(abs(value)))}, too large for a number"
    if finite and math.isinf(number * 1e9):
        return f"{where} is {number!r}, " + ("not a finite number" if math.isinf(number) else "too large for a number")
    return None


def _numbers_problem(where: str, values: Any, finite: bool = False,
                     check: Callable[[str, Any, bool], str | None] | None = None) -> str | None:  # fmt: skip
    if not isinstance(values, list):
        return f"{where} is {kind_of(values)}, expected a list of numbers"
    return _first((check or _not_number)(f"{where}[{i}]", value, finite) for i, value in enumerate(values))


def _time_problem(where: str, value: Any, finite: bool = True) -> str | None:
    """`_not_number`, and a negative number: a pytest-benchmark statistic or round is a time or a count."""
    if (problem := _not_number(where, value, finite)) is None and value < 0:
        return f"{where} is {value!r}, negative: expected a time or a count >= 0"
    return problem


def utc_time(when: str | None) -> datetime.datetime | None:
    """A saved run's ``datetime`` (ISO 8601, as pytest-benchmark writes it) in UTC without an offset (a time
    without one is UTC); None for no such time: absent, not ISO 8601, or past year 9999 once in UTC."""
    try:
        moment = datetime.datetime.fromisoformat(when or "")
        return moment if moment.tzinfo is None else moment.astimezone(datetime.timezone.utc).replace(tzinfo=None)
    except (ValueError, OverflowError):
        return None


def value_problem(doc: Any) -> str | None:
    """What makes a value anywhere in parsed JSON ``doc`` unusable by every reader: a string (or key) that is not
    valid Unicode text (a lone surrogate, ``"\\ud800"``, which no file can be written with) or an integer too large
    for a float; its path (``benchmarks[0].name``) names it. A walk, not a recursion: JSON may nest as deep as the
    parser let it."""
    stack = [("", doc)]
    while stack:
        at, value = stack.pop()
        where, problem = at or "the document", None
        if isinstance(value, str):
            problem = _text_problem(where, value)
        elif isinstance(value, int) and not isinstance(value, bool):
            problem = _not_number(where, value)
        elif isinstance(value, list):
            stack += [(f"{at}[{i}]", item) for i, item in reversed(list(enumerate(value)))
                      if not isinstance(item, float)]  # fmt: skip
        elif isinstance(value, dict):
            problem = _first(_text_problem(f"a key of {where}", key) for key in value)
            stack += [(_child(at, key), item) for key, item in reversed(list(value.items()))]
        if problem is not None:
            return problem
    return None


def _child(at: str, key: str) -> str:
    """The path of ``key`` in the object at ``at``: ``at.key``, or ``at['a key']`` for a key no identifier."""
    return (f"{at}.{key}" if at else key) if key.isidentifier() else f"{at}[{key!r}]"


def _text_problem(where: str, text: str) -> str | None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        return f"{where} is not valid Unicode text (it holds \\u{ord(text[e.start]):04x}, a lone surrogate)"
    return None


def _first(problems: Iterable[str | None]) -> str | None:
    """The first problem; the checks are generators, so nothing after it runs."""
    return next((p for p in problems if p is not None), None)


# A table read by one loop, not jsonschema: a schema's messages ("1234 is not of type 'string'") would not name the
# path as the pinned ones do, and no schema says "too large for a number". Null is absent; parents come first.
#: What the readers index in a saved run (beyond 'benchmarks') and in each benchmark of it, and as what.
_RUN_KEYS = (("machine_info", dict), ("commit_info", dict), ("datetime", str), ("machine_info.perf", dict),
             ("machine_info.perf_subject", dict), ("machine_info.node", str), ("commit_info.id", str),
             ("commit_info.branch", str), ("machine_info.perf_subject.backends", list),
             ("machine_info.perf_subject.precisions", list), ("commit_info.dirty", bool), ("perf_run", dict),
             ("perf_run.injected", dict))
_BENCHMARK_KEYS = (("extra_info", dict), ("params", dict), ("group", str), ("extra_info.e2e_fps", NUMBER),
                   ("extra_info.stage_ms_per_frame", dict), ("extra_info.metrics", dict))


def _declared(doc: Any, keys: Iterable[tuple[str, Any]], prefix: str = "") -> Iterator[str | None]:
    """Each problem of the values at ``keys``' paths of ``doc``: ``'key'`` or ``a.b`` after ``prefix`` names one."""
    for path, kind in keys:
        value = doc
        for key in path.split("."):
            value = value.get(key) if isinstance(value, dict) else None
        yield _kind_problem(prefix + (path if "." in path else f"'{path}'"), value, kind)


def _kind_problem(where: str, value: Any, kind: Any, finite: bool = True) -> str | None:
    """``<where> is <what value is>, expected <a kind>`` when ``value`` is given (not None) and not a ``kind``: a
    type, or a column's kind (`NUMBER` and `NUMBERS`, each number ``finite`` or not; `TEXTS`; `TEXT`, anything)."""
    if value is None or kind == TEXT:
        return None
    if kind in (NUMBER, NUMBERS):
        return (_not_number if kind == NUMBER else _numbers_problem)(where, value, finite)
    if kind == TEXTS:
        texts = isinstance(value, list) and all(isinstance(v, str) for v in value)
        return None if texts else f"{where} is {value!r}, expected a list of strings"
    return None if isinstance(value, kind) else f"{where} is {kind_of(value)}, expected {kind_of(kind())}"


def _benchmark_problems(bench: Any, i: int, complete: bool) -> Iterator[str | None]:
    if not isinstance(bench, dict):
        yield f"benchmarks[{i}] is {kind_of(bench)}, expected an object"
    for key in ("name", "fullname"):
        yield None if isinstance(bench.get(key), str) else f"benchmarks[{i}] has no string '{key}'"
    where, stats = f"benchmark {bench['fullname']!r}", bench.get("stats")
    yield None if isinstance(stats, dict) else f"{where} has no 'stats' object"
    required = BENCHMARK_STATS if complete else ("median",)
    yield from (f"{where}: stats.{key} is missing" for key in required if key not in stats)
    for key, value in stats.items():
        if key == "outliers":  # pytest-benchmark's "1;0" text
            yield None if isinstance(value, str) else f"{where}: stats.outliers is {value!r}, expected a string"
        else:
            yield (_numbers_problem(f"{where}: stats.data", value, True, _time_problem) if key == "data"
                   else _time_problem(f"{where}: stats.{key}", value))  # fmt: skip
    yield from _declared(bench, _BENCHMARK_KEYS, f"{where}: ")
    for name, metric in ((bench.get("extra_info") or {}).get("metrics") or {}).items():
        yield _kind_problem(f"{where}: extra_info.metrics.{name}", metric, dict)
        if (data := (metric or {}).get("data")) is not None:  # times, as the rounds
            yield _numbers_problem(f"{where}: extra_info.metrics.{name}.data", data, True, _time_problem)


def _run_problems(doc: Any, complete: bool) -> Iterator[str | None]:
    if not isinstance(doc, dict):
        yield f"the top level is {kind_of(doc)}, expected an object with a 'benchmarks' list"
    if not isinstance(doc.get("benchmarks"), list):
        found = "missing" if "benchmarks" not in doc else kind_of(doc["benchmarks"])
        yield f"'benchmarks' is {found}, expected a list"
    if complete and "machine_info" not in doc:
        yield "'machine_info' is missing"
    yield from _declared(doc, _RUN_KEYS)
    if isinstance(when := doc.get("datetime"), str) and utc_time(when) is None:  # the store orders runs by it
        yield f"'datetime' is {when!r}, not an ISO 8601 time (pytest-benchmark writes one)"
    for i, bench in enumerate(doc["benchmarks"]):
        yield from _benchmark_problems(bench, i, complete)
    yield value_problem(doc)


def run_problem(doc: Any, *, complete: bool = False) -> str | None:
    """What makes ``doc`` unusable as a saved run (``NNNN_*.json``, ``--benchmark-json``; docs/architecture.md,
    "Saved runs"), or None; ``complete``: also `BENCHMARK_STATS` and machine_info, as ``--benchmark-compare`` reads."""
    return _first(_run_problems(doc, complete))


def row_problem(table: Table, row: Mapping[str, Any], where: str | None = None) -> str | None:
    """What makes a value of ``row`` the wrong kind for its declared column of ``table``, or None."""
    where = where or f"table {table.title!r}"
    for key, value in row.items():
        column = table.column(key) if isinstance(key, str) else None
        if column is not None and (problem := _kind_problem(f"{where}: {key!r}", value, column.kind, False)):
            return problem
    return None


def report_problem(doc: Any, find_table: Callable[[str], Table | None]) -> str | None:
    """What makes ``doc`` unusable as the suite's ``perf-report.json`` (``{"tables": {title: [rows]}}``), or
    None; only the cells of tables ``find_table`` knows are checked for their column's kind."""
    tables = doc.get("tables") if isinstance(doc, dict) else None
    if not isinstance(tables, dict):
        return 'not a perf report: expected {"tables": {name: [rows]}}'
    for name, rows in tables.items():
        if not isinstance(rows, list):
            return f"table {name!r} is {kind_of(rows)}, expected a list of rows"
        spec = find_table(name)
        for i, row in enumerate(rows):
            where = f"table {name!r} row {i}"
            if not isinstance(row, dict):
                return f"{where} is {kind_of(row)}, expected an object"
            if spec is not None and (problem := row_problem(spec, row, where)):
                return problem
    return value_problem(doc)
