"""argparse ``type=`` parsers shared by the command lines; a bad value reads
``Could not parse value: 'x' (expected ...).`` and argparse turns it into a usage error (exit 2). Also the
options ``detect`` and ``eval`` share: how they run the model (device, precision, batch, thresholds) and the
overrides of the cfg's preprocessing and NMS. A name the user chooses (a device, a precision, a resize or NMS
mode) is read in any case."""

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
    p.add_argument("--batch", type=positive_int, default=batch, help=f"frames per inference (default: {batch})")
    p.add_argument("--conf", type=fraction, default=conf, help=f"confidence threshold (default: {conf:g})")
    p.add_argument("--iou", type=fraction, default=0.45, help="NMS IoU threshold (default: 0.45)")
    add_processing_args(p)


def processing_overrides(args: argparse.Namespace) -> dict[str, bool | str | None]:
    """``letterbox`` and ``nms`` keyword arguments of the pipelines from :func:`add_processing_args`' options:
    None where the option says ``cfg`` (the pipelines then follow the model's cfg)."""
    letterbox = {"cfg": None, "letterbox": True, "plain": False}[args.resize]
    return {"letterbox": letterbox, "nms": None if args.nms == "cfg" else args.nms}
