"""Interleave slots read in worker processes (``engine/remote_inner.py``): an AUTOTUNE interleave of
``from_generator`` sources gives exactly what the sequential interleave gives -- elements, order, errors,
saved states -- and keeps in this process every generator whose move could hide a change."""

import gc
import multiprocessing
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxfeed.pipeline import AUTOTUNE, Dataset, Options, TensorSpec, errors
from jaxfeed.pipeline.checkpoint.format import serialize
from jaxfeed.pipeline.engine import remote_inner
from jaxfeed.pipeline.testing import assert_elements_equal, assert_resumes_everywhere_with_errors, outcomes

ROWS = 300  # per inner dataset: several reads of a batch's 64 rows, one read ahead past a save at most


@pytest.fixture(autouse=True)
def workers_up():
    """The process's workers started (the first iterator of a process opens its slots here while they start)."""
    gc.collect()
    remote_inner.shared_workers(2)
    assert remote_inner.wait_started(60) is not None, remote_inner.start_error()
    yield


# Generators (module functions: they reach nothing that can change, so they may move)
def rows(i):
    for j in range(ROWS):
        yield {"id": int(i) * 1000 + j, "text": "t" * (j % 5) + str(i), "score": np.float32(j) / 3}


ROW_SIG = {"id": TensorSpec((), np.int64), "text": TensorSpec((), object), "score": TensorSpec((), np.float32)}


def pairs(i):
    for j in range(int(i) + 3):
        yield int(i), np.full(2, j, np.float64)


PAIR_SIG = (TensorSpec((), np.int64), TensorSpec((2,), np.float64))


def fails_in_file_2(i):
    for j in range(40):
        if int(i) == 2 and j == 17:
            raise ValueError(f"bad row {j} of file {int(i)}")
        yield int(i) * 100 + j


SEEN = []  # what the next generator appends to: it must stay in this process


def noting(i):
    for j in range(20):
        SEEN.append((int(i), j))
        yield int(i) * 100 + j


def opts(**kw):
    o = Options()
    o.autotune.cpu_budget = 2  # two CPUs whatever the machine: the decision is the workers'
    for k, v in kw.items():
        group, name = k.split("__")
        setattr(getattr(o, group), name, v)
    return o


def ported(gen, sig, files=6, cycle=4, block_length=1, npc=AUTOTUNE, replayable=False, **kw):
    return Dataset.range(files).interleave(
        lambda i: Dataset.from_generator(gen, args=(i,), output_signature=sig, replayable=replayable),
        cycle_length=cycle, block_length=block_length, num_parallel_calls=npc, **kw)


def interleave_stage(it):
    todo = [it._it]
    while todo:
        s = todo.pop()
        s = getattr(s, "inner", s)
        if type(s).__name__ == "ParallelInterleaveIterator":
            return s
        todo += [c for c in s.children() if c is not None]
    raise AssertionError("no parallel interleave")


def remote_slots(it) -> int:
    return sum(type(c).__name__ == "RemoteInner" for c in interleave_stage(it).children())


# ------------------------------------------------------------------------------------------- elements
@pytest.mark.parametrize("gen,sig", [(rows, ROW_SIG), (pairs, PAIR_SIG)])
@pytest.mark.parametrize("cycle,block_length", [(4, 1), (2, 3), (3, 1)])
@pytest.mark.parametrize("batch", [None, 64, 7])
def test_slots_in_workers_give_the_sequential_elements(gen, sig, cycle, block_length, batch):
    def build(npc):
        ds = ported(gen, sig, files=7, cycle=cycle, block_length=block_length, npc=npc)
        return (ds if batch is None else ds.batch(batch)).with_options(opts())

    want = list(build(None))
    ds = build(AUTOTUNE)
    it = iter(ds)
    got = list(it)
    assert interleave_stage(it).executor_decision.executor == "process", interleave_stage(it).executor_decision
    assert_elements_equal(got, want)
    assert_elements_equal(list(ds), want)  # a second epoch, with futures opened ahead from its start


def test_strings_come_back_as_bytes_and_dtypes_unchanged():
    it = iter(ported(rows, ROW_SIG, files=3).batch(50).with_options(opts()))
    first = next(it)
    assert interleave_stage(it).executor_decision.executor == "process", interleave_stage(it).executor_decision
    assert first["id"].dtype == np.int64 and first["score"].dtype == np.float32
    assert first["text"].dtype == object and all(type(t) is bytes for t in first["text"])


def test_nondeterministic_gives_the_same_multiset():
    want = sorted(int(x["id"]) for x in ported(rows, ROW_SIG, npc=None))
    ds = ported(rows, ROW_SIG, deterministic=False).with_options(opts())
    assert sorted(int(x["id"]) for x in ds) == want


# ------------------------------------------------------------------------------------------- errors
def _until_error(ds):
    out = []
    it = iter(ds)
    while True:
        try:
            out.append(next(it))
        except StopIteration:
            return out, None
        except Exception as e:  # noqa: BLE001
            return out, e


@pytest.mark.parametrize("batch", [None, 8])
def test_a_generator_error_comes_in_its_place_with_its_type_and_text(batch):
    def build(npc):
        ds = ported(fails_in_file_2, TensorSpec((), np.int64), files=5, npc=npc)
        return (ds if batch is None else ds.batch(batch)).with_options(opts())

    want, want_error = _until_error(build(None))
    got, error = _until_error(build(AUTOTUNE))
    assert want_error is not None and type(error) is type(want_error)
    assert "bad row 17 of file 2" in str(error) and str(want_error).splitlines()[0] == str(error).splitlines()[0]
    assert_elements_equal(got, want)


def test_ignore_errors_skips_what_the_sequential_interleave_skips():
    def build(npc):
        return ported(fails_in_file_2, TensorSpec((), np.int64), files=5, npc=npc).ignore_errors().with_options(opts())

    assert_elements_equal(list(build(AUTOTUNE)), list(build(None)))


# ------------------------------------------------------------------------------------------- state
@pytest.mark.parametrize("batch", [None, 64])
@pytest.mark.parametrize("into", ["process", "thread"])
def test_a_state_saved_with_reads_ahead_restores_exactly(batch, into):
    """Saved while the workers hold reads asked and made ahead past what the slots took: a slot is saved as of
    its oldest read not taken (its buffer and a state, as a slot read here is), so a restore -- into workers
    or into this process -- reads the rest again and gives exactly the elements that were to come."""
    def build(npc=AUTOTUNE):
        ds = ported(rows, ROW_SIG, files=6, replayable=True, npc=npc)
        return (ds if batch is None else ds.batch(batch)).with_options(opts())

    want = list(build(None))
    ds = build()
    list(ds)  # an epoch first: the next iterator opens its future slots ahead in the workers
    for k in (1, 5, len(want) // 2, len(want) - 2):
        it = iter(ds)
        head = [next(it) for _ in range(k)]
        assert remote_slots(it) > 0
        state = it.get_state()
        tail = list(it)  # the saved iterator goes on unchanged
        assert_elements_equal(head + tail, want)
        if into == "thread":  # no workers: the restored slots open here while new ones start
            remote_inner.close_workers()
        restored = iter(ds)
        restored.set_state(state)
        assert_elements_equal(head + list(restored), want)
        remote_inner.wait_started(60)


def long_file(i):
    yield from range(int(i) * 100000, int(i) * 100000 + 50000)


def test_a_saved_slot_holds_no_more_than_a_slot_read_here():
    """The reads the workers made ahead (up to 16 a slot) are not in the state: its size is the thread way's."""
    def state_size(executor):
        o = opts(execution__executor=executor) if executor else opts()
        ds = ported(long_file, TensorSpec((), np.int64), files=4, replayable=True).batch(64).with_options(o)
        list(ds)
        it = iter(ds)
        for _ in range(3):
            next(it)
        if executor is None:
            assert remote_slots(it) > 0
            time.sleep(0.2)  # the workers read ahead meanwhile
        return len(serialize(it.get_state()))

    threads, workers = state_size("thread"), state_size(None)
    assert workers <= 2 * threads, (workers, threads)


BIG = 64 * 1024  # float32s: 256 KiB elements


def big_arrays(i, notes):
    """200 elements of 256 KiB, writing how many it has made to a file of ``notes`` (the worker's progress)."""
    path = os.path.join(notes.decode() if isinstance(notes, bytes) else str(notes), f"file{int(i)}")
    for j in range(200):
        with open(path, "w") as f:
            f.write(str(j + 1))
        yield np.full(BIG, j, np.float32)


def _made(notes, files) -> list:
    return [int((notes / f"file{i}").read_text() or 0) if (notes / f"file{i}").exists() else 0 for i in range(files)]


def _settled(notes, files, quiet=1.0, limit=30.0) -> list:
    """What the generators have made once it stops growing (the workers read ahead while nothing is asked).
    A slow machine can only stop it early, which makes the bound below easier to keep, never harder."""
    last, since, t0 = None, time.monotonic(), time.monotonic()
    while time.monotonic() - t0 < limit:
        now = _made(notes, files)
        if now != last:
            last, since = now, time.monotonic()
        elif time.monotonic() - since >= quiet:
            break
        time.sleep(0.05)
    return last


def test_what_workers_read_ahead_of_large_elements_stays_within_their_byte_budget(tmp_path):
    """A bug: the workers' read-ahead was bounded by reads only (16 a slot), at the size of the first reads
    (asked before the consumer knows how large elements are): a generator of large elements was read to its
    end one batch into an epoch (here 200 x 256 KiB a slot). Now what a worker holds read ahead stays under
    ``AHEAD_BYTES`` (plus the read that crosses it), and it still reads ahead after its slots closed."""
    from jaxfeed.pipeline.engine import inner_worker
    from jaxfeed.pipeline.iterators import interleave

    files, cycle, workers = 4, 4, 2
    ds = Dataset.range(files).interleave(
        lambda i: Dataset.from_generator(big_arrays, args=(i, str(tmp_path)),
                                         output_signature=TensorSpec((BIG,), np.float32)),
        cycle_length=cycle, num_parallel_calls=AUTOTUNE).batch(2).with_options(opts())
    list(ds)  # an epoch: the next iterators open every slot in the workers at once
    element = BIG * 4
    first = interleave.FIRST_READ
    asked = files * remote_inner.DEPTH * first  # the consumer's own asks: two reads ahead, at the first size
    budget = workers * (inner_worker.AHEAD_BYTES // element + first)  # ...and each worker's, one read over
    for epoch in range(3):
        it = iter(ds)
        next(it)
        assert remote_slots(it) == cycle
        made = _settled(tmp_path, files)
        assert sum(made) <= asked + budget, (made, asked, budget)
        assert sum(made) > asked, made  # the workers do read ahead (what they held was let go at each close)
        it.close()


def test_a_generator_that_cannot_be_saved_refuses_as_on_threads():
    from jaxfeed.pipeline.errors import FailedPreconditionError

    ds = ported(rows, ROW_SIG, files=4).batch(32).with_options(opts())  # not replayable
    list(ds)
    it = iter(ds)
    next(it)
    assert remote_slots(it) > 0
    with pytest.raises(FailedPreconditionError, match="replayable=True"):
        it.get_state()


def sized(i, size, bad_at):
    """``size`` values of file ``i``; a ValueError in place of value ``bad_at`` (-1: none)."""
    for j in range(int(size)):
        if j == int(bad_at):
            raise ValueError(f"bad value {j} of file {int(i)}")
        yield int(i) * 1000 + j


_INTERLEAVES = dict(sizes=st.lists(st.integers(0, 40), min_size=1, max_size=7), cycle=st.integers(1, 4),
                   block_length=st.integers(1, 3), batch=st.sampled_from([None, 5]), bad=st.integers(-1, 8))


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**_INTERLEAVES)
def test_slots_in_workers_are_the_sequential_interleave_resumed_anywhere(sizes, cycle, block_length, batch, bad):
    """Any files, cycle, block length and error: the outcomes (elements and errors, in order) equal the
    sequential interleave's, and a save after any of them restores exactly (through the checkpoint format)."""
    _remote_slots_resume_anywhere(sizes, cycle, block_length, batch, bad)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(**_INTERLEAVES)
def test_slots_in_workers_are_the_sequential_interleave_resumed_anywhere_soak(sizes, cycle, block_length, batch, bad):
    _remote_slots_resume_anywhere(sizes, cycle, block_length, batch, bad)


def _remote_slots_resume_anywhere(sizes, cycle, block_length, batch, bad):
    bad_file = bad % len(sizes) if bad >= 0 else -1

    def make(npc=AUTOTUNE):
        ds = Dataset.range(len(sizes)).interleave(
            lambda i: Dataset.from_generator(sized, args=(i, np.asarray(sizes)[i], 3 if i == bad_file else -1),
                                             output_signature=TensorSpec((), np.int64), replayable=True),
            cycle_length=cycle, block_length=block_length, num_parallel_calls=npc)
        return (ds if batch is None else ds.batch(batch)).with_options(opts())

    want, _ = outcomes(iter(make(None)), 10_000)
    got = assert_resumes_everywhere_with_errors(make, label="remote slots")
    assert without_worker_notes(got) == want


def without_worker_notes(outs: list) -> list:
    """Outcomes without the note a worker adds to an error it raised (its traceback, which this process lacks):
    the rest -- type, message, the error's own notes -- is the thread way's."""
    return [o if o[0] == "element" else o[:3] + ([n for n in o[3] if not n.startswith("jaxfeed: worker")],)
            for o in outs]


# ------------------------------------------------------------------------------------------- the choice
def test_a_generator_that_changes_this_process_stays_here():
    SEEN.clear()
    ds = ported(noting, TensorSpec((), np.int64), files=4).with_options(opts())
    it = iter(ds)
    got = list(it)
    decision = interleave_stage(it).executor_decision
    assert decision.executor == "thread" and "reads the global 'SEEN'" in decision.reason
    assert len(got) == 80 and sorted(SEEN) == [(i, j) for i in range(4) for j in range(20)]


@pytest.mark.parametrize("options,why", [
    (dict(execution__executor="thread"), "executor='thread'"),
    (dict(autotune__cpu_budget=1), "1 CPU in the budget"),
    (dict(autotune__enabled=False), "AUTOTUNE is off"),
])
def test_options_keep_every_slot_here(options, why):
    ds = ported(rows, ROW_SIG, files=3).with_options(opts(**options))
    it = iter(ds)
    want = list(ported(rows, ROW_SIG, files=3, npc=None))
    assert_elements_equal(list(it), want)
    decision = interleave_stage(it).executor_decision
    assert decision is None or (decision.executor == "thread" and why in decision.reason)
    if options != dict(autotune__enabled=False):
        assert decision is not None


def test_a_fixed_num_parallel_calls_reads_on_threads_as_tf_data_does():
    it = iter(ported(rows, ROW_SIG, files=3, npc=2).with_options(opts()))
    list(it)
    assert interleave_stage(it).executor_decision is None


def test_inner_datasets_that_are_not_generators_stay_here():
    ds = Dataset.range(4).interleave(lambda i: Dataset.range(i * 10, i * 10 + 5), cycle_length=2,
                                     num_parallel_calls=AUTOTUNE).with_options(opts())
    it = iter(ds)
    assert [int(x) for x in it] == [int(x) for x in Dataset.range(4).interleave(
        lambda i: Dataset.range(i * 10, i * 10 + 5), cycle_length=2)]
    decision = interleave_stage(it).executor_decision
    assert decision.executor == "thread" and "not from_generator" in decision.reason


def slow_file(i):
    time.sleep(0.003)  # an open that takes a while: the workers come up within the epoch
    for j in range(40):
        yield int(i) * 100 + j


@pytest.mark.parametrize("batch", [None, 16])
def test_an_epoch_that_starts_before_the_workers_gives_the_same_elements(batch):
    """Slots open here (read by reader threads) until the workers are up, in workers after: one epoch of both."""
    remote_inner.close_workers()

    def build(npc):
        ds = ported(slow_file, TensorSpec((), np.int64), files=60, npc=npc)
        return (ds if batch is None else ds.batch(batch)).with_options(opts())

    want = list(build(None))
    ds = build(AUTOTUNE)
    for _ in range(3):
        assert_elements_equal(list(ds), want)
    remote_inner.wait_started(60)
    assert_elements_equal(list(ds), want)
    assert "process" in ds.explain()


def test_an_interleave_of_other_inner_datasets_starts_no_worker():
    remote_inner.close_workers()
    ds = Dataset.range(6).interleave(lambda i: Dataset.range(i * 10, i * 10 + 5), cycle_length=2,
                                     num_parallel_calls=AUTOTUNE).with_options(opts())
    for _ in range(2):
        assert len(list(ds)) == 30
    assert remote_inner.wait_started() is None


def test_explain_shows_where_the_slots_were_read():
    ds = ported(rows, ROW_SIG, files=3).with_options(opts())
    list(ds)
    assert "Chosen when run:\nexecutor of " in ds.explain()
    assert "process (from_generator inner datasets run Python per element" in ds.explain()


def test_a_generator_the_workers_cannot_import_is_read_here(tmp_path, monkeypatch):
    """The workers started before this module existed on the path: the worker's open fails, the slot is read
    here, and so are the iterator's later slots."""
    (tmp_path / "made_after_the_workers.py").write_text(textwrap.dedent("""
        def gen(i):
            for j in range(30):
                yield int(i) * 100 + j
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import made_after_the_workers as m

    build = lambda npc: Dataset.range(5).interleave(  # noqa: E731
        lambda i: Dataset.from_generator(m.gen, args=(i,), output_signature=TensorSpec((), np.int64)),
        cycle_length=2, num_parallel_calls=npc).with_options(opts())
    it = iter(build(AUTOTUNE))
    assert_elements_equal(list(it), list(build(None)))
    decision = interleave_stage(it).executor_decision
    assert "could not open" in str(decision) and "made_after_the_workers" in str(decision)


# ------------------------------------------------------------------------------------------- failures, exit
def test_a_killed_worker_fails_its_slots_reads_without_hanging_and_new_workers_follow():
    ds = ported(rows, ROW_SIG, files=8).batch(16).with_options(opts())
    list(ds)
    it = iter(ds)
    next(it)
    assert remote_slots(it) > 0
    for p in remote_inner.wait_started().procs:
        os.kill(p.pid, signal.SIGKILL)
    with pytest.raises(errors.WorkerDiedError, match="interleave worker process"):
        for _ in it:
            pass
    it.close()
    remote_inner.shared_workers(2)  # the broken workers are replaced
    assert remote_inner.wait_started(60) is not None
    want = list(ported(rows, ROW_SIG, files=8, npc=None).batch(16))
    assert_elements_equal(list(ds), want)  # (its first slots may open here while the new workers start)
    assert_elements_equal(list(ds), want)


def test_an_interrupt_while_waiting_for_a_read_loses_no_element(monkeypatch):
    """Ctrl-C while the consumer waits for a slot's answer: the read is still owed, and the next call gets it."""
    ds = ported(rows, ROW_SIG, files=6).with_options(opts())
    list(ds)
    want = [int(x["id"]) for x in ported(rows, ROW_SIG, files=6, npc=None)]
    waits = []
    wait = remote_inner.InnerWorkers.wait

    def interrupted_once(self, worker, answer):
        waits.append(1)
        if len(waits) == 3:
            raise KeyboardInterrupt
        wait(self, worker, answer)

    monkeypatch.setattr(remote_inner.InnerWorkers, "wait", interrupted_once)
    it = iter(ds)
    got = []
    while True:
        try:
            got.append(int(next(it)["id"]))
        except KeyboardInterrupt:
            continue
        except StopIteration:
            break
    assert len(waits) >= 3 and got == want


def test_closing_does_not_wait_for_ever_on_a_start_that_never_ends(monkeypatch):
    """At exit, ``close_workers`` waits for a start under way a bounded time (a hung start must not hold the
    interpreter's exit)."""
    import threading

    remote_inner.close_workers()
    release = threading.Event()

    def hung_start(self, n):
        release.wait()
        raise RuntimeError("released")

    monkeypatch.setattr(remote_inner.InnerWorkers, "__init__", hung_start)
    monkeypatch.setattr(remote_inner, "START_WAIT_SECONDS", 0.05)
    assert remote_inner.shared_workers(2) is None  # the start begins, and hangs
    done = threading.Event()
    closer = threading.Thread(target=lambda: (remote_inner.close_workers(), done.set()), daemon=True)
    closer.start()
    returned = done.wait(30)
    release.set()
    remote_inner.wait_started(30)
    monkeypatch.undo()
    remote_inner.close_workers()  # (forgets the failed start: the fixture starts workers again)
    assert returned


def test_a_worker_stuck_in_a_read_for_a_closed_iterator_does_not_hold_up_the_next(tmp_path):
    """A bug: the workers outlive iterators, and a generator that blocked in a read made ahead (a server that
    never answers) held its worker after its iterator was closed (a ``take(n)``): the next epoch's slots
    sent there waited forever. Now the worker is stopped once a request waits behind a read for a closed
    slot; its slots open here, and the next iterator starts new workers."""
    script = tmp_path / "stuck.py"
    script.write_text(textwrap.dedent("""
        import threading
        import numpy as np
        from jaxfeed.pipeline import AUTOTUNE, Dataset, Options, TensorSpec
        from jaxfeed.pipeline.engine import remote_inner

        def blocks_at_50(i):
            for j in range(200):
                if int(i) == 0 and j == 50:
                    threading.Event().wait()  # a read that never returns
                yield int(i) * 1000 + j

        def fine(i):
            for j in range(100):
                yield int(i) * 1000 + j

        o = Options()
        o.autotune.cpu_budget = 2

        def ported(gen, cycle):
            return Dataset.range(4).interleave(
                lambda i: Dataset.from_generator(gen, args=(i,), output_signature=TensorSpec((), np.int64)),
                cycle_length=cycle, num_parallel_calls=AUTOTUNE).with_options(o)

        remote_inner.shared_workers(2)
        remote_inner.wait_started(60)
        want = sorted(int(x) for x in ported(fine, 4))  # (the next iterators open their slots in the workers)
        it = iter(ported(blocks_at_50, 1))
        print("first", [int(next(it)) for _ in range(8)] == list(range(8)), flush=True)
        it.close()  # its worker reads ahead into element 50 of file 0, and stays there
        print("second", sorted(int(x) for x in ported(fine, 4)) == want, flush=True)
        print("third", sorted(int(x) for x in ported(fine, 4)) == want, flush=True)
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert "first True\nsecond True\nthird True" in done.stdout, (done.stdout, done.stderr[-3000:])


def test_a_worker_in_a_long_read_for_a_closed_slot_is_not_stopped_while_it_holds_an_open_one():
    """The stop above is for a worker that holds nothing: stopping one in a long read for a closed slot while
    it also held another iterator's open slot failed that slot's reads with a WorkerDiedError (a bug of the
    first version of the stop, seen under load: every request to any worker failed after it)."""
    ds_long = ported(long_rows, TensorSpec((), np.int64), files=2, cycle=2).with_options(opts())
    want = sorted(int(x) for x in ds_long)  # (the next iterators open their slots in the workers)
    live = iter(ds_long)
    got = [int(next(live)) for _ in range(4)]  # a slot opened in each worker, held there, read ahead
    it = iter(Dataset.range(2).interleave(
        lambda i: Dataset.from_generator(sleeps_at_10, args=(i,), output_signature=TensorSpec((), np.int64)),
        cycle_length=2, num_parallel_calls=AUTOTUNE).with_options(opts()))
    assert [int(next(it)) for _ in range(4)] == [0, 1000, 1, 1001]  # the workers read ahead into the sleeps
    it.close()  # (for no one now)
    got += [int(x) for x in live]  # its reads ahead run out: a request waits behind a sleep, > POLL_SECONDS
    assert sorted(got) == want
    assert not remote_inner._workers.broken


def long_rows(i):
    for j in range(6000):
        yield int(i) * 10000 + j


def sleeps_at_10(i):
    for j in range(40):
        if j == 10:
            time.sleep(3)
        yield int(i) * 1000 + j


def test_a_script_that_leaves_remote_slots_open_exits_cleanly(tmp_path):
    script = tmp_path / "left_open.py"
    script.write_text(textwrap.dedent("""
        import numpy as np
        from jaxfeed.pipeline import AUTOTUNE, Dataset, Options, TensorSpec
        from jaxfeed.pipeline.engine import remote_inner

        def gen(i):
            for j in range(100000):
                yield {"x": int(i) * 1000000 + j, "s": "abc"}

        o = Options()
        o.autotune.cpu_budget = 2
        sig = {"x": TensorSpec((), np.int64), "s": TensorSpec((), object)}
        ds = Dataset.range(8).interleave(lambda i: Dataset.from_generator(gen, args=(i,), output_signature=sig),
                                         cycle_length=4, num_parallel_calls=AUTOTUNE).batch(256).with_options(o)
        remote_inner.shared_workers(2)
        remote_inner.wait_started(60)
        list(ds)  # an epoch: the next iterator's slots all open in the workers
        it = iter(ds)
        for _ in range(10):
            next(it)
        todo, remote = [it._it], 0
        while todo:
            s = todo.pop()
            s = getattr(s, "inner", s)
            remote += type(s).__name__ == "RemoteInner"
            todo += [c for c in s.children() if c is not None]
        assert remote > 0
        print("left open")
    """))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "left open" in done.stdout
    assert "Traceback" not in done.stderr and "Exception ignored" not in done.stderr, done.stderr


# ------------------------------------------------------------------------------------------- Ctrl-C
_CTRL_C_SCRIPT = """
import signal, sys, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # (not the ignore a background job inherits)
import numpy as np
from jaxfeed.pipeline import AUTOTUNE, Dataset, Options, TensorSpec
from jaxfeed.pipeline.engine import remote_inner

def rows(i):
    for j in range(10 ** 6):
        yield {"x": int(i) * 10 ** 6 + j}

def tokens(x):
    return sum(map(ord, str(int(x)) * 20))

o = Options()
o.autotune.cpu_budget = 2
if sys.argv[1] == "interleave":
    sig = {"x": TensorSpec((), np.int64)}
    ds = Dataset.range(8).interleave(lambda i: Dataset.from_generator(rows, args=(i,), output_signature=sig,
                                                                      replayable=True),
                                     cycle_length=4, num_parallel_calls=AUTOTUNE).batch(64).with_options(o)
    remote_inner.shared_workers(2)
    remote_inner.wait_started(60)
    list(ds.take(2))
    for _ in ds.take(1):  # (an iterator whose slots all open in the workers)
        pass
else:
    ds = Dataset.range(10 ** 9).map(tokens, num_parallel_calls=AUTOTUNE, executor="process").batch(64).with_options(o)
it = iter(ds)
next(it)
try:
    print("ready", flush=True)
    while True:
        next(it)
        time.sleep(0.05)  # the training step, where Ctrl-C mostly lands
except KeyboardInterrupt:
    state = it.get_state()  # save on Ctrl-C: the workers must still be there
    for _ in range(3):
        next(it)
    print("saved and went on", flush=True)
if sys.argv[2] == "raise":
    raise KeyboardInterrupt
"""


@pytest.mark.parametrize("workers", ["interleave", "map"])
@pytest.mark.parametrize("after", ["exit", "raise"])
def test_ctrl_c_is_the_consumers_to_handle_not_the_workers(tmp_path, workers, after):
    """Ctrl-C reaches every process of the terminal's group. A bug: the workers died of it, each printing a
    traceback around the user's, and a script that caught it to save a checkpoint found them gone. Now they
    ignore it: the script saves and goes on; left uncaught, the user's traceback is the only one."""
    script = tmp_path / "ctrl_c.py"
    script.write_text(_CTRL_C_SCRIPT)
    proc = subprocess.Popen([sys.executable, str(script), workers, after], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert proc.stdout.readline().strip() == "ready"
        os.killpg(proc.pid, signal.SIGINT)  # as the terminal sends it: to the whole process group
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert "saved and went on" in out, err
    assert "jaxfeed-map" not in err and "jaxfeed-interleave-worker" not in err, err
    if after == "exit":
        assert proc.returncode == 0, err
    else:
        assert err.count("Traceback") == 1 and proc.returncode in (-signal.SIGINT, 1), (proc.returncode, err)


_BLOCKED_SEND_SCRIPT = """
import os, signal, sys, threading, time
signal.signal(signal.SIGINT, signal.default_int_handler)  # (not the ignore a background job inherits)
import numpy as np
from jaxfeed.pipeline import AUTOTUNE, Dataset, Options, TensorSpec
from jaxfeed.pipeline.engine import remote_inner

FLAG = sys.argv[1]

def held(i, pad, flag):
    # file 0 waits for the flag inside its first read: its worker reads no request meanwhile
    for j in range(30):
        if int(i) == 0 and j == 2:
            while not os.path.exists(flag.decode() if isinstance(flag, bytes) else str(flag)):
                time.sleep(0.01)
        yield int(i) * 100 + j

o = Options()
o.autotune.cpu_budget = 2
pad = np.zeros(700_000, np.uint8)  # each slot's open carries it: more than the worker's pipe holds
ds = Dataset.range(8).interleave(
    lambda i: Dataset.from_generator(held, args=(i, pad, FLAG), output_signature=TensorSpec((), np.int64)),
    cycle_length=4, num_parallel_calls=AUTOTUNE).with_options(o)
open(FLAG, "w").close()  # (file 0 runs freely until the flag goes)
want = [int(x) for x in Dataset.range(8).interleave(
    lambda i: Dataset.from_generator(held, args=(i, pad, FLAG), output_signature=TensorSpec((), np.int64)),
    cycle_length=4)]
remote_inner.shared_workers(2)
remote_inner.wait_started(60)
list(ds)
list(ds)  # (workers warm: the next iterator opens every slot there)
os.remove(FLAG)
main = threading.main_thread().ident

def interrupt_when_blocked():
    # Ctrl-C once the consumer is blocked: sending to worker 0 (its pipe full) or waiting for its answer
    while True:
        frame = sys._current_frames().get(main)
        names = set()
        while frame is not None:
            names.add(frame.f_code.co_name)
            frame = frame.f_back
        if "send_bytes" in names or "wait" in names and "value" in names:
            time.sleep(0.2)
            signal.pthread_kill(main, signal.SIGINT)  # (the first waits for the step to end: engine.interrupts)
            time.sleep(0.2)
            signal.pthread_kill(main, signal.SIGINT)  # the second is raised where it lands
            return
        time.sleep(0.01)

threading.Thread(target=interrupt_when_blocked, daemon=True).start()
it = iter(ds)
got, interrupted = [], 0
while True:
    try:
        got.append(int(next(it)))
    except KeyboardInterrupt:
        interrupted += 1
        open(FLAG, "w").close()
    except StopIteration:
        break
print("interrupted", interrupted, "same", got == want, flush=True)
if got != want:
    print(got, want)
"""


def test_an_interrupt_while_a_request_waits_to_be_sent_misplaces_nothing(tmp_path):
    """A bug: the consumer sent requests itself, noting each answer owed first. Ctrl-C while a send was
    blocked (an open's payload, bigger than the pipe holds, to a worker inside a long read) left an answer
    owed for a request never sent, or half of one in the pipe: the worker's next answers went to the wrong
    requests, or it died of the garbled message. Now requests go out on a sender thread of their own."""
    script = tmp_path / "blocked_send.py"
    script.write_text(_BLOCKED_SEND_SCRIPT)
    done = subprocess.run([sys.executable, str(script), str(tmp_path / "flag")], capture_output=True, text=True,
                          timeout=240)
    assert "interrupted 1 same True" in done.stdout, (done.stdout, done.stderr[-3000:])


def leaf_rows(i):
    for j in range(30):
        yield int(i) * 1000 + j


def pipeline_inside(k):
    """A generator that reads a pipeline of its own (its slots would move to workers here)."""
    o = opts()
    o.experimental_statistics = True
    it = iter(ported(leaf_rows, TensorSpec((), np.int64), files=4, cycle=2).with_options(o))
    values = [int(x) for x in it]
    in_worker = multiprocessing.current_process().daemon
    if in_worker and "thread (this process is itself a worker process" not in str(it.stats()):
        raise AssertionError(str(it.stats()))
    for v in values:
        yield v + int(k) * 10 ** 6


def test_an_interleave_inside_a_worker_process_reads_its_slots_there():
    """A worker process cannot start processes: an AUTOTUNE interleave iterated inside one (by a generator
    read in a worker) keeps its slots in that process and says why."""
    want = sorted(int(x) for x in ported(pipeline_inside, TensorSpec((), np.int64), files=3, cycle=2, npc=None))
    ds = ported(pipeline_inside, TensorSpec((), np.int64), files=3, cycle=2).with_options(opts())
    list(ds)
    got = sorted(int(x) for x in ds)  # (the generators' own check raises in their place if it fails)
    assert got == want
    assert "process (" in ds.explain()  # the outer slots did read in workers


def relative_lines(i):
    """Reads a file by a relative path, and an environment variable, as it runs."""
    with open("lines.txt") as f:
        text = f.read().strip()
    for j in range(20):
        yield f"{text}-{os.environ.get('JAXFEED_TEST_PLACE', '')}-{int(i)}-{j}"


def test_slots_in_workers_see_the_working_directory_and_environment_of_their_open(tmp_path, monkeypatch):
    """A bug: the workers are kept between iterators, in the directory and environment they started in; a
    generator that opens a relative path read the old directory's file after the user's os.chdir (a
    notebook's %cd), and saw the old os.environ. Each slot now runs where its consumer was at its open."""
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "lines.txt").write_text(f"file {name}\n")
    monkeypatch.chdir(tmp_path / "a")
    monkeypatch.setenv("JAXFEED_TEST_PLACE", "first")
    ds = ported(relative_lines, TensorSpec((), object), files=4).with_options(opts())
    list(ds)
    assert {x.split(b"-")[0] for x in ds} == {b"file a"}

    monkeypatch.chdir(tmp_path / "b")
    monkeypatch.setenv("JAXFEED_TEST_PLACE", "second")
    want = [bytes(x) for x in ported(relative_lines, TensorSpec((), object), files=4, npc=None)]
    it = iter(ds)
    got = [bytes(x) for x in it]
    assert remote_slots(it) >= 0 and "process (" in ds.explain()
    assert got == want and want[0].startswith(b"file b-second-")


def random_rows(i):
    for _ in range(200):
        yield np.int64(np.random.randint(1 << 40))


def test_generators_in_workers_draw_from_numpy_global_random_state_of_their_own():
    """Two workers forked from one server shared numpy's global random state: generators drawing from it gave
    the same numbers on both (see ``processes.fresh_random_state``)."""
    ds = ported(random_rows, TensorSpec((), np.int64), files=4).with_options(opts())
    list(ds)
    it = iter(ds)
    got = [int(x) for x in it]
    assert remote_slots(it) > 0 or "process (" in ds.explain()
    assert len(set(got)) == len(got) == 800


def test_a_slot_whose_working_directory_is_gone_finds_nothing_there_not_the_workers_last_one(tmp_path, monkeypatch):
    """Run where the worker does it: a slot whose directory was removed since its open runs in an empty one, as
    the consumer, whose working directory it still is, would find nothing by a relative path -- never in the
    directory the worker was in before -- and leaves no directory of its own behind (each run left one in the temp
    directory)."""
    from jaxfeed.pipeline.engine import inner_worker

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "temp"))
    (tmp_path / "temp").mkdir()
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "lines.txt").write_text("the wrong file\n")
    monkeypatch.chdir(tmp_path / "other")
    monkeypatch.setattr(inner_worker, "_here", None)
    environ = dict(os.environ)
    places = {1: (str(tmp_path / "other"), environ), 2: (str(tmp_path / "gone"), environ)}
    inner_worker._enter(places, 1)
    assert os.path.exists("lines.txt")
    inner_worker._enter(places, 2)
    assert not os.path.exists("lines.txt") and os.listdir(".") == []
    with pytest.raises(FileNotFoundError):
        open("written.txt", "w")  # noqa: SIM115 - as in the consumer's removed directory
    inner_worker._enter(places, 1)
    inner_worker._enter(places, 2)
    assert os.listdir(tmp_path / "temp") == []


_RELOAD_SCRIPT = """
import importlib, os, sys
import numpy as np
sys.path.insert(0, os.getcwd())  # (before the workers start: they import the module from here)
from jaxfeed.pipeline import AUTOTUNE, Dataset, Options, TensorSpec
from jaxfeed.pipeline.engine import remote_inner

source = "def rows(i):\\n    for j in range(30):\\n        yield int(i) * 100 + j + {}\\n"
with open("jaxfeed_edited_generator.py", "w") as f:
    f.write(source.format(0))
import jaxfeed_edited_generator as module

o = Options()
o.autotune.cpu_budget = 2
remote_inner.shared_workers(2)
remote_inner.wait_started(60)

def run():
    ds = Dataset.range(4).interleave(
        lambda i: Dataset.from_generator(module.rows, args=(i,), output_signature=TensorSpec((), np.int64)),
        cycle_length=4, num_parallel_calls=AUTOTUNE).with_options(o)
    it = iter(ds)
    got = sorted(int(x) for x in it)
    return got, it._it.executor_decision if hasattr(it._it, "executor_decision") else ds.explain()

list(run())  # (the next iterator opens its slots in the workers)
first, decision = run()
print("first", first == [i * 100 + j for i in range(4) for j in range(30)], "process (" in str(decision) or decision)
with open("jaxfeed_edited_generator.py", "w") as f:
    f.write(source.format(10_000) + "# edited\\n")
importlib.reload(module)
second, decision = run()
print("second", second == [x + 10_000 for x in first], str(decision))
"""


def test_a_generator_whose_module_was_edited_and_reloaded_is_not_run_from_the_old_code(tmp_path):
    """The workers are the process's and imported the generator's module when a slot of it was first sent
    there; a module function is pickled by reference. After ``importlib.reload`` of an edited module (a
    notebook's), the slots read in workers ran the old generator -- the threads, the new one. Such slots open
    here now, and ``explain`` says why."""
    (tmp_path / "reload.py").write_text(_RELOAD_SCRIPT)
    done = subprocess.run([sys.executable, "reload.py"], cwd=tmp_path, capture_output=True, text=True, timeout=180)
    out = done.stdout
    assert "first True True" in out, (out, done.stderr[-3000:])
    assert "second True" in out and "changed since the worker processes imported it" in out, out


def test_a_generator_that_must_stay_here_never_starts_the_workers():
    """Worker processes cost memory and a start: an interleave whose generator cannot move must not start them
    (the opener asks whether the generator may move before it asks for the workers)."""
    remote_inner.close_workers()
    SEEN.clear()
    got = list(ported(noting, TensorSpec((), np.int64), files=4).with_options(opts()))
    assert len(got) == 80 and len(SEEN) == 80
    assert remote_inner._workers is None


def gated(i, gate):
    """File 0 gives nothing until ``gate`` exists (at most a minute); the others at once."""
    if int(i) == 0:
        path = os.fsdecode(gate.item() if hasattr(gate, "item") else gate)
        deadline = time.monotonic() + 60
        while not os.path.exists(path) and time.monotonic() < deadline:
            time.sleep(0.005)
    for j in range(30):
        yield int(i) * 100 + j


@pytest.mark.parametrize("batch", [None, 5])
def test_nondeterministic_takes_the_slots_whose_answers_are_in_while_one_worker_is_held_up(tmp_path, batch):
    """``deterministic=False`` with slots in workers: while file 0's generator is held up (and with it the
    worker it reads in, and that worker's other slots), the consumer takes elements from the slots of the other
    worker instead of waiting for the current slot's answer, as it does with reader threads."""
    gate = tmp_path / "gate"
    ds = Dataset.range(6).interleave(
        lambda i: Dataset.from_generator(gated, args=(i, str(gate)), output_signature=TensorSpec((), np.int64)),
        cycle_length=4, num_parallel_calls=AUTOTUNE, deterministic=False)
    ds = (ds if batch is None else ds.batch(batch)).with_options(opts())
    it = iter(ds)
    first = [int(x) for _ in range(4 if batch else 20) for x in np.atleast_1d(next(it))]
    assert remote_slots(it) > 0
    gate.touch()
    rest = [int(x) for b in it for x in np.atleast_1d(b)]
    assert {x // 100 for x in first} <= {1, 3, 5}, first  # the workers take files i % 2: 0, 2, 4 wait with 0
    assert sorted(first + rest) == [i * 100 + j for i in range(6) for j in range(30)]


def test_nondeterministic_delivers_a_failed_open_once_in_its_place():
    """deterministic=False opens a slot ahead before asking whether its worker answered: a map_func that fails
    for one input puts its error in that slot's place once (not a second open's error after it)."""
    def open_or_fail(i):
        if int(i) == 2:
            raise ValueError("no file 2")
        return Dataset.from_generator(rows, args=(i,), output_signature=ROW_SIG)

    ds = Dataset.range(6).interleave(open_or_fail, cycle_length=4, num_parallel_calls=AUTOTUNE,
                                     deterministic=False).with_options(opts())
    for _ in range(3):  # (the first epoch opens its slots with reader threads about; the next ones in workers)
        it, ids, errors_met = iter(ds), [], []
        while True:
            try:
                ids.append(int(next(it)["id"]))
            except StopIteration:
                break
            except ValueError as e:  # an error in its place: iteration goes on after it
                errors_met.append(str(e))
        assert errors_met == ["no file 2"]
        assert sorted(ids) == sorted(i * 1000 + j for i in (0, 1, 3, 4, 5) for j in range(ROWS))
