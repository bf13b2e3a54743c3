"""What the suite measures -- the model and the video -- from its options or ini settings, and their identity.

Each ``perf_<name>`` ini setting is overridden by its ``--perf-<name>`` option (docs/options.md); relative paths
are taken from where pytest started (options) or the ini file's folder. Every saved run records
`Subject.identity` under ``machine_info["perf_subject"]``; `subject_differences` is what the compares refuse."""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from detector.devices import PRECISIONS

if TYPE_CHECKING:
    from detector.spec import ModelSpec

PATHS = ("cfg", "weights", "names", "onnx", "engine", "video", "ground_truth")
#: The shipped model's floor: catches broken pre/post-processing or weights (random weights score ~0).
SHIPPED_MIN_MAP50 = 0.50
#: Identity fields that make two runs incomparable (the rest is recorded only).
COMPARED = ("model", "cfg_sha256", "weights", "onnx_sha256", "engine_sha256", "input_size", "classes", "video",
            "video_sha256", "frames")  # fmt: skip
NOT_RECORDED = "<not recorded>"
#: The synthetic video the suite makes when no --perf-video is given (frames: --perf-frames).
SYNTHETIC_SEED = 7


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
        """Each setting from its option, else its ini value; relative paths resolved as the module says."""
        values: dict[str, Any] = {}
        origin: dict[str, str] = {}
        for name in (field.name for field in dataclasses.fields(cls) if field.name != "origin"):
            value, base = getoption("perf_" + name), invocation_dir
            where = "--perf-" + name.replace("_", "-")
            if value in (None, ""):
                value, base, where = getini("perf_" + name), ini_dir, f"perf_{name} (ini)"
            if value in (None, "", []):
                continue
            value = str(value).strip()
            values[name] = (base / Path(value).expanduser()).resolve() if name in PATHS else value
            origin[name] = where
        return cls(**values, origin=origin)

    # -- checks before anything heavy -------------------------------------------------------------------------
    def problems(self) -> list[str]:
        """One line per setting that cannot work (a missing file, weights without a cfg, an engine without its
        model, a bad precision or floor), then per file that cannot be used (`_file_problems`); [] when all is well."""
        out = []
        for name in PATHS:
            path = getattr(self, name)
            if path is not None and not path.is_file():
                problem = "is a directory" if path.is_dir() else "no such file"
                out.append(f"{self.origin[name]}: cannot open '{path}': {problem}")
        if self.weights is not None and self.cfg is None:
            out.append(f"{self.origin['weights']}: weights need the Darknet cfg they belong to: give --perf-cfg")
        if self.engine is not None and self.cfg is None and self.onnx is None:
            out.append(f"{self.origin['engine']}: a prebuilt engine needs the model it was built from (its input "
                       "size and classes, and the reference): give --perf-cfg or --perf-onnx")
        if self.engine_precision is not None and self.engine_precision not in PRECISIONS:
            out.append(f"{self.origin['engine_precision']}: {self.engine_precision!r}; expected one of "
                       f"{', '.join(PRECISIONS)}")
        if self.min_map is not None and not _fraction(self.min_map):
            out.append(f"{self.origin['min_map']}: {self.min_map!r}; expected a number from 0 to 1")
        if not out:
            out += self._file_problems()
        return out

    def _file_problems(self) -> list[str]:
        """What the files get wrong, the first failure of the model's chain (cfg or ONNX, weights, names, ONNX
        against the cfg), then the video and the ground truth; no torch is imported."""
        from detector.errors import DetectorError

        out: list[str] = []
        spec = self.model_spec(Path("."))
        steps: list[tuple[str, Callable[[], object]]] = []
        if not self.shipped_model:
            steps.append(("cfg" if self.cfg is not None else "onnx", lambda: spec.input_size))
        if self.weights is not None:
            steps.append(("weights", spec.check_files))
        if self.names is not None:
            steps.append(("names", lambda: spec.names))
        if self.onnx is not None and self.cfg is not None:
            steps.append(("onnx", spec.onnx_path))
        for key, check in steps:
            try:
                check()
            except DetectorError as e:
                out.append(f"{self.origin[key]}: {e}")
                break
        video = self._user_video
        if video is not None:
            from detector.video import open_video

            try:
                open_video(video.path).close()
            except DetectorError as e:
                out.append(f"{self.origin['video']}: {e}")
        try:
            self._ground_truth  # noqa: B018 -- loaded (and checked) once, for `warnings` too
        except DetectorError as e:
            out.append(f"{self._ground_truth_origin}: {e}")
        return out

    def warnings(self) -> list[str]:
        """One line per setting that works but is likely wrong (ground-truth categories that are not the model's
        class names); call after `problems` is empty."""
        from detector.errors import DetectorError
        from detector.groundtruth import check_categories

        data, video = self._ground_truth, self._user_video
        if data is None or video is None:
            return []
        try:
            check_categories(data, self.model_spec(Path(".")).names, video.ground_truth,
                             fix="give the class names it lists, in category-id order (--perf-names)")  # fmt: skip
        except DetectorError as e:
            return [f"{self._ground_truth_origin}: {e}; the accuracy figures score category id k + 1 as class k"]
        return []

    @property
    def _user_video(self) -> VideoCase | None:
        """The user's video and its ground truth (given, or found beside it), or None for the synthetic video."""
        return None if self.video is None else self.video_case(lambda: VideoCase(Path(), None, None))

    @functools.cached_property
    def _ground_truth(self) -> dict[str, Any] | None:
        """The user video's ground truth, read and checked once (DetectorError names the file); None without one."""
        from detector.groundtruth import load_ground_truth

        video = self._user_video
        return None if video is None or video.ground_truth is None else load_ground_truth(video.ground_truth)

    @property
    def _ground_truth_origin(self) -> str:
        return self.origin.get("ground_truth", f"{self.origin.get('video', '--perf-video')} (its ground truth)")

    # -- what the fixtures use --------------------------------------------------------------------------------
    @property
    def shipped_model(self) -> bool:
        """True when no model setting was given: the shipped cfg and weights are measured."""
        return self.cfg is None and self.onnx is None

    @property
    def onnx_only(self) -> bool:
        """True when the model is an ONNX file without a Darknet cfg (the torch backends cannot run it)."""
        return self.cfg is None and self.onnx is not None

    def model_spec(self, cache_dir: Path) -> ModelSpec:
        """The model under test, with derived files cached in ``cache_dir``."""
        from detector.spec import ModelSpec

        extra = {"onnx": self.onnx, "engine": self.engine, "engine_precision": self.engine_precision or "fp16",
                 "names_file": self.names, "cache_dir": cache_dir}  # fmt: skip
        if self.shipped_model:
            return dataclasses.replace(ModelSpec.default(), **extra)
        return ModelSpec(cfg=self.cfg, weights=self.weights, **extra)

    def video_case(self, synthetic: Callable[[], VideoCase]) -> VideoCase:
        """The user's video with its ground truth (given, else ``<stem>.json`` beside it), else ``synthetic()``."""
        if self.video is None:
            return synthetic()
        beside = self.video.with_suffix(".json")
        return VideoCase(self.video, self.ground_truth or (beside if beside.is_file() else None), None)

    def min_map50(self) -> float | None:
        """The reference's mAP@0.5 floor: ``min_map`` if given, else the shipped model's, else None (no check)."""
        if self.min_map is not None:
            return float(self.min_map)
        return SHIPPED_MIN_MAP50 if self.shipped_model else None

    # -- identity ---------------------------------------------------------------------------------------------
    def identity(self, spec: ModelSpec, *, synthetic_frames: int, precisions: Iterable[str],
                 backends: Iterable[str] = ()) -> dict[str, Any]:  # fmt: skip
        """What a saved run measured: model files by digest, input size, classes, the video by digest (the synthetic
        one by its parameters) and its frames (``"all"``: a whole user video), ground truth, backends, precisions."""
        model = spec.model_file
        video = self.video_case(lambda: VideoCase(Path(f"synthetic seed {SYNTHETIC_SEED}"), None, synthetic_frames))
        out: dict[str, Any] = {
            "model": model.name,
            "cfg_sha256": _digest(spec.cfg) if spec.cfg is not None else None,
            "weights": (f"sha256:{_digest(spec.weights)}" if spec.weights is not None else f"seed:{spec.seed}")
            if spec.cfg is not None else None,
            "onnx_sha256": _digest(spec.onnx) if spec.onnx is not None else None,
            "engine_sha256": _digest(spec.engine) if spec.engine is not None else None,
            "input_size": "x".join(str(v) for v in reversed(spec.input_size)),
            "classes": spec.num_classes,
            "video": video.path.name,
            "video_sha256": _digest(video.path) if self.video is not None else "synthetic",
            "frames": video.frames if video.frames is not None else "all",
            "ground_truth_sha256": _digest(video.ground_truth) if video.ground_truth is not None else None,
            "precisions": list(precisions),
            "backends": list(backends),
            "class_names": _class_names(spec),
        }
        if spec.engine is not None:
            out["engine_precision"] = spec.engine_precision
        return out


#: Class names shown in full up to this many; a longer list is shortened to its first ones and a count.
SHOWN_NAMES = 8


def describe_subject(identity: Mapping[str, Any] | None, fingerprint: Mapping[str, Any] | None = None,
                     machine: str | None = None) -> dict[str, str]:  # fmt: skip
    """What every report is about, one text per field: model, input size, classes, video, backends, precisions,
    device, machine; from ``machine_info["perf_subject"]`` (None: an older run, model "<not recorded>"), the
    fingerprint ``machine_info["perf"]`` and the host ``machine``."""
    ident = dict(identity or {})
    fp = dict(fingerprint or {})
    out: dict[str, str] = {}
    if not ident:
        out["model"] = NOT_RECORDED
    else:
        files = (("cfg_sha256", "cfg sha256"), ("weights", "weights"), ("onnx_sha256", "onnx sha256"),
                 ("engine_sha256", "engine sha256"))  # fmt: skip
        digests = ", ".join(f"{label} {ident[key]}" for key, label in files if ident.get(key))

        out["model"] = f"{ident.get('model', '?')}" + (f" ({digests})" if digests else "")
        out["input size"] = f"{ident.get('input_size', '?')} px"
        out["classes"] = _classes_text(ident.get("classes"), ident.get("class_names"))
        video = "synthetic" if ident.get("video_sha256") == "synthetic" else f"sha256 {ident.get('video_sha256')}"
        frames = ident.get("frames")
        out["video"] = (f"{ident.get('video', '?')} ({video}), " +
                        ("all frames" if frames == "all" else f"{frames} frames"))  # fmt: skip
        if ident.get("backends"):
            out["backends"] = ", ".join(map(str, ident["backends"]))
        if ident.get("precisions"):
            out["precisions"] = ", ".join(map(str, ident["precisions"]))
    device = str(fp.get("device") or "")
    where = fp.get("cpu_model") if device == "cpu" else fp.get("gpu_name")
    if device or where:
        out["device"] = device + (f" ({where})" if where else "")
    if machine:
        out["machine"] = machine
    return out


def subject_line(identity: Mapping[str, Any] | None) -> str:
    """The subject in one line: ``model320.cfg 320x320, 3 classes, clip.mp4 (all frames)`` (or not recorded)."""
    if not identity:
        return f"model {NOT_RECORDED}"
    frames = identity.get("frames")
    return (f"{identity.get('model', '?')} {identity.get('input_size', '?')}, {identity.get('classes', '?')} classes, "
            f"{identity.get('video', '?')} ({'all' if frames == 'all' else frames} frames)")


def subject_markdown(described: Mapping[str, str]) -> str:
    """`describe_subject`'s fields as a markdown list under a "Subject" heading (the reports' first lines)."""
    return "\n".join(["### Subject", "", *(f"- {key}: {value}" for key, value in described.items()), ""])


def _classes_text(count: Any, names: Any) -> str:
    if not isinstance(names, list) or not names:
        return str(count if count is not None else "?")
    shown = ", ".join(map(str, names[:SHOWN_NAMES]))
    more = f", ... ({len(names) - SHOWN_NAMES} more)" if len(names) > SHOWN_NAMES else ""
    return f"{count if count is not None else len(names)}: {shown}{more}"


def _class_names(spec: ModelSpec) -> list[str] | None:
    """The model's class names, or None where they cannot be read (a names file the start-up checks refuse)."""
    from detector.errors import DetectorError

    try:
        return list(spec.names)
    except DetectorError:
        return None


def subject_differences(saved: Mapping[str, Any] | None, current: Mapping[str, Any]) -> list[tuple[str, Any, Any]]:
    """(field, saved, current) for each `COMPARED` field on which two identities disagree; [] when none saved."""

    if not saved:
        return []
    return [(f, saved.get(f, NOT_RECORDED), current.get(f)) for f in COMPARED if saved.get(f) != current.get(f)]


def subject_mismatch_message(differences: list[tuple[str, Any, Any]], saved_run: Mapping[str, Any], location: str,
                             *, allowed: bool, option: str) -> str:  # fmt: skip
    """Explain `subject_differences` between a saved run (its JSON) and this run, one field a line."""
    from perf.runs import mismatch_lines

    lines = mismatch_lines(differences, saved_run, location, option, "measured another model or video")
    if allowed:
        lines.append("Comparing anyway (--perf-allow-model-mismatch); the figures measure different things.")
    else:
        lines.append("Figures of another model or video are not a regression signal: record a baseline of this "
                     "one, or pass --perf-allow-model-mismatch to compare anyway.")
    return "\n".join(lines)


def _digest(path: Path) -> str:
    """The first 16 hex digits of the file's sha256 (`detector.fileio.file_digest`: once per file version)."""
    from detector.fileio import file_digest

    return file_digest(path)[:16]


def _fraction(text: str) -> bool:
    try:
        return 0.0 <= float(text) <= 1.0
    except ValueError:
        return False
