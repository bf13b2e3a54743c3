"""What the suite measures: the (backend, variant, precision, batch) cases, made from the perf options.

Cases are parametrised at collection time from ``--perf-backends``, ``--perf-precisions`` and
``--perf-batch-sizes``, over every variant the backend registry holds for the selected backends and the
device (:func:`detector.backends.variants`; a variant registered there is measured, with nothing to add
here); every combination is collected so that one that cannot run here shows up as a skip with its reason
(``tensorrt not installed``, ``no CUDA device``) instead of silently vanishing.

The ``ci`` marker picks the key benchmarks of every family (`KEY_CASES`): ``pytest perf -m ci`` is the
selection a CI gate runs on every change (a few minutes on one H100); the full suite stays the default.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pytest

from detector.backends import backend as registered_backend
from detector.backends import variants

#: The key (variant, precision) pairs of each family per device type, which ``-m ci`` selects; inference also
#: only at batch 1 and the largest selected batch size (batch 1 only on a CPU, where a large batch takes seconds).
#: This only marks cases: a registered variant missing here is still measured by the full suite.
KEY_CASES: dict[str, dict[str, tuple[tuple[str, str], ...]]] = {
    "inference": {"cuda": (("torch", "fp32"), ("torch-graph", "fp16"), ("torch-compile", "fp16"),
                           ("onnxruntime", "fp32"), ("tensorrt", "fp16")),
                  "cpu": (("torch", "fp32"), ("onnxruntime", "fp32"))},
    "end-to-end": {"cuda": (("torch-graph", "fp16"), ("tensorrt", "fp16")), "cpu": (("torch", "fp32"),)},
    "pipelined": {"cuda": (("torch-graph", "fp16"), ("tensorrt", "fp16")), "cpu": (("torch", "fp32"),)},
    "multistream": {"cuda": (("torch-graph", "fp16"), ("tensorrt", "fp16")), "cpu": (("torch", "fp32"),)},
    "parity": {"cuda": (("torch-graph", "fp16"), ("torch-compile", "fp16"), ("tensorrt", "fp16")),
               "cpu": (("onnxruntime", "fp32"),)},
}  # fmt: skip


def is_key(family: str, variant: str, precision: str, batch: int | None, batch_sizes: Iterable[int] | None,
           device: str) -> bool:  # fmt: skip
    """Whether a case is one of the CI selection's key benchmarks (see `KEY_CASES`)."""
    device_type = device.partition(":")[0]
    if (variant, precision) not in KEY_CASES.get(family, {}).get(device_type, ()):
        return False
    if batch is None or not batch_sizes:
        return True
    sizes = tuple(batch_sizes)
    return batch == 1 or (device_type == "cuda" and batch == max(sizes))


@dataclass(frozen=True)
class Case:
    """One measured configuration; ``id`` is its pytest id and benchmark name suffix."""

    variant: str
    backend: str
    precision: str
    batch: int = 1
    options: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def id(self) -> str:
        return f"{self.variant}-{self.precision}-b{self.batch}"

    @property
    def label(self) -> str:
        """Human name for tables, e.g. ``torch-graph fp16``."""
        return f"{self.variant} {self.precision}"


def variants_for(backends: Iterable[str], device: str) -> list[str]:
    """Registered variant names whose backend was selected and which apply to ``device`` ("cpu", "cuda",
    "cuda:N"), in registration order (see :mod:`detector.backends.registry`)."""
    return [v.name for v in variants(backends, device)]


def _marks(backend: str, device: str) -> list[pytest.MarkDecorator]:
    """``gpu`` on a CUDA device, then the markers the backend registered (:attr:`detector.backends.Backend.marks`)."""
    marks = [pytest.mark.gpu] if device.startswith("cuda") else []
    return marks + [getattr(pytest.mark, name) for name in registered_backend(backend).marks]


def make_cases(
    backends: Iterable[str], precisions: Iterable[str], batch_sizes: Iterable[int] | None, device: str,
    *, nsys_first: bool = False, exclude: tuple[str, str] | None = None, family: str | None = None,
) -> list[Any]:
    """pytest params for every variant x precision (x batch size, when ``batch_sizes`` is given).

    ``nsys_first`` adds the ``nsys`` marker to the first case of each variant (one profiled benchmark per
    backend); ``exclude`` drops one (variant, precision) pair, e.g. the parity reference itself; ``family``
    ("inference" by default with batch sizes, else none) adds the ``ci`` marker to its key cases.
    """
    family = family or ("inference" if batch_sizes else None)
    params = []
    for registered in variants(backends, device):
        variant, backend, options = registered.name, registered.backend, registered.options
        first = True
        for precision in precisions:
            if exclude == (variant, precision):
                continue
            for batch in batch_sizes or (1,):
                case = Case(variant, backend, precision, batch, dict(options))
                marks = _marks(backend, device)
                if nsys_first and first:
                    marks.append(pytest.mark.nsys)
                if family and is_key(family, variant, precision, batch if batch_sizes else None, batch_sizes, device):
                    marks.append(pytest.mark.ci)
                first = False
                params.append(pytest.param(case, id=case.id if batch_sizes else case.label.replace(" ", "-"),
                                           marks=marks))
    return params
