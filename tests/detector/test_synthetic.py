"""The synthetic video: determinism, COCO ground truth, scene behaviour, and its cross-process cache."""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import logging
import multiprocessing
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from detector.errors import VideoError
from detector.synthetic import (
    GENERATOR_VERSION,
    MIN_VISIBLE_PX,
    SyntheticVideo,
    make_synthetic_video,
    render_frames,
    synthetic_video,
)
from detector.video import open_video, read_frames

W, H, N = 320, 180, 12
SMALL = dict(width=W, height=H, frames=N)


@pytest.fixture(scope="module")
def short(tmp_path_factory: pytest.TempPathFactory) -> SyntheticVideo:
    return make_synthetic_video(tmp_path_factory.mktemp("a") / "short.mp4", seed=7, **SMALL)


@pytest.fixture(scope="module")
def long_run() -> list[list[dict[str, Any]]]:
    """Annotations of 400 frames of seed 3 at 320x180 (rendered, not encoded)."""
    return [boxes for _, boxes in render_frames(3, W, H, 400)]


def test_same_seed_gives_same_ground_truth_and_frames(short: SyntheticVideo, tmp_path: Path) -> None:
    again = make_synthetic_video(tmp_path / "short.mp4", seed=7, **SMALL)
    assert again.gt_json.read_bytes() == short.gt_json.read_bytes()
    for a, b in zip(read_frames(short.video), read_frames(again.video), strict=True):
        assert np.array_equal(a, b)


def test_different_seeds_give_different_videos(short: SyntheticVideo, tmp_path: Path) -> None:
    other = make_synthetic_video(tmp_path / "short.mp4", seed=8, **SMALL)
    assert other.load_ground_truth()["annotations"] != short.load_ground_truth()["annotations"]
    assert not np.array_equal(read_frames(other.video, limit=1)[0], read_frames(short.video, limit=1)[0])


def test_video_reads_back_with_its_size_fps_and_frame_count(short: SyntheticVideo) -> None:
    with open_video(short.video) as reader:
        assert (reader.width, reader.height, reader.frame_count) == (W, H, N)
        assert reader.fps == pytest.approx(30)
        assert len(list(reader)) == N


def test_ground_truth_is_coco_with_one_image_per_frame(short: SyntheticVideo) -> None:
    gt = short.load_ground_truth()
    assert short.gt_json == short.video.with_suffix(".json")
    assert gt["categories"] == [{"id": 1, "name": "person"}, {"id": 2, "name": "vehicle"}]
    assert [im["id"] for im in gt["images"]] == list(range(1, N + 1))
    assert gt["images"][3] == {"id": 4, "file_name": "short#3", "width": W, "height": H}
    assert gt["info"]["generator_version"] == GENERATOR_VERSION
    assert gt["info"]["params"] == short.params.as_dict() and short.params.seed == 7
    anns = gt["annotations"]
    assert anns and [a["id"] for a in anns] == list(range(1, len(anns) + 1))
    for a in anns:
        x, y, w, h = a["bbox"]
        assert 1 <= a["image_id"] <= N and a["category_id"] in (1, 2) and a["iscrowd"] == 0
        assert a["area"] == pytest.approx(w * h, rel=1e-3) and all(isinstance(v, float) for v in a["bbox"])


def test_ground_truth_loads_in_pycocotools(short: SyntheticVideo) -> None:
    coco = pytest.importorskip("pycocotools.coco")
    with contextlib.redirect_stdout(io.StringIO()):
        gt = coco.COCO(str(short.gt_json))
    assert sorted(gt.getCatIds()) == [1, 2] and len(gt.getImgIds()) == N


def test_boxes_lie_inside_the_frame_and_are_at_least_4_px(long_run: list) -> None:
    for boxes in long_run:
        for a in boxes:
            x, y, w, h = a["bbox"]
            assert x >= 0 and y >= 0 and x + w <= W + 1e-6 and y + h <= H + 1e-6
            assert w >= MIN_VISIBLE_PX - 1e-6 and h >= MIN_VISIBLE_PX - 1e-6
            assert 0 <= a["occlusion"] <= 1


def test_both_categories_occur_with_their_shapes(long_run: list) -> None:
    whole = defaultdict(list)  # boxes not cut by an edge: persons taller than wide, vehicles wider than tall
    for boxes in long_run:
        for a in boxes:
            x, y, w, h = a["bbox"]
            if x > 0 and y > 0 and x + w < W and y + h < H:
                whole[a["category_id"]].append(h / w)
    assert len(whole[1]) > 50 and len(whole[2]) > 50
    assert min(whole[1]) > 1.8 and max(whole[2]) < 0.6


def test_about_3_to_10_objects_are_in_view(long_run: list) -> None:
    counts = np.array([len(boxes) for boxes in long_run])
    assert counts.max() <= 12 and 3 <= counts.mean() <= 10


def test_sizes_range_from_small_to_large(long_run: list) -> None:
    heights = [a["bbox"][3] for boxes in long_run for a in boxes if a["bbox"][1] > 0 and a["bbox"][1] + a["bbox"][3] < H]
    assert min(heights) < 24 and max(heights) > 0.25 * H


def test_objects_enter_and_leave_through_the_edges(long_run: list) -> None:
    tracks: dict[int, list[tuple[int, list[float]]]] = defaultdict(list)
    for t, boxes in enumerate(long_run):
        for a in boxes:
            tracks[a["track_id"]].append((t, a["bbox"]))

    def at_edge(box: list[float]) -> bool:
        x, y, w, h = box
        return x <= 0 or y <= 0 or x + w >= W - 1e-6 or y + h >= H - 1e-6

    entered = [seen for seen in tracks.values() if seen[0][0] > 0 and at_edge(seen[0][1])]
    left = [seen for seen in tracks.values() if seen[-1][0] < len(long_run) - 1 and at_edge(seen[-1][1])]
    assert len(entered) >= 3 and len(left) >= 3


def test_frames_change_over_time_and_prefix_does_not_depend_on_length() -> None:
    short = list(render_frames(5, W, H, 4))
    longer = list(itertools.islice(render_frames(5, W, H, None), 12))
    for (a, boxes_a), (b, boxes_b) in zip(short, longer):
        assert np.array_equal(a, b) and boxes_a == boxes_b
    frame, _ = longer[-1]
    assert frame.shape == (H, W, 3) and frame.dtype == np.uint8
    assert np.abs(frame.astype(int) - short[0][0]).mean() > 2


@pytest.mark.parametrize(
    "params, message",
    [({"width": 321}, "width"), ({"height": 32}, "height"), ({"frames": 0}, "frames"), ({"seed": -1}, "seed"),
     ({"fps": 0}, "fps"), ({"codec": "h264x"}, "codec")],
)
def test_bad_parameters_are_rejected(tmp_path: Path, params: dict, message: str) -> None:
    with pytest.raises(VideoError, match=message):
        make_synthetic_video(tmp_path / "x.mp4", **{**SMALL, **params})
    assert list(tmp_path.iterdir()) == []


def test_json_or_bare_path_is_rejected(tmp_path: Path) -> None:
    for name in ("x.json", "x"):
        with pytest.raises(VideoError, match="suffix"):
            make_synthetic_video(tmp_path / name, **SMALL)


def test_cache_returns_same_files_without_regenerating(tmp_path: Path) -> None:
    first = synthetic_video(tmp_path, seed=2, **SMALL)
    stamps = (first.video.stat().st_mtime_ns, first.gt_json.stat().st_mtime_ns)
    second = synthetic_video(tmp_path, seed=2, **SMALL)
    assert second == first
    assert (second.video.stat().st_mtime_ns, second.gt_json.stat().st_mtime_ns) == stamps
    assert synthetic_video(tmp_path, seed=3, **SMALL).video != first.video


@pytest.mark.parametrize("damage", ["no json", "empty video", "no video", "foreign json", "bad json"])
def test_cache_rebuilds_an_incomplete_entry(tmp_path: Path, damage: str) -> None:
    entry = synthetic_video(tmp_path, seed=2, **SMALL)
    good = entry.gt_json.read_bytes()
    if damage == "no json":
        entry.gt_json.unlink()
    elif damage == "empty video":
        entry.video.write_bytes(b"")
    elif damage == "no video":
        entry.video.unlink()
    elif damage == "foreign json":
        gt = json.loads(good)
        gt["info"]["generator_version"] = -1
        entry.gt_json.write_text(json.dumps(gt))
    else:
        entry.gt_json.write_text("{")
    rebuilt = synthetic_video(tmp_path, seed=2, **SMALL)
    assert rebuilt == entry and rebuilt.gt_json.read_bytes() == good
    assert len(read_frames(rebuilt.video)) == N


def _ask_cache(cache_dir: str, log_path: str, barrier: Any, results: Any) -> None:
    """Child process: wait for the other, then ask for the same cache entry; log builds to ``log_path``."""
    logging.basicConfig(filename=log_path, level=logging.INFO, format="%(process)d %(message)s")
    barrier.wait(timeout=60)
    entry = synthetic_video(cache_dir, seed=11, width=W, height=H, frames=30)
    with open_video(entry.video) as reader:
        frames = sum(1 for _ in reader)
    results.put((str(entry.video), str(entry.gt_json), frames, len(entry.load_ground_truth()["images"])))


def test_two_processes_build_a_cache_entry_once(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    barrier, results = ctx.Barrier(2), ctx.Queue()
    logs = [tmp_path / f"worker{i}.log" for i in range(2)]
    workers = [ctx.Process(target=_ask_cache, args=(str(tmp_path / "cache"), str(log), barrier, results))
               for log in logs]
    for worker in workers:
        worker.start()
    got = [results.get(timeout=120) for _ in workers]
    for worker in workers:
        worker.join(timeout=60)
        assert worker.exitcode == 0
    assert got[0] == got[1] and got[0][2:] == (30, 30)
    builds = sum(log.read_text().count("building synthetic video cache entry") for log in logs if log.exists())
    assert builds == 1
    assert sorted(p.suffix for p in (tmp_path / "cache").iterdir()) == [".json", ".mp4"]  # no lock file left


def _scene_with(actors: list[tuple[int, float, float, float, float]]) -> list[dict[str, Any]]:
    """Annotations of one frame of a 320x180 scene holding only ``actors``: (kind, x, y, height, aspect) each,
    x and y the bottom centre in pixels; a vehicle is a bus, drawn nearer than anything with a smaller y."""
    from detector.synthetic import PERSON, _Actor, _Scene

    scene = _Scene(np.random.default_rng(0), W, H)
    person = dict(skin=(150, 180, 230), hair=(20, 20, 20), shirt=(40, 40, 200), pants=(60, 60, 60), dress=False,
                  head=1.0)
    bus = dict(type=2, paint=(40, 40, 190), glass=(90, 70, 50), hub=(160, 160, 160))
    scene.actors = [_Actor(kind, track, x, y, h, aspect, 0.01, 0.0, 0.0, person if kind == PERSON else bus)
                    for track, (kind, x, y, h, aspect) in enumerate(actors, start=1)]
    return scene.render(0)[1]


def test_an_object_hidden_behind_a_nearer_one_has_no_box() -> None:
    from detector.synthetic import PERSON, VEHICLE

    # the bus spans x 10-250, y 70-150 (its body down to y 136); the person's box x 92-108, y 80-120 lies inside
    boxes = _scene_with([(PERSON, 100.0, 120.0, 40.0, 0.4), (VEHICLE, 130.0, 150.0, 80.0, 3.0)])
    assert [(a["category_id"], a["track_id"]) for a in boxes] == [(VEHICLE, 2)]
    alone = _scene_with([(PERSON, 100.0, 120.0, 40.0, 0.4)])
    assert [(a["category_id"], a["occlusion"]) for a in alone] == [(PERSON, 0.0)]
    assert alone[0]["bbox"] == pytest.approx([92.0, 80.0, 16.0, 40.0])


def test_a_partly_hidden_object_keeps_its_whole_box_and_its_hidden_fraction() -> None:
    from detector.synthetic import PERSON, VEHICLE

    # the person stands astride the bus's right edge (x 250): its left half is behind the bus
    boxes = _scene_with([(PERSON, 250.0, 120.0, 40.0, 0.4), (VEHICLE, 130.0, 150.0, 80.0, 3.0)])
    person = next(a for a in boxes if a["category_id"] == PERSON)
    assert person["bbox"] == pytest.approx([242.0, 80.0, 16.0, 40.0])
    assert 0.3 < person["occlusion"] < 0.7
    bus = next(a for a in boxes if a["category_id"] == VEHICLE)
    assert bus["occlusion"] == 0.0


def test_cache_rebuilds_a_video_its_user_cannot_read(tmp_path: Path) -> None:
    """An entry whose video the user cannot read (chmod 000; as root, run under ``unshare --user``) is rebuilt, as a
    damaged one is, not handed to every reader to fail on."""
    from bad_inputs import unprivileged_prefix

    if (prefix := unprivileged_prefix()) is None:
        pytest.skip("root, and no user namespace (unshare --user) to drop it")
    entry = synthetic_video(tmp_path, seed=2, **SMALL)
    entry.video.chmod(0)
    code = ("from detector.synthetic import synthetic_video; from detector.video import read_frames; "
            f"print(len(read_frames(synthetic_video({str(tmp_path)!r}, seed=2, **{SMALL!r}).video)))")
    result = subprocess.run([*prefix, sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert (result.returncode, result.stdout.strip()) == (0, str(N)), result.stderr[-2000:]
