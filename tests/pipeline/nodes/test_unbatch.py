"""tf.data semantics of unbatch (docs/tf-behaviour.md#unbatch)."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, TensorSpec, errors
from jaxfeed.pipeline.dataset import UNKNOWN_CARDINALITY
from jaxfeed.pipeline.testing import assert_elements_equal, assert_resumes_everywhere

from node_test_helpers import values


# --------------------------------------------------------------------------------------------- unbatch
def test_unbatch_yields_rows_of_every_component_in_order():
    ds = Dataset.from_tensor_slices((np.arange(6).reshape(3, 2), np.arange(3) * 10)).batch(2).unbatch()
    assert [(a.tolist(), int(b)) for a, b in ds] == [([0, 1], 0), ([2, 3], 10), ([4, 5], 20)]


def test_unbatch_handles_partial_and_empty_batches():  # 2.3
    ds = Dataset.range(3).map(lambda k: np.arange(k)).unbatch()
    assert values(ds) == [0, 0, 1]


def test_unbatch_of_scalars_is_value_error():
    with pytest.raises(ValueError, match="Cannot unbatch an input with scalar components"):
        Dataset.range(3).unbatch()


def test_unbatch_of_mismatched_leading_dims_is_value_error():
    ds = Dataset.from_tensors((np.zeros(2), np.zeros(3)))
    with pytest.raises(ValueError, match="must match"):
        ds.unbatch()


def test_unbatch_of_mismatched_rows_after_map_fails_at_that_batch():
    ds = Dataset.range(1, 3).map(lambda k: (np.zeros(1), np.zeros(k))).unbatch()
    it = iter(ds)
    assert len(next(it)) == 2
    with pytest.raises(errors.InvalidArgumentError, match="same leading"):
        next(it)


def test_unbatch_cardinality_follows_a_static_batch_dimension_and_spec_drops_leading_dim():
    ds = Dataset.range(8).batch(4, drop_remainder=True).unbatch()
    assert ds.cardinality() == 8  # tf.data 2.21 (tests/conformance goldens): input cardinality x batch size
    assert ds.element_spec == TensorSpec((), np.int64)
    assert Dataset.range(9).batch(4).unbatch().cardinality() == UNKNOWN_CARDINALITY  # last batch shorter
    assert Dataset.range(8).batch(4, drop_remainder=True).repeat().unbatch().cardinality() == -1


def test_unbatch_next_many_returns_views_of_the_input_batch():
    batch = np.arange(12).reshape(4, 3)
    it = iter(Dataset.from_tensors(batch).unbatch())
    rows = it.next_many(10)
    assert len(rows) == 4 and all(r.base is not None for r in rows)
    assert_elements_equal(rows, list(batch))


def test_unbatch_resumes_with_a_partial_input_batch_pending():
    assert_resumes_everywhere(lambda: Dataset.range(1, 5).map(lambda k: (np.arange(k), np.arange(k) * 2)).unbatch())
