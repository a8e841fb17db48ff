"""Parallel interleave, solo start: once the Dataset's last iterator opened its slots quickly, the consumer serves
the first ``cycle x read`` elements alone and the readers start at the call after (``parallel_interleave.py``,
"A *solo* start"). Time is a fake clock."""

import threading
import time

import numpy as np
import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset, Options
from jaxfeed.pipeline.iterators import parallel_interleave
from jaxfeed.pipeline.engine.thread_start import wait_handled
from jaxfeed.pipeline.iterators.parallel_interleave import ParallelInterleaveIterator


class StillClock:
    """Time that never passes: every open looks instant."""

    def __call__(self):
        return 0.0


class SlowClock:
    """Time that moves on by more than ``SOLO_OPEN_SECONDS`` at every reading: every open looks slow."""

    def __init__(self):
        self.now, self.lock = 0.0, threading.Lock()

    def __call__(self):
        with self.lock:
            self.now += 10 * parallel_interleave.SOLO_OPEN_SECONDS
            return self.now


@pytest.fixture
def quick_opens(monkeypatch):
    monkeypatch.setattr(ParallelInterleaveIterator, "clock", staticmethod(StillClock()))


@pytest.fixture
def slow_opens(monkeypatch):
    monkeypatch.setattr(ParallelInterleaveIterator, "clock", staticmethod(SlowClock()))


def readers():
    wait_handled(30)  # threads handed to the starter thread (an earlier iterator's too) have started by now
    return {t for t in threading.enumerate() if t.name.startswith("jaxfeed-interleave")}


def jaxfeed_threads():
    wait_handled(30)
    return {t for t in threading.enumerate() if t.name.startswith("jaxfeed-")}


def started_since(before: set, now: set) -> set:
    """The threads of ``now`` that were not running at ``before``: those the iterator under test started. Threads
    of earlier iterators (an earlier test's, or the learning epoch's, closed when collected) may end at any time
    meanwhile; they are neither counted nor waited for."""
    return now - before


def wait_running(threads, seconds=30):
    """Wait until every thread of ``threads`` has started (readers start on ``engine/thread_start.py``'s
    starter thread, after the call that asked for them returned)."""
    deadline = time.monotonic() + seconds
    while any(t.ident is None for t in threads) and time.monotonic() < deadline:
        time.sleep(0.001)


def files_like(npc=AUTOTUNE, deterministic=None, cycle=4):
    # 8 "files" of 300 "records" each, as P3 reads them
    return Dataset.range(8).interleave(lambda f: Dataset.range(300).map(lambda r: f * 1000 + r),
                                       cycle_length=cycle, num_parallel_calls=npc, deterministic=deterministic)


def sequential(cycle=4):
    return [int(x) for x in files_like(npc=None, cycle=cycle)]


def interleave_of(it):
    return it._it


@pytest.mark.parametrize("npc", [AUTOTUNE, 1, 4])
def test_first_calls_of_a_later_iterator_start_no_reader(quick_opens, npc):
    ds = files_like(npc)
    assert [int(x) for x in ds] == sequential()  # the first iterator learns that its opens are quick
    before = readers()
    it = iter(ds)
    stage = interleave_of(it)
    first = it.next_many(256)
    assert not started_since(before, readers()) and not stage._threads
    assert len(first) == 256  # the consumer read every slot it needed: a whole first batch, not a part
    out, solo = first, 4 * stage._read  # cycle x read
    while len(out) < solo:
        out += it.next_many(256)
        assert not started_since(before, readers()) and not stage._threads
    out += it.next_many(256)
    assert stage._threads  # the readers started at the call after
    wait_running(stage._threads)  # (started by the starter thread: soon, not necessarily by now)
    assert started_since(before, readers()) == set(stage._threads)  # (named as the check above expects)
    out += [x for block in iter(lambda: it.next_many(256), []) for x in block]
    assert [int(x) for x in out] == sequential()
    it.close()
    assert not started_since(before, readers())  # every reader it started was joined


def test_a_first_batch_taken_in_small_calls_starts_no_reader(quick_opens):
    # as a process map takes its first elements: blocks of 1, 2, 4, ... while its workers start
    ds = files_like()
    assert [int(x) for x in ds] == sequential()
    it = iter(ds)
    out, k = [], 1
    while len(out) < 256:
        out += it.next_many(k)
        k *= 2
    assert not interleave_of(it)._threads
    out += [x for block in iter(lambda: it.next_many(100), []) for x in block]
    assert interleave_of(it)._threads
    assert [int(x) for x in out] == sequential()
    it.close()


def test_first_iterator_of_a_dataset_starts_its_readers_at_once(quick_opens):
    # nothing is known of its opens yet: they might wait (see the next test)
    it = iter(files_like())
    it.next_many(256)
    assert interleave_of(it)._threads
    it.close()


def test_slow_opens_keep_the_readers_from_the_first_call(slow_opens):
    # inner datasets that only finish when both are read at once: a consumer reading alone would hang
    barrier = threading.Barrier(2, timeout=20)

    def inner(x):
        return Dataset.from_tensors(x).map(lambda v: (barrier.wait(), v)[1])

    ds = Dataset.range(2).interleave(inner, cycle_length=2, num_parallel_calls=2)
    for _ in range(3):
        barrier.reset()
        assert sorted(int(x) for x in ds) == [0, 1]
    it = iter(ds)
    barrier.reset()
    it.next_many(2)
    assert interleave_of(it)._threads
    it.close()


def test_a_prefetched_interleave_delivers_its_first_element_with_no_thread_started(quick_opens, monkeypatch):
    ds = files_like().prefetch(2)
    want = sequential()
    assert [int(x) for x in ds] == want
    before = jaxfeed_threads()
    consumer, real_start = threading.current_thread(), threading.Thread.start

    def start(self):  # no thread start on the consumer's path (the starter thread's are off it)
        assert threading.current_thread() is not consumer, f"the consumer started {self.name}"
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    it = iter(ds)
    first = next(it)
    # no reader (solo start); the prefetch's producer starts after the first element, on the starter thread,
    # so that the buffer fills while the consumer works on it
    assert {t.name for t in started_since(before, jaxfeed_threads())} <= {"jaxfeed-prefetch"}
    assert [int(first)] + [int(x) for x in it] == want
    it.close()
    assert not started_since(before, jaxfeed_threads())


def test_errors_of_a_solo_call_arrive_where_the_sequential_ones_do(quick_opens):
    def fail_on_41(v):
        if v == 41:
            raise ZeroDivisionError("41")
        return v

    def inner(x):
        if x == 3:
            raise KeyError("no dataset for 3")
        return Dataset.range(x * 10, x * 10 + 3).map(fail_on_41)

    def drain(ds, first):
        out, it, n = [], iter(ds), first
        while True:
            try:
                block = it.next_many(n)
            except Exception as e:  # noqa: BLE001
                out.append(type(e).__name__)
                continue
            n = 4
            if not block:
                it.close()
                return out
            out.extend(int(x) for x in block)

    par = Dataset.range(1, 6).interleave(inner, cycle_length=2, num_parallel_calls=2)
    seq = Dataset.range(1, 6).interleave(inner, cycle_length=2)
    want = drain(seq, 4)
    assert "KeyError" in want and "ZeroDivisionError" in want
    assert drain(par, 4) == want  # (learns)
    for first in (1, 5, 100):  # the solo call ends before, at and after the errors
        assert drain(par, first) == drain(seq, first) == want


def test_nondeterministic_solo_call_keeps_the_multiset(quick_opens):
    ds = files_like(deterministic=False)
    assert sorted(int(x) for x in ds) == sorted(sequential())
    it = iter(ds)
    first = it.next_many(300)
    assert not interleave_of(it)._threads
    assert sorted(int(x) for x in first + [x for b in iter(lambda: it.next_many(64), []) for x in b]) \
        == sorted(sequential())
    it.close()


def test_first_call_after_a_restore_is_solo_and_resumes_exactly(quick_opens):
    ds = files_like()
    want = sequential()
    assert [int(x) for x in ds] == want
    for k in (0, 1, 257, 1000):
        it = iter(ds)
        head = [int(x) for x in (it.next_many(k) if k else [])]
        while len(head) < k:
            head += [int(x) for x in it.next_many(k - len(head))]
        state = it.get_state()
        it.close()
        restored = iter(ds)
        restored.set_state(state)
        more = [int(x) for x in restored.next_many(256)]
        assert not interleave_of(restored)._threads
        rest = [int(x) for b in iter(lambda: restored.next_many(256), []) for x in b]
        restored.close()
        assert head + more + rest == want, k


def test_solo_call_with_block_length_matches_the_slot_model(quick_opens):
    rng = np.random.default_rng(3)
    for _ in range(8):
        sizes = rng.integers(0, 40, size=int(rng.integers(1, 9))).tolist()
        cycle, block = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        base = Dataset.from_tensor_slices(np.array(sizes, dtype=np.int64)).enumerate()

        def inner(i, n):
            return Dataset.range(n).map(lambda v: i * 100 + v)

        seq = [int(x) for x in base.interleave(inner, cycle_length=cycle, block_length=block)]
        par = base.interleave(inner, cycle_length=cycle, block_length=block, num_parallel_calls=cycle)
        assert [int(x) for x in par] == seq
        for first in (1, 7, 1000):
            it = iter(par)
            got = [int(x) for x in it.next_many(first)]
            got += [int(x) for b in iter(lambda: it.next_many(5), []) for x in b]
            it.close()
            assert got == seq, (sizes, cycle, block, first)


def test_a_batch_takes_stacked_rows_in_a_solo_start_as_after_it(quick_opens):
    # a batch over interleaved generators takes woven columns (next_rows); a solo start weaves them too
    from jaxfeed.pipeline import TensorSpec

    def rows(f):
        for r in range(300):
            yield {"id": np.int64(int(f) * 1000 + r), "x": np.float32(r)}

    signature = {"id": TensorSpec((), np.int64), "x": TensorSpec((), np.float32)}

    def make(npc):
        options = Options()
        options.execution.executor = "thread"  # reader threads (else the generators may run in worker processes)
        return Dataset.range(8).interleave(
            lambda f: Dataset.from_generator(rows, args=(f,), output_signature=signature),
            cycle_length=4, num_parallel_calls=npc).batch(64).with_options(options)

    want = [b["id"].tolist() for b in make(None)]
    ds = make(AUTOTUNE)
    assert [b["id"].tolist() for b in ds] == want
    it = iter(ds)
    stage = it._it.input
    first = [next(it)["id"].tolist() for _ in range(4)]
    assert not stage._threads and stage._stacked
    got = first + [b["id"].tolist() for b in it]
    assert stage._threads
    assert got == want
    it.close()
