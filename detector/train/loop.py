"""The training loop: data on the device, augmentation, loss, AdamW with warm-up + cosine, weight EMA,
mixed precision, a hard wall-time budget, Darknet weights and a provenance file at the end.

The budget covers the whole run (rendering the data, training, saving, the final evaluation): the loop
stops early enough to leave time for the end, estimated from the mid-run evaluation. Without ``steps`` the
number of steps is planned from the measured step time and re-planned as the run goes (the cosine schedule
follows the plan); the steps actually run are recorded, so ``--steps N`` reproduces the schedule exactly.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import math
import multiprocessing
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from detector.errors import DetectorError
from detector.progress import ENV_VAR as PROGRESS_ENV_VAR
from detector.progress import progress
from detector.train.augment import AugmentParams, augment_batch
from detector.train.data import (
    HELD_OUT_SEEDS,
    DataParams,
    FrameSet,
    default_workers,
    frameset_from_seeds,
    render_frames_parallel,
)
from detector.train.loss import LossParams, YoloLoss, init_head_biases

if TYPE_CHECKING:
    from detector.evaluate import EvalResult
    from detector.model import DarknetModel

log = logging.getLogger(__name__)

__all__ = ["ModelEMA", "TrainConfig", "TrainResult", "lr_at", "train"]


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """Everything a training run depends on (see ``detector train --help`` for the command-line names).

    ``time_budget_s`` bounds the whole run, data rendering and the final evaluation included. ``steps`` fixes
    the number of optimizer steps (the budget still stops the run). ``amp``: ``auto`` (bf16 on CUDA, off on
    the CPU), ``bf16``, ``fp16`` (with a GradScaler) or ``off``. ``eval_seeds`` () skips the evaluations.
    ``cache_dir`` is the detector cache (default ``$DETECTOR_CACHE`` or ``~/.cache/detector``): the held-out
    videos are cached under its ``videos/``, where ``detector eval`` finds them again. ``workers`` render
    processes (default: CPUs - 1; 0 or 1 render in this process).
    """

    out: Path
    cfg: Path | None = None
    seed: int = 0
    time_budget_s: float = 480.0
    steps: int | None = None
    batch: int = 64
    device: str = "auto"
    data: DataParams = DataParams()
    augment: AugmentParams = AugmentParams()
    loss: LossParams = LossParams()
    lr: float = 2e-3
    weight_decay: float = 0.01
    warmup_steps: int = 300
    final_lr_ratio: float = 0.02
    amp: str = "auto"
    channels_last: bool = True
    ema_decay: float = 0.9995
    workers: int | None = None
    eval_seeds: tuple[int, ...] = (7,)
    eval_frames: int = 300
    mid_eval: bool = True
    cache_dir: Path | None = None
    log_every: int = 100
    grad_clip: float = 10.0


@dataclasses.dataclass
class TrainResult:
    """What a run produced: files, steps, images seen, seconds spent, the final evaluation (or None)."""

    weights: Path
    provenance: Path
    steps: int
    images: int
    data_s: float
    train_s: float
    wall_s: float
    evaluation: EvalResult | None
    losses: list[float]


class ModelEMA:
    """Exponential moving average of a model's parameters and buffers (YOLOv5's ModelEMA): decay ramps
    as ``decay * (1 - exp(-updates / tau))`` so early averages follow the model closely."""

    def __init__(self, model: torch.nn.Module, decay: float = 0.9995, tau: float = 500.0) -> None:
        self.module = copy.deepcopy(model).eval().requires_grad_(False)
        self.decay, self.tau, self.updates = decay, tau, 0
        self._src = [v for v in model.state_dict().values()]
        self._dst = [v for v in self.module.state_dict().values()]

    @torch.no_grad()
    def update(self) -> None:
        """Blend in the current values of the tracked model."""
        self.updates += 1
        d = self.decay * (1 - math.exp(-self.updates / self.tau))
        floats = [(e, m) for e, m in zip(self._dst, self._src) if e.dtype.is_floating_point]
        torch._foreach_lerp_([e for e, _ in floats], [m.detach() for _, m in floats], 1.0 - d)
        for e, m in zip(self._dst, self._src):
            if not e.dtype.is_floating_point:
                e.copy_(m)


def lr_at(step: int, total: int, *, base: float, warmup: int, final_ratio: float) -> float:
    """Learning rate at ``step`` of ``total``: linear warm-up from 1% to ``base`` over ``warmup`` steps, then
    cosine from ``base`` down to ``base * final_ratio`` at ``total``."""
    if step < warmup:
        return base * (0.01 + 0.99 * step / warmup)
    progress = min(1.0, (step - warmup) / max(1, total - warmup))
    return base * (final_ratio + (1 - final_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def _device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    dev = torch.device(name)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise DetectorError(f"device {name!r} asked for, but torch sees no CUDA device; use --device cpu")
    return dev


def _amp_dtype(amp: str, dev: torch.device) -> torch.dtype | None:
    if amp == "auto":
        return torch.bfloat16 if dev.type == "cuda" and torch.cuda.is_bf16_supported() else None
    table = {"bf16": torch.bfloat16, "fp16": torch.float16, "off": None}
    if amp not in table:
        raise DetectorError(f"unknown amp mode {amp!r}; allowed: auto, bf16, fp16, off")
    return table[amp]


def _batches(n: int, batch: int, gen: torch.Generator, device: torch.device) -> Iterator[torch.Tensor]:
    """Endless index batches: shuffled epochs (last partial batch dropped), or with replacement if n < batch."""
    while True:
        if n < batch:
            yield torch.randint(n, (batch,), generator=gen).to(device)
            continue
        perm = torch.randperm(n, generator=gen).to(device)
        for i in range(0, n - batch + 1, batch):
            yield perm[i : i + batch]


def _build_model(cfg_path: Path, seed: int, dev: torch.device, channels_last: bool) -> DarknetModel:
    from detector.darknet import parse_cfg
    from detector.model import DarknetModel, default_names
    from detector.shipped import read_names

    torch.manual_seed(seed)
    cfg = parse_cfg(cfg_path)
    model = DarknetModel(cfg)
    init_head_biases(model, cfg.input_size)
    names = cfg_path.parent / "classes.names"
    if names.is_file():
        model.names = read_names(names)
    elif len(default_names()) == cfg.classes:
        model.names = default_names()
    model = model.to(dev).train()
    return model.to(memory_format=torch.channels_last) if channels_last else model


def _optimizer(model: torch.nn.Module, cfg: TrainConfig, dev: torch.device) -> torch.optim.Optimizer:
    decay = [p for p in model.parameters() if p.ndim == 4]
    no_decay = [p for p in model.parameters() if p.ndim != 4]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(0.9, 0.999), fused=dev.type == "cuda")


class _Stop:
    """SIGTERM / SIGINT during the loop: finish the step, then save (a killed run still leaves weights)."""

    def __init__(self) -> None:
        self.requested = False
        self._old: dict[int, Any] = {}

    def __enter__(self) -> _Stop:
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self._old[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread
                pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        log.warning("signal %d: stopping after this step and saving", signum)
        self.requested = True

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)


def _quiet_worker() -> None:
    """A render process draws no progress bars of its own: the main process shows the rendering's one bar."""
    os.environ[PROGRESS_ENV_VAR] = "0"


def _load_data(cfg: TrainConfig, workers: int) -> tuple[FrameSet, list[Any]]:
    """Render the training frames (in a spawn pool when ``workers`` > 1) and, meanwhile, build the cached
    evaluation videos; returns the frames (host) and the finished video entries."""
    from detector.train.evalrun import video_cache
    from detector.synthetic import synthetic_video

    cache = video_cache(cfg.cache_dir)
    videos: list[Any] = []
    if workers > 1:
        with multiprocessing.get_context("spawn").Pool(workers, initializer=_quiet_worker) as pool:
            pending = [pool.apply_async(synthetic_video, (cache,), {"seed": s, "frames": cfg.eval_frames})
                       for s in cfg.eval_seeds]
            rendered = render_frames_parallel(cfg.data, pool)
            videos = [p.get() for p in pending]
    else:
        rendered = render_frames_parallel(cfg.data)
        videos = [synthetic_video(cache, seed=s, frames=cfg.eval_frames) for s in cfg.eval_seeds]
    return frameset_from_seeds(rendered, cfg.data), videos


def _evaluate(ema: ModelEMA, cfg: TrainConfig, label: str) -> tuple[EvalResult | None, float]:
    from detector.train.evalrun import evaluate_model

    start = time.monotonic()
    try:
        result = evaluate_model(ema.module, video_seeds=cfg.eval_seeds, frames=cfg.eval_frames,
                                cache_dir=cfg.cache_dir, net_size=cfg.data.net_size)
    except DetectorError as e:
        log.warning("%s evaluation skipped: %s", label, e)
        return None, time.monotonic() - start
    seconds = time.monotonic() - start
    log.info("%s evaluation (held-out seeds %s, %d frames each, EMA weights, fp32, %.1f s): %s", label,
             ",".join(map(str, cfg.eval_seeds)), cfg.eval_frames, seconds, result.summary())
    return result, seconds


def train(cfg: TrainConfig) -> TrainResult:
    """Train YOLOv4-tiny from scratch on synthetic frames; write ``cfg.out`` and ``<out>.txt``."""
    from detector.shipped import default_cfg_path
    from detector.train.provenance import command_line, git_commit, source_digest, write_provenance

    t0 = time.monotonic()
    if both := sorted({seed for seed in cfg.eval_seeds if seed in cfg.data.seeds}):
        raise DetectorError(f"evaluation seeds {both} are also training seeds")
    if not set(cfg.eval_seeds) <= HELD_OUT_SEEDS:
        log.warning("evaluation seeds %s are not all held-out seeds %s", cfg.eval_seeds, sorted(HELD_OUT_SEEDS))
    dev = _device(cfg.device)
    amp = _amp_dtype(cfg.amp, dev)
    cfg_path = Path(cfg.cfg) if cfg.cfg else default_cfg_path()
    workers = default_workers() if cfg.workers is None else cfg.workers
    cfg.data.check_memory()
    log.info("rendering %s with %d worker process(es)", cfg.data.describe(), workers)
    frames, _ = _load_data(cfg, workers)
    data_s = time.monotonic() - t0
    counts = frames.class_counts()
    log.info("data ready in %.1f s: %d frames, %d boxes (person %d, vehicle %d), %.2f GB", data_s, len(frames),
             sum(counts), counts[0], counts[1] if len(counts) > 1 else 0, frames.nbytes() / 1e9)

    if dev.type == "cuda":
        torch.backends.cudnn.benchmark = True
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    frames = frames.to(dev)
    channels_last = cfg.channels_last and dev.type == "cuda"
    model = _build_model(cfg_path, cfg.seed, dev, channels_last)
    net_hw = cfg.data.net_size
    if tuple(net_hw) != model.input_size:
        log.info("training at %dx%d (the cfg's input is %dx%d)", net_hw[1], net_hw[0], *model.input_size[::-1])
    loss_fn = YoloLoss(model.cfg, cfg.loss)
    opt = _optimizer(model, cfg, dev)
    scaler = torch.amp.GradScaler(dev.type, enabled=amp == torch.float16)
    ema = ModelEMA(model, cfg.ema_decay)
    gen_host = torch.Generator().manual_seed(cfg.seed)
    gen_dev = torch.Generator(device=dev).manual_seed(cfg.seed + 1)
    batches = _batches(len(frames), cfg.batch, gen_host, dev)
    eval_on = bool(cfg.eval_seeds) and cfg.eval_frames > 0
    eval_reserve = (15.0 if dev.type == "cuda" else 0.05 * cfg.eval_frames * len(cfg.eval_seeds)) if eval_on else 0
    deadline = t0 + cfg.time_budget_s - 2.0  # 2 s for saving
    log.info("training on %s%s, batch %d, amp %s, %s params; budget %.0f s (%.0f s left)", dev,
             f" ({torch.cuda.get_device_name(dev)})" if dev.type == "cuda" else "", cfg.batch,
             amp or "off", f"{sum(p.numel() for p in model.parameters()):,}", cfg.time_budget_s,
             deadline - time.monotonic())

    step, planned = 0, cfg.steps or 10_000
    losses: list[float] = []
    sums = torch.zeros(4, device=dev)
    mid_done = not (eval_on and cfg.mid_eval)
    t_train = time.monotonic()
    t_log, step_log, t_rate, step_rate = t_train, 0, t_train, 0
    bar = progress(total=planned, desc="training", unit="step")
    with _Stop() as stop, bar:
        while not stop.requested and (cfg.steps is None or step < cfg.steps):
            now = time.monotonic()
            if now >= deadline - eval_reserve and step > 0:
                break
            if step == 20:  # the first steps include cuDNN's algorithm search: time the rate from here
                t_rate, step_rate = now, step
            elif cfg.steps is None and step > 20 and step % 25 == 0 and now > t_rate:  # re-plan the schedule
                rate = (now - t_rate) / (step - step_rate)
                planned = max(step + 1, step + int((deadline - eval_reserve - now) / rate))
                bar.total = planned
            for group in opt.param_groups:
                group["lr"] = lr_at(step, planned, base=cfg.lr, warmup=cfg.warmup_steps, final_ratio=cfg.final_lr_ratio)
            idx = next(batches)
            x, targets = augment_batch(frames.images[idx], frames.boxes[idx], frames.letterbox, cfg.augment, gen_dev)
            if channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            with torch.autocast(dev.type, dtype=amp or torch.float32, enabled=amp is not None):
                heads = model.forward_heads(x)
            loss, parts = loss_fn(heads, targets, net_hw)
            opt.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
            scaler.step(opt)
            scaler.update()
            ema.update()
            step += 1
            bar.update()
            sums += torch.stack([loss.detach(), parts["box"], parts["obj"], parts["cls"]])
            if step % cfg.log_every == 0 or step == 1:
                mean = (sums / (step - step_log)).tolist()
                losses.append(mean[0])
                if not math.isfinite(mean[0]):
                    raise DetectorError(f"training diverged at step {step}: loss {mean[0]}")
                now = time.monotonic()
                log.info("step %d/%d lr %.2e loss %.4f (box %.4f obj %.4f cls %.4f) %.0f img/s elapsed %.0f s",
                         step, planned, opt.param_groups[0]["lr"], *mean,
                         (step - step_log) * cfg.batch / max(now - t_log, 1e-9), now - t0)
                sums.zero_()
                t_log, step_log = now, step
                bar.set_postfix_str(f"loss {mean[0]:.4f}", refresh=False)
            if not mid_done and time.monotonic() - t_train >= 0.5 * (deadline - eval_reserve - t_train):
                mid_done = True
                _, seconds = _evaluate(ema, cfg, f"mid-run (step {step})")
                eval_reserve = 1.3 * seconds + 3.0
                t_rate += seconds  # keep the evaluation out of the measured step time
                model.train()
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)
    train_s = time.monotonic() - t_train
    images = step * cfg.batch
    # the loss is checked every --log-every steps only: a large --lr made NaN weights between two checks, saved
    if not all(t.isfinite().all() for t in ema.module.state_dict().values() if t.is_floating_point()):
        raise DetectorError(f"training diverged by step {step}: the weights are no longer finite (NaN or Inf), so "
                            f"none were saved; a smaller --lr (now {cfg.lr:g}) keeps them finite")
    ema.module.seen = images
    weights = ema.module.save_darknet_weights(cfg.out)
    log.info("saved %s after %d steps (%d images, %.0f s of training)", weights, step, images, train_s)
    result = _evaluate(ema, cfg, "final")[0] if eval_on and not stop.requested else None
    wall_s = time.monotonic() - t0
    fields = {
        "command": command_line(),
        "seed": cfg.seed,
        "cfg": cfg_path.name,
        "data": cfg.data.describe(),
        "data_boxes": f"{sum(counts)} (person {counts[0]}, vehicle {counts[1] if len(counts) > 1 else 0})",
        "held_out_seeds": f"{sorted(HELD_OUT_SEEDS)} (never trained on)",
        "augmentation": cfg.augment,
        "loss": cfg.loss,
        "optimizer": f"AdamW lr {cfg.lr} wd {cfg.weight_decay}, warm-up {cfg.warmup_steps} steps, cosine to "
                     f"{cfg.final_lr_ratio} x lr; grad clip {cfg.grad_clip}; EMA {cfg.ema_decay} (saved weights)",
        "steps": f"{step} (batch {cfg.batch}, {images} images, last planned {planned}; "
                 f"--steps {step} reruns it on a fixed schedule)",
        "precision": f"autocast {amp or 'off'}" + (", channels_last" if channels_last else ""),
        "wall_time_s": f"{wall_s:.1f} (data {data_s:.1f}, training {train_s:.1f}, budget {cfg.time_budget_s:.0f})",
        "git_commit": git_commit(),
        "source_sha256_16": source_digest(),
        "torch": torch.__version__ + (f" (CUDA {torch.version.cuda})" if dev.type == "cuda" else ""),
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
    }
    tables = {}
    if result is not None:
        tables[f"held-out evaluation (seeds {','.join(map(str, cfg.eval_seeds))}, {cfg.eval_frames} frames each, "
               f"torch fp32, conf 0.001, NMS 0.45)"] = result.table()
    provenance = write_provenance(weights, fields, tables=tables)
    log.info("wrote %s; total wall time %.1f s", provenance, wall_s)
    return TrainResult(weights, provenance, step, images, data_s, train_s, wall_s, result, losses)
