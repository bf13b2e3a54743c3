"""argparse ``type=`` parsers shared by the command lines; a bad value reads
``Could not parse value: 'x' (expected ...).`` and argparse turns it into a usage error (exit 2)."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T", int, float)


def _parser(convert: Callable[[str], T], ok: Callable[[T], bool], expected: str) -> Callable[[str], T]:
    def parse(text: str) -> T:
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"Could not parse value: {text!r} (expected {expected}).")
        return value

    parse.__name__ = expected.replace(" ", "_")
    return parse


positive_int = _parser(int, lambda v: v >= 1, "a positive integer")
non_negative_int = _parser(int, lambda v: v >= 0, "an integer >= 0")
positive_float = _parser(float, lambda v: v > 0, "a number > 0")
fraction = _parser(float, lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]")
