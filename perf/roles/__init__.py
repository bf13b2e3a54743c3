"""The parts of a run the perf session owns: the gate, store, reports and child runs (`perf.session.PerfSession`)."""
