"""The results history in a database (`perf.store.db`: SQLite by default, PostgreSQL for a fleet of runners;
tables and migrations in `perf.store.schema`) and the change points found in it (`perf.store.changepoints`)."""
