#!/usr/bin/env bash
# One GPU call (about 9 minutes on an H100) for the figures of #4, #7, #8 and #9; STEPS="2 3" runs some steps.
# The steps run in order of need; each has its own time limit and log under $OUT, so what finished comes back
# even when the call is cut short.
#   1. (in parallel: none of them is a timing) parity + accuracy of the torch variants on the trained weights
#      (torch-compile in a process of its own);
#      `detector eval` fp32 and fp16 on the held-out seeds 0, 7, 8, 9; out of memory (tools/gpu_reliability.sh)
#   2. the gate's clock truth and self-test (2, 5 and 10% slowdowns, 20 trials, 0.25 s samples)
#   3. speed: eager fp32, torch-graph fp16 and torch-compile fp16 at batch 1 and 256, harness overhead, the
#      pipelined loop, multi-stream batching
#     OUT=<dir> bash tools/gpu_final_check.sh     (carry .dev/wheels: pycocotools for Python 3.12)
set -uo pipefail
: "${OUT:?set OUT to the folder that comes back}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/final.log") 2>&1
export PYTHONUNBUFFERED=1 DETECTOR_CACHE=/tmp/detector-cache
for wheel in .dev/wheels/pycocotools-*.whl; do
    [ -f "$wheel" ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel"
done
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
WORK=/tmp/final-check
rm -rf "$WORK" && mkdir -p "$WORK"
start=$(date +%s)
stamp() { echo; echo "===== [$(($(date +%s) - start)) s] $*"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
python3 -c "import torch, cv2; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cv2', cv2.__version__)"
COMMON=(-p no:cacheprovider -q -rs --perf-device cuda --perf-backends torch --perf-cache-dir "$DETECTOR_CACHE")

want() { [[ " ${STEPS:-1 2 3} " == *" $1 "* ]]; }
if want 1; then
pids=()
stamp "1. parity + accuracy (torch variants), detector eval (seeds 0,7,8,9), out of memory -- in parallel"
(timeout 110 python3 -m pytest perf/test_detection_parity.py "${COMMON[@]}" --perf-precisions fp32,fp16 \
    -k "not torch-compile" --perf-reports-dir "$WORK/parity" > "$OUT/parity.log" 2>&1
 echo "parity exit $?" >> "$OUT/parity.log") &
pids+=($!)
(timeout 110 python3 -m pytest perf/test_detection_parity.py "${COMMON[@]}" --perf-precisions fp32,fp16 \
    -k "torch-compile" --perf-reports-dir "$WORK/parity-compile" > "$WORK/parity-compile.log" 2>&1
 echo "parity (torch-compile) exit $?" >> "$WORK/parity-compile.log") &
pids+=($!)
for precision in fp32 fp16; do
    (timeout 110 python3 -m detector eval --device cuda --precision "$precision" --video-seed 0 --video-seed 7 \
        --video-seed 8 --video-seed 9 --frames 300 --json "$WORK/eval-$precision.json" > "$WORK/eval-$precision.log" 2>&1
     echo "eval $precision exit $?" >> "$WORK/eval-$precision.log") &
    pids+=($!)
done
(mkdir -p "$WORK/oom"; OUT="$WORK/oom" timeout 110 bash tools/gpu_reliability.sh > "$OUT/oom.log" 2>&1) &
pids+=($!)
wait "${pids[@]}"  # the jobs by PID: a bare wait also waits for the tee behind exec, forever
tail -n 4 "$OUT/parity.log" "$WORK/parity-compile.log"
cat "$WORK/parity/perf-report.md" "$WORK/parity-compile/perf-report.md" 2>/dev/null | head -60
cat "$WORK/eval-fp32.log" "$WORK/eval-fp16.log" > "$OUT/eval.log"; cat "$OUT/eval.log"
sed -n '/== outcomes/,$p' "$OUT/oom.log"
fi

if want 2; then
stamp "2. clock truth and gate self-test (0.25 s samples: 621 rounds of torch-graph fp16 b1 on an H100)"
timeout 230 python3 -m pytest perf --perf-selftest --perf-selftest-trials 20 --benchmark-max-time 0.25 \
    "${COMMON[@]}" --perf-reports-dir "$WORK/gate" > "$OUT/gate.log" 2>&1
echo "gate exit $?"
sed -n '/= perf report =/,$p' "$OUT/gate.log" | grep -vE "^(PASSED|SKIPPED) " | head -40
fi

if want 3; then
stamp "3. speed: eager fp32, torch-graph fp16, torch-compile fp16 at batch 1 and 256; harness overhead"
timeout 300 python3 -m pytest perf/test_inference_speed.py perf/test_harness_overhead.py "${COMMON[@]}" \
    --perf-precisions fp16,fp32 --perf-batch-sizes 1,256 --benchmark-max-time 0.5 \
    -k "torch-fp32 or torch-graph-fp16 or torch-compile-fp16 or harness" -o faulthandler_timeout=120 \
    --perf-reports-dir "$WORK/speed" --benchmark-columns=min,median,iqr,rounds > "$OUT/speed.log" 2>&1
echo "speed exit $?"
sed -n '/= perf report =/,/^saved:/p' "$OUT/speed.log"; tail -n 1 "$OUT/speed.log"
stamp "3b. pipelined loop and multi-stream batching (torch-graph fp16)"
timeout 120 python3 -m pytest perf/test_pipelined.py perf/test_multistream.py "${COMMON[@]}" --perf-precisions fp16 \
    --perf-streams 1,4,16 -k "torch-graph" --perf-reports-dir "$WORK/pipe" > "$OUT/pipe.log" 2>&1
echo "pipe exit $?"
sed -n '/= perf report =/,/^saved:/p' "$OUT/pipe.log"; tail -n 1 "$OUT/pipe.log"
fi

stamp "done"
tar czf "$OUT/results.tgz" -C "$WORK" .
