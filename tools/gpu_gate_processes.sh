#!/usr/bin/env bash
# The cross-process checks on a GPU machine, in one call of at most ~9.5 minutes; STEPS picks and orders them:
#   smoke      pytest perf -m ci once (timed: the CI selection's cost; warms the Inductor cache and the video)
#   sources    the noise-source study (pytest perf --perf-selftest -k noise_sources)
#   nsys       one Nsight Systems capture (torch-compile fp32 b1) and its summary
#   noise      pytest perf -m "ci and not parity" --perf-noise=$K                  (runs in $RUNS, resumable)
#   selftest   pytest perf -m "ci and not parity" --perf-selftest-processes=$K    (runs in $RUNS, resumable)
# Child processes are only started while they fit in the call (--perf-processes-budget); call again with the
# same RUNS to go on; SELECT narrows them (-k). Everything comes back as $OUT/results.tar.gz plus the log.
#     OUT=<dir> STEPS="smoke sources" bash tools/gpu_gate_processes.sh   (carry .dev: debs for nsys, pycocotools)
set -uo pipefail
: "${OUT:?set OUT to the folder that comes back}"
STEPS=${STEPS:-smoke sources nsys noise}
K=${K:-10}
RUNS=${RUNS:-reports/runs}
LIMIT=${LIMIT:-560}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/gate.log") 2>&1
export PYTHONUNBUFFERED=1
for wheel in .dev/wheels/pycocotools-*.whl; do
    [ -f "$wheel" ] && python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "$wheel"
done
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
start=$(date +%s)
stamp() { echo; echo "===== [$(($(date +%s) - start)) s] $*"; }
left() { echo $((LIMIT - $(date +%s) + start)); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit,temperature.gpu --format=csv,noheader
python3 -c "import torch, cv2; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cv2', cv2.__version__)"
nproc
COMMON=(-p no:cacheprovider -p no:randomly -q -rs --perf-device cuda)

for step in $STEPS; do
    case $step in
    smoke)
        stamp "CI selection once: pytest perf -m ci"
        s=$(date +%s)
        timeout 300 python3 -m pytest perf -m ci "${COMMON[@]}" --benchmark-storage=file://reports/smoke-storage \
            --benchmark-autosave 2>&1 | tail -80
        echo "CI selection took $(($(date +%s) - s)) s (cold Inductor cache on a fresh machine)"
        ;;
    sources)
        stamp "noise-source study"
        timeout 240 python3 -m pytest perf --perf-selftest -k noise_sources "${COMMON[@]}" 2>&1 | tail -40
        ;;
    nsys)
        stamp "nsys capture"
        mkdir -p /tmp/dw
        for deb in .dev/debs/*.deb; do dpkg -x "$deb" /tmp/dw; done
        export LD_LIBRARY_PATH="/tmp/dw/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
        timeout 200 python3 -m pytest perf -m nsys -k "torch-compile-fp32-b1" "${COMMON[@]}" \
            --nsys-path /opt/nvidia/nsight-compute/2025.3.1/host/target-linux-x64/nsys 2>&1 | tail -45
        ;;
    noise|selftest)
        budget=$(($(left) - 20))
        option=--perf-noise; [ "$step" = selftest ] && option=--perf-selftest-processes
        stamp "$option=$K in $RUNS, budget $budget s"
        python3 -m pytest perf -m "ci and not parity" "${COMMON[@]}" ${SELECT:+-k "$SELECT"} "$option=$K" --perf-runs-dir="$RUNS" \
            --perf-processes-budget="$budget" --benchmark-storage=file://reports/profile-storage 2>&1 | tail -70
        ;;
    esac
done
stamp "packing"
tar czf "$OUT/results.tar.gz" --exclude='*.mp4' --exclude='*.nsys-rep' --exclude='*.sqlite' reports 2>/dev/null
ls -la "$OUT"
