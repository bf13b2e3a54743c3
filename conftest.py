"""Registers the perf suite's pytest plugin (options, markers, hooks) and its fixture modules for tests/ and perf/."""

pytest_plugins = [
    "perf.plugin",
    "perf.fixtures.reporting",
    "perf.fixtures.models",
    "perf.fixtures.videos",
    "perf.fixtures.profiling",
]
