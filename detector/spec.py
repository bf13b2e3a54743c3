"""What a runner runs: a Darknet cfg and its weights (or a seed), or an ONNX file, optionally a prebuilt TensorRT
engine, and where derived files are cached.

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
from detector.errors import BackendUnavailable, CfgError, ModelFileError, WeightsError
from detector.shipped import read_names

if TYPE_CHECKING:
    from detector.darknet import NetConfig, NmsConfig
    from detector.model import DarknetModel

log = logging.getLogger(__name__)

__all__ = ["ModelSpec", "default_cache_dir"]


def default_cache_dir() -> Path:
    """The cache folder for exported models and engines: ``$DETECTOR_CACHE``, else ``~/.cache/detector``."""
    env = os.environ.get("DETECTOR_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "detector"


@dataclasses.dataclass(frozen=True)
class ModelSpec:
    """A detector model by content: cfg file, weights file (or seeded random weights) and cache folder; or an ONNX
    file as the model itself (``cfg`` None: the torch backends cannot run it).

    Attributes:
        cfg: Darknet ``.cfg`` file, or None when ``onnx`` is the model.
        weights: Darknet ``.weights`` file; ``None`` means deterministic random weights drawn from ``seed``
            (see :func:`detector.model.load_model`), which is what tests and speed benchmarks use.
        seed: seed of the random weights (>= 0); ignored when ``weights`` is given.
        cache_dir: folder for derived files (ONNX exports under ``onnx/``); defaults to
            :func:`default_cache_dir` read when the spec is created.
        onnx: an ONNX file (input [B,3,H,W], output [B,N,4+C]) run by the ONNX Runtime and TensorRT backends
            instead of the export of ``cfg``; with ``cfg`` None it is the model (input size and classes read
            from its static dimensions).
        engine: a prebuilt TensorRT engine the TensorRT backend loads instead of building one; it runs only as
            ``engine_precision``.
        engine_precision: the precision ``engine`` was built for ("fp32", "fp16" or "int8").
        names_file: class names, one per line (default: ``classes.names`` beside the cfg or ONNX file).
    """

    cfg: Path | None
    weights: Path | None = None
    seed: int = 0
    cache_dir: Path = dataclasses.field(default_factory=default_cache_dir)
    onnx: Path | None = None
    engine: Path | None = None
    engine_precision: str = "fp16"
    names_file: Path | None = None

    def __post_init__(self) -> None:
        for name in ("cfg", "weights", "onnx", "engine", "names_file"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, Path(getattr(self, name)))
        object.__setattr__(self, "cache_dir", Path(self.cache_dir))
        if self.cfg is None and self.onnx is None:
            raise CfgError("a model needs a Darknet cfg or an ONNX file; neither was given")
        if self.cfg is None and self.weights is not None:
            raise CfgError(f"weights '{self.weights}' need the Darknet cfg they were trained with; no cfg was given")
        if self.cfg is not None and self.weights is None and self.seed < 0:
            raise WeightsError(f"random weights for '{self.cfg}': seed must be an integer >= 0, got {self.seed!r}")

    @property
    def model_file(self) -> Path:
        """The file that defines the network: the cfg, else the ONNX file (for messages)."""
        return self.cfg if self.cfg is not None else self.onnx  # type: ignore[return-value]

    @classmethod
    def default(cls, *, seed: int = 0, cache_dir: str | os.PathLike[str] | None = None) -> ModelSpec:
        """The packaged ``yolov4-tiny.cfg`` with the packaged weights, or seeded random ones if none ship."""
        from detector.shipped import default_cfg_path, default_weights_path

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

        if self.cfg is None:
            raise CfgError(f"the model '{self.onnx}' is an ONNX file: it has no Darknet cfg")
        return parse_cfg(self.cfg)

    def check_files(self) -> None:
        """Parse the cfg (:class:`CfgError`) and check the weights' header and size against it (20 bytes read,
        :class:`WeightsError`) without loading them: cheap (no torch), so a command refuses a bad model file before
        anything heavy loads. Nothing to check for an ONNX model without a cfg."""
        if self.cfg is None:
            return
        if self.weights is not None:
            from detector.darknet import check_weights_size

            check_weights_size(self.weights, self.net)
        else:
            self.net  # noqa: B018 - parses the cfg

    @property
    def input_size(self) -> tuple[int, int]:
        """Network input ``(height, width)`` in pixels, from the cfg's ``[net]`` section (or the ONNX input)."""
        if self.cfg is None:
            return self._onnx_dims[0]
        return (int(self.net.height), int(self.net.width))

    @property
    def num_classes(self) -> int:
        """Number of classes C (the decoded output has 4 + C columns)."""
        if self.cfg is None:
            return self._onnx_dims[1]
        return int(self.net.classes)

    @property
    def letterbox(self) -> bool:
        """Whether frames are letterboxed (True) or plainly resized (False) for this model, as Darknet does: the
        cfg's ``[net] letter_box`` (absent: a plain resize). An ONNX file without a cfg: True, as this package's
        models are trained."""
        return True if self.cfg is None else self.net.letterbox

    @property
    def preprocess_mode(self) -> str:
        """:func:`detector.preprocess.preprocess`'s ``mode`` for this model: ``"letterbox"`` or ``"resize"``."""
        return "letterbox" if self.letterbox else "resize"

    @property
    def nms(self) -> NmsConfig:
        """The NMS Darknet runs for this model (:class:`detector.darknet.NmsConfig`, the last ``[yolo]``'s
        ``nms_kind`` / ``beta_nms``); an ONNX file without a cfg: Darknet's default per-class IoU NMS."""
        from detector.darknet import NmsConfig

        return NmsConfig() if self.cfg is None else self.net.nms

    @functools.cached_property
    def _onnx_dims(self) -> tuple[tuple[int, int], int]:
        """``((H, W), C)`` from the static dimensions of the ONNX model (ModelFileError when symbolic, or out of the
        bounds a cfg has: every frame is fed at this size, and each class gets a name)."""
        from detector.darknet import MAX_FILTERS, MAX_INPUT_SIDE
        from detector.export import load_onnx

        graph = load_onnx(self.onnx).graph  # type: ignore[arg-type]
        initializers = {init.name for init in graph.initializer}
        value = next(i for i in graph.input if i.name not in initializers)

        def dims(tensor: object) -> list[int | None]:
            shape = tensor.type.tensor_type.shape.dim  # type: ignore[attr-defined]
            return [d.dim_value if d.HasField("dim_value") else None for d in shape]

        inp, out = dims(value), dims(graph.output[0])
        if len(inp) != 4 or None in inp[2:] or len(out) != 3 or out[2] is None:
            raise ModelFileError(f"ONNX model '{self.onnx}': input {inp} / output {out}: the input size and classes "
                                 "must be static ([B,3,H,W] -> [B,N,4+C]); give the Darknet cfg as well")
        sides_ok = all(1 <= v <= MAX_INPUT_SIDE for v in inp[2:])
        if inp[1] not in (None, 3) or not sides_ok or not 1 <= out[2] - 4 <= MAX_FILTERS:  # [B,N,4]: no class
            raise ModelFileError(f"ONNX model '{self.onnx}': input {inp} / output {out}: this package runs [B,3,H,W] "
                                 f"input with H and W 1..{MAX_INPUT_SIDE} and 1 to {MAX_FILTERS} classes; give the "
                                 "Darknet cfg as well")
        return (int(inp[2]), int(inp[3])), int(out[2]) - 4  # type: ignore[arg-type]

    @functools.cached_property
    def names(self) -> list[str]:
        """Class names, index order: a ``classes.names`` beside the cfg with one line per class (the packaged
        cfg has one: ``['person', 'vehicle']``, as :func:`detector.model.load_model` reads it), else
        ``class0``, ``class1``, ..."""
        names_path = self.names_file or self.model_file.parent / "classes.names"
        if self.names_file is not None and not names_path.is_file():
            raise CfgError(f"cannot read class names '{names_path}': no such file")
        if names_path.is_file():
            names = read_names(names_path)
            if len(names) == self.num_classes:
                return names
            if self.names_file is not None:
                raise CfgError(f"{names_path}: {len(names)} names for the {self.num_classes} classes of "
                               f"'{self.model_file}'")
            log.warning("%s has %d names for the %d classes of %s; using generic names", names_path, len(names),
                        self.num_classes, self.model_file)
        return [f"class{i}" for i in range(self.num_classes)]

    # -- derived artefacts ----------------------------------------------------------------------------------
    def load_torch(self) -> DarknetModel:
        """A fresh :class:`detector.model.DarknetModel` (fp32, eval mode, on the CPU) with this spec's weights."""
        from detector.model import load_model

        if self.cfg is None:
            raise BackendUnavailable(f"the model is the ONNX file '{self.onnx}': the torch backends run a Darknet "
                                     "cfg and weights")
        return load_model(self.cfg, self.weights, seed=self.seed)

    def weights_key(self) -> str:
        """What identifies the weights in cache keys: ``sha256:<digest>`` of the file, or ``seed:<seed>``."""
        if self.weights is None:
            return f"seed:{self.seed}"
        try:
            kind = fileio.file_kind(self.weights.stat())
            if kind is not None:
                raise WeightsError(f"cannot read weights '{self.weights}': it is {kind}, not a regular file")
            return f"sha256:{fileio.file_digest(self.weights)}"
        except OSError as e:
            raise WeightsError(f"cannot read weights '{self.weights}': {fileio.os_reason(e)}") from e

    def cache_key(self, *parts: object) -> str:
        """A content key over the cfg bytes (or the ONNX file's digest), :meth:`weights_key` and ``parts``."""
        if self.cfg is None:
            return fileio.content_key(b"onnx", fileio.file_digest(self.onnx), *parts)  # type: ignore[arg-type]
        try:
            cfg_bytes = self.cfg.read_bytes()
        except OSError as e:
            raise CfgError(f"cannot read cfg '{self.cfg}': {fileio.os_reason(e)}") from e
        return fileio.content_key(cfg_bytes, self.weights_key(), *parts)

    def onnx_path(self, opset: int = 17) -> Path:
        """The ONNX export of this model (input ``images`` [B,3,H,W], output ``decoded`` [B,N,4+C]).

        Exported on first use into ``cache_dir/onnx/`` and reused afterwards, also by other processes
        (pytest-xdist workers wait on a lock while one of them exports); an entry that no longer parses
        is exported again. Raises :class:`BackendError` if
        the export fails and :class:`ModelFileError` if the exported file does not pass ``onnx.checker``.
        A given ``onnx`` file is returned instead (checked once against the cfg's input size and classes).
        """
        if self.onnx is not None:
            return self._given_onnx
        import onnx
        import torch

        from detector import export

        key = self.cache_key("onnx", torch.__version__, onnx.__version__, int(opset), export.EXPORT_VERSION)
        name = f"onnx/{self.cfg.stem}-{key}-op{int(opset)}.onnx"

        def build(tmp: Path) -> None:
            log.info("exporting %s (%s) to ONNX opset %d", self.cfg, self.weights_key(), opset)
            export.export_onnx(self.load_torch(), tmp, opset=opset, dynamic_batch=True)

        return fileio.cached_file(self.cache_dir, name, build, valid=_readable_onnx)

    @functools.cached_property
    def _given_onnx(self) -> Path:
        from detector.export import check_matches_cfg, load_onnx

        model = load_onnx(self.onnx)  # type: ignore[arg-type]
        if self.cfg is not None:
            check_matches_cfg(model, self.onnx, self.input_size, self.num_classes, self.cfg)  # type: ignore[arg-type]
        return self.onnx  # type: ignore[return-value]


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
