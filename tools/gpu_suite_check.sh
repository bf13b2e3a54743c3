#!/usr/bin/env bash
# One GPU call for the resolution notes: the CLI table, the TensorRT(-RTX) check, the whole suite with a saved
# baseline, the regression gate (a deliberately slowed run must fail the compare, the unmodified one must pass),
# and the Nsight Systems captures. Run from the repository root on the GPU machine; $OUT comes back.
#
# Expects (all optional): /tmp/trained/yolov4-tiny.weights (left by tools/train_gpu.sh on the same warm machine),
# .dev/wheels/*.whl (pycocotools for cp312), .dev/trtB + /tmp/trt-part00 (TensorRT-RTX, see .dev/trtB/unpack.sh),
# .dev/debs (libdw1, libelf1 for nsys's importer). Logs: $OUT/run.log, $OUT/suite.log, $OUT/artifacts.tar.gz,
# plus what tools/gpu_nsys_check.sh leaves (pytest.log, nsys_reps.txt, nsys_results.tar.gz).
set -uo pipefail
: "${OUT:?set OUT}"
exec > >(tee -a "$OUT/run.log") 2>&1
export PYTHONUNBUFFERED=1 DETECTOR_CACHE=/tmp/detector-cache
mkdir -p /tmp/site
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
start=$(date +%s)
stamp() { echo "== [$(($(date +%s) - start)) s] $*"; }

if [ -f /tmp/trained/yolov4-tiny.weights ] && [ ! -f detector/data/yolov4-tiny.weights ]; then
  cp /tmp/trained/yolov4-tiny.weights* detector/data/
fi
ls -l detector/data/
if compgen -G ".dev/wheels/*.whl" >/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .dev/wheels/*.whl
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv

stamp "detector detect (CLI table) on the GPU"
for precision in fp32 fp16; do
  timeout 120 python3 -m detector.cli detect --backend torch --device cuda --precision "$precision" --out /tmp/det
done

if [ -d .dev/trtB ] && [ -f /tmp/trt-part00 ]; then
  stamp "TensorRT-RTX: build, cache, refusal"
  bash .dev/trtB/unpack.sh && timeout 240 python3 tools/gpu_trt_check.py --cache-dir /tmp/trt-check \
    --out /tmp/trt_check.json --test-timeout 120
  echo "gpu_trt_check exit status $?"
fi

stamp "the whole suite, saving a baseline"
timeout 420 python3 -m pytest perf -p no:cacheprovider --benchmark-autosave --benchmark-storage=/tmp/bench \
  --benchmark-columns=min,median,mean,stddev,rounds > "$OUT/suite.log" 2>&1
echo "suite exit status $?"
grep -E "passed|failed|error" "$OUT/suite.log" | tail -3

stamp "regression gate: slowed by 0.3 ms per inference (expect FAIL), then unmodified (expect pass)"
for delay in 0.3 0; do
  timeout 200 python3 -m pytest perf/test_inference_speed.py -p no:cacheprovider -q --benchmark-storage=/tmp/bench \
    --benchmark-compare --benchmark-compare-fail=median:10% --perf-inject-delay="$delay" \
    --benchmark-columns=median,rounds > "/tmp/compare-$delay.log" 2>&1
  echo "compare with --perf-inject-delay=$delay: exit status $?"
  grep -E "Performance has regressed|FAILED|passed|failed|Comparing against" "/tmp/compare-$delay.log" | head -20
done

stamp "nsys captures"
PYTHON=python3 timeout 300 bash tools/gpu_nsys_check.sh > /tmp/nsys_check.log 2>&1
echo "nsys check exit status $?"
tail -60 /tmp/nsys_check.log

{ ls /tmp/compare-*.log /tmp/nsys_check.log /tmp/trt_check.json /tmp/det/detect-results.json 2>/dev/null
  find /tmp/bench reports -name '*.json' -o -name '*.md' 2>/dev/null; } > /tmp/artifacts.txt
tar -czf "$OUT/artifacts.tar.gz" -T /tmp/artifacts.txt 2>/dev/null; ls -l "$OUT"
stamp "done"
