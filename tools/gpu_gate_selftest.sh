#!/usr/bin/env bash
# One GPU call (< 4 min): the regression gate's self-checks on the GPU.
#   1. clock truth: known GPU sleeps (0.1, 1, 10 ms) read by the suite's CUDA-event clock and by the host clock;
#   2. gate self-test: torch-graph fp16 b1, 20 trials x (baseline, unmodified, slowed by 2/5/10%), each sample
#      as many rounds as the suite's benchmark takes; false-alarm and detection rates of --perf-compare's rule.
# Prints both tables (the suite's "perf report"); writes $OUT/gate-selftest.log, $OUT/clock-truth.json and
# $OUT/gate-selftest.json. Exit status: pytest's (1 if the 2% clock target or the 5%-slowdown targets are missed).
set -uo pipefail
export PYTHONUNBUFFERED=1 DETECTOR_CACHE=/tmp/detector-cache PYTHONPATH="$PWD"
OUT=${OUT:-/tmp/gate-selftest}
mkdir -p "$OUT"
REPORTS=/tmp/gate-selftest-reports
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,temperature.gpu --format=csv,noheader
start=$SECONDS
timeout "${SELFTEST_TIMEOUT:-225}" python3 -m pytest perf --perf-selftest --perf-device cuda -p no:cacheprovider -q -rA \
  --perf-reports-dir "$REPORTS" ${PYTEST_EXTRA:-} > "$OUT/gate-selftest.log" 2>&1
status=$?
echo "pytest exit $status after $((SECONDS - start)) s"
sed -n '/= perf report =/,$p' "$OUT/gate-selftest.log" | grep -vE "^(PASSED|SKIPPED) " | head -40
grep -E "^(FAILED|ERROR)|AssertionError|Error:" "$OUT/gate-selftest.log" | head -10
cp "$REPORTS/clock-truth.json" "$REPORTS/gate-selftest.json" "$OUT/" 2>/dev/null
python3 - "$OUT" <<'PY'
import json, sys, pathlib
out = pathlib.Path(sys.argv[1])
for name in ("clock-truth.json", "gate-selftest.json"):
    path = out / name
    if not path.exists():
        print(f"{name}: not written"); continue
    data = json.loads(path.read_text())
    if "readings" in data:
        print(f"clock truth on {data.get('gpu')}: sleep-rate drift between calibrations {data['clock_drift']:+.3%}; "
              f"host launch+sync overhead {data['calibration_before']['host_overhead_ms'] * 1e3:.1f} us")
        for r in data["readings"]:
            print(f"  known {r['known_ms']:8.4f} ms  event {r['event_ms']:8.4f} ms ({r['event_error']:+.2%}, "
                  f"offset {r['offset_us']:+.1f} us)  host {r['host_ms']:8.4f} ms ({r['host_error']:+.2%})")
    else:
        print(f"self-test: {data['subject']}, median {data['median_ms']:.4f} ms, {data['rounds']} rounds x "
              f"{data['iterations']} iterations, {data['trials']} trials; thresholds per min effect {data['thresholds']}")
        for level in data["levels"]:
            judged = "  ".join(f"@{e}: {n}/{level['trials']}" for e, n in level["slower"].items())
            print(f"  injected {level['level']:5.0%}  measured ratio {level['measured_ratio']:.4f}  "
                  f"unstable {level['unstable']}  slower {judged}")
PY
exit $status
