"""rebatch over input batches whose rows differ in shape: tf.data's InvalidArgumentError, not numpy's."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, errors


def test_rebatch_across_batches_with_different_row_shapes_is_an_invalid_argument_error_naming_the_shapes():
    ds = Dataset.range(2).map(lambda i: np.zeros((2, 3 + int(i)), np.float32)).rebatch(3)
    with pytest.raises(errors.InvalidArgumentError, match="Cannot add tensor to the batch") as info:
        list(ds)
    message = str(info.value)
    assert "Rebatch" in message  # the transformation
    assert "Shapes are: [tensor]: [4], [batch]: [3]" in message


def test_rebatch_error_names_the_leaf_of_a_nested_element():
    ds = Dataset.range(2).map(
        lambda i: {"a": np.ones(2, np.float32), "b": np.zeros((2, 1 + int(i)), np.int64)}).rebatch([3, 1])
    with pytest.raises(errors.InvalidArgumentError, match=r"\[tensor\]: \[2\], \[batch\]: \[1\].*leaf 1"):
        list(ds)


def test_rebatch_of_rows_with_equal_shapes_still_crosses_batch_boundaries():
    out = list(Dataset.range(8).batch(3).rebatch(4))
    assert [b.tolist() for b in out] == [[0, 1, 2, 3], [4, 5, 6, 7]]
