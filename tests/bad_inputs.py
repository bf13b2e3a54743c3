"""The bad-input matrix: real files that users get wrong, each run through the real command line in a subprocess.

One :class:`Row` per kind of bad input. Shared by ``tests/test_bad_inputs.py`` (asserts every row) and
``tests/bad_input_table.py`` (prints the rows as a markdown table). A row builds its files in a fresh folder and
returns the command (after ``python``) and the pieces its error line must contain (the file, the problem).

A row that needs more than "run a command" says so with hooks: ``setup(folder)`` (a context manager around the
whole run, e.g. a 1 MiB tmpfs mounted and unmounted), ``during(process, folder)`` (e.g. SIGTERM once a temporary
file appears), ``check(folder)`` (more problems, e.g. a file created outside the cache), ``exit_code`` (the exact
status), ``needs_root`` (skipped, with the reason, when not root), ``unprivileged`` (file modes must bind: as root
the command runs under ``unshare --user``). Rows of other modules join :data:`ROWS`: every
``tests/reliability_*.py`` exporting ``ROWS`` (see :func:`all_rows`).

What a row must do (see :meth:`Outcome.problems`):

* a bad input: non-zero exit, stderr exactly one non-empty line containing every expected piece and no
  traceback, and nothing left in the output folder;
* a legal but unusual input (``handled=True``: odd frame size, grayscale, 4-channel video): exit 0, nothing on
  stderr, and the complete output (the detected video with every frame, the results JSON, no temporary files).
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import json
import os
import pickle
import shutil
import subprocess
import sys
import tempfile
import types
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "detector" / "data"
CFG, WEIGHTS = DATA / "yolov4-tiny.cfg", DATA / "yolov4-tiny.weights"
FRAMES = 2  # frames each detect row processes
MARKER = "PWNED"  # the file a hostile pickle payload would create in its working folder


@dataclass(frozen=True)
class Shared:
    """Files every row may use, made once: a short valid video and a cache folder."""

    root: Path
    video: Path
    cache: Path


def make_shared(root: Path) -> Shared:
    """A 64x64, 4-frame synthetic video (the real generator) and an empty cache folder under ``root``."""
    from detector.synthetic import make_synthetic_video

    video = make_synthetic_video(root / "clip.mp4", width=64, height=64, frames=4, seed=1).video
    (root / "cache").mkdir(exist_ok=True)
    return Shared(root, video, root / "cache")


Made = tuple[list[str], list[str]]  # (arguments after the interpreter, pieces the message must contain)


@dataclass(frozen=True)
class Row:
    """One bad input: ``make(folder, shared)`` writes its files into ``folder`` and returns a :data:`Made`.

    ``handled``: the input is legal and must be processed completely. ``in_repo``: run from the repository root
    (pytest rows, which need the root conftest).
    """

    id: str
    make: Callable[[Path, Shared], Made]
    handled: bool = False
    in_repo: bool = False
    setup: Callable[[Path], AbstractContextManager[object]] | None = None  # entered around make, run and listing
    during: Callable[[subprocess.Popen[str], Path], None] | None = None  # called once the process has started
    check: Callable[[Path], list[str]] | None = None  # more problems, found in the row's folder after the run
    exit_code: int | None = None  # the exact exit status a bad input must give (default: any non-zero)
    needs_root: bool = False  # mounts or other root-only set-up: skipped with the reason where not root
    unprivileged: bool = False  # chmod cases: as root, run without root's power over files (`unprivileged_prefix`)
    out: str = "out"  # the output folder, relative to the row's folder, that must be left empty
    timeout_s: float = 300  # a process still running then is killed, and the row fails ("hangs")


@dataclass
class Outcome:
    """What one row's process did."""

    row: Row
    returncode: int
    stderr: str
    stdout: str
    expected: list[str]
    folder: Path
    output_files: list[str] = field(default_factory=list)
    extra: list[str] = field(default_factory=list)  # problems the row's own check or the runner found
    skipped: str = ""  # why the row did not run here (then it has no problems)

    @property
    def lines(self) -> list[str]:
        return [line for line in self.stderr.splitlines() if line.strip()]

    @property
    def message(self) -> str:
        """The one error line, or for a handled row the last line it printed about its output."""
        if self.skipped:
            return f"(skipped: {self.skipped})"
        if self.row.handled:
            wrote = [line for line in self.stdout.splitlines() if line.startswith("wrote ")]
            return wrote[0] if wrote else "(nothing written)"
        return " / ".join(self.lines) or "(nothing on stderr)"

    def problems(self) -> list[str]:
        """Every way this outcome breaks the row's contract (empty: the row passes)."""
        if self.skipped:
            return []
        found = list(self.extra)
        if "Traceback" in self.stderr:
            found.append("traceback on stderr")
        if self.row.handled:
            if self.returncode != 0:
                found.append(f"exit {self.returncode}, expected 0")
            if self.lines:
                found.append(f"stderr is not empty: {self.lines[:3]}")
            want = {"clip-torch-detected.mp4", "detect-results.json"}
            stem = self.expected[0]
            want = {name.replace("clip", stem) for name in want}
            if set(self.output_files) != want:
                found.append(f"output files {self.output_files}, expected {sorted(want)}")
            return found
        if self.returncode == 0:
            found.append("exit 0, expected non-zero")
        elif self.row.exit_code is not None and self.returncode != self.row.exit_code:
            found.append(f"exit {self.returncode}, expected {self.row.exit_code}")
        if len(self.lines) != 1:
            found.append(f"{len(self.lines)} stderr lines, expected 1")
        missing = [piece for piece in self.expected if piece not in self.stderr]
        if missing:
            found.append(f"message lacks {missing}")
        if self.output_files:
            found.append(f"partial output left: {self.output_files}")
        return found


def run_row(row: Row, folder: Path, shared: Shared, timeout_s: float | None = None) -> Outcome:
    """Build ``row``'s files in ``folder`` and run its command there with this interpreter (within the row's
    ``setup``, calling its ``during`` while the process runs); a process past ``timeout_s`` (default: the row's)
    is killed and the row fails."""
    folder.mkdir(parents=True, exist_ok=True)
    if row.needs_root and os.geteuid() != 0:
        return Outcome(row, 0, "", "", [], folder, skipped="needs root (it mounts a file system)")
    prefix = unprivileged_prefix() if row.unprivileged else []
    if prefix is None:
        return Outcome(row, 0, "", "", [], folder, skipped="root, and no user namespace (unshare --user) to drop it")
    with contextlib.ExitStack() as stack:
        if row.setup is not None:
            stack.enter_context(row.setup(folder))
        args, expected = row.make(folder, shared)
        env = {key: value for key, value in os.environ.items()  # a child pytest is a plain session, not an xdist worker
               if not key.startswith(("PYTEST_XDIST_", "PYTEST_CURRENT_TEST"))}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
        env.pop("DETECTOR_CACHE", None)
        env["PYTHONIOENCODING"] = "utf-8"  # strict, as in a UTF-8 locale other than C (the GPU machine's)
        proc = subprocess.Popen([*prefix, sys.executable, *args], cwd=REPO if row.in_repo else folder, env=env,
                                text=True, errors="surrogateescape", stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        extra = []
        try:
            if row.during is not None:
                row.during(proc, folder)
            stdout, stderr = proc.communicate(timeout=timeout_s or row.timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            extra.append(f"still running after {timeout_s or row.timeout_s:g} s (hangs); killed")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        out = folder / row.out
        files = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
        if row.handled:  # the detected video must hold every processed frame
            from detector.video import read_frames

            detected = [out / name for name in files if name.endswith("-detected.mp4")]
            if detected and len(read_frames(detected[0])) != FRAMES:
                files.append("(detected video with the wrong number of frames)")
        if row.check is not None:
            extra += row.check(folder)
    return Outcome(row, proc.returncode, stderr, stdout, expected, folder, files, extra)


@functools.cache
def unprivileged_prefix() -> list[str] | None:
    """The command prefix under which file modes bind: none for a user; for root, which reads and writes every file,
    ``unshare --user`` (a user namespace: root without its power over files); None where that does not work."""
    if os.geteuid() != 0:
        return []
    if shutil.which("unshare") is None:
        return None
    prefix = ["unshare", "--user", "--"]
    with tempfile.NamedTemporaryFile() as locked:
        os.chmod(locked.name, 0)
        probe = subprocess.run([*prefix, sys.executable, "-c", f"open({locked.name!r}).close()"], capture_output=True,
                               check=False)  # fmt: skip
    return prefix if probe.returncode != 0 and b"PermissionError" in probe.stderr else None


# -- builders of bad files ----------------------------------------------------------------------------------------


def detect(folder: Path, shared: Shared, *extra: str) -> list[str]:
    """``python -m detector detect`` on the CPU, into ``folder/out``, processing :data:`FRAMES` frames."""
    args = ["-m", "detector", "detect", "--device", "cpu", "--cache-dir", str(shared.cache), "--frames", str(FRAMES)]
    if "--video" not in extra:
        args += ["--video", str(shared.video)]
    if "--out" not in extra:
        args += ["--out", str(folder / "out")]
    return [*args, *extra]


def y4m(path: Path, width: int, height: int, chroma: str, planes: int, frames: int = 4) -> Path:
    """An uncompressed YUV4MPEG2 video (any size, mono / 4:4:4 / 4:4:4 with alpha) that OpenCV's FFmpeg reads."""
    rng = np.random.default_rng(0)
    with open(path, "wb") as fh:
        fh.write(f"YUV4MPEG2 W{width} H{height} F10:1 Ip A1:1 C{chroma}\n".encode())
        for _ in range(frames):
            fh.write(b"FRAME\n" + rng.integers(16, 235, (planes, height, width), dtype=np.uint8).tobytes())
    return path


def mjpg_avi(path: Path, frames: int = 4) -> Path:
    """A 64x48 MJPG AVI written by OpenCV (``frames=0``: a valid container with no frames)."""
    import cv2

    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10, (64, 48))
    for i in range(frames):
        writer.write(np.full((48, 64, 3), 50 * i, np.uint8))
    writer.release()
    return path


class Payload:
    """Unpickling this runs ``open(MARKER, 'w')`` in the current folder: proof that a loader executed the file."""

    def __reduce__(self) -> tuple[object, tuple[str, str]]:
        return (open, (MARKER, "w"))


def pickle_payload(path: Path) -> Path:
    """A pickle that creates :data:`MARKER` when loaded (the attack ``torch.load(weights_only=False)`` allows)."""
    path.write_bytes(pickle.dumps({"state_dict": Payload()}, protocol=2))
    return path


def handmade_onnx(path: Path, input_hw: tuple[int, int], columns: int, *, symbolic: bool = False) -> Path:
    """A valid ONNX model: images [batch, 3, H, W] reshaped to decoded [batch, N, columns] (3*H*W % columns == 0);
    ``symbolic``: the file declares the output [batch, n, columns] with N and the columns left as names."""
    import onnx
    from onnx import TensorProto, helper

    height, width = input_hw
    n = 3 * height * width // columns
    images = helper.make_tensor_value_info("images", TensorProto.FLOAT, ["batch", 3, height, width])
    decoded = helper.make_tensor_value_info("decoded", TensorProto.FLOAT,
                                            ["batch", "n", "columns"] if symbolic else ["batch", n, columns])
    shape = helper.make_tensor("shape", TensorProto.INT64, [3], [0, -1, columns])
    graph = helper.make_graph([helper.make_node("Reshape", ["images", "shape"], ["decoded"])], "g", [images],
                              [decoded], initializer=[shape])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), str(path))
    return path


def engine_entry(cache: Path, onnx_path: Path, precision: str = "fp32") -> Path:
    """A real engine-cache entry (engine bytes + JSON sidecar) made by :func:`detector.trt.cached_engine`.

    TensorRT is not needed to make or check an entry: a module object standing in for the package gives the
    version, and the build function returns the bytes a builder would (what is checked here is the cache).
    """
    from detector.trt.cache import cached_engine

    package = types.ModuleType("tensorrt")
    package.__version__ = "10.9.0.34"  # type: ignore[attr-defined]
    entry = cached_engine(onnx_path, cache_dir=cache / "trt", precision=precision, profile_batches=(1, 4),
                          tensorrt=(package, "tensorrt"), gpu=("NVIDIA H100 80GB HBM3", (9, 0)),
                          build_fn=lambda *a, **k: b"ftrt" + bytes(range(256)) * 64)
    return entry.path


def _cfg_variant(folder: Path, name: str, edit: Callable[[str], str]) -> Path:
    path = folder / name
    path.write_text(edit(CFG.read_text()))
    return path


def _weights_variant(folder: Path, name: str, edit: Callable[[bytes], bytes]) -> Path:
    path = folder / name
    path.write_bytes(edit(WEIGHTS.read_bytes()))
    return path


def _engine_row(damage: Callable[[Path], Path]) -> Callable[[Path, Shared], Made]:
    def make(folder: Path, shared: Shared) -> Made:
        cache = folder / "cache"
        engine = damage(engine_entry(cache, handmade_onnx(folder / "m.onnx", (16, 16), 12)))
        return ["-m", "detector", "check-cache", "--cache-dir", str(cache)], [str(engine)]
    return make


def _flip_byte(path: Path) -> Path:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return path


def _truncate(path: Path) -> Path:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    return path


def _drop_sidecar(path: Path) -> Path:
    path.with_name(path.name + ".json").unlink()
    return path


def _rename_as_fp16(path: Path) -> Path:
    """An fp32 engine and its sidecar copied in under the fp16 entry's name (a mismatched engine)."""
    renamed = path.with_name(path.name.replace("-fp32-", "-fp16-"))
    path.rename(renamed)
    path.with_name(path.name + ".json").rename(renamed.with_name(renamed.name + ".json"))
    return renamed


def _onnx_cache_entry(folder: Path, shared: Shared) -> Made:
    cache = folder / "cache"
    (cache / "onnx").mkdir(parents=True)
    entry = cache / "onnx" / "yolov4-tiny-0123456789abcdef0123-op17.onnx"
    entry.write_bytes(handmade_onnx(folder / "m.onnx", (16, 16), 12).read_bytes()[:40])
    return ["-m", "detector", "check-cache", "--cache-dir", str(cache)], [str(entry), "not a valid ONNX file"]


def _video_row(make_file: Callable[[Path], Path], *problem: str) -> Callable[[Path, Shared], Made]:
    def make(folder: Path, shared: Shared) -> Made:
        video = make_file(folder)
        return detect(folder, shared, "--video", str(video)), [str(video), *problem]
    return make


def _write(name: str, data: bytes) -> Callable[[Path], Path]:
    def make(folder: Path) -> Path:
        (folder / name).write_bytes(data)
        return folder / name
    return make


def _truncated_video(folder: Path, shared: Shared) -> Made:
    video = folder / "cut.mp4"
    video.write_bytes(shared.video.read_bytes()[: shared.video.stat().st_size // 2])
    return detect(folder, shared, "--video", str(video)), [str(video), "truncated"]


def _unknown_codec(folder: Path) -> Path:
    path = folder / "codec.avi"
    path.write_bytes(mjpg_avi(folder / "mjpg.avi").read_bytes().replace(b"MJPG", b"ZZZZ"))
    (folder / "mjpg.avi").unlink()
    return path


def _handled_video(name: str, width: int, height: int, chroma: str, planes: int) -> Callable[[Path, Shared], Made]:
    def make(folder: Path, shared: Shared) -> Made:
        video = y4m(folder / f"{name}.y4m", width, height, chroma, planes)
        return detect(folder, shared, "--video", str(video)), [name]
    return make


def _with_cfg(name: str, edit: Callable[[str], str], *problem: str) -> Callable[[Path, Shared], Made]:
    def make(folder: Path, shared: Shared) -> Made:
        cfg = _cfg_variant(folder, name, edit)
        return detect(folder, shared, "--cfg", str(cfg), "--weights", str(WEIGHTS)), [str(cfg), *problem]
    return make


def _with_cfg_bytes(folder: Path, shared: Shared) -> Made:
    cfg = folder / "binary.cfg"
    cfg.write_bytes(np.random.default_rng(1).integers(128, 256, 512, dtype=np.uint8).tobytes())
    return detect(folder, shared, "--cfg", str(cfg), "--weights", str(WEIGHTS)), [str(cfg), "not a text cfg"]


def _with_weights(name: str, edit: Callable[[bytes], bytes], *problem: str) -> Callable[[Path, Shared], Made]:
    def make(folder: Path, shared: Shared) -> Made:
        weights = _weights_variant(folder, name, edit)
        return detect(folder, shared, "--weights", str(weights)), [str(weights), *problem]
    return make


def _pickled_weights(folder: Path, shared: Shared) -> Made:
    weights = pickle_payload(folder / "model.weights")
    return detect(folder, shared, "--weights", str(weights)), [str(weights), "bad header"]


def _with_onnx(make_file: Callable[[Path], Path], *problem: str) -> Callable[[Path, Shared], Made]:
    def make(folder: Path, shared: Shared) -> Made:
        model = make_file(folder)
        return detect(folder, shared, "--backend", "onnxruntime", "--onnx", str(model)), [str(model), *problem]
    return make


def _detect_args(*extra: str, expect: tuple[str, ...]) -> Callable[[Path, Shared], Made]:
    def make(folder: Path, shared: Shared) -> Made:
        return detect(folder, shared, *extra), list(expect)
    return make


def _unwritable_out(folder: Path, shared: Shared) -> Made:
    blocker = folder / "a-file"
    blocker.write_text("x")
    return detect(folder, shared, "--out", str(blocker / "out")), [str(blocker)]


def _json_into_folder(folder: Path, shared: Shared) -> Made:
    results = folder / "results"
    results.mkdir()
    return detect(folder, shared, "--json", str(results)), [str(results), "--json", "it is a folder"]


def _json_under_a_file(folder: Path, shared: Shared) -> Made:
    blocker = folder / "a-file"
    blocker.write_text("x")
    return detect(folder, shared, "--json", str(blocker / "r.json")), [str(blocker / "r.json"), "is not a folder"]


def _pytest(*options: str, expect: tuple[str, ...]) -> Callable[[Path, Shared], Made]:
    def make(folder: Path, shared: Shared) -> Made:
        return ["-m", "pytest", "perf", "-q", "-p", "no:cacheprovider", *options], list(expect)
    return make


def _missing_perf_video(folder: Path, shared: Shared) -> Made:
    missing = folder / "nope.mp4"
    return ["-m", "pytest", "perf", "-q", "-p", "no:cacheprovider", f"--perf-video={missing}"], [str(missing)]


_CORRUPT = np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes()
_SHIPPED_H, _SHIPPED_C = 416, 2  # the shipped cfg's input size and classes

BASE_ROWS: tuple[Row, ...] = (
    # videos
    Row("video-missing", lambda f, s: (detect(f, s, "--video", str(f / "nope.mp4")), [str(f / "nope.mp4"),
                                                                                        "no such file"])),
    Row("video-empty", _video_row(_write("empty.mp4", b""), "empty")),
    Row("video-truncated", _truncated_video),
    Row("video-text-file", _video_row(_write("notes.mp4", b"not a video\n"), "text file")),
    Row("video-random-bytes", _video_row(_write("noise.mp4", _CORRUPT), "not a video file")),
    Row("video-is-a-folder", lambda f, s: (detect(f, s, "--video", str(f)), [str(f), "directory"])),
    Row("video-zero-frames", _video_row(lambda f: mjpg_avi(f / "zero.avi", frames=0), "cannot")),
    Row("video-unknown-codec", _video_row(_unknown_codec, "cannot decode")),
    Row("video-odd-size-65x37", _handled_video("odd", 65, 37, "444", 3), handled=True),
    Row("video-grayscale", _handled_video("gray", 64, 48, "mono", 1), handled=True),
    Row("video-4-channel", _handled_video("alpha", 64, 48, "444alpha", 4), handled=True),
    # cfg
    Row("cfg-missing", lambda f, s: (detect(f, s, "--cfg", str(f / "nope.cfg"), "--weights", str(WEIGHTS)),
                                     [str(f / "nope.cfg"), "no such file"])),
    Row("cfg-unknown-key", _with_cfg("key.cfg", lambda t: t.replace("[net]\n", "[net]\nmagic=1\n", 1),
                                     "unknown key 'magic'")),
    Row("cfg-wrong-filters", _with_cfg("filters.cfg", lambda t: t.replace("filters=21", "filters=255", 1),
                                       "filters=255")),
    Row("cfg-truncated", _with_cfg("cut.cfg", lambda t: t[: t.index("[yolo]")], "no [yolo] section")),
    Row("cfg-binary", _with_cfg_bytes),
    # weights
    Row("weights-missing", lambda f, s: (detect(f, s, "--weights", str(f / "nope.weights")),
                                         [str(f / "nope.weights"), "no such file"])),
    Row("weights-empty", _with_weights("empty.weights", lambda b: b"", "empty")),
    Row("weights-truncated", _with_weights("cut.weights", lambda b: b[: len(b) // 2], "truncated")),
    Row("weights-trailing-bytes", _with_weights("long.weights", lambda b: b + b"\x00" * 64, "trailing bytes")),
    Row("weights-bad-header", _with_weights("header.weights", lambda b: b"\xff" * 20 + b[20:], "bad header")),
    Row("weights-pickle-payload", _pickled_weights),
    # ONNX (detect --onnx) and the ONNX export cache
    Row("onnx-corrupt", _with_onnx(_write("noise.onnx", _CORRUPT), "not a valid ONNX file")),
    Row("onnx-empty", _with_onnx(_write("empty.onnx", b""), "empty")),
    Row("onnx-pickle-payload", _with_onnx(lambda f: pickle_payload(f / "model.onnx"), "not a valid ONNX file")),
    Row("onnx-input-size-mismatch", _with_onnx(lambda f: handmade_onnx(f / "small.onnx", (320, 320), 4 + _SHIPPED_C),
                                               "3x320x320", f"3x{_SHIPPED_H}x{_SHIPPED_H}")),
    Row("onnx-classes-mismatch", _with_onnx(lambda f: handmade_onnx(f / "classes.onnx", (_SHIPPED_H, _SHIPPED_H), 13),
                                            "2 classes", "13]")),
    Row("onnx-classes-mismatch-symbolic", _with_onnx(lambda f: handmade_onnx(f / "named.onnx", (_SHIPPED_H, _SHIPPED_H), 8,
                                                                             symbolic=True),
                                                     "outputs [1, 64896, 8]", "2 classes")),
    Row("onnx-without-onnxruntime", lambda f, s: (detect(f, s, "--onnx", str(f / "m.onnx")),
                                                  ["--onnx", "onnxruntime"])),
    Row("onnx-cache-entry-corrupt", _onnx_cache_entry),
    # TensorRT engine cache (checked without TensorRT)
    Row("engine-corrupt", _engine_row(_flip_byte)),
    Row("engine-truncated", _engine_row(_truncate)),
    Row("engine-sidecar-missing", _engine_row(_drop_sidecar)),
    Row("engine-mismatched-precision", _engine_row(_rename_as_fp16)),
    # names and option values
    Row("backend-unknown", _detect_args("--backend", "tensorflow", expect=("unknown backend 'tensorflow'",))),
    Row("backend-unknown-after-a-good-one", _detect_args("--backend", "torch,nope",
                                                         expect=("unknown backend 'nope'",))),
    Row("precision-unknown", _detect_args("--precision", "fp8", expect=("unknown precision 'fp8'",))),
    Row("precision-unsupported", _detect_args("--backend", "onnxruntime", "--precision", "int8",
                                              expect=("unsupported precision 'int8'",))),
    Row("device-unknown", _detect_args("--device", "gpu", expect=("unknown device 'gpu'",))),
    Row("option-batch-zero", _detect_args("--batch", "0", expect=("--batch", "'0'"))),
    Row("option-conf-out-of-range", _detect_args("--conf", "1.5", expect=("--conf", "'1.5'"))),
    Row("option-frames-not-a-number", _detect_args("--frames", "abc", expect=("--frames", "'abc'"))),
    Row("option-skip-interval-negative", _detect_args("--skip-interval", "-1", expect=("--skip-interval", "'-1'"))),
    Row("option-skip-interval-with-batch", _detect_args("--skip-interval", "2", "--batch", "4",
                                                        expect=("--skip-interval 2", "--batch 1"))),
    Row("option-decoder-unknown", _detect_args("--decoder", "gpu", expect=("--decoder", "'gpu'"))),
    Row("option-decoder-nvdec-on-cpu", _detect_args("--decoder", "nvdec", "--device", "cpu",
                                                    expect=("--decoder nvdec", "--device is cpu"))),
    Row("output-folder-unwritable", _unwritable_out),
    Row("json-output-is-a-folder", _json_into_folder),
    Row("json-output-under-a-file", _json_under_a_file),
    Row("seed-negative-random-weights", lambda f, s: (["-m", "detector", "export-onnx", "--cfg", str(CFG), "--seed", "-1",
                                                       "--out", str(f / "out" / "m.onnx")],
                                                      [str(CFG), "seed must be an integer >= 0, got -1"])),
    Row("anchors-seed-negative", lambda f, s: (["-m", "detector", "anchors", "--frames", "2", "--seed", "-1"],
                                               ["anchors", "seed must be an integer >= 0, got -1"])),
    Row("batch-too-large-for-memory", lambda f, s: (detect(f, s, "--batch", "1000000000"), ["not enough memory"])),
    Row("make-video-too-large-for-memory", lambda f, s: (["-m", "detector", "make-video", "--out",
                                                          str(f / "out" / "v.mp4"), "--width", "200000", "--height",
                                                          "200000", "--frames", "2"], ["not enough memory"])),
    Row("make-video-odd-width", lambda f, s: (["-m", "detector", "make-video", "--out", str(f / "out" / "v.mp4"),
                                               "--width", "65"], ["width", "65"])),
    # the perf suite's options
    Row("pytest-batch-sizes-abc", _pytest("--perf-batch-sizes=abc", expect=("--perf-batch-sizes", "'abc'")),
        in_repo=True),
    Row("pytest-backends-unknown", _pytest("--perf-backends=nope", expect=("--perf-backends", "'nope'")),
        in_repo=True),
    Row("pytest-precisions-fp8", _pytest("--perf-precisions=fp8", expect=("--perf-precisions", "'fp8'")),
        in_repo=True),
    Row("pytest-device-unknown", _pytest("--perf-device=gpu", expect=("--perf-device", "'gpu'")), in_repo=True),
    Row("pytest-video-missing", _missing_perf_video, in_repo=True),
)


def all_rows() -> tuple[Row, ...]:
    """:data:`BASE_ROWS`, then the ``ROWS`` of every ``tests/reliability_*.py`` module, by module name: a module
    adds its rows without editing this file."""
    rows = list(BASE_ROWS)
    for module in sorted(Path(__file__).parent.glob("reliability_*.py")):
        rows += importlib.import_module(module.stem).ROWS
    return tuple(rows)


def __getattr__(name: str) -> tuple[Row, ...]:
    """``ROWS``, every row (:func:`all_rows`), gathered on first use: a reliability module imports this one, so
    gathering at import time would be circular."""
    if name == "ROWS":
        rows = globals()["ROWS"] = all_rows()
        return rows
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def table(outcomes: list[Outcome]) -> str:
    """Markdown: row | exit | message (the one stderr line; for a handled input, what was written)."""
    lines = ["| row | exit | message |", "|---|---|---|"]
    for o in outcomes:
        message = o.message.replace("|", "\\|")
        verdict = "" if not o.problems() else f" **FAILS: {'; '.join(o.problems())}**"
        lines.append(f"| {o.row.id} | {o.returncode} | {message}{verdict} |")
    return "\n".join(lines)


def summary(outcomes: list[Outcome]) -> str:
    """One line: rows run, rows passing."""
    bad = [o.row.id for o in outcomes if o.problems()]
    skipped = [o.row.id for o in outcomes if o.skipped]
    return json.dumps({"rows": len(outcomes), "passing": len(outcomes) - len(bad) - len(skipped), "failing": bad,
                       "skipped": skipped})
