#!/usr/bin/env bash
# One GPU call (< 4 min) for issue #7 parts 2 and 3: the pipelined end-to-end loop against each stage alone and
# the sequential loop, and multi-stream batching (N = 1, 2, 4, 8, 16), with the torch backend in fp16, eager and
# the torch-graph variant (folded batch norm, channels-last, a CUDA graph per batch size).
#
#   OUT=/some/dir bash tools/gpu_pipeline.sh        (from the repository root, on the GPU machine)
#
# First the CUDA unit tests of the pipelined loop (pinned uploads, GPU letterbox, GPU NMS), then the two perf
# tests. Prints the pytest summaries and the perf report's tables (FPS and ms/frame per path, the ratios
# pipeline/slowest stage and pipeline/sequential, and the multi-stream table). Writes 3 files under $OUT:
# pipeline.log (all pytest output), perf-report.json and perf-report.md.
set -uo pipefail
: "${OUT:?set OUT to the folder that comes back}"
export PYTHONUNBUFFERED=1 DETECTOR_CACHE=/tmp/detector-cache PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PYTHON=${PYTHON:-python3}
REPORTS=/tmp/gpu-pipeline-reports
LOG="$OUT/pipeline.log"
start=$(date +%s)
stamp() { echo "== [$(($(date +%s) - start)) s] $*" | tee -a "$LOG"; }

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a "$LOG"
"$PYTHON" -c "import cv2, os, torch; print('cv2', cv2.__version__, 'cv2 threads', cv2.getNumThreads(), 'cpus', os.cpu_count(), 'torch', torch.__version__)" | tee -a "$LOG"

stamp "unit tests: pipelined loop, multistream, stages, GPU NMS (CUDA cases included)"
timeout 90 "$PYTHON" -m pytest tests/test_pipelined.py tests/test_multistream.py tests/test_stages.py \
  tests/test_gpu_postprocess.py -q -p no:cacheprovider --continue-on-collection-errors >> "$LOG" 2>&1
echo "unit tests exit $?"; tail -n 3 "$LOG"

stamp "perf: pipelined end to end + multi-stream (torch fp16, eager and torch-graph)"
rm -rf "$REPORTS"
timeout 150 "$PYTHON" -m pytest perf/test_pipelined.py perf/test_multistream.py -q -p no:cacheprovider \
  --perf-device cuda --perf-backends torch --perf-precisions fp16 --perf-streams 1,2,4,8,16 \
  --perf-reports-dir "$REPORTS" --benchmark-columns=median,rounds >> "$LOG" 2>&1
echo "perf exit $?"
grep -E "passed|failed|error" "$LOG" | tail -n 3
stamp "perf report"
cat "$REPORTS/perf-report.md" 2>/dev/null || echo "no perf report written (see $LOG)"
cp "$REPORTS/perf-report.json" "$REPORTS/perf-report.md" "$OUT/" 2>/dev/null
stamp "done"
