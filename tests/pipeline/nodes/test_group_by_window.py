"""tf.data semantics of group_by_window and bucket_by_sequence_length (built on it)."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, TensorSpec, errors
from jaxfeed.pipeline.dataset import UNKNOWN_CARDINALITY
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from node_test_helpers import values


# ------------------------------------------------------------------------------------- group_by_window
def test_group_by_window_groups_by_key():  # tf.data's docstring example
    ds = Dataset.range(10).group_by_window(lambda x: x % 2, lambda key, w: w.batch(5), window_size=5)
    assert values(ds) == [[0, 2, 4, 6, 8], [1, 3, 5, 7, 9]]


def test_group_by_window_flushes_partial_windows_in_key_order_at_the_end():
    # tf.data's own test: "the small outputs at the end are deterministically produced in key order"
    data = np.array([1, 1, 1, 1, 0, 0, 0, 0, 0, 1, 1, 1], dtype=np.int64) + 4
    ds = Dataset.from_tensor_slices(data).group_by_window(lambda x: x % 2, lambda _, xs: xs.batch(4), 4)
    assert values(ds) == [[5, 5, 5, 5], [4, 4, 4, 4], [4], [5, 5, 5]]


def test_group_by_window_size_func_per_key_and_reduce_sees_the_key():
    ds = Dataset.range(12).group_by_window(
        lambda x: x % 3, lambda key, w: w.batch(10).map(lambda b: (key, b)), window_size_func=lambda k: k + 1)
    got = [(int(k), b.tolist()) for k, b in ds]
    assert got[:3] == [(0, [0]), (0, [3]), (1, [1, 4])]
    assert sorted(x for _, b in got for x in b) == list(range(12))


def test_group_by_window_needs_exactly_one_window_size():
    with pytest.raises(ValueError, match="Either"):
        Dataset.range(3).group_by_window(lambda x: x, lambda k, w: w)
    with pytest.raises(ValueError, match="Either"):
        Dataset.range(3).group_by_window(lambda x: x, lambda k, w: w, 2, lambda k: 2)
    with pytest.raises(errors.InvalidArgumentError, match="greater than zero"):
        Dataset.range(3).group_by_window(lambda x: x, lambda k, w: w, 0)


def test_group_by_window_non_integer_key_is_invalid_at_that_element():
    ds = Dataset.range(3).group_by_window(lambda x: np.float32(x), lambda k, w: w, 2)
    with pytest.raises(errors.InvalidArgumentError, match="integer"):
        list(ds)


def test_group_by_window_reduce_must_return_a_dataset():
    ds = Dataset.range(3).group_by_window(lambda x: x, lambda k, w: 5, 2)
    with pytest.raises(TypeError, match="must return a Dataset"):
        list(ds)


def test_group_by_window_key_func_error_keeps_type_and_continues():
    def key(x):
        if x == 2:
            raise KeyError("bad element")
        return x % 2

    # the failure surfaces where element 2 is grouped, before any window that needs later elements
    it = iter(Dataset.range(6).group_by_window(key, lambda k, w: w.batch(2), 2))
    with pytest.raises(KeyError) as info:
        next(it)
    assert any("GroupByWindow" in n and "element 2" in n for n in info.value.__notes__)
    assert [b.tolist() for b in it] == [[1, 3], [0, 4], [5]]


def test_group_by_window_element_spec_and_cardinality():
    ds = Dataset.range(10).group_by_window(lambda x: x % 2, lambda k, w: w.batch(5), 5)
    assert ds.element_spec == TensorSpec((None,), np.int64)
    assert ds.cardinality() == UNKNOWN_CARDINALITY


def test_group_by_window_resumes_everywhere_mid_window_and_mid_flush():
    assert_resumes_everywhere(lambda: Dataset.range(13).group_by_window(
        lambda x: x % 3, lambda k, w: w.batch(2), window_size_func=lambda k: 2 * k + 1))


# --------------------------------------------------------------------------------- bucket_by_sequence_length
def lengths_dataset(lengths):
    data = np.asarray(lengths, dtype=np.int64)
    return Dataset.from_tensor_slices(data).map(lambda k: np.arange(k) + 1)


def test_bucket_by_sequence_length_batches_within_buckets_padded_to_batch_max():
    ds = lengths_dataset([1, 5, 2, 6, 4, 7]).bucket_by_sequence_length(len, [3, 6], [2, 2, 2])
    assert [np.asarray(b).shape for b in ds] == [(2, 2), (2, 5), (2, 7)]


def test_bucket_by_sequence_length_pad_to_bucket_boundary():
    ds = lengths_dataset([1, 2, 4]).bucket_by_sequence_length(len, [3, 6], [2, 2, 2], pad_to_bucket_boundary=True)
    assert [np.asarray(b).shape for b in ds] == [(2, 2), (1, 5)]


def test_bucket_by_sequence_length_pad_to_boundary_rejects_too_long_elements():
    ds = lengths_dataset([7]).bucket_by_sequence_length(len, [3, 6], [2, 2, 2], pad_to_bucket_boundary=True)
    with pytest.raises(errors.InvalidArgumentError, match="length < bucket_boundaries"):
        list(ds)


def test_bucket_by_sequence_length_padding_values_and_drop_remainder():
    ds = lengths_dataset([1, 2, 1]).bucket_by_sequence_length(len, [3], [2, 2], padding_values=np.int64(-1),
                                                             drop_remainder=True)
    assert values(ds) == [[[1, -1], [1, 2]]]


def test_bucket_by_sequence_length_no_padding_batches_plainly():
    ds = Dataset.range(6).map(lambda x: np.full(3, x)).bucket_by_sequence_length(
        lambda x: x[0], [3], [2, 3], no_padding=True)
    assert values(ds) == [[[0] * 3, [1] * 3], [[3] * 3, [4] * 3, [5] * 3], [[2] * 3]]


def test_bucket_by_sequence_length_checks_sizes_against_boundaries():
    with pytest.raises(ValueError, match="len\\(bucket_batch_sizes\\)"):
        lengths_dataset([1]).bucket_by_sequence_length(len, [3, 6], [2, 2])


def test_bucket_by_sequence_length_resumes_everywhere():
    assert_resumes_everywhere(lambda: lengths_dataset([1, 5, 2, 6, 4, 7, 3, 1]).bucket_by_sequence_length(
        len, [3, 6], [2, 3, 2], pad_to_bucket_boundary=False))
