"""Training and held-out evaluation of the YOLOv4-tiny detector on the synthetic video generator's frames.

Modules: :mod:`~detector.train.data` (rendered frames, seed split), :mod:`~detector.train.augment` (device
augmentation), :mod:`~detector.train.loss` (YOLOv4 loss), :mod:`~detector.train.loop` (the run),
:mod:`~detector.train.evalrun` (mAP on held-out or labelled videos), :mod:`~detector.train.provenance` (the text file
beside the weights), :mod:`~detector.train.cli` (``detector train`` / ``detector eval``).

Importing this package imports no torch: the names below load their module on first access.
Command line without the main CLI: ``python3 -m detector.train {train,eval} ...``.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["TrainConfig", "TrainResult", "add_eval_parser", "add_train_parser", "evaluate_model",
           "evaluate_video", "evaluate_weights", "train"]

_WHERE = {"TrainConfig": "loop", "TrainResult": "loop", "train": "loop", "evaluate_model": "evalrun",
          "evaluate_video": "evalrun", "evaluate_weights": "evalrun", "add_train_parser": "cli",
          "add_eval_parser": "cli"}


def __getattr__(name: str) -> Any:
    """Load the public names from their modules on first use (PEP 562)."""
    if name in _WHERE:
        return getattr(importlib.import_module(f"detector.train.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
