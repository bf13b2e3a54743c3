"""The results history in a database (`perf.store.db`, `perf.store.schema`) and its change points. This module
imports nothing heavy: the option parser reads `in_memory_sqlite` before SQLAlchemy is loaded."""


def in_memory_sqlite(where: str) -> bool:
    """Whether the store ``where`` (a path or URL) is SQLite's in-memory database (``:memory:``, ``sqlite://``,
    ``sqlite:///``, ``sqlite:///:memory:``, ``mode=memory``), which loses every run at exit."""
    if not where.startswith("sqlite://"):
        return where == ":memory:"
    path, _, query = where.removeprefix("sqlite://").partition("?")
    return path.removeprefix("/") in ("", ":memory:") or "mode=memory" in query
