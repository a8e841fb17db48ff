"""unique (docs/tf-behaviour.md)."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.dataset import UNKNOWN_CARDINALITY
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from node_test_helpers import ints


# ---------------------------------------------------------------------------------------------- unique
def test_unique_keeps_first_occurrences_of_ints_and_strings():
    assert ints(Dataset.from_tensor_slices([1, 3, 1, 2, 3, 5]).unique()) == [1, 3, 2, 5]
    assert list(Dataset.from_tensor_slices(["b", "a", "b"]).unique()) == [b"b", b"a"]
    assert Dataset.range(3).unique().cardinality() == UNKNOWN_CARDINALITY


def test_unique_rejects_non_integer_elements():
    with pytest.raises(TypeError, match="unique"):
        Dataset.from_tensor_slices(np.zeros(3)).unique()


def test_unique_compares_tensors_by_shape_and_contents_as_tf_data():
    rows = np.array([[1, 2], [3, 4], [1, 2], [2, 1]], np.int64)
    assert [r.tolist() for r in Dataset.from_tensor_slices(rows).unique()] == [[1, 2], [3, 4], [2, 1]]
    words = np.array([["a", "b"], ["a", "b"], ["b", "a"]], dtype=object)
    assert [list(r) for r in Dataset.from_tensor_slices(words).unique()] == [[b"a", b"b"], [b"b", b"a"]]
    assert_resumes_everywhere(lambda: Dataset.from_tensor_slices(rows).unique())


def test_unique_resumes_everywhere():
    data = np.array([4, 1, 4, 4, 2, 1, 7, 2, 9], dtype=np.int64)
    assert_resumes_everywhere(lambda: Dataset.from_tensor_slices(data).unique())
    assert_resumes_everywhere(lambda: Dataset.from_tensor_slices(["x", "y", "x", "z"]).unique())
