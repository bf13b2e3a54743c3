"""Measuring: the suite's cases, clock, stability gate, controls, telemetry, memory, parity and the machine."""
