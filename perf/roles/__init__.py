"""What the perf session owns besides its options: the gate, the store, the reports, the child runs (each a typed object `perf.session.PerfSession` holds and the hooks of `perf.plugin` call into)."""
