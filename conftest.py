"""Registers the perf suite's pytest plugins (options, markers, fixtures, reports, nsys) for tests/ and perf/."""

pytest_plugins = [
    "perf.plugin",
    "perf.nsys_plugin",
    "perf.gate_plugin",
    "perf.preflight",
    "perf.noise_plugin",
    "perf.fixtures.reporting",
    "perf.fixtures.models",
    "perf.fixtures.videos",
    "perf.fixtures.profiling",
]
