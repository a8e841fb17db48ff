"""Regression tests for bugs the resume property test found in other modules (one per fix)."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, errors, structure


def test_stacking_string_arrays_of_different_shapes_raises_instead_of_broadcasting():
    # structure._stack_leaf assigned object arrays row by row: (1,) broadcast silently into (3,)
    a = np.array([b"a", b"b", b"c"], dtype=object)
    with pytest.raises(errors.InvalidArgumentError, match="Shapes are"):
        structure.stack([a, np.array([b"x"], dtype=object)])


def test_window_over_batches_of_strings_of_different_sizes_yields_windows_of_elements():
    ds = Dataset.from_tensor_slices(np.array([b"a", b"b", b"c", b"d"], dtype=object)).batch(3).window(2)
    windows = [[list(x) for x in w] for w in ds]
    assert windows == [[[b"a", b"b", b"c"], [b"d"]]]
