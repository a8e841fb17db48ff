"""A generator may change an object it yielded before it yields the next value -- a buffer it reuses
(``d["x"] = i; yield d``, ``buf[:] = frame; yield buf``). tf.data converts each value as it is yielded, so
every element holds the value as it was yielded. jaxfeed reads a generator a block of values at a time:
before the fix every element of a block held the buffer's last state (a batch of ``[3, 3, 3, 3]`` for
``[0, 1, 2, 3]``), and arrays were handed out as the very buffer the generator went on changing. Each value
is now taken as it comes: snapshotted (``generator_convert.snapshot``), or under a batch a flat dict row
taken apart into columns at once (``_values_c.pull_dict_columns``). The C way and the Python way (where the
extension is not built) both run here."""

import collections

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, TensorSpec
from jaxfeed.pipeline.iterators import generator_convert

from node_test_helpers import recording_addresses, same

WAYS = [pytest.param(generator_convert._snapshot_py, id="python")]
if generator_convert._values_c is not None:
    WAYS.insert(0, pytest.param(generator_convert._values_c[1], id="c"))

Pair = collections.namedtuple("Pair", "image label")


@pytest.fixture(params=WAYS)
def way(request, monkeypatch):
    monkeypatch.setattr(generator_convert, "snapshot", request.param)
    if request.param is generator_convert._snapshot_py:  # the whole Python way: no C pass at all
        for name in ("_c_dict_columns", "_c_tuple_columns", "_c_pull_dict_columns"):
            monkeypatch.setattr(generator_convert, name, None)
    return request.param


def reused_dict():
    d = {"id": 0, "text": ""}
    for i in range(10):
        d["id"], d["text"] = i, f"t{i}"
        yield d


def reused_array():
    buf = np.zeros((2, 2), np.int32)
    for i in range(10):
        buf[:] = i
        yield buf


def reused_array_in_fresh_tuples():
    buf = np.zeros(3, np.float32)
    for i in range(10):
        buf[:] = i
        yield buf, i


def reused_array_in_namedtuples():
    buf = np.zeros(3, np.float32)
    for i in range(10):
        buf[:] = i
        yield Pair(buf, i)


def reused_nested_dict():
    inner = {"x": 0}
    for i in range(10):
        inner["x"] = i
        yield {"inner": inner, "id": i}


def reused_list():
    row = [0, 0]
    for i in range(10):
        row[0] = row[1] = i
        yield row


CASES = [
    (reused_dict, {"id": TensorSpec((), np.int64), "text": TensorSpec((), object)},
     lambda i: {"id": np.int64(i), "text": f"t{i}".encode()}),
    (reused_array, TensorSpec((2, 2), np.int32), lambda i: np.full((2, 2), i, np.int32)),
    (reused_array_in_fresh_tuples, (TensorSpec((3,), np.float32), TensorSpec((), np.int64)),
     lambda i: (np.full(3, i, np.float32), np.int64(i))),
    (reused_array_in_namedtuples, Pair(TensorSpec((3,), np.float32), TensorSpec((), np.int64)),
     lambda i: Pair(np.full(3, i, np.float32), np.int64(i))),
    (reused_nested_dict, {"inner": {"x": TensorSpec((), np.int64)}, "id": TensorSpec((), np.int64)},
     lambda i: {"inner": {"x": np.int64(i)}, "id": np.int64(i)}),
    (reused_list, TensorSpec((2,), np.int64), lambda i: np.full(2, i, np.int64)),
]


@pytest.mark.parametrize("gen,spec,expected", CASES, ids=[c[0].__name__ for c in CASES])
def test_every_element_holds_the_value_as_it_was_yielded(way, gen, spec, expected):
    ds = Dataset.from_generator(gen, output_signature=spec)
    elements = list(ds)  # (all held at once: none may change when the generator goes on)
    assert len(elements) == 10
    for i, e in enumerate(elements):
        assert same(e, expected(i)), (i, e)


@pytest.mark.parametrize("gen,spec,expected", CASES, ids=[c[0].__name__ for c in CASES])
def test_every_batch_holds_the_values_as_they_were_yielded(way, gen, spec, expected):
    from jaxfeed.pipeline.iterators.batch import stack_fast

    got = list(Dataset.from_generator(gen, output_signature=spec).batch(4))
    want = [stack_fast([expected(i) for i in range(s, min(s + 4, 10))], "batch") for s in (0, 4, 8)]
    assert len(got) == 3 and all(same(g, w) for g, w in zip(got, want))


@pytest.mark.parametrize("how", ["interleave", "flat_map"])
def test_interleaved_and_flat_mapped_generators_reusing_a_dict(way, how):
    def gen(k):
        d = {"id": 0}
        for i in range(50):
            d["id"] = int(k) * 100 + i
            yield d

    spec = {"id": TensorSpec((), np.int64)}
    inner = lambda k: Dataset.from_generator(gen, args=(k,), output_signature=spec)  # noqa: E731
    files = Dataset.range(3)
    ds = files.interleave(inner, cycle_length=3) if how == "interleave" else files.flat_map(inner)
    ids = np.concatenate([b["id"] for b in ds.batch(16)]).tolist()
    assert sorted(ids) == sorted(k * 100 + i for k in range(3) for i in range(50))


def test_fresh_values_are_not_copied():
    # a value only the generator's yield held (a new dict around a new array) is kept: no copy per element
    made, fresh = recording_addresses()

    def gen():
        for i in range(20):
            yield {"a": fresh(np.full(1000, i, np.float64))}

    got = list(Dataset.from_generator(gen, output_signature={"a": TensorSpec((1000,), np.float64)}))
    if generator_convert.snapshot is generator_convert._snapshot_py:
        pytest.skip("the Python way copies every array")
    assert [e["a"].ctypes.data for e in got] == made
