"""The model files shipped in ``detector/data/``: the two-class (person, vehicle) YOLOv4-tiny cfg, its trained
weights when they ship, and the class names. Paths and names only: nothing heavy is imported, so a command finds
its default model before torch loads."""

from __future__ import annotations

import codecs
import unicodedata
from pathlib import Path

from detector.errors import CfgError
from detector.fileio import os_reason

__all__ = ["DATA_DIR", "default_cfg_path", "default_names", "default_weights_path", "read_names"]

#: The folder of the shipped files.
DATA_DIR = Path(__file__).resolve().parent / "data"


def default_cfg_path() -> Path:
    """The shipped 2-class (person, vehicle) YOLOv4-tiny cfg, 416x416."""
    return DATA_DIR / "yolov4-tiny.cfg"


def read_names(path: Path) -> list[str]:
    """The class names in a ``classes.names`` file, one a line, blank lines skipped; a UTF-8 byte-order mark (what
    some Windows editors write first) is not part of the first name.

    Raises:
        CfgError: (one line naming the file) missing, unreadable, not UTF-8 text, a control character (NUL, an
            escape sequence) in a name, or a name on two lines.
    """
    try:
        data = path.read_bytes()
    except OSError as e:
        raise CfgError(f"cannot read class names '{path}': {os_reason(e)}") from e
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:  # utf-8-sig counts from after the mark: the offset is the file's
        at = e.start + (len(codecs.BOM_UTF8) if data.startswith(codecs.BOM_UTF8) else 0)
        raise CfgError(f"cannot read class names '{path}': not UTF-8 text (byte {at}: 0x{data[at]:02x}); save it "
                       "as UTF-8") from e
    lines: dict[str, int] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        name = line.strip()
        if control := next((c for c in name if unicodedata.category(c) == "Cc"), None):
            raise CfgError(f"class names '{path}': line {number} holds the control character {control!r}; a class "
                           "name is printable text (it is drawn on frames, printed and stored)")
        if name and lines.setdefault(name, number) != number:
            raise CfgError(f"class names '{path}': {name!r} is on lines {lines[name]} and {number}; "
                           "each class needs its own name (scores are reported by name)")
    return list(lines)


def default_names() -> list[str]:
    """Class names of the shipped cfg, in class-index order: ``['person', 'vehicle']``."""
    return read_names(DATA_DIR / "classes.names")


def default_weights_path() -> Path | None:
    """``detector/data/yolov4-tiny.weights`` if trained weights are shipped, else None."""
    path = DATA_DIR / "yolov4-tiny.weights"
    return path if path.is_file() else None
