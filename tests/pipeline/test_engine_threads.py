"""Thread-parallel map, prefetch and AUTOTUNE."""

import threading
import time

import numpy as np

from jaxfeed.pipeline import AUTOTUNE, Dataset, Options
from jaxfeed.pipeline.iterators import autotune
from jaxfeed.pipeline.testing import assert_resumes_everywhere


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def budget(cpus=None, ram=None, enabled=None):
    opts = Options()
    opts.autotune.cpu_budget = cpus
    opts.autotune.ram_budget = ram
    opts.autotune.enabled = enabled
    opts.experimental_optimization.map_and_batch_fusion = False
    return opts


def slow(x):
    time.sleep(0.002)
    return x


def root_iterator(it):
    inner = it._it
    return getattr(inner, "inner", inner)


# ------------------------------------------------------------------------------------ the tuner
def test_tuner_raises_the_knob_while_the_consumer_waits():
    clock = FakeClock()
    tuner = autotune.Tuner(1, 4, clock=clock)
    for _ in range(10):
        clock.now += autotune.WINDOW
        tuner.waited(autotune.WINDOW / 2)
        tuner.tick()
    assert tuner.value == 4 and tuner.raises == 3


def test_tuner_keeps_the_knob_when_the_consumer_does_not_wait():
    clock = FakeClock()
    tuner = autotune.Tuner(1, 4, clock=clock)
    for _ in range(10):
        clock.now += autotune.WINDOW
        tuner.tick()
    assert tuner.value == 1


def test_tuner_buffers_double_within_their_maximum():
    clock = FakeClock()
    tuner = autotune.Tuner(2, 20, grow=lambda v: 2 * v, clock=clock)
    for _ in range(10):
        clock.now += autotune.WINDOW
        tuner.waited(autotune.WINDOW)
        tuner.tick()
    assert tuner.value == 20


# ------------------------------------------------------------------------------ parallel map
def test_autotuned_parallel_map_reaches_the_cpu_budget_when_it_is_the_bottleneck():
    it = iter(Dataset.range(200).map(slow, num_parallel_calls=AUTOTUNE).with_options(budget(cpus=3)))
    assert [int(x) for x in it] == list(range(200))
    assert root_iterator(it).parallelism == 3


def test_autotune_disabled_pins_parallelism_at_the_budget():
    it = iter(Dataset.range(5).map(slow, num_parallel_calls=AUTOTUNE).with_options(budget(cpus=3, enabled=False)))
    list(it)
    assert root_iterator(it).parallelism == 3


def test_parallel_map_bounds_blocks_in_flight():
    started = []
    gate = threading.Event()

    def blocked(x):
        started.append(int(x))
        gate.wait(5)
        return x

    it = iter(Dataset.range(10_000).map(blocked, num_parallel_calls=2).with_options(budget()))
    t = threading.Thread(target=lambda: next(it), daemon=True)
    t.start()
    while len(started) < 2:
        time.sleep(0.001)
    time.sleep(0.05)  # give an unbounded dispatcher the chance to misbehave (not a threshold on our speed)
    gate.set()
    t.join(5)
    assert len(root_iterator(it)._inflight) <= 4
    it.close()


def test_parallel_map_resumes_with_blocks_in_flight():
    assert_resumes_everywhere(lambda: Dataset.range(30).map(lambda x: x * 2, num_parallel_calls=3)
                              .with_options(budget()), ks=[0, 1, 7, 29, 30])


# ----------------------------------------------------------------------------------- prefetch
def bursty(x):
    time.sleep(0.02 if x % 16 == 0 else 0)
    return x


def consume_slowly(it):
    for _ in it:
        time.sleep(0.0005)


def test_autotuned_prefetch_grows_for_a_bursty_producer():
    it = iter(Dataset.range(300).map(bursty).prefetch(AUTOTUNE))
    consume_slowly(it)
    assert root_iterator(it).capacity > 2


def test_autotuned_prefetch_does_not_grow_for_a_slow_producer():
    it = iter(Dataset.range(100).map(slow).prefetch(AUTOTUNE))
    list(it)
    assert root_iterator(it).capacity == 2


def test_autotuned_prefetch_stays_within_the_ram_budget():
    element = np.zeros(1000, np.uint8)  # 1000 bytes; a budget of 4500 bytes allows a buffer of 4
    ds = Dataset.range(300).map(bursty).map(lambda x: element + np.uint8(x % 7)).prefetch(AUTOTUNE)
    it = iter(ds.with_options(budget(ram=4500)))
    consume_slowly(it)
    assert root_iterator(it).capacity <= 4
