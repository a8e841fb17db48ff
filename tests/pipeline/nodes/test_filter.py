"""filter (docs/tf-behaviour.md#filter)."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.dataset import UNKNOWN_CARDINALITY
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from node_test_helpers import values


# ---------------------------------------------------------------------------------------------- filter
def test_filter_keeps_elements_whose_predicate_is_true():
    assert values(Dataset.range(10).filter(lambda x: x % 3 == 0)) == [0, 3, 6, 9]


def test_filter_spreads_tuples_into_arguments():
    ds = Dataset.zip(Dataset.range(6), Dataset.range(6).map(lambda x: x * x)).filter(lambda i, sq: sq > 10)
    assert values(ds) == [[4, 16], [5, 25]]


@pytest.mark.parametrize("verdict", [lambda x: True, lambda x: np.bool_(True), lambda x: np.array(True)])
def test_filter_accepts_python_numpy_and_0d_bools(verdict):
    assert values(Dataset.range(3).filter(verdict)) == [0, 1, 2]


@pytest.mark.parametrize("bad", [lambda x: x, lambda x: np.array([True, False]), lambda x: "yes"])
def test_filter_predicate_must_return_scalar_bool(bad):
    # [3.2] a numeric or vector result is a ValueError naming filter
    with pytest.raises(ValueError, match="Filter.*scalar bool"):
        list(Dataset.range(3).filter(bad))


def test_filter_cardinality_is_unknown_even_for_infinite_input():
    assert Dataset.range(5).filter(lambda x: True).cardinality() == UNKNOWN_CARDINALITY
    assert Dataset.range(5).repeat().filter(lambda x: True).cardinality() == UNKNOWN_CARDINALITY


def test_filter_error_comes_after_earlier_elements_and_iteration_goes_on():
    def pred(x):
        if x == 2:
            raise KeyError("two")
        return x % 2 == 0

    it = iter(Dataset.range(6).filter(pred))
    assert values(it.next_many(10)) == [0]
    with pytest.raises(KeyError) as info:
        it.next_many(10)
    assert any("Filter" in n and "input element 2" in n for n in info.value.__notes__)
    assert values(it.next_many(10)) == [4]


def test_filter_over_random_access_input_passes_indices_to_batch():
    ds = Dataset.from_tensor_slices(np.arange(20) * 10).filter(lambda x: x % 30 == 0)
    it = iter(ds)
    assert it._it.index_source is not None  # batch downstream gathers once
    assert values(ds.batch(3)) == [[0, 30, 60], [90, 120, 150], [180]]


def test_filter_resumes_everywhere():
    assert_resumes_everywhere(lambda: Dataset.range(12).filter(lambda x: x % 3 != 1))
    assert_resumes_everywhere(lambda: Dataset.range(12).map(lambda x: x + 1).filter(lambda x: x % 3 != 1))
