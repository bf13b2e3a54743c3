#!/usr/bin/env bash
# One GPU call for the checks that need the GPU after the code of #7, #8 and #9 landed (about 9.5 minutes):
#   1. the gate's clock truth and self-test          (tools/gpu_gate_selftest.sh)
#   2. the pipelined loop and multi-stream batching  (tools/gpu_pipeline.sh)
#   3. batch-1 inference with the lead-in clock, and the harness overhead
#   4. out of memory: a batch that cannot fit is skipped, the run goes on, memory is released (tools/gpu_reliability.sh)
# Each step has its own time limit; everything each step wrote is packed into $OUT/results.tgz.
#     OUT=<dir> bash tools/gpu_session_check.sh
set -uo pipefail
: "${OUT:?set OUT to the folder that comes back}"
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 DETECTOR_CACHE=/tmp/detector-cache PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
WORK=/tmp/session-check
rm -rf "$WORK" && mkdir -p "$WORK"/{gate,pipe,speed,rel}
start=$(date +%s)
stamp() { echo; echo "===== [$(($(date +%s) - start)) s] $*"; }

stamp "1. clock truth and gate self-test"
OUT="$WORK/gate" timeout 215 bash tools/gpu_gate_selftest.sh; echo "step 1 exit $?"

stamp "2. pipelined end to end and multi-stream"
OUT="$WORK/pipe" timeout 170 bash tools/gpu_pipeline.sh; echo "step 2 exit $?"

stamp "3. batch 1 with the lead-in clock; harness overhead"
timeout 100 python3 -m pytest perf/test_inference_speed.py perf/test_harness_overhead.py -p no:cacheprovider -q \
    --perf-device cuda --perf-backends torch --perf-precisions fp16,fp32 --perf-batch-sizes 1 \
    -k "torch-graph-fp16 or torch-compile-fp16 or torch-fp32 or harness" --perf-cache-dir /tmp/perf-cache \
    --perf-reports-dir "$WORK/speed" --benchmark-json "$WORK/speed/bench.json" \
    --benchmark-columns=min,median,iqr,rounds > "$WORK/speed/pytest.log" 2>&1
echo "step 3 exit $?"; sed -n '/= perf report =/,/^saved:/p' "$WORK/speed/pytest.log"; tail -n 1 "$WORK/speed/pytest.log"

stamp "4. out of memory"
OUT="$WORK/rel" timeout 95 bash tools/gpu_reliability.sh; echo "step 4 exit $?"

stamp "done"
tar czf "$OUT/results.tgz" -C "$WORK" .
