"""Several processes asking for the same cache entry at the same moment build it once; the others wait and reuse it.

Each test starts N = 4 real processes that wait on a barrier (a file the parent creates once all are ready), then
ask for the same entry: a cached file, a synthetic video, a TensorRT engine-cache entry (stand-in builder, no
TensorRT needed) and a model spec's ONNX export. Builds are counted from the builder's own log line or from a file
the builder appends to while it holds the lock; every process reports the sha256 of what it got. Last, a real
``pytest -n 2`` (pytest-xdist) run of a small test file using the real cache functions.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
N = 4

PRELUDE = """
import hashlib, logging, os, sys, time
from pathlib import Path
folder, index = Path(sys.argv[1]), sys.argv[2]
logging.basicConfig(filename=folder / f"log-{index}.txt", level=logging.INFO, format="%(name)s %(message)s")
(folder / f"ready-{index}").touch()
while not (folder / "go").exists():
    time.sleep(0.001)

def report(path):
    print(hashlib.sha256(Path(path).read_bytes()).hexdigest())
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def race(folder: Path, code: str, timeout_s: float = 300) -> tuple[list[str], str]:
    """Run ``code`` (after :data:`PRELUDE`) in N processes released together; return their stdout lines and logs."""
    folder.mkdir(parents=True, exist_ok=True)
    script = PRELUDE + textwrap.dedent(code)
    children = [subprocess.Popen([sys.executable, "-c", script, str(folder), str(i)], env=_env(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(N)]
    deadline = time.monotonic() + timeout_s
    while len(list(folder.glob("ready-*"))) < N:
        assert time.monotonic() < deadline and all(c.poll() is None for c in children), "a child did not start"
        time.sleep(0.01)
    (folder / "go").touch()
    results = [c.communicate(timeout=timeout_s) for c in children]
    for child, (out, err) in zip(children, results):
        assert child.returncode == 0, err[-2000:]
    logs = "".join(p.read_text() for p in sorted(folder.glob("log-*.txt")))
    return [out.strip() for out, _ in results], logs


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_cached_file_is_built_once_by_racing_processes(tmp_path: Path) -> None:
    digests, _ = race(tmp_path, """
        from detector.fileio import cached_file

        def build(tmp):
            with open(folder / "builds.txt", "a") as fh:  # under the lock
                fh.write(f"{os.getpid()}\\n")
            time.sleep(0.3)  # a slow build: the others must wait, not build too
            tmp.write_bytes(b"entry " * 1000)

        report(cached_file(folder / "cache", "entry.bin", build))
        """)
    assert len((tmp_path / "builds.txt").read_text().splitlines()) == 1
    assert set(digests) == {sha256(tmp_path / "cache" / "entry.bin")}


def test_synthetic_video_is_built_once_by_racing_processes(tmp_path: Path) -> None:
    digests, logs = race(tmp_path, """
        from detector.synthetic import synthetic_video
        report(synthetic_video(folder / "videos", seed=3, width=64, height=64, frames=30).video)
        """)
    assert logs.count("building synthetic video cache entry") == 1, logs
    video = next(p for p in (tmp_path / "videos").glob("*.mp4") if not p.name.startswith("."))
    assert set(digests) == {sha256(video)}


def test_engine_cache_entry_is_built_once_by_racing_processes(tmp_path: Path) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from bad_inputs import handmade_onnx

    handmade_onnx(tmp_path / "m.onnx", (16, 16), 12)
    digests, _ = race(tmp_path, """
        import types
        from detector.trt.cache import cached_engine

        def build(onnx_path, **options):
            with open(folder / "builds.txt", "a") as fh:
                fh.write(f"{os.getpid()}\\n")
            time.sleep(0.3)
            return b"ftrt" + bytes(range(256)) * 100

        package = types.ModuleType("tensorrt")
        package.__version__ = "10.9.0.34"
        entry = cached_engine(folder / "m.onnx", cache_dir=folder / "trt", profile_batches=(1, 4),
                              tensorrt=(package, "tensorrt"), gpu=("NVIDIA H100 80GB HBM3", (9, 0)), build_fn=build)
        report(entry.path)
        """)
    assert len((tmp_path / "builds.txt").read_text().splitlines()) == 1
    engine = next(p for p in (tmp_path / "trt" / "engines").glob("*.engine") if not p.name.startswith("."))
    assert set(digests) == {sha256(engine)}


def test_onnx_export_is_built_once_by_racing_processes(tmp_path: Path,
                                                       packaged_cfg: Callable[[Path, int], Path]) -> None:
    cfg = packaged_cfg(tmp_path, 64)
    digests, logs = race(tmp_path, f"""
        from detector.spec import ModelSpec
        report(ModelSpec({str(cfg)!r}, cache_dir=folder / "cache").onnx_path())
        """)
    assert logs.count("to ONNX opset") == 1, logs
    onnx_file = next(p for p in (tmp_path / "cache" / "onnx").glob("*.onnx") if not p.name.startswith("."))
    assert set(digests) == {sha256(onnx_file)}


XDIST_TESTS = '''
import logging
import os
from pathlib import Path

import pytest

from detector.fileio import cached_file
from detector.synthetic import synthetic_video

CACHE = Path(os.environ["RACE_CACHE"])


@pytest.mark.parametrize("i", range(6))
def test_shared_entries(i):
    handler = logging.FileHandler(CACHE.parent / f"log-{os.getpid()}.txt")
    logging.getLogger("detector").addHandler(handler)
    logging.getLogger("detector").setLevel(logging.INFO)
    try:
        made = synthetic_video(CACHE / "videos", seed=4, width=64, height=64, frames=20)
    finally:
        logging.getLogger("detector").removeHandler(handler)
        handler.close()

    def build(tmp):
        with open(CACHE.parent / "builds.txt", "a") as fh:
            fh.write(f"{os.getpid()}\\n")
        tmp.write_bytes(made.video.read_bytes()[:100])

    assert cached_file(CACHE, "head.bin", build).read_bytes() == made.video.read_bytes()[:100]
    print(os.environ.get("PYTEST_XDIST_WORKER"))
'''


def test_pytest_xdist_workers_build_each_entry_once(tmp_path: Path) -> None:
    (tmp_path / "test_race.py").write_text(XDIST_TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    env = {**_env(), "RACE_CACHE": str(tmp_path / "cache")}
    run = subprocess.run([sys.executable, "-m", "pytest", "-n", "2", "-q", "-p", "no:cacheprovider", "-rA",
                          "test_race.py"], cwd=tmp_path, env=env, capture_output=True, text=True, check=False)
    assert run.returncode == 0, run.stdout[-3000:]
    assert "6 passed" in run.stdout
    assert {"gw0", "gw1"} <= set(run.stdout.split()), "both workers ran tests"
    logs = "".join(p.read_text() for p in tmp_path.glob("log-*.txt"))
    assert logs.count("building synthetic video cache entry") == 1, logs
    assert len((tmp_path / "builds.txt").read_text().splitlines()) == 1

