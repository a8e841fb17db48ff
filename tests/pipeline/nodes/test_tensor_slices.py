"""from_tensor_slices and from_tensors: what a source makes of Python and numpy data (docs/tf-behaviour.md)."""

import collections

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, TensorSpec

from node_test_helpers import values


# ------------------------------------------------------------------------------------- tensor slices
def test_from_tensor_slices_python_list_is_one_int32_tensor():
    ds = Dataset.from_tensor_slices([[1, 2], [3, 4]])
    assert ds.element_spec == TensorSpec((2,), np.int32)
    assert values(ds) == [[1, 2], [3, 4]]


def test_from_tensor_slices_nested_structures_keep_their_shape():
    Point = collections.namedtuple("Point", "x y")
    ds = Dataset.from_tensor_slices({"b": np.arange(3), "a": (np.ones((3, 2)), Point(np.zeros(3), [1.0, 2, 3]))})
    first = next(iter(ds))
    assert list(first) == ["b", "a"]  # key order as given
    assert isinstance(first["a"][1], Point) and first["a"][1].y.dtype == np.float32


def test_from_tensor_slices_leading_dims_must_agree():
    with pytest.raises(ValueError, match="Dimensions 3 and 2 are not compatible"):
        Dataset.from_tensor_slices((np.arange(3), np.arange(2)))
    with pytest.raises(ValueError):
        Dataset.from_tensor_slices(np.int64(3))
    with pytest.raises(ValueError):
        Dataset.from_tensor_slices(None)


def test_from_tensor_slices_empty_keeps_trailing_shape():
    ds = Dataset.from_tensor_slices(np.zeros((0, 3)))
    assert list(ds) == [] and ds.element_spec == TensorSpec((3,), np.float64)


def test_strings_come_back_as_bytes():
    ds = Dataset.from_tensor_slices(["a", "bc"])
    assert list(ds) == [b"a", b"bc"]
    batch = next(iter(ds.batch(2)))
    assert batch.dtype == object and batch.tolist() == [b"a", b"bc"]


def test_from_tensors_is_one_element():
    ds = Dataset.from_tensors((np.arange(3), "x"))
    (only,) = list(ds)
    assert only[1] == b"x" and ds.cardinality() == 1
