"""zip, concatenate, enumerate, sample_from_datasets and choose_from_datasets
(docs/tf-behaviour.md#zip, #concatenate)."""

import collections

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, TensorSpec, errors
from jaxfeed.pipeline.dataset import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from jaxfeed.pipeline.testing import assert_elements_equal, assert_resumes_everywhere


def values(ds):
    return [np.asarray(x).tolist() if not isinstance(x, (tuple, dict)) else x for x in ds]


def ints(ds):
    return [int(x) for x in ds]


def streaming(ds):
    """The same elements through a node that is not random-access."""
    return ds.filter(lambda *_: True)


# ------------------------------------------------------------------------------------------------- zip
def test_zip_element_has_the_structure_of_its_arguments():
    a, b = Dataset.range(3), Dataset.range(10, 13)
    assert [tuple(map(int, e)) for e in Dataset.zip(a, b)] == [(0, 10), (1, 11), (2, 12)]
    assert [tuple(map(int, e)) for e in Dataset.zip((a, b))] == [(0, 10), (1, 11), (2, 12)]
    first = next(iter(Dataset.zip({"y": b, "x": (a, b)})))
    assert list(first) == ["y", "x"] and int(first["x"][1]) == 10


def test_zip_of_one_dataset_is_not_wrapped_but_a_one_tuple_is():
    a = Dataset.range(2)
    assert ints(Dataset.zip(a)) == [0, 1]
    assert [len(e) for e in Dataset.zip((a,))] == [1, 1]
    assert Dataset.zip(datasets=(a,)).element_spec == (TensorSpec((), np.int64),)


def test_zip_keeps_namedtuples():
    Pair = collections.namedtuple("Pair", "left right")
    (first, *_) = list(Dataset.zip(Pair(Dataset.range(2), Dataset.range(2))))
    assert isinstance(first, Pair)


@pytest.mark.parametrize("make", [lambda a: [a, a], lambda a: (a, [a]), lambda a: (a, 3)])
def test_zip_rejects_lists_and_non_datasets(make):
    with pytest.raises(TypeError):
        Dataset.zip(make(Dataset.range(2)))


def test_zip_list_message_names_tuple():
    with pytest.raises(TypeError, match="Python `list` is not supported and you should use `tuple` instead"):
        Dataset.zip([Dataset.range(2), Dataset.range(2)])


def test_zip_of_nothing_fails():
    with pytest.raises(ValueError):
        Dataset.zip(())


@pytest.mark.parametrize("wrap", [lambda d: d, streaming])
def test_zip_stops_at_the_shortest(wrap):
    ds = Dataset.zip(wrap(Dataset.range(5)), Dataset.range(100, 102))
    assert [tuple(map(int, e)) for e in ds] == [(0, 100), (1, 101)]


def test_zip_cardinality_rules():
    a, inf, unk = Dataset.range(3), Dataset.range(2).repeat(), streaming(Dataset.range(2))
    assert Dataset.zip(a, inf).cardinality() == 3
    assert Dataset.zip(inf, inf).cardinality() == INFINITE_CARDINALITY
    assert Dataset.zip(a, unk).cardinality() == UNKNOWN_CARDINALITY


def test_zip_of_random_access_inputs_is_random_access_and_batches_by_gather():
    ds = Dataset.zip(Dataset.range(5), Dataset.from_tensor_slices(np.arange(5.0)))
    assert ds._node.random_access()
    batches = list(ds.batch(2))
    assert [b[0].tolist() for b in batches] == [[0, 1], [2, 3], [4]]
    assert batches[0][1].dtype == np.float64


def test_zip_streaming_matches_random_access():
    a = Dataset.from_tensor_slices({"v": np.arange(7)})
    assert_elements_equal(list(Dataset.zip((streaming(a), Dataset.range(7)))), list(Dataset.zip((a, Dataset.range(7)))))


def test_zip_error_takes_its_position_and_iteration_goes_on():
    def fail_on_2(x):
        if x == 2:
            raise KeyError(x)
        return x

    it = iter(Dataset.zip(Dataset.range(5).map(fail_on_2), streaming(Dataset.range(10, 15))))
    assert [int(e[1]) for e in it.next_many(10)] == [10, 11]
    with pytest.raises(KeyError):
        it.next_many(10)
    assert [tuple(map(int, e)) for e in it] == [(3, 13), (4, 14)]


def test_zip_resumes_everywhere():
    assert_resumes_everywhere(
        lambda: Dataset.zip(streaming(Dataset.range(6)), Dataset.range(3, 20).map(lambda x: x * 2)))


# ----------------------------------------------------------------------------------------- concatenate
@pytest.mark.parametrize("wrap", [lambda d: d, streaming])
def test_concatenate_emits_self_then_other(wrap):
    assert ints(wrap(Dataset.range(3)).concatenate(Dataset.range(10, 12))) == [0, 1, 2, 10, 11]


def test_concatenate_requires_matching_dtypes():
    # [0.2] Python ints are int32, range is int64: incompatible [3.10]
    with pytest.raises(TypeError, match="Incompatible dataset elements"):
        Dataset.from_tensor_slices([1, 2]).concatenate(Dataset.range(2))


def test_concatenate_requires_matching_structures():
    with pytest.raises(TypeError, match="Incompatible dataset elements"):
        Dataset.zip(Dataset.range(2), Dataset.range(2)).concatenate(Dataset.range(2))


def test_concatenate_relaxes_shapes():
    ds = Dataset.from_tensor_slices(np.zeros((2, 2))).concatenate(Dataset.from_tensor_slices(np.ones((1, 3))))
    assert ds.element_spec == TensorSpec((None,), np.float64)
    assert [len(x) for x in ds] == [2, 2, 3]


def test_concatenate_cardinality_is_the_sum():
    assert Dataset.range(3).concatenate(Dataset.range(4)).cardinality() == 7
    assert Dataset.range(3).concatenate(Dataset.range(4).repeat()).cardinality() == INFINITE_CARDINALITY
    assert streaming(Dataset.range(3)).concatenate(Dataset.range(4)).cardinality() == UNKNOWN_CARDINALITY


def test_concatenate_of_random_access_inputs_gathers_across_the_seam():
    ds = Dataset.from_tensor_slices(np.arange(4)).concatenate(Dataset.from_tensor_slices(np.arange(100, 103)))
    assert ds._node.random_access()
    assert ds._node.gather(np.array([5, 0, 4, 3])).tolist() == [101, 0, 100, 3]
    assert [b.tolist() for b in ds.shuffle(7, seed=1).batch(7)][0] != list(range(7))  # one gather, shuffled


def test_concatenate_resumes_everywhere():
    assert_resumes_everywhere(lambda: streaming(Dataset.range(4)).concatenate(streaming(Dataset.range(10, 13))))


# ------------------------------------------------------------------------------------------- enumerate
@pytest.mark.parametrize("start", [0, 5, -2])
def test_enumerate_counts_from_start_in_int64(start):
    out = list(Dataset.from_tensor_slices(["a", "b", "c"]).enumerate(start))
    assert [(int(i), s) for i, s in out] == [(start, b"a"), (start + 1, b"b"), (start + 2, b"c")]
    assert out[0][0].dtype == np.int64


def test_enumerate_keeps_the_cardinality():
    assert Dataset.range(4).enumerate().cardinality() == 4


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
