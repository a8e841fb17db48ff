"""Options that say they do something do it: ``threading.private_threadpool_size`` caps the threads of each
parallel stage, ``experimental_warm_start`` starts background stages when the iterator is created.

Thread counts are read from ``threading.enumerate()`` (threads this test's iterator started, by the names
the stages give them); warm start is seen by a function that records being called before any ``next``.
Nothing here depends on the machine's speed: a wait with a timeout only bounds how long a failure takes.
"""

import logging
import threading
import time

import numpy as np
import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset, Options
from jaxfeed.pipeline.iterators.parallel_interleave import ParallelInterleaveIterator
from jaxfeed.pipeline.iterators.parallel_map import ParallelMapIterator
from jaxfeed.pipeline.engine.thread_start import wait_handled

FAILURE_TIMEOUT = 60  # seconds; only a failing test waits this long


def options(threads=None, warm=None, cpus=None):
    opts = Options()
    opts.threading.private_threadpool_size = threads
    opts.experimental_warm_start = warm
    opts.autotune.cpu_budget = cpus
    return opts


def threads_now():
    """The threads alive once every thread start handed over so far has happened: an earlier test's stage may
    start one late (``engine/thread_start.py``), which would otherwise count as this test's."""
    assert wait_handled(30)
    return set(threading.enumerate())


def new_threads(before, prefix):
    assert wait_handled(30)  # (this test's own starts, handed over to the starter thread, have happened)
    return [t for t in threading.enumerate() if t not in before and t.name.startswith(prefix)]


def stage(iterator, cls):
    """The first iterator of class ``cls`` in ``iterator``'s tree."""
    todo = [iterator._it]
    while todo:
        it = todo.pop()
        inner = getattr(it, "inner", it)  # (statistics wrap iterators)
        if isinstance(inner, cls):
            return inner
        todo.extend(c for c in inner.children() if c is not None)
    raise AssertionError(f"no {cls.__name__} in the tree")


# ---------------------------------------------------------------------- private_threadpool_size
def test_private_threadpool_size_caps_the_threads_of_a_thread_map():
    before = threads_now()
    ds = Dataset.range(64).map(lambda x: x + 1, num_parallel_calls=8).with_options(options(threads=2))
    with iter(ds) as it:
        assert int(next(it)) == 1  # the first blocks are submitted: the pool has started its threads
        assert 1 <= len(new_threads(before, "jaxfeed-map")) <= 2
        assert [int(x) for x in it] == list(range(2, 65))  # order and values unchanged


def test_private_threadpool_size_keeps_the_tasks_in_flight_of_num_parallel_calls():
    # tf.data's meaning: num_parallel_calls elements in flight, at most the pool's size of them running
    ds = Dataset.range(64).map(lambda x: x, num_parallel_calls=8).with_options(options(threads=2))
    with iter(ds) as it:
        next(it)
        assert stage(it, ParallelMapIterator).workers == 8


def test_private_threadpool_size_caps_the_readers_of_a_parallel_interleave():
    before = threads_now()
    ds = Dataset.range(8).interleave(lambda x: Dataset.range(5).map(lambda y: y + 10 * x), cycle_length=8,
                                     num_parallel_calls=8).with_options(options(threads=2))
    with iter(ds) as it:
        first = int(next(it))
        deadline = time.monotonic() + 30  # readers start on the starter thread: soon, not necessarily by now
        while not new_threads(before, "jaxfeed-interleave") and time.monotonic() < deadline:
            time.sleep(0.001)
        assert 1 <= len(new_threads(before, "jaxfeed-interleave")) <= 2
        rest = [int(x) for x in it]
    expected = [10 * x + y for y in range(5) for x in range(8)]  # cycle 8, block 1: unchanged order
    assert [first] + rest == expected


def test_private_threadpool_size_caps_the_threads_of_a_parallel_batch():
    before = threads_now()
    ds = Dataset.range(64).batch(2, num_parallel_calls=8).with_options(options(threads=2))
    with iter(ds) as it:
        assert [int(x) for x in next(it)] == [0, 1]
        assert 1 <= len(new_threads(before, "jaxfeed-batch")) <= 2
        assert [int(x) for b in it for x in b] == list(range(2, 64))


def test_private_threadpool_size_caps_the_threads_of_a_fused_map_and_batch():
    before = threads_now()
    ds = Dataset.range(64).map(lambda x: x + 1, num_parallel_calls=8).batch(2)  # fused: one MapAndBatch stage
    with iter(ds.with_options(options(threads=2))) as it:
        assert [int(x) for x in next(it)] == [1, 2]
        assert [int(x) for x in next(it)] == [3, 4]  # the second batch starts the pool
        assert 1 <= len(new_threads(before, "jaxfeed-mapbatch")) <= 2
        assert [int(x) for b in it for x in b] == list(range(5, 65))


def test_autotune_never_tunes_past_the_private_threadpool_size():
    map_ds = Dataset.range(16).map(lambda x: x, num_parallel_calls=AUTOTUNE)
    interleave_ds = Dataset.range(8).interleave(lambda x: Dataset.range(3), cycle_length=8,
                                                num_parallel_calls=AUTOTUNE)
    for ds, cls in ((map_ds, ParallelMapIterator), (interleave_ds, ParallelInterleaveIterator)):
        with iter(ds.with_options(options(threads=2, cpus=4))) as it:
            assert stage(it, cls).workers == 2  # the tuner's maximum (4 CPUs in the budget, capped at 2)


def test_private_threadpool_size_zero_means_no_cap():
    before = threads_now()
    ds = Dataset.range(64).map(lambda x: x, num_parallel_calls=4).with_options(options(threads=0))
    with iter(ds) as it:
        next(it)
        assert len(new_threads(before, "jaxfeed-map")) == 4


def test_private_threadpool_size_refuses_a_negative_value():
    opts = Options()
    with pytest.raises(ValueError, match="private_threadpool_size"):
        opts.threading.private_threadpool_size = -1
    assert opts.threading.private_threadpool_size is None


def test_private_threadpool_size_says_it_does_not_limit_worker_processes(caplog):
    ds = Dataset.range(4).map(abs, num_parallel_calls=2, executor="process").with_options(options(threads=1))
    with caplog.at_level(logging.WARNING, logger="jaxfeed"):
        it = iter(ds)  # (worker processes start at the first next: none are started here)
        it.close()
    assert any("private_threadpool_size" in r.getMessage() and "processes" in r.getMessage()
               for r in caplog.records)


# ---------------------------------------------------------------------- experimental_warm_start
def _recording(called: threading.Event):
    def f(x):
        called.set()
        return x

    return f


@pytest.mark.parametrize("build", [
    lambda f: Dataset.range(10).map(f).prefetch(2),
    lambda f: Dataset.range(10).map(f).prefetch(AUTOTUNE),
    lambda f: Dataset.range(10).map(f, num_parallel_calls=2),
    lambda f: Dataset.range(10).interleave(lambda x: Dataset.from_tensors(x).map(f), cycle_length=2,
                                           num_parallel_calls=2),
    lambda f: Dataset.range(10).map(f, num_parallel_calls=2).batch(2),  # fused: MapAndBatch
    lambda f: Dataset.range(10).map(f).filter(lambda x: True).batch(2, num_parallel_calls=2),  # (not fused)
], ids=["prefetch", "prefetch_autotune", "parallel_map", "parallel_interleave", "map_and_batch",
        "parallel_batch"])
def test_warm_start_runs_background_stages_before_the_first_next(build):
    called = threading.Event()
    with iter(build(_recording(called)).with_options(options(warm=True))) as it:
        assert called.wait(FAILURE_TIMEOUT), "no background stage ran before next()"
        assert sorted(int(x) for e in it for x in np.ravel(e)) == list(range(10))


@pytest.mark.parametrize("warm", [None, False])
def test_without_warm_start_nothing_runs_before_the_first_next(warm):
    called = threading.Event()
    ds = Dataset.range(10).map(_recording(called), num_parallel_calls=2).prefetch(2)
    with iter(ds.with_options(options(warm=warm))) as it:
        assert not called.is_set()
        assert [int(x) for x in it] == list(range(10))


def test_warm_start_after_a_restore_resumes_exactly():
    ds = Dataset.range(20).map(lambda x: x * 2, num_parallel_calls=2).prefetch(3)
    ds = ds.with_options(options(warm=True))
    it = iter(ds)
    head = [int(next(it)) for _ in range(5)]
    state = it.get_state()
    it.close()
    with iter(ds) as again:  # warm already; the restore stops its stages and starts them again
        again.set_state(state)
        assert head + [int(x) for x in again] == [2 * i for i in range(20)]


# ---------------------------------------------------------------------- map(synchronous=, use_unbounded_threadpool=)
def test_map_synchronous_with_num_parallel_calls_is_refused_as_in_tf_data():
    for npc in (1, 4, AUTOTUNE):
        with pytest.raises(ValueError, match="`synchronous` is not supported with `num_parallel_calls`"):
            Dataset.range(3).map(lambda x: x, num_parallel_calls=npc, synchronous=True)


def test_map_synchronous_runs_on_the_consumer_thread_and_buffers_nothing():
    calls = []
    ds = Dataset.range(10).map(lambda x: calls.append(threading.current_thread()) or x, synchronous=True)
    with iter(ds.with_options(options(warm=True))) as it:
        assert calls == []
        assert int(next(it)) == 0
        assert calls == [threading.current_thread()]


@pytest.mark.parametrize("synchronous", [None, False])
def test_map_synchronous_false_or_unset_is_accepted_with_num_parallel_calls(synchronous):
    ds = Dataset.range(5).map(lambda x: x, num_parallel_calls=2, synchronous=synchronous)
    assert [int(x) for x in ds] == list(range(5))


def test_map_use_unbounded_threadpool_is_not_capped_by_private_threadpool_size():
    before = threads_now()
    ds = Dataset.range(64).map(lambda x: x, num_parallel_calls=8, use_unbounded_threadpool=True)
    with iter(ds.with_options(options(threads=2))) as it:
        next(it)
        assert len(new_threads(before, "jaxfeed-map")) == 8


def test_map_use_unbounded_threadpool_reaches_the_fused_map_and_batch():
    before = threads_now()
    ds = Dataset.range(64).map(lambda x: x, num_parallel_calls=8, use_unbounded_threadpool=True).batch(2)
    with iter(ds.with_options(options(threads=2))) as it:
        next(it), next(it)  # (the first batch is built on the consumer; the second starts the pool)
        assert len(new_threads(before, "jaxfeed-mapbatch")) > 2


def test_maps_with_and_without_their_own_threads_are_not_fused():
    before = threads_now()
    ds = (Dataset.range(64).map(lambda x: x + 1, num_parallel_calls=8, use_unbounded_threadpool=True)
          .map(lambda x: x * 2, num_parallel_calls=8))
    with iter(ds.with_options(options(threads=2))) as it:
        assert int(next(it)) == 2
        assert len(new_threads(before, "jaxfeed-map")) == 8 + 2  # the unbounded stage's and the capped one's
        assert [int(x) for x in it] == [2 * (i + 1) for i in range(1, 64)]
