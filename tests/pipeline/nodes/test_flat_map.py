"""flat_map (docs/tf-behaviour.md#flat-map)."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, TensorSpec
from jaxfeed.pipeline.dataset import UNKNOWN_CARDINALITY
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from node_test_helpers import values


# -------------------------------------------------------------------------------------------- flat_map
def test_flat_map_concatenates_inner_datasets_in_order():
    ds = Dataset.range(4).flat_map(lambda x: Dataset.range(x))
    assert values(ds) == [0, 0, 1, 0, 1, 2]  # range(0) is empty: fine [3.3]


def test_flat_map_of_slices_unbatches():
    ds = Dataset.from_tensor_slices(np.arange(6).reshape(3, 2)).flat_map(Dataset.from_tensor_slices)
    assert values(ds) == [0, 1, 2, 3, 4, 5]
    assert ds.element_spec == TensorSpec((), np.int64)


def test_flat_map_requires_a_dataset_result():
    with pytest.raises(TypeError, match="flat_map.*must return a Dataset"):
        list(Dataset.range(2).flat_map(lambda x: x))


def test_flat_map_cardinality_is_unknown():
    assert Dataset.range(2).flat_map(lambda x: Dataset.range(x)).cardinality() == UNKNOWN_CARDINALITY


def test_flat_map_resumes_inside_an_inner_dataset():
    assert_resumes_everywhere(lambda: Dataset.range(5).flat_map(lambda x: Dataset.range(x).map(lambda y: y * 10)))
