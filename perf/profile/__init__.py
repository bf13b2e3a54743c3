"""Profiling: torch.profiler traces and Nsight Systems captures of single benchmarks."""
