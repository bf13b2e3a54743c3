"""``detector check-cache``: find cache entries that cannot be used, without building or loading anything heavy.

The caches rebuild an unusable entry on their own (with a warning), so this is for a person or a CI step that
wants to know before a run: ONNX exports that do not parse, TensorRT engines whose bytes do not match their
sidecar (checked without TensorRT), cached videos that do not open. Temporary files left by killed runs are
counted: the caches never pick them up, and they are safe to delete.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

from detector.errors import DetectorError
from detector.fileio import symlink_loop

log = logging.getLogger(__name__)

__all__ = ["CacheReport", "check_cache"]


@dataclass
class CacheReport:
    """What :func:`check_cache` found: entries checked, one line per unusable entry, leftover temporary files."""

    checked: int = 0
    problems: list[str] = field(default_factory=list)
    leftovers: list[Path] = field(default_factory=list)


def _is_temporary(path: Path) -> bool:
    """A name made by :func:`detector.fileio.atomic_path` (``.<stem>.<random>.tmp<suffix>``) or a lock file."""
    return path.name.startswith(".") and ".tmp" in path.name


def check_cache(cache_dir: str | os.PathLike[str]) -> CacheReport:
    """Check every entry under ``cache_dir`` (``onnx/*.onnx``, ``trt/engines/*.engine``, ``videos/*``).

    Raises:
        DetectorError: ``cache_dir`` is missing or not a folder, or a folder of it cannot be read.
    """
    from detector.errors import VideoError
    from detector.export import load_onnx
    from detector.trt.cache import check_entry
    from detector.video import open_video

    root = Path(cache_dir)
    if not root.is_dir():
        problem = ("a symbolic link loop (too many levels of symbolic links)" if symlink_loop(root) else
                   "no such folder" if not root.exists() else "not a folder")
        raise DetectorError(f"cannot check cache '{root}': {problem}")
    report = CacheReport()
    report.leftovers = sorted(p for p in root.rglob(".*") if p.is_file() and _is_temporary(p))
    def entries(folder: Path, pattern: str) -> list[Path]:
        try:  # listed, not globbed: glob skips a folder it cannot read, and "0 unusable" would be untrue
            return sorted(p for p in folder.iterdir() if p.match(pattern) and not _is_temporary(p))
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as e:
            raise DetectorError(f"cannot check cache '{root}': cannot read '{folder}': {e.strerror}") from e

    for path in entries(root / "onnx", "*.onnx"):
        report.checked += 1
        try:
            load_onnx(path, check=False)
        except DetectorError as e:
            report.problems.append(str(e))
    for path in entries(root / "trt" / "engines", "*.engine"):
        report.checked += 1
        problem = check_entry(path)
        if problem is not None:
            report.problems.append(problem)
    for gt in entries(root / "videos", "*.json"):  # a .json marks a complete synthetic-video entry
        for video in (gt.with_suffix(s) for s in (".mp4", ".avi")):
            if video.exists():
                report.checked += 1
                try:
                    open_video(video).close()
                except VideoError as e:
                    report.problems.append(str(e))
    log.info("checked %d cache entries under %s: %d unusable", report.checked, root, len(report.problems))
    return report
