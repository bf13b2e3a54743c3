"""Floors only go down: no module of perf/ imports one of a higher floor (docs/architecture.md, "Floors").

Every module of perf/ and detector/ is parsed with `ast`; every import counts, at module level or inside a
function (a lazy import is still an arrow). The floors, top to bottom:

    face      the pytest face: perf/plugin.py (the hooks), fixtures, benchmark modules, commands
    options   perf/options.py: every --perf-* option and its parser
    session   perf/session.py, perf/roles/ (processes.py: face), preflight.py, diskfull.py: the state the hooks share
    library   perf/measure, gate, store, report, profile (one floor; no cycle between the subpackages)
    models    perf/runs.py, subject.py, verdicts.py, validate.py, tabletext.py: what every part reads
    detector  the package under test; it never imports perf

An import from a floor to itself or one below is allowed; anything else fails the test naming the import.
"""

from __future__ import annotations

import ast
import fnmatch
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: Floors, top first; a module may import from its own floor or one below.
FLOORS = ("face", "options", "session", "library", "models", "detector")

#: (glob of a path relative to the repository root, floor, why it is there); the first match wins.
PLACES = (
    ("perf/plugin.py", "face", "the suite's pytest hooks, the one module with hooks"),
    ("perf/fixtures/*", "face", "fixtures: pytest loads them, nothing imports them (`FIXTURES`)"),
    ("perf/test_*.py", "face", "benchmark modules, collected by pytest"),
    ("perf/*_cli.py", "face", "a command (perf-report)"),
    ("perf/store/cli.py", "face", "a command (perf-history)"),
    ("perf/abtest.py", "face", "a command (perf-ab)"),
    ("perf/options.py", "options", "every --perf-* option and its parser"),
    ("perf/session.py", "session", "the state the hooks share: options as parsed, run id, the run's parts"),
    ("perf/roles/processes.py", "face", "the cross-process runs: they call the perf.crossprocess command's parts"),
    ("perf/roles/*", "session", "the parts of a run the session owns: gate, store, report, nsys, processes"),
    ("perf/preflight.py", "session", "start-up refusals, called by the session"),
    ("perf/diskfull.py", "session", "a full disk stops the run, called by the session"),
    ("perf/crossprocess.py", "face", "a command (python -m perf.crossprocess, perf-history simulate)"),
    ("perf/measure/*", "library", "how a figure is taken"),
    ("perf/gate/*", "library", "how a figure is judged"),
    ("perf/store/*", "library", "the results history"),
    ("perf/report/*", "library", "what a person reads"),
    ("perf/profile/*", "library", "timelines of single benchmarks"),
    ("perf/runs.py", "models", "the one saved-run model"),
    ("perf/subject.py", "models", "the model and video under test, their identity"),
    ("perf/verdicts.py", "models", "the gate's verdict files, read back"),
    ("perf/validate.py", "models", "the one validator of saved runs"),
    ("perf/tabletext.py", "models", "the one table renderer: markdown and terminal text"),
    ("perf/__init__.py", "models", "the package's docstring; imports nothing"),
    ("detector/*", "detector", "the package under test"),
)

#: The library's subpackages: imports between them must not form a cycle.
SUBPACKAGES = ("perf.measure", "perf.gate", "perf.store", "perf.report", "perf.profile")

#: Fixture modules are loaded by pytest (conftest.py's pytest_plugins); only other fixture modules import them.
FIXTURES = "perf.fixtures"

#: Known violations still to fix, as "importer -> imported" (empty: none). The test fails when one disappears, so
#: the list only shrinks.
KNOWN: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Arrow:
    """One import: `importer` (a module) imports `imported` (a module) at `line` of the importer's file."""

    importer: str
    imported: str
    line: int

    @property
    def key(self) -> str:
        return f"{self.importer} -> {self.imported}"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def module_path(name: str) -> Path | None:
    """The file of module `name` in the repository, or None (not ours, or not a module)."""
    base = ROOT.joinpath(*name.split("."))
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if candidate.is_file():
            return candidate
    return None


def floor_of(path: Path) -> str:
    relative = path.relative_to(ROOT).as_posix()
    for pattern, floor, _ in PLACES:
        if fnmatch.fnmatchcase(relative, pattern):
            return floor
    raise AssertionError(f"{relative} has no floor: add it to PLACES in {Path(__file__).name}")


def imports_of(path: Path) -> Iterator[Arrow]:
    """Every import of perf or detector in `path`, module level or inside functions; ``from pkg import mod``
    counts as importing ``pkg.mod`` when that is a module."""
    importer = module_name(path)
    package = importer if path.name == "__init__.py" else importer.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join([*base, *([node.module] if node.module else [])])
            else:
                source = node.module or ""
            names = [f"{source}.{a.name}" if module_path(f"{source}.{a.name}") else source for a in node.names]
        else:
            continue
        for name in dict.fromkeys(names):
            if name.partition(".")[0] in ("perf", "detector"):
                yield Arrow(importer, name, node.lineno)


def all_arrows() -> list[Arrow]:
    files = sorted([*ROOT.glob("perf/**/*.py"), *ROOT.glob("detector/**/*.py")])
    return [arrow for path in files for arrow in imports_of(path)]


def floor_of_module(name: str) -> str:
    path = module_path(name)
    if path is None:  # a name inside a module that `from x import y` did not resolve: x is the module
        raise AssertionError(f"import of {name!r}: no such module in the repository")
    return floor_of(path)


def subpackage_of(name: str) -> str | None:
    return next((p for p in SUBPACKAGES if name == p or name.startswith(p + ".")), None)


def floor_violations(arrows: list[Arrow]) -> dict[str, str]:
    """`Arrow.key` -> why, for every import that goes up a floor, and every import of a fixture module from
    outside perf/fixtures/."""
    out: dict[str, str] = {}
    for arrow in arrows:
        source, target = floor_of_module(arrow.importer), floor_of_module(arrow.imported)
        if FLOORS.index(target) < FLOORS.index(source):
            out.setdefault(arrow.key, f"floor {source} -> floor {target}, line {arrow.line}")
        elif arrow.imported.startswith(FIXTURES) and not arrow.importer.startswith(FIXTURES):
            out.setdefault(arrow.key, f"a fixture module imported outside {FIXTURES}, line {arrow.line}")
    return out


def cycle_violations(arrows: list[Arrow]) -> dict[str, str]:
    """`Arrow.key` -> why, for every import between two library subpackages that import each other, directly
    or round a longer cycle."""
    edges: dict[str, set[str]] = {p: set() for p in SUBPACKAGES}
    between = []
    for arrow in arrows:
        source, target = subpackage_of(arrow.importer), subpackage_of(arrow.imported)
        if source and target and source != target and floor_of_module(arrow.importer) == "library":
            edges[source].add(target)
            between.append((arrow, source, target))

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            here = todo.pop()
            if here == goal:
                return True
            if here not in seen:
                seen.add(here)
                todo.extend(edges[here])
        return False

    out: dict[str, str] = {}
    for arrow, source, target in between:
        if reaches(target, source):
            out.setdefault(arrow.key, f"cycle {source} -> {target} -> ... -> {source}, line {arrow.line}")
    return out


def test_every_module_has_a_floor() -> None:
    files = [*ROOT.glob("perf/**/*.py"), *ROOT.glob("detector/**/*.py")]
    assert len(files) > 100, f"found only {len(files)} modules under {ROOT}: the walk is broken"
    for path in files:
        floor_of(path)


def test_the_walk_finds_lazy_imports_and_submodules() -> None:
    arrows = {a.key for a in imports_of(ROOT / "perf" / "session.py")}
    assert "perf.session -> perf.measure.machine" in arrows  # imported inside a method only
    assert "perf.session -> perf.runs" in arrows
    suite = {a.key for a in imports_of(ROOT / "perf" / "report" / "suite.py")}
    assert "perf.report.suite -> perf.report.schema" in suite  # from perf.report import schema


def test_an_arrow_up_a_floor_a_fixture_import_and_a_cycle_are_each_found() -> None:
    arrows = [Arrow("perf.runs", "perf.session", 1), Arrow("perf.abtest", "perf.fixtures.reporting", 2),
              Arrow("perf.gate.compare", "perf.measure.clock", 3), Arrow("perf.measure.cases", "perf.gate.judge", 4),
              Arrow("perf.report.html", "perf.gate.judge", 5), Arrow("perf.session", "perf.runs", 6)]  # fmt: skip
    assert floor_violations(arrows) == {
        "perf.runs -> perf.session": "floor models -> floor session, line 1",
        "perf.abtest -> perf.fixtures.reporting": "a fixture module imported outside perf.fixtures, line 2"}
    assert set(cycle_violations(arrows)) == {"perf.gate.compare -> perf.measure.clock",
                                             "perf.measure.cases -> perf.gate.judge"}


def test_imports_only_go_down_a_floor() -> None:
    arrows = all_arrows()
    assert len(arrows) > 300, f"found only {len(arrows)} imports: the walk is broken"
    found = {**floor_violations(arrows), **cycle_violations(arrows)}
    new = sorted(f"{key} ({why})" for key, why in found.items() if key not in KNOWN)
    gone = sorted(KNOWN - found.keys())
    assert not new, "imports that go up a floor (move the code down, or pass the value in):\n" + "\n".join(new)
    assert not gone, "no longer violations, remove them from KNOWN:\n" + "\n".join(gone)


def test_detector_never_imports_perf() -> None:
    wrong = [f"{a.key}, line {a.line}" for a in all_arrows()
             if a.importer.startswith("detector") and a.imported.startswith("perf")]  # fmt: skip
    assert not wrong, "detector/ imports perf/:\n" + "\n".join(wrong)


def test_only_perf_plugin_defines_pytest_hooks() -> None:
    """One module of perf/ holds the hooks, the parametrisation of the benchmark modules included."""
    found = []
    for path in sorted(ROOT.glob("perf/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("pytest_"):
                name = path.relative_to(ROOT).as_posix()
                if name != "perf/plugin.py":
                    found.append(f"{name}: {node.name}")
    assert not found, "pytest hooks outside perf/plugin.py:\n" + "\n".join(found)
