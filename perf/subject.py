"""What the suite measures, the model and the video, from its ``--perf-*`` options or ini settings
(docs/options.md), and their identity: `Subject.identity` is saved as ``machine_info["perf_subject"]``;
`subject_differences` is what the compares refuse."""

from __future__ import annotations

import dataclasses
import functools
from argparse import ArgumentTypeError
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from detector.argtypes import fraction
from detector.devices import PRECISIONS
from detector.errors import DetectorError, one_line
from detector.fileio import file_digest, file_kind, os_reason, resolved, symlink_loop
from detector.groundtruth import check_categories, check_labels, load_ground_truth
from detector.spec import ModelSpec
from detector.video import open_video

PATHS = ("cfg", "weights", "names", "onnx", "engine", "video", "ground_truth")
#: The shipped model's floor: catches broken pre/post-processing or weights (random weights score ~0).
SHIPPED_MIN_MAP50 = 0.50
#: Identity fields that make two runs incomparable (the rest is recorded only).
COMPARED = ("model", "cfg_sha256", "weights", "onnx_sha256", "engine_sha256", "input_size", "classes",
            "video", "video_sha256", "frames")  # fmt: skip
NOT_RECORDED = "<not recorded>"
#: The synthetic video the suite makes when no --perf-video is given (frames: --perf-frames).
SYNTHETIC_SEED = 7
#: Class names shown in full up to this many; a longer list is shortened to its first ones and a count.
SHOWN_NAMES = 8
T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class VideoCase:
    """A video under test: ``ground_truth`` a COCO JSON or None; ``frames`` to process (None: all)."""

    path: Path
    ground_truth: Path | None
    frames: int | None


@dataclasses.dataclass(frozen=True)
class Subject:
    """The model and video settings as given (absolute paths; None where not given)."""

    cfg: Path | None = None
    weights: Path | None = None
    names: Path | None = None
    onnx: Path | None = None
    engine: Path | None = None
    engine_precision: str | None = None
    video: Path | None = None
    ground_truth: Path | None = None
    min_map: str | None = None
    #: Where each setting came from ("--perf-cfg" or "perf_cfg (ini)"), for messages.
    origin: Mapping[str, str] = dataclasses.field(default_factory=dict, compare=False)

    @classmethod
    def from_config(cls, getoption: Callable[[str], Any], getini: Callable[[str], Any], invocation_dir: Path,
                    ini_dir: Path) -> Subject:  # fmt: skip
        """Each setting from its option (paths relative to ``invocation_dir``), else from its ini value
        (relative to ``ini_dir``)."""
        values: dict[str, Any] = {}
        origin: dict[str, str] = {}
        for name in (field.name for field in dataclasses.fields(cls) if field.name != "origin"):
            value, base, where = getoption("perf_" + name), invocation_dir, "--perf-" + name.replace("_", "-")
            if value in (None, ""):
                value, base, where = getini("perf_" + name), ini_dir, f"perf_{name} (ini)"
            if value not in (None, "", []):
                value = str(value).strip()
                values[name] = resolved(base / Path(value).expanduser()) if name in PATHS else value
                origin[name] = where
        return cls(**values, origin=origin)

    def problems(self) -> list[str]:
        """One line per setting that cannot work, else the first failure of the model's files (cfg or ONNX,
        weights, names, ONNX against the cfg), the video's, the ground truth's; []: all is well. No torch."""
        out = [f"{self.origin[name]}: cannot open '{path}': {why}"
               for name in PATHS if (path := getattr(self, name)) is not None and (why := _not_a_file(path))]
        if self.weights is not None and self.cfg is None:
            out.append(f"{self.origin['weights']}: weights need the Darknet cfg they belong to: give --perf-cfg")
        if self.ground_truth is not None and self.video is None:  # the synthetic video's own labels were scored
            out.append(f"{self.origin['ground_truth']}: a ground truth labels the video it belongs to: give "
                       "--perf-video")
        if self.engine is not None and self.cfg is None and self.onnx is None:
            out.append(f"{self.origin['engine']}: a prebuilt engine needs the model it was built from (its "
                       "input size and classes, and the reference): give --perf-cfg or --perf-onnx")
        if self.engine_precision is not None and self.engine_precision not in PRECISIONS:
            out.append(f"{self.origin['engine_precision']}: {self.engine_precision!r}; expected one of "
                       f"{', '.join(PRECISIONS)}")
        elif self.engine_precision is not None and self.engine is None:  # else ignored: no engine is loaded
            out.append(f"{self.origin['engine_precision']}: the precision a prebuilt engine was built as, and no "
                       "engine is given: give --perf-engine")
        if (min_map := self.min_map) is not None and _error(lambda: fraction(min_map), ArgumentTypeError):
            out.append(f"{self.origin['min_map']}: {min_map!r}; expected a number from 0 to 1")
        if out:
            return out
        spec = self.model_spec(Path("."))
        model = None if self.shipped_model else "cfg" if self.cfg is not None else "onnx"
        steps: list[tuple[Any, Callable[[], object]]] = [
            (model, lambda: spec.input_size), (self.weights and "weights", lambda: _finite_weights(spec)),
            (self.names and "names", lambda: spec.names), (self.cfg and self.onnx and "onnx", spec.onnx_path)]
        # the first failure of the model's chain
        out = next(([f"{self.origin[key]}: {error}"] for key, check in steps if key and (error := _error(check))), [])
        if self.engine is not None and self.engine.stat().st_size == 0:  # else only TensorRT says so, test by test
            out.append(f"{self.origin['engine']}: cannot read TensorRT engine '{self.engine}': the file is empty "
                       "(0 bytes)")
        video = self._user_video
        if bad := video is not None and _error(lambda: open_video(video.path).close()):
            out.append(f"{self.origin['video']}: {bad}")
        error = _error(lambda: self._ground_truth)  # loaded (and checked) once, for `warnings` too
        if error is None and not bad and video is not None and (data := self._ground_truth) is not None:
            error = _error(lambda: check_labels(data, video.ground_truth, video.path))  # labels frames it has
        if error:
            out.append(f"{self._ground_truth_origin}: {error}")
        return out

    def warnings(self) -> list[str]:
        """One line per setting that works but is likely wrong (ground-truth categories that are not the
        model's class names); call after `problems` is empty."""
        data, video = self._ground_truth, self._user_video
        if data is None or video is None:
            return []
        fix = "give the class names it lists, in category-id order (--perf-names)"
        error = _error(lambda: check_categories(data, self.model_spec(Path(".")).names, video.ground_truth, fix=fix))
        return [] if error is None else [f"{self._ground_truth_origin}: {error}; the accuracy figures score category "
                                         "id k + 1 as class k"]  # fmt: skip

    @property
    def _user_video(self) -> VideoCase | None:
        """The user's video and its ground truth, or None for the synthetic video."""
        return self.video_case(lambda: None)

    @functools.cached_property
    def _ground_truth(self) -> dict[str, Any] | None:
        """The user video's ground truth, read and checked (DetectorError names the file), or None."""
        video = self._user_video
        return None if video is None or video.ground_truth is None else load_ground_truth(video.ground_truth)

    @property
    def _ground_truth_origin(self) -> str:
        return self.origin.get("ground_truth", f"{self.origin.get('video', '--perf-video')} (its ground truth)")

    @property
    def shipped_model(self) -> bool:
        """True when no model setting was given: the shipped cfg and weights are measured."""
        return self.cfg is None and self.onnx is None

    @property
    def onnx_only(self) -> bool:
        """True when the model is an ONNX file without a Darknet cfg (which the torch backends need)."""
        return self.cfg is None and self.onnx is not None

    def model_spec(self, cache_dir: Path) -> ModelSpec:
        """The model under test, with derived files cached in ``cache_dir``."""
        extra = {"onnx": self.onnx, "engine": self.engine, "names_file": self.names, "cache_dir": cache_dir,
                 "engine_precision": self.engine_precision or "fp16"}  # fmt: skip
        if self.shipped_model:
            return dataclasses.replace(ModelSpec.default(), **extra)
        return ModelSpec(cfg=self.cfg, weights=self.weights, **extra)

    def video_case(self, synthetic: Callable[[], T]) -> VideoCase | T:
        """The user's video with its ground truth (given, else ``<stem>.json`` beside it), or synthetic()."""
        if self.video is None:
            return synthetic()
        beside = self.video.with_suffix(".json")
        return VideoCase(self.video, self.ground_truth or (beside if beside.is_file() else None), None)

    def min_map50(self) -> float | None:
        """The reference's mAP@0.5 floor: ``min_map``, else the shipped model's, else None (no check)."""
        return float(self.min_map) if self.min_map is not None else SHIPPED_MIN_MAP50 if self.shipped_model else None

    def identity(self, spec: ModelSpec, *, synthetic_frames: int, precisions: Iterable[str],
                 backends: Iterable[str] = ()) -> dict[str, Any]:  # fmt: skip
        """What a saved run measured: its files by digest (the synthetic video by its parameters), frames ``"all"``."""
        video = self.video_case(lambda: VideoCase(Path(f"synthetic seed {SYNTHETIC_SEED}"), None, synthetic_frames))
        names = None if _error(lambda: spec.names) else list(spec.names)  # None: a names file refused at start-up
        weights = f"sha256:{_digest(spec.weights)}" if spec.weights is not None else f"seed:{spec.seed}"
        return {
            "model": one_line(spec.model_file.name), "cfg_sha256": _digest(spec.cfg),
            "weights": weights if spec.cfg is not None else None,
            "onnx_sha256": _digest(spec.onnx), "engine_sha256": _digest(spec.engine),
            "input_size": "x".join(str(v) for v in reversed(spec.input_size)), "classes": spec.num_classes,
            "video": one_line(video.path.name),  # escaped: saved runs hold text (a name not UTF-8 is none)
            "video_sha256": _digest(video.path) if self.video is not None else "synthetic",
            "frames": video.frames if video.frames is not None else "all",
            "ground_truth_sha256": _digest(video.ground_truth),
            "precisions": list(precisions), "backends": list(backends), "class_names": names,
        } | ({"engine_precision": spec.engine_precision} if spec.engine is not None else {})  # fmt: skip


def describe_subject(identity: Mapping[str, Any] | None, fingerprint: Mapping[str, Any] | None = None,
                     machine: str | None = None) -> dict[str, str]:  # fmt: skip
    """What every report is about, one text per field, from ``machine_info["perf_subject"]`` (None: an older run,
    model "<not recorded>"), the fingerprint ``machine_info["perf"]`` and the host ``machine``."""
    ident, fp = dict(identity or {}), dict(fingerprint or {})
    out = {"model": NOT_RECORDED}
    if ident:
        files = ("cfg_sha256", "weights", "onnx_sha256", "engine_sha256")
        digests = ", ".join(f"{key.replace('_', ' ')} {ident[key]}" for key in files if ident.get(key))
        out["model"] = f"{ident.get('model', '?')}" + (f" ({digests})" if digests else "")
        out["input size"] = f"{ident.get('input_size', '?')} px"
        count, names = ident.get("classes"), ident.get("class_names")
        names = names if isinstance(names, list) else []
        more = f", ... ({len(names) - SHOWN_NAMES} more)" if len(names) > SHOWN_NAMES else ""
        shown = f": {', '.join(map(str, names[:SHOWN_NAMES]))}{more}" if names else ""
        out["classes"] = f"{count if count is not None else len(names) or '?'}{shown}"
        sha, frames = ident.get("video_sha256"), ident.get("frames")
        video = "synthetic" if sha == "synthetic" else f"sha256 {sha}"
        out["video"] = f"{ident.get('video', '?')} ({video}), {frames} frames"
        out |= {key: ", ".join(map(str, ident[key])) for key in ("backends", "precisions") if ident.get(key)}
    device = str(fp.get("device") or "")
    where = fp.get("cpu_model") if device == "cpu" else fp.get("gpu_name")
    if device or where:
        out["device"] = device + (f" ({where})" if where else "")
    return out | ({"machine": machine} if machine else {})


def subject_line(identity: Mapping[str, Any] | None) -> str:
    """The subject in one line: ``model320.cfg 320x320, 3 classes, clip.mp4 (all frames)``."""
    if not identity:
        return f"model {NOT_RECORDED}"
    return (f"{identity.get('model', '?')} {identity.get('input_size', '?')}, {identity.get('classes', '?')} "
            f"classes, {identity.get('video', '?')} ({identity.get('frames')} frames)")


def subject_markdown(described: Mapping[str, str]) -> str:
    """`describe_subject`'s fields as a markdown list under a "Subject" heading (the reports' first lines)."""
    return "\n".join(["### Subject", "", *(f"- {key}: {value}" for key, value in described.items()), ""])


def subject_differences(saved: Mapping[str, Any] | None, current: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, saved, current) for each `COMPARED` field where two identities disagree; [] if none saved."""
    return [(key, saved.get(key, NOT_RECORDED), current.get(key))
            for key in COMPARED if saved.get(key) != current.get(key)] if saved else []


def _not_a_file(path: Path) -> str | None:
    """Why ``path`` cannot be opened as a regular file (a FIFO would block its reader); None when it is one."""
    try:
        kind = file_kind(path.stat())
    except OSError as e:  # missing, a folder on the way that cannot be searched, a link loop
        return "a symbolic link loop (too many levels of symbolic links)" if symlink_loop(path) else os_reason(e)
    return None if kind is None else f"it is {kind}, not a regular file"


def _digest(path: Path | None) -> str | None:
    """The first 16 hex digits of the file's sha256 (once per file version), None without a file."""
    return None if path is None else file_digest(path)[:16]


def _finite_weights(spec: ModelSpec) -> None:
    """The weights' header and size (`ModelSpec.check_files`), then every value finite (read, without torch): NaN
    weights failed every test of the run, each with its own WeightsError."""
    from detector.darknet import read_weights

    spec.check_files()
    read_weights(spec.weights, spec.net)  # type: ignore[arg-type]


def _error(check: Callable[[], object], errors: type[Exception] = DetectorError) -> str | None:
    """The message of the error of ``errors`` that ``check()`` raises, or None when it raises none."""
    try:
        check()
    except errors as e:
        return str(e)
    return None
