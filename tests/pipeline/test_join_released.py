"""Stacking a batch of equal arrays by joining their bytes (``iterators/batch.join_arrays``) through the optional
C join of ``pipeline/_values_c.c``, which copies large batches with the GIL released: the same bytes as
``bytearray().join`` for every dtype and shape, the same errors, and the same batches out of a pipeline
either way. ``batch._join = bytearray().join`` is what ``JAXFEED_NO_C_EXT=1`` does at import.

That the copy runs without the GIL is what it is for (P4 as ported, two threads: ~6-8% of its rate in
one-process A/Bs, docs/performance.md); it is not asserted here, as that could only be seen by timing."""

import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.iterators import batch as batch_module

_c = pytest.importorskip("jaxfeed.pipeline._values_c", reason="the C extension is not built")
join_released = _c.join_released

DTYPES = st.sampled_from([np.uint8, np.int16, np.int32, np.int64, np.float16, np.float32, np.float64,
                          np.complex64, np.bool_])


@settings(max_examples=200, deadline=None)
@given(DTYPES.flatmap(lambda dt: st.tuples(hnp.array_shapes(min_dims=0, max_dims=3, max_side=9),
                                           st.integers(0, 12)).flatmap(
    lambda shape_n: st.lists(hnp.arrays(dt, shape_n[0]), min_size=shape_n[1], max_size=shape_n[1]))))
def test_the_bytes_are_those_of_bytearray_join(values):
    assert bytes(join_released(values)) == bytes(bytearray().join(values))


@pytest.mark.parametrize("n", [1, 128])
def test_a_batch_above_the_release_size_is_joined_whole(n):
    values = [np.random.default_rng(i).random((64, 64, 3), dtype=np.float32) for i in range(n)]
    out = join_released(values)
    assert type(out) is bytearray and out == bytearray().join(values)
    assert len(out) == n * 64 * 64 * 3 * 4  # 6 MiB at 128: above the size that releases the GIL


def test_errors_are_those_of_bytearray_join():
    with pytest.raises(TypeError):
        join_released([b"ab", 3])
    with pytest.raises(TypeError):
        join_released(5)
    with pytest.raises((ValueError, BufferError)):  # no plain buffer: join_arrays assigns row by row
        join_released([np.zeros((4, 4))[:, ::2]])
    assert join_released([]) == bytearray()
    assert join_released((b"a", bytearray(b"b"), memoryview(b"c"))) == bytearray(b"abc")


def test_values_are_released_after_the_join():
    """The buffers it exported are given back: the values can be resized again, and none is leaked."""
    grow = bytearray(b"x" * 100_000)
    join_released([grow, grow])
    grow.extend(b"y")  # raises BufferError while a view is still exported
    big = np.ones(200_000, np.uint8)
    before = sys.getrefcount(big)
    for _ in range(100):
        join_released([big, big])
    assert sys.getrefcount(big) == before


def batches(ds):
    return [np.asarray(b) for b in ds]


@pytest.mark.parametrize("npc", [None, 2])
def test_batches_are_the_same_with_either_join(monkeypatch, npc):
    images = np.random.default_rng(0).integers(0, 256, (300, 32, 32, 3), dtype=np.uint8)

    def augment(i, image):
        return image[:, ::-1].astype(np.float32) * np.float32(i % 7)

    def pipeline():
        return Dataset.from_tensor_slices(images).enumerate().map(augment, num_parallel_calls=npc).batch(128)

    with_c = batches(pipeline())
    monkeypatch.setattr(batch_module, "_join", bytearray().join)
    with_python = batches(pipeline())
    assert [b.shape for b in with_c] == [(128, 32, 32, 3), (128, 32, 32, 3), (44, 32, 32, 3)]
    for a, b in zip(with_c, with_python):
        assert a.dtype == b.dtype == np.float32 and a.flags.writeable
        np.testing.assert_array_equal(a, b)
    expected = np.stack([augment(i, x) for i, x in enumerate(images)])
    np.testing.assert_array_equal(np.concatenate(with_c), expected)


def test_no_c_ext_joins_with_bytearray_join():
    env = dict(os.environ, JAXFEED_NO_C_EXT="1")
    code = ("from jaxfeed.pipeline.iterators import batch; import sys; "
            "sys.exit(0 if type(batch._join).__name__ == 'builtin_function_or_method' "
            "and batch._join.__self__ == bytearray() else 1)")
    assert subprocess.run([sys.executable, "-c", code], env=env).returncode == 0


@settings(max_examples=150, deadline=None)
@given(DTYPES.flatmap(lambda dt: st.tuples(hnp.array_shapes(min_dims=1, max_dims=3, max_side=9),
                                           st.integers(1, 12)).flatmap(
    lambda shape_n: st.lists(hnp.arrays(dt, shape_n[0]), min_size=shape_n[1], max_size=shape_n[1]))))
def test_join_into_writes_what_stack_makes_c_and_python_ways(values):
    """``join_into`` (a map worker stacking a block straight into shared memory): the C copy, and the Python
    way for an extension built without it, give ``np.stack``'s array."""
    want = np.stack(values)
    for join in (_c.join_into, batch_module._join_into_python):
        out = np.full(want.shape, 7, want.dtype)
        join(values, out)
        np.testing.assert_array_equal(out, want)
    out = np.empty_like(want)
    batch_module.join_into(values, out)
    np.testing.assert_array_equal(out, want)


def test_join_into_refuses_a_target_of_another_size_or_read_only():
    values = [np.zeros(4, np.int32), np.ones(4, np.int32)]
    with pytest.raises(ValueError, match="the values have 32 bytes, the target 28"):
        _c.join_into(values, np.empty(7, np.int32))
    read_only = np.empty((2, 4), np.int32)
    read_only.flags.writeable = False
    with pytest.raises((BufferError, ValueError)):
        _c.join_into(values, read_only)
    strided = [np.zeros((4, 4))[:, ::2]] * 2  # no plain buffer: ``join_into`` assigns instead
    out = np.empty((2, 4, 2))
    batch_module.join_into(strided, out)
    np.testing.assert_array_equal(out, np.stack(strided))
