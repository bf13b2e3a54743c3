"""The results history in a database (`perf.store.db`, `perf.store.schema`) and its change points."""
