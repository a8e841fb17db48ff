"""interleave, sequential and parallel, against tf.data semantics (docs/tf-behaviour.md#interleave)."""

import itertools
import threading
import time

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxfeed.pipeline import AUTOTUNE, Dataset, Options, TensorSpec, errors
from jaxfeed.pipeline.dataset import UNKNOWN_CARDINALITY
from jaxfeed.pipeline.iterators import interleave as interleave_module
from jaxfeed.pipeline.iterators.parallel_interleave import READ_DEPTH
from jaxfeed.pipeline.nodes.interleave import DEFAULT_CYCLE_LENGTH
from jaxfeed.pipeline.testing import assert_resumes_everywhere
from jaxfeed.pipeline.engine.thread_start import wait_handled

from node_test_helpers import values


def repeated(x):
    return Dataset.from_tensors(x).repeat(x)


# ------------------------------------------------------------------------------------------ interleave
ORDERS = {  # [3.4] inputs 1..5, each repeated x times
    (2, 1): [1, 2, 2, 3, 3, 4, 3, 4, 4, 5, 4, 5, 5, 5, 5],
    (2, 2): [1, 2, 2, 3, 3, 3, 4, 4, 5, 5, 4, 4, 5, 5, 5],
    (3, 2): [1, 2, 2, 3, 3, 4, 4, 3, 4, 4, 5, 5, 5, 5, 5],
    (1, 1): [1, 2, 2, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 5],
}


@pytest.mark.parametrize("cycle,block", list(ORDERS))
def test_interleave_follows_the_slot_model(cycle, block):
    ds = Dataset.range(1, 6).interleave(repeated, cycle_length=cycle, block_length=block)
    assert values(ds) == ORDERS[(cycle, block)]


@pytest.mark.parametrize("cycle,block", list(ORDERS))
def test_parallel_interleave_has_the_sequential_order(cycle, block):
    ds = Dataset.range(1, 6).interleave(repeated, cycle_length=cycle, block_length=block,
                                       num_parallel_calls=cycle)
    assert values(ds) == ORDERS[(cycle, block)]


def test_parallel_interleave_order_matches_sequential_on_random_configurations():
    rng = np.random.default_rng(0)
    for _ in range(15):
        sizes = rng.integers(0, 7, size=int(rng.integers(1, 9))).tolist()
        cycle, block = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        base = Dataset.from_tensor_slices(np.array(sizes, dtype=np.int64))

        def inner(n):
            return Dataset.range(n).map(lambda i: n * 100 + i)

        seq = values(base.interleave(inner, cycle_length=cycle, block_length=block))
        par = values(base.interleave(inner, cycle_length=cycle, block_length=block,
                                     num_parallel_calls=int(rng.integers(1, cycle + 1))))
        assert par == seq, (sizes, cycle, block)


def slot_model(sizes, cycle, block):
    """[3.4] written out plainly: input i opens a dataset of sizes[i] elements (i * 1000 + j)."""
    inputs, slots, c, b, done, out = iter(range(len(sizes))), [None] * cycle, 0, 0, False, []
    while not done or any(s is not None for s in slots):
        if slots[c] is None:
            if not done:
                i = next(inputs, None)
                if i is not None:
                    slots[c] = iter([i * 1000 + j for j in range(sizes[i])])
                    continue
                done = True
            c, b = (c + 1) % cycle, 0
            continue
        x = next(slots[c], None)
        if x is None:
            slots[c], c, b = None, (c + 1) % cycle, 0
            continue
        out.append(x)
        b += 1
        if b == block:
            c, b = (c + 1) % cycle, 0
    return out


@settings(max_examples=80, deadline=None, database=None)
@given(sizes=st.lists(st.integers(0, 400), min_size=1, max_size=9), cycle=st.integers(1, 4),
       block=st.integers(1, 4), parallel=st.booleans(), reads=st.lists(st.sampled_from([1, 7, 64, 1000]),
                                                                          min_size=1, max_size=4),
       read_ahead=st.sampled_from([1, 5, interleave_module.READ_AHEAD]))
def test_interleave_in_any_read_sizes_matches_the_slot_model(sizes, cycle, block, parallel, reads, read_ahead):
    # next_many with large n takes the woven path (whole rounds at once; the sequential iterator first reads
    # the slots that hold too little for them), small n the element path; small inner reads make slots run
    # short in the middle of a weave
    kwargs = dict(num_parallel_calls=cycle) if parallel else {}
    ds = Dataset.from_tensor_slices(np.array(sizes, dtype=np.int64)).enumerate().interleave(
        lambda i, n: Dataset.range(n).map(lambda j: i * 1000 + j), cycle_length=cycle, block_length=block, **kwargs)
    saved = interleave_module.READ_AHEAD, interleave_module.FIRST_READ
    interleave_module.READ_AHEAD = interleave_module.FIRST_READ = read_ahead
    try:
        it, out = iter(ds), []
        for k in itertools.cycle(reads):
            got = it.next_many(k)
            if not got:
                break
            out.extend(int(x) for x in got)
        it.close()
    finally:
        interleave_module.READ_AHEAD, interleave_module.FIRST_READ = saved
    assert out == slot_model(sizes, cycle, block)


def test_parallel_interleave_slots_keep_read_depth_reads_buffered():
    # each slot asks for its next read while READ_DEPTH reads are still buffered (so the readers stay ahead
    # of the consumer), and never holds more than one read beyond that (the memory bound the bench counts)
    ds = Dataset.range(4).interleave(lambda i: Dataset.range(10_000).map(lambda j: i * 100_000 + j),
                                     cycle_length=2, num_parallel_calls=2)
    it = iter(ds)
    first = it.next_many(10)
    root = it._it
    read = root._read
    for _ in range(3):
        with root._lock:
            while any(s.busy for s in root._all_slots()):
                root._data_ready.wait(1)
            for slot in root._slots + list(root._futures):
                if slot is not None:
                    assert READ_DEPTH * read <= len(slot.buffer) < (READ_DEPTH + 1) * read
        first += it.next_many(3 * read)
    assert [int(x) for x in first] == values(Dataset.range(4).interleave(
        lambda i: Dataset.range(10_000).map(lambda j: i * 100_000 + j), cycle_length=2).take(len(first)))
    it.close()


def test_nondeterministic_parallel_interleave_keeps_the_multiset():
    ds = Dataset.range(1, 9).interleave(repeated, cycle_length=3, num_parallel_calls=3, deterministic=False)
    assert sorted(values(ds)) == sorted(x for x in range(1, 9) for _ in range(x))


def test_options_deterministic_false_applies_to_parallel_interleave():
    options = Options()
    options.deterministic = False
    ds = Dataset.range(1, 6).interleave(repeated, cycle_length=2, num_parallel_calls=2).with_options(options)
    assert sorted(values(ds)) == sorted(ORDERS[(1, 1)])


def test_interleave_cycle_length_default_is_portable():
    sequential = Dataset.range(1, 6).interleave(repeated)
    assert values(sequential) == values(Dataset.range(1, 6).interleave(repeated, cycle_length=DEFAULT_CYCLE_LENGTH))
    # a fixed num_parallel_calls is the cycle length: never the machine's CPU count
    parallel = Dataset.range(1, 6).interleave(repeated, num_parallel_calls=2)
    assert values(parallel) == ORDERS[(2, 1)]
    autotune = Dataset.range(1, 6).interleave(repeated, num_parallel_calls=AUTOTUNE)
    assert values(autotune) == values(sequential)


@pytest.mark.parametrize("kwargs", [dict(cycle_length=0), dict(block_length=0), dict(cycle_length=-3),
                                    dict(cycle_length=2, num_parallel_calls=3)])
def test_interleave_rejects_invalid_arguments(kwargs):
    with pytest.raises(errors.InvalidArgumentError):
        Dataset.range(3).interleave(repeated, **kwargs)


def test_interleave_accepts_autotune_parallelism_with_fixed_cycle():
    ds = Dataset.range(1, 6).interleave(repeated, cycle_length=2, num_parallel_calls=AUTOTUNE)
    assert values(ds) == ORDERS[(2, 1)]


def test_interleave_deterministic_without_parallelism_warns():
    with pytest.warns(UserWarning, match="no effect unless the `num_parallel_calls`"):
        Dataset.range(3).interleave(repeated, deterministic=True)


def test_interleave_cardinality_and_spec():
    ds = Dataset.range(1, 3).interleave(repeated, cycle_length=2)
    assert ds.cardinality() == UNKNOWN_CARDINALITY
    assert ds.element_spec == TensorSpec((), np.int64)


def test_interleave_requires_a_dataset_result():
    with pytest.raises(TypeError, match="interleave.*must return a Dataset"):
        list(Dataset.range(2).interleave(lambda x: [x], cycle_length=1))


def _fail_on_41(v):
    if v == 41:
        raise ZeroDivisionError("41")
    return v


def _failing_inputs(parallel):
    def inner(x):
        if x == 3:
            raise KeyError("no dataset for 3")
        return Dataset.range(x * 10, x * 10 + 3).map(_fail_on_41)

    kwargs = dict(num_parallel_calls=2) if parallel else {}
    return Dataset.range(1, 6).interleave(inner, cycle_length=2, **kwargs)


def _drain_with_errors(ds):
    out, it = [], iter(ds)
    while True:
        try:
            block = it.next_many(4)
        except Exception as e:  # noqa: BLE001
            out.append(type(e).__name__)
            continue
        if not block:
            return out
        out.extend(int(x) for x in block)


def test_interleave_errors_arrive_in_place_and_iteration_goes_on():
    out = _drain_with_errors(_failing_inputs(parallel=False))
    # a failed map_func counts as a slot that ended at once; an inner error does not count in the block
    assert out == [10, 20, 11, 21, 12, 22, "KeyError", 40, 50, "ZeroDivisionError", 42, 51, 52]


def test_parallel_interleave_errors_arrive_where_the_sequential_ones_do():
    assert _drain_with_errors(_failing_inputs(parallel=True)) == _drain_with_errors(_failing_inputs(parallel=False))


def test_interleave_resumes_with_open_cycles():
    assert_resumes_everywhere(lambda: Dataset.range(1, 6).interleave(repeated, cycle_length=3, block_length=2))


def test_parallel_interleave_resumes_with_read_ahead_in_flight():
    def make():
        return Dataset.range(1, 7).interleave(lambda x: Dataset.range(x).map(lambda v: x * 10 + v),
                                              cycle_length=3, block_length=2, num_parallel_calls=3)

    assert_resumes_everywhere(make)


def test_parallel_interleave_leaves_no_threads_after_close():
    assert wait_handled(30)  # an earlier test's reader may start late: it would count as this test's
    before = {t for t in threading.enumerate() if t.name.startswith("jaxfeed-interleave")}
    it = iter(Dataset.range(1, 50).interleave(repeated, cycle_length=4, num_parallel_calls=4))
    next(it)
    # readers start on the starter thread (engine/thread_start.py): soon, not necessarily by now
    deadline = time.monotonic() + 30
    while not {t for t in threading.enumerate() if t.name.startswith("jaxfeed-interleave")} - before \
            and time.monotonic() < deadline:
        time.sleep(0.001)
    assert {t for t in threading.enumerate() if t.name.startswith("jaxfeed-interleave")} - before
    it.close()
    assert not {t for t in threading.enumerate() if t.name.startswith("jaxfeed-interleave")} - before


def test_parallel_interleave_reads_inner_iterators_concurrently():
    # two inner datasets that only finish when both are being read at once: sequential reading would hang
    barrier = threading.Barrier(2, timeout=20)

    def inner(x):
        return Dataset.from_tensors(x).map(lambda v: (barrier.wait(), v)[1])

    ds = Dataset.range(2).interleave(inner, cycle_length=2, num_parallel_calls=2)
    assert sorted(values(ds)) == [0, 1]


def test_interleave_of_files_follows_the_reader_order():
    # [1.6] num_parallel_reads=2 over files of 3, 1, 2 and 2 records: f0r0,f1r0,f0r1,f0r2,f2r0,f2r1,f3r0,f3r1
    files = Dataset.from_tensor_slices((np.arange(4), np.array([3, 1, 2, 2])))
    ds = files.interleave(lambda i, n: Dataset.range(n).map(lambda r: i * 10 + r), cycle_length=2,
                          num_parallel_calls=2)
    assert values(ds) == [0, 10, 1, 2, 20, 21, 30, 31]


def test_parallel_interleave_of_tfrecord_files_with_ignore_errors_skips_the_damaged_file_tail(tmp_path):
    tfrecord = pytest.importorskip("jaxfeed.formats.tfrecord")
    from jaxfeed.formats.tfrecord_dataset import TFRecordDataset

    for f in range(3):
        data = tfrecord.frame_many([b"f%d-r%d" % (f, r) for r in range(4)])
        if f == 1:  # damage the third record's payload: records 0 and 1 survive
            third = len(tfrecord.frame_many([b"f1-r0", b"f1-r1"]))
            data = data[:third + 12] + b"X" + data[third + 13:]
        (tmp_path / f"part-{f}.tfrecord").write_bytes(data)
    files = Dataset.list_files(str(tmp_path / "*.tfrecord"), shuffle=False)
    it = iter(files.interleave(TFRecordDataset, cycle_length=3, num_parallel_calls=3).ignore_errors())
    out = list(it)
    # what the reader does after the damage is the reader's business; everything else must come through
    assert {b"f0-r%d" % r for r in range(4)} | {b"f1-r0", b"f1-r1"} | {b"f2-r%d" % r for r in range(4)} <= set(out)
    assert b"f1-r2" not in out and out[:4] == [b"f0-r0", b"f1-r0", b"f2-r0", b"f0-r1"]
    (skip,) = it.skipped
    assert skip["error"].startswith("DataLossError") and skip["filename"].endswith("part-1.tfrecord")


def test_parallel_interleave_of_record_files_batches_whole_rounds_while_readers_add_elements(tmp_path):
    # Regression: batch takes woven columns (next_rows) from the cycle; waiting for one slot released the
    # lock, a reader meanwhile handed an earlier slot a read of single elements (which turns its columns
    # back into elements), and the weave then found that slot's columns empty: TypeError in _weave_rows.
    from jaxfeed.formats import TFRecordDataset, TFRecordWriter

    paths = []
    for f in range(8):
        paths.append(str(tmp_path / f"part-{f}.tfrecord"))
        with TFRecordWriter(paths[-1]) as w:
            for r in range(2048):
                w.write(bytes([f]) + r.to_bytes(4, "little") + bytes(1019))
    files = Dataset.from_tensor_slices(paths)
    want = [bytes(x) for b in files.interleave(TFRecordDataset, cycle_length=4).batch(256) for x in b]
    for _ in range(5):
        ds = files.interleave(TFRecordDataset, cycle_length=4, num_parallel_calls=AUTOTUNE).batch(256)
        assert [bytes(x) for b in ds for x in b] == want


def test_parallel_interleave_never_waits_on_the_consumer_for_a_reader_to_start(monkeypatch):
    # Thread.start() waits for the new thread to run (about a millisecond each on a busy machine, on the first
    # batch's path): readers are started by the starter thread (engine/thread_start.py) and the consumer
    # reads the queued slots itself until they run. Any Thread.start on the consumer fails this test.
    from jaxfeed.pipeline.engine.thread_start import join_started, start_soon

    warm = threading.Thread(target=lambda: None, daemon=True)  # the starter itself starts once per process
    start_soon(warm)
    join_started(warm, timeout=30)
    consumer = threading.current_thread()
    real_start = threading.Thread.start

    def start(self):
        assert threading.current_thread() is not consumer, f"the consumer started {self.name}"
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)
    ds = Dataset.range(1, 30).interleave(repeated, cycle_length=4, num_parallel_calls=4)
    want = list(Dataset.range(1, 30).interleave(repeated, cycle_length=4))
    it = iter(ds)
    got = [next(it)] + list(it)
    it.close()
    assert [int(x) for x in got] == [int(x) for x in want]


@pytest.mark.parametrize("npc", [None, AUTOTUNE])
def test_an_error_an_inner_iterator_left_for_its_next_read_survives_a_saved_state(npc, drain):
    # a slot's read returns the inner elements before an error and the inner iterator keeps the error for its
    # next read; a state saved in between used to drop it (the slot's state holds its buffer and the inner
    # iterator's state, which does not hold that error): the restored run went on past the failing element
    def bad_at_3(x):
        if x == 3:
            raise ValueError("bad 3")
        return x

    ds = Dataset.range(2).interleave(lambda x: Dataset.range(6).map(bad_at_3).batch(1), cycle_length=1,
                                     num_parallel_calls=npc)
    expected = drain(iter(ds))
    assert expected.count("bad 3") == 2
    for k in range(1, 6):
        it = iter(ds)
        head = drain(it, limit=k)
        rest = iter(ds)
        rest.set_state(it.get_state())
        assert head + drain(rest) == expected, k
