"""sample_from_datasets and choose_from_datasets (docs/tf-behaviour.md)."""

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, errors
from jaxfeed.pipeline.testing import assert_resumes_everywhere

from node_test_helpers import ints, streaming


# ------------------------------------------------------------------------------------------ sample/choose
def _constant(v):
    return Dataset.from_tensors(np.int64(v)).repeat()


def test_sample_from_datasets_follows_the_weights():
    out = ints(Dataset.sample_from_datasets([_constant(0), _constant(1)], weights=[0.75, 0.25], seed=4).take(4000))
    assert 0.21 < np.mean(out) < 0.29


def test_sample_from_datasets_is_reproducible_with_a_seed():
    def make():
        return Dataset.sample_from_datasets([Dataset.range(50), Dataset.range(100, 150)], seed=7)

    assert ints(make()) == ints(make())
    assert sorted(ints(make())) == list(range(50)) + list(range(100, 150))


def test_sample_from_datasets_continues_after_an_input_ends():
    ds = Dataset.sample_from_datasets([Dataset.range(3), Dataset.range(100, 120)], seed=1)
    assert sorted(ints(ds)) == [0, 1, 2] + list(range(100, 120))


def test_sample_from_datasets_stop_on_empty_dataset():
    ds = Dataset.sample_from_datasets([Dataset.range(3), _constant(9)], seed=1, stop_on_empty_dataset=True)
    out = ints(ds)
    assert [x for x in out if x != 9] == [0, 1, 2]


def test_sample_from_datasets_rerandomizes_each_iteration_only_when_asked():
    def orders(rerandomize):
        ds = Dataset.sample_from_datasets([Dataset.range(20), Dataset.range(100, 120)], seed=3,
                                          rerandomize_each_iteration=rerandomize)
        return ints(ds), ints(ds)

    first, second = orders(False)
    assert first == second
    first, second = orders(True)
    assert first != second


def test_sample_from_datasets_validates_arguments():
    with pytest.raises(ValueError):
        Dataset.sample_from_datasets([])
    with pytest.raises(ValueError):
        Dataset.sample_from_datasets([Dataset.range(2)], weights=[0.5, 0.5])
    with pytest.raises(TypeError, match="Incompatible"):
        Dataset.sample_from_datasets([Dataset.range(2), Dataset.from_tensor_slices([1])])
    with pytest.raises(errors.InvalidArgumentError):
        Dataset.sample_from_datasets([Dataset.range(2)], weights=[-1.0])


def test_sample_from_datasets_zero_weight_input_is_never_drawn():
    ds = Dataset.sample_from_datasets([Dataset.range(5), Dataset.range(100, 105)], weights=[1.0, 0.0], seed=2)
    assert ints(ds) == [0, 1, 2, 3, 4]


def test_sample_from_datasets_resumes_everywhere():
    assert_resumes_everywhere(
        lambda: Dataset.sample_from_datasets([Dataset.range(8), streaming(Dataset.range(100, 106))], seed=5))


def test_choose_from_datasets_follows_the_choices():
    words = [Dataset.from_tensors(w).repeat() for w in (b"foo", b"bar", b"baz")]
    choice = Dataset.range(3).repeat(2)
    assert list(Dataset.choose_from_datasets(words, choice)) == [b"foo", b"bar", b"baz"] * 2


def test_choose_from_datasets_requires_int64_scalar_choices():
    with pytest.raises(TypeError, match="int64"):
        Dataset.choose_from_datasets([Dataset.range(2)], Dataset.from_tensor_slices([0, 0]))


def test_choose_from_datasets_out_of_range_index_is_invalid_argument():
    ds = Dataset.choose_from_datasets([Dataset.range(5)], Dataset.from_tensor_slices(np.array([0, 0, 3], np.int64)))
    it = iter(ds)
    assert [int(next(it)), int(next(it))] == [0, 1]
    with pytest.raises(errors.InvalidArgumentError, match="out-of-range"):
        next(it)


def test_choose_from_datasets_stop_on_empty_dataset():
    choice = Dataset.from_tensor_slices(np.array([0, 1, 0, 0, 1], np.int64))
    a, b = Dataset.range(1), Dataset.range(10, 20)
    assert ints(Dataset.choose_from_datasets([a, b], choice)) == [0, 10]
    assert ints(Dataset.choose_from_datasets([a, b], choice, stop_on_empty_dataset=False)) == [0, 10, 11]


def test_choose_from_datasets_resumes_everywhere():
    choice = Dataset.from_tensor_slices(np.array([0, 1, 1, 0, 2, 2, 1, 0], np.int64))
    assert_resumes_everywhere(lambda: Dataset.choose_from_datasets(
        [Dataset.range(5), streaming(Dataset.range(10, 15)), Dataset.range(20, 22)], choice,
        stop_on_empty_dataset=False))
