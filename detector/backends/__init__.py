"""Backend runners by name, and the built-in backends with their variants (presets).

    >>> from detector.backends import create_runner, available_backends, variant
    >>> available_backends("cpu")            # {'torch': None, 'onnxruntime': None, 'tensorrt': '...'}
    >>> with create_runner("onnxruntime", spec, device="cpu") as runner:
    ...     decoded = runner.infer(batch)
    >>> graph = variant("torch-graph")       # Variant(backend='torch', options={'fuse_bn': True, ...})
    >>> create_runner(graph.backend, spec, device="cuda", **graph.options)

Every runner follows :class:`detector.backends.base.Runner`. The runner modules (and torch, onnxruntime,
tensorrt) load only when asked for. Adding a backend or a variant is one :func:`register` call (see
:mod:`detector.backends.registry`): the ``detector`` command, the perf suite's cases and options and the
runner contract tests all read the registry.

The built-in variants:

``torch``
    The plain eager PyTorch runner (CPU and CUDA).
``torch-graph``
    The fastest hand-built torch path: batch norm folded into the convolutions, channels-last, CUDA graph
    replay per batch size (CUDA only).
``torch-compile``
    The same model through ``torch.compile(mode="reduce-overhead")``: Inductor's fused kernels replayed as CUDA
    graphs, compiled artefacts cached under ``<cache>/inductor`` (CUDA only).
``onnxruntime``
    The ONNX export in ONNX Runtime (CPU and, with onnxruntime-gpu, CUDA).
``tensorrt``
    A TensorRT engine of the ONNX export (CUDA only).
"""

from __future__ import annotations

from detector.backends.registry import (
    Backend,
    Variant,
    availability,
    available_backends,
    backend,
    backend_names,
    create_runner,
    display_name,
    register,
    runner_class,
    unregister,
    variant,
    variant_names,
    variants,
)

__all__ = ["Backend", "Variant", "availability", "available_backends", "backend", "backend_names", "create_runner",
           "display_name", "register", "runner_class", "unregister", "variant", "variant_names", "variants"]

register("torch", "detector.backends.torch_runner:TorchRunner", title="PyTorch", variants=[
    Variant("torch", summary="eager PyTorch"),
    Variant("torch-graph", {"fuse_bn": True, "channels_last": True, "cuda_graph": True}, ("cuda",),
            summary="batch norm folded, channels-last, CUDA graph replay"),
    Variant("torch-compile", {"fuse_bn": True, "channels_last": True, "compile": True,
                              "compile_mode": "reduce-overhead"}, ("cuda",),
            summary="torch.compile(mode='reduce-overhead'), Inductor kernels replayed as CUDA graphs"),
])
register("onnxruntime", "detector.backends.onnxruntime_runner:OnnxRuntimeRunner", title="ONNX Runtime",
         variants=[Variant("onnxruntime", summary="the ONNX export in ONNX Runtime")])
register("tensorrt", "detector.backends.tensorrt_runner:TensorRTRunner", title="TensorRT", devices=("cuda",),
         variants=[Variant("tensorrt", summary="a TensorRT engine of the ONNX export")], marks=("trt",))
