#!/usr/bin/env bash
# Out of memory on the GPU: a batch size that cannot fit (16384 x 3 x 416 x 416 fp32: 34 GB of input, ~90 GB for
# the first convolution's output) must skip with a reason while batches 1 and 8 still run, and each backend's
# runners must be released with the GPU memory before/after recorded. A failed cudaMalloc is an ordinary error:
# nothing here can take the machine down. Finishes in about 1-2 minutes.
#
#   OUT=/some/dir bash tools/gpu_reliability.sh        # from the repository root on the GPU machine
#
# Prints: the GPU, the pytest summary (-rs shows the skip reason), then the passed/skipped tests, the benchmarks
# that ran (batch, median ms) and the memory table. Files under $OUT: reliability-pytest.log,
# reliability-bench.json (pytest-benchmark), perf-report.json (with the memory table).
set -uo pipefail
: "${OUT:?set OUT}"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
PY=${PYTHON:-python3}
BIG=${BIG_BATCH:-16384}
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv

timeout 220 "$PY" -m pytest perf/test_inference_speed.py -p no:cacheprovider -q -rs \
  --perf-device cuda --perf-backends torch,onnxruntime --perf-precisions fp32 --perf-batch-sizes "1,$BIG,8" \
  -k "torch-fp32 or onnxruntime-fp32-b8" --perf-cache-dir /tmp/reliability-cache \
  --perf-reports-dir /tmp/reliability-reports --benchmark-json "$OUT/reliability-bench.json" \
  2>&1 | tee "$OUT/reliability-pytest.log"
echo "pytest exit status ${PIPESTATUS[0]} (0 = every selected test passed or skipped)"
cp /tmp/reliability-reports/perf-report.json "$OUT/perf-report.json" 2>/dev/null

"$PY" - "$OUT" <<'PY'
import json, re, sys
from pathlib import Path
out = Path(sys.argv[1])
log = (out / "reliability-pytest.log").read_text()
print("\n== outcomes")
for line in log.splitlines():
    if re.match(r"(SKIPPED|FAILED|ERROR)\b", line) or re.search(r"\d+ (passed|skipped|failed)", line):
        print(line)
bench = out / "reliability-bench.json"
if bench.exists():
    print("\n== benchmarks that ran (the run went on after the skip)")
    for b in json.loads(bench.read_text())["benchmarks"]:
        print(f"{b['name']}: batch {b['extra_info'].get('batch')}, median {b['stats']['median'] * 1e3:.3f} ms")
report = out / "perf-report.json"
if report.exists():
    rows = json.loads(report.read_text())["tables"].get("GPU memory at backend release (MiB)", [])
    print("\n== GPU memory at each release (MiB): torch allocated / reserved, and device-wide used")
    for row in rows:
        print(json.dumps({k: (round(v, 1) if isinstance(v, float) else v) for k, v in row.items()}))
PY
