"""interleave(num_parallel_calls=AUTOTUNE): reader parallelism tuned at run time, order unchanged."""

import threading
import time

import numpy as np
import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset, Options
from jaxfeed.pipeline.engine import autotune
from jaxfeed.pipeline.iterators import parallel_interleave
from jaxfeed.pipeline.iterators.parallel_interleave import ParallelInterleaveIterator
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from engine_test_helpers import WorkClock, root_iterator


class SteppingClock:
    """A fake clock that moves one tuning window per reading: every measured wait is one window long and
    every tick judges a full window, so the tuner rises exactly when the consumer really blocked."""

    def __init__(self):
        self.now = 0.0
        self.lock = threading.Lock()

    def __call__(self):
        with self.lock:
            self.now += autotune.WINDOW
            return self.now


def options(cpus=None, enabled=None, deterministic=None):
    opts = Options()
    opts.autotune.cpu_budget = cpus
    opts.autotune.enabled = enabled
    if deterministic is not None:
        opts.deterministic = deterministic
    return opts


def values(ds):
    return [int(x) for x in ds]


def repeated(x):
    return Dataset.from_tensors(x).repeat(x)


def slow_inner(x):
    def read(v):
        time.sleep(0.002)
        return x * 100 + v

    return Dataset.range(4).map(read)


def readers():
    return {t for t in threading.enumerate() if t.name.startswith("jaxfeed-interleave")}


@pytest.fixture
def fake_clock(monkeypatch):
    clock = SteppingClock()
    monkeypatch.setattr(ParallelInterleaveIterator, "clock", staticmethod(clock))
    return clock


# ------------------------------------------------------------------------------------------ order
@pytest.mark.parametrize("cycle,block", [(1, 1), (2, 1), (2, 2), (3, 2), (4, 3)])
def test_autotuned_interleave_yields_exactly_the_sequential_order(cycle, block):
    base = Dataset.range(1, 9)
    sequential = values(base.interleave(repeated, cycle_length=cycle, block_length=block))
    tuned = base.interleave(repeated, cycle_length=cycle, block_length=block, num_parallel_calls=AUTOTUNE)
    assert values(tuned) == sequential
    assert values(tuned.with_options(options(cpus=1))) == sequential
    assert values(tuned.with_options(options(enabled=False))) == sequential


def test_autotuned_interleave_keeps_the_order_while_parallelism_rises(monkeypatch):
    # the tuner's judgement is tested on its own (engine/test_autotune.py); here it is made to step up at
    # every tick, so the order is checked while parallelism really changes
    def step_up(self, delivered=0):
        self.value = min(self.maximum, self.value + 1)

    monkeypatch.setattr(autotune.Tuner, "tick", step_up)
    base = Dataset.range(12)
    sequential = values(base.interleave(slow_inner, cycle_length=4, block_length=2))
    it = iter(base.interleave(slow_inner, cycle_length=4, block_length=2, num_parallel_calls=AUTOTUNE)
              .with_options(options(cpus=4)))
    assert [int(x) for x in it] == sequential
    assert root_iterator(it).parallelism > 1  # it did change while the order was checked


def test_autotuned_interleave_on_random_configurations_matches_sequential():
    rng = np.random.default_rng(1)
    for _ in range(10):
        sizes = rng.integers(0, 7, size=int(rng.integers(1, 9))).tolist()
        cycle, block = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        base = Dataset.from_tensor_slices(np.array(sizes, dtype=np.int64)).enumerate()

        def inner(i, n):
            return Dataset.range(n).map(lambda v: i * 10 + v)

        seq = values(base.interleave(inner, cycle_length=cycle, block_length=block))
        par = values(base.interleave(inner, cycle_length=cycle, block_length=block, num_parallel_calls=AUTOTUNE))
        assert par == seq, (sizes, cycle, block)


def test_autotuned_nondeterministic_interleave_keeps_the_multiset():
    ds = Dataset.range(1, 9).interleave(repeated, cycle_length=3, num_parallel_calls=AUTOTUNE,
                                        deterministic=False)
    assert sorted(values(ds)) == sorted(values(Dataset.range(1, 9).interleave(repeated, cycle_length=3)))


# ------------------------------------------------------------------------------------------ tuning
def test_parallelism_starts_at_two_within_the_budget():
    for cpus, cycle, start in ((8, 4, 2), (1, 4, 1), (8, 1, 1)):
        it = iter(Dataset.range(4).interleave(repeated, cycle_length=cycle, num_parallel_calls=AUTOTUNE)
                  .with_options(options(cpus=cpus)))
        assert root_iterator(it).parallelism == start
        it.close()


@pytest.fixture
def start_at_one(monkeypatch):
    # the tuning tests below start from one reader, so that a rise is the tuner's doing
    monkeypatch.setattr(parallel_interleave, "AUTOTUNE_START", 1)


class ReaderGate:
    """Decides, instead of the scheduler, when the interleave's readers read: a read on a reader thread waits
    until the consumer waits for that read's slot (``_await``, which starts timing its wait first), and the
    consumer's wait ends when a read is done, not after a window of real time. So each element is read while
    the consumer waits for it, or by the consumer itself, and the fake clock moves only then: the tuner sees
    the same waits and rates however loaded the machine is (without the gate, readers that ran ahead of a
    descheduled consumer left it nothing to wait for, and the tuner never rose). Before the consumer looks at
    a slot, readers take the tasks they may (``_settle``). Install it with ``on(stage)`` before the first
    element is asked for."""

    def __init__(self, monkeypatch, clock):
        self.clock = clock
        self.slot = None  # the element of the slot the consumer is in _await for
        self.awaited = None  # ...while it waits there
        self.changed = threading.Condition()
        await_slot = ParallelInterleaveIterator._await

        def gated_await(stage, slot, have_output):  # (the stage's lock held)
            self.slot = int(slot.element)
            self._settle(stage)
            return await_slot(stage, slot, have_output)

        monkeypatch.setattr(ParallelInterleaveIterator, "_await", gated_await)

    @staticmethod
    def _settle(stage):
        """Let the readers take every task they may before the consumer looks at its slot: whether the slot's
        read is queued (the consumer reads it) or started (the consumer waits) is then set by the queue, not by
        how soon a reader thread got to run."""
        deadline = time.monotonic() + 30  # a hang guard only
        while stage._tasks and stage._running < min(stage.parallelism, len(stage._threads)):
            assert time.monotonic() < deadline, "the readers never took their tasks"
            stage._lock.release()
            time.sleep(0.0002)
            stage._lock.acquire()

    def on(self, stage):
        gate = self

        class Waits(threading.Condition):
            def wait(self, timeout=None):  # noqa: ARG002 - the read it waits for ends it (hang guard: 30 s)
                with gate.changed:
                    gate.awaited = gate.slot
                    gate.changed.notify_all()
                try:
                    return super().wait(30)
                finally:
                    with gate.changed:
                        gate.awaited = None

        stage._data_ready = Waits(stage._lock)

    def work(self, element):
        """One element of ``element``'s inner dataset read: ``clock.work()``, gated on a reader thread."""
        with self.changed:
            if threading.current_thread().name.startswith("jaxfeed-interleave"):
                assert self.changed.wait_for(lambda: self.awaited == element, timeout=30), "never awaited"
            self.clock.work()


def test_parallelism_starts_at_one_and_rises_for_reads_that_wait(start_at_one, monkeypatch):
    # inner reads that scale with readers (I/O): more readers deliver more, so the probes keep their steps
    clock = WorkClock(cost=0.01)
    monkeypatch.setattr(ParallelInterleaveIterator, "clock", staticmethod(clock))
    gate = ReaderGate(monkeypatch, clock)

    def io_inner(x):
        def read(v):
            gate.work(int(x))  # the consumer waits for every read (see ReaderGate)
            return x * 100 + v

        return Dataset.range(4).map(read)

    ds = Dataset.range(48).interleave(io_inner, cycle_length=4, num_parallel_calls=AUTOTUNE)
    it = iter(ds.with_options(options(cpus=8)))
    root = root_iterator(it)
    clock.stage = root
    gate.on(root)
    assert root.parallelism == 1
    got = [int(x) for x in it]
    assert got == values(Dataset.range(48).interleave(io_inner, cycle_length=4))
    assert root.parallelism > 1 and root._tuner.raises >= 1
    # cycle_length caps it (the CPU budget here is 8); a probe down parks a reader, it does not stop it
    assert root.parallelism <= len(root._threads) <= 4
    it.close()


def test_parallelism_stays_at_one_when_the_consumer_never_waits(fake_clock, start_at_one):
    # every slot is read ahead before the consumer starts: no waits, so no raise
    it = iter(Dataset.range(1, 5).interleave(repeated, cycle_length=2, num_parallel_calls=AUTOTUNE)
              .with_options(options(cpus=4)))
    root = root_iterator(it)
    root._warm = True  # as after a first call: future slots read ahead too
    root._start()
    root._top_up()
    with root._lock:
        while any(s.busy for s in root._all_slots()) or len(root._futures) < 2:
            root._data_ready.wait(1)
    first = [int(x) for x in it.next_many(3)]
    assert first == [1, 2, 2]
    assert root.parallelism == 1 and root._tuner.raises == 0
    it.close()


def test_cpu_budget_caps_the_tuned_parallelism(fake_clock):
    before = readers()
    it = iter(Dataset.range(16).interleave(slow_inner, cycle_length=4, num_parallel_calls=AUTOTUNE)
              .with_options(options(cpus=2)))
    out = [int(x) for x in it]
    root = root_iterator(it)
    assert out == values(Dataset.range(16).interleave(slow_inner, cycle_length=4))
    assert root.parallelism <= 2 and root._tuner.maximum == 2
    assert len(readers() - before) <= 2
    it.close()
    assert not readers() - before


def test_autotune_disabled_pins_interleave_parallelism_at_the_budget():
    it = iter(Dataset.range(1, 6).interleave(repeated, cycle_length=4, num_parallel_calls=AUTOTUNE)
              .with_options(options(cpus=3, enabled=False)))
    next(it)
    root = root_iterator(it)
    assert root._tuner is None and root.parallelism == 3 and len(root._threads) == 3
    it.close()


def test_a_long_wait_raises_parallelism_before_anything_is_delivered(start_at_one):
    # two inner datasets that only finish when both are being read at once: one reader alone would wait
    # forever, so the tuner must act during the wait (real clock)
    barrier = threading.Barrier(2, timeout=20)

    def inner(x):
        return Dataset.from_tensors(x).map(lambda v: (barrier.wait(), v)[1])

    ds = Dataset.range(2).interleave(inner, cycle_length=2, num_parallel_calls=AUTOTUNE)
    assert values(ds.with_options(options(cpus=2))) == [0, 1]


# ------------------------------------------------------------------------------------------ state
def test_autotuned_interleave_resumes_at_every_position():
    def make():
        return Dataset.range(1, 7).interleave(lambda x: Dataset.range(x).map(lambda v: x * 10 + v),
                                              cycle_length=3, block_length=2, num_parallel_calls=AUTOTUNE)

    assert_resumes_everywhere(make)


def test_autotuned_interleave_resumes_at_every_position_while_tuning(fake_clock):
    def make():
        return (Dataset.range(6).interleave(slow_inner, cycle_length=3, num_parallel_calls=AUTOTUNE)
                .with_options(options(cpus=3)))

    assert_resumes_everywhere(make)


def test_autotuned_interleave_with_errors_resumes_and_matches_sequential():
    def fail_on_41(v):
        if v == 41:
            raise ZeroDivisionError("41")
        return v

    def make(npc):
        def inner(x):
            if x == 3:
                raise KeyError("no dataset for 3")
            return Dataset.range(x * 10, x * 10 + 3).map(fail_on_41)

        return Dataset.range(1, 6).interleave(inner, cycle_length=2, num_parallel_calls=npc).ignore_errors()

    assert values(make(AUTOTUNE)) == values(make(None))
    assert_resumes_everywhere(lambda: make(AUTOTUNE))


def test_at_0_the_consumer_reads_every_slot_itself_and_the_order_holds_as_the_value_moves(monkeypatch, drain):
    # AUTOTUNE may step an interleave down to 0 readers (reads that hold the GIL cost less on the consumer):
    # every read then runs on the consumer's thread; the order stays the sequential one while the value moves
    # among 0, 1 and 2, errors and resumes included
    read_on = {}

    def inner(x):
        def read(v):
            read_on[int(x) * 100 + int(v)] = threading.current_thread()
            if x == 5 and v == 3:
                raise ValueError("bad read in slot 5")
            return x * 100 + v

        return Dataset.range(8).map(read)

    script = iter([0] * 200 + [1, 2, 0, 2, 1, 0] * 40)

    def scripted(self, delivered=0):
        self.value = min(self.maximum, next(script, 0))

    monkeypatch.setattr(autotune.Tuner, "tick", scripted)
    base = Dataset.range(40)

    def run(it, limit=None):
        return drain(iter(it), limit, value=int)

    sequential = run(base.interleave(inner, cycle_length=4, block_length=2))
    parallel = base.interleave(inner, cycle_length=4, block_length=2, num_parallel_calls=AUTOTUNE) \
        .with_options(options(cpus=2))
    it = iter(parallel)
    head = run(it, limit=180)  # the value is 0 from the first tick on, for 200 ticks
    # slots opened after it went to 0 (the first ones may have been read by the readers started at first)
    assert all(read_on[x * 100 + v] is threading.current_thread() for x in range(12, 20) for v in range(8))
    assert root_iterator(it).parallelism == 0  # (the readers started at the first call are parked)
    assert head + run(it) == sequential
    assert run(iter(parallel)) == sequential
    clean = base.interleave(lambda x: Dataset.range(8).map(lambda v: x * 100 + v), cycle_length=4, block_length=2,
                            num_parallel_calls=AUTOTUNE).with_options(options(cpus=2))
    assert_resumes_everywhere(lambda: clean, ks=[0, 7, 31, 77, 150])


def test_an_iterator_that_starts_at_0_never_starts_a_reader_until_the_tuner_wants_one(monkeypatch):
    # the next epoch starts from what the last one learned: at 0, the consumer reads every slot and no reader
    # thread is started; when the tuner steps up again, readers start and the order still holds
    def learned_zero(self, delivered=0):
        self.value = 0
        self._remember()

    monkeypatch.setattr(autotune.Tuner, "tick", learned_zero)
    base = Dataset.range(30)
    sequential = values(base.interleave(slow_inner, cycle_length=4, block_length=2))
    ds = base.interleave(slow_inner, cycle_length=4, block_length=2, num_parallel_calls=AUTOTUNE) \
        .with_options(options(cpus=2))
    assert values(ds) == sequential  # this epoch learns 0
    it = iter(ds)
    assert root_iterator(it).parallelism == 0
    assert [int(next(it)) for _ in range(40)] == sequential[:40]
    assert not root_iterator(it)._threads  # no reader started

    def step_up(self, delivered=0):
        self.value = min(self.maximum, self.value + 1)

    monkeypatch.setattr(autotune.Tuner, "tick", step_up)
    assert [int(x) for x in it] == sequential[40:]
    assert root_iterator(it)._threads  # readers started once wanted
