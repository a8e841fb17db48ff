"""batch (docs/tf-behaviour.md#batch)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxfeed.pipeline import Dataset, Options, TensorSpec, errors
from jaxfeed.pipeline.dataset import INFINITE_CARDINALITY

from node_test_helpers import values


def test_batched_records_stay_whole_bytes_objects():
    # records batch into an object array of the very bytes (NULs, empties kept: no fixed-width 'S' dtype)
    records = [b"\x00a\x00", b"", b"x" * 3000, b"\x00"]
    batch = next(iter(Dataset.from_generator(lambda: iter(records), output_signature=TensorSpec((), object))
                      .batch(4)))
    assert batch.dtype == object and batch.shape == (4,) and batch.tolist() == records
    assert all(type(r) is bytes for r in batch) and batch.flags.writeable


# -------------------------------------------------------------------------------------------- batch
def test_batch_keeps_partial_batch_unless_dropped():
    assert values(Dataset.range(7).batch(3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert values(Dataset.range(7).batch(3, drop_remainder=True)) == [[0, 1, 2], [3, 4, 5]]
    assert values(Dataset.range(2).batch(5)) == [[0, 1]]
    assert values(Dataset.range(2).batch(5, drop_remainder=True)) == []
    assert values(Dataset.range(0).batch(5)) == []


def test_batch_spec_and_cardinality():
    ds = Dataset.range(7).batch(3)
    assert ds.element_spec == TensorSpec((None,), np.int64) and ds.cardinality() == 3
    ds = Dataset.range(7).batch(3, drop_remainder=True)
    assert ds.element_spec == TensorSpec((3,), np.int64) and ds.cardinality() == 2
    assert Dataset.range(3).repeat().batch(2).cardinality() == INFINITE_CARDINALITY


def test_batch_size_must_be_positive():
    with pytest.raises(errors.InvalidArgumentError, match="greater than zero"):
        Dataset.range(3).batch(0)
    with pytest.raises(TypeError):
        Dataset.range(3).batch(2.0)


def test_batch_of_ragged_elements_fails_at_that_batch():
    ds = Dataset.range(4).map(lambda x: np.zeros(1 if x < 3 else 2)).batch(2)
    it = iter(ds)
    assert next(it).shape == (2, 1)
    with pytest.raises(errors.InvalidArgumentError, match="Cannot add tensor to the batch"):
        next(it)


def test_batch_nested_structures_and_parallel_batch():
    ds = Dataset.from_tensor_slices({"a": np.arange(6), "b": (np.arange(6.0), np.arange(6) * 2)})
    (first, *_) = list(ds.batch(4, num_parallel_calls=2))
    assert first["a"].tolist() == [0, 1, 2, 3] and first["b"][1].tolist() == [0, 2, 4, 6]


def test_batch_of_elements_with_different_structures_is_an_error_not_truncation():
    def f(x):
        return (x, x) if x < 2 else (x, x, x)

    with pytest.raises(errors.InvalidArgumentError, match="structure"):
        list(Dataset.range(4).map(f).batch(4))


@settings(max_examples=80, deadline=None, database=None)
@given(dtype=st.sampled_from(["int8", "uint16", ">i4", "int64", "float16", "float32", "<f8", "complex64", "bool",
                              "datetime64[s]"]),
       shape=st.lists(st.integers(0, 4), max_size=3), n=st.integers(1, 9),
       layout=st.sampled_from(["C", "F", "strided"]))
def test_batch_stacks_like_arrays_exactly_whatever_their_layout(dtype, shape, n, layout):
    # like arrays are joined byte-wise (bytearray.join); views without a plain buffer go element by element
    rng = np.random.default_rng(0)
    values = []
    for _ in range(n):
        a = rng.integers(0, 100, size=[s * (2 if layout == "strided" else 1) for s in shape]).astype(dtype)
        a = a[tuple(slice(None, None, 2) for _ in shape)] if layout == "strided" else a
        values.append(np.array(a, order="F") if layout == "F" else a)
    want = np.stack(values)
    want = want.astype(want.dtype.newbyteorder("="))  # (byte order is not what this test is about)
    plain = Options()
    plain.experimental_optimization.map_and_batch_fusion = False
    for ds in (Dataset.range(n).map(lambda i: values[int(i)]),  # fused map and batch
               Dataset.range(n).map(lambda i: values[int(i)]).with_options(plain)):  # batch of a map's elements
        got = next(iter(ds.batch(n)))
        assert got.dtype.newbyteorder("=") == want.dtype and got.shape == want.shape and np.array_equal(got, want)
        assert got.flags.writeable and not any(np.shares_memory(got, v) for v in values)


def _fails_at_5(x):
    if int(x[0]) == 10:
        raise ValueError("element 5")
    return x


@pytest.mark.parametrize("dtype", [">i4", ">f8", "<i8"])
def test_every_way_rows_are_joined_keeps_the_byte_order_batch_keeps(dtype):
    """``batch`` keeps a big-endian dtype; rows joined from several batches went through ``np.concatenate``,
    which gives them back in native order -- and ``np.dtype(">i4") != np.dtype("<i4")``: ``rebatch``,
    ``ragged_batch``'s values, and a process map's batches after an error (rows of its workers' blocks)."""
    x = np.arange(40).reshape(20, 2).astype(dtype)
    src = Dataset.from_tensor_slices(x)
    ragged = Dataset.range(6).map(lambda i: x[: int(i) % 3 + 1, 0])
    got = {
        "batch": list(src.batch(3)),
        "rebatch": list(src.batch(3).rebatch(4)),
        "unbatch.batch": list(src.batch(3).unbatch().batch(4)),
        "ragged_batch": [b.values for b in ragged.ragged_batch(3)],
        "process map after an error": list(src.map(_fails_at_5, num_parallel_calls=2, executor="process")
                                           .ignore_errors().batch(4)),
    }
    for how, batches in got.items():
        assert batches and all(b.dtype == np.dtype(dtype) for b in batches), (how, [b.dtype.str for b in batches])
    assert np.array_equal(np.concatenate(got["rebatch"]), x)
