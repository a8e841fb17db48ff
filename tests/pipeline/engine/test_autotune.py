"""AUTOTUNE: the tuner's judgement (fake clocks) and what it does to a thread-parallel map and a prefetch."""

import threading
import time

import numpy as np
import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset
from jaxfeed.pipeline.engine import autotune

from engine_test_helpers import WorkClock, budget, root_iterator, slow


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


# ------------------------------------------------------------------------------------ the tuner
@pytest.fixture
def one_tick_windows(monkeypatch):
    # these tests drive the tuner one tick per window: every window closes at WINDOW whatever it delivered
    # (the rule that lengthens windows with few deliveries has tests of its own below)
    monkeypatch.setattr(autotune, "MIN_DELIVERIES", 1)
    monkeypatch.setattr(autotune, "MAX_WINDOW", autotune.WINDOW)


def run_windows(tuner, clock, windows, rate_at=None, wait=True):
    """Advance ``windows`` tuning windows: the consumer waits half of each (when ``wait``) and, when
    ``rate_at(value)`` is given, the stage delivers that many elements per second at the tuner's value."""
    for _ in range(windows):
        clock.now = round(clock.now + autotune.WINDOW, 9)
        if wait:
            tuner.waited(autotune.WINDOW / 2)
        tuner.tick(0 if rate_at is None else int(rate_at(tuner.value) * autotune.WINDOW))


def test_tuner_raises_the_knob_while_the_consumer_waits(one_tick_windows):
    clock = FakeClock()
    tuner = autotune.Tuner(1, 4, clock=clock)
    run_windows(tuner, clock, 30)  # no delivery counts: nothing to judge a step by, every step is kept
    assert tuner.value == 4 and tuner.raises == 3 and tuner.reverts == 0


def test_tuner_keeps_a_step_that_raises_the_delivery_rate(one_tick_windows):
    clock = FakeClock()
    tuner = autotune.Tuner(1, 4, clock=clock)
    run_windows(tuner, clock, 40, rate_at=lambda v: 10_000 * v)  # work that scales with threads (I/O)
    assert tuner.value == 4 and tuner.reverts == 0


def test_tuner_takes_back_a_step_that_does_not_pay_and_retries_later(one_tick_windows):
    clock = FakeClock()
    tuner = autotune.Tuner(1, 4, clock=clock)
    gil_bound = lambda v: 10_000 if v == 1 else 9_000  # a second thread only adds contention
    probe = autotune.WARMUP_WINDOWS + autotune.BASE_WINDOWS + 1 + autotune.JUDGE_WINDOWS  # windows to a verdict
    run_windows(tuner, clock, probe, rate_at=gil_bound)
    assert tuner.value == 1 and tuner.reverts == 1 and tuner.raises == 0
    # no new probe before RETRY_AFTER, however long the consumer waits
    run_windows(tuner, clock, int(autotune.RETRY_AFTER / autotune.WINDOW) - 2, rate_at=gil_bound)
    assert tuner.value == 1 and tuner.reverts == 1
    run_windows(tuner, clock, 10, rate_at=gil_bound)
    assert tuner.value == 1 and tuner.reverts == 2  # tried again, taken back again (and waits twice as long)


def test_a_step_up_that_gained_short_of_the_bar_is_retried_as_soon_as_the_last(one_tick_windows):
    """On a noisy machine a step that pays (P4's second thread: +40-60%) is sometimes judged on three unlucky
    windows at a few percent. Doubling the back-off after each such verdict kept it away for a whole run; a
    step that made things no better still waits twice as long each time."""
    def reverts_in_ten_seconds(rate_at):
        clock = FakeClock()
        tuner = autotune.Tuner(1, 2, clock=clock)
        run_windows(tuner, clock, int(10 / autotune.WINDOW), rate_at=rate_at)
        assert tuner.raises == 0  # (never kept: it may be in a probe when the ten seconds end)
        return tuner.reverts

    short_of_the_bar = reverts_in_ten_seconds(lambda v: 10_000 if v == 1 else 11_500)  # +15%
    no_better = reverts_in_ten_seconds(lambda v: 10_000 if v == 1 else 10_000)
    assert short_of_the_bar >= 10 and no_better <= 5


def test_tuner_takes_back_a_lucky_step_by_probing_down(one_tick_windows):
    clock = FakeClock()
    tuner = autotune.Tuner(1, 2, clock=clock)
    # the windows judging the step up happen to run 30% faster (noise); after that 2 threads do no better
    rates = lambda v: 10_000 * (1.3 if v == 2 and tuner._probe is not None else 1.0)
    run_windows(tuner, clock, 12, rate_at=rates)
    assert tuner.value == 2 and tuner.raises == 1
    run_windows(tuner, clock, int(autotune.DOWN_AFTER / autotune.WINDOW) + 8, rate_at=rates)
    assert tuner.value == 1 and tuner.lowers == 1


def test_tuner_keeps_a_step_that_pays_when_probing_down(one_tick_windows):
    clock = FakeClock()
    tuner = autotune.Tuner(1, 2, clock=clock)
    run_windows(tuner, clock, 12 + int(autotune.DOWN_AFTER / autotune.WINDOW) + 8, rate_at=lambda v: 10_000 * v)
    assert tuner.value == 2 and tuner.raises == 1 and tuner.lowers == 0


def test_one_probe_at_a_time_per_iterator_tree(one_tick_windows):
    clock = FakeClock()
    token = autotune.ProbeToken()
    a = autotune.Tuner(1, 4, clock=clock, token=token)
    b = autotune.Tuner(1, 4, clock=clock, token=token)
    windows = autotune.WARMUP_WINDOWS + autotune.BASE_WINDOWS  # start-up, then the windows giving a base
    for w in range(1, windows + 1):
        clock.now = w * autotune.WINDOW
        for t in (a, b):
            t.waited(autotune.WINDOW)
            t.tick(100)
    assert (a.value, b.value) == (2, 1)  # a probes; b must wait for the token
    a.close()
    clock.now = (windows + 1) * autotune.WINDOW
    b.waited(autotune.WINDOW)
    b.tick(100)
    assert b.value == 2


def test_tuner_does_not_probe_before_it_has_a_base_rate(one_tick_windows):
    clock = FakeClock()
    tuner = autotune.Tuner(1, 4, clock=clock)
    run_windows(tuner, clock, autotune.WARMUP_WINDOWS + autotune.BASE_WINDOWS - 1, rate_at=lambda v: 1000)
    assert tuner.value == 1  # start-up windows are slow for reasons no knob changes: not a base
    run_windows(tuner, clock, 1, rate_at=lambda v: 1000)
    assert tuner.value == 2


def test_tuner_keeps_the_knob_when_the_consumer_does_not_wait(one_tick_windows):
    clock = FakeClock()
    tuner = autotune.Tuner(1, 4, clock=clock)
    run_windows(tuner, clock, 10, wait=False)
    assert tuner.value == 1


def test_tuner_buffers_double_within_their_maximum(one_tick_windows):
    clock = FakeClock()
    tuner = autotune.Tuner(2, 20, grow=lambda v: 2 * v, clock=clock)
    run_windows(tuner, clock, 40)
    assert tuner.value == 20


def test_tuner_starts_from_what_the_previous_one_learned(one_tick_windows):
    """The next epoch's tuner starts at the value and with the back-off the last one ended with: a step
    that did not pay is not probed again before that back-off is over (it runs on in time across epochs)."""
    clock = FakeClock()
    store = {}
    gil_bound = lambda v: 10_000 if v == 1 else 9_000
    first = autotune.Tuner(2, 4, clock=clock, learned=(store, "k"))
    run_windows(first, clock, 60, rate_at=gil_bound)  # steps down to 1, a step up back to 2 is taken back
    assert first.value == 1 and first.lowers == 1 and first.reverts >= 1
    assert store["k"][0] == 1
    second = autotune.Tuner(2, 4, clock=clock, learned=(store, "k"))
    assert second.value == 1
    due = store["k"][3]  # when the first tuner's back-off ends
    assert clock.now < due <= clock.now + store["k"][1]
    quiet = int((due - clock.now) / autotune.WINDOW) - 2  # windows before it is over
    run_windows(second, clock, quiet, rate_at=gil_bound)
    assert second.value == 1 and second.reverts == 0 and second._probe is None
    run_windows(second, clock, 10, rate_at=gil_bound)
    assert second.reverts == 1  # it does probe again once the back-off is over
    assert autotune.Tuner(2, 4, clock=clock, learned=({}, "k")).value == 2  # nothing learned: from scratch
    assert autotune.Tuner(2, 1, clock=clock, learned=({"k": (3, 1.0, 1.0)}, "k")).value == 1  # within budget


def short_epochs(store, clock, epochs, windows, rate_at, initial=2, maximum=4, minimum=0, gap=1.0, wait=False,
                 down_first=False):
    """Run ``epochs`` epochs of ``windows`` windows each, one tuner per epoch sharing ``store`` (the next
    iterator of one Dataset), ``gap`` seconds apart (other work between them); the value each ended at."""
    values = []
    for _ in range(epochs):
        tuner = autotune.Tuner(initial, maximum, clock=clock, learned=(store, "k"), minimum=minimum,
                               down_first=down_first)
        run_windows(tuner, clock, windows, rate_at=rate_at, wait=wait)
        tuner.close()
        values.append(tuner.value)
        clock.now = round(clock.now + gap, 9)
    return values


def test_epochs_shorter_than_a_judgement_still_tune(one_tick_windows):
    """A stage whose epochs are shorter than one judgement (P3's read stage: ~80 ms, four windows, where a
    fresh tuner needs three start-up and two steady windows before its first probe) still tunes: the next
    epoch starts from the steady rates and the cut-short probe the last one left, and each epoch's start-up
    is one window. Before, every epoch began from scratch and the knob never moved (its readers stayed)."""
    clock = FakeClock()
    store = {}
    readers_cost = lambda v: {0: 12_000, 1: 10_000}.get(v, 8_000)  # reading on the consumer pays best
    values = short_epochs(store, clock, 12, 4, readers_cost)
    assert values[0] == 2  # the first epoch only measures
    assert values[-1] == 0 and values[-3:] == [0, 0, 0]


def test_where_more_did_not_pay_fewer_is_tried_first(one_tick_windows):
    """A consumer that waits at every value (readers that cost more than they bring) while epochs are seconds
    apart, so every back-off has run out when the next epoch starts: a step down is tried before another step
    up from a value where a step up failed. Before, the step up went first at every epoch and took its
    windows: the knob never got down to where the stage is fastest."""
    clock = FakeClock()
    store = {}
    readers_cost = lambda v: {0: 12_000, 1: 10_000}.get(v, 8_000)
    values = short_epochs(store, clock, 10, 5, readers_cost, gap=30.0, wait=True)
    assert values[-3:] == [0, 0, 0]


def test_a_generous_start_probes_fewer_first(one_tick_windows):
    """``down_first`` (an interleave's two readers to start with): where a step up and a step down are both
    due, the step down goes first, until a step up has failed somewhere, and it probes the minimum (see
    the next tests); without it the waiting consumer sends the first probe up."""
    probes = {}
    for down_first in (False, True):
        clock = FakeClock()
        tuner = autotune.Tuner(2, 4, clock=clock, minimum=0, down_first=down_first)
        while tuner._probe is None:
            run_windows(tuner, clock, 1, rate_at=lambda v: 10_000)  # the consumer waits in every window
        probes[down_first] = tuner.value
    assert probes == {False: 3, True: 0}
    restored = autotune.Tuner(2, 4, clock=FakeClock(), minimum=0, down_first=True,
                              learned=({"k": (1, 0.5, 0.3, 0.0, 0.0, ((), None, 0, None))}, "k"))
    assert restored._up_failed == 1  # the next epoch too, from where it starts


def test_a_generous_start_goes_straight_to_its_minimum_where_that_does_best(one_tick_windows):
    """A ``down_first`` knob (an interleave's two readers) whose stage is fastest at 0 (reads that hold the
    GIL: P3's read stage) gets there in one verdict, not one per reader. One reader at a time, the read
    stage's short epochs ran at 1 or 2 readers for about half of a bench's nine (two verdicts of about two
    epochs each): median 2.1 M records/s against 2.3-2.9 M going straight to 0."""
    clock = FakeClock()
    readers_cost = lambda v: {0: 12_000, 1: 10_000}.get(v, 8_000)  # reading on the consumer pays best
    values = short_epochs({}, clock, 9, 4, readers_cost, wait=True, down_first=True)
    assert values[0] == 2  # the first epoch only measures
    assert values[3:] == [0] * 6
    assert 1 not in values  # never by way of one reader


def test_where_the_minimum_does_worse_a_generous_start_still_finds_the_value_between(one_tick_windows):
    """The jump to the minimum is a probe like any other: where 0 readers do clearly worse (reads that wait
    on I/O) it is taken back, and from then on steps down go one at a time, so a stage fastest at one reader
    still ends there."""
    clock = FakeClock()
    store = {}
    one_is_best = lambda v: {0: 6_000, 1: 10_000}.get(v, 10_000 - 500 * v)
    values = short_epochs(store, clock, 16, 4, one_is_best, wait=True, down_first=True)
    assert values[-4:] == [1] * 4
    assert store["k"][2] > autotune.DOWN_AFTER  # the jump failed: its direction backed off


def test_a_resumed_probe_is_judged_on_both_epochs_and_taken_back_if_it_does_not_hold(one_tick_windows):
    """A probe resumed in the next epoch keeps what it measured: a step down that does worse is taken back,
    and the knob stays where it does best."""
    clock = FakeClock()
    store = {}
    threads_pay = lambda v: 6_000 * v + 1_000
    values = short_epochs(store, clock, 12, 4, threads_pay, initial=2, maximum=2)
    assert values == [2] * 12
    assert store["k"][2] > autotune.DOWN_AFTER  # the failed step down backs off


def test_a_probe_no_epoch_can_judge_counts_as_failed_after_max_carried(one_tick_windows):
    """Epochs too short for a judged window (a resumed probe's first window settles) cannot carry a probe
    for ever: after ``MAX_CARRIED`` epochs it counts as failed, the knob at its last verdict, and the
    direction backs off, so such epochs stop paying for probes."""
    clock = FakeClock()
    steady = lambda v: 10_000
    # the first epoch ended in a step down from 2 to 1 that had not settled yet
    store = {"k": (2, 0.5, 0.3, 0.0, 0.0, ((), (1, 2, 10_000.0, 0.0, 0.0), 1))}
    down_after = store["k"][2]
    for epoch in range(autotune.MAX_CARRIED):
        tuner = autotune.Tuner(2, 2, clock=clock, learned=(store, "k"))
        assert tuner.value == 1 and tuner._probe is not None  # resumed at the probed value
        run_windows(tuner, clock, 1, rate_at=steady, wait=False)  # the epoch ends as it settles
        tuner.close()
        assert tuner.value == 2
    assert store["k"][5][1] is None and store["k"][2] == 2 * down_after
    assert autotune.Tuner(2, 2, clock=clock, learned=(store, "k")).value == 2


def test_nothing_measured_in_the_first_epoch_is_carried(one_tick_windows):
    """A Dataset's first epoch (its tuner from scratch) is slower throughout: its steady rates are no base
    for the next epoch's windows, and its cut-short probe is dropped (the knob at its last verdict, no
    back-off). A later epoch's are carried."""
    clock = FakeClock()
    store = {}
    rate = lambda v: 10_000
    first = autotune.Tuner(2, 4, clock=clock, learned=(store, "k"), minimum=0)
    run_windows(first, clock, autotune.WARMUP_WINDOWS + autotune.BASE_WINDOWS + 1, rate_at=rate, wait=False)
    assert first._probe is not None  # a step down begun
    first.close()
    assert first.value == 2 and store["k"][0] == 2
    steady, probe, carried = store["k"][5][:3]
    assert steady == () and probe is None and carried == 0
    assert store["k"][2] == autotune.DOWN_AFTER  # dropped, not failed
    second = autotune.Tuner(2, 4, clock=clock, learned=(store, "k"), minimum=0)
    assert second.value == 2 and second._probe is None and second._steady == []
    run_windows(second, clock, autotune.RESTORED_WARMUP + 1, rate_at=rate, wait=False)
    second.close()
    assert store["k"][5][0] == pytest.approx((10_000.0,))  # a restored tuner's steady rates are carried


def test_a_cut_short_probe_is_not_resumed_while_another_knob_probes(one_tick_windows):
    """One probe at a time per iterator tree, resumed probes included: a knob whose carried probe finds the
    token taken starts at its last verdict."""
    clock = FakeClock()
    store = {"k": (2, 0.5, 0.3, 0.0, 0.0, ((9_000.0,), (1, 2, 9_000.0, 50.0, 0.005), 1))}
    token = autotune.ProbeToken()
    other = object()
    assert token.acquire(other)
    tuner = autotune.Tuner(2, 2, clock=clock, token=token, learned=(store, "k"))
    assert tuner.value == 2 and tuner._probe is None
    token.release(other)
    tuner = autotune.Tuner(2, 2, clock=clock, token=token, learned=(store, "k"))
    assert tuner.value == 1 and tuner._probe is not None and token.holder is tuner


def test_a_back_off_longer_than_an_epoch_still_ends(one_tick_windows):
    """Epochs shorter than a back-off: the probe it put off is made in the epoch where the back-off ends (it
    was never made again when each epoch counted the back-off from its own start)."""
    clock = FakeClock()
    store = {"k": (0, 4.0, 4.0, clock.now + 2.0, clock.now + 60.0)}  # at 0 for now; 2 s until a step up
    numpy_bound = lambda v: {0: 10_000, 1: 10_000, 2: 16_000}[v]
    values = []
    for epoch in range(6):
        tuner = autotune.Tuner(1, 2, clock=clock, learned=(store, "k"), minimum=0)
        run_windows(tuner, clock, 40, rate_at=numpy_bound)  # 0.8 s epochs
        tuner.close()
        values.append(tuner.value)
    assert values[:2] == [0, 0] and values[-1] == 2


def test_a_failing_probe_is_retried_at_least_every_max_backoff(one_tick_windows):
    clock = FakeClock()
    tuner = autotune.Tuner(1, 2, clock=clock)
    reverts_at = []
    while len(reverts_at) < 12:
        before = tuner.reverts
        run_windows(tuner, clock, 1, rate_at=lambda v: 10_000 if v == 1 else 9_000)
        if tuner.reverts > before:
            reverts_at.append(clock.now)
    gaps = [b - a for a, b in zip(reverts_at, reverts_at[1:])]
    assert gaps[0] < 2 and max(gaps) > 30  # backs off...
    assert max(gaps) <= autotune.MAX_BACKOFF + 1  # ...but keeps probing (a machine's load changes)


# ------------------------------------------------------------------------------ parallel map
class WorkerGate:
    """Decides, instead of the scheduler, when the map's workers work: a call on a worker thread waits until
    the consumer is blocked on that call's block (``ParallelMapIterator._finish``, entered after the consumer
    started timing its wait). So the consumer waits for every block it does not run itself, and the fake clock
    moves only while it waits: the tuner sees the same waits and rates however loaded the machine is (without
    the gate, a consumer descheduled while the workers ran ahead saw their blocks done and no wait, and the
    tuner rose less). Calls on the consumer's thread -- blocks no worker had started -- run freely."""

    def __init__(self, monkeypatch):
        from jaxfeed.pipeline.iterators.parallel_map import ParallelMapIterator

        self.due = range(0)  # input positions of the block the consumer is blocked on
        self.changed = threading.Condition()
        finish = ParallelMapIterator._finish

        def gated_finish(stage, done):
            _, block, _, _, position, _ = done.args
            with self.changed:
                self.due = range(position, position + len(block))
                self.changed.notify_all()
            return finish(stage, done)

        monkeypatch.setattr(ParallelMapIterator, "_finish", gated_finish)

    def call(self, position):
        if not threading.current_thread().name.startswith("jaxfeed-map"):
            return
        with self.changed:
            assert self.changed.wait_for(lambda: position in self.due, timeout=30), "the consumer never waited"

    def next_epoch(self):
        with self.changed:
            self.due = range(0)


@pytest.fixture
def work_clock(monkeypatch):
    from jaxfeed.pipeline.iterators.parallel_map import ParallelMapIterator

    clock = WorkClock(cost=0.02)
    clock.gate = WorkerGate(monkeypatch)
    monkeypatch.setattr(ParallelMapIterator, "clock", staticmethod(clock))
    return clock


def scaling_pipeline(clock):
    def work(x):
        clock.gate.call(int(x))  # (the element is its input position)
        time.sleep(0.002)  # real time too: keeps blocks at one element (sized from the real time per element)
        clock.work()
        return x

    # the executor is given: these tests judge the thread pool's tuner on the fake clock alone (an executor
    # choice's warm-up would map the first elements on real time and leave the tuner fewer to judge)
    return Dataset.range(200).map(work, num_parallel_calls=AUTOTUNE, executor="thread").with_options(budget(cpus=3))


def test_autotuned_parallel_map_reaches_the_cpu_budget_when_it_is_the_bottleneck(work_clock):
    it = iter(scaling_pipeline(work_clock))
    work_clock.stage = root_iterator(it)
    assert [int(x) for x in it] == list(range(200))
    it.close()  # a probe (down) cut short by the end goes back: the value is the last verdict
    assert root_iterator(it).parallelism == 3


def test_the_next_epoch_of_a_dataset_starts_at_the_tuned_parallelism(work_clock):
    ds = scaling_pipeline(work_clock)
    it = iter(ds)
    work_clock.stage = root_iterator(it)
    assert root_iterator(it).parallelism == 1  # a Dataset's first iterator tunes from scratch
    assert [int(x) for x in it] == list(range(200))
    work_clock.gate.next_epoch()
    again = iter(ds)  # the next epoch: starts at the last verdict of the last one (not an unjudged probe)
    assert root_iterator(again).parallelism == 3
    work_clock.stage = root_iterator(again)
    assert [int(x) for x in again] == list(range(200))
    assert root_iterator(iter(scaling_pipeline(work_clock))).parallelism == 1  # built anew: from scratch


def test_autotune_disabled_pins_parallelism_at_the_budget():
    it = iter(Dataset.range(5).map(slow, num_parallel_calls=AUTOTUNE).with_options(budget(cpus=3, enabled=False)))
    list(it)
    assert root_iterator(it).parallelism == 3


# ----------------------------------------------------------------------------------- prefetch
class ProducerGate:
    """Decides, instead of the machine's speed, when the prefetch producer gets ahead of its consumer.

    ``element(x)``, the mapped function, runs freely on the consumer's thread (the first call is served there)
    and, on the producer's thread, for elements that are not ``held(x)``; a held element waits until the
    consumer waits for the producer. So a producer holding every element never gets ahead (a slow producer);
    one holding every 16th runs ahead in bursts. ``until_ahead()``, called by the consumer before each element,
    waits until the producer has filled the buffer or waits at a held element (so a burst always fills it)."""

    def __init__(self, held):
        self.held, self.stage, self.holding = held, None, False

    def element(self, x):
        if threading.current_thread().name == "jaxfeed-prefetch" and self.held(int(x)):
            self.holding = True
            self._poll(lambda: self.stage._consumer_waiting, "the consumer never waited")
            self.holding = False
        return x

    def until_ahead(self):
        stage = self.stage
        self._poll(lambda: stage._thread is None or stage._ended or self.holding or
                   len(stage._buf) >= stage.capacity or stage._local, "the producer never got ahead")

    @staticmethod
    def _poll(condition, what):
        deadline = time.monotonic() + 30  # a hang guard only
        while not condition():
            assert time.monotonic() < deadline, what
            time.sleep(0.0002)


def gated(ds_of, held, n, options=None):
    """(iterator, gate) over ``ds_of(gate.element).prefetch(AUTOTUNE)``, consumed by the gate's rule."""
    gate = ProducerGate(held)
    ds = ds_of(gate.element).prefetch(AUTOTUNE)
    it = iter(ds.with_options(options) if options is not None else ds)
    gate.stage = root_iterator(it)
    for _ in range(n):
        gate.until_ahead()
        next(it)
    return it, gate


def test_autotuned_prefetch_grows_for_a_bursty_producer():
    it, gate = gated(lambda f: Dataset.range(300).map(f), lambda x: x % 16 == 0, 300)
    assert gate.stage.capacity > 2


def test_autotuned_prefetch_does_not_grow_for_a_slow_producer():
    it, gate = gated(lambda f: Dataset.range(100).map(f), lambda x: True, 100)
    assert gate.stage.capacity == 2


def test_autotuned_prefetch_stays_within_the_ram_budget():
    element = np.zeros(1000, np.uint8)  # 1000 bytes; a budget of 4500 bytes allows a buffer of 4
    it, gate = gated(lambda f: Dataset.range(300).map(f).map(lambda x: element + np.uint8(x % 7)),
                     lambda x: x % 16 == 0, 300, budget(ram=4500))
    assert 2 < gate.stage.capacity <= 4


def test_a_step_up_that_makes_things_clearly_worse_is_taken_back_at_once(one_tick_windows):
    clock = FakeClock()
    tuner = autotune.Tuner(1, 4, clock=clock)
    run_windows(tuner, clock, autotune.WARMUP_WINDOWS + autotune.BASE_WINDOWS, rate_at=lambda v: 10_000 // v)
    assert tuner.value == 2  # probing
    run_windows(tuner, clock, 1, rate_at=lambda v: 10_000 // v)  # the settling window is not judged
    assert tuner.value == 2
    run_windows(tuner, clock, 1, rate_at=lambda v: 10_000 // v)  # the first measured one, at half the rate
    assert tuner.value == 1 and tuner.reverts == 1


def test_a_window_lasts_until_it_holds_several_deliveries():
    # one batch per 25 ms (P4's batches take ~18 ms): a 20 ms window would hold zero or one of them, a rate of
    # mostly quantisation. The window runs on until MIN_DELIVERIES batches came.
    clock = FakeClock()
    tuner = autotune.Tuner(1, 4, clock=clock)
    for k in range(1, 3 * autotune.MIN_DELIVERIES + 1):
        clock.now = round(clock.now + 0.025, 9)
        tuner.waited(0.02)
        tuner.tick(128)
        assert tuner._windows == k // autotune.MIN_DELIVERIES


def test_a_stalled_stage_is_still_judged():
    # no deliveries at all (the consumer waits on a stage that never finishes a block): the window closes at
    # MAX_WINDOW and the wait raises the knob
    clock = FakeClock()
    tuner = autotune.Tuner(1, 4, clock=clock)
    for _ in range(int(autotune.MAX_WINDOW / 0.005) * 2):
        clock.now = round(clock.now + 0.005, 9)
        tuner.waited(0.005)
        tuner.tick()
    assert tuner.value > 1


# ------------------------------------------------------------------- down to the consumer's thread
def test_a_tuner_with_minimum_0_steps_down_to_no_thread_when_that_holds_the_rate(one_tick_windows):
    # a function that holds the GIL: made on the consumer's thread, no hand-offs, it goes faster than on one
    # worker thread; a step back up is probed while the consumer waits (it does all the work) and taken back
    clock = FakeClock()
    tuner = autotune.Tuner(1, 2, clock=clock, minimum=0)
    gil_bound = lambda v: {0: 13_000, 1: 10_000, 2: 9_000}[v]
    run_windows(tuner, clock, 20, rate_at=gil_bound)  # (a step up to 2 first: the consumer waits; taken back)
    assert tuner.value == 0 and tuner.lowers == 1 and tuner.reverts == 1
    run_windows(tuner, clock, int(4 * autotune.RETRY_AFTER / autotune.WINDOW), rate_at=gil_bound)
    assert tuner.value == 0 and tuner.reverts >= 2 and tuner.raises == 0


def test_a_tuner_with_minimum_0_keeps_a_thread_that_pays(one_tick_windows):
    clock = FakeClock()
    tuner = autotune.Tuner(1, 2, clock=clock, minimum=0)
    overlaps = lambda v: {0: 6_000, 1: 10_000, 2: 10_500}[v]  # the thread overlaps the consumer's reading
    run_windows(tuner, clock, 60, rate_at=overlaps)
    assert tuner.value == 1 and tuner.lowers == 0


def test_a_tuner_at_0_probes_two_threads_not_one(one_tick_windows):
    """At 0 the consumer makes the batches; one thread would only make them elsewhere, at the same rate when
    the consumer does nothing else, so a probe 0 -> 1 never pays and parallelism was never tried again: P4
    with a per-element generator, whose start-up windows took its second thread back, ran the rest of every
    epoch at 0 (15.5k img/s, against 24.8k on two threads). From 0 the probe goes to 2."""
    clock = FakeClock()
    tuner = autotune.Tuner(1, 2, clock=clock, minimum=0)
    numpy_bound = lambda v: {0: 10_000, 1: 10_000, 2: 16_000}[v]
    settled_at_0 = lambda v: {0: 10_000, 1: 10_000, 2: 9_000}[v]  # (start-up: the second thread did not pay)
    run_windows(tuner, clock, 20, rate_at=settled_at_0)
    assert tuner.value == 0
    run_windows(tuner, clock, int(3 * autotune.RETRY_AFTER / autotune.WINDOW), rate_at=numpy_bound)
    assert tuner.value == 2 and tuner.raises == 1


def test_a_tuner_with_minimum_0_comes_down_to_one_thread_that_overlaps(one_tick_windows):
    clock = FakeClock()
    tuner = autotune.Tuner(1, 2, clock=clock, minimum=0)
    overlaps = lambda v: {0: 6_000, 1: 10_000, 2: 10_500}[v]  # the thread overlaps the consumer's own work
    run_windows(tuner, clock, 20, rate_at=lambda v: {0: 6_000, 1: 5_000, 2: 5_000}[v])
    assert tuner.value == 0
    run_windows(tuner, clock, int(20 * autotune.RETRY_AFTER / autotune.WINDOW), rate_at=overlaps)
    assert tuner.value == 1  # up to 2 (the rate rose), down to 1 (it held), never back to 0 (it fell)


def test_a_tuner_never_goes_below_one_by_default(one_tick_windows):
    clock = FakeClock()
    tuner = autotune.Tuner(1, 2, clock=clock)
    run_windows(tuner, clock, 60, rate_at=lambda v: {0: 50_000, 1: 10_000, 2: 9_000}[v])
    assert tuner.value == 1 and tuner.lowers == 0


class ScriptedTuner:
    """A tuner whose value follows ``values`` one delivered batch at a time (then stays at the last)."""

    def __init__(self, values):
        self.values, self.i = list(values), 0
        self.value = self.values[0]

    def waited(self, seconds):
        pass

    def tick(self, delivered=0):
        self.i += 1
        self.value = self.values[min(self.i, len(self.values) - 1)]

    def close(self):
        pass


def test_a_fused_map_and_batch_at_0_makes_its_batches_on_the_consumer_and_yields_the_same(monkeypatch, drain):
    made_on = {}

    def f(x):
        made_on[int(x)] = threading.current_thread()
        if x % 37 == 36:
            raise ValueError(f"bad {int(x)}")
        return x * 2

    def run(ds):
        return drain(iter(ds))

    expected = run(Dataset.range(600).map(f).batch(8))
    values = [1, 1, 0, 0, 0, 2, 0, 1, 0] + [0, 2] * 20 + [0]
    monkeypatch.setattr(autotune, "tuner_for", lambda *a, **k: ScriptedTuner(values))
    ds = Dataset.range(600).map(f, num_parallel_calls=AUTOTUNE, executor="thread").batch(8)
    assert run(ds) == expected
    here = threading.current_thread()
    assert all(made_on[x] is here for x in range(560, 600))  # the value stays at 0 from batch 50 on

    # saved while the value keeps changing, restored into a fresh iterator: the same batches follow
    for stop in (3, 17, 40):
        monkeypatch.setattr(autotune, "tuner_for", lambda *a, **k: ScriptedTuner(values))
        it = iter(ds)
        head = drain(it, limit=stop)
        state = it.get_state()
        it.close()
        rest = iter(ds)
        rest.set_state(state)
        assert head + run(rest) == expected
