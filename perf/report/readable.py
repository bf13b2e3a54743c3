"""Numbers, times and names as a person reads them: no scientific notation, a unit that fits the value, benchmark
ids in the order their numbers say (``b1, b8, b32``, not ``b1, b32, b8``).

* `duration` (seconds -> ``"512 µs"``, ``"12.3 ms"``, ``"12.3 s"``), `number` (``"0.00123"``, ``"38.3"``,
  ``"12,346"``), `change` (a fraction -> ``"+4.4%"``), `ratio` (``"0.45x"``): text for tables;
* `time_unit` (one unit for a set of seconds) and `tick_text` (axis ticks without ``10^3``): figures;
* `natural_key`: the sort key of names with numbers in them.

Every function takes None (an empty cell) and NaN (``"n/a"``: not measured).
"""

from __future__ import annotations

import math
import re
from typing import Any

#: Time units a value is shown in, largest first: (name, seconds per unit).
TIME_UNITS = (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6), ("ns", 1e-9))
_DIGITS = re.compile(r"(\d+)")


def _missing(value: Any) -> str | None:
    """"" for None, "n/a" for NaN, the text of anything that is not a number; None for a number to format."""
    if value is None:
        return ""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return str(value)
    return "n/a" if math.isnan(value) else "inf" if math.isinf(value) else None


def _round(value: float, digits: int) -> float:
    """``value`` rounded to ``digits`` significant digits (999.96 -> 1000.0 at 3)."""
    return float(f"{value:.{digits - 1}e}")


def number(value: Any, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits, positional (never ``1.2e+04``): ``0.00123``, ``38.3``,
    ``512``; from 1,000 on a whole number with thousands separators (``12,346``). Integers as they are."""
    missing = _missing(value)
    if missing is not None:
        return missing
    if isinstance(value, int):
        return f"{value:,}"
    rounded = _round(value, digits)
    if rounded == 0 or abs(rounded) >= 1000:
        return f"{round(value):,}"
    decimals = max(0, digits - 1 - math.floor(math.log10(abs(rounded))))
    return f"{rounded:.{decimals}f}"


def time_unit(seconds: float) -> tuple[str, float]:
    """The unit a time of ``seconds`` reads best in, and its size in seconds: ``("ms", 1e-3)`` for 0.0123.
    The largest unit in which the value is at least 1 (seconds for anything from 1 s up)."""
    size = 0.0 if math.isnan(seconds) else abs(seconds)
    return next(((name, scale) for name, scale in TIME_UNITS if size >= scale), TIME_UNITS[-1])


def duration(seconds: Any, digits: int = 3) -> str:
    """A time given in seconds, in the unit that fits it: ``"512 µs"``, ``"12.3 ms"``, ``"1.66 s"``, ``"1,234 s"``
    (999.96 ms is ``"1.00 s"``)."""
    missing = _missing(seconds)
    if missing is not None:
        return missing
    if seconds == 0:
        return "0 s"
    rounded = _round(seconds, digits)
    name, scale = time_unit(rounded)
    return f"{number(seconds / scale, digits)} {name}"


def change(fraction: Any) -> str:
    """A relative change: ``"+4.4%"``, ``"-97.6%"``, ``"+320%"`` (no decimals from 100% on); ``""`` for None."""
    missing = _missing(fraction)
    if missing is not None:
        return missing
    if abs(fraction) < 0.0005:  # rounds to no change: "0.0%", not "-0.0%"
        return "0.0%"
    return f"{fraction:+.0%}" if abs(fraction) >= 1 else f"{fraction:+.1%}"


def ratio(value: Any, digits: int = 3) -> str:
    """A ratio of two speeds or times: ``"0.45x"``."""
    missing = _missing(value)
    return missing if missing is not None else f"{number(value, digits)}x"


def tick_text(value: float, _position: Any = None) -> str:
    """An axis tick: the shortest positional text of ``value`` (``"0.5"``, ``"20"``, ``"1,000"``); a
    ``matplotlib.ticker.FuncFormatter`` function."""
    if value == 0:
        return "0"
    text = number(value, 3)
    return text.rstrip("0").rstrip(".") if "." in text else text


def natural_key(text: str) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders the numbers inside ``text`` by value: ``[torch-fp32-b8]`` before ``[torch-fp32-b32]``.
    Digit runs compare as numbers, the rest case-insensitively."""
    return tuple((0, int(part)) if part.isdigit() else (1, part.lower()) for part in _DIGITS.split(text) if part)
