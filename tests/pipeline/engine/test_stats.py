"""Statistics: zero cost when off, per-node counts and the bottleneck when on."""

import threading

import pytest

from jaxfeed.pipeline import Dataset, Options, errors, stats
from jaxfeed.pipeline.stats import _Timed
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from engine_test_helpers import slow


def with_stats(ds):
    opts = Options()
    opts.experimental_statistics = True
    return ds.with_options(opts)


def test_statistics_off_leaves_iterators_unwrapped():
    it = iter(Dataset.range(10).map(lambda x: x).prefetch(2))
    assert not isinstance(it._it, _Timed)
    with pytest.raises(errors.FailedPreconditionError, match="Statistics are off"):
        it.stats()
    it.close()


def test_statistics_count_elements_per_node():
    it = iter(with_stats(Dataset.range(100).map(lambda x: x).prefetch(4)))
    assert len(list(it)) == 100
    report = it.stats()
    assert report["Map"]["elements"] == 100 and report["Prefetch"]["elements"] == 100
    assert report["Range"]["elements"] == 100


class WorkClock:
    """Fake time for the statistics' timer (``stats._perf``): it passes only when a mapped function calls
    ``work``. On the wall clock these tests fail whenever the consumer thread stalled inside another node's
    own call -- a full garbage collection of the whole suite's heap (100-400 ms on the loaded CI machine), or
    the thread descheduled -- for longer than the slow function's 40 x 2 ms: that node became the bottleneck."""

    def __init__(self):
        self.now, self.lock = 0.0, threading.Lock()

    def __call__(self):
        with self.lock:
            return self.now

    def work(self, seconds):
        with self.lock:
            self.now += seconds


@pytest.fixture
def work_clock(monkeypatch):
    clock = WorkClock()
    monkeypatch.setattr(stats, "_perf", clock)
    return clock


def test_bottleneck_names_the_slowest_node(work_clock):
    def the_slow_one(x):
        work_clock.work(0.002)
        return x

    ds = with_stats(Dataset.range(40).map(lambda x: x + 1).map(the_slow_one, name="the_slow_one").batch(4))
    opts = Options()
    opts.experimental_optimization.apply_default_optimizations = False
    it = iter(ds.with_options(opts))
    list(it)
    report = it.stats()
    assert "the_slow_one" in report.bottleneck
    text = str(report)
    assert "bottleneck:" in text and "busy s" in text and "the_slow_one" in text


def test_bottleneck_of_a_parallel_map_counts_its_worker_time(work_clock):
    # the consumer's side of every node is timed on the fake clock, which nothing moves here: the parallel
    # map is the bottleneck only through the function time its workers measured (slow: 2 ms a call, real)
    it = iter(with_stats(Dataset.range(40).map(slow, num_parallel_calls=2, name="par").prefetch(2)))
    list(it)
    report = it.stats()
    assert "par" in report.bottleneck
    assert report["Prefetch"]["fill"] is not None


def test_statistics_keep_the_iterator_resumable():
    assert_resumes_everywhere(lambda: with_stats(Dataset.range(9).map(lambda x: x * 2).batch(2).prefetch(1)))
