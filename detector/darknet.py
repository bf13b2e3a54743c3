"""Darknet files: a strict ``.cfg`` parser and a ``.weights`` reader/writer (numpy only, no torch).

Layer indices count every section after ``[net]`` (``[yolo]`` included), as Darknet does, so
``NetConfig.sections[i]`` and ``NetConfig.layers[i]`` describe layer ``i``. Every problem is raised as a
:class:`~detector.errors.CfgError` / :class:`~detector.errors.WeightsError` whose one-line message names the
file and the line (cfg) or byte offset (weights).
"""

from __future__ import annotations

import logging
import math
import os
import re
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Union

import numpy as np

from detector.darknet_keys import (
    ACTIVATIONS,
    DARKNET_ACTIVATIONS,
    HONOURED,
    IGNORED,
    NMS_ALIASES,
    NMS_KINDS,
    SECTION_ALIASES,
    SECTION_KEYS,
    UNSUPPORTED,
    UNSUPPORTED_LAYERS,
)
from detector.errors import CfgError, DetectorError, WeightsError
from detector.fileio import atomic_write_bytes, file_kind

log = logging.getLogger(__name__)

# Every key Darknet's parser reads for these sections is allowed (detector/darknet_keys.py says which ones are
# honoured, ignored or not supported); anything else is refused so that a typo cannot silently change the network.
_KEYS: dict[str, dict[str, str]] = {kind: {k: key.type for k, key in keys.items()}
                                    for kind, keys in SECTION_KEYS.items()}
_MAX_VERSION = 1000  # a header field above this is not a Darknet version: wrong file

# Bounds checked while the cfg is parsed, before anything is allocated: a typo such as width=100000 or
# filters=10000000 must be one CfgError line, not a MemoryError traceback or the kernel's OOM killer.
MAX_CFG_BYTES = 16 << 20  # the largest published Darknet cfgs are tens of KiB
MAX_LINE_CHARS = 4096  # a setting's line (comments aside): every message quotes it, so it must fit one line
MAX_INPUT_SIDE = 8192  # [net] width / height, pixels
MAX_FILTERS = 65536  # [convolutional] filters (YOLO9000's head, the largest published, has 28269)
MAX_PARAMETERS = 1 << 28  # float32 values in all convs together (1 GiB of .weights; YOLOv4 has 64 M)
MAX_LAYER_VALUES = 1 << 28  # values one layer outputs per image (1 GiB of float32 at batch 1)


@dataclass(frozen=True)
class Section:
    """One ``[type]`` block of a cfg: raw string options, the 1-based line of its header and of each key."""

    type: str
    options: dict[str, str] = field(hash=False)
    line: int = 0
    option_lines: dict[str, int] = field(default_factory=dict, hash=False)

    def line_of(self, key: str) -> int:
        """1-based line of ``key`` (the section's own line when the key is absent)."""
        return self.option_lines.get(key, self.line)

    def get_int(self, key: str, default: int | None = None) -> int:
        """``key`` as an int (validated by :func:`parse_cfg`); KeyError if absent and no default."""
        return int(self.options[key]) if key in self.options or default is None else default

    def get_float(self, key: str, default: float | None = None) -> float:
        """``key`` as a float; KeyError if absent and no default."""
        return float(self.options[key]) if key in self.options or default is None else default

    def get_ints(self, key: str) -> list[int]:
        """``key`` as a comma-separated list of ints."""
        return [int(v) for v in self.get_floats(key)]

    def get_floats(self, key: str) -> list[float]:
        """``key`` as a comma-separated list of numbers."""
        return [float(v) for v in self.options[key].split(",") if v.strip()]


@dataclass(frozen=True)
class ConvSpec:
    """``[convolutional]``: ``filters`` outputs, ``size`` x ``size`` kernel, ``padding`` pixels each side."""

    in_channels: int
    filters: int
    size: int
    stride: int
    padding: int
    groups: int
    batch_normalize: bool
    activation: str

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        """Kernel shape (out, in/groups, k, k), OIHW as in the file and in PyTorch."""
        return (self.filters, self.in_channels // self.groups, self.size, self.size)

    @property
    def num_values(self) -> int:
        """float32 values this conv stores in a ``.weights`` file (exact: numpy's int64 product wraps round)."""
        return math.prod(self.weight_shape) + self.filters * (4 if self.batch_normalize else 1)


@dataclass(frozen=True)
class RouteSpec:
    """``[route]``: concatenate slice ``group_id`` of ``groups`` of each (absolute) layer, in order."""

    layers: tuple[int, ...]
    groups: int = 1
    group_id: int = 0


@dataclass(frozen=True)
class MaxPoolSpec:
    """``[maxpool]``: Darknet pads ``padding`` pixels in all (``padding // 2`` on the left/top)."""

    size: int
    stride: int
    padding: int


@dataclass(frozen=True)
class UpsampleSpec:
    """``[upsample]``: nearest-neighbour by an integer ``stride``."""

    stride: int


@dataclass(frozen=True)
class YoloSpec:
    """``[yolo]``: all anchors (w, h) in network-input pixels, the ``mask`` this head uses, ``scale_x_y``."""

    mask: tuple[int, ...]
    anchors: tuple[tuple[float, float], ...]
    classes: int
    scale_x_y: float = 1.0

    @property
    def mask_anchors(self) -> tuple[tuple[float, float], ...]:
        """The (w, h) anchors of this head, in mask order (pixels)."""
        return tuple(self.anchors[m] for m in self.mask)


LayerSpec = Union[ConvSpec, RouteSpec, MaxPoolSpec, UpsampleSpec, YoloSpec]


@dataclass(frozen=True)
class NmsConfig:
    """The non-maximum suppression Darknet runs on a cfg's detections: its last ``[yolo]``'s ``nms_kind`` and
    ``beta_nms`` (detector.c test_detector / validate_detector_map), always per class.

    Attributes:
        kind: ``"default"``: greedy NMS on IoU (box.c do_nms_sort), Darknet's default and this package's;
            ``"greedynms"``: greedy NMS on DIoU = IoU - (d / c) ** 0.6 (box.c diounms_sort with box_diou, whose
            exponent is fixed); ``"diounms"``: the same with exponent ``beta`` (box_diounms). ``d`` is the squared
            distance of the two centres and ``c`` the squared diagonal of their enclosing box.
        beta: ``beta_nms`` (Darknet's default 0.6), > 0; only ``"diounms"`` uses it.
    """

    kind: str = "default"
    beta: float = 0.6

    def __post_init__(self) -> None:
        if self.kind not in NMS_KINDS:
            raise DetectorError(f"unknown NMS kind {self.kind!r}; allowed: {', '.join(NMS_KINDS)}")
        if not self.beta > 0:
            raise DetectorError(f"NMS beta {self.beta!r} must be > 0")

    @property
    def diou_exponent(self) -> float | None:
        """Exponent of DIoU's centre-distance term (0.6 for greedynms, ``beta`` for diounms); None: plain IoU."""
        return None if self.kind == "default" else 0.6 if self.kind == "greedynms" else self.beta

    def __str__(self) -> str:
        return self.kind if self.kind != "diounms" else f"diounms (beta {self.beta:g})"


@dataclass(frozen=True)
class NetConfig:
    """A parsed, validated network. ``shapes[i]`` is layer i's output (C, H, W) at ``height`` x ``width``.

    ``letterbox`` is ``[net] letter_box`` (Darknet's default False: a plain resize to the input size) and ``nms``
    the NMS of the last ``[yolo]``: how Darknet itself pre- and post-processes for this cfg.
    """

    path: Path
    width: int
    height: int
    channels: int
    classes: int
    net: Section
    sections: tuple[Section, ...]
    layers: tuple[LayerSpec, ...]
    shapes: tuple[tuple[int, int, int], ...]
    letterbox: bool = False
    nms: NmsConfig = field(default_factory=NmsConfig)

    @property
    def input_size(self) -> tuple[int, int]:
        """(height, width) of the network input, pixels."""
        return (self.height, self.width)

    @property
    def convs(self) -> list[tuple[int, ConvSpec]]:
        """(layer index, spec) of every conv, in cfg (= weights file) order."""
        return [(i, s) for i, s in enumerate(self.layers) if isinstance(s, ConvSpec)]

    @property
    def num_convs(self) -> int:
        """Number of ``[convolutional]`` layers."""
        return len(self.convs)

    @property
    def yolo_layers(self) -> list[tuple[int, YoloSpec]]:
        """(layer index, spec) of every ``[yolo]`` head, in cfg order."""
        return [(i, s) for i, s in enumerate(self.layers) if isinstance(s, YoloSpec)]

    @property
    def num_weights(self) -> int:
        """float32 values in a matching ``.weights`` file (conv weights, biases, BN scales/means/variances)."""
        return sum(s.num_values for _, s in self.convs)

    @property
    def num_candidates(self) -> int:
        """Rows N of the decoded output at the cfg input size (sum of grid_h * grid_w * len(mask))."""
        return sum(self.shapes[i][1] * self.shapes[i][2] * len(s.mask) for i, s in self.yolo_layers)


def _fail(path: Path, line: int, problem: str) -> CfgError:
    return CfgError(f"{path}:{line}: {problem}")


def _read_sections(path: Path) -> tuple[Section, list[Section]]:
    try:
        st = path.stat()
        kind = file_kind(st)
        if kind is not None:
            raise CfgError(f"cannot read cfg '{path}': it is {kind}, not a regular file")
        if st.st_size > MAX_CFG_BYTES:
            raise CfgError(f"cannot read cfg '{path}': {st.st_size} bytes is too large for a Darknet cfg (at most "
                           f"{MAX_CFG_BYTES >> 20} MiB); is this the right file?")
        text = path.read_bytes().decode("utf-8")
    except FileNotFoundError as e:
        raise CfgError(f"cannot open cfg '{path}': no such file") from e
    except UnicodeDecodeError as e:
        raise CfgError(f"{path}: not a text cfg file (not UTF-8 at byte {e.start})") from e
    except OSError as e:
        raise CfgError(f"cannot read cfg '{path}': {e.strerror}") from e
    sections: list[tuple[str, int, dict[str, str], dict[str, int]]] = []
    for lineno, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line[0] in "#;":
            continue
        if len(line) > MAX_LINE_CHARS:
            raise _fail(path, lineno, f"a line of {len(line):,} characters; a cfg setting takes at most "
                        f"{MAX_LINE_CHARS:,} (is this a Darknet cfg?)")
        if line.startswith("["):
            if not line.endswith("]"):
                raise _fail(path, lineno, f"malformed section header {line!r}: expected '[name]'")
            kind = line[1:-1].strip()
            kind = SECTION_ALIASES.get(kind, kind)
            if kind in UNSUPPORTED_LAYERS:
                raise _fail(path, lineno, f"[{kind}] is a Darknet layer this package does not support "
                            f"({UNSUPPORTED_LAYERS[kind]}); supported: {_SUPPORTED_SECTIONS}")
            if kind not in _KEYS:
                raise _fail(path, lineno, f"unknown section [{kind}]; allowed: {', '.join(sorted(_KEYS))}")
            sections.append((kind, lineno, {}, {}))
            continue
        key, sep, raw = line.partition("=")
        key, value = key.strip(), raw.split("#")[0].split(";")[0].strip()
        if not sep or not key:
            raise _fail(path, lineno, f"expected 'key=value', got {line!r}")
        if not sections:
            raise _fail(path, lineno, f"'{key}' appears before the first section; start the file with [net]")
        kind, _, options, lines = sections[-1]
        if key not in _KEYS[kind]:
            raise _fail(path, lineno, _unknown_key(kind, key))
        if key in options and SECTION_KEYS[kind][key].use != IGNORED:
            raise _fail(path, lineno, f"[{kind}] repeats '{key}' (first set on line {lines[key]})")
        if not value:
            raise _fail(path, lineno, f"[{kind}] {key} has no value")
        _check_value(path, lineno, kind, key, value)
        _check_comment(path, lineno, kind, key, raw)
        if key in options:  # a repeated training key (batch=1 ... batch=64): Darknet's option_find reads the first
            log.debug("%s:%d: [%s] repeats '%s' (first set on line %d); ignored", path, lineno, kind, key, lines[key])
            continue
        options[key], lines[key] = value, lineno
    if not sections:
        raise CfgError(f"{path}:1: empty cfg: no sections (expected [net] then layers)")
    parsed = [Section(k, o, n, ln) for k, n, o, ln in sections]
    for s in parsed:
        for key, value in s.options.items():
            _check_supported(path, s.line_of(key), s.type, key, value, s.options)
    if parsed[0].type not in ("net", "network"):
        raise _fail(path, parsed[0].line, f"first section is [{parsed[0].type}]; a cfg must start with [net]")
    for s in parsed[1:]:
        if s.type in ("net", "network"):
            raise _fail(path, s.line, f"a second [{s.type}] section; only the first section may be [net]")
    if len(parsed) == 1:
        raise _fail(path, parsed[0].line, "[net] is followed by no layers")
    return parsed[0], parsed[1:]


_SUPPORTED_SECTIONS = ", ".join(f"[{k}]" for k in _KEYS if k != "network")


def _unknown_key(kind: str, key: str) -> str:
    """The message for a key Darknet does not read in ``[kind]``: a close match, and the keys that matter."""
    import difflib

    close = difflib.get_close_matches(key, _KEYS[kind], n=1)
    hint = f"; did you mean '{close[0]}'?" if close else ""
    honoured = sorted(k for k, v in SECTION_KEYS[kind].items() if v.use == HONOURED)
    return (f"unknown key '{key}' in [{kind}]; allowed: {', '.join(honoured)} and the other keys Darknet reads "
            f"there (docs/darknet.md){hint}")


def _check_supported(path: Path, line: int, kind: str, key: str, value: str, options: dict[str, str]) -> None:
    """CfgError for a Darknet key this package does not implement, unless set to its no-op default."""
    spec = SECTION_KEYS[kind][key]
    if spec.use != UNSUPPORTED:
        return
    if spec.noop is not None and float(value) == float(spec.noop):
        return
    if key == "dilation" and int(options.get("size", "1")) == 1:  # parse_convolutional: size 1 -> dilation 1
        return
    fix = f"; remove it or set {key}={spec.noop}" if spec.noop is not None else "; remove it"
    raise _fail(path, line, f"[{kind}] {key}={value} is a Darknet key this package does not support "
                f"({spec.note}){fix}")


# The numbers C's atoi / atof read (Python's int and float also take '1_6' and non-ASCII digits, which they do not).
_NUMBER = {"int": re.compile(r"[+-]?[0-9]+"),
           "float": re.compile(r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|inf(?:inity)?|nan)", re.I)}


def _check_value(path: Path, line: int, kind: str, key: str, value: str) -> None:
    typ = _KEYS[kind][key]
    parse = {"int": int, "ints": int, "float": float, "floats": float}.get(typ)
    if parse is None:
        return
    items = [v.strip() for v in value.split(",")] if typ.endswith("s") else [value]
    if key == "anchors" and items[-1] == "":  # parse_yolo reads at most num pairs: a trailing comma is harmless
        items.pop()
    if "" in items and SECTION_KEYS[kind][key].use != IGNORED:
        raise _fail(path, line, f"[{kind}] {key}={value!r}: an empty item, which AlexeyAB's Darknet reads as 0 "
                    "and hank-ai's skips; remove the extra comma")
    for item in filter(None, items):
        if not _NUMBER[typ.rstrip("s")].fullmatch(item):
            what = "an integer" if parse is int else "a number"
            raise _fail(path, line, f"[{kind}] {key}={value!r}: {item!r} is not {what}")
        number = parse(item)
        if not math.isfinite(number):  # NaN passes every `v <= 0` check; inf overflows int()
            raise _fail(path, line, f"[{kind}] {key}={value!r}: {item!r} is not a finite number")


def _check_comment(path: Path, line: int, kind: str, key: str, raw: str) -> None:
    """CfgError for a comment after a value that Darknet reads as part of the value.

    AlexeyAB's Darknet has no such comments (hank-ai's cuts a value at '#', the two disagree): read_cfg removes
    every blank from the line and passes what follows '=' on.
    atoi / atof stop at '#' or ';', so a number reads the same; but a name is read whole (get_activation falls back
    to relu for 'leaky#3x3', parse_yolo to default for 'greedynms#diou') and a list counts the comment's commas
    (parse_yolo_mask and the anchors loop stop counting at '#', parse_route does not).
    """
    body = raw.split("#")[0].split(";")[0]
    typ = _KEYS[kind][key]
    if len(body) == len(raw) or SECTION_KEYS[kind][key].use == IGNORED or typ in ("int", "float"):
        return
    counted = raw.split("#")[0] if key in ("mask", "anchors") else raw
    if typ == "str" or counted.count(",") != body.count(","):
        raise _fail(path, line, f"[{kind}] {key}={''.join(raw.split())}: AlexeyAB's Darknet reads a comment after a "
                    "value as part of the value (hank-ai's drops a '#' one); put the comment on a line of its own")


def _positive(path: Path, s: Section, key: str, default: int | None = None, minimum: int = 1,
              maximum: int | None = None) -> int:
    if default is None and key not in s.options:  # a required key ([net] width, height)
        raise _fail(path, s.line, f"[{s.type}] needs {key}=")
    value = s.get_int(key, default)
    if value < minimum:
        raise _fail(path, s.line_of(key), f"[{s.type}] {key}={value}: must be >= {minimum}")
    if maximum is not None and value > maximum:
        raise _fail(path, s.line_of(key), f"[{s.type}] {key}={value}: allowed {minimum}..{maximum} (this package's "
                    "limit)")
    return value


def parse_cfg(path: str | os.PathLike[str]) -> NetConfig:
    """Parse and validate a Darknet ``.cfg`` file as Darknet's parser reads it (its defaults included).

    Every key Darknet reads for these sections is accepted (:mod:`detector.darknet_keys`): honoured where it
    changes inference, ignored where it does not, refused by name where this package does not implement it; a
    Darknet layer type this package does not build is refused by name too. Checks value types and ranges, route
    indices, spatial/channel consistency at the cfg input size, and that each ``[yolo]`` input has
    ``len(mask) * (classes + 5)`` channels. Raises CfgError ``"<file>:<line>: <problem>"``.
    """
    path = Path(path)
    net, sections = _read_sections(path)
    width = _positive(path, net, "width", maximum=MAX_INPUT_SIDE)
    height = _positive(path, net, "height", maximum=MAX_INPUT_SIDE)
    channels = _positive(path, net, "channels", 3)
    if channels != 3:  # every frame is fed as 3-channel RGB (preprocess), the exported ONNX input too
        raise _fail(path, net.line_of("channels"), f"[net] channels={channels}: only 3-channel (RGB) input is "
                    "supported (frames are fed to the network as RGB)")
    parameters = 0
    letterbox = _flag(path, net, "letter_box")
    layers: list[LayerSpec] = []
    shapes: list[tuple[int, int, int]] = []
    classes: int | None = None
    nms: list[tuple[Section, NmsConfig]] = []
    for i, s in enumerate(sections):
        c, h, w = shapes[-1] if shapes else (channels, height, width)
        spec: LayerSpec
        if s.type == "convolutional":
            spec = _conv(path, s, c)
            size, stride, pad = spec.size, spec.stride, spec.padding
            shape = (spec.filters, (h + 2 * pad - size) // stride + 1, (w + 2 * pad - size) // stride + 1)
        elif s.type == "route":
            spec, shape = _route(path, s, i, layers, shapes)
        elif s.type == "maxpool":  # parse_maxpool's defaults: stride 1, size = stride, padding = size - 1
            stride = _positive(path, s, "stride", 1)
            size = _positive(path, s, "size", stride)  # the stride key's, not stride_x's
            stride = _stride(path, s, stride, conv=False)
            padding = _positive(path, s, "padding", size - 1, minimum=0)
            if padding >= size:
                raise _fail(path, s.line_of("padding"), f"[maxpool] padding={padding} with size={size} is a Darknet "
                            "setting this package does not support (padding up to size-1)")
            spec = MaxPoolSpec(size, stride, padding)
            shape = (c, (h + padding - size) // stride + 1, (w + padding - size) // stride + 1)
        elif s.type == "upsample":
            if s.get_int("stride", 2) < 0:
                raise _fail(path, s.line_of("stride"), f"[upsample] stride={s.options['stride']} is a Darknet setting "
                            "this package does not support (a negative stride downsamples)")
            spec = UpsampleSpec(_positive(path, s, "stride", 2))
            shape = (c, h * spec.stride, w * spec.stride)
        else:  # yolo
            spec = _yolo(path, s, i, sections, c)
            if classes is not None and spec.classes != classes:
                raise _fail(path, s.line_of("classes"), f"[yolo] classes={spec.classes}; an earlier has {classes}")
            classes, shape = spec.classes, (c, h, w)
            nms.append((s, _nms(path, s)))
        if shape[1] < 1 or shape[2] < 1:
            raise _fail(path, s.line, f"[{s.type}] (layer {i}) has no output pixels at {width}x{height}")
        if isinstance(spec, ConvSpec):
            parameters += spec.num_values
            if parameters > MAX_PARAMETERS:
                raise _fail(path, s.line_of("filters"), f"[convolutional] (layer {i}) filters={spec.filters} brings "
                            f"the network to {parameters:,} "
                            f"parameters; this package builds networks of up to {MAX_PARAMETERS:,}")
        if shape[0] * shape[1] * shape[2] > MAX_LAYER_VALUES:
            raise _fail(path, s.line, f"[{s.type}] (layer {i}) outputs {shape[0]}x{shape[1]}x{shape[2]} = "
                        f"{shape[0] * shape[1] * shape[2]:,} values per image at {width}x{height}; allowed up to "
                        f"{MAX_LAYER_VALUES:,} (fewer filters or a smaller [net] width/height)")
        layers.append(spec)
        shapes.append(shape)
    if classes is None:
        raise _fail(path, net.line, "no [yolo] section: the network has no detection head")
    last_section, last = nms[-1]
    for s, other in nms[:-1]:
        if other != last:
            log.warning("%s:%d: [yolo] NMS %s differs from the last [yolo]'s (line %d: %s); Darknet uses the last",
                        path, s.line, other, last_section.line, last)
    return NetConfig(path, width, height, channels, classes, net, tuple(sections), tuple(layers), tuple(shapes),
                     letterbox, last)


def _flag(path: Path, s: Section, key: str) -> bool:
    value = s.get_int(key, 0)
    if value not in (0, 1):
        raise _fail(path, s.line_of(key), f"[{s.type}] {key}={value}: allowed 0 or 1")
    return bool(value)


def _stride(path: Path, s: Section, stride: int, *, conv: bool) -> int:
    """The stride of a conv or maxpool: ``stride``, unless stride_x / stride_y override it (equal, here).

    parse_convolutional reads a stride_x or stride_y below 1 as unset; parse_maxpool divides by it.
    """
    strides = []
    for key in ("stride_x", "stride_y"):
        value = s.get_int(key, stride)
        strides.append(stride if conv and value < 1 else _positive(path, s, key, stride))
    if strides[0] != strides[1]:
        raise _fail(path, s.line_of("stride_x" if "stride_x" in s.options else "stride_y"),
                    f"[{s.type}] stride_x={strides[0]}, stride_y={strides[1]} is a Darknet setting this package does "
                    "not support (different strides along x and y)")
    return strides[0]


def _conv(path: Path, s: Section, c: int) -> ConvSpec:
    """``[convolutional]`` with ``c`` input channels, as parse_convolutional reads it."""
    size = _positive(path, s, "size", 1)
    stride = _stride(path, s, _positive(path, s, "stride", 1), conv=True)
    filters, groups = _positive(path, s, "filters", 1, maximum=MAX_FILTERS), _positive(path, s, "groups", 1)
    pad = size // 2 if s.get_int("pad", 0) else _positive(path, s, "padding", 0, minimum=0)
    act = s.options.get("activation", "logistic")
    if act in DARKNET_ACTIVATIONS and act not in ACTIVATIONS:
        raise _fail(path, s.line_of("activation"), f"[convolutional] activation={act} is a Darknet activation this "
                    f"package does not support; supported: {', '.join(ACTIVATIONS)}")
    bn = s.get_int("batch_normalize", 0)
    for key, bad, allowed in (("activation", act not in ACTIVATIONS, ", ".join(ACTIVATIONS)),
                              ("groups", c % groups or filters % groups, f"a divisor of {c} and {filters}"),
                              ("batch_normalize", bn not in (0, 1), "0 or 1")):
        if bad:
            raise _fail(path, s.line_of(key), f"[convolutional] {key}={s.options[key]}: allowed {allowed}")
    if s.get_int("cbn", 0):  # parse_convolutional: cbn=1 is batch_normalize=2, batch norm at inference and in files
        bn = 1
    return ConvSpec(c, filters, size, stride, pad, groups, bool(bn), act)


def _nms(path: Path, s: Section) -> NmsConfig:
    """A ``[yolo]``'s ``nms_kind`` / ``beta_nms`` (parse_yolo's defaults: default, 0.6)."""
    raw = s.options.get("nms_kind", "default")
    kind = NMS_ALIASES.get(raw, raw)
    if kind not in NMS_KINDS:
        raise _fail(path, s.line_of("nms_kind"), f"[yolo] nms_kind={raw}: allowed {', '.join(NMS_KINDS)} "
                    f"(or {', '.join(NMS_ALIASES)}, which Darknet's [yolo] reads as default)")
    beta = s.get_float("beta_nms", 0.6)
    if not beta > 0:
        raise _fail(path, s.line_of("beta_nms"), f"[yolo] beta_nms={beta}: must be > 0")
    return NmsConfig(kind, beta)


def _route(path: Path, s: Section, i: int, layers: list[LayerSpec],
           shapes: list[tuple[int, int, int]]) -> tuple[RouteSpec, tuple[int, int, int]]:
    line = s.line_of("layers")
    absolute = []
    for rel in s.get_ints("layers") if "layers" in s.options else []:
        idx = i + rel if rel < 0 else rel
        if not 0 <= idx < i:
            raise _fail(path, line, f"[route] (layer {i}) layers={rel} refers to layer {idx}; allowed: "
                        f"earlier layers 0..{i - 1} (or -1..-{i})")
        if isinstance(layers[idx], YoloSpec):
            raise _fail(path, line, f"[route] (layer {i}) refers to [yolo] layer {idx}; route to its input")
        absolute.append(idx)
    if not absolute:
        raise _fail(path, line, "[route] needs layers=")
    groups = _positive(path, s, "groups", 1)
    group_id = _positive(path, s, "group_id", 0, minimum=0)
    if group_id >= groups:
        raise _fail(path, s.line_of("group_id"), f"[route] group_id={group_id}: allowed 0..{groups - 1}")
    sizes = {shapes[j][1:] for j in absolute}
    if len(sizes) > 1:
        raise _fail(path, line, f"[route] (layer {i}) joins layers {absolute} of different HxW {sorted(sizes)}")
    if any(shapes[j][0] % groups for j in absolute):
        raise _fail(path, s.line_of("groups"), f"[route] groups={groups} must divide the channels of each layer")
    c = sum(shapes[j][0] // groups for j in absolute)
    return RouteSpec(tuple(absolute), groups, group_id), (c, *shapes[absolute[0]][1:])


def _yolo(path: Path, s: Section, i: int, sections: tuple[Section, ...] | list[Section], in_c: int) -> YoloSpec:
    for key in ("anchors", "classes"):
        if key not in s.options:
            raise _fail(path, s.line, f"[yolo] needs {key}=")
    values = s.get_floats("anchors")
    if len(values) % 2 or any(v <= 0 for v in values):
        raise _fail(path, s.line_of("anchors"), "[yolo] anchors must be positive w,h pairs")
    anchors = tuple(zip(values[0::2], values[1::2]))
    num = _positive(path, s, "num", 1)  # parse_yolo's default: one anchor
    if num != len(anchors):
        given = f"num={num}" if "num" in s.options else "has no num=, which Darknet reads as num=1,"
        raise _fail(path, s.line_of("num"), f"[yolo] {given} but anchors lists {len(anchors)} pairs; set "
                    f"num={len(anchors)}")
    mask = tuple(s.get_ints("mask")) if "mask" in s.options else tuple(range(num))
    if any(not 0 <= m < num for m in mask):
        raise _fail(path, s.line_of("mask"), f"[yolo] mask={list(mask)}: indices must be in 0..{num - 1}")
    classes = _positive(path, s, "classes")
    scale = s.get_float("scale_x_y", 1.0)
    if scale <= 0:
        raise _fail(path, s.line_of("scale_x_y"), f"[yolo] scale_x_y={scale}: must be > 0")
    expected = len(mask) * (classes + 5)
    if in_c != expected:
        prev = sections[i - 1] if i > 0 else None
        if prev is not None and prev.type == "convolutional":
            raise _fail(path, prev.line_of("filters"), f"[convolutional] filters={in_c} before [yolo] with "
                        f"classes={classes} and {len(mask)} masks: expected {expected}")
        raise _fail(path, s.line, f"[yolo] input has {in_c} channels; classes={classes} and {len(mask)} "
                    f"masks need {expected}")
    return YoloSpec(mask, anchors, classes, scale)


@dataclass(frozen=True)
class ConvWeights:
    """One conv's arrays (float32): ``biases`` [n] (BN beta when BN), BN ``scales``/``mean``/``var`` [n]
    or None, ``weights`` [out, in/groups, k, k]."""

    biases: np.ndarray
    weights: np.ndarray
    scales: np.ndarray | None = None
    mean: np.ndarray | None = None
    var: np.ndarray | None = None

    @property
    def batch_normalize(self) -> bool:
        """Whether this conv carries batch-norm arrays."""
        return self.scales is not None

    def arrays(self) -> list[np.ndarray]:
        """The arrays in file order: biases, [scales, mean, var,] weights."""
        bn = [self.scales, self.mean, self.var] if self.batch_normalize else []
        return [self.biases, *bn, self.weights]  # type: ignore[list-item]


@dataclass(frozen=True)
class DarknetWeights:
    """A ``.weights`` file: header (major, minor, revision, seen images) and per-conv arrays in cfg order."""

    convs: tuple[ConvWeights, ...]
    major: int = 0
    minor: int = 2
    revision: int = 5
    seen: int = 0

    @property
    def header(self) -> tuple[int, int, int, int]:
        """(major, minor, revision, seen)."""
        return (self.major, self.minor, self.revision, self.seen)


def read_weights(path: str | os.PathLike[str], cfg: NetConfig) -> DarknetWeights:
    """Read a Darknet ``.weights`` file laid out for ``cfg``; the file must match it byte for byte in size.

    Raises WeightsError (naming the file, with byte offsets) for a missing or empty file, a bad header,
    a truncated file or trailing bytes.
    """
    path = Path(path)
    size, total = _sized(path, cfg)
    if size > total:  # refused before reading: the file may be far larger than memory
        raise _trailing(path, size, total, cfg)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise WeightsError(f"cannot read weights '{path}': {e.strerror}") from e
    major, minor, revision = struct.unpack_from("<iii", data, 0)
    offset = total - 4 * cfg.num_weights
    (seen,) = struct.unpack_from("<Q" if offset == 20 else "<I", data, 12)
    convs = []
    for n, (layer, spec) in enumerate(cfg.convs):
        need = 4 * spec.num_values
        if len(data) - offset < need:
            raise WeightsError(f"{path}: truncated: expected {need} bytes for conv #{n} (layer {layer}) at byte "
                               f"offset {offset}, found {len(data) - offset}; file has {len(data)} bytes, "
                               f"cfg '{cfg.path.name}' needs {total}")
        flat = np.frombuffer(data, dtype="<f4", count=spec.num_values, offset=offset).astype(np.float32)
        finite = np.isfinite(flat)
        if not finite.all():
            first = int(np.argmin(finite))
            what = "NaN" if np.isnan(flat[first]) else "Inf"
            bad = int(flat.size - finite.sum())
            raise WeightsError(f"{path}: conv #{n} (layer {layer}) holds {what} at byte offset {offset + 4 * first} "
                               f"({bad} of its {flat.size} values are not finite); weights must be finite numbers "
                               "(a diverged training run?)")
        offset += need
        k = spec.filters
        parts = [flat[j * k:(j + 1) * k] for j in range(4 if spec.batch_normalize else 1)]
        convs.append(ConvWeights(parts[0], flat[len(parts) * k:].reshape(spec.weight_shape), *parts[1:]))
    if offset != len(data):
        raise _trailing(path, len(data), offset, cfg)
    log.debug("read %s: version %d.%d.%d, seen %d, %d convs", path, major, minor, revision, seen, len(convs))
    return DarknetWeights(tuple(convs), major, minor, revision, seen)


_HEADER_BYTES = 20  # the longest header: major, minor, revision (int32 each), seen (uint64)


def _sized(path: Path, cfg: NetConfig) -> tuple[int, int]:
    """(the file's size, the size ``cfg`` needs) from its header alone; WeightsError for a missing or non-regular
    file or a bad header."""
    try:
        st = path.stat()
        kind = file_kind(st)
        if kind is not None:
            raise WeightsError(f"cannot read weights '{path}': it is {kind}, not a regular file")
        with open(path, "rb") as fh:
            head = fh.read(_HEADER_BYTES)
    except FileNotFoundError as e:
        raise WeightsError(f"cannot open weights '{path}': no such file") from e
    except OSError as e:
        raise WeightsError(f"cannot read weights '{path}': {e.strerror}") from e
    return st.st_size, _expected_size(path, head, cfg)


def _expected_size(path: Path, head: bytes, cfg: NetConfig) -> int:
    """Bytes a ``.weights`` file starting with ``head`` must have for ``cfg`` (WeightsError for a bad header)."""
    if not head:
        raise WeightsError(f"{path}: empty file (0 bytes); expected a Darknet .weights file")
    major, minor, revision = struct.unpack_from("<iii", head.ljust(12, b"\0"), 0)
    if not all(0 <= v <= _MAX_VERSION for v in (major, minor, revision)):
        raise WeightsError(f"{path}: bad header: version {major}.{minor}.{revision} is not a Darknet weights "
                           f"version (each part 0..{_MAX_VERSION}); is this a .weights file?")
    offset = 12 + (8 if major * 10 + minor >= 2 else 4)  # Darknet's rule for a 64-bit seen
    if len(head) < offset:
        raise WeightsError(f"{path}: bad header: version {major}.{minor}.{revision} needs {offset} header "
                           f"bytes, file has {len(head)}")
    return offset + 4 * cfg.num_weights


def _trailing(path: Path, size: int, total: int, cfg: NetConfig) -> WeightsError:
    return WeightsError(f"{path}: {size - total} trailing bytes after the last layer at offset {total}; "
                        f"cfg '{cfg.path.name}' needs exactly {total} bytes: wrong cfg for these weights?")


def check_weights_size(path: str | os.PathLike[str], cfg: NetConfig) -> None:
    """Raise the :func:`read_weights` WeightsError for a file whose header or size does not fit ``cfg``, reading
    only its header: run before a model is built, so a wrong file costs no memory."""
    path = Path(path)
    size, total = _sized(path, cfg)
    if size > total:
        raise _trailing(path, size, total, cfg)
    if size < total:
        raise WeightsError(f"{path}: truncated: file has {size} bytes, cfg '{cfg.path.name}' needs {total}: wrong cfg "
                           "for these weights, or an incomplete file?")


def weights_to_bytes(weights: DarknetWeights) -> bytes:
    """Serialize as a version 0.2.5 file (64-bit ``seen``), whatever version ``weights`` was read from."""
    chunks = [struct.pack("<iiiQ", 0, 2, 5, weights.seen)]
    chunks += [np.ascontiguousarray(a, dtype="<f4").tobytes() for conv in weights.convs for a in conv.arrays()]
    return b"".join(chunks)


def write_weights(path: str | os.PathLike[str], weights: DarknetWeights) -> Path:
    """Write ``weights`` as a Darknet 0.2.5 ``.weights`` file, atomically; return the path."""
    return atomic_write_bytes(path, weights_to_bytes(weights))
