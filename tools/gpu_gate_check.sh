#!/usr/bin/env bash
# One GPU call: the regression gate (baseline, a run slowed by 0.5 ms per inference must fail the compare, the
# unmodified run must pass), NVTX annotation overhead, and one nsys capture of the CUDA-graph benchmark.
set -uo pipefail
export PYTHONUNBUFFERED=1 DETECTOR_CACHE=/tmp/detector-cache PYTHONPATH="$PWD"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
A="perf/test_inference_speed.py -p no:cacheprovider -q --perf-backends torch --benchmark-columns=median,rounds"
python3 -m pytest $A --benchmark-autosave > $OUT/base.log 2>&1; echo "baseline exit $?"; tail -3 $OUT/base.log
python3 -m pytest $A --benchmark-compare --benchmark-compare-fail=median:10% --perf-inject-delay=0.5 > $OUT/slowed.log 2>&1; echo "slowed compare exit $?"
grep -E "regressed|Comparing|passed|failed" $OUT/slowed.log | head -20
python3 -m pytest $A --benchmark-compare --benchmark-compare-fail=median:10% > $OUT/clean.log 2>&1; echo "unmodified compare exit $?"
grep -E "regressed|Comparing|passed|failed" $OUT/clean.log | head -20
python3 -c "from perf.profile.torch_profiler import measure_annotation_overhead as m; print('annotation overhead', m(20000))"
PYTHON=python3 PYTEST_EXTRA="-k b1" bash tools/gpu_nsys_check.sh > $OUT/nsys.log 2>&1; echo "nsys exit $?"
grep -E "passed|failed|Kernels:|GPU idle" $OUT/nsys.log | head
