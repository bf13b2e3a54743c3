#!/usr/bin/env bash
# One GPU call: train the shipped YOLOv4-tiny weights, then score them on the held-out videos in fp32 and fp16.
#
# Run from the repository root on the GPU machine, with $OUT the folder whose files come back:
#     bash tools/train_gpu.sh
# Environment (all optional):
#     TRAIN_BUDGET_S       wall-time budget of `train` (data + training + final eval), seconds (default 440)
#     TRAIN_ARGS           extra arguments for `python3 -m detector.train train` (e.g. "--steps 15000")
#     DETECTOR_GIT_COMMIT  commit recorded in the provenance file when the tree has no .git
#     DEVICE, EVAL_FRAMES  cuda and 300; a CPU dry run of the script itself:
#         OUT=/tmp/o DEVICE=cpu TRAIN_BUDGET_S=30 EVAL_FRAMES=8 \
#         TRAIN_ARGS="--frames 8 --frames-per-seed 4 --net-size 128 --batch 4 --eval-frames 8" bash tools/train_gpu.sh
#     WHEELS               glob of the wheels to install from .whl/ and .dev/wheels/ (default pycocotools-*.whl:
#                          the GPU image lacks pycocotools, which the mAP needs; carry the folder holding it)
#
# Leaves in $OUT (at most 8 files, each under 16 MiB, as the device tool returns them):
#     train.log                        everything printed (progress, AP tables)
#     yolov4-tiny.weights.part00/01    the weights split in two (join: cat part00 part01 > yolov4-tiny.weights)
#     yolov4-tiny.weights.sha256       sha256sum of the joined file (check: sha256sum -c)
#     yolov4-tiny.weights.txt          provenance: command, seeds, data, steps, wall time, commit, torch, GPU
#     eval-fp32.json, eval-fp16.json   `detector eval` on held-out seeds 0, 7, 8 and 9 (together and per seed)
# Expected wall time: about TRAIN_BUDGET_S + 80 s (two evaluations of 4 x 300 frames, start-up).
set -uo pipefail
: "${OUT:?set OUT to the output folder}"
mkdir -p "$OUT"
exec > >(tee -a "$OUT/train.log") 2>&1
export PYTHONUNBUFFERED=1
start=$(date +%s)
budget=${TRAIN_BUDGET_S:-440}
device=${DEVICE:-cuda}
eval_frames=${EVAL_FRAMES:-300}

# One wheel at a time, so that a wheel for another platform cannot block the others.
for wheel in .whl/${WHEELS:-pycocotools-*.whl} .dev/wheels/${WHEELS:-pycocotools-*.whl}; do
    [ -f "$wheel" ] || continue
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "$wheel" \
        && echo "installed $wheel"
done
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export DETECTOR_CACHE=${DETECTOR_CACHE:-/tmp/detector-cache}
if [ -z "${DETECTOR_GIT_COMMIT:-}" ]; then
    DETECTOR_GIT_COMMIT=$(git rev-parse HEAD 2>/dev/null || echo "unknown (no .git on the GPU machine)")
    export DETECTOR_GIT_COMMIT
fi
python3 -c 'import pycocotools' 2>/dev/null \
    || echo "WARNING: pycocotools is not installed: training runs, but no mAP is printed (carry its wheel in .whl/)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || echo "no nvidia-smi"
python3 -c 'import sys, torch, cv2, numpy; print("python", sys.version.split()[0], "torch", torch.__version__,
    "cuda", torch.version.cuda, "opencv", cv2.__version__, "numpy", numpy.__version__, "cpus", len(__import__("os").sched_getaffinity(0)))'

weights="$OUT/yolov4-tiny.weights"
# SIGTERM at budget + 60 s makes train stop after its current step and save (it normally ends by itself).
# shellcheck disable=SC2086  # TRAIN_ARGS is a list of words
timeout -s TERM $((budget + 60)) python3 -m detector.train train --out "$weights" --seed 0 \
    --time-budget-s "$budget" --device "$device" --eval-seed 7 --eval-seed 8 ${TRAIN_ARGS:-}
echo "train exit status $? after $(($(date +%s) - start)) s"

if [ -f "$weights" ]; then
    (cd "$OUT" && sha256sum yolov4-tiny.weights > yolov4-tiny.weights.sha256 \
        && split -n 2 -d yolov4-tiny.weights yolov4-tiny.weights.part)
    for precision in fp32 fp16; do
        [ "$precision" = fp16 ] && [ "$device" = cpu ] && continue  # fp16 needs CUDA
        timeout 150 python3 -m detector.train eval --weights "$weights" --video-seed 0 --video-seed 7 --video-seed 8 \
            --video-seed 9 \
            --frames "$eval_frames" --device "$device" --precision "$precision" --json "$OUT/eval-$precision.json"
        echo "eval $precision exit status $? after $(($(date +%s) - start)) s"
    done
    mkdir -p /tmp/trained && cp "$weights" "$weights.txt" /tmp/trained/ 2>/dev/null  # for a next call on this machine
    rm -f "$weights"  # too large to come back whole: the parts and the sha256 do
fi
echo "total wall time $(($(date +%s) - start)) s"
