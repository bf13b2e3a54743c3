"""The one family of argparse ``type=`` parsers -- of the ``detector`` command, the suite's ``--perf-*`` options
(perf/options.py) and the suite's commands: each is made by `value_parser` (or, where what is allowed is known only
when the value is read, raises `value_error`), so a bad value always reads ``Could not parse value: 'x'. Expected
....`` (`SENTENCE`: the suite's, after pytest-benchmark's) or ``Could not parse value: 'x' (expected ...).``
(`ASIDE`: the ``detector`` command's), and argparse turns it into a usage error (exit 2). Also the options
``detect`` and ``eval`` share: how they run the model (device, precision, batch, thresholds) and the overrides of
the cfg's preprocessing and NMS. A name the user chooses (a device, a precision, a resize or NMS mode) is read in
any case."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: How a rejected value is worded: ``expected`` says what is allowed, without a final period.
SENTENCE = "Could not parse value: {value!r}. Expected {expected}."
ASIDE = "Could not parse value: {value!r} (expected {expected})."


class OneLineParser(argparse.ArgumentParser):
    """A command's parser whose usage error is one line, ``<command>: error: <message>``, exit 2 (no usage block);
    a subcommand's error names the command (the suite's commands: perf-ab, perf-history)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.exit(2, f"{self.prog.split()[0]}: error: {message}\n")


def value_error(text: str, expected: str, wording: str = SENTENCE) -> argparse.ArgumentTypeError:
    """The error of a rejected ``text``, naming it and what is ``expected`` (``"a positive integer"``)."""
    return argparse.ArgumentTypeError(wording.format(value=text, expected=expected))


def value_parser(convert: Callable[[str], T | None], ok: Callable[[T], bool], expected: str,
                 wording: str = SENTENCE, *, unreadable: str | None = None) -> Callable[[str], T]:
    """An argparse ``type=``: ``convert(text)`` where it gives a value that passes ``ok``, else `value_error`
    saying what is ``expected``; where ``convert`` raises ValueError it says ``unreadable`` instead, when given (an
    ``argparse.ArgumentTypeError`` of ``convert``'s own passes through unchanged)."""

    def parse(text: str) -> T:
        try:
            value = convert(text)
        except ValueError:
            if unreadable is not None:
                raise value_error(text, unreadable, wording) from None
            value = None
        if value is None or not ok(value):
            raise value_error(text, expected, wording)
        return value

    return parse


def split_list(text: str, *, unique: bool = True) -> list[str]:
    """Comma-separated items, stripped, empty items dropped (``" a, b,,a"`` -> ``["a", "b"]``); ``unique``: the
    first occurrence of each kept, else every one (``["a", "b", "a"]``)."""
    items = [item.strip() for item in text.split(",") if item.strip()]
    return list(dict.fromkeys(items)) if unique else items


positive_int = value_parser(int, lambda v: v >= 1, "a positive integer", ASIDE)
non_negative_int = value_parser(int, lambda v: v >= 0, "an integer >= 0", ASIDE)
positive_float = value_parser(float, lambda v: v > 0, "a number > 0", ASIDE)
fraction = value_parser(float, lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]", ASIDE)
#: Frames per inference: an int32 axis (TensorRT's; numpy indexes no larger batch of 8192x8192 frames).
batch_size = value_parser(int, lambda v: 1 <= v <= 2**31 - 1, "an integer from 1 to 2147483647", ASIDE)


RESIZE_CHOICES = ("cfg", "letterbox", "plain")
NMS_CHOICES = ("cfg", "default", "greedynms", "diounms")


def add_processing_args(p: argparse.ArgumentParser) -> None:
    """``--resize`` (with ``--plain-resize``, its older spelling) and ``--nms``: overrides of what the cfg says."""
    p.add_argument("--resize", type=str.lower, choices=RESIZE_CHOICES, default="cfg",
                   help="how frames fit the network: the cfg's [net] letter_box (Darknet's default: plain), "
                   "letterbox, or plain (stretch) (default: cfg)")
    p.add_argument("--plain-resize", dest="resize", action="store_const", const="plain",
                   help="the same as --resize plain")
    p.add_argument("--nms", type=str.lower, choices=NMS_CHOICES, default="cfg",
                   help="NMS: the cfg's last [yolo] nms_kind; default (per-class IoU, Darknet's default), greedynms "
                   "(DIoU) or diounms (DIoU with the cfg's beta_nms) (default: cfg)")


def add_inference_args(p: argparse.ArgumentParser, *, precisions: str, batch: int, conf: float) -> None:
    """``--device``, ``--precision`` (``precisions``: what the command's help lists), ``--batch`` (frames per
    inference), ``--conf`` and ``--iou`` (NMS), then :func:`add_processing_args`: how a command runs the model."""
    p.add_argument("--device", type=str.lower, default="auto", help="auto, cpu, cuda or cuda:N, in any case (default: "
                   "auto)")
    p.add_argument("--precision", type=str.lower, default="fp32",
                   help=f"{precisions}, as the backend supports, in any case (default: fp32)")
    p.add_argument("--batch", type=batch_size, default=batch, help=f"frames per inference (default: {batch})")
    p.add_argument("--conf", type=fraction, default=conf, help=f"confidence threshold (default: {conf:g})")
    p.add_argument("--iou", type=fraction, default=0.45, help="NMS IoU threshold (default: 0.45)")
    add_processing_args(p)


def processing_overrides(args: argparse.Namespace) -> dict[str, bool | str | None]:
    """``letterbox`` and ``nms`` keyword arguments of the pipelines from :func:`add_processing_args`' options:
    None where the option says ``cfg`` (the pipelines then follow the model's cfg)."""
    letterbox = {"cfg": None, "letterbox": True, "plain": False}[args.resize]
    return {"letterbox": letterbox, "nms": None if args.nms == "cfg" else args.nms}
