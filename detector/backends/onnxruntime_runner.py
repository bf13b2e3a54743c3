"""ONNX Runtime runner: the cached ONNX export of the model (or a given ONNX file) in an InferenceSession.

Device ``cpu`` uses ``CPUExecutionProvider``; ``cuda`` uses ``CUDAExecutionProvider``, offered only when
the installed onnxruntime has it (the ``onnxruntime-gpu`` package). ONNX Runtime does its own host<->device
copies on its own stream, so this is a ``host_io`` runner (see :mod:`detector.backends.base`): it gets and
returns host tensors, shared with the session's numpy arrays without a copy, and on CUDA ``compute_ms``
includes the copies while ``h2d_ms`` / ``d2h_ms`` are ``None``. Precision: fp32 only.

Options:

``intra_op_threads``
    Threads for one operator; 0 (default) lets ONNX Runtime choose (one per physical core).
``opset``
    Opset of the export (default 17), from :meth:`ModelSpec.onnx_path`.
``model_path``
    Run this ONNX file instead of the spec's export (checked with :func:`detector.export.load_onnx`, and its
    input size and classes against the cfg with :func:`detector.export.check_matches_cfg`).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from detector.backends.base import Runner
from detector.errors import BackendError, BackendUnavailable, ModelFileError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

__all__ = ["OnnxRuntimeRunner"]

_CUDA_PROVIDER = "CUDAExecutionProvider"
_CPU_PROVIDER = "CPUExecutionProvider"
#: ONNX Runtime's log severity for its default logger and each session: 4 (FATAL) only; see ``_activate``.
_ORT_LOG_SEVERITY = 4


class OnnxRuntimeRunner(Runner):
    """Runs the ONNX export with ONNX Runtime (see the module docstring for the options)."""

    name: ClassVar[str] = "onnxruntime"
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    host_io: ClassVar[bool] = True
    options: ClassVar[dict[str, Any]] = {"intra_op_threads": 0, "opset": 17, "model_path": None}

    def __init__(self, spec: Any, *, device: str = "cpu", precision: str = "fp32", **options: Any) -> None:
        super().__init__(spec, device=device, precision=precision, **options)
        threads = self.options["intra_op_threads"]
        if not isinstance(threads, int) or isinstance(threads, bool) or threads < 0:
            raise BackendError(f"runner 'onnxruntime': intra_op_threads must be an integer >= 0; got {threads!r}")
        self._session: Any = None
        self._input_name = ""
        self._output_name = ""
        self._columns = 0

    @classmethod
    def unavailable_reason(cls, device: str = "cpu", precision: str = "fp32") -> str | None:
        """Base checks, plus: onnxruntime importable, and its CUDA provider present for ``cuda``."""
        reason = super().unavailable_reason(device, precision)
        try:
            import onnxruntime
        except ImportError:
            return "onnxruntime not installed"
        if str(device).partition(":")[0] == "cuda" and _CUDA_PROVIDER not in onnxruntime.get_available_providers():
            return "onnxruntime CUDA provider not installed (onnxruntime-gpu)"
        return reason

    @property
    def model_path(self) -> Path:
        """The ONNX file this runner runs (exports the spec on first use unless ``model_path`` was given)."""
        given = self.options["model_path"]
        return Path(given) if given is not None else self.spec.onnx_path(opset=self.options["opset"])

    def _activate(self) -> None:
        import onnxruntime as ort

        from detector.export import check_matches_cfg, load_onnx

        path = self.model_path
        if self.options["model_path"] is not None:  # a user file: clear ModelFileError before ONNX Runtime's own
            check_matches_cfg(load_onnx(path), path, self.spec.input_size, self.spec.num_classes, self.spec.cfg)
        session_options = ort.SessionOptions()
        session_options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        session_options.intra_op_num_threads = self.options["intra_op_threads"]
        # ONNX Runtime's own log (coloured lines on stderr, also for the errors it raises as exceptions) stays off
        # up to ERROR: every failure it logs is raised, and becomes this runner's one-line error. 4 = FATAL.
        ort.set_default_logger_severity(_ORT_LOG_SEVERITY)
        session_options.log_severity_level = _ORT_LOG_SEVERITY
        if self.device_type == "cuda":
            providers: list[Any] = [(_CUDA_PROVIDER, {"device_id": self.torch_device.index}), _CPU_PROVIDER]
        else:
            providers = [_CPU_PROVIDER]
        try:
            # a name that is not UTF-8 (b'm\xff.onnx') is refused as a str: ONNX Runtime reads the bytes then
            model: str | bytes = str(path)
            if model.encode("utf-8", "replace").decode("utf-8") != model:
                model = path.read_bytes()
            session = ort.InferenceSession(model, sess_options=session_options, providers=providers)
        except Exception as e:  # onnxruntime raises its own Fail / InvalidGraph / RuntimeException types
            text = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise ModelFileError(f"onnxruntime cannot load '{path}': {text[:300]}") from e
        if self.device_type == "cuda" and _CUDA_PROVIDER not in session.get_providers():
            raise BackendUnavailable(f"runner 'onnxruntime': the CUDA provider failed to load for '{path}' "
                                     "(check the CUDA and cuDNN libraries onnxruntime-gpu needs)")
        inputs, outputs = session.get_inputs(), session.get_outputs()
        if len(inputs) != 1 or len(outputs) != 1:
            raise ModelFileError(f"ONNX model '{path}' has {len(inputs)} inputs and {len(outputs)} outputs; "
                                 "expected one input [B,3,H,W] and one output [B,N,4+C]")
        if inputs[0].type != "tensor(float)":  # float16 / bfloat16 input is TensorRT's; this runner feeds float32
            raise ModelFileError(f"ONNX model '{path}' input '{inputs[0].name}' is {inputs[0].type}; ONNX Runtime "
                                 "runs it with float32 frames (tensor(float)) only")
        self._input_name, self._output_name = inputs[0].name, outputs[0].name
        self._columns = 4 + self.spec.num_classes  # a dimension the file leaves symbolic: checked on the first run
        self._session = session
        log.info("onnxruntime session for '%s' on %s", path, session.get_providers()[0])

    def _deactivate(self) -> None:
        self._session = None

    def _infer(self, x: torch.Tensor) -> torch.Tensor:
        import torch

        try:
            out = self._session.run([self._output_name], {self._input_name: x.numpy()})[0]
        except Exception as e:  # onnxruntime's own exception types
            raise BackendError(f"runner 'onnxruntime': ONNX model '{self.model_path}' failed on a {list(x.shape)} "
                               f"input: {' '.join(str(e).split())[:300]}") from e
        if self._columns and (out.ndim != 3 or out.shape[0] != x.shape[0] or out.shape[2] != self._columns):
            raise ModelFileError(f"ONNX model '{self.model_path}' outputs {list(out.shape)} for a batch of "
                                 f"{x.shape[0]}; the model has {self._columns - 4} classes, so [{x.shape[0]}, N, "
                                 f"{self._columns}] (4 box values + one score per class)")
        self._columns = 0  # the model's output is known now: no check on the calls that are timed
        return torch.from_numpy(out)
