"""Hand-off between the threads of a pipelined loop: a shared stop signal, bounded queues, a pool of (pinned)
frame buffers.

The pieces :mod:`detector.pipelined` and :mod:`detector.multistream` are built from:

* :class:`Control` -- the first error of any thread, and the stop signal every other thread watches.
* :class:`BoundedQueue` -- a ``queue.Queue(maxsize)`` whose blocking ``put``/``get`` give up with
  :class:`Cancelled` once the control is stopped, so no thread hangs on a queue whose peer has died.
* :class:`BufferPool` -- a fixed set of ``H x W x 3`` uint8 frame buffers (page-locked when the frames go to
  a GPU, so uploads are asynchronous DMA); a frame lives in one buffer from decode to encode, so the pool
  size bounds the frames in flight, and the memory, whatever the queues hold.
* :func:`start_worker` -- a daemon thread that reports its exception to the control instead of losing it;
  :func:`set_thread_placement` lets a caller pin each worker to CPUs by its name (a benchmark that wants the
  same placement in every process, a deployment that keeps the encoder off the cores of other work).

Waits poll the stop signal every :data:`POLL_S` seconds: a failure anywhere stops every thread within
about that time.
"""

from __future__ import annotations

import logging
import os
import queue
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

if TYPE_CHECKING:
    import numpy as np

log = logging.getLogger(__name__)

__all__ = ["POLL_S", "BoundedQueue", "BufferPool", "Cancelled", "Control", "set_thread_placement", "start_worker"]

#: Seconds between checks of the stop signal while a thread waits on a queue or the pool.
POLL_S = 0.05

T = TypeVar("T")


class Cancelled(Exception):
    """Raised inside a thread's wait when another thread failed (or the caller stopped the pipeline)."""


class Control:
    """The stop signal and the first error of a group of threads."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self._lock = threading.Lock()
        self.error: BaseException | None = None

    def fail(self, error: BaseException) -> None:
        """Record ``error`` (only the first one counts; a :class:`Cancelled` never does) and stop everything."""
        with self._lock:
            if self.error is None and not isinstance(error, Cancelled):
                self.error = error
        self.stop.set()

    def check(self) -> None:
        """Raise :class:`Cancelled` if the group was stopped."""
        if self.stop.is_set():
            raise Cancelled


class BoundedQueue(Generic[T]):
    """A FIFO of at most ``maxsize`` items whose waits end with :class:`Cancelled` when ``control`` stops.

    ``peak`` is the largest number of items it held (seen by the producer right after a put).
    """

    def __init__(self, maxsize: int, control: Control, name: str = "queue") -> None:
        if maxsize < 1:
            raise ValueError(f"{name}: maxsize must be >= 1, got {maxsize}")
        self.maxsize = maxsize
        self.name = name
        self.peak = 0
        self._queue: queue.Queue[T] = queue.Queue(maxsize)
        self._control = control

    def put(self, item: T) -> None:
        """Append ``item``, waiting while the queue is full."""
        while True:
            self._control.check()
            try:
                self._queue.put(item, timeout=POLL_S)
            except queue.Full:
                continue
            self.peak = max(self.peak, self._queue.qsize())
            return

    def get(self) -> T:
        """Remove and return the oldest item, waiting while the queue is empty."""
        while True:
            self._control.check()
            try:
                return self._queue.get(timeout=POLL_S)
            except queue.Empty:
                continue

    def qsize(self) -> int:
        return self._queue.qsize()


class BufferPool:
    """``size`` frame buffers of ``shape`` (``(height, width, 3)``) uint8, handed out by index.

    ``tensors[i]`` is a torch tensor (pinned when ``pinned``) and ``arrays[i]`` a numpy view of the same
    memory: OpenCV decodes into the array, torch uploads from the tensor, the writer draws on the array.
    ``peak_in_use`` is the largest number of buffers out at once.
    """

    def __init__(self, size: int, shape: tuple[int, ...], control: Control, *, pinned: bool) -> None:
        import torch

        if size < 1:
            raise ValueError(f"buffer pool: size must be >= 1, got {size}")
        self.size = size
        self.pinned = pinned
        self.tensors: list[Any] = [torch.empty(shape, dtype=torch.uint8, pin_memory=pinned)
                                            for _ in range(size)]
        self.arrays: list[np.ndarray] = [t.numpy() for t in self.tensors]
        self._free: queue.SimpleQueue[int] = queue.SimpleQueue()
        for i in range(size):
            self._free.put(i)
        self._lock = threading.Lock()
        self._control = control
        self.in_use = 0
        self.peak_in_use = 0

    def acquire(self) -> int:
        """Index of a free buffer, waiting until one is released."""
        while True:
            self._control.check()
            try:
                index = self._free.get(timeout=POLL_S)
            except queue.Empty:
                continue
            with self._lock:
                self.in_use += 1
                self.peak_in_use = max(self.peak_in_use, self.in_use)
            return index

    def release(self, index: int) -> None:
        """Give buffer ``index`` back."""
        with self._lock:
            self.in_use -= 1
        self._free.put(index)


#: Where new worker threads run: name -> CPU numbers, or None for wherever the OS puts them.
_placement: Callable[[str], set[int] | None] | None = None


def set_thread_placement(placement: Callable[[str], set[int] | None] | None) -> Callable[[str], set[int] | None] | None:
    """Pin every worker started from now on to ``placement(thread name)`` CPUs (None: no pinning); returns the
    previous placement so a caller can put it back. Linux only (``os.sched_setaffinity`` of the thread)."""
    global _placement
    previous, _placement = _placement, placement
    return previous


def start_worker(name: str, body: Callable[[], Any], control: Control) -> threading.Thread:
    """Run ``body()`` on a new daemon thread; an exception it raises goes to ``control.fail`` (stopping all).
    The thread first pins itself where :func:`set_thread_placement` says."""
    placement = _placement

    def run() -> None:
        try:
            cpus = placement(name) if placement is not None else None
            if cpus:
                os.sched_setaffinity(0, cpus)  # 0: the calling thread
            body()
        except BaseException as e:  # noqa: BLE001 -- every error must reach the caller's thread
            if not isinstance(e, Cancelled):
                log.debug("thread %s failed: %r", name, e)
            control.fail(e)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    return thread
