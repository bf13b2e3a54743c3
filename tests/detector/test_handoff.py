"""detector.handoff: bounded queues that never hang once stopped, the buffer pool's bound, error hand-over."""

from __future__ import annotations

import threading
import time

import pytest

from detector.handoff import POLL_S, BoundedQueue, BufferPool, Cancelled, Control, start_worker


def test_a_full_queue_blocks_the_producer_until_an_item_is_taken() -> None:
    control = Control()
    q: BoundedQueue[int] = BoundedQueue(2, control)
    q.put(1)
    q.put(2)
    third = start_worker("producer", lambda: q.put(3), control)
    time.sleep(3 * POLL_S)
    assert third.is_alive() and q.qsize() == 2  # waiting for room
    assert q.get() == 1
    third.join(5)
    assert not third.is_alive() and [q.get(), q.get()] == [2, 3] and q.peak == 2


def test_a_stopped_control_ends_blocked_waits_with_cancelled() -> None:
    control = Control()
    empty: BoundedQueue[int] = BoundedQueue(1, control)
    full: BoundedQueue[int] = BoundedQueue(1, control)
    full.put(0)
    pool = BufferPool(1, (2, 2, 3), control, pinned=False)
    pool.acquire()
    waits = [start_worker(name, fn, control) for name, fn in
             [("get", empty.get), ("put", lambda: full.put(1)), ("acquire", pool.acquire)]]
    time.sleep(2 * POLL_S)
    control.stop.set()
    for thread in waits:
        thread.join(5)
        assert not thread.is_alive()
    assert control.error is None  # Cancelled is a consequence, never the cause
    with pytest.raises(Cancelled):
        empty.get()


def test_the_first_worker_error_is_kept_and_stops_the_others() -> None:
    control = Control()
    q: BoundedQueue[int] = BoundedQueue(1, control)
    waiting = start_worker("consumer", q.get, control)
    start_worker("failing", lambda: (_ for _ in ()).throw(RuntimeError("decoder died")), control).join(5)
    waiting.join(5)
    assert not waiting.is_alive()
    control.fail(ValueError("a later error"))
    assert isinstance(control.error, RuntimeError) and str(control.error) == "decoder died"


def test_the_pool_counts_buffers_out_and_its_peak() -> None:
    control = Control()
    pool = BufferPool(3, (4, 5, 3), control, pinned=False)
    a, b = pool.acquire(), pool.acquire()
    pool.release(a)
    c = pool.acquire()
    assert pool.in_use == 2 and pool.peak_in_use == 2 and len({a, b}) == 2 and c != b
    assert pool.arrays[b].shape == (4, 5, 3) and pool.arrays[b].ctypes.data == pool.tensors[b].data_ptr()


def test_queue_and_pool_reject_a_zero_size() -> None:
    with pytest.raises(ValueError, match="maxsize must be >= 1"):
        BoundedQueue(0, Control())
    with pytest.raises(ValueError, match="size must be >= 1"):
        BufferPool(0, (1, 1, 3), Control(), pinned=False)


def test_workers_are_daemon_threads_named_as_given() -> None:
    control = Control()
    done = threading.Event()
    thread = start_worker("pipelined-test", done.set, control)
    thread.join(5)
    assert done.is_set() and thread.daemon and thread.name == "pipelined-test" and control.error is None
