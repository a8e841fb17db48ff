"""shuffle and the global seed (docs/tf-behaviour.md#shuffle); the vectorised shuffle over indices."""

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxfeed.pipeline import Dataset, errors
from jaxfeed.pipeline.dataset import UNKNOWN_CARDINALITY
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from node_test_helpers import values


# ------------------------------------------------------------------------------------------ shuffle
def test_shuffle_is_a_permutation_with_bounded_displacement():
    for seed in range(20):
        out = values(Dataset.range(50).shuffle(3, seed=seed))
        assert sorted(out) == list(range(50))
        assert all(v < k + 3 for k, v in enumerate(out))
    assert values(Dataset.range(10).shuffle(1, seed=3)) == list(range(10))


def test_shuffle_seeded_epochs_reproduce_and_differ():
    def epochs(reshuffle):
        ds = Dataset.range(20).shuffle(20, seed=7, reshuffle_each_iteration=reshuffle)
        return values(ds), values(ds)

    a1, a2 = epochs(True)
    b1, b2 = epochs(True)
    assert (a1, a2) == (b1, b2) and a1 != a2
    c1, c2 = epochs(False)
    assert c1 == c2


def test_shuffle_then_repeat_never_mixes_epochs():
    out = values(Dataset.range(10).shuffle(10, seed=1).repeat(2))
    assert sorted(out[:10]) == list(range(10)) and sorted(out[10:]) == list(range(10)) and out[:10] != out[10:]


def test_unseeded_shuffle_differs_between_runs():
    orders = {tuple(values(Dataset.range(30).shuffle(30))) for _ in range(3)}
    assert len(orders) > 1


def test_global_seed_alone_reproduces():
    from jaxfeed.pipeline import random_seed

    random_seed.set_global_seed(5)
    a = values(Dataset.range(30).shuffle(30))
    random_seed.set_global_seed(5)
    b = values(Dataset.range(30).shuffle(30))
    assert a == b


def test_shuffle_buffer_validation():
    with pytest.raises(errors.InvalidArgumentError):
        Dataset.range(3).shuffle(0)
    with pytest.raises(errors.InvalidArgumentError):
        Dataset.range(3).shuffle(-1)
    with pytest.raises(ValueError):
        Dataset.range(3).shuffle(None)
    assert sorted(values(Dataset.range(5).shuffle(UNKNOWN_CARDINALITY, seed=1))) == list(range(5))


def test_shuffle_over_index_stream_equals_shuffle_over_elements():
    x = np.arange(100)
    via_indices = values(Dataset.from_tensor_slices(x).shuffle(10, seed=3).batch(7))
    via_elements = values(Dataset.from_tensor_slices(x).map(lambda v: v).shuffle(10, seed=3).batch(7))
    assert via_indices == via_elements


# ------------------------------------ the vectorised shuffle over indices makes exactly the step-by-step algorithm's choices

def _values(ds):
    return [np.asarray(x).tolist() for x in ds]


@settings(max_examples=60, deadline=None)
@given(n=st.integers(0, 3000), buffer=st.integers(1, 1500), seed=st.integers(0, 2**31), batch=st.integers(1, 700))
def test_index_shuffle_equals_element_shuffle(n, buffer, seed, batch):
    x = np.arange(n)
    via_indices = _values(Dataset.from_tensor_slices(x).shuffle(buffer, seed=seed).batch(batch))
    via_elements = _values(Dataset.from_tensor_slices(x).map(lambda v: v).shuffle(buffer, seed=seed).batch(batch))
    assert via_indices == via_elements


def test_index_shuffle_over_repeat_epochs_equals_element_shuffle():
    a = _values(Dataset.range(2500).shuffle(300, seed=4).repeat(3).batch(512))
    b = _values(Dataset.range(2500).map(lambda v: v).shuffle(300, seed=4).repeat(3).batch(512))
    assert a == b


def test_index_shuffle_resumes_everywhere_across_chunks():
    assert_resumes_everywhere(lambda: Dataset.range(3000).shuffle(700, seed=1).batch(97))


def test_index_shuffle_with_slots_beyond_16_bits_equals_element_shuffle():
    # buffers over 65,536 slots sort their slots as int64 instead of the 16-bit radix sort
    a = _values(Dataset.range(80_000).shuffle(70_000, seed=5).batch(4096))
    b = _values(Dataset.range(80_000).map(lambda v: v).shuffle(70_000, seed=5).batch(4096))
    assert a == b


def test_index_shuffle_resumes_one_element_at_a_time_inside_a_chunk_computed_ahead():
    # a chunk runs to the end of its draw (1024 steps); the outputs not yet asked for are part of the state
    assert_resumes_everywhere(lambda: Dataset.range(2500).shuffle(300, seed=3),
                              ks=[0, 1, 5, 299, 1023, 1024, 1025, 2047, 2200, 2499, 2500])


def test_index_shuffle_restores_a_state_saved_without_outputs_ahead():
    # states saved before the outputs-ahead entry existed have no "ahead": nothing is pending then
    ds = Dataset.range(3000).shuffle(500, seed=2).batch(100)
    it = iter(ds)
    state = it.get_state()
    assert len(state["root"]["input"].pop("ahead")) == 0
    assert _values(ds.make_iterator(state=state)) == _values(it)
