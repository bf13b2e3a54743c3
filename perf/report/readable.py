"""Numbers, times and names as a person reads them: no scientific notation, a unit that fits, numbers in names
in numeric order. Every formatter takes None (an empty cell) and NaN (``"n/a"``: not measured)."""

from __future__ import annotations

import math
import re
from typing import Any

from perf.validate import is_number

#: Time units a value is shown in, largest first: (name, seconds per unit).
TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))


def _missing(value: Any) -> str | None:
    """"" for None, "n/a" for NaN, the text of anything that is not a number; None for a number to format."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return "n/a" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else None


def as_float(value: Any) -> float:
    """``value`` as a float when it is a number (a bool is not), else NaN: a cell not measured (null in a report)."""
    return float(value) if is_number(value) else math.nan


def finite_numbers(values: Any) -> list[float]:
    """The finite numbers of the list ``values`` (none when it is no list), as floats: what a figure can draw."""
    return [float(v) for v in values if is_number(v) and math.isfinite(v)] if isinstance(values, list) else []


def number(value: Any, digits: int = 3) -> str:
    """``value`` to ``digits`` significant digits, positional (``0.00123``, ``38.3``); from 1,000 whole (``12,346``)."""
    if (missing := _missing(value)) is not None:
        return missing
    if isinstance(value, int):
        return f"{value:,}"
    rounded = float(f"{value:.{digits - 1}e}")  # to `digits` significant digits: 999.96 is 1000.0 at 3
    if rounded == 0 or abs(rounded) >= 1000:
        return f"{round(value):,}"
    return f"{rounded:.{max(0, digits - 1 - math.floor(math.log10(abs(rounded))))}f}"


def time_unit(seconds: float) -> tuple[str, float]:
    """The largest unit in which ``seconds`` is at least 1, and its size: ``("ms", 1e-3)`` for 0.0123."""
    size = 0.0 if math.isnan(seconds) else abs(seconds)
    return next(((name, scale) for name, scale in TIME_UNITS if size >= scale), TIME_UNITS[-1])


def duration(seconds: Any, digits: int = 3) -> str:
    """Seconds in the unit that fits them: ``"512 µs"``, ``"12.3 ms"``, ``"1,234 s"`` (999.96 ms: ``"1.00 s"``)."""
    if (missing := _missing(seconds)) is not None:
        return missing
    name, scale = time_unit(float(f"{seconds:.{digits - 1}e}"))
    return f"{number(seconds / scale, digits)} {name}" if seconds else "0 s"


def change(fraction: Any) -> str:
    """A relative change: ``"+4.4%"``, ``"-97.6%"``, ``"+320%"`` (no decimals from 100% on)."""
    if (missing := _missing(fraction)) is not None:
        return missing
    if abs(fraction) < 0.0005:  # rounds to no change: "0.0%", not "-0.0%"
        return "0.0%"
    return f"{fraction:+.0%}" if abs(fraction) >= 1 else f"{fraction:+.1%}"


def ratio(value: Any) -> str:
    """A ratio of two speeds or times: ``"0.45x"``."""
    return missing if (missing := _missing(value)) is not None else f"{number(value)}x"


def tick_text(value: float, _position: Any = None) -> str:
    """An axis tick (a ``FuncFormatter`` function): the shortest positional text, ``"0.5"``, ``"20"``, ``"1,000"``."""
    text = number(value, 3) if value else "0"
    return text.rstrip("0").rstrip(".") if "." in text else text


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key: numbers in ``text`` by value (``[torch-fp32-b8]`` before ``[torch-fp32-b32]``), the rest any case."""
    return tuple((0, int(part)) if part.isdigit() else (1, part.lower()) for part in re.split(r"(\d+)", text) if part)
