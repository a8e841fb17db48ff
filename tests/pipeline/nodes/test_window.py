"""tf.data semantics of window (docs/tf-behaviour.md#window)."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxfeed.pipeline import Dataset, DatasetSpec, TensorSpec, errors
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from node_test_helpers import values


def windows(ds):
    return [values(w) for w in ds]


def streamed(n):
    """range(n) through a map: an element stream, not an index stream."""
    return Dataset.range(n).map(lambda x: x)


# ---------------------------------------------------------------------------------------------- window
@pytest.mark.parametrize("source", [Dataset.range, streamed], ids=["index-stream", "element-stream"])
def test_window_reference_examples(source):  # 2.5, verified examples
    assert windows(source(10).window(3, shift=2, stride=2)) == [[0, 2, 4], [2, 4, 6], [4, 6, 8], [6, 8], [8]]
    assert windows(source(10).window(2, shift=3)) == [[0, 1], [3, 4], [6, 7], [9]]
    assert windows(source(7).window(3, shift=1))[-2:] == [[5, 6], [6]]


def test_window_shift_defaults_to_size():
    assert windows(Dataset.range(5).window(2)) == [[0, 1], [2, 3], [4]]


def test_window_drop_remainder_keeps_only_full_windows():
    assert windows(Dataset.range(7).window(3, shift=1, drop_remainder=True)) == [
        [0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5], [4, 5, 6]]


@settings(max_examples=80, deadline=None)
@given(n=st.integers(0, 25), size=st.integers(1, 5), shift=st.integers(1, 5), stride=st.integers(1, 3),
       drop=st.booleans())
def test_window_matches_its_definition_and_cardinality(n, size, shift, stride, drop):
    ds = streamed(n).window(size, shift, stride, drop)
    expected = []
    for start in range(0, n, shift):
        w = [start + j * stride for j in range(size) if start + j * stride < n]
        if drop and len(w) < size:
            break
        expected.append(w)
    assert windows(ds) == expected
    assert Dataset.range(n).window(size, shift, stride, drop).cardinality() == len(expected)


@pytest.mark.parametrize("arg", ["size", "shift", "stride"])
def test_window_non_positive_arguments_are_invalid(arg):
    kwargs = {"size": 2, "shift": 1, "stride": 1, arg: 0}
    with pytest.raises(errors.InvalidArgumentError, match=arg):
        Dataset.range(5).window(**kwargs)


def test_window_of_tuples_is_a_tuple_of_datasets():  # 0.1
    ds = Dataset.from_tensor_slices((np.arange(4), np.arange(4) * 10)).window(2)
    assert ds.element_spec == (DatasetSpec(TensorSpec((), np.int64)), DatasetSpec(TensorSpec((), np.int64)))
    first = next(iter(ds))
    assert isinstance(first, tuple) and [values(d) for d in first] == [[0, 1], [0, 10]]


def test_window_of_dicts_is_a_dict_of_datasets():
    ds = streamed(3).map(lambda x: {"b": x, "a": np.full(2, x)}).window(2)
    first = next(iter(ds))
    assert list(first) == ["b", "a"] and values(first["a"]) == [[0, 0], [1, 1]]


def test_window_of_variable_length_elements():
    ds = Dataset.range(1, 4).map(lambda k: np.arange(k)).window(3)
    (only,) = list(ds)
    assert values(only) == [[0], [0, 1], [0, 1, 2]]
    assert values(only.padded_batch(3)) == [[[0, 0, 0], [0, 1, 0], [0, 1, 2]]]


def test_window_flat_map_batch_gives_sliding_tensors():  # 2.5: the usual idiom
    ds = Dataset.range(6).window(3, shift=1, drop_remainder=True).flat_map(lambda w: w.batch(3))
    assert values(ds) == [[0, 1, 2], [1, 2, 3], [2, 3, 4], [3, 4, 5]]


@pytest.mark.parametrize("source", [Dataset.range, streamed], ids=["index-stream", "element-stream"])
def test_window_resumes_everywhere(source):
    assert_resumes_everywhere(lambda: source(11).window(3, shift=4, stride=2))
    assert_resumes_everywhere(lambda: source(8).window(3, shift=1))
