"""A map function's results are taken as they are made (``engine/blocks.py``, ``pipeline/_values_c.c``):
a function that returns a buffer it reuses gives the values it returned, as tf.data (which makes a tensor of
each result at once) gives them -- not the buffer's last contents in every row. The C way copies only what
something else may change (a fresh result, memory of the input element, an input dict changed in place are
kept); the Python way (no extension) copies every array that is not the input's, and gives the same values."""

import sys

import numpy as np
import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset
from jaxfeed.pipeline.engine import blocks

C_WAY = (blocks.call_taken, blocks.taken)
PY_WAY = (blocks._call_taken_py, blocks._taken_py)
has_c = C_WAY != PY_WAY


@pytest.fixture(params=["c", "python"])
def way(request, monkeypatch):
    if request.param == "c" and not has_c:
        pytest.skip("the C extension is not built")
    call, take = C_WAY if request.param == "c" else PY_WAY
    monkeypatch.setattr(blocks, "call_taken", call)
    monkeypatch.setattr(blocks, "taken", take)
    return request.param


class Reusing:
    """A map function writing every result into one buffer it keeps (a "fast" numpy idiom)."""

    def __init__(self):
        self.out = np.empty(3, np.float64)

    def __call__(self, x):
        self.out[:] = x
        return self.out


@pytest.mark.parametrize("npc", [None, 2, AUTOTUNE])
def test_a_function_reusing_its_output_buffer_batches_what_it_returned(way, npc):
    expected = [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    got = [b[:, 0].tolist() for b in Dataset.range(6).map(Reusing(), num_parallel_calls=npc).batch(3)]
    assert got == expected  # (was [[2, 2, 2], [5, 5, 5]]: every row the buffer's last contents)
    ahead = Dataset.range(6).map(Reusing(), num_parallel_calls=npc).prefetch(2).batch(3)
    assert [b[:, 0].tolist() for b in ahead] == expected
    held = list(Dataset.range(6).map(Reusing(), num_parallel_calls=npc))
    assert [float(x[0]) for x in held] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]


def test_in_worker_processes_too(way):
    ds = Dataset.range(40).map(Reusing(), num_parallel_calls=2, executor="process").batch(8)
    assert np.concatenate([b[:, 0] for b in ds]).tolist() == [float(i) for i in range(40)]


def test_a_scan_updating_its_state_in_place_gives_each_step(way):
    def running_sum(state, x):
        state += x  # the state array, changed in place and returned as the output
        return state, state

    got = [float(v[0]) for v in Dataset.range(5).scan(np.zeros(1), running_sum)]
    assert got == [0.0, 1.0, 3.0, 6.0, 10.0]


def test_a_vectorized_map_reusing_its_batch_buffer_leaves_delivered_batches_alone(way):
    out = np.empty(4, np.int64)

    def plus_one(x):
        np.add(x, 1, out=out[:len(x)])
        return out[:len(x)]

    batches = list(Dataset.range(8).map(plus_one, vectorized=True).batch(4))
    assert [b.tolist() for b in batches] == [[1, 2, 3, 4], [5, 6, 7, 8]]


def test_dict_results_with_a_reused_array_and_pass_through_features(way):
    buf = np.empty(2)

    def f(features):
        buf[:] = features["x"] * 10
        return {"scaled": buf, "x": features["x"], "label": features["label"]}

    ds = Dataset.from_tensor_slices({"x": np.arange(8.0).reshape(4, 2), "label": np.arange(4)}).map(f).batch(4)
    (batch,) = list(ds)
    assert batch["scaled"].tolist() == [[0, 10], [20, 30], [40, 50], [60, 70]]
    assert batch["x"].tolist() == [[0, 1], [2, 3], [4, 5], [6, 7]] and batch["label"].tolist() == [0, 1, 2, 3]


# ------------------------------------------------------------------------------ what the C way keeps
c_only = pytest.mark.skipif(not has_c, reason="the C extension is not built")


@c_only
def test_the_c_way_keeps_what_nothing_else_can_change():
    call = C_WAY[0]
    x = np.arange(6.0).reshape(2, 3)[0]  # an input element: a view of the pipeline's gathered block
    assert call(lambda v: v, x) is x
    assert np.shares_memory(call(lambda v: v[::-1], x), x)  # a view of the input
    fresh = call(lambda v: v * 2, x)
    assert fresh.base is None
    flipped = call(lambda v: (v * 2)[::-1], x)  # a view of a fresh array only it holds
    assert flipped.base is not None and flipped.base.base is None
    features = {"a": x, "n": np.int64(3)}

    def in_place(e):
        e["b"] = e["a"] * 3
        return e

    assert call(in_place, features) is features  # an input dict changed in place and returned


@c_only
def test_the_c_way_copies_what_the_function_keeps():
    call = C_WAY[0]
    out = np.zeros(3)
    x = np.ones(3)

    def reusing(v):
        out[:] = v
        return out

    assert not np.shares_memory(call(reusing, x), out)

    def view_of_kept(v):
        out[:] = v
        return {"o": out[1:], "v": v}

    got = call(view_of_kept, x)
    assert not np.shares_memory(got["o"], out) and got["v"] is x
    kept = bytearray(b"abc")
    assert call(lambda v: kept, x) is not kept


@c_only
def test_the_c_way_leaks_no_reference():
    call, take = C_WAY
    x, out = np.arange(4.0), np.zeros(4)
    features = {"a": x}
    before = (sys.getrefcount(x), sys.getrefcount(out), sys.getrefcount(features))
    for _ in range(1000):
        call(lambda v: v * 2, x)
        call(lambda v: out, x)
        take((x[::-1], out, [out]), features)
        call(lambda e: e, features)
    assert (sys.getrefcount(x), sys.getrefcount(out), sys.getrefcount(features)) == before


def test_the_python_way_keeps_input_memory_and_copies_other_arrays():
    take = PY_WAY[1]
    x = np.arange(6.0).reshape(2, 3)[0]
    assert take(x, (x,)) is x and np.shares_memory(take(x[::-1], x), x)
    fresh = x * 2
    assert take(fresh, x) is not fresh and np.array_equal(take(fresh, x), fresh)
    record = b"\x01\x02\x03\x04"
    view = np.frombuffer(record, np.uint8)
    assert take(view, record) is view  # memory of immutable bytes
