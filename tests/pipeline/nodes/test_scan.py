"""scan (docs/tf-behaviour.md#iteration and the error-propagation contract)."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, TensorSpec
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from node_test_helpers import ints


# ------------------------------------------------------------------------------------------------ scan
def test_scan_carries_state_and_emits_outputs():
    ds = Dataset.range(5).scan(np.int64(0), lambda state, x: (state + x, state * 10))
    assert ints(ds) == [0, 0, 10, 30, 60]
    assert ds.element_spec == TensorSpec((), np.int64) and ds.cardinality() == 5


def test_scan_passes_a_tuple_element_whole():
    ds = Dataset.range(3).enumerate().scan(np.int64(0), lambda state, pair: (state + pair[1], state))
    assert ints(ds) == [0, 0, 1]


def test_scan_state_may_be_a_structure():
    ds = Dataset.range(4).scan((np.int64(0), np.int64(1)), lambda s, x: ((s[0] + x, s[1] * 2), s[0] + s[1]))
    assert ints(ds) == [1, 2, 5, 11]


def test_scan_state_dtype_must_not_change():
    # 0 is int32 [0.2]; adding int64 elements changes the state's dtype, as in tf.data this is an error
    with pytest.raises(TypeError, match="new state must keep"):
        list(Dataset.range(3).scan(0, lambda s, x: (s + x, x)))


def test_scan_function_must_take_two_arguments():
    with pytest.raises(TypeError, match="two arguments"):
        Dataset.range(3).scan(0, lambda x: (x, x))


def test_scan_error_keeps_state_and_goes_on():
    def step(s, x):
        if x == 2:
            raise KeyError("two")
        return s + x, s + x

    it = iter(Dataset.range(5).scan(np.int64(0), step).ignore_errors())
    assert ints(it) == [0, 1, 4, 8]


def test_scan_resumes_everywhere():
    assert_resumes_everywhere(lambda: Dataset.range(8).scan(np.int64(1), lambda s, x: (s * 2 % 97 + x, s)))
