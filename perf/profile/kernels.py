""""Why slower" (docs/method.md, section 11): ``--perf-kernels=CALLS`` (default `DEFAULT_CALLS`; 0: off) keeps
the `TOP` kernels of CALLS more calls under ``torch.profiler`` in ``extra_info["kernels"]``: ``{"source":
"torch.profiler", "device": "cuda" | "cpu", "calls": CALLS, "rows": [{"name", "us_per_call",
"count_per_call"}]}``; `kernel_changes` sets a slower candidate's table against the baseline's.
"""

from __future__ import annotations

import itertools
import re
import warnings
from collections.abc import Callable, Mapping
from typing import Any

DEFAULT_CALLS, TOP = 20, 15
SHOWN = 5  # kernels listed under a slower benchmark


def kernel_table(call: Callable[[], Any], calls: int, *, device: str,
                 synchronize: Callable[[], None] | None = None) -> dict[str, Any]:  # fmt: skip
    """The table of ``calls`` calls of ``call`` under torch.profiler (module docstring), ranked by CUDA
    kernel time (``device`` "cuda") or operators' CPU self time; ``synchronize`` waits for the device."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = device.startswith("cuda")
    with warnings.catch_warnings():  # "Profiler clears events at the end of each cycle": one cycle here
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*", category=UserWarning)
        with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if on_gpu else [])]) as prof:
            for _ in range(calls):
                call()
            if synchronize is not None:
                synchronize()
    rows = []
    for event in prof.key_averages():
        if on_gpu:  # kernels only: the averages whose own time is on the device
            own = getattr(event, "self_device_time_total", None) or getattr(event, "self_cuda_time_total", 0)
            if str(getattr(event, "device_type", "")).endswith("CUDA") and own > 0:
                rows.append((event.key, own, event.count))
        elif event.self_cpu_time_total > 0:
            rows.append((event.key, event.self_cpu_time_total, event.count))
    rows.sort(key=lambda row: -row[1])
    return {"source": "torch.profiler", "device": "cuda" if on_gpu else "cpu", "calls": calls,
            "rows": [{"name": name, "us_per_call": total / calls, "count_per_call": count / calls}
                     for name, total, count in rows[:TOP]]}  # fmt: skip


def kernel_changes(baseline: Mapping[str, Any] | None, current: Mapping[str, Any] | None,
                   shown: int = SHOWN) -> list[dict[str, Any]]:  # fmt: skip
    """The ``shown`` kernels whose time per call moved most between two tables, largest first: ``{"name",
    "baseline_us", "current_us", "delta_us"}`` (None on a side without it); empty without both or across devices."""
    if not baseline or not current or baseline.get("device") != current.get("device"):
        return []
    before, after = ({r["name"]: float(r["us_per_call"]) for r in t.get("rows") or ()} for t in (baseline, current))
    changes = [{"name": name, "baseline_us": before.get(name), "current_us": after.get(name),
                "delta_us": (after.get(name) or 0.0) - (before.get(name) or 0.0)}
               for name in before.keys() | after.keys()]  # fmt: skip
    return sorted(changes, key=lambda c: -abs(c["delta_us"]))[:shown]


#: What a kernel's name holds that does not tell kernels apart: namespaces, lambdas, inner arguments.
_NOISE = re.compile(r"\(anonymous namespace\)::|\b(?:at::native::|at::|c10::|std::|cuda::|binary_internal::)"
                    r"|::\{lambda[^}]*\}|\{lambda[^}]*\}|::operator\(\)\(\) const|\([^()]*\)(?=::|,|>)")


def short_name(name: str, width: int = 90) -> str:
    """A CUDA kernel's name as a person tells kernels apart: without ``void``, the common namespaces and the
    argument list, cut to ``width`` characters (``vectorized_elementwise_kernel<4, where_kernel_impl...``)."""
    text, before = name.removeprefix("void ").strip(), ""
    while text != before:  # nested noise goes in rounds
        text, before = _NOISE.sub("", text), text
    # the argument list: from the first "(" outside the template arguments
    depths = itertools.accumulate({"<": 1, ">": -1}.get(char, 0) for char in text)
    cut = next((i for i, (c, d) in enumerate(zip(text, depths)) if c == "(" and d == 0 and i > 0), len(text))
    text = " ".join(text[:cut].split())
    return text if len(text) <= width else text[: width - 3] + "..."


def total_change_us(baseline: Mapping[str, Any] | None, current: Mapping[str, Any] | None) -> float | None:
    """How much the kernels of the two tables moved in all (us per call), or None when they cannot be
    compared: whether they explain the benchmark's own change (docs/method.md, section 11)."""
    changes = kernel_changes(baseline, current, shown=2 * TOP)
    return sum(c["delta_us"] for c in changes) if changes else None


def describe_changes(changes: list[dict[str, Any]]) -> list[str]:
    """One line per kernel: ``+41.2 us/call  sgemm_128x64 (12.0 -> 53.2 us)`` (or ``new`` / ``gone``)."""
    return [f"{c['delta_us']:+.1f} us/call  {short_name(c['name'])} ("
            f"{'new' if c['baseline_us'] is None else format(c['baseline_us'], '.1f')} -> "
            f"{'gone' if c['current_us'] is None else format(c['current_us'], '.1f')} us)" for c in changes]
