"""vectorized map: the rewrite yields exactly what the plain graph yields."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.testing import assert_same_after_rewrites

from rewrite_checks import assert_same_with_errors, rewrites


# ------------------------------------------------------------------------------------ vectorized map
def test_vectorized_map_runs_once_per_batch():
    calls = []

    def double(x):
        calls.append(np.shape(x))
        return x * 2

    ds = Dataset.range(10).map(double, vectorized=True).batch(4)
    calls.clear()  # the spec is inferred from one element
    assert [b.tolist() for b in ds] == [[0, 2, 4, 6], [8, 10, 12, 14], [16, 18]]
    assert calls == [(4,), (4,), (2,)]
    assert "[vectorized_map]" in rewrites(ds)


@pytest.mark.parametrize("drop", [False, True])
def test_vectorized_map_yields_the_plain_elements_for_nested_structures(drop):
    ds = Dataset.from_tensor_slices((np.arange(10.0), np.arange(20).reshape(10, 2)))
    ds = ds.map(lambda a, b: {"sum": a + b[..., 0], "b": b * 2}, vectorized=True).batch(3, drop_remainder=drop)
    assert_same_after_rewrites(ds)


def test_vectorized_map_error_is_located_at_its_element():
    def checked(x):
        if np.any(np.asarray(x) == 5):
            raise ValueError("five")
        return x + 1

    assert_same_with_errors(Dataset.range(12).map(checked, vectorized=True).batch(4))


def test_vectorized_map_with_rng_stays_per_element():
    ds = Dataset.range(6).map(lambda x, rng: x + rng.integers(9), vectorized=True, with_rng=True, seed=1).batch(2)
    assert "[vectorized_map]" not in rewrites(ds)
    assert_same_after_rewrites(ds)
