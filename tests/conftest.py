"""Fixtures shared by the test modules: the packaged cfg at a small input size, the session's model spec (that
cfg at 128x128), the video loops' trained model, clip and CPU runner, and the set-up that in-process pytest runs
(pytester) of the perf plugin need."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from detector.model import default_cfg_path, default_weights_path
from detector.spec import ModelSpec

if TYPE_CHECKING:
    from detector.backends.base import Runner

# A run started in the background of a non-interactive shell (``bash .ci/run &``) ignores SIGINT, and an ignored signal
# stays ignored across exec: the interrupt tests' children could not be interrupted (their Ctrl-C cases timed out).
# A handler is reset to the default on exec, so every child a test starts takes Ctrl-C as a user's run does.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

SPEC_SIZE = 128  # the packaged cfg at 128x128: same layers, ~10x less compute than 416
#: The video loops' model input: small, so the CPU runs the 12-frame clip in a fraction of a second.
LOOP_SIZE = 160
#: Frames of the loops' clip (the synthetic scene, seed 3, 320x180; tests/data/video holds it as H.264 too).
LOOP_FRAMES = 12


@pytest.fixture(scope="session", autouse=True)
def _children_without_hypothesis() -> Iterator[None]:
    """Every pytest a test starts (and every pytest those start) leaves hypothesis's plugin out: importing it took a
    child 1.6 s of its 4.2 s on the 2-core CI machine, and no child runs a hypothesis test. Set once the tests run,
    not at import: pytest-xdist's workers read the variable when they start, and their own tests need the plugin."""
    with pytest.MonkeyPatch.context() as mp:
        addopts = [os.environ.get("PYTEST_ADDOPTS"), "-p no:hypothesispytest"]
        mp.setenv("PYTEST_ADDOPTS", " ".join(filter(None, addopts)))
        yield


def _write_packaged_cfg(folder: Path, size: int) -> Path:
    """The packaged cfg at ``size`` x ``size`` pixels written as ``folder/tiny<size>.cfg``: the same layers and
    weights layout (the packaged weights load into it), less compute; returns its path."""
    text = default_cfg_path().read_text(encoding="utf-8")
    if "width=416" not in text or "height=416" not in text:
        raise ValueError(f"{default_cfg_path()}: no 'width=416' and 'height=416' lines to resize")
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"tiny{size}.cfg"
    path.write_text(text.replace("width=416", f"width={size}").replace("height=416", f"height={size}"),
                    encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def packaged_cfg() -> Callable[[Path, int], Path]:
    """``packaged_cfg(folder, size)``: writes the packaged cfg at ``size`` x ``size`` as ``folder/tiny<size>.cfg``
    and returns its path (a file of the test's own, so that files beside it, such as classes.names, stay its own)."""
    return _write_packaged_cfg


@pytest.fixture(scope="module")
def spec(tmp_path_factory: pytest.TempPathFactory) -> ModelSpec:
    """A spec whose ONNX export is shared by every test module of the session (same cfg bytes, same cache)."""
    base = tmp_path_factory.getbasetemp()
    cfg = base / f"tiny{SPEC_SIZE}.cfg"
    if not cfg.exists():
        _write_packaged_cfg(base, SPEC_SIZE)
    return ModelSpec(cfg, seed=0, cache_dir=base / "detector-cache")


@pytest.fixture(scope="session")
def loop_spec(tmp_path_factory: pytest.TempPathFactory) -> ModelSpec:
    """The trained weights at ``LOOP_SIZE`` x ``LOOP_SIZE`` (the cfg's width/height only set the input)."""
    base = tmp_path_factory.mktemp("loop-spec")
    return ModelSpec(_write_packaged_cfg(base, LOOP_SIZE), weights=default_weights_path(), cache_dir=base / "cache")


@pytest.fixture(scope="session")
def loop_clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The loops' mp4v clip: ``LOOP_FRAMES`` frames of the synthetic scene, seed 3, 320x180."""
    from detector.synthetic import make_synthetic_video

    return make_synthetic_video(tmp_path_factory.mktemp("loop-clip") / "clip.mp4", seed=3, width=320, height=180,
                                frames=LOOP_FRAMES).video


@pytest.fixture(scope="module")
def loop_runner(loop_spec: ModelSpec) -> Iterator[Runner]:
    """An active torch runner of ``loop_spec`` on the CPU, one per test module."""
    from detector.backends import create_runner

    with create_runner("torch", loop_spec, device="cpu") as runner:
        yield runner


@pytest.fixture(scope="session")
def lazy_imports_done_outside_pytester() -> None:
    """Import what the plugin imports lazily (torch, pynvml, the history store) before pytester's in-process runs:
    pytester drops the modules first imported during a run, torch cannot be imported twice in one process, and a
    ``perf.store.schema`` dropped so stays an attribute of ``perf.store``, its tables of the dropped SQLAlchemy, which
    a store opened later by a test of this process refused. Modules that run pytester use it with
    ``pytestmark = pytest.mark.usefixtures("lazy_imports_done_outside_pytester")``."""
    import contextlib

    from perf.measure.machine import machine_fingerprint

    machine_fingerprint()
    with contextlib.suppress(ImportError):  # SQLAlchemy is the test extra's; without it the store's tests skip
        import perf.store.db  # noqa: F401


@pytest.fixture(scope="session", autouse=True)
def _session_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """One detector cache for the test session ($DETECTOR_CACHE, which the CLI and the suite share), never the
    user's ~/.cache/detector: in-process suite runs (pytester) and CLI subprocesses build the synthetic video and
    the ONNX exports once and reuse them."""
    import os

    folder = tmp_path_factory.mktemp("detector-cache")
    before = os.environ.get("DETECTOR_CACHE")
    os.environ["DETECTOR_CACHE"] = str(folder)
    yield folder
    if before is None:
        os.environ.pop("DETECTOR_CACHE", None)
    else:
        os.environ["DETECTOR_CACHE"] = before


@pytest.fixture
def perf_pytester(pytester: pytest.Pytester) -> pytest.Pytester:
    """A pytester directory whose conftest loads the perf plugin, as the repository's root conftest does (the
    module must load pytester: ``pytest_plugins = ["pytester"]``)."""
    pytester.makeconftest('pytest_plugins = ["perf.plugin"]')
    return pytester
