"""Synthetic street-scene video with COCO ground truth: the detector's test data and its training data.

A seeded scene (``numpy.random.Generator``; the same seed and size give the same frames and boxes) holds a
textured background (sky/ground gradients, smooth noise, buildings with windows, a road with lane marks,
trees, blurred blobs) seen by a slowly panning camera under slowly changing light, with sensor noise.
Moving objects of two classes walk and drive across it:

* ``person`` (category 1): upright, about 0.34-0.44 as wide as tall; head, hair, torso (or dress), arms,
  swinging legs; several skin, hair and clothing colours.
* ``vehicle`` (category 2): car, van or bus, 1.8-3.6 times as wide as tall; body, cabin, windows, wheels,
  lights; several body colours.

plus unlabelled distractors (balls, crates, signs, blobs). Objects move with their own velocity, grow or
shrink (approach/recede), overlap (drawn far to near by the y of their lowest point), and enter and leave
through the frame edges. Heights range from 16 px to 40% of the frame height; about 3-10 labelled objects
are in view at a time.

Ground truth (per frame, COCO ``bbox`` = ``[x, y, w, h]`` in frame pixels, floats): the object's full
extent clipped to the frame, also when nearer objects hide part of it. An object is labelled only while it
can be seen: its visible pixels (drawn, at least half covered, inside the frame and not hidden by nearer
objects, distractors included) must span at least 4 px in width and in height, and so must its clipped box;
objects wholly hidden behind nearer ones, or showing only a sliver, have no box. ``iscrowd`` is always 0.
Each annotation also carries ``track_id`` (the object's id over time) and ``occlusion`` (0-1, the fraction
of its in-frame pixels hidden by nearer objects).
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from detector.errors import VideoError
from detector.fileio import atomic_write_text, content_key, file_lock
from detector.progress import progress
from detector.video import VideoWriter

log = logging.getLogger(__name__)

GENERATOR_VERSION = 2  # 2: objects hidden behind nearer ones lose their box; pixel-based occlusion
"""Bumped whenever the frames or boxes for a given seed change; part of every cache key."""
CATEGORIES = ({"id": 1, "name": "person"}, {"id": 2, "name": "vehicle"})
PERSON, VEHICLE, CLUTTER = 1, 2, 0
MIN_VISIBLE_PX = 4.0  # objects with less visible width or height than this (pixels) have no box
MIN_HEIGHT_PX = 16.0
MAX_HEIGHT_FRACTION = 0.4
_S = 16  # sub-pixel precision of cv2 drawing (shift=4)

_SKIN = ((150, 180, 230), (110, 150, 200), (70, 100, 150), (50, 70, 100), (170, 200, 240))
_HAIR = ((20, 20, 20), (30, 50, 80), (60, 110, 160), (140, 140, 140), (40, 30, 20))
_CLOTHES = ((40, 40, 200), (180, 80, 30), (40, 160, 40), (30, 200, 230), (200, 200, 200), (60, 60, 60),
            (120, 30, 120), (20, 90, 200), (140, 110, 40), (220, 220, 240), (40, 40, 40))
_PAINT = ((235, 235, 235), (25, 25, 25), (170, 170, 175), (40, 40, 190), (170, 90, 30), (40, 110, 40),
          (30, 190, 230), (110, 110, 110), (40, 70, 140), (200, 150, 90))


def _quad(u0: float, v0: float, u1: float, v1: float) -> list[tuple[float, float]]:
    """The rectangle (u0, v0)-(u1, v1) of the unit box as a polygon."""
    return [(u0, v0), (u1, v0), (u1, v1), (u0, v1)]


# Vehicles facing right, in unit-box coordinates (u right, v down); the box is the vehicle's full extent.
_CAR = dict(body=[(0, .62), (.02, .45), (.25, .4), (.75, .4), (.97, .47), (1, .62), (1, .8), (0, .8)],
            cabin=[(.22, .42), (.36, 0), (.62, 0), (.78, .42)], wheels=(.2, .8), radius=.21, aspect=(2.2, 2.8),
            windows=[[(.27, .4), (.38, .07), (.48, .07), (.48, .4)], [(.51, .4), (.51, .07), (.6, .07), (.72, .4)]])
_VAN = dict(body=[(0, .05), (.02, 0), (.76, 0), (.88, .3), (1, .42), (1, .8), (0, .8)], cabin=None,
            windows=[_quad(.06, .08, .36, .35), _quad(.4, .08, .7, .35), [(.74, .07), (.8, .07), (.88, .34),
                                                                          (.74, .34)]],
            wheels=(.18, .8), radius=.2, aspect=(1.8, 2.2))
_BUS = dict(body=[(0, .02), (.01, 0), (.99, 0), (1, .02), (1, .82), (0, .82)], cabin=None,
            windows=[_quad(u, .1, u + .1, .42) for u in (.05, .18, .31, .44, .57, .7)] + [_quad(.84, .06, .98, .5)],
            wheels=(.15, .82), radius=.18, aspect=(2.8, 3.6))
_VEHICLES = (_CAR, _VAN, _BUS)


@dataclass(frozen=True)
class SyntheticParams:
    """What a synthetic video is made from; frames and boxes depend only on seed, width, height (and frames)."""

    seed: int = 0
    width: int = 960  # pixels, even, >= 64
    height: int = 540  # pixels, even, >= 64
    fps: float = 30.0  # frames per second (container metadata only)
    frames: int = 300
    codec: str = "mp4v"

    def __post_init__(self) -> None:
        def check(name: str, ok: bool, allowed: str) -> None:
            if not ok:
                raise VideoError(f"synthetic video: {name} must be {allowed}, got {getattr(self, name)!r}")

        def is_int(v: object) -> bool:
            return isinstance(v, (int, np.integer)) and not isinstance(v, bool)

        check("seed", is_int(self.seed) and self.seed >= 0, "an integer >= 0")
        for name in ("width", "height"):
            value = getattr(self, name)
            # OpenCV and FFmpeg hold a frame's side in a 32-bit int; past 2^63 numpy's OverflowError was a traceback
            check(name, is_int(value) and 64 <= value < 2**31 and value % 2 == 0,
                  "an even integer from 64 to 2147483646 (pixels)")
        check("frames", is_int(self.frames) and self.frames >= 1, "an integer >= 1")
        check("fps", isinstance(self.fps, (int, float)) and not isinstance(self.fps, bool) and 0 < self.fps < 1e4,
              "a number > 0 and < 10000 (frames per second)")
        check("codec", isinstance(self.codec, str) and len(self.codec) == 4, "a four-character code such as 'mp4v'")
        for name, kind in (("seed", int), ("width", int), ("height", int), ("frames", int), ("fps", float)):
            object.__setattr__(self, name, kind(getattr(self, name)))

    def as_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class SyntheticVideo:
    """A synthetic video on disk: ``video`` (frames) and ``gt_json`` (COCO ground truth, ``<stem>.json``)."""

    video: Path
    gt_json: Path
    params: SyntheticParams

    def load_ground_truth(self) -> dict[str, Any]:
        """The parsed COCO ground truth (images, annotations, categories, info)."""
        return json.loads(self.gt_json.read_text(encoding="utf-8"))


@dataclass
class _Actor:
    kind: int  # PERSON, VEHICLE or CLUTTER
    track: int
    x: float  # bottom-centre x, frame pixels
    y: float  # bottom y, frame pixels
    h: float  # height, pixels
    aspect: float  # width / height
    vx: float  # velocity in heights per frame
    vy: float
    growth: float  # d log(h) per frame
    style: dict[str, Any]
    phase: float = 0.0
    entered: bool = False
    age: int = 0

    def box(self) -> tuple[float, float, float, float]:
        half = 0.5 * self.aspect * self.h
        return self.x - half, self.y - self.h, self.x + half, self.y


def _pick(rng: np.random.Generator, options: tuple) -> Any:
    return options[int(rng.integers(len(options)))]


def _jitter(rng: np.random.Generator, colour: tuple[int, int, int], amount: int = 18) -> tuple[int, ...]:
    return tuple(int(np.clip(c + rng.integers(-amount, amount + 1), 0, 255)) for c in colour)


def _background(rng: np.random.Generator, width: int, height: int, horizon: float) -> np.ndarray:
    """A (height, width, 3) uint8 BGR street-like texture: sky, ground, noise, buildings, road, trees, blobs."""
    rows = np.arange(height, dtype=np.float32)[:, None]
    sky_top, sky_low = rng.uniform([120, 80, 40], [255, 220, 200]), rng.uniform([150, 140, 120], [255, 250, 240])
    far, near = rng.uniform([60, 70, 60], [170, 180, 170]), rng.uniform([20, 30, 20], [140, 150, 150])
    t_sky = np.clip(rows / max(horizon, 1.0), 0, 1)
    t_ground = np.clip((rows - horizon) / max(height - horizon, 1.0), 0, 1)
    column = np.where(rows < horizon, sky_top * (1 - t_sky) + sky_low * t_sky, far * (1 - t_ground) + near * t_ground)
    img = np.repeat(column[:, None, :], width, axis=1).astype(np.float32)
    for cells, amplitude in ((4, 26.0), (16, 12.0), (64, 5.0)):
        shape = (cells, max(2, cells * width // height))
        low = (rng.normal(0, 1, (*shape, 1)) + 0.35 * rng.normal(0, 1, (*shape, 3))).astype(np.float32)
        img += amplitude * cv2.resize(low, (width, height), interpolation=cv2.INTER_CUBIC)
    img = np.clip(img, 0, 255).astype(np.uint8)
    hz = int(horizon)
    for _ in range(int(rng.integers(0, 9))):  # buildings on the horizon, some with window grids
        bw, bh = rng.uniform(0.05, 0.25) * width, rng.uniform(0.08, 0.3) * height
        x1 = rng.uniform(-0.1, 1.0) * width
        colour = _jitter(rng, _pick(rng, ((150, 150, 160), (90, 100, 120), (170, 190, 200), (80, 80, 80))), 30)
        cv2.rectangle(img, (int(x1), int(hz - bh)), (int(x1 + bw), hz + 2), colour, -1)
        if rng.random() < 0.6:
            step = rng.uniform(8, 20)
            win = _jitter(rng, (70, 60, 50), 30)
            for wy in np.arange(hz - bh + step / 2, hz - step, step):
                for wx in np.arange(x1 + step / 2, x1 + bw - step / 2, step):
                    cv2.rectangle(img, (int(wx), int(wy)), (int(wx + step / 2), int(wy + step / 2)), win, -1)
    if rng.random() < 0.7:  # a road with lane marks
        y1 = rng.uniform(horizon + 0.1 * (height - horizon), horizon + 0.5 * (height - horizon))
        y2 = min(height, y1 + rng.uniform(0.2, 0.5) * height)
        cv2.rectangle(img, (0, int(y1)), (width, int(y2)), _jitter(rng, (70, 70, 72), 15), -1)
        cv2.line(img, (0, int(y1)), (width, int(y1)), (190, 190, 190), max(1, height // 180))
        mark, dash = _pick(rng, ((230, 230, 230), (40, 200, 230))), rng.uniform(0.03, 0.08) * width
        ym = int((y1 + y2) / 2)
        for x in np.arange(rng.uniform(0, dash), width, 2 * dash):
            cv2.rectangle(img, (int(x), ym - max(1, height // 200)), (int(x + dash), ym + max(1, height // 200)),
                          mark, -1)
    for _ in range(int(rng.integers(0, 10))):  # trees and poles
        x, base = rng.uniform(0, width), rng.uniform(horizon, height)
        size = rng.uniform(0.05, 0.35) * height * (0.3 + base / height)
        cv2.rectangle(img, (int(x - size * 0.05), int(base - size)), (int(x + size * 0.05), int(base)),
                      _jitter(rng, (30, 60, 90), 15), -1)
        for _ in range(int(rng.integers(2, 5)) if rng.random() < 0.7 else 0):  # foliage, or a bare pole
            c = (int(x + rng.normal(0, size * 0.15)), int(base - size + rng.normal(0, size * 0.1)))
            cv2.circle(img, c, int(size * rng.uniform(0.2, 0.35)), _jitter(rng, (40, 120, 50), 30), -1, cv2.LINE_AA)
    layer = img.copy()
    for _ in range(int(rng.integers(5, 20))):  # soft blobs
        centre = (int(rng.uniform(0, width)), int(rng.uniform(0, height)))
        axes = (int(rng.uniform(0.02, 0.15) * width), int(rng.uniform(0.01, 0.08) * height))
        cv2.ellipse(layer, centre, axes, rng.uniform(0, 180), 0, 360, tuple(rng.integers(40, 216, 3).tolist()), -1)
    img = cv2.addWeighted(img, 0.7, cv2.GaussianBlur(layer, (0, 0), 3), 0.3, 0)
    grain = rng.normal(0, rng.uniform(2, 6), img.shape).astype(np.float32)
    return np.clip(cv2.GaussianBlur(img, (0, 0), 0.8).astype(np.float32) + grain, 0, 255).astype(np.uint8)


def _poly(points: list[tuple[float, float]] | np.ndarray, box: tuple[float, ...], flip: bool) -> np.ndarray:
    """Unit-box points (u, v) in [0, 1] (u mirrored when ``flip``) -> int32 cv2 points at ``_S`` sub-pixels."""
    x0, y0, w, h = box
    scale = np.array([-w if flip else w, h]) * _S
    offset = np.array([x0 + w if flip else x0, y0]) * _S
    return np.round(np.asarray(points, dtype=np.float64) * scale + offset).astype(np.int32)


def _pt(u: float, v: float, box: tuple[float, ...], flip: bool = False) -> tuple[int, int]:
    x0, y0, w, h = box
    return int(round((x0 + (1 - u if flip else u) * w) * _S)), int(round((y0 + v * h) * _S))


def _draw_person(img: np.ndarray, a: _Actor, box: tuple[float, ...]) -> None:
    _, _, w, h = box
    s, style = math.sin(a.phase), a.style
    legs, arms = max(1, round(0.17 * w)), max(1, round(0.13 * w))
    for hip, foot in ((0.40, 0.44 + 0.3 * s), (0.60, 0.56 - 0.3 * s)):
        cv2.line(img, _pt(hip, 0.55, box), _pt(foot, 1 - legs / (2 * h), box), style["pants"], legs, cv2.LINE_AA, 4)
    rh = 0.09 * style["head"]
    neck = 2 * rh - 0.01
    torso = [(.30, neck), (.70, neck), (.84, neck + .05), (.76, .58), (.24, .58), (.16, neck + .05)]
    if style["dress"]:
        torso[3:5] = [(.76, .58), (.84, .80), (.16, .80), (.24, .58)]
    cv2.fillPoly(img, [_poly(torso, box, False)], style["shirt"], cv2.LINE_AA, 4)
    for side in (0, 1):
        hand = (arms / (2 * w), 0.52 + (0.03 if side else -0.03) * s)
        cv2.line(img, _pt(0.2, neck + 0.06, box, bool(side)), _pt(*hand, box, bool(side)), style["shirt"], arms,
                 cv2.LINE_AA, 4)
    centre, radius = _pt(0.5, rh, box), int(round(rh * h * _S))
    cv2.circle(img, centre, radius, style["skin"], -1, cv2.LINE_AA, 4)
    cv2.ellipse(img, centre, (radius, radius), 0, 180, 360, style["hair"], -1, cv2.LINE_AA, 4)


def _draw_vehicle(img: np.ndarray, a: _Actor, box: tuple[float, ...]) -> None:
    _, _, w, h = box
    spec, style, flip = _VEHICLES[a.style["type"]], a.style, a.vx < 0
    paint, dark = style["paint"], tuple(int(c * 0.55) for c in style["paint"])
    if spec["cabin"] is not None:
        cv2.fillPoly(img, [_poly(spec["cabin"], box, flip)], paint, cv2.LINE_AA, 4)
    body_bottom = max(p[1] for p in spec["body"])
    cv2.fillPoly(img, [_poly(spec["body"], box, flip)], paint, cv2.LINE_AA, 4)
    cv2.fillPoly(img, [_poly(win, box, flip) for win in spec["windows"]], style["glass"], cv2.LINE_AA, 4)
    cv2.fillPoly(img, [_poly(_quad(0, body_bottom - .07, 1, body_bottom), box, flip)], dark, cv2.LINE_AA, 4)
    for quad, colour in ((_quad(.96, .48, 1, .58), (200, 235, 255)), (_quad(0, .48, .025, .58), (40, 40, 210))):
        cv2.fillPoly(img, [_poly(quad, box, flip)], colour, cv2.LINE_AA, 4)
    r = spec["radius"] * h
    for u in spec["wheels"]:
        centre = _pt(u, 1 - r / h, box, flip)
        cv2.ellipse(img, centre, (int(r * 1.15 * _S),) * 2, 0, 180, 360, (35, 35, 35), -1, cv2.LINE_AA, 4)
        cv2.circle(img, centre, int(r * _S), (28, 28, 28), -1, cv2.LINE_AA, 4)
        cv2.circle(img, centre, int(r * 0.5 * _S), style["hub"], -1, cv2.LINE_AA, 4)


def _draw_clutter(img: np.ndarray, a: _Actor, box: tuple[float, ...]) -> None:
    shape, colour = a.style["shape"], a.style["colour"]
    if shape == 0:  # ball
        cv2.ellipse(img, _pt(.5, .5, box), (int(box[2] * _S / 2), int(box[3] * _S / 2)), 0, 0, 360, colour, -1,
                    cv2.LINE_AA, 4)
    elif shape == 1:  # crate
        cv2.fillPoly(img, [_poly(_quad(0, 0, 1, 1), box, False)], colour, cv2.LINE_AA, 4)
        cv2.polylines(img, [_poly([(0, 0), (1, 1), (1, 0), (0, 1)], box, False)], True,
                      tuple(c // 2 for c in colour), max(1, int(box[2] / 12)), cv2.LINE_AA, 4)
    elif shape == 2:  # sign on a pole
        cv2.line(img, _pt(.5, .4, box), _pt(.5, 1, box), (90, 90, 90), max(1, int(box[2] / 8)), cv2.LINE_AA, 4)
        cv2.fillPoly(img, [_poly(_quad(0, 0, 1, .4), box, False)], colour, cv2.LINE_AA, 4)
    else:  # irregular blob
        cv2.fillPoly(img, [_poly(a.style["outline"], box, False)], colour, cv2.LINE_AA, 4)


_DRAW = {PERSON: _draw_person, VEHICLE: _draw_vehicle, CLUTTER: _draw_clutter}


class _Scene:
    """The moving objects, the camera and the light of one seeded video; :meth:`render` draws frame ``t``."""

    def __init__(self, rng: np.random.Generator, width: int, height: int) -> None:
        self.rng, self.width, self.height = rng, width, height
        self.h_max = max(MIN_HEIGHT_PX * 1.5, MAX_HEIGHT_FRACTION * height)
        self.horizon = rng.uniform(0.25, 0.5) * height
        self.pad = max(4, int(0.04 * min(width, height)))
        bg_horizon = self.horizon + self.pad
        self.background = _background(rng, width + 2 * self.pad, height + 2 * self.pad, bg_horizon)
        self.pan = rng.uniform([0, 0, 200, 0], [self.pad, self.pad / 2, 800, 2 * math.pi])  # ax, ay, period, phase
        # light: gain amplitude, its period (frames), tint amplitude, offset amplitude (grey levels),
        # tint period, offset phase, offset period
        self.light = rng.uniform([0.04, 120, 0, 0, 200, 0, 100], [0.18, 480, 0.06, 8, 700, 2 * math.pi, 400])
        self.tint_phase = rng.uniform(0, 2 * math.pi, 3)
        sigma = rng.uniform(1.5, 4.5)
        noise = [rng.normal(0, sigma, (height, width, 3)) for _ in range(3)]
        self.noise = [(np.clip(n, 0, 255).astype(np.uint8), np.clip(-n, 0, 255).astype(np.uint8)) for n in noise]
        self.p_person = rng.uniform(0.35, 0.65)
        self.lo = int(rng.integers(3, 6))
        self.hi = min(10, self.lo + int(rng.integers(2, 6)))
        self.n_clutter = int(rng.integers(0, 4))
        self.next_track = 1
        first = [PERSON, VEHICLE] + [None] * int(rng.integers(self.lo - 2, self.hi - 1))  # both classes in view
        self.actors: list[_Actor] = []
        for kind in first + [CLUTTER] * self.n_clutter:
            self.actors.append(self._spawn(inside=True, kind=kind))

    def _height_range(self, kind: int, aspect: float) -> tuple[float, float]:
        top = min(self.h_max, 0.25 * self.height) if kind == CLUTTER else self.h_max
        if kind == VEHICLE:
            top = min(top, 0.6 * self.width / aspect)
        return MIN_HEIGHT_PX, max(top, MIN_HEIGHT_PX * 1.2)

    def _spawn(self, *, inside: bool, kind: int | None = None) -> _Actor:
        rng, width, height = self.rng, self.width, self.height
        if kind is None:  # usually the class with fewer objects about, so that neither dies out
            persons = sum(a.kind == PERSON for a in self.actors)
            vehicles = sum(a.kind == VEHICLE for a in self.actors)
            p_person = self.p_person if persons == vehicles or rng.random() < 0.4 else float(persons < vehicles)
            kind = PERSON if rng.random() < p_person else VEHICLE
        if kind == PERSON:
            aspect, speed, drift = rng.uniform(0.34, 0.44), rng.uniform(0.01, 0.045), rng.uniform(-0.01, 0.01)
            style = dict(skin=_jitter(rng, _pick(rng, _SKIN), 12), hair=_jitter(rng, _pick(rng, _HAIR), 10),
                         shirt=_jitter(rng, _pick(rng, _CLOTHES)), pants=_jitter(rng, _pick(rng, _CLOTHES[4:])),
                         dress=bool(rng.random() < 0.2), head=rng.uniform(0.85, 1.1))
        elif kind == VEHICLE:
            kind_of = int(rng.choice(3, p=[0.6, 0.25, 0.15]))
            aspect = rng.uniform(*_VEHICLES[kind_of]["aspect"])
            speed, drift = rng.uniform(0.04, 0.14), rng.uniform(-0.004, 0.004)
            style = dict(type=kind_of, paint=_jitter(rng, _pick(rng, _PAINT), 15),
                         glass=_jitter(rng, (90, 70, 50), 25), hub=_jitter(rng, (160, 160, 160), 40))
        else:
            aspect, speed, drift = rng.uniform(0.5, 2.0), rng.uniform(0, 0.04), rng.uniform(-0.02, 0.02)
            angles = np.sort(rng.uniform(0, 2 * math.pi, 7))
            radii = rng.uniform(0.6, 1.0, 7)
            outline = np.stack([0.5 + 0.5 * radii * np.cos(angles), 0.5 + 0.5 * radii * np.sin(angles)], axis=1)
            style = dict(shape=int(rng.integers(4)), colour=tuple(rng.integers(0, 256, 3).tolist()), outline=outline)
        lo, hi = self._height_range(kind, aspect)
        h = float(np.exp(rng.uniform(np.log(lo), np.log(hi))))
        growth = rng.uniform(-0.006, 0.006) if rng.random() < 0.5 else rng.uniform(-0.0015, 0.0015)
        depth = ((h - lo) / (hi - lo + 1e-9)) ** 0.7 * rng.uniform(0.6, 1.15)
        y = float(np.clip(self.horizon + (height - self.horizon) * depth, h + 1, height + 0.15 * h))
        direction = 1.0 if rng.random() < 0.5 else -1.0
        w = aspect * h
        x = rng.uniform(w / 2, max(w / 2, width - w / 2))
        if not inside:
            side = int(rng.integers(4)) if rng.random() < (0.05 if kind == VEHICLE else 0.25) else int(rng.integers(2))
            if side == 0:
                x, direction = -w / 2, 1.0
            elif side == 1:
                x, direction = width + w / 2, -1.0
            elif side == 2:
                y, drift = 0.0, rng.uniform(0.01, 0.03)
            else:
                y, drift = height + h, -rng.uniform(0.01, 0.03)
        actor = _Actor(kind, self.next_track, float(x), y, h, aspect, direction * speed, drift, growth, style,
                       phase=rng.uniform(0, 2 * math.pi))
        self.next_track += 1
        return actor

    def _in_frame(self, a: _Actor) -> bool:
        x1, y1, x2, y2 = a.box()
        return x2 > 0 and y2 > 0 and x1 < self.width and y1 < self.height

    def step(self) -> None:
        """Advance one frame: move, grow and retire objects, then let new ones enter at the edges."""
        rng, kept = self.rng, []
        for a in self.actors:
            lo, hi = self._height_range(a.kind, a.aspect)
            a.h *= math.exp(a.growth)
            if not lo <= a.h <= hi:
                a.h, a.growth = min(max(a.h, lo), hi), -a.growth
            a.x += a.vx * a.h
            a.y += a.vy * a.h
            a.phase += 2 * math.pi * math.hypot(a.vx, a.vy) / 0.8  # one stride cycle per 0.8 heights walked
            a.age += 1
            if self._in_frame(a):
                a.entered = True
                kept.append(a)
            elif not a.entered and a.age < 90:
                kept.append(a)
        self.actors = kept
        labelled = sum(a.kind != CLUTTER for a in kept)
        if labelled < self.lo or (labelled < self.hi and rng.random() < 0.05):
            self.actors.append(self._spawn(inside=False))
        if len(kept) - labelled < self.n_clutter and rng.random() < 0.02:
            self.actors.append(self._spawn(inside=False, kind=CLUTTER))

    def render(self, t: int) -> tuple[np.ndarray, list[dict[str, Any]]]:
        """Frame ``t`` (BGR uint8 (height, width, 3)) and its annotations (COCO fields, frame pixels)."""
        width, height, pad = self.width, self.height, self.pad
        ax, ay, period, phase = self.pan
        ox = pad + int(round(ax * math.sin(2 * math.pi * t / period + phase)))
        oy = pad + int(round(ay * math.sin(2 * math.pi * t / (1.7 * period) + phase)))
        frame = self.background[oy : oy + height, ox : ox + width].copy()
        drawn = sorted((a for a in self.actors if self._in_frame(a)), key=lambda a: (a.y, a.track))
        for a in drawn:
            x1, y1, x2, y2 = a.box()
            _shadow(frame, a.x, a.y - 0.01 * a.h, 0.55 * (x2 - x1), max(1.0, 0.05 * a.h))
            _DRAW[a.kind](frame, a, (x1, y1, x2 - x1, y2 - y1))
        gain, t1, tint, offset, t2, offset_phase, t3 = self.light
        g = 1 + gain * math.sin(2 * math.pi * t / t1 + self.tint_phase[0])
        gains = [g * (1 + tint * math.sin(2 * math.pi * t / t2 + p)) for p in self.tint_phase]
        bias = offset * math.sin(2 * math.pi * t / t3 + offset_phase)
        matrix = np.array([[gains[0], 0, 0, bias], [0, gains[1], 0, bias], [0, 0, gains[2], bias]], np.float32)
        frame = cv2.transform(frame, matrix)
        plus, minus = self.noise[int(self.rng.integers(len(self.noise)))]
        cv2.subtract(cv2.add(frame, plus, dst=frame), minus, dst=frame)
        return frame, self._annotations(drawn)

    def _annotations(self, drawn: list[_Actor]) -> list[dict[str, Any]]:
        """COCO annotations of the labelled objects in ``drawn`` (far to near) that can be seen in the frame."""
        covered = np.zeros((self.height, self.width), dtype=bool)  # pixels of the objects nearer than this one
        annotations = []
        for a in reversed(drawn):
            x0, y0, mask = _silhouette(a, self.width, self.height)
            region = covered[y0 : y0 + mask.shape[0], x0 : x0 + mask.shape[1]]
            visible = mask & ~region
            region |= mask
            x1, y1, x2, y2 = a.box()
            x1, y1 = round(max(0.0, x1), 3), round(max(0.0, y1), 3)
            x2, y2 = round(min(float(self.width), x2), 3), round(min(float(self.height), y2), 3)
            if a.kind == CLUTTER or min(x2 - x1, y2 - y1, *_extent(visible)) < MIN_VISIBLE_PX:
                continue
            w, h = round(x2 - x1, 3), round(y2 - y1, 3)
            annotations.append({"category_id": a.kind, "bbox": [x1, y1, w, h], "area": round(w * h, 3),
                                "iscrowd": 0, "track_id": a.track,
                                "occlusion": round(1 - float(visible.sum()) / max(1, int(mask.sum())), 2)})
        return annotations[::-1]


def _silhouette(a: _Actor, width: int, height: int) -> tuple[int, int, np.ndarray]:
    """The frame pixels that ``a`` covers at least half: ``(x0, y0, mask)``, ``mask`` bool (h, w) at (x0, y0).

    The object is drawn twice, on black and on white, into its own patch of the frame (its box plus 2 px for
    anti-aliasing, clipped to the frame); a pixel of coverage alpha reads ``(1 - alpha) * 255`` more on white.
    The mask is empty (0 x 0) for an object outside the frame.
    """
    x1, y1, x2, y2 = a.box()
    x0, y0 = min(width, max(0, math.floor(x1) - 2)), min(height, max(0, math.floor(y1) - 2))
    xe, ye = max(x0, min(width, math.ceil(x2) + 2)), max(y0, min(height, math.ceil(y2) + 2))
    black = np.zeros((ye - y0, xe - x0, 3), dtype=np.uint8)
    white = np.full_like(black, 255)
    for canvas in (black, white):
        _DRAW[a.kind](canvas, a, (x1 - x0, y1 - y0, x2 - x1, y2 - y1))
    return x0, y0, white[..., 0].astype(np.int16) - black[..., 0] <= 127


def _extent(mask: np.ndarray) -> tuple[int, int]:
    """Width and height (pixels) of the bounding box of the True pixels of a 2-D mask; (0, 0) when none."""
    cols, rows = np.flatnonzero(mask.any(axis=0)), np.flatnonzero(mask.any(axis=1))
    return (int(cols[-1] - cols[0] + 1), int(rows[-1] - rows[0] + 1)) if cols.size else (0, 0)


def _shadow(img: np.ndarray, cx: float, cy: float, ax: float, ay: float, strength: float = 0.35) -> None:
    """Darken an elliptic ground shadow centred at (cx, cy) with semi-axes (ax, ay) pixels, in place."""
    x1, y1 = max(0, int(cx - ax) - 1), max(0, int(cy - ay) - 1)
    x2, y2 = min(img.shape[1], int(cx + ax) + 2), min(img.shape[0], int(cy + ay) + 2)
    if x2 <= x1 or y2 <= y1:
        return
    roi = img[y1:y2, x1:x2]
    dark = roi.copy()
    cv2.ellipse(dark, (int((cx - x1) * _S), int((cy - y1) * _S)), (int(ax * _S), int(ay * _S)), 0, 0, 360,
                (0, 0, 0), -1, cv2.LINE_AA, 4)
    roi[:] = cv2.addWeighted(roi, 1 - strength, dark, strength, 0)


def render_frames(
    seed: int = 0, width: int = 960, height: int = 540, frames: int | None = 300
) -> Iterator[tuple[np.ndarray, list[dict[str, Any]]]]:
    """An iterator of ``(frame, annotations)``, one per frame of the synthetic scene; no video is encoded.

    ``frame`` is BGR uint8 ``(height, width, 3)``; ``annotations`` is a list of dicts with ``category_id``
    (1 person, 2 vehicle), ``bbox`` ``[x, y, w, h]`` (floats, frame pixels, clipped to the frame), ``area``
    (px^2), ``iscrowd`` (0), ``track_id`` and ``occlusion`` (0-1). The first n frames do not depend on
    ``frames``; ``frames=None`` never ends (for training). Bad parameters raise VideoError at the call.
    """
    SyntheticParams(seed=seed, width=width, height=height, frames=1 if frames is None else frames)  # validates
    scene = _Scene(np.random.default_rng(seed), width, height)

    def play() -> Iterator[tuple[np.ndarray, list[dict[str, Any]]]]:
        for t in itertools.count() if frames is None else range(frames):
            if t:
                scene.step()
            yield scene.render(t)

    return play()


def make_synthetic_video(
    path: str | os.PathLike[str], *, seed: int = 0, width: int = 960, height: int = 540, fps: float = 30,
    frames: int = 300, codec: str = "mp4v",
) -> SyntheticVideo:
    """Write the synthetic video to ``path`` and its COCO ground truth to ``<stem>.json`` beside it.

    Both files are written atomically, the video first, so an existing ``.json`` means a complete pair.
    COCO images have ``id`` = frame index + 1 and ``file_name`` ``"<stem>#<frame index>"``; categories are
    1 person and 2 vehicle; ``info`` holds ``generator_version`` and the parameters.
    """
    params = SyntheticParams(seed=seed, width=width, height=height, fps=fps, frames=frames, codec=codec)
    path = Path(path)
    if path.suffix.lower() in ("", ".json"):
        raise VideoError(f"cannot write '{path}': a synthetic video needs a video suffix such as '.mp4'")
    images: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    rendered = progress(render_frames(seed, width, height, frames), total=frames, desc=f"making {path.name}",
                        unit="frame")
    with VideoWriter(path, params.fps, (width, height), codec) as writer, rendered:
        for index, (frame, boxes) in enumerate(rendered):
            writer.write(frame)
            images.append({"id": index + 1, "file_name": f"{path.stem}#{index}", "width": width, "height": height})
            for box in boxes:
                annotations.append({"id": len(annotations) + 1, "image_id": index + 1, **box})
    gt = {"info": {"description": "detector synthetic video", "generator_version": GENERATOR_VERSION,
                   "params": params.as_dict(), "video": path.name},
          "images": images, "annotations": annotations, "categories": [dict(c) for c in CATEGORIES]}
    gt_json = atomic_write_text(path.with_suffix(".json"), json.dumps(gt, separators=(",", ":")))
    log.info("wrote synthetic video %s (%d frames, %d boxes)", path, frames, len(annotations))
    return SyntheticVideo(path, gt_json, params)


def _complete(entry: SyntheticVideo) -> bool:
    """True when both files of a cache entry exist, the video can be read, and the json belongs to this generator and
    parameters."""
    try:
        if entry.video.stat().st_size == 0 or not os.access(entry.video, os.R_OK):
            return False
        info = entry.load_ground_truth()["info"]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return info.get("generator_version") == GENERATOR_VERSION and info.get("params") == entry.params.as_dict()


def synthetic_video_path(cache_dir: str | os.PathLike[str], params: SyntheticParams) -> Path:
    """Where :func:`synthetic_video` keeps the video for ``params`` in ``cache_dir`` (keyed by the parameters and
    ``GENERATOR_VERSION``)."""
    key = content_key("synthetic-video", GENERATOR_VERSION, params.as_dict())
    suffix = ".avi" if params.codec.upper() in ("MJPG", "XVID", "DIVX") else ".mp4"
    codec = "" if params.codec == "mp4v" else f"-{params.codec.lower()}"
    return Path(cache_dir) / (f"synthetic-s{params.seed}-{params.width}x{params.height}-{params.frames}f{codec}-{key}"
                              f"{suffix}")


def synthetic_video(
    cache_dir: str | os.PathLike[str], *, seed: int = 0, width: int = 960, height: int = 540, fps: float = 30,
    frames: int = 300, codec: str = "mp4v",
) -> SyntheticVideo:
    """The synthetic video for these parameters from ``cache_dir``, made on first use (see make_synthetic_video).

    Entries are keyed by the parameters and ``GENERATOR_VERSION``. One process builds an entry while others
    wait on a lock file; the ``.json`` is written last and marks a complete entry. An entry with a missing,
    empty, unreadable or foreign file is rebuilt.
    """
    params = SyntheticParams(seed=seed, width=width, height=height, fps=fps, frames=frames, codec=codec)
    video = synthetic_video_path(cache_dir, params)
    entry = SyntheticVideo(video, video.with_suffix(".json"), params)
    if _complete(entry):
        return entry
    with file_lock(video):
        if _complete(entry):
            return entry
        log.info("building synthetic video cache entry %s", video)
        entry.gt_json.unlink(missing_ok=True)
        return make_synthetic_video(video, **params.as_dict())
