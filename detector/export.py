"""ONNX export of the detector, and loading of ONNX files with clear errors.

The exported graph has one input, ``images`` float32 [batch, 3, H, W] (RGB in [0, 1]), and one output,
``decoded`` float32 [batch, N, 4 + C] (x1, y1, x2, y2 in network-input pixels, then per-class scores),
with a dynamic ``batch`` axis by default.

Exporter: ``torch.onnx.export(..., dynamo=True)`` (the ``torch.export`` based exporter, default since
torch 2.9; the TorchScript exporter is deprecated). It traces with a symbolic batch dimension, so a model
that hard-codes its batch size fails to export instead of silently exporting a fixed batch. It emits
opset 18 natively and converts down when a lower opset is asked for (17 by default, which TensorRT and
older ONNX Runtime builds read); the opset actually written is checked and logged.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from detector import fileio
from detector.errors import BackendError, BackendUnavailable, ModelFileError
from detector.progress import spinner

if TYPE_CHECKING:
    import onnx
    import torch

log = logging.getLogger(__name__)

__all__ = ["EXPORT_VERSION", "INPUT_NAME", "OUTPUT_NAME", "check_matches_cfg", "check_onnx", "check_onnx_file",
           "export_onnx", "load_onnx"]

#: Bump when the export code changes what it writes: cached exports are keyed on it.
EXPORT_VERSION = 1
INPUT_NAME = "images"
OUTPUT_NAME = "decoded"
MIN_OPSET = 17
#: Loggers of the exporter that report routine steps (torchvision ops skipped, opset conversion) as warnings.
_NOISY_LOGGERS = ("torch.onnx", "torch.export", "torch._export", "torch._dynamo", "torch.fx", "onnxscript", "onnx_ir")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def export_onnx(
    model: torch.nn.Module,
    path: str | os.PathLike[str],
    *,
    opset: int = MIN_OPSET,
    dynamic_batch: bool = True,
    input_size: tuple[int, int] | None = None,
) -> Path:
    """Export ``model`` (x [B,3,H,W] -> decoded [B,N,4+C]) to ``path`` and validate it; return the path.

    Args:
        model: a module on the CPU in fp32, e.g. :class:`detector.model.DarknetModel`; exported in eval
            mode (its training flag is restored afterwards).
        path: destination ``.onnx`` file, written atomically as one self-contained file (no external data).
        opset: ONNX default-domain opset, at least 17.
        dynamic_batch: make axis 0 of input and output the symbolic dimension ``batch``; otherwise the
            graph is fixed to batch 1.
        input_size: ``(height, width)`` in pixels; defaults to ``model.input_size``.

    Raises:
        BackendUnavailable: onnxscript (which the exporter needs) is not installed.
        BackendError: bad arguments, or torch cannot export the model (message names the file).
        ModelFileError: the written file fails ``onnx.checker`` or lacks the expected input/output.
    """
    import torch

    path = Path(path)
    try:
        import onnxscript  # noqa: F401  (the dynamo exporter translates through it)
    except ImportError as e:
        raise BackendUnavailable(f"cannot export to ONNX '{path}': the exporter needs onnxscript, which is not "
                                 "installed (pip install onnxscript)") from e
    if int(opset) < MIN_OPSET:
        raise BackendError(f"cannot export to '{path}': opset {opset} is below the minimum {MIN_OPSET}")
    import onnx

    if int(opset) > onnx.defs.onnx_opset_version():  # the exporter wrote its own (18) and said nothing
        raise BackendError(f"cannot export to '{path}': opset {opset} is above the newest this onnx "
                           f"{onnx.__version__} knows, {onnx.defs.onnx_opset_version()}")
    if input_size is None:
        input_size = getattr(model, "input_size", None)
        if input_size is None:
            raise BackendError(f"cannot export to '{path}': pass input_size=(h, w); the model has no input_size")
    height, width = (int(v) for v in input_size)

    # Batch 2 as the example so that the tracer cannot specialise the batch axis to the constant 1.
    example = torch.rand(2 if dynamic_batch else 1, 3, height, width, generator=torch.Generator().manual_seed(0))
    example = example.to(next(model.parameters(), example).device)
    dynamic_shapes = ({0: torch.export.Dim("batch", min=1)},) if dynamic_batch else None
    was_training = model.training
    model.eval()
    try:
        # the bar is made before the exporter's output is silenced, so it draws on the real stderr
        with spinner(f"exporting to ONNX (opset {int(opset)})"), fileio.atomic_path(path) as tmp, \
                _quiet_exporter(), torch.no_grad():
            torch.onnx.export(
                model,
                (example,),
                str(tmp),
                input_names=[INPUT_NAME],
                output_names=[OUTPUT_NAME],
                opset_version=int(opset),
                dynamo=True,
                dynamic_shapes=dynamic_shapes,
                external_data=False,
                verbose=False,
            )
            proto = load_onnx(tmp, check=False)
            _check_model(proto, path)
            if dynamic_batch:
                _check_dynamic_batch(proto, path)
    except (BackendError, ModelFileError):
        raise
    except Exception as e:  # the exporter raises many unrelated types; report one clear line
        root = e
        while root.__cause__ is not None:
            root = root.__cause__
        if isinstance(root, OSError) and root.strerror:  # a full disk: its strerror, not the temporary file's name
            raise BackendError(f"cannot write ONNX model '{path}': {root.strerror}") from e
        detail = _first_line(e) if root is e else f"{type(root).__name__}: {_first_line(root)}"
        raise BackendError(f"cannot export {type(model).__name__} to ONNX '{path}': {detail}") from e
    finally:
        model.train(was_training)

    written = _opset_of(proto)
    if written != int(opset):
        log.warning("ONNX export '%s' has opset %d (asked for %d): the exporter could not convert", path,
                    written, opset)
    log.info("exported ONNX model '%s' (opset %d, %s batch, %dx%d)", path, written,
             "dynamic" if dynamic_batch else "fixed", height, width)
    return path


def load_onnx(path: str | os.PathLike[str], *, check: bool = True) -> onnx.ModelProto:
    """Load an ONNX file, turning every failure into one :class:`ModelFileError` line naming the file.

    With ``check`` the model must also pass :func:`check_onnx` (checker, one input, one output).
    """
    import onnx

    path = Path(path)
    check_onnx_file(path)
    try:
        model = onnx.load(str(path))
    except Exception as e:  # protobuf DecodeError, RuntimeError, ... : all mean "not an ONNX model"
        raise ModelFileError(f"cannot load ONNX model '{path}': not a valid ONNX file ({_first_line(e)})") from e
    if check:
        _check_model(model, path)
    return model


def check_onnx_file(path: str | os.PathLike[str]) -> None:
    """:class:`ModelFileError` unless ``path`` is a non-empty regular file; cheap (onnx is not imported), so a
    command checks a given model this way before loading anything."""
    path = Path(path)
    try:
        st = path.stat()
        if fileio.file_kind(st) is None:
            open(path, "rb").close()  # can be read (not tried on a FIFO, which would block)
    except OSError as e:
        raise ModelFileError(f"cannot load ONNX model '{path}': {fileio.os_reason(e)}") from e
    kind = fileio.file_kind(st)
    if kind == "a directory":
        raise ModelFileError(f"cannot load ONNX model '{path}': it is a folder, not a file")
    if kind is not None:
        raise ModelFileError(f"cannot load ONNX model '{path}': it is {kind}, not a regular file")
    if st.st_size == 0:
        raise ModelFileError(f"cannot load ONNX model '{path}': the file is empty (0 bytes)")


def check_onnx(path: str | os.PathLike[str], *, display_name: str | os.PathLike[str] | None = None) -> None:
    """Run ``onnx.checker`` (full check, with strict shape inference) and check the graph's I/O.

    Raises :class:`ModelFileError` naming ``display_name`` (default ``path``) on the first problem.
    """
    path = Path(path)
    _check_model(load_onnx(path, check=False), Path(display_name) if display_name is not None else path)


def check_matches_cfg(model: onnx.ModelProto, path: str | os.PathLike[str], input_size: tuple[int, int],
                      num_classes: int, cfg: str | os.PathLike[str]) -> None:
    """Raise :class:`ModelFileError` unless the model takes [B,3,H,W] with ``input_size == (H, W)`` and outputs
    [B,N,4+C] with ``C == num_classes`` (dimensions left symbolic in the file are not checked).

    Args:
        model: a loaded model (see :func:`load_onnx`); path: its file, for the message.
        input_size: ``(height, width)`` in pixels from the cfg; num_classes: C from the cfg; cfg: its file.
    """
    graph = model.graph
    initializers = {init.name for init in graph.initializer}
    value = next(i for i in graph.input if i.name not in initializers)
    dims = [d.dim_value if d.HasField("dim_value") else None for d in value.type.tensor_type.shape.dim]
    height, width = (int(v) for v in input_size)
    if len(dims) == 4 and (dims[1] not in (None, 3) or (dims[2], dims[3]) not in ((height, width), (None, None))):
        shape = "x".join("?" if d is None else str(d) for d in dims[1:])
        raise ModelFileError(f"ONNX model '{path}' takes {shape} (CxHxW) input; cfg '{cfg}' needs 3x{height}x{width}")
    out = [d.dim_value if d.HasField("dim_value") else None for d in graph.output[0].type.tensor_type.shape.dim]
    if len(out) != 3 or (out[2] is not None and out[2] != 4 + int(num_classes)):
        shape = ", ".join("?" if d is None else str(d) for d in out)
        raise ModelFileError(f"ONNX model '{path}' outputs [{shape}]; cfg '{cfg}' has {num_classes} classes, so "
                             f"[batch, N, {4 + int(num_classes)}] (4 box values + one score per class)")


def _check_model(model: onnx.ModelProto, path: Path) -> None:
    import onnx

    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:
        raise ModelFileError(f"ONNX model '{path}' fails onnx.checker: {_first_line(e)}") from e
    _check_io(model, path)


#: The element types (``onnx.TensorProto``'s FLOAT, FLOAT16, BFLOAT16) the runners feed and read.
_FLOATS = (1, 10, 16)


def _check_io(model: onnx.ModelProto, path: Path) -> None:
    graph = model.graph
    initializers = {init.name for init in graph.initializer}
    inputs = [i for i in graph.input if i.name not in initializers]
    if len(inputs) != 1 or len(graph.output) != 1:
        raise ModelFileError(f"ONNX model '{path}' has {len(inputs)} inputs and {len(graph.output)} outputs; "
                             "expected one input [B,3,H,W] and one output [B,N,4+C]")
    rank = len(inputs[0].type.tensor_type.shape.dim)
    if rank != 4:
        raise ModelFileError(f"ONNX model '{path}' input '{inputs[0].name}' has rank {rank}; expected [B,3,H,W]")
    import onnx

    for what, value in (("input", inputs[0]), ("output", graph.output[0])):  # frames and boxes are floats
        if (kind := value.type.tensor_type.elem_type) not in _FLOATS:
            name = onnx.TensorProto.DataType.Name(kind).lower() if kind in onnx.TensorProto.DataType.values() else kind
            shape = "[B,3,H,W] frames scaled to 0..1" if what == "input" else "[B,N,4+C]"
            raise ModelFileError(f"ONNX model '{path}' {what} '{value.name}' holds {name}; expected float32, float16 "
                                 f"or bfloat16 ({shape})")


def _check_dynamic_batch(model: onnx.ModelProto, path: Path) -> None:
    for value in (model.graph.input[0], model.graph.output[0]):
        dims = value.type.tensor_type.shape.dim
        if not dims or not dims[0].dim_param:
            fixed = dims[0].dim_value if dims else "?"
            raise BackendError(f"cannot export to ONNX '{path}': the batch axis of '{value.name}' came out fixed at "
                               f"{fixed}; the model must not hard-code its batch size")


def _opset_of(model: onnx.ModelProto) -> int:
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), -1)


def _first_line(e: BaseException) -> str:
    text = _ANSI.sub("", str(e)).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:300]


@contextlib.contextmanager
def _quiet_exporter() -> Iterator[None]:
    """Silence the exporter's progress prints, graph dumps and routine warnings (sent to the debug log).

    Failures still surface: they are raised, and :func:`export_onnx` reports them as one line.
    """
    loggers = [logging.getLogger(name) for name in _NOISY_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    buffer = io.StringIO()
    try:
        with contextlib.redirect_stdout(buffer), contextlib.redirect_stderr(buffer), warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            warnings.simplefilter("ignore", DeprecationWarning)
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        if buffer.getvalue().strip():
            log.debug("exporter output:\n%s", buffer.getvalue().rstrip())
