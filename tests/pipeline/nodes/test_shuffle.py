"""shuffle and the global seed (docs/tf-behaviour.md#shuffle); the vectorised shuffle over indices."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, errors
from jaxfeed.pipeline.dataset import UNKNOWN_CARDINALITY


def values(ds):
    return [np.asarray(x).tolist() for x in ds]


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
