"""Runs killed (SIGKILL) in the middle of a write leave the previous file and the cache intact.

Each test starts a real child process that writes through the code under test (the perf report writer, the
cache builder, the ONNX export cache, the engine cache, the video cache, pytest-benchmark's autosave), polls
until the child's temporary file has appeared and is being written, and kills the child there. The temporary
file still being present afterwards proves the kill landed inside the write, before the rename. Then: the
previous file is byte-for-byte what it was, nothing half-written sits under a final name, leftovers are not
taken for entries, and a later run succeeds. Every kill and every loss is tallied; the last test asserts
"N kills, 0 losses" and prints it (``-s`` shows it).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from tiny_bench import child_env

REPO = Path(__file__).resolve().parents[2]
KILLS: dict[str, int] = {}
LOSSES: dict[str, int] = {}




def kill_in_write(code: str, folder: Path, pattern: str, *, cwd: Path | None = None, args: tuple[str, ...] = (),
                  min_bytes: int = 0, timeout_s: float = 120) -> list[Path]:
    """Run ``python -c code`` (or ``python *args``); SIGKILL it once a file matching ``pattern`` under ``folder``
    has more than ``min_bytes`` bytes; return the matching files. Fails if the child ends first."""
    command = [sys.executable, *(args or ("-c", textwrap.dedent(code)))]
    folder.mkdir(parents=True, exist_ok=True)
    child = subprocess.Popen(command, cwd=cwd or folder, env=child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            hits = [p for p in folder.rglob(pattern) if p.is_file() and p.stat().st_size > min_bytes]
            if hits:
                os.kill(child.pid, signal.SIGKILL)
                break
            if child.poll() is not None:
                output = child.stdout.read().decode(errors="replace")[-2000:] if child.stdout else ""
                pytest.fail(f"the child ended (exit {child.returncode}) before its write could be killed:\n{output}")
            if time.monotonic() > deadline:
                pytest.fail(f"no file matching {pattern!r} appeared under {folder} in {timeout_s} s")
            time.sleep(0.001)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        if child.stdout:
            child.stdout.close()
    assert child.returncode == -signal.SIGKILL
    return hits


def tally(target: str, lost: bool) -> None:
    KILLS[target] = KILLS.get(target, 0) + 1
    LOSSES[target] = LOSSES.get(target, 0) + int(lost)


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` but temporary and (empty) lock files: relative name -> bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*"))
            if p.is_file() and not p.name.startswith(".") and not p.name.endswith(".lock")}


@pytest.mark.parametrize("attempt", range(3))
def test_killed_report_write_keeps_the_previous_report(tmp_path: Path, attempt: int) -> None:
    from perf.report.suite import PerfReport

    old = PerfReport({"Inference": [{"case": "torch fp32", "batch": 1, "median ms": 1.5}]}).write(tmp_path)
    before = snapshot(tmp_path)
    temps = kill_in_write(f"""
        from perf.report.suite import PerfReport
        rows = [{{"case": "torch fp32", "batch": i, "median ms": i * 0.5, "pad": "x" * 200}} for i in range(300_000)]
        PerfReport({{"Inference": rows}}).write({str(tmp_path)!r})
        """, tmp_path, ".perf-report.*.tmp.json")
    assert temps, "the kill did not land inside the write"
    lost = snapshot(tmp_path) != before
    tally("perf report", lost)
    assert not lost
    assert json.loads(old[0].read_text())["tables"]["Inference"][0]["median ms"] == 1.5
    PerfReport({"Inference": [{"case": "again", "batch": 8}]}).write(tmp_path)  # a later run succeeds
    assert json.loads(old[0].read_text())["tables"]["Inference"][0]["case"] == "again"


@pytest.mark.parametrize("attempt", range(3))
def test_killed_cache_build_leaves_no_entry_and_is_rebuilt(tmp_path: Path, attempt: int) -> None:
    from detector.fileio import atomic_write_bytes, cached_file

    cache = tmp_path / "cache"
    atomic_write_bytes(cache / "other.bin", b"an entry built earlier")
    before = snapshot(cache)
    kill_in_write(f"""
        from detector.fileio import cached_file

        def build(tmp):
            with open(tmp, "wb") as fh:
                for _ in range(400):
                    fh.write(b"y" * (1 << 20))
                    fh.flush()
                    import os; os.fsync(fh.fileno())

        cached_file({str(cache)!r}, "entry.bin", build)
        """, cache, ".entry.*.tmp.bin", min_bytes=1 << 20)
    lost = snapshot(cache) != before or (cache / "entry.bin").exists()
    tally("cached_file", lost)
    assert not lost
    path = cached_file(cache, "entry.bin", lambda tmp: tmp.write_bytes(b"complete"))  # the lock died with the child
    assert path.read_bytes() == b"complete"


def test_killed_onnx_export_leaves_no_cache_entry(tmp_path: Path, packaged_cfg: Callable[[Path, int], Path]) -> None:
    from detector.cachecheck import check_cache
    from detector.spec import ModelSpec

    cfg = packaged_cfg(tmp_path, 64)
    cache = tmp_path / "cache"
    spec = ModelSpec(cfg, cache_dir=cache)
    kill_in_write(f"""
        from pathlib import Path
        from detector.spec import ModelSpec
        ModelSpec(Path({str(cfg)!r}), cache_dir=Path({str(cache)!r})).onnx_path()
        """, cache, ".*.tmp.onnx")
    entries = [p for p in (cache / "onnx").glob("*.onnx") if not p.name.startswith(".")]
    tally("ONNX export cache", bool(entries))
    assert entries == []
    path = spec.onnx_path()  # a later run exports (the killed child's lock is free, its temp file ignored)
    assert path.stat().st_size > 0 and [p for p in (cache / "onnx").glob("*.onnx") if p.name[0] != "."] == [path]
    assert check_cache(cache).problems == []


@pytest.mark.parametrize("attempt", range(3))
def test_killed_engine_build_keeps_the_other_entries(tmp_path: Path, attempt: int) -> None:
    sys.path.insert(0, str(REPO / "tests"))
    from bad_inputs import engine_entry, handmade_onnx

    from detector.cachecheck import check_cache

    cache = tmp_path / "cache"
    onnx_path = handmade_onnx(tmp_path / "m.onnx", (16, 16), 12)
    engine_entry(cache, onnx_path, precision="fp32")
    before = snapshot(cache)
    kill_in_write(f"""
        import types
        from pathlib import Path
        from detector.trt.cache import cached_engine

        package = types.ModuleType("tensorrt")
        package.__version__ = "10.9.0.34"
        cached_engine(Path({str(onnx_path)!r}), cache_dir=Path({str(cache / "trt")!r}), precision="fp16",
                      profile_batches=(1, 4), tensorrt=(package, "tensorrt"), gpu=("NVIDIA H100 80GB HBM3", (9, 0)),
                      build_fn=lambda *a, **k: b"ftrt" + b"z" * (200 << 20))
        """, cache, ".*-fp16-*.tmp.engine", min_bytes=1 << 20)
    report = check_cache(cache)
    after = snapshot(cache)
    half_built = [name for name in after if name.endswith("-fp16-.engine") or (name.endswith(".engine")
                                                                               and name not in before)]
    lost = any(after.get(name) != data for name, data in before.items()) or bool(report.problems) or bool(half_built)
    tally("engine cache", lost)
    assert not lost, report.problems
    assert report.leftovers  # the killed build's temporary file, reported and ignored
    engine_entry(cache, onnx_path, precision="fp16")  # a later run builds the entry
    assert check_cache(cache).problems == []


def test_killed_video_build_leaves_no_entry(tmp_path: Path) -> None:
    from detector.synthetic import synthetic_video
    from detector.video import read_frames

    videos = tmp_path / "videos"
    other = synthetic_video(videos, seed=1, width=64, height=64, frames=4)
    before = snapshot(videos)
    kill_in_write(f"""
        from detector.synthetic import synthetic_video
        synthetic_video({str(videos)!r}, seed=2, width=64, height=64, frames=3000)
        """, videos, ".synthetic-s2-*.tmp.mp4", min_bytes=1000)
    after = snapshot(videos)
    lost = {k: v for k, v in after.items() if k in before} != before or len(after) != len(before)
    tally("video cache", lost)
    assert not lost
    made = synthetic_video(videos, seed=2, width=64, height=64, frames=6)
    assert len(read_frames(made.video)) == 6 and other.video.read_bytes() == before[other.video.name]


BENCHMARK_FILE = '''
import os

def test_tiny(benchmark):
    if os.environ.get("BIG_EXTRA_INFO"):  # makes the saved JSON large, so that saving it takes a while
        benchmark.extra_info["pad"] = ["x" * 100] * 2_000_000
    benchmark.pedantic(sum, args=(range(100),), rounds=5, iterations=1)
'''


def _pytest(folder: Path, *options: str) -> list[str]:
    return ["-m", "pytest", "test_tiny_bench.py", "-q", "-p", "no:cacheprovider", "-p", "no:randomly",
            f"--benchmark-storage=file://{folder / '.benchmarks'}", *options]


def test_killed_benchmark_autosave_keeps_the_baseline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest-benchmark saves each run under a new name (NNNN_*.json, never over an old one, but not atomically):
    a run killed while saving leaves a truncated new file; the baseline still loads and compares."""
    (tmp_path / "test_tiny_bench.py").write_text(BENCHMARK_FILE)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    monkeypatch.delenv("BIG_EXTRA_INFO", raising=False)
    saved = subprocess.run([sys.executable, *_pytest(tmp_path, "--benchmark-autosave")], cwd=tmp_path, env=child_env(),
                           capture_output=True, text=True, check=False)
    assert saved.returncode == 0, saved.stdout[-2000:]
    baseline = next((tmp_path / ".benchmarks").rglob("0001_*.json"))
    before = baseline.read_bytes()
    monkeypatch.setenv("BIG_EXTRA_INFO", "1")
    killed = kill_in_write("", tmp_path / ".benchmarks", "0002_*.json", cwd=tmp_path, min_bytes=-1,
                           args=tuple(_pytest(tmp_path, "--benchmark-autosave")))
    monkeypatch.delenv("BIG_EXTRA_INFO")
    lost = baseline.read_bytes() != before
    tally("pytest-benchmark autosave", lost)
    assert not lost and killed
    with pytest.raises(ValueError):  # the killed run's file is incomplete...
        json.loads(killed[0].read_text() or "")
    compared = subprocess.run([sys.executable, *_pytest(tmp_path, "--benchmark-compare=0001")],  # no timing check:
                              # a stall of a loaded machine would fail it, and what is tested is that 0001 loads
                              cwd=tmp_path, env=child_env(), capture_output=True, text=True, check=False)
    assert compared.returncode == 0, compared.stdout[-2000:]  # ...and the baseline still loads and compares
    assert "0001" in compared.stdout
    latest = subprocess.run([sys.executable, *_pytest(tmp_path, "--benchmark-compare")], cwd=tmp_path, env=child_env(),
                            capture_output=True, text=True, check=False)
    assert latest.returncode == 0 and "0001" in latest.stdout, latest.stdout[-2000:]  # "latest" skips the broken one


def test_tally_is_n_kills_and_no_losses() -> None:
    """Runs last in this module: every kill above is counted, none lost anything."""
    kills, losses = sum(KILLS.values()), sum(LOSSES.values())
    if not kills:
        pytest.skip("no kill test ran in this session")
    line = f"interrupted writes: {kills} kills, {losses} losses ({', '.join(f'{k} {v}' for k, v in KILLS.items())})"
    print(line)
    assert losses == 0, line
