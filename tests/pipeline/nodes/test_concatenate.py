"""concatenate (docs/tf-behaviour.md#concatenate)."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, TensorSpec
from jaxfeed.pipeline.dataset import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from node_test_helpers import ints, streaming


# ----------------------------------------------------------------------------------------- concatenate
@pytest.mark.parametrize("wrap", [lambda d: d, streaming])
def test_concatenate_emits_self_then_other(wrap):
    assert ints(wrap(Dataset.range(3)).concatenate(Dataset.range(10, 12))) == [0, 1, 2, 10, 11]


def test_concatenate_requires_matching_dtypes():
    # [0.2] Python ints are int32, range is int64: incompatible [3.10]
    with pytest.raises(TypeError, match="Incompatible dataset elements"):
        Dataset.from_tensor_slices([1, 2]).concatenate(Dataset.range(2))


def test_concatenate_requires_matching_structures():
    with pytest.raises(TypeError, match="Incompatible dataset elements"):
        Dataset.zip(Dataset.range(2), Dataset.range(2)).concatenate(Dataset.range(2))


def test_concatenate_relaxes_shapes():
    ds = Dataset.from_tensor_slices(np.zeros((2, 2))).concatenate(Dataset.from_tensor_slices(np.ones((1, 3))))
    assert ds.element_spec == TensorSpec((None,), np.float64)
    assert [len(x) for x in ds] == [2, 2, 3]


def test_concatenate_cardinality_is_the_sum():
    assert Dataset.range(3).concatenate(Dataset.range(4)).cardinality() == 7
    assert Dataset.range(3).concatenate(Dataset.range(4).repeat()).cardinality() == INFINITE_CARDINALITY
    assert streaming(Dataset.range(3)).concatenate(Dataset.range(4)).cardinality() == UNKNOWN_CARDINALITY


def test_concatenate_of_random_access_inputs_gathers_across_the_seam():
    ds = Dataset.from_tensor_slices(np.arange(4)).concatenate(Dataset.from_tensor_slices(np.arange(100, 103)))
    assert ds._node.random_access()
    assert ds._node.gather(np.array([5, 0, 4, 3])).tolist() == [101, 0, 100, 3]
    assert [b.tolist() for b in ds.shuffle(7, seed=1).batch(7)][0] != list(range(7))  # one gather, shuffled


def test_concatenate_resumes_everywhere():
    assert_resumes_everywhere(lambda: streaming(Dataset.range(4)).concatenate(streaming(Dataset.range(10, 13))))
