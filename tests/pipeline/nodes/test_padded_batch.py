"""tf.data semantics of padded_batch (docs/tf-behaviour.md#padded-batch)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxfeed.pipeline import Dataset, TensorSpec, errors
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from node_test_helpers import values


def sequences(n=6, start=1):
    """Elements arange(k) for k in [start, start + n): a vector whose length varies (after a map)."""
    return Dataset.range(start, start + n).map(lambda k: np.arange(k))


def sequence_slices(lengths):
    """Variable-length vectors without a map: the spec, (None,), is known at construction."""
    ds = Dataset.from_tensors(np.arange(lengths[0]))
    for k in lengths[1:]:
        ds = ds.concatenate(Dataset.from_tensors(np.arange(k)))
    return ds


# ---------------------------------------------------------------------------------------- padded_batch
def test_padded_batch_pads_each_batch_to_its_own_maximum():  # 2.2: per batch, not global
    assert values(sequences(4).padded_batch(2)) == [[[0, 0], [0, 1]], [[0, 1, 2, 0], [0, 1, 2, 3]]]


def test_padded_batch_to_fixed_shape_with_padding_value():
    out = values(sequences(3).padded_batch(2, padded_shapes=[5], padding_values=np.int64(-1)))
    assert out == [[[0, -1, -1, -1, -1], [0, 1, -1, -1, -1]], [[0, 1, 2, -1, -1]]]


def test_padded_batch_accepts_python_int_padding_for_int64():  # 2.2 QUIRK: TF raises TypeError; we accept
    out = values(sequences(2).padded_batch(2, padding_values=-1))
    assert out == [[[0, -1], [0, 1]]]


def test_padded_batch_none_and_minus_one_mean_batch_maximum():
    a = values(sequences(5).padded_batch(2, padded_shapes=[None]))
    b = values(sequences(5).padded_batch(2, padded_shapes=[-1]))
    assert a == b == values(sequences(5).padded_batch(2))


def test_padded_batch_default_padding_is_zero_false_and_empty_bytes():  # 2.2
    ds = Dataset.range(1, 3).map(lambda k: (np.ones(k, np.float32), np.ones(k, bool), np.array([b"x"] * int(k), dtype=object)))
    floats, bools, strings = next(iter(ds.padded_batch(2)))
    assert floats.tolist() == [[1.0, 0.0], [1.0, 1.0]]
    assert bools.tolist() == [[True, False], [True, True]]
    assert strings.tolist() == [[b"x", b""], [b"x", b"x"]]


def test_padded_batch_dict_structure_with_scalars_and_padding_values():
    ds = Dataset.range(1, 4).map(lambda k: {"ids": np.arange(k), "len": k})
    batch = next(iter(ds.padded_batch(3, padded_shapes={"ids": [4], "len": []},
                                      padding_values={"ids": 9, "len": None})))
    assert list(batch) == ["ids", "len"]
    assert batch["ids"].tolist() == [[0, 9, 9, 9], [0, 1, 9, 9], [0, 1, 2, 9]]
    assert batch["len"].tolist() == [1, 2, 3]


def test_padded_batch_pads_every_dimension_of_matrices():
    ds = Dataset.range(1, 3).map(lambda k: np.ones((k, 3 - k), np.int16)).padded_batch(2)
    assert values(ds) == [[[[1, 1], [0, 0]], [[1, 0], [1, 0]]]]


def test_padded_batch_element_larger_than_fixed_shape_fails_at_that_batch():  # 2.2: earlier batches delivered
    it = iter(sequences(6).padded_batch(2, padded_shapes=[3]))
    assert np.asarray(next(it)).shape == (2, 3)
    with pytest.raises(errors.DataLossError, match="Attempted to pad to a smaller size than the input element"):
        next(it)


def test_padded_batch_rank_mismatch_is_value_error_at_construction():
    with pytest.raises(ValueError, match="not compatible"):
        Dataset.range(3).padded_batch(2, padded_shapes=[2])  # scalars padded as vectors
    with pytest.raises(ValueError, match="not compatible"):
        Dataset.from_tensor_slices(np.zeros((4, 3))).padded_batch(2, padded_shapes=[2])  # 3 > 2, static


def test_padded_batch_non_scalar_padding_is_value_error():
    with pytest.raises(ValueError, match="must be a scalar"):
        sequence_slices([1, 2]).padded_batch(2, padding_values=np.array([0, 0]))


def test_padded_batch_wrong_padding_dtype_is_type_error():
    with pytest.raises(TypeError, match="float32"):
        sequence_slices([1, 2]).padded_batch(2, padding_values=np.float32(0))
    with pytest.raises(TypeError, match="does not fit"):
        Dataset.from_tensor_slices(np.zeros((2, 2), np.int8)).padded_batch(2, padding_values=1000)
    with pytest.raises(TypeError, match="string"):
        sequence_slices([1, 2]).padded_batch(2, padding_values=b"")


def test_padded_batch_unknown_rank_needs_padded_shapes():  # 2.2
    unknown = Dataset.from_tensors(np.zeros(2)).concatenate(Dataset.from_tensors(np.zeros((1, 1))))
    assert unknown.element_spec.shape is None
    with pytest.raises(ValueError, match="unknown rank"):
        unknown.padded_batch(2)
    it = iter(unknown.take(1).padded_batch(2, padded_shapes=[3]))
    assert np.asarray(next(it)).tolist() == [[0.0, 0.0, 0.0]]


def test_padded_batch_element_spec_and_cardinality():
    assert sequence_slices([1, 2]).padded_batch(4).element_spec == TensorSpec((None, None), np.int64)
    assert sequence_slices([1, 2]).padded_batch(4, [7], drop_remainder=True).element_spec == TensorSpec((4, 7), np.int64)
    assert Dataset.range(10).map(lambda x: np.arange(3)).padded_batch(4, drop_remainder=True).cardinality() == 2
    assert Dataset.range(10).padded_batch(4).cardinality() == 3


def test_padded_batch_drop_remainder_drops_the_partial_batch():
    assert len(values(sequences(5).padded_batch(2, drop_remainder=True))) == 2


def test_padded_batch_rejects_bad_batch_size():
    with pytest.raises(errors.InvalidArgumentError, match="Batch size must be greater than zero"):
        Dataset.range(3).padded_batch(0)


def test_padded_batch_over_index_stream_pads_the_gathered_block():
    ds = Dataset.from_tensor_slices(np.arange(6).reshape(3, 2)).padded_batch(2, padded_shapes=[3], padding_values=-1)
    assert values(ds) == [[[0, 1, -1], [2, 3, -1]], [[4, 5, -1]]]


@settings(max_examples=50, deadline=None)
@given(lengths=st.lists(st.integers(0, 6), min_size=1, max_size=12), size=st.integers(1, 5),
       fixed=st.one_of(st.none(), st.just(6)))
def test_padded_batch_equals_padding_each_batch_by_hand(lengths, size, fixed):
    ds = sequence_slices(lengths).padded_batch(size, padded_shapes=None if fixed is None else [fixed],
                                               padding_values=np.int64(-7))
    expected = []
    for i in range(0, len(lengths), size):
        chunk = lengths[i:i + size]
        width = fixed if fixed is not None else max(chunk)
        expected.append([list(range(k)) + [-7] * (width - k) for k in chunk])
    assert values(ds) == expected


def test_padded_batch_resumes_everywhere():
    assert_resumes_everywhere(lambda: sequences(7).padded_batch(3, padded_shapes=[None]))


def test_padded_batch_continues_after_a_failed_batch():
    it = iter(sequences(6).padded_batch(2, padded_shapes=[3]))
    next(it)
    with pytest.raises(errors.DataLossError):
        next(it)
    with pytest.raises(errors.DataLossError):  # elements 5 and 6 are too long as well
        next(it)
    assert list(it) == []


def test_padded_batch_elements_of_different_ranks_are_invalid():
    ds = Dataset.range(2).map(lambda x: np.zeros((1,) * int(x + 1)))
    with pytest.raises(errors.InvalidArgumentError, match="same rank"):
        list(ds.padded_batch(2))
