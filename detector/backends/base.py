"""The runner contract every backend implements: ``activate`` / ``infer`` / ``deactivate``.

A runner turns a batch of preprocessed images into the decoded output of the detector::

    with create_runner("torch", spec, device="cuda", precision="fp16") as runner:
        decoded = runner.infer(batch)          # float32 [B, N, 4 + C] on the host
        timing = runner.last_timing            # InferTiming, milliseconds

The base class owns everything that is the same for every backend -- name checks, input validation,
host<->device copies through pinned memory on the runner's CUDA stream, CUDA-event timing and logging --
so a backend implements only:

``_activate()``
    Load or build the model. ``self.stream`` (CUDA) already exists; ``self.spec``, ``self.device``,
    ``self.precision`` and ``self.options`` hold the configuration. Raise :class:`BackendError` /
    :class:`ModelFileError` on failure; the base then calls ``_deactivate`` to clean up and re-raises.
    May set ``self.max_batch_size`` (e.g. a TensorRT profile's max); ``infer`` then rejects larger batches.
``_deactivate()``
    Drop every reference to device memory (models, engines, buffers); must work on a half-activated
    runner. The base class then empties the CUDA caching allocator.
``_infer(x)``
    ``x`` is a ``torch.Tensor`` [B,3,H,W] on ``self.torch_device`` (on the host for a :attr:`Runner.host_io`
    runner): contiguous float32, or a caller's device batch already in :attr:`Runner.input_format`. Return
    the decoded tensor there (any float dtype; the base casts to float32). On CUDA enqueue the work on
    ``self.stream`` (it is the current stream during the call) and do not synchronize: the base records
    CUDA events around the call and synchronizes only when the result must reach the host. Do not modify
    ``x`` in place (it may be the caller's own tensor). The returned tensor must not be reused by a later
    call (clone static buffers).

Optionally override :meth:`unavailable_reason` (call ``super()``) and :meth:`warmup`.

The one seam in the contract is :attr:`Runner.host_io`. A runner whose engine owns the device side itself
(ONNX Runtime's CUDA provider allocates, copies and runs on its own stream) sets it: the base then hands it
host tensors on every device, creates no CUDA stream, and times it with the host clock (``compute_ms`` then
includes its copies). Putting such a runner on the base's stream would need the engine to take external device
buffers and a stream (ONNX Runtime: IO binding with ``user_compute_stream``, in onnxruntime-gpu only).

Callers add work to every call through :meth:`Runner.add_infer_hook` (the perf suite's deliberate slowdown),
never by replacing ``_infer``.

Behaviour worth knowing:

- ``infer`` on a runner that is not active raises :class:`BackendError` instead of activating lazily, so
  that a model build or engine load never hides inside a timed call.
- Nothing heavy runs in ``__init__`` (names and options are checked only); availability (``no CUDA
  device``, package missing) is checked in :meth:`activate`, which raises :class:`BackendUnavailable`.
- Runners are not thread-safe; use one runner per thread.
"""

from __future__ import annotations

import abc
import dataclasses
import logging
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from detector.devices import DEVICES, PRECISIONS, device_index, parse_device
from detector.errors import BackendError, BackendUnavailable
from detector.progress import spinner
from detector.timing import annotate

if TYPE_CHECKING:
    import numpy as np
    import torch

    from detector.spec import ModelSpec

log = logging.getLogger(__name__)

__all__ = ["DEVICES", "PRECISIONS", "InferTiming", "Runner"]



@dataclasses.dataclass
class InferTiming:
    """Milliseconds spent by the last :meth:`Runner.infer` call; ``None`` where a stage was not measured.

    Attributes:
        h2d_ms: host-to-device copy of the input (CUDA events); ``None`` on the CPU, when the input was
            already on the device, or for runners that do their own copies (:attr:`Runner.host_io`).
        compute_ms: the model: CUDA events around ``_infer`` (and the cast to float32) on the GPU; host
            wall time on the CPU or for ``host_io`` runners (then including their own copies).
        d2h_ms: device-to-host copy of the output (CUDA events); ``None`` on the CPU, for
            ``host_io`` runners, and with ``to_host=False``.
        enqueue_ms: host wall time spent inside ``_infer`` (on the GPU: launch overhead only).
        total_ms: host wall time of the whole ``infer()`` call, from entry to return. With
            ``to_host=False`` on CUDA the call returns before the GPU finishes, so this is then
            smaller than the GPU stages.
    """

    h2d_ms: float | None
    compute_ms: float | None
    d2h_ms: float | None
    enqueue_ms: float | None
    total_ms: float


class Runner(abc.ABC):
    """Base of every backend runner; see the module docstring for what a subclass implements.

    Args:
        spec: the model to run.
        device: ``"cpu"``, ``"cuda"`` or ``"cuda:N"``; must be in the class's ``devices``.
        precision: one of the class's ``precisions`` (names from :data:`PRECISIONS`).
        **options: backend options; each name must be a key of the class's ``options`` (the defaults).

    Raises:
        BackendError: unknown device, precision or option name, listing the allowed values.
    """

    #: Registry name, e.g. "torch".
    name: ClassVar[str] = "base"
    #: Precisions this runner can run, a subset of :data:`PRECISIONS`.
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    #: Device types this runner can run on, a subset of :data:`DEVICES`.
    devices: ClassVar[tuple[str, ...]] = ("cpu",)
    #: True for a runner that moves data between host and device itself (ONNX Runtime): ``_infer`` then takes
    #: and returns host tensors on every device and is timed on the host; False: on ``self.torch_device``.
    host_io: ClassVar[bool] = False
    #: Option names and their defaults; ``self.options`` holds the merged values.
    options: ClassVar[Mapping[str, Any]] = {}

    def __init__(self, spec: ModelSpec, *, device: str = "cpu", precision: str = "fp32", **options: Any) -> None:
        self.spec = spec
        self.device_type, self.device_index = _parse_device(self.name, device, self.devices)
        self.device = device if self.device_index is not None else self.device_type
        _check_precision(self.name, precision, self.precisions)
        self.precision = precision
        unknown = sorted(set(options) - set(self.options))
        if unknown:
            allowed = ", ".join(sorted(self.options)) or "none"
            raise BackendError(f"runner '{self.name}': unknown option {', '.join(map(repr, unknown))}; "
                               f"allowed: {allowed}")
        self.options: dict[str, Any] = {**self.options, **options}
        #: Largest batch ``infer`` accepts (e.g. a TensorRT profile's max); ``None`` means no limit.
        self.max_batch_size: int | None = None
        #: The CUDA stream this runner enqueues on; ``None`` on the CPU and for ``host_io`` runners.
        self.stream: torch.cuda.Stream | None = None
        self.torch_device: torch.device | None = None
        self._active = False
        self._timing: InferTiming | None = None
        self._pending: tuple[Any, ...] | None = None  # (events..., enqueue_ms, total_ms) awaiting the GPU
        self._pinned: dict[tuple[int, ...], torch.Tensor] = {}
        self._h2d_done: Any = None  # CUDA event: the pinned staging buffer may be overwritten after it
        self._hooks: list[Callable[[], None]] = []

    # -- availability ---------------------------------------------------------------------------------
    @classmethod
    def precisions_on(cls, device_type: str) -> tuple[str, ...]:
        """The precisions this runner offers on ``device_type`` (``"cpu"`` or ``"cuda"``) by its own rules, without
        probing the machine (nothing is imported): ``precisions`` on a device type in ``devices``, else none.
        A subclass that offers fewer on one device type (fp16 on CUDA only) overrides it."""
        return cls.precisions if device_type in cls.devices else ()

    @classmethod
    def unavailable_reason(cls, device: str = "cpu", precision: str = "fp32") -> str | None:
        """Why this runner cannot run here with ``device`` and ``precision`` (one line), or ``None``.

        Unknown names raise :class:`BackendError`; a known combination this machine lacks returns a
        reason such as ``"no CUDA device"``. Subclasses extend this (call ``super()`` first or last).
        """
        device_type, index = _parse_device(cls.name, device, cls.devices)
        _check_precision(cls.name, precision, cls.precisions)
        if device_type == "cuda":
            import torch

            if not torch.cuda.is_available():
                return "no CUDA device"
            if index is not None and index >= torch.cuda.device_count():
                return f"no CUDA device {index} (found {torch.cuda.device_count()})"
        return None

    # -- lifecycle ------------------------------------------------------------------------------------
    @property
    def is_active(self) -> bool:
        """True between a successful :meth:`activate` and the next :meth:`deactivate`."""
        return self._active

    def activate(self) -> None:
        """Load or build the model (idempotent).

        Raises:
            BackendUnavailable: this machine cannot run the runner (reason from :meth:`unavailable_reason`).
            BackendError, ModelFileError: loading or building failed.
        """
        if self._active:
            return
        reason = self.unavailable_reason(self.device, self.precision)
        if reason is not None:
            raise BackendUnavailable(f"runner '{self.name}' ({self.device}, {self.precision}) is unavailable: "
                                     f"{reason}")
        import torch

        start = time.perf_counter()
        if self.device_type == "cuda":
            self.torch_device = torch.device("cuda", device_index(self.device))
            if not self.host_io:
                self.stream = torch.cuda.Stream(device=self.torch_device)
        else:
            self.torch_device = torch.device("cpu")
        try:
            if self.stream is not None:
                with torch.cuda.device(self.torch_device), torch.cuda.stream(self.stream):
                    self._activate()
                self.stream.synchronize()
            else:
                self._activate()
        except BaseException:
            self._release()
            raise
        self._active = True
        log.info("activated runner %s (%s, %s, %s) in %.0f ms", self.name, self.device, self.precision,
                 _describe(self.options), (time.perf_counter() - start) * 1e3)

    def deactivate(self) -> None:
        """Free the model and every device buffer, then empty the CUDA caching allocator (idempotent)."""
        if not self._active:
            return
        self._release()
        log.info("deactivated runner %s (%s)", self.name, self.device)

    def __enter__(self) -> Runner:
        self.activate()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.deactivate()

    def __repr__(self) -> str:
        state = "active" if self._active else "inactive"
        return (f"{type(self).__name__}(cfg={str(self.spec.cfg)!r}, device={self.device!r}, "
                f"precision={self.precision!r}, {_describe(self.options)}, {state})")

    # -- inference ------------------------------------------------------------------------------------
    @property
    def last_timing(self) -> InferTiming | None:
        """Timing of the last :meth:`infer` call (``None`` before the first).

        After ``infer(..., to_host=False)`` on CUDA the GPU may still be running: reading this property
        then waits for the last call's work to finish.
        """
        if self._pending is not None:
            self._timing = _resolve(*self._pending)
            self._pending = None
        return self._timing

    def infer(self, batch: np.ndarray | torch.Tensor, *, to_host: bool = True) -> torch.Tensor:
        """Run the model on ``batch`` and return the decoded output.

        Args:
            batch: float [B, 3, H, W] RGB in [0, 1], (H, W) = ``spec.input_size``; a numpy array or a torch
                tensor on the host or on this runner's device (any float dtype). A device tensor in
                :attr:`input_format` is used as it is; any other is converted (host batches via float32).
            to_host: return a host tensor (waits for the GPU); with False a CUDA runner returns a device
                tensor that is ready to use on the caller's current stream, without waiting.

        Returns:
            float32 tensor [B, N, 4 + C]: x1, y1, x2, y2 in network-input pixels, then class scores.
            A new tensor on each call (never a view of runner buffers).

        Raises:
            BackendError: the runner is not active, or the batch has the wrong shape, dtype or type.
        """
        if not self._active:
            raise BackendError(f"runner '{self.name}' is not active: call activate() first or use it as a "
                               "context manager ('with runner: ...')")
        with annotate(f"{self.name}.infer"):  # one NVTX range / profiler label per call when profiling
            return self._infer_any(batch, to_host)

    def _infer_any(self, batch: Any, to_host: bool) -> torch.Tensor:
        import torch

        start = time.perf_counter()
        x = self._validate(batch)
        self._pending = None
        if self.stream is not None:
            return self._infer_cuda(x, to_host, start)
        t0 = time.perf_counter()
        out = self._call_model(x.to(device="cpu", dtype=torch.float32).contiguous())
        compute_ms = (time.perf_counter() - t0) * 1e3
        out = out.to(device="cpu", dtype=torch.float32)
        self._timing = InferTiming(None, compute_ms, None, compute_ms, (time.perf_counter() - start) * 1e3)
        return out

    @property
    def input_format(self) -> tuple[torch.dtype, torch.memory_format]:
        """(dtype, memory format) of the batch the model consumes on the device: float32, contiguous NCHW here;
        a runner that computes otherwise (fp16, channels-last) says so. A device batch already in this format
        is used as given, any other costs one conversion copy per call (see :meth:`as_input`)."""
        import torch

        return torch.float32, torch.contiguous_format

    def as_input(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ([B, 3, H, W], RGB in [0, 1]) in :attr:`input_format`: ``x`` itself when it already is, else one
        converting copy. Convert a device batch once with this (as a GPU preprocess that writes the model's
        format would) to keep the conversion out of every :meth:`infer` call."""
        dtype, memory_format = self.input_format
        return x.to(dtype=dtype, memory_format=memory_format)

    def add_infer_hook(self, hook: Callable[[], None]) -> Callable[[], None]:
        """Call ``hook()`` right after the model in every later :meth:`infer`; returns a function that removes it.

        The hook runs inside the measured compute time: on CUDA with the runner's stream current, so the GPU
        work it enqueues there counts in ``compute_ms`` as a slower model would (and it must not synchronize);
        on the host its wall time counts. For instrumentation and deliberate slowdowns
        (:mod:`perf.measure.slowdown`); hooks run in the order added and survive deactivation.
        """
        if not callable(hook):
            raise BackendError(f"runner '{self.name}': infer hook {hook!r} is not callable")
        self._hooks.append(hook)

        def remove() -> None:
            if hook in self._hooks:
                self._hooks.remove(hook)

        return remove

    def warmup(self, batch_size: int = 1, iterations: int = 3) -> None:
        """Run ``iterations`` inferences on a zero batch of ``batch_size`` (CUDA graphs, autotuning, caches)."""
        import torch

        height, width = self.spec.input_size
        batch = torch.zeros(batch_size, 3, height, width)
        with spinner(f"warming up {self.name}"):
            for _ in range(iterations):
                self.infer(batch)

    # -- subclass hooks -------------------------------------------------------------------------------
    @abc.abstractmethod
    def _activate(self) -> None:
        """Load or build the model on ``self.torch_device`` (see the module docstring)."""

    @abc.abstractmethod
    def _deactivate(self) -> None:
        """Drop every reference to the model and device buffers; safe on a half-activated runner."""

    @abc.abstractmethod
    def _infer(self, x: torch.Tensor) -> torch.Tensor:
        """decoded = model(x), torch tensors on ``self.torch_device`` (on the host for ``host_io``)."""

    # -- internals ------------------------------------------------------------------------------------
    def _validate(self, batch: Any) -> torch.Tensor:
        import numpy as np
        import torch

        if isinstance(batch, np.ndarray):
            if not np.issubdtype(batch.dtype, np.floating):
                raise BackendError(f"runner '{self.name}': input batch has dtype {batch.dtype}; expected float32 "
                                   "RGB in [0, 1] (see detector.preprocess)")
            x = torch.from_numpy(np.ascontiguousarray(batch))
        elif isinstance(batch, torch.Tensor):
            if not batch.is_floating_point():
                raise BackendError(f"runner '{self.name}': input batch has dtype {batch.dtype}; expected float32 "
                                   "RGB in [0, 1] (see detector.preprocess)")
            x = batch.detach()
        else:
            raise BackendError(f"runner '{self.name}': input batch is a {type(batch).__name__}; expected a numpy "
                               "array or torch tensor [B, 3, H, W]")
        height, width = self.spec.input_size
        shape = tuple(x.shape)
        if len(shape) != 4 or shape[0] < 1 or shape[1:] != (3, height, width):
            raise BackendError(f"runner '{self.name}': input batch has shape {list(shape)}; expected "
                               f"[B, 3, {height}, {width}] with B >= 1")
        if self.max_batch_size is not None and shape[0] > self.max_batch_size:
            raise BackendError(f"runner '{self.name}': batch size {shape[0]} exceeds this runner's maximum "
                               f"{self.max_batch_size}")
        return x

    def _infer_cuda(self, x: torch.Tensor, to_host: bool, start: float) -> torch.Tensor:
        import torch

        stream = self.stream
        caller = torch.cuda.current_stream(self.torch_device)  # before the stream context switches it
        events = [torch.cuda.Event(enable_timing=True) for _ in range(4)]
        with torch.cuda.device(self.torch_device), torch.cuda.stream(stream):
            events[0].record(stream)
            copied = x.device != self.torch_device
            if copied:
                x_dev = self._h2d(x, stream)
            else:
                # The caller produced x on its own stream: order our work after it, keep its memory alive.
                stream.wait_stream(caller)
                x.record_stream(stream)
                x_dev = self.as_input(x)
            events[1].record(stream)
            t0 = time.perf_counter()
            out = self._call_model(x_dev)
            enqueue_ms = (time.perf_counter() - t0) * 1e3
            out = out.float()
            events[2].record(stream)
            if to_host:
                host = torch.empty(out.shape, dtype=torch.float32, pin_memory=True)
                host.copy_(out, non_blocking=True)
            events[3].record(stream)
        if to_host:
            events[3].synchronize()
            total_ms = (time.perf_counter() - start) * 1e3
            self._timing = _resolve(events, copied, True, enqueue_ms, total_ms)
            return host
        caller.wait_stream(stream)
        out.record_stream(caller)
        total_ms = (time.perf_counter() - start) * 1e3
        self._pending = (events, copied, False, enqueue_ms, total_ms)
        self._timing = None
        return out

    def _call_model(self, x: torch.Tensor) -> torch.Tensor:
        """``_infer(x)``, then every infer hook (on CUDA with the runner's stream current)."""
        import torch

        out = self._infer(x)
        if not isinstance(out, torch.Tensor):
            raise BackendError(f"runner '{self.name}': _infer returned {type(out).__name__}, not a torch tensor")
        for hook in self._hooks:
            hook()
        return out

    def _h2d(self, x: torch.Tensor, stream: torch.cuda.Stream) -> torch.Tensor:
        """Copy a host tensor to the device through a reusable pinned staging buffer, on ``stream``."""
        import torch

        key = tuple(x.shape)
        pinned = self._pinned.get(key)
        if pinned is None:
            pinned = torch.empty(key, dtype=torch.float32, pin_memory=True)
            self._pinned[key] = pinned
        elif self._h2d_done is not None:
            self._h2d_done.synchronize()  # the previous copy out of the staging buffer must have finished
        pinned.copy_(x)
        x_dev = pinned.to(self.torch_device, non_blocking=True)
        done = torch.cuda.Event()
        done.record(stream)
        self._h2d_done = done
        return x_dev

    def _release(self) -> None:
        try:
            self._deactivate()
        finally:
            self._active = False
            self._pinned.clear()
            self._h2d_done = None
            if self._pending is not None:
                self._timing = _resolve(*self._pending)
                self._pending = None
            had_cuda = self.stream is not None or self.device_type == "cuda"
            if self.stream is not None:
                self.stream.synchronize()
            self.stream = None
            if had_cuda:
                import torch

                if torch.cuda.is_available():
                    torch.cuda.empty_cache()


def _resolve(events: list[Any], copied: bool, to_host: bool, enqueue_ms: float, total_ms: float) -> InferTiming:
    """Read CUDA-event timings (waits for the last event)."""
    events[-1].synchronize()
    return InferTiming(
        h2d_ms=events[0].elapsed_time(events[1]) if copied else None,
        compute_ms=events[1].elapsed_time(events[2]),
        d2h_ms=events[2].elapsed_time(events[3]) if to_host else None,
        enqueue_ms=enqueue_ms,
        total_ms=total_ms,
    )


def _parse_device(runner: str, device: str, allowed: tuple[str, ...]) -> tuple[str, int | None]:
    """``device`` parsed by :func:`detector.devices.parse_device` and checked against the runner's ``allowed``."""
    text = str(device)
    try:
        kind, index = parse_device(text, allow_auto=False)
    except ValueError:
        kind, index = "", None
    if kind not in allowed:
        raise BackendError(f"runner '{runner}': unknown device {text!r}; allowed: "
                           f"{', '.join(allowed)}{' (or cuda:N)' if 'cuda' in allowed else ''}")
    return kind, index


def _check_precision(runner: str, precision: str, allowed: tuple[str, ...]) -> None:
    if precision not in allowed:
        problem = "unsupported" if precision in PRECISIONS else "unknown"
        raise BackendError(f"runner '{runner}': {problem} precision {precision!r}; allowed: {', '.join(allowed)}")


def _describe(options: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in sorted(options.items())) or "no options"
