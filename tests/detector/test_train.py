"""Tests of detector.train: data, augmentation, loss, schedule, the train/eval commands (CPU, small sizes)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from detector.boxes import Letterbox
from detector.darknet import parse_cfg
from detector.errors import DetectorError
from detector.model import DarknetModel, default_cfg_path, load_model
from detector.preprocess import preprocess
from detector.train.augment import AugmentParams, augment_batch, warp
from detector.train.data import DataParams, check_training_seeds, frameset_from_seeds, render_seed
from detector.train.loop import ModelEMA, lr_at
from detector.train.loss import YoloLoss, bbox_iou, init_head_biases

NET = (416, 416)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny convolutions: one intra-op thread is as fast, and immune to OpenMP spin-waiting when other
    processes (xdist workers) share the cores."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


STOCK_ANCHORS = "anchors = 10,14,  23,27,  37,58,  81,82,  135,169,  344,319"


@pytest.fixture(scope="module")
def cfg(tmp_path_factory):
    """The shipped layout with Darknet's stock COCO anchors and masks (3,4,5 / 1,2,3), whose anchor 0 no head
    uses: the assignment cases below are worked out for those numbers."""
    text = default_cfg_path().read_text()
    shipped = parse_cfg(default_cfg_path())
    anchors_line = "anchors = " + ",  ".join(f"{w:g},{h:g}" for w, h in shipped.yolo_layers[0][1].anchors)
    path = tmp_path_factory.mktemp("cfg") / "stock-anchors.cfg"
    path.write_text(text.replace("mask = 0,1,2", "mask = 1,2,3").replace(anchors_line, STOCK_ANCHORS))
    return parse_cfg(path)


@pytest.fixture(scope="module")
def rendered():
    """Three frames of training seed 1000, raw (no codec) so they equal what render_frames yields."""
    params = DataParams(frames=3, frames_per_seed=3, stride=1, codec=None)
    return params, render_seed(1000, params)


def _targets(*boxes: tuple[float, float, float, float, float]) -> torch.Tensor:
    return torch.tensor([list(boxes)], dtype=torch.float32)


def _grids(cfg) -> list[tuple[int, int]]:
    return [cfg.shapes[i][1:] for i, _ in cfg.yolo_layers]


# -- target assignment ----------------------------------------------------------------------------------------


def test_assignment_large_box_goes_to_largest_anchor_in_centre_cell(cfg):
    loss = YoloLoss(cfg)
    # 344x319 box (anchor 5 exactly) centred at (200, 210): 13x13 head (mask 3,4,5), anchor slot 2, cell (6, 6).
    head13, head26 = loss.build_targets(_targets((1, 28, 50.5, 372, 369.5)), _grids(cfg), NET)
    assert head13.anchor.tolist() == [2] and head13.col.tolist() == [6] and head13.row.tolist() == [6]
    assert head13.cls.tolist() == [1] and head13.image.tolist() == [0]
    assert torch.allclose(head13.box, torch.tensor([[200.0, 210.0, 344.0, 319.0]]))
    assert len(head26) == 0


def test_assignment_adds_anchors_above_iou_thresh(cfg):
    loss = YoloLoss(cfg)
    # 80x80: best anchor 3 (81,82, in both masks); anchors 2 (IoU 0.34) and 4 (IoU 0.28) exceed 0.213.
    head13, head26 = loss.build_targets(_targets((0, 160, 170, 240, 250)), _grids(cfg), NET)
    assert sorted(head13.anchor.tolist()) == [0, 1]  # anchors 3, 4 of mask 3,4,5
    assert sorted(head26.anchor.tolist()) == [1, 2]  # anchors 2, 3 of mask 1,2,3
    assert set(head13.col.tolist()) == {200 // 32} and set(head13.row.tolist()) == {210 // 32}
    assert set(head26.col.tolist()) == {200 // 16} and set(head26.row.tolist()) == {210 // 16}


def test_assignment_tiny_box_uses_smallest_anchor_in_a_mask(cfg):
    loss = YoloLoss(cfg)
    # 3x7 person: anchor 0 (10,14) fits best but no head uses it; anchor 1 (23,27) of the 26x26 head takes it.
    head13, head26 = loss.build_targets(_targets((0, 100, 40, 103, 47), (-1, 0, 0, 0, 0)), _grids(cfg), NET)
    assert len(head13) == 0
    assert head26.anchor.tolist() == [0] and head26.col.tolist() == [101 // 16] and head26.row.tolist() == [43 // 16]


def test_assignment_tiny_box_takes_the_fitted_smallest_anchor_of_the_shipped_cfg():
    shipped = parse_cfg(default_cfg_path())
    # 3x7 person: the shipped 26x26 head (mask 0,1,2) holds the fitted 4x9 anchor, slot 0.
    head13, head26 = YoloLoss(shipped).build_targets(_targets((0, 100, 40, 103, 47)), _grids(shipped), NET)
    assert len(head13) == 0
    assert head26.anchor.tolist() == [0] and head26.col.tolist() == [101 // 16] and head26.row.tolist() == [43 // 16]


def test_assignment_ignores_padding_rows(cfg):
    loss = YoloLoss(cfg)
    heads = loss.build_targets(torch.full((2, 4, 5), -1.0), _grids(cfg), NET)
    assert all(len(h) == 0 for h in heads)


# -- IoU losses -----------------------------------------------------------------------------------------------

boxes = st.tuples(st.floats(0, 400), st.floats(0, 400), st.floats(2, 300), st.floats(2, 300))


@pytest.mark.parametrize("kind", ["iou", "giou", "ciou"])
@given(box=boxes)
@settings(max_examples=50, deadline=None)
def test_iou_of_identical_boxes_is_one(kind, box):
    b = torch.tensor([box], dtype=torch.float64)
    assert bbox_iou(b, b, kind).item() == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("kind", ["giou", "ciou"])
@given(box=boxes, shifts=st.lists(st.floats(0.5, 600), min_size=2, max_size=2, unique=True))
@settings(max_examples=50, deadline=None)
def test_iou_loss_grows_with_centre_offset(kind, box, shifts):
    a = torch.tensor([box], dtype=torch.float64)
    near, far = sorted(shifts)
    b_near, b_far = a.clone(), a.clone()
    b_near[0, 0] += near
    b_far[0, 0] += far
    l_near, l_far = 1 - bbox_iou(a, b_near, kind).item(), 1 - bbox_iou(a, b_far, kind).item()
    assert 0 < l_near < l_far + 1e-9
    assert l_far <= (2.0 if kind == "giou" else 2.5)


# -- loss on a real batch -----------------------------------------------------------------------------------


def test_loss_is_finite_and_decreases_when_overfitting_one_frame():
    small = DataParams(frames=1, frames_per_seed=1, stride=1, codec=None, net_size=(128, 128))
    frames = frameset_from_seeds([render_seed(1000, small)], small)
    torch.manual_seed(0)
    model = DarknetModel(parse_cfg(default_cfg_path()))
    init_head_biases(model, (128, 128))
    model.train()
    loss_fn = YoloLoss(model.cfg)
    opt = torch.optim.AdamW(model.parameters(), lr=2e-3)
    x, targets = augment_batch(frames.images, frames.boxes, frames.letterbox, AugmentParams.none())
    losses = []
    for _ in range(15):
        loss, parts = loss_fn(model.forward_heads(x), targets, (128, 128))
        assert torch.isfinite(loss) and parts["assigned"].item() > 0
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.7 * losses[0], losses


# -- data -----------------------------------------------------------------------------------------------------


def test_training_seeds_never_include_held_out_seeds():
    with pytest.raises(DetectorError, match="held out"):
        check_training_seeds([1000, 7])
    with pytest.raises(DetectorError, match="held out"):
        DataParams(frames=10, frames_per_seed=1, seed_base=0)
    assert DataParams().seeds[0] == 1000 and len(DataParams().seeds) == 640


def test_a_trillion_training_frames_list_no_seeds_and_are_refused_before_rendering():
    """The seeds were a tuple built first: 10^12 frames were a MemoryError (or, at 10^9, the kernel's kill)."""
    data = DataParams(frames=10**12, frames_per_seed=1)
    assert (data.seeds[0], data.seeds[-1], len(data.seeds)) == (1000, 10**12 + 999, 10**12)
    assert "1000..1000000000999 (1000000000000 scenes)" in data.describe()
    with pytest.raises(MemoryError, match=r"GiB for the 1000000000000 training frames \(416x234 each, --frames\)"):
        data.check_memory()
    DataParams(frames=2, frames_per_seed=1).check_memory()


def test_unaugmented_batch_equals_the_pipeline_preprocess(rendered):
    from detector.synthetic import render_frames

    params, seed = rendered
    frames = frameset_from_seeds([seed], params)
    raw = [f for f, _ in render_frames(1000, 960, 540, 3)]
    expected, transforms = preprocess(raw, NET)
    x, boxes = augment_batch(frames.images, frames.boxes, frames.letterbox, AugmentParams.none())
    assert x.shape == (3, 3, *NET)
    np.testing.assert_allclose(x.numpy(), expected, atol=1e-6)
    assert transforms[0] == frames.letterbox


def test_rendered_boxes_are_ground_truth_in_network_pixels(rendered):
    from detector.synthetic import render_frames

    params, seed = rendered
    lb = Letterbox.letterbox(960, 540, 416, 416)
    for (_, ann), got in zip(render_frames(1000, 960, 540, 3), seed.boxes):
        xywh = np.array([a["bbox"] for a in ann], dtype=np.float64)
        frame_xyxy = np.concatenate([xywh[:, :2], xywh[:, :2] + xywh[:, 2:]], axis=1)
        np.testing.assert_allclose(got[:, 1:], lb.to_net(frame_xyxy), atol=1e-3)
        assert got[:, 0].tolist() == [a["category_id"] - 1 for a in ann]


# -- augmentation ---------------------------------------------------------------------------------------------


def _bright_box_image(x1: int, y1: int, x2: int, y2: int, size: int = 128) -> torch.Tensor:
    img = torch.full((1, 3, size, size), 127 / 255)
    img[:, :, y1:y2, x1:x2] = 1.0
    return img


def test_flip_twice_is_identity():
    img = torch.rand(2, 3, 64, 96)
    b = torch.tensor([[[0, 10, 5, 30, 40], [1, 50, 20, 95, 63]], [[1, 0, 0, 12, 12], [-1, 0, 0, 0, 0]]])
    ones, zero, flip = torch.ones(2), torch.zeros(2, 2), torch.tensor([True, True])
    once, b1 = warp(img, b, ones, zero, flip)
    twice, b2 = warp(once, b1, ones, zero, flip)
    torch.testing.assert_close(twice, img, atol=1e-5, rtol=0)
    torch.testing.assert_close(b2, b)
    assert b1[0, 0].tolist() == [0, 66, 5, 86, 40]  # x -> 96 - x


@given(scale=st.floats(0.5, 2.0), tx=st.floats(-40, 40), ty=st.floats(-40, 40), flip=st.booleans(),
       box=st.tuples(st.integers(0, 100), st.integers(0, 100), st.integers(12, 28), st.integers(12, 28)))
@settings(max_examples=40, deadline=None)
def test_affine_moves_boxes_with_the_pixels_and_keeps_them_in_the_image(scale, tx, ty, flip, box):
    x1, y1, w, h = box
    x2, y2 = x1 + w, y1 + h
    img = _bright_box_image(x1, y1, x2, y2)
    b = torch.tensor([[[1.0, x1, y1, x2, y2]]])
    out, nb = warp(img, b, torch.tensor([scale]), torch.tensor([[tx, ty]]), torch.tensor([flip]), min_box_px=2.0)
    c, bx1, by1, bx2, by2 = nb[0, 0].tolist()
    if c < 0:  # moved (almost) out of the image: dropped
        return
    assert 0 <= bx1 < bx2 <= 128 and 0 <= by1 < by2 <= 128
    bright = out[0, 0] > 0.9
    ys, xs = torch.nonzero(bright, as_tuple=True)
    assert len(xs), "box visible by its coordinates but no bright pixel left"
    # The bright pixels lie inside the box (1 px of bilinear blur), and the box's centre pixel is bright.
    assert xs.min() >= bx1 - 1.5 and xs.max() + 1 <= bx2 + 1.5
    assert ys.min() >= by1 - 1.5 and ys.max() + 1 <= by2 + 1.5
    if bx2 - bx1 >= 4 and by2 - by1 >= 4:
        assert bright[int((by1 + by2) / 2), int((bx1 + bx2) / 2)]


def test_augment_batch_is_seeded_and_keeps_padding_rows(rendered):
    params, seed = rendered
    frames = frameset_from_seeds([seed], params)
    a = augment_batch(frames.images, frames.boxes, frames.letterbox, AugmentParams(), torch.Generator().manual_seed(3))
    b = augment_batch(frames.images, frames.boxes, frames.letterbox, AugmentParams(), torch.Generator().manual_seed(3))
    torch.testing.assert_close(a[0], b[0])
    torch.testing.assert_close(a[1], b[1])
    valid = a[1][..., 0] >= 0
    assert ((a[1][..., 3] - a[1][..., 1])[valid] >= 1.5).all()
    assert (a[1][~valid] == torch.tensor([-1.0, 0, 0, 0, 0])).all()
    assert a[0].min() >= 0 and a[0].max() <= 1


# -- schedule and EMA -----------------------------------------------------------------------------------------


def test_lr_warms_up_then_follows_a_cosine_to_the_floor():
    kw = dict(base=1e-3, warmup=100, final_ratio=0.05)
    assert lr_at(0, 1000, **kw) == pytest.approx(1e-5)
    assert lr_at(100, 1000, **kw) == pytest.approx(1e-3)
    assert lr_at(550, 1000, **kw) == pytest.approx(1e-3 * (0.05 + 0.95 * 0.5))
    assert lr_at(1000, 1000, **kw) == pytest.approx(5e-5)
    assert lr_at(5000, 1000, **kw) == pytest.approx(5e-5)


def test_ema_blends_with_a_ramped_decay_and_copies_counters():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.BatchNorm1d(2))
    ema = ModelEMA(model, decay=0.9, tau=1.0)
    start = model[0].weight.detach().clone()
    with torch.no_grad():
        model[0].weight.fill_(1.0)
    model[1].num_batches_tracked += 5
    ema.update()
    d = 0.9 * (1 - math.exp(-1))
    torch.testing.assert_close(ema.module[0].weight, d * start + (1 - d) * torch.ones(2, 2))
    assert ema.module[1].num_batches_tracked.item() == 5
    assert not ema.module[0].weight.requires_grad


# -- the commands ---------------------------------------------------------------------------------------------


def test_train_command_writes_loadable_weights_and_provenance(tmp_path: Path):
    from detector.train.__main__ import main

    out = tmp_path / "w.weights"
    rc = main(["train", "--out", str(out), "--frames", "4", "--frames-per-seed", "2", "--frame-stride", "1",
               "--net-size", "128", "--batch", "2", "--time-budget-s", "10", "--workers", "0", "--eval-frames", "0",
               "--no-codec", "--log-every", "1", "--cache-dir", str(tmp_path)])
    assert rc == 0
    model = load_model(default_cfg_path(), out)
    assert model.seen > 0
    text = (tmp_path / "w.weights.txt").read_text()
    for key in ("command:", "seed: 0", "data: synthetic generator seeds 1000..1001", "steps:", "wall_time_s:",
                "git_commit:", "torch:", "held_out_seeds: [0, 7, 8, 9]", "weights_sha256:"):
        assert key in text, key


def test_train_refuses_eval_seeds_used_for_training(tmp_path: Path):
    from detector.train.loop import TrainConfig, train

    cfg = TrainConfig(out=tmp_path / "w.weights", data=DataParams(frames=2, frames_per_seed=1, seed_base=1000),
                      eval_seeds=(1001,))
    with pytest.raises(DetectorError, match="also training seeds"):
        train(cfg)


_TINY = ["--frames", "2", "--frames-per-seed", "1", "--frame-stride", "1", "--net-size", "64", "--workers", "0",
         "--eval-frames", "0", "--no-codec", "--device", "cpu"]  # fmt: skip


@pytest.mark.parametrize(("argv", "line"), [
    (["--lr", "1e30", "--steps", "3", "--batch", "1"], "detector: error: training diverged by step 3: the weights are "
     "no longer finite (NaN or Inf), so none were saved; a smaller --lr (now 1e+30) keeps them finite"),
    (["--steps", "1", "--batch", "100000000"], "detector: error: not enough memory: you tried to allocate "),
])  # fmt: skip
@pytest.mark.parametrize("entry", ["detector", "python3 -m detector.train"])
def test_training_that_cannot_give_finite_weights_or_fit_its_batch_saves_nothing_in_one_line(
    argv: list[str], line: str, entry: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NaN weights of a huge --lr were saved silently (the loss is checked every --log-every steps); a batch torch's
    CPU allocator cannot hold was its RuntimeError's traceback (under ``python3 -m detector.train`` until it ran its
    subcommands as ``detector`` does)."""
    from detector.cli import main as detector_main
    from detector.train.__main__ import main as train_main

    main = detector_main if entry == "detector" else train_main
    assert main(["train", "--out", str(tmp_path / "w.weights"), *_TINY, "--cache-dir", str(tmp_path), *argv]) == 2
    (err,) = capsys.readouterr().err.splitlines()
    assert err.startswith(line), err
    assert not list(tmp_path.glob("w.weights*"))


def test_eval_scores_weights_per_class_on_a_held_out_video(tmp_path: Path, capsys):
    from detector.train.__main__ import main

    weights = tmp_path / "random.weights"
    load_model(default_cfg_path(), seed=1).save_darknet_weights(weights)
    out = tmp_path / "eval.json"
    rc = main(["eval", "--weights", str(weights), "--video-seed", "7", "--frames", "4", "--device", "cpu",
               "--cache-dir", str(tmp_path), "--json", str(out)])
    assert rc == 0
    printed = capsys.readouterr().out
    assert "person" in printed and "vehicle" in printed and "AP@0.5" in printed
    import json

    data = json.loads(out.read_text())
    assert set(data["per_class"]) == {"person", "vehicle"} and 0.0 <= data["mAP@0.5"] <= 1.0


def test_parsers_register_train_and_eval_subcommands():
    import argparse

    from detector.train.cli import add_eval_parser, add_train_parser

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command", required=True)
    add_train_parser(sub)
    add_eval_parser(sub)
    a = parser.parse_args(["train", "--out", "x.weights", "--time-budget-s", "30", "--batch", "8"])
    assert (a.time_budget_s, a.batch, a.frames, a.device, a.seed) == (30.0, 8, 16000, "auto", 0)
    e = parser.parse_args(["eval", "--video-seed", "7", "--video-seed", "8", "--precision", "fp16"])
    assert e.video_seeds == [7, 8] and e.precision == "fp16" and e.frames is None  # 300 per seed, all of a --video
    with pytest.raises(SystemExit):
        parser.parse_args(["train", "--out", "x", "--net-size", "100"])


def test_train_logs_progress_only_with_verbose_and_its_evaluation_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import logging

    from detector.cli import main

    args = ["--out", str(tmp_path / "w.weights"), "--frames", "2", "--frames-per-seed", "2", "--frame-stride", "1",
            "--net-size", "64", "--batch", "2", "--steps", "1", "--workers", "0", "--eval-frames", "2",
            "--no-mid-eval", "--no-codec", "--cache-dir", str(tmp_path)]  # fmt: skip
    assert main(["train", *args]) == 0
    assert [r.getMessage() for r in caplog.records if r.levelno < logging.WARNING] == []  # no -v: no INFO
    caplog.clear()
    caplog.set_level(logging.INFO)  # as -v sets it (pytest's own handler keeps main from configuring logging)
    assert main(["train", "-v", *args]) == 0
    (evaluation,) = [r.getMessage() for r in caplog.records if "final evaluation" in r.getMessage()]
    assert "\n" not in evaluation and "mAP@0.5 " in evaluation and "(AP@0.5: person " in evaluation


def test_evaluation_during_training_follows_the_cfgs_nms(tmp_path: Path, monkeypatch) -> None:
    from detector.train import evalrun

    text = default_cfg_path().read_text().replace("[yolo]", "[yolo]\nnms_kind=diounms\nbeta_nms=0.8")
    cfg = tmp_path / "diou.cfg"
    cfg.write_text(text)
    chains = []
    monkeypatch.setattr(evalrun, "_evaluate", lambda infer, chain, **kw: chains.append(chain) or {"all": None})
    evalrun.evaluate_model(load_model(cfg, seed=1), frames=1, cache_dir=tmp_path)
    assert (chains[0].nms.kind, chains[0].nms.beta) == ("diounms", 0.8)  # as `detector eval` scores the weights

