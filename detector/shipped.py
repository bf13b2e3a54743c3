"""The model files shipped in ``detector/data/``: the two-class (person, vehicle) YOLOv4-tiny cfg, its trained
weights when they ship, and the class names. Paths and names only: nothing heavy is imported, so a command finds
its default model before torch loads."""

from __future__ import annotations

from pathlib import Path

__all__ = ["DATA_DIR", "default_cfg_path", "default_names", "default_weights_path", "read_names"]

#: The folder of the shipped files.
DATA_DIR = Path(__file__).resolve().parent / "data"


def default_cfg_path() -> Path:
    """The shipped 2-class (person, vehicle) YOLOv4-tiny cfg, 416x416."""
    return DATA_DIR / "yolov4-tiny.cfg"


def read_names(path: Path) -> list[str]:
    """The class names in a ``classes.names`` file, one a line, blank lines skipped."""
    return [line.strip() for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def default_names() -> list[str]:
    """Class names of the shipped cfg, in class-index order: ``['person', 'vehicle']``."""
    return read_names(DATA_DIR / "classes.names")


def default_weights_path() -> Path | None:
    """``detector/data/yolov4-tiny.weights`` if trained weights are shipped, else None."""
    path = DATA_DIR / "yolov4-tiny.weights"
    return path if path.is_file() else None
