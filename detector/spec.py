"""What a runner runs: a Darknet cfg, its weights (or a seed) and where derived files are cached.

A :class:`ModelSpec` is a small, hashable value. Everything heavy it can produce -- the PyTorch model,
the exported ONNX file -- is built on request, and the ONNX file only once per content: its cache key
covers the cfg bytes, the weights file's digest (or the seed of the random weights), the torch and onnx
versions, the opset and the export code's version, so a change to any of them exports anew and nothing
stale is reused. Importing this module does not import torch.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import os
from pathlib import Path
from typing import TYPE_CHECKING

from detector import fileio
from detector.errors import CfgError, WeightsError

if TYPE_CHECKING:
    from detector.darknet import NetConfig
    from detector.model import DarknetModel

log = logging.getLogger(__name__)

__all__ = ["ModelSpec", "default_cache_dir"]


def default_cache_dir() -> Path:
    """The cache folder for exported models and engines: ``$DETECTOR_CACHE``, else ``~/.cache/detector``."""
    env = os.environ.get("DETECTOR_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "detector"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A detector model by content: cfg file, weights file (or seeded random weights) and cache folder.

    Attributes:
        cfg: Darknet ``.cfg`` file.
        weights: Darknet ``.weights`` file; ``None`` means deterministic random weights drawn from ``seed``
            (see :func:`detector.model.load_model`), which is what tests and speed benchmarks use.
        seed: seed of the random weights; ignored when ``weights`` is given.
        cache_dir: folder for derived files (ONNX exports under ``onnx/``); defaults to
            :func:`default_cache_dir` read when the spec is created.
    """

    cfg: Path
    weights: Path | None = None
    seed: int = 0
    cache_dir: Path = dataclasses.field(default_factory=default_cache_dir)

    def __post_init__(self) -> None:
        object.__setattr__(self, "cfg", Path(self.cfg))
        if self.weights is not None:
            object.__setattr__(self, "weights", Path(self.weights))
        object.__setattr__(self, "cache_dir", Path(self.cache_dir))

    @classmethod
    def default(cls, *, seed: int = 0, cache_dir: str | os.PathLike[str] | None = None) -> ModelSpec:
        """The packaged ``yolov4-tiny.cfg`` with the packaged weights, or seeded random ones if none ship."""
        from detector.model import default_cfg_path, default_weights_path

        return cls(
            cfg=default_cfg_path(),
            weights=default_weights_path(),
            seed=seed,
            cache_dir=Path(cache_dir) if cache_dir is not None else default_cache_dir(),
        )

    # -- facts read from the cfg (parsed once per spec) ------------------------------------------------
    @functools.cached_property
    def net(self) -> NetConfig:
        """The parsed cfg (:class:`detector.darknet.NetConfig`); raises :class:`CfgError` if it is bad."""
        from detector.darknet import parse_cfg

        return parse_cfg(self.cfg)

    @property
    def input_size(self) -> tuple[int, int]:
        """Network input ``(height, width)`` in pixels, from the cfg's ``[net]`` section."""
        return (int(self.net.height), int(self.net.width))

    @property
    def num_classes(self) -> int:
        """Number of classes C (the decoded output has 4 + C columns)."""
        return int(self.net.classes)

    @functools.cached_property
    def names(self) -> list[str]:
        """Class names, index order: a ``classes.names`` beside the cfg with one line per class (the packaged
        cfg has one: ``['person', 'vehicle']``, as :func:`detector.model.load_model` reads it), else
        ``class0``, ``class1``, ..."""
        names_path = self.cfg.parent / "classes.names"
        if names_path.is_file():
            names = [line.strip() for line in names_path.read_text(encoding="utf-8").splitlines() if line.strip()]
            if len(names) == self.num_classes:
                return names
            log.warning("%s has %d names for the %d classes of %s; using generic names", names_path, len(names),
                        self.num_classes, self.cfg)
        return [f"class{i}" for i in range(self.num_classes)]

    # -- derived artefacts ----------------------------------------------------------------------------------
    def load_torch(self) -> DarknetModel:
        """A fresh :class:`detector.model.DarknetModel` (fp32, eval mode, on the CPU) with this spec's weights."""
        from detector.model import load_model

        return load_model(self.cfg, self.weights, seed=self.seed)

    def weights_key(self) -> str:
        """What identifies the weights in cache keys: ``sha256:<digest>`` of the file, or ``seed:<seed>``."""
        if self.weights is None:
            return f"seed:{self.seed}"
        try:
            return f"sha256:{fileio.file_digest(self.weights)}"
        except FileNotFoundError as e:
            raise WeightsError(f"cannot read weights '{self.weights}': no such file") from e
        except OSError as e:
            raise WeightsError(f"cannot read weights '{self.weights}': {e.strerror or e}") from e

    def cache_key(self, *parts: object) -> str:
        """A content key over the cfg bytes, :meth:`weights_key` and ``parts`` (versions, options)."""
        try:
            cfg_bytes = self.cfg.read_bytes()
        except FileNotFoundError as e:
            raise CfgError(f"cannot read cfg '{self.cfg}': no such file") from e
        except OSError as e:
            raise CfgError(f"cannot read cfg '{self.cfg}': {e.strerror or e}") from e
        return fileio.content_key(cfg_bytes, self.weights_key(), *parts)

    def onnx_path(self, opset: int = 17) -> Path:
        """The ONNX export of this model (input ``images`` [B,3,H,W], output ``decoded`` [B,N,4+C]).

        Exported on first use into ``cache_dir/onnx/`` and reused afterwards, also by other processes
        (pytest-xdist workers wait on a lock while one of them exports); an entry that no longer parses
        is exported again. Raises :class:`BackendError` if
        the export fails and :class:`ModelFileError` if the exported file does not pass ``onnx.checker``.
        """
        import onnx
        import torch

        from detector import export

        key = self.cache_key("onnx", torch.__version__, onnx.__version__, int(opset), export.EXPORT_VERSION)
        name = f"onnx/{self.cfg.stem}-{key}-op{int(opset)}.onnx"

        def build(tmp: Path) -> None:
            log.info("exporting %s (%s) to ONNX opset %d", self.cfg, self.weights_key(), opset)
            export.export_onnx(self.load_torch(), tmp, opset=opset, dynamic_batch=True)

        return fileio.cached_file(self.cache_dir, name, build, valid=_readable_onnx)


def _readable_onnx(path: Path) -> bool:
    """A cache entry parses as ONNX (a damaged one is rebuilt by :func:`fileio.cached_file`)."""
    from detector.errors import ModelFileError
    from detector.export import load_onnx

    try:
        load_onnx(path, check=False)
    except ModelFileError as e:
        log.warning("%s", e)
        return False
    return True
