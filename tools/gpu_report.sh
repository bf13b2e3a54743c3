#!/usr/bin/env bash
# One GPU call (under 4 minutes on an H100): the HTML report and markdown summary from real GPU runs.
#   1. the torch variants (eager, CUDA graph) x fp32/fp16: inference (batch 1, 8), end-to-end (60 frames), parity,
#      saved with every round (--benchmark-save-data), the report written at session end by --perf-html;
#   2. the inference benchmarks again, slowed by 0.5 ms per inference (--perf-inject-delay): a new saved run;
#   3. perf-report over both runs: every inference row must be marked "slower", the figures must be PNGs.
# Writes $OUT/summary.md, $OUT/index.html (the report of step 3) and $OUT/gpu_report.log (pytest output).
set -uo pipefail
export PYTHONUNBUFFERED=1 DETECTOR_CACHE=/tmp/detector-cache PYTHONPATH="$PWD"
WORK=$(mktemp -d /tmp/gpu_report.XXXX)
LOG="$OUT/gpu_report.log"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python3 -c "import matplotlib; print('matplotlib', matplotlib.__version__)" || echo "matplotlib missing: the report will say so"
# shellcheck disable=SC2054  # "fp32,fp16" is one argument
COMMON=(-p no:cacheprovider -q --perf-device cuda --perf-backends torch --perf-precisions "fp32,fp16"
        --benchmark-storage "$WORK/.benchmarks" --benchmark-autosave --benchmark-save-data
        --benchmark-columns=median,iqr,rounds)
python3 -m pytest perf "${COMMON[@]}" --perf-batch-sizes 1,8 --perf-frames 60 --perf-reports-dir "$WORK/reports" \
  --perf-html "$WORK/html-session" > "$LOG" 2>&1
echo "run 1 (inference, end-to-end, parity) exit $?"
grep -E "passed|failed|perf html" "$LOG" | tail -5
python3 -m pytest perf/test_inference_speed.py "${COMMON[@]}" --perf-batch-sizes 1,8 --perf-inject-delay=0.5 \
  --perf-reports-dir "$WORK/reports-slowed" >> "$LOG" 2>&1
echo "run 2 (inference slowed by 0.5 ms) exit $?"
grep -E "passed|failed" "$LOG" | tail -1
time python3 -m perf.report_cli --storage "$WORK/.benchmarks" --reports "$WORK/reports" --out "$OUT"
echo "perf-report exit $?"
echo "===== summary.md ====="
cat "$OUT/summary.md"
echo "===== checks ====="
python3 - "$OUT" <<'EOF'
import base64, re, struct, sys
from pathlib import Path
out = Path(sys.argv[1])
md, page = (out / "summary.md").read_text(), (out / "index.html").read_text()
pngs = [base64.b64decode(m) for m in re.findall(r"data:image/png;base64,([A-Za-z0-9+/=]+)", page)]
sizes = [struct.unpack(">II", p[16:24]) for p in pngs if p[:8] == b"\x89PNG\r\n\x1a\n" and p[12:16] == b"IHDR"]
print(f"index.html: {len(page)} bytes, {len(pngs)} embedded PNGs, {len(sizes)} valid, sizes {sorted(set(sizes))}")
print("sections:", re.findall(r"<h2>(.*?)</h2>", page))
rows = [ln for ln in md.splitlines() if ln.startswith("| test_inference_speed[")]
slower = [ln for ln in rows if "| slower |" in ln]
print(f"inference rows marked slower after the 0.5 ms delay: {len(slower)} of {len(rows)}")
print("parity rows:", [ln.split("|")[1:3] for ln in md.split("### Parity")[-1].splitlines() if ln.startswith("| ") and "candidate" not in ln])
EOF
