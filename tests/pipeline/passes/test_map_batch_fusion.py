"""map+batch fusion: the fused stage yields exactly what the plain graph yields."""

import collections

import numpy as np
import pytest

from jaxfeed.pipeline import AUTOTUNE, Dataset, Options, errors
from jaxfeed.pipeline.passes.elementwise_proof import NotProven
from jaxfeed.pipeline.testing import assert_resumes_everywhere, assert_same_after_rewrites

from rewrite_checks import assert_same_with_errors, plain, rewrites, run_collecting_errors


Point = collections.namedtuple("Point", "x y")


@pytest.fixture(autouse=True)
def per_element_maps(monkeypatch):
    """This file checks the per-element fused stage: its arithmetic lambdas are not run once per batch (the
    vectorized_map pass would prove them elementwise; test_vectorized_map.py checks that path)."""
    from jaxfeed.pipeline.passes import vectorized_map

    def not_proven(map_node):
        raise NotProven("test_map_batch_fusion.py checks the per-element fused stage")

    monkeypatch.setattr(vectorized_map, "proven_elementwise", not_proven)


def fail_on(bad):
    def f(x):
        if int(x) in bad:
            raise ValueError(f"bad element {int(x)}")
        return x * 10

    return f


# ------------------------------------------------------------------------------- map+batch fusion
def test_map_then_batch_is_fused_into_one_stage():
    ds = Dataset.range(10).map(lambda x: x + 1).batch(4)
    assert "MapAndBatch" in rewrites(ds) and "[map_batch_fusion]" in rewrites(ds)


@pytest.mark.parametrize("n,b,drop", [(10, 4, False), (10, 4, True), (8, 4, True), (3, 5, False), (3, 5, True),
                                      (0, 3, False)])
def test_fused_map_batch_yields_the_plain_elements_with_partial_last_batch(n, b, drop):
    assert_same_after_rewrites(Dataset.range(n).map(lambda x: x * 2).batch(b, drop_remainder=drop))


def test_fused_map_batch_handles_nested_structures():
    ds = Dataset.range(11).map(lambda x: {"p": Point(x, np.full((2, 3), x, np.float32)), "s": b"v%d" % x})
    assert_same_after_rewrites(ds.batch(4))


def test_fused_parallel_map_batch_yields_the_plain_elements():
    ds = Dataset.range(103).map(lambda x: (x, np.ones(5) * x), num_parallel_calls=AUTOTUNE).batch(8)
    assert "MapAndBatch" in rewrites(ds)
    assert_same_after_rewrites(ds)


@pytest.mark.parametrize("npc", [None, 2])
@pytest.mark.parametrize("drop", [False, True])
def test_fused_map_batch_errors_shift_batches_like_the_plain_graph(npc, drop):
    ds = Dataset.range(23).map(fail_on({2, 3, 9, 21}), num_parallel_calls=npc).batch(4, drop_remainder=drop)
    assert_same_with_errors(ds)


def test_fused_map_batch_ragged_results_fail_at_that_batch():
    ds = Dataset.range(6).map(lambda x: np.zeros(1 if x < 3 else 2)).batch(2)
    assert_same_with_errors(ds)
    with pytest.raises(errors.InvalidArgumentError, match="Cannot add tensor to the batch"):
        list(ds)


def test_fused_map_batch_with_rng_matches_plain():
    ds = Dataset.range(20).map(lambda x, rng: x + rng.integers(100), with_rng=True, seed=3).batch(6)
    assert_same_after_rewrites(ds)


def test_fused_map_batch_resumes_everywhere_including_after_errors():
    assert_resumes_everywhere(lambda: Dataset.range(15).map(lambda x: x * 3, num_parallel_calls=2).batch(4))
    expected = run_collecting_errors(plain(Dataset.range(9).map(fail_on({4})).batch(2)))
    ds = Dataset.range(9).map(fail_on({4})).batch(2)
    it = iter(ds)
    next(it), next(it)
    with pytest.raises(ValueError):
        next(it)
    restored = ds.make_iterator(state=it.get_state())
    assert [values.tolist() for values in restored] == [e[1].tolist() for e in expected[3:]]


def test_process_and_nondeterministic_maps_are_not_fused():
    assert "MapAndBatch" not in rewrites(Dataset.range(4).map(lambda x: x, 2, executor="process").batch(2))
    assert "MapAndBatch" not in rewrites(Dataset.range(4).map(lambda x: x, 2, deterministic=False).batch(2))


def test_map_and_batch_fusion_option_turns_it_off():
    opts = Options()
    opts.experimental_optimization.map_and_batch_fusion = False
    assert "MapAndBatch" not in rewrites(Dataset.range(4).map(lambda x: x).batch(2).with_options(opts))


@pytest.mark.parametrize("vectorized", [False, True])
def test_fused_map_batch_over_a_random_access_array_source_matches_plain(vectorized):
    ds = Dataset.from_tensor_slices(np.arange(30, dtype=np.float32).reshape(10, 3)).shuffle(10, seed=1).skip(1)
    assert_same_after_rewrites(ds.map(lambda r: r * 2, vectorized=vectorized).batch(4))


# ------------------------------------------------------------- fused map+batch: numpy scalar results
@pytest.mark.parametrize("dtype", [np.bool_, np.int8, np.uint16, np.int32, np.int64, np.uint64, np.float16,
                                   np.float32, np.float64, np.longdouble, np.complex64, np.complex128])
def test_fused_map_batch_stacks_numpy_scalars_of_each_type_like_the_plain_graph(dtype):
    ds = Dataset.range(11).map(lambda x: dtype(x * 3 + 1)).batch(4)
    batches = assert_same_after_rewrites(ds)
    assert all(b.dtype == np.dtype(dtype) and b.flags.owndata and b.flags.writeable for b in batches)


def test_fused_map_batch_passes_numpy_int64_scalars_to_the_function():
    seen = set()

    def record(x):
        seen.add(type(x))
        return x + 1

    batches = list(Dataset.range(2100).map(record).batch(1024))
    assert seen == {np.int64}
    assert [b.dtype for b in batches] == [np.dtype(np.int64)] * 3
    assert np.concatenate(batches).tolist() == list(range(1, 2101))


@pytest.mark.parametrize("make", [
    lambda x: np.int32(x) if x % 2 else np.int64(x),  # numpy scalars of two types
    lambda x: int(x),  # Python ints
    lambda x: float(x) if x % 3 else np.float32(x),  # Python floats among numpy ones
    lambda x: np.float64(x) if x < 5 else np.array(x),  # a 0-d array after scalars
])
def test_fused_map_batch_with_mixed_result_types_matches_the_plain_graph(make):
    assert_same_with_errors(Dataset.range(10).map(make).batch(4))


def test_fused_map_batch_error_in_a_scalar_batch_names_the_element_and_the_map():
    ds = Dataset.range(3000).map(fail_on({1500}), name="times_ten").batch(1024)
    it = iter(ds)
    assert next(it).tolist() == [10 * i for i in range(1024)]
    with pytest.raises(ValueError, match="bad element 1500") as info:
        next(it)
    assert any("times_ten" in note and "input element 1500" in note for note in info.value.__notes__)
    assert next(it).tolist() == [10 * i for i in range(1501, 2525)]
    assert_same_with_errors(ds)


def test_fused_map_batch_over_scalars_resumes_everywhere():
    assert_resumes_everywhere(lambda: Dataset.range(40).map(lambda x: x + 1).batch(7))
    assert_resumes_everywhere(lambda: Dataset.range(40).map(fail_on({9, 10, 30})).batch(7).ignore_errors())
