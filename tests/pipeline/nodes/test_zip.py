"""zip and enumerate (a zip with a counter) (docs/tf-behaviour.md#zip)."""

import collections

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, TensorSpec
from jaxfeed.pipeline.dataset import INFINITE_CARDINALITY, UNKNOWN_CARDINALITY
from jaxfeed.pipeline.testing import assert_elements_equal, assert_resumes_everywhere

from node_test_helpers import ints, streaming


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


# ------------------------------------------------------------------------------------------- enumerate
@pytest.mark.parametrize("start", [0, 5, -2])
def test_enumerate_counts_from_start_in_int64(start):
    out = list(Dataset.from_tensor_slices(["a", "b", "c"]).enumerate(start))
    assert [(int(i), s) for i, s in out] == [(start, b"a"), (start + 1, b"b"), (start + 2, b"c")]
    assert out[0][0].dtype == np.int64


def test_enumerate_keeps_the_cardinality():
    assert Dataset.range(4).enumerate().cardinality() == 4
