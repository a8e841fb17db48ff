"""``Dataset.random``, ``sample_from_datasets`` with a weights dataset, and ``rejection_resample``."""

import numpy as np
import pytest

import jaxfeed.data.experimental as E
from jaxfeed.pipeline import INFINITE_CARDINALITY, Dataset
from jaxfeed.pipeline.errors import InvalidArgumentError


def test_random_is_an_infinite_int64_stream_reproducible_under_a_seed():
    ds = Dataset.random(seed=5)
    assert ds.cardinality() == INFINITE_CARDINALITY
    assert ds.element_spec == Dataset.range(1).element_spec
    first = [int(x) for x in ds.take(50)]
    assert first == [int(x) for x in Dataset.random(seed=5).take(50)]
    assert first != [int(x) for x in Dataset.random(seed=6).take(50)]
    assert len(set(first)) == 50


def test_random_values_are_uniform_over_int64():
    v = np.array(Dataset.random(seed=1).take(20000).as_numpy())
    assert abs(v.mean() / 2.0**63) < 0.05 and 0.45 < (v & 1).mean() < 0.55
    assert (v < 0).any() and (v > 0).any()


def test_random_rerandomizes_each_epoch_only_when_asked():
    same = [int(x) for x in Dataset.random(seed=2).take(3).repeat(2)]
    assert same[:3] == same[3:]
    fresh = [int(x) for x in Dataset.random(seed=2, rerandomize_each_iteration=True).take(3).repeat(2)]
    assert fresh[:3] != fresh[3:]


def test_random_resumes_exactly():
    ds = Dataset.random(seed=9).take(20)
    it = ds.make_iterator()
    head = [int(next(it)) for _ in range(7)]
    assert head + [int(x) for x in ds.make_iterator(state=it.get_state())] == [int(x) for x in ds]


def _constant(v):
    return Dataset.from_tensors(np.int64(v)).repeat()


def test_a_weights_dataset_sets_each_draws_distribution():
    weights = Dataset.from_tensor_slices(np.array([[1.0, 0.0], [0.0, 1.0]] * 4))
    got = [int(x) for x in Dataset.sample_from_datasets([_constant(0), _constant(1)], weights, seed=1)]
    assert got == [0, 1] * 4  # one draw per weight vector; the draws end with the weights
    mixed = Dataset.from_tensors(np.array([0.25, 0.75])).repeat()
    v = np.array(Dataset.sample_from_datasets([_constant(0), _constant(1)], mixed, seed=3).take(8000).as_numpy())
    assert 0.72 < v.mean() < 0.78


def test_a_weights_dataset_is_reproducible_and_resumes_exactly():
    def build():
        w = Dataset.from_tensors(np.array([0.5, 0.5])).repeat()
        return Dataset.sample_from_datasets([_constant(0), _constant(1)], w, seed=7).take(40)

    want = [int(x) for x in build()]
    assert want == [int(x) for x in build()]
    it = build().make_iterator()
    head = [int(next(it)) for _ in range(13)]
    assert head + [int(x) for x in build().make_iterator(state=it.get_state())] == want


def test_bad_weight_vectors_raise_at_their_draw():
    w = Dataset.from_tensor_slices(np.array([[1.0, 0.0], [-1.0, 2.0]]))
    it = iter(Dataset.sample_from_datasets([_constant(0), _constant(1)], w, seed=1))
    assert int(next(it)) == 0
    with pytest.raises(InvalidArgumentError, match="non-negative"):
        next(it)
    with pytest.raises(TypeError):
        Dataset.sample_from_datasets([_constant(0), _constant(1)], Dataset.range(3))


LABELS = np.random.default_rng(0).choice(3, size=20000, p=[0.7, 0.2, 0.1]).astype(np.int64)


@pytest.mark.parametrize("initial", [None, [0.7, 0.2, 0.1]])
def test_rejection_resample_moves_the_class_distribution_to_the_target(initial):
    ds = Dataset.from_tensor_slices(LABELS)
    out = ds.rejection_resample(lambda x: x, [1 / 3, 1 / 3, 1 / 3], initial_dist=initial, seed=4).take(3000)
    pairs = [(int(c), int(x)) for c, x in out]
    assert all(c == x for c, x in pairs)  # (class, element)
    freq = np.bincount([c for c, _ in pairs], minlength=3) / len(pairs)
    np.testing.assert_allclose(freq, [1 / 3] * 3, atol=0.04)


def test_rejection_resample_is_reproducible_under_a_seed_and_an_apply_form():
    ds = Dataset.from_tensor_slices(LABELS[:2000])
    a = [int(c) for c, _ in ds.rejection_resample(lambda x: x, [0.5, 0.3, 0.2], seed=8).take(300)]
    b = [int(c) for c, _ in ds.apply(E.rejection_resample(lambda x: x, [0.5, 0.3, 0.2], seed=8)).take(300)]
    assert a == b


def test_rejection_resample_with_the_target_equal_to_the_initial_keeps_every_element():
    ds = Dataset.from_tensor_slices(LABELS[:50])
    out = ds.rejection_resample(lambda x: x, [0.7, 0.2, 0.1], initial_dist=[0.7, 0.2, 0.1], seed=1)
    assert [int(x) for _, x in out] == LABELS[:50].tolist()
