"""take_while (docs/tf-behaviour.md)."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.dataset import UNKNOWN_CARDINALITY
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from node_test_helpers import ints


# ------------------------------------------------------------------------------------------ take_while
def test_take_while_stops_at_the_first_false():
    assert ints(Dataset.from_tensor_slices(np.array([1, 2, 5, 1, 0])).take_while(lambda x: x < 3)) == [1, 2]
    assert Dataset.range(3).take_while(lambda x: True).cardinality() == UNKNOWN_CARDINALITY


def test_take_while_predicate_must_return_scalar_bool():
    with pytest.raises(ValueError, match="scalar bool"):
        list(Dataset.range(3).take_while(lambda x: x))


def test_take_while_resumes_everywhere():
    assert_resumes_everywhere(lambda: Dataset.range(10).map(lambda x: x * 3).take_while(lambda x: x < 20))
    assert_resumes_everywhere(lambda: Dataset.range(10).take_while(lambda x: x < 6).batch(4))
