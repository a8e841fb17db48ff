"""The distributed iterator makes steps on the consumer's thread while the consumer does next to nothing
between calls, and on its own thread while the consumer works (distributed_iterator.py, engine/overlap.py) --
with the same steps, errors and states either way. Time is the ``thread_clock`` fixture (tests/conftest.py):
fake seconds of work per thread."""

import random
import threading

import numpy as np
import pytest

from jaxfeed import distribute as jd
from jaxfeed.pipeline import AUTOTUNE, Dataset

BATCH = 16
STEPS = 300  # the thread may have read up to a window + its queue + the prefetch's 64 steps ahead


@pytest.fixture(scope="module")
def s4():
    return jd.MirroredStrategy([f"cpu:{i}" for i in range(4)])


def recorded(clock, made_on, steps=STEPS):
    """Rows 0..steps*BATCH-1, each recording the thread that made it and costing one fake second there."""

    def make(x):
        made_on[int(x)] = threading.current_thread()
        clock.work(1.0)
        return x

    return Dataset.range(steps * BATCH).map(make).batch(BATCH).prefetch(AUTOTUNE)


def drive(it, clock, away):
    """Every step's rows, working ``away(i)`` fake seconds after step i."""
    out = []
    for i, step in enumerate(it):
        out.append(np.asarray(step.arrays).tolist())
        clock.work(away(i))
    return out


def made_here(made_on, steps):
    here = threading.current_thread()
    return [all(made_on[r] is here for r in range(s * BATCH, (s + 1) * BATCH)) for s in steps]


def test_a_consumer_that_does_nothing_between_steps_gets_them_made_on_its_own_thread(s4, thread_clock):
    made_on = {}
    it = iter(s4.experimental_distribute_dataset(recorded(thread_clock, made_on)))
    assert drive(it, thread_clock, away=lambda i: 0.0) == np.arange(STEPS * BATCH).reshape(STEPS, BATCH).tolist()
    assert all(made_here(made_on, range(STEPS - 100, STEPS)))
    assert it.feed_decision.startswith("on demand")


def test_a_consumer_that_works_between_steps_keeps_the_thread(s4, thread_clock):
    made_on = {}
    it = iter(s4.experimental_distribute_dataset(recorded(thread_clock, made_on)))
    assert len(drive(it, thread_clock, away=lambda i: BATCH * 1.0)) == STEPS  # a step as long as making one
    assert not any(made_here(made_on, range(STEPS)))
    assert it.feed_decision.startswith("thread")


def test_the_thread_comes_back_when_the_consumer_starts_working(s4, thread_clock):
    made_on = {}
    it = iter(s4.experimental_distribute_dataset(recorded(thread_clock, made_on, steps=2 * STEPS)))
    drive(it, thread_clock, away=lambda i: 0.0 if i < STEPS else BATCH * 1.0)
    assert all(made_here(made_on, range(STEPS - 100, STEPS)))
    assert not any(made_here(made_on, range(2 * STEPS - 40, 2 * STEPS)))
    assert it.feed_decision.startswith("thread (back from on demand")


def test_steps_errors_and_states_are_the_same_while_the_mode_keeps_changing(s4, flipping_judge, drain):
    def bad_rows(x):
        if x % 101 == 100:
            raise ValueError(f"bad row {int(x)}")
        return x

    def make():
        return Dataset.range(3000).map(bad_rows).batch(BATCH).prefetch(AUTOTUNE)

    def run(it, limit=None):
        return drain(it, limit, value=lambda step: np.asarray(step.arrays).tolist())

    sync = jd.InputOptions(experimental_per_replica_buffer_size=0)  # steps made on the consumer, no judge
    expected = run(iter(s4.experimental_distribute_dataset(make(), sync)))
    assert sum(type(x) is str for x in expected) == 29
    dds = s4.experimental_distribute_dataset(make())
    assert run(iter(dds)) == expected
    rng = random.Random(5)
    for _ in range(4):  # save at a random step while the mode keeps changing; restore into a fresh iterator
        it = iter(dds)
        head = run(it, limit=rng.randrange(5, 150))
        state = it.get_state()
        it.close()
        rest = iter(dds)
        rest.set_state(state)
        tail = run(rest)
        rest.close()
        assert head + tail == expected


def test_autotune_off_keeps_the_thread(s4, thread_clock):
    from jaxfeed.pipeline import Options

    options = Options()
    options.autotune.enabled = False
    made_on = {}
    it = iter(s4.experimental_distribute_dataset(recorded(thread_clock, made_on).with_options(options)))
    assert len(drive(it, thread_clock, away=lambda i: 0.0)) == STEPS
    assert not any(made_here(made_on, range(1, STEPS)))
    assert it.feed_decision == "thread (autotune is off)"
