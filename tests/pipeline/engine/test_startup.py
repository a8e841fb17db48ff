"""Start-up and work stealing in the threaded stages: the first results come from the consumer's own
thread (no hand-off before the first batch), and a block no worker has started is run by the consumer
instead of waited for. Order and content are covered by the equality tests elsewhere; these check where
the work ran."""

from __future__ import annotations

import io
import threading
import time

import numpy as np

from jaxfeed.formats import tfrecord
from jaxfeed.pipeline import AUTOTUNE, Dataset
from jaxfeed.pipeline.iterators import map_batch


def on_thread(record):
    def fn(x):
        record.append((int(x), threading.current_thread()))
        return x
    return fn


def test_parallel_map_runs_a_slow_functions_first_elements_in_parallel():
    # The first call is not run inline: two elements that each wait for the other to start finish only
    # when two workers run them at once (a consumer computing them one after another would time out).
    barrier = threading.Barrier(2, timeout=10)

    def fn(x):
        if x < 2:
            barrier.wait()
        return x

    assert [int(x) for x in Dataset.range(6).map(fn, num_parallel_calls=2)] == list(range(6))


def test_parallel_map_runs_a_due_block_no_worker_has_started():
    # One worker, stuck on element 1 until some element is computed on the consumer thread: only a consumer
    # that takes unstarted blocks back from the pool (deterministic=False: any finished or unstarted block is
    # due) gets past it; one that only waits would sit out the 10 s and fail. (If the consumer takes element
    # 1 itself, that is the same stealing.)
    consumer = threading.current_thread()
    gate = threading.Event()
    released, on_consumer = [], []

    def fn(x):
        here = threading.current_thread() is consumer
        if here:
            on_consumer.append(int(x))
        if x == 1 and not here:
            released.append(gate.wait(10))
        elif x > 1 and here:
            gate.set()
        return x

    ds = Dataset.range(2000).map(fn, num_parallel_calls=1, deterministic=False)
    assert sorted(int(x) for x in ds) == list(range(2000))
    assert on_consumer and released in ([], [True])


def test_prefetch_serves_the_first_element_on_the_consumer_thread():
    seen = []
    it = iter(Dataset.range(10).map(on_thread(seen)).prefetch(4))
    assert int(next(it)) == 0
    assert seen[0] == (0, threading.current_thread())
    assert [int(x) for x in it] == list(range(1, 10))


def test_prefetch_of_an_empty_input_ends_without_a_thread():
    it = iter(Dataset.range(0).prefetch(AUTOTUNE))
    assert list(it) == []


def test_parallel_interleave_reads_a_queued_current_slot_on_the_consumer():
    # AUTOTUNE starts with one reader, which can read one slot at a time; the rest of the first round is
    # read by the consumer itself when it gets there first. Every element still comes once, in order.
    seen = []

    def inner(x):
        return Dataset.range(3).map(lambda v: x * 10 + v).map(on_thread(seen))

    ds = Dataset.range(4).interleave(inner, cycle_length=4, num_parallel_calls=AUTOTUNE)
    assert [int(v) for v in ds] == [0, 10, 20, 30, 1, 11, 21, 31, 2, 12, 22, 32]
    assert len(seen) == 12


class RecordingStream(io.BytesIO):
    def __init__(self, data):
        super().__init__(data)
        self.reads = []

    def read(self, n=-1):
        self.reads.append(n)
        return super().read(n)

    def readinto(self, buffer):  # the C path reads into a reused buffer
        self.reads.append(len(buffer))
        return super().readinto(buffer)


def test_tfrecord_reads_ramp_up_from_a_small_first_read():
    data = tfrecord.frame_many([bytes([i % 256]) * 1000 for i in range(6000)])  # ~6 MB
    stream = RecordingStream(data)
    reader = tfrecord.RecordReader(stream, "mem.tfrecord")
    records = []
    while True:
        items, _, error = reader.read_block()
        assert error is None
        if not items:
            break
        records.extend(items)
    assert len(records) == 6000 and records[5999] == bytes([5999 % 256]) * 1000
    assert stream.reads[0] == tfrecord.FIRST_READ
    sizes = [n for n in stream.reads if n > 0]
    block = reader._block_size
    assert sizes == sorted(sizes) and sizes[0] < block and sizes[-1] == block  # grows, then stays at the block


def slow_identity(x):
    time.sleep(0.001)
    return x


def test_restored_prefetch_never_serves_inline_behind_its_producer():
    # A restored prefetch starts its producer at once (it has a buffer to serve): a consumer that then
    # found the buffer momentarily empty must wait for the producer, not read the input itself, or it
    # takes an element the producer has not handed over yet and the order breaks (found by the resume
    # property test). Repeated because the window is a race.
    ds = Dataset.range(40).map(slow_identity).prefetch(2)  # the producer spends its time inside the input
    for _ in range(10):
        first = iter(ds)
        head = [int(next(first)) for _ in range(2)]
        state = first.get_state()
        first.close()
        tail = [int(x) for x in ds.make_iterator(state=state)]
        assert head + tail == list(range(40))


def test_fused_vectorized_map_and_batch_builds_its_first_batch_on_the_consumer_thread():
    seen = []

    def fn(x):
        seen.append(threading.current_thread())
        return x + 1

    ds = Dataset.range(100).map(fn, num_parallel_calls=AUTOTUNE, vectorized=True).batch(10)
    assert "MapAndBatch" in ds.explain()
    it = iter(ds)
    assert next(it).tolist() == list(range(1, 11))
    assert seen == [threading.current_thread()]
    assert np.concatenate(list(it)).tolist() == list(range(11, 101))


def test_fused_map_and_batch_spreads_a_slow_functions_first_batch_over_threads(monkeypatch):
    monkeypatch.setattr(map_batch, "FIRST_INLINE_SECONDS", 0.0)  # the budget is spent after one element
    seen = []

    def fn(x):
        seen.append(threading.current_thread())
        time.sleep(0.02)
        return x

    ds = Dataset.range(12).map(fn, num_parallel_calls=2).batch(6)
    assert "MapAndBatch" in ds.explain()
    it = iter(ds)
    assert next(it).tolist() == list(range(6))
    assert seen[0] is threading.current_thread()  # the first element, on the consumer
    assert len(set(seen[:6])) >= 2  # the rest not one after another on the consumer alone
    assert next(it).tolist() == list(range(6, 12))


def test_fused_map_and_batch_builds_a_cheap_functions_first_batch_on_the_consumer(monkeypatch):
    monkeypatch.setattr(map_batch, "FIRST_INLINE_SECONDS", 60.0)  # (not a claim on speed: any budget left)
    seen = []
    ds = Dataset.range(100).map(on_thread(seen), num_parallel_calls=2).batch(10)
    it = iter(ds)
    assert next(it).tolist() == list(range(10))
    assert {t for _, t in seen} == {threading.current_thread()}
    assert np.concatenate(list(it)).tolist() == list(range(10, 100))
