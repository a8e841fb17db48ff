"""One thread hand-off per step (issue 19, "Feed to devices"): the distributed iterator's prefetch thread reads
a pipeline that ends in ``prefetch`` itself (the pipeline's prefetch starts no thread of its own), and its
queue wakes the consumer once per full queue while the producer is the slower side -- with the same steps,
states and ends as before."""

import threading
import time

import numpy as np
import pytest

from jaxfeed import distribute as jd
from jaxfeed.distribute.step_queue import StepQueue
from jaxfeed.pipeline import AUTOTUNE, Dataset, Options


@pytest.fixture(scope="module")
def s4():
    return jd.MirroredStrategy([f"cpu:{i}" for i in range(4)])


def ported(n=256, batch=16):
    """P2's shape as a user ports it from tf.data: slices, shuffle, batch, prefetch(AUTOTUNE)."""
    rows = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    return Dataset.from_tensor_slices(rows).shuffle(64, seed=7).batch(batch).prefetch(AUTOTUNE)


def steps_of(it):
    return [np.asarray(step.arrays).tolist() for step in it]


def pipeline_threads():
    return [t.name for t in threading.enumerate() if t.name == "jaxfeed-prefetch"]


def wait_until(condition):
    deadline = time.monotonic() + 30  # a hang guard, not a speed check
    while not condition():
        assert time.monotonic() < deadline
        time.sleep(0.001)


# ---------------------------------------------------------------------------------------------- take-over
def test_the_pipelines_output_prefetch_starts_no_thread_under_the_distributed_prefetch(s4):
    before = len(pipeline_threads())
    it = iter(s4.experimental_distribute_dataset(ported()))
    for _ in range(5):
        next(it)
    assert it.took_over_prefetch
    assert len(pipeline_threads()) == before
    it.close()


def test_taken_over_steps_are_the_steps_read_without_a_prefetch_thread(s4):
    sync = jd.InputOptions(experimental_per_replica_buffer_size=0)  # no distributed thread: no take-over
    expected = steps_of(iter(s4.experimental_distribute_dataset(ported(), sync)))
    it = iter(s4.experimental_distribute_dataset(ported()))
    assert steps_of(it) == expected
    assert it.took_over_prefetch and len(expected) == 16


def test_a_state_saved_with_elements_in_the_pipelines_prefetch_resumes_exactly_when_taken_over(s4):
    # read on the consumer's thread (buffer 0): the pipeline's prefetch thread runs ahead and its buffer is
    # part of the state; a taken-over prefetch serves those elements first
    sync = jd.InputOptions(experimental_per_replica_buffer_size=0)
    expected = steps_of(iter(s4.experimental_distribute_dataset(ported(), sync)))  # (a fresh dataset's first
    it = iter(s4.experimental_distribute_dataset(ported(), sync))  # epoch each: a shuffle's order is per epoch)
    head = [np.asarray(next(it).arrays).tolist() for _ in range(3)]
    wait_until(lambda: it.get_state()["workers"][0]["root"]["input"]["input"]["buffer"])
    state = it.get_state()
    resumed = iter(s4.experimental_distribute_dataset(ported()))
    resumed.set_state(state)
    assert head + steps_of(resumed) == expected
    assert resumed.took_over_prefetch


def test_a_taken_over_iterator_saves_and_resumes_mid_epoch(s4):
    expected = steps_of(iter(s4.experimental_distribute_dataset(ported())))
    dist = s4.experimental_distribute_dataset(ported())
    it = iter(dist)
    head = [np.asarray(next(it).arrays).tolist() for _ in range(5)]
    state = it.get_state()
    assert head + steps_of(it) == expected
    again = iter(dist)  # a later epoch's iterator: the state says which epoch it resumes
    again.set_state(state)
    assert head + steps_of(again) == expected


def test_no_take_over_without_the_distributed_prefetch_thread(s4):
    it = iter(s4.experimental_distribute_dataset(
        ported(), jd.InputOptions(experimental_per_replica_buffer_size=0)))
    next(it)
    assert not it.took_over_prefetch
    it.close()


def test_no_take_over_of_a_prefetch_whose_thread_started_at_creation(s4):
    o = Options()
    o.experimental_warm_start = True
    dist = s4.experimental_distribute_dataset(ported().with_options(o))
    expected = steps_of(iter(s4.experimental_distribute_dataset(ported())))
    it = iter(dist)
    assert steps_of(it) == expected
    assert not it.took_over_prefetch


def test_no_take_over_of_per_replica_pipelines(s4):
    def fn(ctx):
        return Dataset.range(64).shard(ctx.num_input_pipelines, ctx.input_pipeline_id).batch(4).prefetch(2)

    it = iter(s4.distribute_datasets_from_function(
        fn, jd.InputOptions(experimental_replication_mode=jd.InputReplicationMode.PER_REPLICA)))
    first = next(it)
    assert not it.took_over_prefetch
    assert [v.tolist() for v in s4.experimental_local_results(first)] == [[0, 4, 8, 12], [1, 5, 9, 13],
                                                                          [2, 6, 10, 14], [3, 7, 11, 15]]
    it.close()


def test_a_prefetch_below_another_stage_is_not_taken_over(s4):
    ds = ported().map(lambda x: x + 1)
    it = iter(s4.experimental_distribute_dataset(ds))
    next(it)
    assert not it.took_over_prefetch
    it.close()


# ---------------------------------------------------------------------------------------------- StepQueue
class Consumer:
    """``StepQueue.get`` on a thread of its own, one call per ``take``."""

    def __init__(self, q):
        self.q, self.got = q, []

    def take(self):
        self.thread = threading.Thread(target=lambda: self.got.append(self.q.get()))
        self.thread.start()
        return self

    def wants(self, n):
        wait_until(lambda: self.q._consumer_wants == n)

    def result(self):
        self.thread.join(30)
        assert not self.thread.is_alive()
        return self.got[-1]


def test_a_consumer_that_outruns_the_producer_waits_for_a_full_queue():
    q, stop = StepQueue(3), threading.Event()
    c = Consumer(q).take()
    c.wants(1)  # the first wait: one step (nothing is known of the producer yet)
    q.put("a", stop)
    assert c.result() == "a"
    c.take()
    c.wants(3)  # it waited before and the queue was never full since: one wake-up per full queue
    q.put("b", stop)
    q.put("c", stop)
    assert c.thread.is_alive() and q._consumer_wants == 3
    q.put("d", stop)
    assert c.result() == "b"
    assert [q.get(), q.get()] == ["c", "d"]  # taken without waiting


def test_a_consumer_waits_for_one_step_after_the_producer_kept_up():
    q, stop = StepQueue(2), threading.Event()
    c = Consumer(q).take()
    c.wants(1)
    q.put("a", stop)
    assert c.result() == "a"
    q.put("b", stop)
    q.put("c", stop)  # full while the consumer was busy: the producer keeps up
    assert [q.get(), q.get()] == ["b", "c"]
    c.take()
    c.wants(1)  # it fell behind once: the wait is as short as it can be
    q.put("d", stop)
    assert c.result() == "d"


def test_the_last_item_wakes_a_consumer_waiting_for_more():
    q, stop = StepQueue(4), threading.Event()
    q._kept_up = False  # as after a wait that the producer did not keep up with
    c = Consumer(q).take()
    c.wants(4)
    q.put("step", stop)
    q.put("end", stop, last=True)
    assert c.result() == "step"
    assert q.get() == "end"


def test_a_producer_stopped_while_the_queue_is_full_puts_nothing():
    q, stop = StepQueue(1), threading.Event()
    assert q.put("a", stop)
    stop.set()
    assert not q.put("b", stop)
    assert q.drain() == ["a"] and q.empty()


def test_a_producer_waiting_for_room_goes_on_when_a_step_is_taken():
    q, stop = StepQueue(1), threading.Event()
    q.put("a", stop)
    done = []
    producer = threading.Thread(target=lambda: done.append(q.put("b", stop)))
    producer.start()
    wait_until(lambda: q._producer_waiting)
    assert q.get() == "a"
    producer.join(30)
    assert done == [True] and q.drain() == ["b"]
