"""Registers the perf suite's pytest plugins (options, markers, fixtures, reports, nsys) for tests/ and perf/."""

pytest_plugins = [
    "perf.plugin",
    "perf.profile.plugin",
    "perf.gate.plugin",
    "perf.preflight",
    "perf.gate.crossprocess_plugin",
    "perf.store.plugin",
    "perf.fixtures.reporting",
    "perf.fixtures.models",
    "perf.fixtures.videos",
    "perf.fixtures.profiling",
]
