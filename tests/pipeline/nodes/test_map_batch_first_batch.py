"""The fused map+batch's first batch (``map_batch.py``, ``_run_first``): built on the consumer for a cheap
function, spread over the workers for a slow one. Time is a fake clock that the mapped function moves on."""

import threading

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.iterators import map_batch
from jaxfeed.pipeline.iterators.map_batch import MapBatchIterator


class FakeClock:
    def __init__(self):
        self.now, self.lock = 0.0, threading.Lock()

    def __call__(self):
        with self.lock:
            return self.now

    def spend(self, seconds):
        with self.lock:
            self.now += seconds


@pytest.fixture
def clock(monkeypatch):
    fake = FakeClock()
    monkeypatch.setattr(MapBatchIterator, "clock", staticmethod(fake))
    return fake


def first_batch_threads(clock, cost, n=256):
    """The threads that mapped a ``map(f).batch(n)``'s first batch, ``cost(x)`` fake seconds per call."""
    seen = {}

    def fn(x):
        seen[int(x)] = threading.current_thread()
        clock.spend(cost(int(x)))
        return x

    ds = Dataset.range(4 * n).map(fn, num_parallel_calls=2).batch(n)
    assert "MapAndBatch" in ds.explain()
    it = iter(ds)
    assert next(it).tolist() == list(range(n))
    threads = {seen[i] for i in range(n)}
    assert np.concatenate(list(it)).tolist() == list(range(n, 4 * n))
    it.close()
    return threads


def test_a_cheap_functions_first_batch_is_built_on_the_consumer(clock):
    assert first_batch_threads(clock, lambda x: 1e-6) == {threading.current_thread()}


def test_a_first_calls_one_off_cost_does_not_send_the_batch_to_the_workers(clock):
    # 0.5 ms for the first call (imports, caches), 1 us after: judged on its own, 255 more such calls would
    # have looked like ~130 ms of work
    assert first_batch_threads(clock, lambda x: 5e-4 if x == 0 else 1e-6) == {threading.current_thread()}


def test_one_slow_chunk_does_not_send_the_batch_to_the_workers(clock):
    # the consumer descheduled for 20 ms while it mapped elements 3..6: the quickest chunk sets the rate
    assert first_batch_threads(clock, lambda x: 5e-3 if x == 3 else 1e-6) == {threading.current_thread()}


def test_a_slow_functions_first_batch_is_spread_over_the_workers(clock, monkeypatch):
    # 2 ms a call: the first call alone shows that the batch would take half a second here
    gate = threading.Barrier(2, timeout=20)  # two calls that finish only together: proof of two threads

    def cost(x):
        if x in (100, 200):
            gate.wait()
        return 2e-3

    threads = first_batch_threads(clock, cost)
    assert threading.current_thread() in threads and len(threads) >= 2
    assert map_batch.FIRST_CALL_SLOW <= 2e-3 and map_batch.FIRST_INLINE_SECONDS < 2e-3 * 255
