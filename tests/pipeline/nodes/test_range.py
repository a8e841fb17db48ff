"""Dataset.range (docs/tf-behaviour.md)."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, TensorSpec, errors

from node_test_helpers import values


# ---------------------------------------------------------------------------------------------- range
@pytest.mark.parametrize("args", [(5,), (2, 5), (2, 10, 3), (10, 2, -2), (5, 2), (0,)])
def test_range_follows_python_range(args):
    assert values(Dataset.range(*args)) == list(range(*args))
    assert Dataset.range(*args).cardinality() == len(range(*args))


def test_range_is_int64_and_output_type_may_be_float():
    assert Dataset.range(3).element_spec == TensorSpec((), np.int64)
    out = list(Dataset.range(3, output_type=np.float32))
    assert [x.dtype for x in out] == [np.float32] * 3 and values(out) == [0.0, 1.0, 2.0]


def test_range_rejects_bad_arguments():
    with pytest.raises(ValueError):
        Dataset.range()
    with pytest.raises(TypeError):
        Dataset.range(1.5)
    with pytest.raises(errors.InvalidArgumentError, match="step must be a non-zero"):
        Dataset.range(0, 5, 0)


def test_a_narrower_output_type_wraps_around_as_tf_data_and_as_a_batch_of_it_does():
    """Found by differential fuzzing: element by element, range(-1, 2, output_type=uint8) raised a bare
    OverflowError (numpy's scalar constructor), while a batch of the same range wrapped (int64 values cast, as
    tf.data computes them): TF gives 255, 0, 1 either way."""
    assert [int(x) for x in Dataset.range(-1, 2, output_type=np.uint8)] == [255, 0, 1]
    assert next(iter(Dataset.range(-1, 2, output_type=np.uint8).batch(3))).tolist() == [255, 0, 1]
    assert [int(x) for x in Dataset.range(126, 130, output_type=np.int8)] == [126, 127, -128, -127]
    assert all(type(x) is np.uint8 for x in Dataset.range(-1, 2, output_type=np.uint8))
