"""The results history in a database (`perf.store.db`, `perf.store.schema`) and its change points. This module
imports nothing heavy: the option parser reads `in_memory_sqlite` before SQLAlchemy is loaded."""

from __future__ import annotations

from pathlib import Path


def in_memory_sqlite(where: str) -> bool:
    """Whether the store ``where`` (a path or URL) is SQLite's in-memory database (``:memory:``, ``sqlite://``,
    ``sqlite:///``, ``sqlite:///:memory:``, ``mode=memory``), which loses every run at exit."""
    if not where.startswith("sqlite://"):
        return where == ":memory:"
    path, _, query = where.removeprefix("sqlite://").partition("?")
    return path.removeprefix("/") in ("", ":memory:") or "mode=memory" in query


def store_location(where: str | None, base: Path) -> str | None:
    """The store ``where`` as given (None for none given), a path (an SQLite file) joined to ``base`` when relative:
    ``none``, URLs (``sqlite:///...``, ``postgresql://...``) and ``:memory:`` stay as they are."""
    where = (where or "").strip()
    if not where or where.lower() == "none" or "://" in where or in_memory_sqlite(where):
        return where or None
    return str(base / Path(where).expanduser())
