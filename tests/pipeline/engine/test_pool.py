"""The tunable thread pool under the threaded maps: at most ``limit`` tasks run at once, queued tasks can
be taken back, the limit moves both ways while it runs, and shutdown leaves no thread behind."""

from __future__ import annotations

import threading
import time

import pytest

from jaxfeed.pipeline.engine.pool import TunedPool


def concurrency_probe():
    state = {"now": 0, "peak": 0}
    lock = threading.Lock()

    def task(seconds=0.01):
        with lock:
            state["now"] += 1
            state["peak"] = max(state["peak"], state["now"])
        time.sleep(seconds)
        with lock:
            state["now"] -= 1
        return threading.current_thread().name

    return state, task


def test_at_most_limit_tasks_run_at_once():
    state, task = concurrency_probe()
    pool = TunedPool(4, 1, "t")
    futures = [pool.submit(task) for _ in range(8)]
    assert all(f.result(timeout=10) for f in futures)
    assert state["peak"] == 1
    pool.limit = 3
    meeting = threading.Barrier(3)  # passes only when 3 tasks run at once: no bet on how fast threads start
    running, guard = {"now": 0, "peak": 0}, threading.Lock()

    def meet():
        with guard:
            running["now"] += 1
            running["peak"] = max(running["peak"], running["now"])
        meeting.wait(timeout=10)
        with guard:
            running["now"] -= 1
        return True

    futures = [pool.submit(meet) for _ in range(12)]
    assert all(f.result(timeout=20) for f in futures)
    assert running["peak"] == 3
    pool.shutdown()


def test_lowering_the_limit_parks_threads_between_tasks():
    state, task = concurrency_probe()
    pool = TunedPool(4, 4, "t")
    [f.result(timeout=10) for f in [pool.submit(task) for _ in range(8)]]
    state["peak"] = 0
    pool.limit = 1
    [f.result(timeout=10) for f in [pool.submit(task) for _ in range(6)]]
    assert state["peak"] == 1
    pool.shutdown()


def test_a_queued_task_can_be_taken_back_and_errors_travel():
    gate = threading.Event()
    pool = TunedPool(1, 1, "t")
    running = pool.submit(gate.wait, 10)
    queued = pool.submit(lambda: "ran")
    assert queued.cancel()  # no thread started it: the consumer may run it itself
    failing = pool.submit(lambda: 1 / 0)
    gate.set()
    assert running.result(timeout=10) is True
    with pytest.raises(ZeroDivisionError):
        failing.result(timeout=10)
    pool.shutdown()


def test_shutdown_cancels_queued_tasks_and_stops_the_threads():
    gate = threading.Event()
    pool = TunedPool(2, 1, "jaxfeed-test-pool")
    first = pool.submit(gate.wait, 10)
    queued = pool.submit(lambda: None)
    deadline = time.monotonic() + 10
    while not first.running():
        assert time.monotonic() < deadline
        time.sleep(0.001)
    pool.shutdown()
    assert queued.cancelled()
    gate.set()
    assert first.result(timeout=10) is True
    deadline = time.monotonic() + 10
    while any(t.name.startswith("jaxfeed-test-pool") for t in threading.enumerate()):
        assert time.monotonic() < deadline, "pool threads still alive"
        time.sleep(0.01)
    with pytest.raises(RuntimeError):
        pool.submit(lambda: None)
