"""AUTOTUNE chooses a parallel map's executor: threads, or worker processes when its function holds the GIL.

The rule is a pure function (``executor_choice.decide``); the iterators get a fake probe and fake clocks, so
no test depends on the machine's speed. Whatever the decision, the elements are the plain map's, and a
state saved before or after the decision resumes exactly.
"""

import dataclasses
import pickle
import threading

import numpy as np
import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset, Options
from jaxfeed.pipeline.engine import executor_choice
from jaxfeed.pipeline.engine.executor_choice import Decision, Measurement, decide
from jaxfeed.pipeline.iterators import chosen_map
from jaxfeed.pipeline.iterators.parallel_map import ParallelMapIterator
from jaxfeed.pipeline.iterators.process_map import ProcessMapIterator
from jaxfeed.pipeline.testing import assert_elements_equal, assert_resumes_everywhere

MS = 1e-3


# ------------------------------------------------------------------------------------ the rule
def gil_bound(per_call=10 * MS, calls=100, transfer=1e-6):
    """Two threads kept one core busy: each call's CPU, one after the other."""
    return Measurement(calls, 2, wall=calls * per_call / 0.97, cpu=calls * per_call, transfer=transfer)


def releasing(per_call=10 * MS, calls=100):
    """Two threads kept two cores busy."""
    return Measurement(calls, 2, wall=calls * per_call / 1.9, cpu=calls * per_call, transfer=1e-6)


def test_a_function_that_holds_the_gil_goes_to_processes():
    d = decide(gil_bound(), cpus=2)
    assert d.executor == "process"
    assert str(d) == "process (function holds the GIL: cpu/wall 0.97 on 2 threads, 1.00 on 1)"


def test_a_function_that_releases_the_gil_stays_on_threads():
    d = decide(releasing(), cpus=2)
    assert d == Decision("thread", "function releases the GIL: cpu/wall 1.90 on 2 threads, 1.00 on 1")


def test_a_busy_machine_is_judged_by_the_ratio_to_one_thread():
    # the machine gave each thread half a core: one thread measured 0.5, two threads 0.95 -- they scaled
    m = Measurement(100, 2, wall=1.0, cpu=0.95, transfer=1e-6, solo=0.5)
    assert decide(m, cpus=2).executor == "thread"
    m = Measurement(100, 2, wall=1.0, cpu=0.5, transfer=1e-6, solo=0.5)  # ...or did not
    assert decide(m, cpus=2).executor == "process"


def test_a_function_that_waits_stays_on_threads():
    m = Measurement(100, 2, wall=1.0, cpu=0.05, transfer=1e-6, solo=0.04)
    assert decide(m, cpus=2) == Decision("thread", "function mostly waits: cpu/wall 0.04 on 1 thread")


def test_a_call_cheaper_than_its_trip_to_a_worker_stays_on_threads():
    d = decide(gil_bound(per_call=2e-6, transfer=0.0), cpus=2)  # 2 x 2 / (2 + 2) us: 1.0x at best
    assert d == Decision("thread", "too cheap to hand to processes: 2.00 us per call, ~2.00 us to move "
                                   "an element there and back (1.00x on 2 CPUs at best)")
    assert decide(gil_bound(per_call=2e-6, transfer=0.0), cpus=4).executor == "process"  # 2.0x on 4 CPUs


def test_a_probe_whose_two_threads_got_less_cpu_than_one_stays_on_threads():
    """cpu/wall 0.28 on 2 threads after 1.00 on 1 is not the GIL (that gives ~1): something else had the
    cores (seen with P3, whose interleave readers ran beside the probe), and processes would share them."""
    disturbed = Measurement(100, 2, wall=100 * 10 * MS / 0.28, cpu=100 * 10 * MS, transfer=1e-6)
    d = decide(disturbed, cpus=2)
    assert d.executor == "thread" and d.reason.startswith("probe disturbed")


def test_the_gain_is_judged_on_one_threads_time_per_call_not_the_probes_gil_inflated_cpu():
    """On two threads a function that holds the GIL also burns CPU handing it over: 6 us of probe CPU per
    call for a 3 us call would promise 2 x 6 / (6 + 4) = 1.2x; one thread's 3 us promises 0.86x."""
    inflated = dataclasses.replace(gil_bound(per_call=6e-6, transfer=1e-6), solo_per_call=3e-6)
    assert decide(inflated, cpus=2).executor == "thread"
    assert decide(dataclasses.replace(inflated, solo_per_call=0.0), cpus=2).executor == "process"
    d = decide(gil_bound(per_call=20e-6, transfer=10e-6), cpus=2)  # big elements: their trip costs more
    assert d.executor == "thread" and "~22.00 us to move an element" in d.reason


def test_one_cpu_stays_on_threads():
    assert decide(gil_bound(), cpus=1).executor == "thread"


def test_too_little_work_left_to_start_processes_stays_on_threads():
    assert decide(gil_bound(per_call=1 * MS), cpus=2, remaining=10).executor == "thread"
    assert decide(gil_bound(per_call=1 * MS), cpus=2, remaining=10_000).executor == "process"
    assert decide(gil_bound(per_call=1 * MS), cpus=2, remaining=None).executor == "process"  # unknown


def test_the_real_probe_maps_every_element_once_in_order_on_two_threads():
    threads = set()

    def run(block, position):
        threads.add(threading.get_ident())
        return [(position + i, x * 2) for i, x in enumerate(block)], False

    results, m = executor_choice.probe(run, list(range(10)), 5, solo=1.0)
    assert results == [(5 + i, 2 * i) for i in range(10)]
    assert (m.calls, m.threads) == (10, 2) and m.wall >= 0 and m.cpu >= 0 and len(threads) == 2


def test_elements_that_cannot_be_pickled_cannot_travel():
    assert executor_choice.transfer_seconds([threading.Lock()], [1]) == float("inf")


# ------------------------------------------------------------------------ the iterators
class FakeClock:
    """1 ms per reading: the warm-up ends after its first element, and a call never looks too cheap."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        self.now += MS
        return self.now


class FakeProbe:
    """Maps the probe's elements (on this thread) and reports ``measurement``, whatever the machine did (a
    list: one per probe, the last one repeated)."""

    def __init__(self, measurement):
        self.measurements = list(measurement) if isinstance(measurement, list) else [measurement]
        self.calls = 0

    def __call__(self, run, elements, position, solo, clock, cpu_clock):
        m = self.measurements[min(self.calls, len(self.measurements) - 1)]
        self.calls += 1
        half = (len(elements) + 1) // 2
        results = run(elements[:half], position)[0] + run(elements[half:], position + half)[0]
        return results, m


@pytest.fixture
def measured(monkeypatch):
    """``measured(m)``: the probe reports ``m`` from now on; returns the fake probe (it counts its calls)."""
    monkeypatch.setattr(chosen_map._Chooser, "clock", staticmethod(FakeClock()))
    monkeypatch.setattr(chosen_map._Chooser, "cpu_clock", staticmethod(FakeClock()))
    monkeypatch.setattr(chosen_map._Chooser, "process_clock", staticmethod(lambda: 0.0))  # no other threads
    monkeypatch.setattr(chosen_map._Chooser, "byte_seconds", staticmethod(lambda: 0.0))  # bytes cost no page faults

    def use(m):
        fake = FakeProbe(m)
        monkeypatch.setattr(chosen_map._Chooser, "probe", staticmethod(fake))
        return fake

    return use


HOLDS = gil_bound()
RELEASES = releasing()


def opts(cpus=2, fusion=True, stats=False, warm=False):
    o = Options()
    o.autotune.cpu_budget = cpus
    o.experimental_optimization.map_and_batch_fusion = fusion
    o.experimental_statistics = stats
    if warm:
        o.experimental_warm_start = True
    return o


def tokens(x):
    """Pure Python per element (holds the GIL): a small tokeniser-like function."""
    s = f"w{int(x)} v{int(x) % 7} u{int(x) % 3}"
    return np.array([sum(map(ord, t)) for t in s.split()], np.int64)


def pair(x):
    return {"x": x, "sq": np.array([x * x, x + 1], np.int64)}


def fails_at_7(x):
    if int(x) == 7:
        raise ValueError("seven")
    return x * 3


def root(it):
    inner = it._it
    return getattr(inner, "inner", inner)


def plain(ds_fn):
    """The elements of the same pipeline on explicit threads (no choice made)."""
    return list(ds_fn("thread"))


def as_list(ds):
    with iter(ds) as it:
        out = list(it)
        return out, root(it)


def unfused(executor=None, n=300):
    return Dataset.range(n).map(tokens, num_parallel_calls=AUTOTUNE, executor=executor).with_options(opts())


def fused(executor=None, n=300, size=16, drop=False):
    return (Dataset.range(n).map(pair, num_parallel_calls=AUTOTUNE, executor=executor)
            .batch(size, drop_remainder=drop).with_options(opts()))


def batch_not_fused(executor=None, n=300):
    """A batch over the map as a stage of its own (it takes stacked rows from a process map's workers)."""
    return (Dataset.range(n).map(pair, num_parallel_calls=AUTOTUNE, executor=executor).batch(16)
            .with_options(opts(fusion=False)))


@pytest.mark.parametrize("make", [unfused, fused, batch_not_fused], ids=["map", "map+batch", "map, batch"])
@pytest.mark.parametrize("m,executor", [(HOLDS, "process"), (RELEASES, "thread")], ids=["holds", "releases"])
def test_the_elements_are_the_same_whichever_executor_is_chosen(measured, make, m, executor):
    measured(m)
    with iter(make()) as it:
        got = list(it)
        chosen = [s for s in _stages(it) if getattr(s, "executor_decision", None) is not None]
    assert [s.executor_decision.executor for s in chosen] == [executor]
    assert_elements_equal(got, plain(make))


def _stages(it):
    todo, out = [it._it], []
    while todo:
        s = todo.pop()
        s = getattr(s, "inner", s)
        out.append(s)
        todo += [c for c in s.children() if c is not None]
    return out


def test_a_chosen_process_map_delivers_the_probes_results_first_then_the_workers(measured):
    fake = measured(HOLDS)
    with iter(unfused(n=400)) as it:
        got = [next(it) for _ in range(5)]
        chooser = root(it)
        assert fake.calls == 1 and isinstance(chooser._inner, ProcessMapIterator)
        got += list(it)
    assert_elements_equal(got, [tokens(x) for x in range(400)])


def pools_wait_for(monkeypatch) -> threading.Event:
    """Worker pools that start only once the returned event is set (a pool slow to start)."""
    from jaxfeed.pipeline.iterators import process_map

    go = threading.Event()

    class SlowToStart(process_map._Pool):
        def __init__(self, *args):
            assert go.wait(30)  # a hang guard only
            super().__init__(*args)

    monkeypatch.setattr(process_map, "_Pool", SlowToStart)
    return go


def test_the_consumer_maps_on_while_the_worker_processes_start(measured, monkeypatch):
    measured(HOLDS)
    go = pools_wait_for(monkeypatch)
    with iter(unfused(n=5000)) as it:
        got = [next(it) for _ in range(300)]  # the probe's, then the consumer's own: no worker is up
        stage = root(it)._stage
        assert stage._pool is None
        go.set()
        stage._starting.thread.join(30)
        got += list(it)
        assert stage._pool is not None  # the workers took over once up
    assert_elements_equal(got, [tokens(x) for x in range(5000)])


def test_the_consumer_lets_the_starting_thread_have_the_gil_between_the_blocks_it_maps(measured, monkeypatch):
    """A consumer mapping pure Python gives the GIL up only when the switch interval (5 ms) makes it, and the
    start of the workers takes it back after each of its system calls: it took as long as P5's whole epoch,
    which then ran on the consumer alone. Before each block it maps itself, the consumer waits a moment on
    the starting thread (giving up the GIL)."""
    from jaxfeed.pipeline.iterators import process_map

    measured(HOLDS)
    go = pools_wait_for(monkeypatch)
    waits, blocks = [], []
    let_run, map_here = process_map._Starting.let_run, ProcessMapIterator._map_here

    def waiting(self, seconds):
        waits.append(seconds)
        let_run(self, seconds)

    def mapping(self):
        done = map_here(self)
        blocks.append(len(waits))  # waits so far, this block's included
        return done

    monkeypatch.setattr(process_map._Starting, "let_run", waiting)
    monkeypatch.setattr(ProcessMapIterator, "_map_here", mapping)
    with iter(unfused(n=5000)) as it:
        got = [next(it) for _ in range(300)]  # the probe's, then the consumer's own: no worker is up
        go.set()
        got += list(it)
    assert blocks and len(waits) == len(blocks) and waits[0] == process_map.YIELD_SECONDS > 0
    assert blocks == list(range(1, len(blocks) + 1))  # each block after a wait
    assert_elements_equal(got, [tokens(x) for x in range(5000)])


def test_an_iterator_closed_while_its_workers_start_leaves_no_process(measured):
    import psutil

    measured(HOLDS)
    with iter(unfused(n=400)) as it:
        next(it)
        starting = root(it)._stage._starting
    assert starting is not None and not starting.thread.is_alive()
    assert all(not p.is_alive() for p in (starting.pool.procs if starting.pool else []))
    assert not [c for c in psutil.Process().children(recursive=True) if "jaxfeed-map" in " ".join(c.cmdline())]


def test_the_fused_stage_stays_fused_on_threads_and_unfuses_in_processes(measured):
    from jaxfeed.pipeline.iterators.batch import BatchIterator
    from jaxfeed.pipeline.iterators.map_batch import MapBatchIterator

    measured(RELEASES)
    _, it = as_list(fused())
    assert isinstance(it._inner, MapBatchIterator)
    measured(HOLDS)
    _, it = as_list(fused())
    assert isinstance(it._inner, BatchIterator) and isinstance(it._stage, ProcessMapIterator)


@pytest.mark.parametrize("size,drop", [(16, False), (7, True), (1000, False)])
def test_fused_batches_are_the_plain_graphs_for_any_batch_size(measured, size, drop):
    for m in (HOLDS, RELEASES):
        measured(m)
        got, _ = as_list(fused(n=300, size=size, drop=drop))
        assert_elements_equal(got, plain(lambda e: fused(e, n=300, size=size, drop=drop)))


@pytest.mark.parametrize("m", [HOLDS, RELEASES], ids=["holds", "releases"])
def test_an_error_in_the_function_is_delivered_in_its_place_under_either_executor(measured, m):
    measured(m)
    ds = Dataset.range(200).map(fails_at_7, num_parallel_calls=AUTOTUNE).with_options(opts())
    with iter(ds) as it:
        head = [int(next(it)) for _ in range(7)]
        with pytest.raises(ValueError, match="seven"):
            next(it)
        rest = [int(x) for x in it]
    assert head + rest == [3 * x for x in range(200) if x != 7]


@pytest.mark.parametrize("m", [HOLDS, RELEASES], ids=["holds", "releases"])
def test_a_map_with_deterministic_false_yields_the_same_multiset_under_either_executor(measured, m):
    measured(m)
    ds = Dataset.range(500).map(lambda x: x * 3, num_parallel_calls=AUTOTUNE, deterministic=False)
    got, it = as_list(ds.with_options(opts()))
    assert it.executor_decision.executor == ("process" if m is HOLDS else "thread")
    assert sorted(int(x) for x in got) == [3 * x for x in range(500)]


def test_with_rng_maps_draw_the_same_under_either_executor(measured):
    def make(executor=None):
        return (Dataset.range(300).map(lambda x, rng: x + rng.integers(1000), num_parallel_calls=AUTOTUNE,
                                       executor=executor, with_rng=True, seed=5).with_options(opts()))

    expected = plain(make)
    for m in (HOLDS, RELEASES):
        measured(m)
        got, _ = as_list(make())
        assert_elements_equal(got, expected)


@pytest.mark.parametrize("make", [unfused, fused], ids=["map", "map+batch"])
@pytest.mark.parametrize("m", [HOLDS, RELEASES], ids=["holds", "releases"])
def test_resumes_exactly_from_states_saved_before_and_after_the_decision(measured, make, m):
    measured(m)
    n_out = len(list(make("thread", n=120)))
    assert_resumes_everywhere(lambda: make(n=120), ks=sorted({0, 1, 2, 3, n_out // 2, n_out}))


@pytest.mark.parametrize("make", [unfused, fused], ids=["map", "map+batch"])
def test_the_state_has_one_layout_before_and_after_the_decision_on_either_executor(measured, make):
    from jaxfeed.pipeline import state_layout

    layouts = []
    for m in (HOLDS, RELEASES):
        measured(m)
        with iter(make()) as it:
            layouts.append(state_layout.layout(it.get_state()))  # before the decision
            next(it)
            layouts.append(state_layout.layout(it.get_state()))
            list(it)
            layouts.append(state_layout.layout(it.get_state()))
    merged = state_layout.ANY
    for one in layouts:
        merged, conflict = state_layout.unify(merged, one)
        assert conflict is None, state_layout.describe(conflict)


def test_a_restored_iterator_runs_on_the_executor_it_was_saved_from(measured):
    measured(HOLDS)
    with iter(unfused()) as it:
        head = [next(it) for _ in range(50)]
        state = pickle.loads(pickle.dumps(it.get_state()))
    probe = measured(RELEASES)  # a new probe would now choose threads
    restored = unfused().make_iterator(state=state)
    tail = list(restored)
    assert probe.calls == 0 and isinstance(root(restored)._inner, ProcessMapIterator)
    assert root(restored).executor_decision == Decision("process", HOLDS_REASON)
    restored.close()
    assert_elements_equal(head + tail, plain(unfused))


HOLDS_REASON = "function holds the GIL: cpu/wall 0.97 on 2 threads, 1.00 on 1"


def test_a_state_saved_before_the_decision_probes_when_restored(measured):
    measured(RELEASES)
    with iter(fused()) as it:
        state = it.get_state()
    probe = measured(HOLDS)
    restored = fused().make_iterator(state=state)
    got = list(restored)
    assert probe.calls == 1 and root(restored).executor_decision.executor == "process"
    restored.close()
    assert_elements_equal(got, plain(fused))


def test_set_state_on_a_running_iterator_switches_back_to_the_saved_executor(measured):
    measured(RELEASES)
    with iter(unfused()) as it:
        head = [next(it) for _ in range(20)]
        state = it.get_state()
    measured(HOLDS)
    with iter(unfused()) as other:
        [next(other) for _ in range(60)]  # runs in processes
        other.set_state(state)
        tail = list(other)
        assert isinstance(root(other)._inner, ParallelMapIterator)
    assert_elements_equal(head + tail, plain(unfused))


def test_the_next_iterator_of_a_dataset_reuses_the_decision_without_a_probe(measured):
    probe = measured(HOLDS)
    ds = unfused()
    first, it = as_list(ds)
    again, it2 = as_list(ds)
    assert probe.calls == 1 and it2.executor_decision == it.executor_decision
    assert_elements_equal(again, first)


def test_the_decision_and_its_reason_show_in_the_statistics(measured):
    measured(HOLDS)
    ds = Dataset.range(300).map(tokens, num_parallel_calls=AUTOTUNE).with_options(opts(stats=True))
    with iter(ds) as it:
        list(it)
        report = it.stats()
    row = report["Map"]
    assert row["executor"] == f"process ({HOLDS_REASON})"
    assert f"executor of {row['node']}: process ({HOLDS_REASON})" in str(report)


def test_explain_says_the_executor_is_chosen_when_the_map_runs_and_then_what_was_chosen(measured):
    measured(HOLDS)
    ds = Dataset.range(300).map(tokens, num_parallel_calls=AUTOTUNE).batch(2).with_options(opts())
    before = ds.explain()
    assert "AUTOTUNE chooses its executor" in before and "Chosen when run" not in before
    list(ds)
    assert ds.explain().endswith(f"Chosen when run:\nexecutor of {_fused_label(ds)}: process ({HOLDS_REASON})")


def _fused_label(ds):
    from jaxfeed.pipeline.passes import run_passes

    return run_passes(ds.node)[0].label()


# ----------------------------------------------------------------- maps that stay on threads
def test_a_stateful_map_stays_on_threads_and_says_why(measured):
    probe = measured(HOLDS)
    ds = Dataset.range(50).map(tokens, num_parallel_calls=AUTOTUNE, stateful=True).with_options(opts())
    _, it = as_list(ds)
    assert probe.calls == 0 and it.executor_decision == Decision(
        "thread", "stateful=True: its state lives in this process")


def test_one_cpu_in_the_budget_stays_on_threads_without_a_probe(measured):
    probe = measured(HOLDS)
    _, it = as_list(Dataset.range(50).map(tokens, num_parallel_calls=AUTOTUNE).with_options(opts(cpus=1)))
    assert probe.calls == 0 and isinstance(it, ParallelMapIterator)
    assert it.executor_decision.reason.startswith("1 CPU in the budget")


def test_the_rule_skips_the_probe_when_processes_cannot_pay_even_for_a_gil_bound_function():
    assert executor_choice.cannot_pay(3e-6, 1e-6, cpus=2).executor == "thread"  # 2x3 / (3 + 2 + 2) = 0.86
    assert executor_choice.cannot_pay(8e-6, 1e-6, cpus=2) is None  # 2x8 / (8 + 4) = 1.33: worth a probe
    assert executor_choice.cannot_pay(8e-6, 3e-6, cpus=2) is None  # 1.14: the probe decides (a tokeniser)
    assert executor_choice.cannot_pay(100e-6, 1e-6, cpus=1).executor == "thread"


def test_a_map_whose_elements_cost_more_to_move_than_to_map_stays_on_threads_without_a_probe(measured,
                                                                                             monkeypatch):
    """The first batch must not wait for a two-thread probe that cannot change the decision (P3's parse:
    ~4 us a call, as much again to move a record to a worker and back)."""
    probe = measured(HOLDS)  # a probe would say: holds the GIL, go to processes
    monkeypatch.setattr(executor_choice, "transfer_seconds", lambda elements, results, clock=None: 1.0)
    got, it = as_list(Dataset.range(300).map(tokens, num_parallel_calls=AUTOTUNE))
    assert probe.calls == 0 and isinstance(it._inner, ParallelMapIterator)
    assert it.executor_decision.reason.startswith("too cheap to hand to processes")
    assert_elements_equal(got, [tokens(i) for i in range(300)])


def test_a_function_cloudpickle_cannot_serialise_stays_on_threads(measured):
    measured(HOLDS)

    class Holder:  # a class may be reached (worker_safety), but this local one pickles by value, lock and all
        lock = threading.Lock()

    def locked(x):
        return x + (Holder is not None)

    got, it = as_list(Dataset.range(300).map(locked, num_parallel_calls=AUTOTUNE).with_options(opts()))
    assert it.executor_decision.executor == "thread"
    assert it.executor_decision.reason.startswith("function cannot be pickled for worker processes")
    assert [int(x) for x in got] == list(range(1, 301))


SEEN = []


def noting_tokens(x):
    SEEN.append(int(x))
    return tokens(x)


def test_a_function_whose_move_would_lose_its_effects_stays_on_threads(measured):
    """A bug: AUTOTUNE moved a map whose function appends to a global list to worker processes, where it
    appended to copies: the user's list held only what the consumer's thread mapped while the workers
    started. Functions that reach state (worker_safety, as for the interleave's generators) stay here."""
    probe = measured(HOLDS)  # a probe would say: holds the GIL, go to processes
    SEEN.clear()
    got, it = as_list(Dataset.range(300).map(noting_tokens, num_parallel_calls=AUTOTUNE).with_options(opts()))
    assert probe.calls == 0 and it.executor_decision.executor == "thread"
    assert "reads SEEN" in it.executor_decision.reason or "SEEN" in it.executor_decision.reason
    assert "a worker's copy only" in it.executor_decision.reason
    assert sorted(SEEN) == list(range(300))
    assert_elements_equal(got, [tokens(i) for i in range(300)])


def test_an_explicit_executor_or_parallelism_is_not_second_guessed(measured):
    probe = measured(HOLDS)
    for ds in (Dataset.range(50).map(tokens, num_parallel_calls=AUTOTUNE, executor="thread"),
               Dataset.range(50).map(tokens, num_parallel_calls=2)):
        _, it = as_list(ds.with_options(opts()))
        assert isinstance(it, ParallelMapIterator) and getattr(it, "executor_decision", None) is None
    assert probe.calls == 0


def test_a_map_inside_an_interleave_function_does_not_probe(measured):
    probe = measured(HOLDS)
    ds = Dataset.range(3).interleave(
        lambda i: Dataset.range(20).map(tokens, num_parallel_calls=AUTOTUNE), cycle_length=2).with_options(opts())
    assert len(list(ds)) == 60 and probe.calls == 0


def test_a_short_input_ends_within_the_probe_on_threads(measured):
    measured(HOLDS)
    got, it = as_list(Dataset.range(2).map(tokens, num_parallel_calls=AUTOTUNE).with_options(opts()))
    assert it.executor_decision == Decision("thread", "the input ended within the probe")
    assert_elements_equal(got, [tokens(0), tokens(1)])


def test_warm_start_probes_at_creation_and_yields_the_same(measured):
    probe = measured(HOLDS)
    ds = Dataset.range(300).map(tokens, num_parallel_calls=AUTOTUNE).with_options(opts(warm=True))
    with iter(ds) as it:
        assert probe.calls == 1  # before the first next
        got = list(it)
    assert_elements_equal(got, plain(unfused))


# ------------------------------------------------------------- a shared, noisy machine
def disturbed(others=0.0):
    """Two threads got 0.28 of a core where one got a whole one; the process's other threads used
    ``others`` CPU seconds meanwhile."""
    return Measurement(100, 2, wall=100 * 10 * MS / 0.28, cpu=100 * 10 * MS, transfer=1e-6, others=others)


def test_a_probe_disturbed_by_other_programs_leaves_the_decision_open():
    d = decide(disturbed(others=0.0), cpus=2)
    assert d.executor == "thread" and not d.final and "by other programs" in d.reason


def test_a_probe_disturbed_by_the_pipelines_own_threads_decides_threads_for_good():
    """P3's interleave readers beside the probe: processes would share the cores with them."""
    m = disturbed(others=0.5 * 100 * 10 * MS / 0.28)  # the readers used half a core
    d = decide(m, cpus=2)
    assert d.executor == "thread" and d.final and "this pipeline's other threads (0.50 cores)" in d.reason


def test_a_disturbed_probe_of_a_call_too_cheap_for_processes_decides_without_another_probe():
    m = dataclasses.replace(disturbed(), solo_per_call=2e-6)
    d = decide(m, cpus=2)
    assert d.final and d.reason.startswith("too cheap to hand to processes")


def test_the_probe_runs_again_while_other_programs_disturb_it(measured):
    probe = measured([disturbed(), HOLDS])
    got, it = as_list(unfused(n=3000))
    assert probe.calls == 2 and it.executor_decision == Decision("process", HOLDS_REASON)
    assert_elements_equal(got, [tokens(x) for x in range(3000)])


@pytest.mark.parametrize("make", [unfused, fused], ids=["map", "map+batch"])
def test_a_decision_left_open_by_every_probe_stays_on_threads_and_is_not_remembered(measured, make):
    probe = measured(disturbed())
    ds = make(n=3000)
    got, it = as_list(ds)
    assert probe.calls == executor_choice.MAX_PROBES
    assert it.executor_decision.executor == "thread" and not it.executor_decision.final
    assert "Chosen when run" not in ds.explain()
    probe = measured(HOLDS)  # the next iterator probes afresh
    again, it = as_list(ds)
    assert probe.calls == 1 and it.executor_decision == Decision("process", HOLDS_REASON)
    assert_elements_equal(got, plain(lambda e: make(e, n=3000)))
    assert_elements_equal(again, got)


def test_a_probe_disturbed_by_the_pipelines_own_threads_is_not_repeated(measured):
    probe = measured(disturbed(others=2.0))  # 0.56 cores
    ds = unfused(n=3000)
    _, it = as_list(ds)
    assert probe.calls == 1 and it.executor_decision.executor == "thread" and it.executor_decision.final
    as_list(ds)
    assert probe.calls == 1  # remembered


def test_the_warm_up_judges_the_cpu_time_of_its_calls_not_their_wall_time(measured, monkeypatch):
    """A descheduled thread's wall clock runs on, its CPU clock does not: here the calls take 1 ms of wall
    time each reading but 0.1 us of CPU -- far too cheap for processes, whatever the wall time says."""
    probe = measured(HOLDS)

    class CheapCpu:
        now = 0.0

        def __call__(self):
            self.now += 1e-7
            return self.now

    monkeypatch.setattr(chosen_map._Chooser, "cpu_clock", staticmethod(CheapCpu()))
    got, it = as_list(unfused())
    assert probe.calls == 0 and it.executor_decision.reason.startswith("too cheap to hand to processes")
    assert_elements_equal(got, plain(unfused))


def test_the_probe_times_the_trip_to_a_worker_and_the_other_threads_in_cpu_time():
    class Ticks:  # 1 ms per reading, on one clock shared by both threads
        def __init__(self):
            self.now, self.lock = 0.0, threading.Lock()

        def __call__(self):
            with self.lock:
                self.now += MS
                return self.now

    # each thread reads the process's CPU as it starts and ends: the first reading is a start, the last an end
    process_times = Ticks()
    _, m = executor_choice.probe(lambda block, position: (list(block), False), list(range(10)), 0, solo=1.0,
                                 cpu_clock=lambda: 0.0, process_clock=process_times)
    assert m.cpu == 0.0 and m.others == pytest.approx(3 * MS) and m.transfer == 0.0  # the CPU clock stood still
    _, m = executor_choice.probe(lambda block, position: (list(block), False), list(range(10)), 0, solo=1.0,
                                 cpu_clock=Ticks(), process_clock=lambda: 0.0)
    assert m.cpu == pytest.approx(2 * MS)  # each thread: one reading of the shared clock between its two


def test_the_trip_of_an_element_leaves_out_the_fixed_cost_of_a_block():
    """A worker's task holds hundreds of elements: a block's fixed cost (pickling a numpy array: ~5 us) is
    theirs to share, not the few sampled ones'. Here 10 elements round-trip in 11 ms, one in 2 ms."""
    readings = iter([0, 11, 0, 11, 0, 11, 0, 2, 0, 2, 0, 2])
    t = executor_choice.transfer_seconds(list(range(10)), list(range(10)), clock=lambda: next(readings) * MS)
    assert t == pytest.approx(1 * MS)


def test_the_rule_counts_the_cores_the_pipelines_other_threads_keep_busy():
    assert executor_choice.cannot_pay(8e-6, 1e-6, cpus=2) is None
    d = executor_choice.cannot_pay(8e-6, 1e-6, cpus=2, own=0.9)  # 1.1 x 8 / (8 + 4) = 0.73
    assert d.executor == "thread" and "less 0.90 cores for this pipeline's other threads" in d.reason
    m = dataclasses.replace(gil_bound(per_call=8e-6), others=0.9 * gil_bound(per_call=8e-6).wall)
    assert decide(m, cpus=2).reason.startswith("too cheap to hand to processes")


def test_a_warm_up_beside_busy_threads_of_the_pipeline_stays_on_threads_without_a_probe(measured, monkeypatch):
    """P3's interleave readers keep a core busy while its parse warms up: worker processes would share what
    is left, and the first batch must not wait for a probe."""
    probe = measured(HOLDS)
    busy = FakeClock()  # 1 ms per reading: the process's CPU grows faster than this thread's
    monkeypatch.setattr(chosen_map._Chooser, "process_clock", staticmethod(lambda: 100 * busy()))
    got, it = as_list(unfused())
    assert probe.calls == 0 and "cores for this pipeline's other threads" in it.executor_decision.reason
    assert_elements_equal(got, plain(unfused))


def test_the_rule_judges_the_least_cpu_per_call_seen_in_the_warm_up_or_the_probe():
    """Contention only adds CPU: a 3 us call measured at 20 us in a cold warm-up is still 3 us."""
    m = dataclasses.replace(gil_bound(per_call=3e-6, transfer=1e-6), solo_per_call=20e-6)  # 6 / 7: 0.86x
    d = decide(m, cpus=2)
    assert d.executor == "thread" and d.reason.startswith("too cheap to hand to processes: 3.00 us per call")


def test_the_rule_takes_the_busier_of_the_warm_ups_and_the_probes_other_threads():
    m = dataclasses.replace(gil_bound(per_call=8e-6), warm_own=0.9)  # 1.1 x 8 / (8 + 4) = 0.73
    assert decide(m, cpus=2).reason.endswith("less 0.90 cores for this pipeline's other threads)")
    assert decide(dataclasses.replace(m, warm_own=0.1), cpus=2).executor == "process"  # 1.9 x 8 / 12 = 1.27


def test_a_parallel_stage_upstream_is_taken_to_keep_a_core_busy_whatever_the_warm_up_saw(measured, monkeypatch):
    """P3: interleave readers on threads, then the parse. Their bursts may miss the warm-up entirely; on two
    CPUs the workers would have one core left, so no probe (the first batch does not wait for one)."""
    probe = measured(HOLDS)

    def untimed(*args, **kwargs):
        raise AssertionError("the trip to a worker is not timed: processes cannot pay even for a free one")

    monkeypatch.setattr(executor_choice, "transfer_seconds", untimed)
    ds = (Dataset.range(4).interleave(lambda i: Dataset.range(100), cycle_length=2, num_parallel_calls=2)
          .map(tokens, num_parallel_calls=AUTOTUNE).with_options(opts()))
    got, it = as_list(ds)
    assert probe.calls == 0 and it.executor_decision.reason.endswith(
        "less 1.00 cores for this pipeline's other threads)")
    assert len(got) == 400
    assert executor_choice.upstream_threads(Dataset.range(3).prefetch(2).map(tokens).node)
    assert not executor_choice.upstream_threads(Dataset.range(3).map(tokens).batch(2).map(tokens).node)


# ------------------------------------------------------------------ the process map under a batch
def spied_tasks(monkeypatch) -> list:
    """The (first position, length) of every task a process map sends, from now on; the workers start at the
    first refill, not in the background (the consumer would map all of it), and tasks grow to MAX_BLOCK
    after the first."""
    from jaxfeed.pipeline.iterators import process_map

    tasks = []
    submit = ProcessMapIterator._submit

    def spy(self, block):
        tasks.append((self._position, len(block)))
        submit(self, block)

    monkeypatch.setattr(ProcessMapIterator, "_submit", spy)
    monkeypatch.setattr(ProcessMapIterator, "start_in_background", lambda self: None)
    monkeypatch.setattr(process_map, "TARGET_TASK_SECONDS", 1e9)
    return tasks


@pytest.mark.parametrize("size", [16, 7, 1000])
def test_a_chosen_process_map_under_a_batch_sends_tasks_that_end_on_batch_boundaries(measured, monkeypatch,
                                                                                     size):
    """Each batch is then a view of one worker's stacked block: no join of two blocks' pieces."""
    measured(HOLDS)
    tasks = spied_tasks(monkeypatch)
    n = 3000
    got, _ = as_list(fused(n=n, size=size))
    # the first tasks (8 elements, sent before any answer told the time per call) may end anywhere
    later = [(start, k) for start, k in tasks if k != 8]
    assert later and all((start + k) % size == 0 for start, k in later if start + k < n)
    assert_elements_equal(got, plain(lambda e: fused(e, n=n, size=size)))


def test_a_restored_process_map_under_a_batch_gets_back_on_batch_boundaries(measured, monkeypatch):
    measured(HOLDS)
    with iter(fused(n=3000)) as it:
        head = [next(it) for _ in range(3)]
        state = pickle.loads(pickle.dumps(it.get_state()))
    tasks = spied_tasks(monkeypatch)
    restored = fused(n=3000).make_iterator(state=state)
    tail = list(restored)
    restored.close()
    later = [(start, k) for start, k in tasks if k != 8]
    assert later and all((start + k) % 16 == 0 for start, k in later if start + k < 3000)
    assert_elements_equal(head + tail, plain(lambda e: fused(e, n=3000)))


def test_a_chosen_process_map_under_a_batch_bigger_than_a_task_keeps_its_tasks_small(measured, monkeypatch):
    """A batch bigger than a task (MAX_BLOCK) is made by several tasks, several workers at once: a task
    never grows to a whole batch (memory in flight, and the first batch's parallelism)."""
    from jaxfeed.pipeline.iterators import process_map

    measured(HOLDS)
    tasks = []
    submit = ProcessMapIterator._submit

    def spy(self, block):
        tasks.append(len(block))
        submit(self, block)

    monkeypatch.setattr(ProcessMapIterator, "_submit", spy)
    monkeypatch.setattr(ProcessMapIterator, "start_in_background", lambda self: None)
    got, _ = as_list(fused(n=12000, size=5000))
    assert tasks and max(tasks) <= process_map.MAX_BLOCK
    assert_elements_equal(got, plain(lambda e: fused(e, n=12000, size=5000)))


def fails_at_200(x):
    if int(x) == 200:
        raise ValueError("bad 200")
    return x


def test_a_map_and_batch_on_processes_keeps_in_its_state_the_error_its_batch_kept_for_its_next_call(measured):
    # The process path's state (one layout with the fused stage's) did not carry the batch's 'deferred': a
    # state saved between a next_many that stopped before a failed batch and the next call dropped the error.
    from jaxfeed.pipeline import checkpoint

    measured(HOLDS)
    make = lambda: (Dataset.range(300).map(fails_at_200, num_parallel_calls=AUTOTUNE).batch(3)
                    .with_options(opts()).take(1000))
    with iter(make()) as it:
        assert len(it.next_many(100)) == 66  # to 197: the batch of 200 failed, kept for the next call
        chosen = [s for s in _stages(it) if getattr(s, "executor_decision", None) is not None]
        assert [s.executor_decision.executor for s in chosen] == ["process"]
        data = checkpoint.serialize(it.get_state())
    with make().make_iterator(state=checkpoint.deserialize(data)) as restored:
        with pytest.raises(ValueError, match="bad 200"):
            next(restored)
        assert next(restored).tolist() == [201, 202, 203]  # the failed batch's elements are dropped (tf.data)


def test_a_maps_worker_safety_is_judged_once_per_dataset(measured, monkeypatch):
    """The check walks the function's bytecode (0.2-0.6 ms): once per Dataset, not on every epoch's
    first-batch path, where it had made P3 as ported's first batch 1.4-1.8x the hand loop's."""
    measured(HOLDS)
    calls = []
    real = executor_choice.safety_reason

    def counted(fn, what="generator"):
        calls.append(fn)
        return real(fn, what)

    monkeypatch.setattr(executor_choice, "safety_reason", counted)
    ds = Dataset.range(50).map(noting_tokens, num_parallel_calls=AUTOTUNE).with_options(opts())
    for _ in range(3):
        list(ds)
    assert calls == [noting_tokens]
