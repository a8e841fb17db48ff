"""vectorized map: the rewrite yields exactly what the plain graph yields."""

import warnings

import numpy as np
import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset, Options
from jaxfeed.pipeline.testing import assert_resumes_everywhere, assert_same_after_rewrites

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


# ------------------------------------------------------------------------- proven elementwise maps
# A ported per-element map that is plain arithmetic (passes/elementwise_proof.py) runs once per batch too.
def test_a_ported_arithmetic_map_runs_once_per_batch():
    ds = Dataset.range(10).map(lambda x: x + 1).batch(4)
    assert "provably elementwise" in rewrites(ds) and "vectorized=True" in rewrites(ds)
    assert [b.tolist() for b in ds] == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]
    assert_same_after_rewrites(ds)


@pytest.mark.parametrize("drop", [False, True])
@pytest.mark.parametrize("parallel", [None, 2, AUTOTUNE])
def test_a_proven_map_yields_the_plain_elements_with_their_dtypes(drop, parallel):
    images = np.arange(7 * 2 * 3, dtype=np.uint8).reshape(7, 2, 3)
    labels = np.arange(7, dtype=np.int32)

    def scale(image, label):
        x = image / 255.0
        return (x - 0.5) * 2.0, (label, label > 3, -label)

    ds = Dataset.from_tensor_slices((images, labels)).map(scale, num_parallel_calls=parallel).batch(3, drop)
    assert "provably elementwise" in rewrites(ds)
    assert_same_after_rewrites(ds)


def test_consecutive_proven_maps_are_fused_and_run_once_per_batch():
    ds = Dataset.range(9).map(lambda x: (x, x * 2)).map(lambda a, b: a - b).batch(4)
    assert "[map_fusion]" in rewrites(ds) and "provably elementwise" in rewrites(ds)
    assert_same_after_rewrites(ds)


def test_a_proven_map_that_raises_on_a_batch_fails_at_the_element_that_raises():
    bases, powers = np.array([2, 3, 4, 5, 6]), np.array([1, -1, 2, 3, -2])  # int ** negative int: ValueError
    ds = Dataset.from_tensor_slices((bases, powers)).map(lambda b, p: b ** p).batch(2)
    assert "provably elementwise" in rewrites(ds)
    assert_same_with_errors(ds)
    assert [b.tolist() for b in Dataset.from_tensor_slices((bases, powers)).map(lambda b, p: b ** p)
            .ignore_errors().batch(2)] == [[2, 16], [125]]


def test_integer_overflow_raises_per_element_where_numpy_is_set_to_raise():
    # numpy checks integer overflow for scalars only: a batch would wrap where the element raises
    ds = Dataset.from_tensor_slices(np.array([1, 2**63 - 1, 3])).map(lambda x: x + 1).batch(3)
    with np.errstate(over="raise"):
        assert_same_with_errors(ds)
        with pytest.raises(FloatingPointError):
            list(ds)


def test_integer_overflow_raises_per_element_where_runtime_warnings_are_errors():
    ds = Dataset.from_tensor_slices(np.array([1, 2**63 - 1, 3])).map(lambda x: x + 1).batch(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        with pytest.raises(RuntimeWarning, match="overflow"):
            list(ds)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert [b.tolist() for b in ds] == [[2, -2**63, 4]]  # int64 wraps, as in tf.data


def test_a_proven_map_resumes_everywhere():
    assert_resumes_everywhere(lambda: Dataset.range(23).map(lambda x: x * 3 - 1).batch(5))


@pytest.mark.parametrize("switch", ["elementwise_vectorization", "map_and_batch_fusion",
                                    "apply_default_optimizations"])
def test_options_switch_the_proof_off(switch):
    opts = Options()
    setattr(opts.experimental_optimization, switch, False)
    ds = Dataset.range(10).map(lambda x: x + 1).batch(4).with_options(opts)
    assert "provably elementwise" not in rewrites(ds) and "vectorized=True" not in rewrites(ds)
    assert [b.tolist() for b in ds] == [[1, 2, 3, 4], [5, 6, 7, 8], [9, 10]]


@pytest.mark.parametrize("fn, why", [
    (lambda x: x.sum(), "sum"),
    (lambda x: np.exp(x) + 1, "np.exp"),
])
def test_a_map_that_cannot_be_proven_stays_per_element_and_says_why(fn, why):
    ds = Dataset.range(10).map(fn).batch(4)
    assert "not provably elementwise" in rewrites(ds) and why in rewrites(ds)
    assert "vectorized=True" not in rewrites(ds)
    assert_same_after_rewrites(ds)


def test_strings_and_random_maps_are_not_proven():
    assert "vectorized=True" not in rewrites(Dataset.from_tensor_slices([b"a", b"b"]).map(lambda s: s + s).batch(2))
    ds = Dataset.range(4).map(lambda x, rng: x + 1, with_rng=True, seed=3).batch(2)
    assert "vectorized=True" not in rewrites(ds)
    ds = Dataset.range(4).map(lambda x: x + 1, stateful=True).batch(2)
    assert "vectorized=True" not in rewrites(ds)
