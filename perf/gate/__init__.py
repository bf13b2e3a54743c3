"""The regression gate: statistics and one decision rule, compare, noise profile, self-test, child processes."""
