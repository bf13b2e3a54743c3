"""The small text file written beside trained weights: how they were made (command, seeds, data, code, machine)."""

from __future__ import annotations

import datetime
import hashlib
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

__all__ = ["git_commit", "provenance_path", "source_digest", "write_provenance"]

_REPO = Path(__file__).resolve().parents[2]
# The code that decides what the weights are: the generator, the network, the training code.
_SOURCES = ("detector/synthetic.py", "detector/model.py", "detector/darknet.py", "detector/boxes.py",
            "detector/train/*.py")


def provenance_path(weights: str | os.PathLike[str]) -> Path:
    """``<weights>.txt`` beside the weights (``yolov4-tiny.weights`` -> ``yolov4-tiny.weights.txt``)."""
    weights = Path(weights)
    return weights.with_name(weights.name + ".txt")


def git_commit(repo: Path = _REPO) -> str:
    """``$DETECTOR_GIT_COMMIT`` when set (a copy of the tree, e.g. on the GPU machine, may carry a stale
    .git), else ``git rev-parse HEAD`` of the repository holding this code (with ``-dirty`` when the tree has
    changes), else ``"unknown (...)"``: never raises."""
    env = os.environ.get("DETECTOR_GIT_COMMIT")
    if env:
        return env
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=repo,
                               capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        return head + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError) as e:
        return f"unknown (git rev-parse failed: {type(e).__name__})"


def source_digest(repo: Path = _REPO) -> str:
    """sha256 (first 16 hex digits) over the training-relevant source files, in sorted path order: identifies
    the code even where there is no git checkout."""
    digest = hashlib.sha256()
    for pattern in _SOURCES:
        for path in sorted(repo.glob(pattern)):
            digest.update(path.relative_to(repo).as_posix().encode())
            digest.update(b"\0")
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def command_line() -> str:
    """This process's command line, shell-quoted."""
    argv = list(sys.argv)
    if argv and argv[0].endswith(".py") and "detector" in Path(argv[0]).parts:  # python3 -m <module>
        parts = Path(argv[0]).with_suffix("").parts
        module = ".".join(parts[len(parts) - 1 - parts[::-1].index("detector"):])
        argv[0:1] = ["python3", "-m", module.removesuffix(".__main__")]
    return " ".join(shlex.quote(a) for a in argv)


def write_provenance(weights: str | os.PathLike[str], fields: Mapping[str, object], *, tables: Mapping[str, str]
                     | None = None) -> Path:
    """Write ``<weights>.txt`` atomically: a header, ``key: value`` lines, then named text blocks (AP tables)."""
    from detector.fileio import atomic_write_text, file_digest

    weights = Path(weights)
    lines = [f"# {weights.name}: trained by detector.train (YOLOv4-tiny from scratch on synthetic frames)",
             f"date_utc: {datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%dT%H:%M:%SZ')}",
             f"weights_sha256: {file_digest(weights)}",
             f"weights_bytes: {weights.stat().st_size}"]
    lines += [f"{key}: {value}" for key, value in fields.items()]
    for title, block in (tables or {}).items():
        lines += ["", f"{title}:", *("    " + line for line in block.splitlines())]
    return atomic_write_text(provenance_path(weights), "\n".join(lines) + "\n")
