#!/usr/bin/env bash
# One GPU call: the speed paths side by side (#7), the harness overhead, the torch.compile cache and batch-256
# kernel tables of the fastest paths (the batch sweep: tools/gpu_speed_sweep.py). Run from the repository root
# on the GPU machine:
#     OUT=<dir> bash tools/gpu_speed.sh          (about 8 minutes on an H100)
# Prints every table; leaves speed.log, perf-report-speed.md and the saved benchmark runs
# (benchmarks.tgz, with every round: --benchmark-save-data) under $OUT.
set -uo pipefail
: "${OUT:?set OUT to the folder that comes back}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/speed.log") 2>&1
export PYTHONUNBUFFERED=1 DETECTOR_CACHE=/tmp/detector-cache
for wheel in .whl/pycocotools-*.whl .dev/wheels/pycocotools-*.whl; do
    [ -f "$wheel" ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel"
done
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
start=$(date +%s)
stamp() { echo "== [$(($(date +%s) - start)) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
CACHE=/tmp/perf-cache
COMMON=(-p no:cacheprovider -q -rs --perf-device cuda --perf-backends torch --perf-cache-dir "$CACHE")

stamp "inference: torch eager, torch-graph, torch-compile (fp16); fp16 and fp32; batch 1 and 256; harness overhead"
timeout 330 python3 -m pytest perf/test_inference_speed.py perf/test_harness_overhead.py "${COMMON[@]}" \
    --perf-precisions fp16,fp32 --perf-batch-sizes 1,256 -k "not (torch-compile and fp32)" \
    --perf-reports-dir /tmp/r-speed --benchmark-autosave --benchmark-save-data \
    --benchmark-columns=min,median,iqr,rounds
echo "exit $?"
cat /tmp/r-speed/perf-report.md; cp /tmp/r-speed/perf-report.md "$OUT/perf-report-speed.md"

stamp "torch-compile fp16 b1 in a new process: compiled artefacts from the Inductor cache"
timeout 120 python3 -m pytest perf/test_inference_speed.py "${COMMON[@]}" --perf-precisions fp16 \
    --perf-batch-sizes 1 -k "torch-compile" --perf-reports-dir /tmp/r-cache --benchmark-columns=median,rounds
echo "exit $?"
grep -E "^\| (case|torch-compile)" /tmp/r-cache/perf-report.md

stamp "where the time goes at batch 256: kernel tables (the batch sweep and the batch-1 table: tools/gpu_speed_sweep.py)"
timeout 140 python3 tools/gpu_profile_batch.py --batch 256 --iters 10
echo "exit $?"

tar czf "$OUT/benchmarks.tgz" .benchmarks 2>/dev/null
stamp "done"
