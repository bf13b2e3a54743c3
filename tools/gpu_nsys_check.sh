#!/usr/bin/env bash
# Run the nsys-marked perf tests on the GPU machine and bring back what they wrote.
#
#   tools/gpu_nsys_check.sh            (from the repository root, on the device; $OUT is the folder that comes back)
#
# Nsight Systems' importer (QdstrmImporter) needs libdw.so.1 and libelf.so.1, which the GPU image lacks: they are
# unpacked from the Debian packages in .dev/debs into /tmp/dw and put on LD_LIBRARY_PATH. The run's summaries
# (summary.md / summary.json), the raw stats CSVs and the logs go into ONE archive, $OUT/nsys_results.tar.gz (the
# device tool brings back at most 8 files of 16 MiB, folders at most 2 deep); the pytest log and the summaries are
# also printed. Environment: NSYS (the nsys to use), PYTHON (default: python), REPORT_ROOT (default: reports/nsys),
# PYTEST_EXTRA (more pytest arguments).
set -uo pipefail

NSYS_BIN=${NSYS:-/opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys}
PYTHON=${PYTHON:-python}
REPORT_ROOT=${REPORT_ROOT:-reports/nsys}
OUT=${OUT:-/tmp/gpu_nsys_out}
DW=/tmp/dw
mkdir -p "$OUT" "$DW"

echo "== unpacking libdw1 / libelf1 into $DW"
for deb in .dev/debs/libdw1*.deb .dev/debs/libelf1*.deb; do
  [ -f "$deb" ] || { echo "missing $deb" >&2; exit 2; }
  if command -v dpkg >/dev/null 2>&1; then
    dpkg -x "$deb" "$DW"
  else  # no dpkg: a .deb is an ar archive holding data.tar.*
    "$PYTHON" - "$deb" "$DW" <<'PY'
import io, sys, tarfile
data = open(sys.argv[1], "rb").read()
pos = 8  # after "!<arch>\n"
while pos < len(data):
    name, size = data[pos:pos + 16].decode().strip().rstrip("/"), int(data[pos + 48:pos + 58])
    body = data[pos + 60:pos + 60 + size]
    if name.startswith("data.tar"):
        tarfile.open(fileobj=io.BytesIO(body)).extractall(sys.argv[2])
    pos += 60 + size + (size & 1)
PY
  fi
done
LIBDIRS=$(find "$DW" \( -name 'libdw.so.1' -o -name 'libelf.so.1' \) -exec dirname {} \; | sort -u | paste -sd: -)
export LD_LIBRARY_PATH="${LIBDIRS}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
find "$DW" \( -name 'libdw.so.1' -o -name 'libelf.so.1' \) -exec ls -l {} + || true

echo "== nsys"
"$NSYS_BIN" --version || { echo "nsys at $NSYS_BIN does not run" >&2; exit 2; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv || true

echo "== pytest perf -m nsys"
# shellcheck disable=SC2086
"$PYTHON" -m pytest perf -m nsys --nsys-path "$NSYS_BIN" -x -q -p no:cacheprovider ${PYTEST_EXTRA:-} \
  2>&1 | tee "$OUT/pytest.log"
status=${PIPESTATUS[0]}
echo "pytest exit status: $status"

echo "== collecting results from $REPORT_ROOT"
list=/tmp/gpu_nsys_files.txt
: > "$list"
if [ -d "$REPORT_ROOT" ]; then
  {
    find "$REPORT_ROOT" \( -name 'summary.md' -o -name 'summary.json' -o -name '*.log' -o -name 'child-junit.xml' \) \
      -size -4M
    # raw CSVs: every summary report, and the (large) traces only when small
    find "$REPORT_ROOT" -name '*.csv' ! -name '*_cuda_gpu_trace.csv' ! -name '*_nvtx_pushpop_trace.csv'
    find "$REPORT_ROOT" \( -name '*_cuda_gpu_trace.csv' -o -name '*_nvtx_pushpop_trace.csv' \) -size -2M
  } >> "$list"
  find "$REPORT_ROOT" -name '*.nsys-rep' -printf '%s\t%p\n' > "$OUT/nsys_reps.txt"
fi
cp "$OUT/pytest.log" /tmp/gpu_nsys_pytest.log
echo /tmp/gpu_nsys_pytest.log >> "$list"
tar -czf "$OUT/nsys_results.tar.gz" -T "$list" 2>/dev/null || tar -czf "$OUT/nsys_results.tar.gz" -T "$list"
size=$(stat -c %s "$OUT/nsys_results.tar.gz")
if [ "$size" -gt $((15 * 1024 * 1024)) ]; then  # keep under the 16 MiB per-file limit: drop the raw CSVs
  grep -v '\.csv$' "$list" > "$list.small"
  tar -czf "$OUT/nsys_results.tar.gz" -T "$list.small"
  echo "archive too large with CSVs ($size B); kept summaries and logs only"
fi
echo "archive: $OUT/nsys_results.tar.gz ($(stat -c %s "$OUT/nsys_results.tar.gz") B, $(wc -l < "$list") files listed)"
cat "$OUT/nsys_reps.txt" 2>/dev/null || true

echo "== summaries"
if [ -d "$REPORT_ROOT" ]; then
  find "$REPORT_ROOT" -name summary.md | sort | while read -r md; do echo "--- $md"; cat "$md"; done
fi
exit "$status"
