"""Bad-input matrix rows for the detector's hostile-environment faults (issue #17): a full disk (output and cache),
files that are not regular files (a FIFO, /dev/zero), cfgs too large to build, weights holding NaN or Inf, a 1x1
video, a file name holding a newline, SIGTERM during a run, and a lock symlink planted in the cache.

Each row runs the real ``detector`` command (see :mod:`bad_inputs`); rows that mount a tmpfs need root.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
from bad_inputs import CFG, WEIGHTS, Made, Row, Shared, detect, y4m

_DISK = "disk"  # a row's 1 MiB tmpfs, mounted at <folder>/disk
_PAGE = 4096


@contextlib.contextmanager
def _full_disk(folder: Path, free_pages: int = 1) -> Iterator[Path]:
    """A 1 MiB tmpfs at ``folder/disk``, filled but for ``free_pages`` pages (room to create files and start
    writing, not to finish); unmounted afterwards."""
    disk = folder / _DISK
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(disk)], check=True)
    try:
        filler = disk / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o444)
        try:
            while True:
                os.write(fd, b"\0" * _PAGE)
        except OSError as e:
            if e.errno != errno.ENOSPC:
                raise
        finally:
            os.close(fd)
        size = filler.stat().st_size
        os.truncate(filler, max(0, size - size % _PAGE - free_pages * _PAGE))
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)


def _no_temporaries(folder: Path) -> list[str]:
    """Problems: a temporary file (``.<stem>.<random>.tmp<suffix>``) left anywhere under ``folder``."""
    left = [str(p.relative_to(folder)) for p in folder.rglob("*") if ".tmp" in p.name]
    return [f"temporary files left: {left}"] if left else []


def _noise_video(folder: Path) -> Path:
    """A 128x128 noise video: its first encoded frame is larger than the one page a full disk has left."""
    return y4m(folder / "noise.y4m", 128, 128, "444", 3)


def _disk_full_output(folder: Path, shared: Shared) -> Made:
    out = folder / _DISK / "out"
    args = detect(folder, shared, "--video", str(_noise_video(folder)), "--out", str(out))
    return args, [f"'{out / 'noise-torch-detected.mp4'}'", "No space left on device"]


def _disk_full_cache(folder: Path, shared: Shared) -> Made:
    cache = folder / _DISK / "cache"
    args = detect(folder, shared, "--cache-dir", str(cache))
    args.remove("--video")
    args.remove(str(shared.video))  # the default video: the synthetic one, made into the cache
    return args, [str(cache / "videos" / "synthetic-s0-960x540-2f-"), "No space left on device"]


def _disk_full_export(folder: Path, shared: Shared) -> Made:
    cache = folder / _DISK / "cache"
    args = detect(folder, shared, "--cache-dir", str(cache), "--backend", "onnxruntime")
    return args, [f"'{cache / 'onnx' / 'yolov4-tiny-'}", "No space left on device"]


def _cache_clean(folder: Path) -> list[str]:
    """Problems: a temporary name in the message, or a cache entry (any file but a lock) left in the full cache."""
    found = _no_temporaries(folder / _DISK)
    entries = [p.name for p in (folder / _DISK / "cache").rglob("*") if p.is_file() and not p.name.endswith(".lock")]
    return found + ([f"cache entries left on the full disk: {entries}"] if entries else [])




def _fifo_row(option: str, *problem: str) -> Callable[[Path, Shared], Made]:
    def make(folder: Path, shared: Shared) -> Made:
        fifo = folder / {"--video": "pipe.mp4", "--cfg": "pipe.cfg", "--weights": "pipe.weights"}.get(option, "pipe.onnx")
        os.mkfifo(fifo)
        extra = {"--cfg": ["--cfg", str(fifo), "--weights", str(WEIGHTS)],
                 "--onnx": ["--backend", "onnxruntime", "--onnx", str(fifo)]}.get(option, [option, str(fifo)])
        return detect(folder, shared, *extra), [f"'{fifo}'", "FIFO", *problem]
    return make


def _cfg_edit(name: str, old: str, new: str, *problem: str) -> Callable[[Path, Shared], Made]:
    def make(folder: Path, shared: Shared) -> Made:
        text = CFG.read_text()
        assert old in text, old
        cfg = folder / name
        cfg.write_text(text.replace(old, new, 1))
        line = text[: text.index(old)].count("\n") + 1
        return detect(folder, shared, "--cfg", str(cfg), "--weights", str(WEIGHTS)), [f"{cfg}:{line}:", *problem]
    return make


def _weights_with(value: float, index: int) -> Callable[[Path, Shared], Made]:
    """The shipped weights with float ``index`` (counted after the 20-byte header) set to ``value``."""
    def make(folder: Path, shared: Shared) -> Made:
        data = bytearray(WEIGHTS.read_bytes())
        data[20 + 4 * index: 24 + 4 * index] = np.float32(value).astype("<f4").tobytes()
        weights = folder / "diverged.weights"
        weights.write_bytes(bytes(data))
        what = "NaN" if np.isnan(value) else "Inf"
        return detect(folder, shared, "--weights", str(weights)), [str(weights), what, f"byte offset {20 + 4 * index}"]
    return make


def _one_pixel(folder: Path, shared: Shared) -> Made:
    video = y4m(folder / "dot.y4m", 1, 1, "444", 3)
    return detect(folder, shared, "--video", str(video)), [f"'{video}'", "1x1"]


def _newline_name(folder: Path, shared: Shared) -> Made:
    video = folder / "two\nlines.mp4"
    video.write_bytes(b"not a video\n")
    return detect(folder, shared, "--video", str(video)), [f"'{folder}/two\\nlines.mp4'", "text file"]


def _not_utf8_name(folder: Path, shared: Shared) -> Made:
    video = folder / os.fsdecode(b"clip\xff.mp4")  # a name Linux allows and UTF-8 cannot spell
    video.write_bytes(shared.video.read_bytes())
    return detect(folder, shared, "--video", str(video)), [video.stem]


def _rate_video(rate: str) -> Callable[[Path, Shared], Made]:
    def make(folder: Path, shared: Shared) -> Made:  # a legal Y4M header rate the mp4v encoder cannot open with
        video = y4m(folder / "rate.y4m", 64, 48, "444", 3)
        video.write_bytes(video.read_bytes().replace(b" F10:1 ", f" F{rate} ".encode(), 1))
        return detect(folder, shared, "--video", str(video)), [video.stem]
    return make


def _long_video(folder: Path, shared: Shared) -> Made:
    video = y4m(folder / "long.y4m", 64, 64, "444", 3, frames=300)
    return detect(folder, shared, "--video", str(video), "--frames", "300"), ["terminated", "SIGTERM"]


def _sigterm_when_writing(proc: subprocess.Popen[str], folder: Path) -> None:
    """SIGTERM the process once its temporary video exists in ``out`` (what ``timeout`` or ``docker stop`` do)."""
    out, deadline = folder / "out", time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if out.is_dir() and any(".tmp" in p.name for p in out.iterdir()):
            time.sleep(0.2)  # some frames in: the writer is mid-file
            proc.send_signal(signal.SIGTERM)
            return
        time.sleep(0.02)


_OUTSIDE = "outside/created-by-the-lock"


def _lock_symlink(folder: Path, shared: Shared) -> Made:
    from detector.synthetic import SyntheticParams, synthetic_video_path

    cache = folder / "cache"
    video = synthetic_video_path(cache / "videos", SyntheticParams(frames=2))
    video.parent.mkdir(parents=True)
    (folder / _OUTSIDE).parent.mkdir()
    lock = Path(f"{video}.lock")
    lock.symlink_to(folder / _OUTSIDE)
    args = detect(folder, shared, "--cache-dir", str(cache))
    args.remove("--video")
    args.remove(str(shared.video))
    return args, [f"'{lock}'", "symbolic link"]


def _nothing_outside(folder: Path) -> list[str]:
    return [f"a file was created outside the cache: {_OUTSIDE}"] if (folder / _OUTSIDE).exists() else []


def _dev_zero(folder: Path, shared: Shared) -> Made:
    return detect(folder, shared, "--video", "/dev/zero"), ["'/dev/zero'", "character device", "not a regular file"]


def _labels_row(edit: Callable[[dict], None], *expect: str, pytest: bool = False) -> Callable[[Path, Shared], Made]:
    """The shared clip's own ground truth, ``edit`` ed, scored by ``detector eval`` (or given to the suite):
    labels it cannot score refused in one line naming the file, before the model loads (the suite: at start-up)."""
    def make(folder: Path, shared: Shared) -> Made:
        data = json.loads(shared.video.with_suffix(".json").read_text(encoding="utf-8"))
        edit(data)
        gt = folder / "labels.json"
        gt.write_text(json.dumps(data), encoding="utf-8")
        if pytest:
            return ["-m", "pytest", "perf", "-q", "-p", "no:cacheprovider", f"--perf-video={shared.video}",
                    f"--perf-ground-truth={gt}"], [f"'{gt}'", *expect]
        return ["-m", "detector", "eval", "--video", str(shared.video), "--ground-truth", str(gt), "--device", "cpu",
                "--cache-dir", str(shared.cache), "--json", str(folder / "out" / "eval.json")], [f"'{gt}'", *expect]
    return make


ROWS: tuple[Row, ...] = (
    # labels that cannot be scored against the video: mAP over nothing, or silently lowered, before
    Row("eval-labels-no-box", _labels_row(lambda d: d.update(annotations=[]), "no box", "nothing to score")),
    Row("eval-labels-other-frame-size", _labels_row(lambda d: [i.update(width=1920, height=1080) for i in d["images"]],
                                                    "1920x1080", "64x64")),
    Row("eval-labels-box-outside-frames", _labels_row(lambda d: d["annotations"][0].update(bbox=[1e300, 1e300, 50, 50]),
                                                      "annotation 0", "lies wholly outside the 64x64 frames")),
    Row("pytest-labels-width-not-a-number", _labels_row(lambda d: [i.update(width="64") for i in d["images"]],
                                                        "'64'x64", "another frame size", pytest=True), in_repo=True),
    Row("pytest-labels-beyond-frames", _labels_row(lambda d: d["images"].append({"id": 50}), "image id 50",
                                                   "only 4 frames", pytest=True), in_repo=True),
    Row("pytest-labels-only-crowd", _labels_row(lambda d: [a.update(iscrowd=1) for a in d["annotations"]], "no box",
                                                pytest=True), in_repo=True),
    # a full disk: one line naming the final file, no temporary file, nothing under the final name
    Row("disk-full-video-output", _disk_full_output, setup=_full_disk, check=_no_temporaries, needs_root=True,
        out=f"{_DISK}/out"),
    Row("disk-full-cache-video", _disk_full_cache, setup=_full_disk, check=_cache_clean, needs_root=True),
    Row("disk-full-cache-onnx-export", _disk_full_export, setup=_full_disk, check=_cache_clean, needs_root=True),
    # files that are not regular files: refused before they are opened (a FIFO would block forever)
    Row("video-fifo", _fifo_row("--video"), timeout_s=30),
    Row("video-dev-zero", _dev_zero, timeout_s=30),
    Row("cfg-fifo", _fifo_row("--cfg"), timeout_s=30),
    Row("weights-fifo", _fifo_row("--weights"), timeout_s=30),
    Row("onnx-fifo", _fifo_row("--onnx"), timeout_s=30),
    # cfgs too large to build: one CfgError line before anything is allocated
    Row("cfg-input-100000x100000", _cfg_edit("huge.cfg", "width=416", "width=100000", "width=100000", "1..8192"),
        timeout_s=30),
    Row("cfg-filters-10000000", _cfg_edit("filters.cfg", "filters=32", "filters=10000000", "filters=10000000",
                                          "1..65536"), timeout_s=30),
    Row("cfg-too-many-parameters", _cfg_edit("params.cfg", "filters=512\nsize=3", "filters=65536\nsize=3",
                                             "parameters", "268,435,456"), timeout_s=30),
    # weights of a diverged training run
    Row("weights-nan", _weights_with(float("nan"), 1000)),
    Row("weights-inf", _weights_with(float("inf"), 3_000_000)),
    # a legal video the encoder cannot write back: refused truthfully, before the model loads
    Row("video-1x1", _one_pixel),
    # a file name holding a newline still gives one line (escaped)
    Row("path-with-newline", _newline_name),
    # a file name that is not UTF-8 is read and its detected video written (OpenCV crashed on such a str)
    Row("video-name-not-utf8", _not_utf8_name, handled=True),
    # a frame rate beyond what the encoder writes (a high-speed camera, a time-lapse): the detected video is written
    Row("video-fps-100000", _rate_video("100000:1"), handled=True),
    Row("video-fps-0.001", _rate_video("1:1000"), handled=True),
    # SIGTERM mid-write: one line, exit 143, no temporary video in --out
    Row("sigterm-during-detect", _long_video, during=_sigterm_when_writing, exit_code=143, check=_no_temporaries),
    # a lock symlink planted in the cache is refused, never followed
    Row("cache-lock-symlink", _lock_symlink, check=_nothing_outside),
)
