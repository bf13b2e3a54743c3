"""PyTorch runner: the :class:`detector.model.DarknetModel` itself, eager, compiled or replayed as CUDA graphs.

Options (all off by default):

``channels_last``
    Convert weights and inputs to NHWC memory format (faster convolutions with cuDNN on tensor cores).
``fuse_bn``
    Fold batch norm into the convolutions (``model.fuse_batchnorm()``) before anything else.
``tf32`` (CUDA only)
    Let cuDNN run fp32 convolutions in TF32 (10-bit mantissa) on tensor cores. Off by default so that
    precision "fp32" means IEEE fp32 (outputs then match the CPU to ~1e-6; with TF32 scores differ by
    ~1e-3). The setting is applied around each call and restored afterwards (it is a process-wide flag).
``cudnn_benchmark`` (CUDA only)
    Let cuDNN time its candidate algorithms on the first call of each input shape and keep the fastest
    (``torch.backends.cudnn.benchmark``) instead of choosing by heuristics. The search makes that first call
    slow (it happens in warm-up, before a CUDA graph is captured); applied around each call and restored.
``cuda_graph`` (CUDA only)
    For each batch size, on its first use: run 3 warm-up iterations on a side stream (cuDNN picks its
    algorithms, the allocator settles), capture one forward pass into a ``torch.cuda.CUDAGraph`` with a
    static input buffer, then for every call copy the input into that buffer and replay the graph. All
    graphs share one memory pool. The first call of each batch size is therefore slow; use
    :meth:`warmup` before timing. Not combinable with ``compile``.
``compile``
    Wrap the model in ``torch.compile(mode=compile_mode)`` (``"default"``, ``"reduce-overhead"`` -- which
    uses CUDA graphs itself -- or ``"max-autotune"``). The first calls compile (tens of seconds).
    Compiled kernels are cached by Inductor under ``$TORCHINDUCTOR_CACHE_DIR``; when that is unset it is
    set to ``<spec.cache_dir>/inductor`` so that the cache survives across runs next to the ONNX exports.
    Shapes are static (``dynamic=False``): each batch size compiles its own specialised kernels.

Precisions: fp32, and fp16 on CUDA (weights and activations in half; the decoded output is returned as
float32). fp16 on the CPU is reported unavailable.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, ClassVar

from detector.backends.base import Runner
from detector.errors import BackendError

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)

__all__ = ["TorchRunner"]

_GRAPH_WARMUP_ITERATIONS = 3
_COMPILE_MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")


class TorchRunner(Runner):
    """Runs the PyTorch model on the CPU or on CUDA (see the module docstring for the options)."""

    name: ClassVar[str] = "torch"
    precisions: ClassVar[tuple[str, ...]] = ("fp32", "fp16")
    devices: ClassVar[tuple[str, ...]] = ("cpu", "cuda")
    options: ClassVar[dict[str, Any]] = {
        "channels_last": False,
        "fuse_bn": False,
        "cuda_graph": False,
        "compile": False,
        "compile_mode": "default",
        "tf32": False,
        "cudnn_benchmark": False,
    }

    def __init__(self, spec: Any, *, device: str = "cpu", precision: str = "fp32", **options: Any) -> None:
        super().__init__(spec, device=device, precision=precision, **options)
        if self.options["cuda_graph"] and self.device_type != "cuda":
            raise BackendError(f"runner 'torch': option cuda_graph needs a CUDA device; got device {self.device!r}")
        if self.options["cuda_graph"] and self.options["compile"]:
            raise BackendError("runner 'torch': options cuda_graph and compile cannot be combined; for a compiled "
                               "model replayed as CUDA graphs use compile=True, compile_mode='reduce-overhead'")
        if self.options["compile_mode"] not in _COMPILE_MODES:
            raise BackendError(f"runner 'torch': unknown compile_mode {self.options['compile_mode']!r}; allowed: "
                               f"{', '.join(_COMPILE_MODES)}")
        self._model: Any = None
        self._graphs: dict[int, tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]] = {}
        self._pool: Any = None

    @classmethod
    def precisions_on(cls, device_type: str) -> tuple[str, ...]:
        """fp32 and fp16 on CUDA, fp32 alone on the CPU (half-precision convolutions there are slow or missing)."""
        offered = super().precisions_on(device_type)
        return tuple(p for p in offered if p != "fp16") if device_type == "cpu" else offered

    @classmethod
    def unavailable_reason(cls, device: str = "cpu", precision: str = "fp32") -> str | None:
        """Base checks, plus: fp16 needs CUDA (:meth:`precisions_on`)."""
        reason = super().unavailable_reason(device, precision)
        device_type = str(device).partition(":")[0]
        if reason is None and precision not in cls.precisions_on(device_type):
            return f"{precision} needs a CUDA device (the CPU runs {', '.join(cls.precisions_on(device_type))} only)"
        return reason

    @property
    def dtype(self) -> torch.dtype:
        """The dtype the model computes in: float32 or float16."""
        import torch

        return torch.float16 if self.precision == "fp16" else torch.float32

    def _activate(self) -> None:
        import torch

        model = self.spec.load_torch()
        if self.options["fuse_bn"]:
            model.fuse_batchnorm()
        model = model.to(device=self.torch_device, dtype=self.dtype).eval().requires_grad_(False)
        if self.options["channels_last"]:
            model = model.to(memory_format=torch.channels_last)
        if self.options["compile"]:
            cache = self.spec.cache_dir / "inductor"
            if os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(cache)) == str(cache):
                log.info("torch.compile kernels are cached in %s", cache)
            model = torch.compile(model, mode=self.options["compile_mode"], dynamic=False)
        self._model = model

    def _deactivate(self) -> None:
        self._graphs.clear()
        self._pool = None
        self._model = None

    def _infer(self, x: torch.Tensor) -> torch.Tensor:
        import torch

        x = self.as_input(x)  # one copy at most (dtype and layout together); none for a batch in the format
        on_cuda = self.device_type == "cuda"
        with _cudnn_flags(on_cuda, tf32=self.options["tf32"], benchmark=self.options["cudnn_benchmark"]):
            if self.options["cuda_graph"]:
                return self._replay(x)
            with torch.no_grad():
                return self._model(x).float()

    @property
    def input_format(self) -> tuple[torch.dtype, torch.memory_format]:
        """The model's dtype (float16 for fp16) and channels-last when that option is on."""
        import torch

        layout = torch.channels_last if self.options["channels_last"] else torch.contiguous_format
        return self.dtype, layout

    def _replay(self, x: torch.Tensor) -> torch.Tensor:
        """Copy ``x`` into the static input of the graph for its batch size (captured on first use), replay."""
        entry = self._graphs.get(x.shape[0])
        if entry is None:
            entry = self._capture(x)
            self._graphs[x.shape[0]] = entry
        graph, static_in, static_out = entry
        static_in.copy_(x)
        graph.replay()
        return static_out.float().clone()  # clone: static_out is overwritten by the next replay

    def _capture(self, x: torch.Tensor) -> tuple[torch.cuda.CUDAGraph, torch.Tensor, torch.Tensor]:
        import torch

        stream = torch.cuda.current_stream(self.torch_device)  # self.stream, set by the base class
        static_in = x.clone()
        side = torch.cuda.Stream(device=self.torch_device)
        side.wait_stream(stream)
        with torch.no_grad(), torch.cuda.stream(side):
            for _ in range(_GRAPH_WARMUP_ITERATIONS):
                self._model(static_in)
        stream.wait_stream(side)
        if self._pool is None:
            self._pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        with torch.no_grad(), torch.cuda.graph(graph, pool=self._pool, stream=side):
            static_out = self._model(static_in)
        stream.wait_stream(side)
        log.info("captured a CUDA graph for batch size %d", x.shape[0])
        return graph, static_in, static_out


def _cudnn_flags(on_cuda: bool, *, tf32: bool, benchmark: bool) -> contextlib.AbstractContextManager[None]:
    """For the block: allow or forbid TF32 in cuDNN convolutions, and switch cuDNN's algorithm search
    (``benchmark``) on or off; the process-wide settings are restored after. Nothing is touched off CUDA."""
    if not on_cuda:
        return contextlib.nullcontext()
    import torch

    cudnn = torch.backends.cudnn
    stack = contextlib.ExitStack()
    try:
        cudnn.allow_tf32  # noqa: B018 -- raises when the caller set per-operator flags (torch >= 2.9 API)
        stack.enter_context(_swapped(cudnn, "allow_tf32", tf32))
    except RuntimeError:  # keep to the per-operator API the caller chose
        stack.enter_context(_swapped(cudnn.conv, "fp32_precision", "tf32" if tf32 else "ieee"))
    stack.enter_context(_swapped(cudnn, "benchmark", benchmark))
    return stack


@contextlib.contextmanager
def _swapped(owner: Any, name: str, value: Any) -> Iterator[None]:
    """Set ``owner.name`` to ``value`` for the block, then put the old value back."""
    old = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, old)
