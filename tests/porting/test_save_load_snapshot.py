"""``Dataset.save`` / ``Dataset.load`` / ``Dataset.snapshot`` (and the file cache they share a format with)."""

import collections
import json
import os

import numpy as np
import pytest

from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.errors import DataLossError, InvalidArgumentError, NotFoundError

Point = collections.namedtuple("Point", "y x")


def _elements(n=23):
    return Dataset.range(n).map(lambda i: {"b": i * 2, "a": (i, np.full((2,), i, np.float32), b"s%d" % i)})


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert list(g) == list(w)
        assert g["b"] == w["b"] and g["a"][0] == w["a"][0] and g["a"][2] == w["a"][2]
        np.testing.assert_array_equal(g["a"][1], w["a"][1])
        assert g["a"][1].dtype == w["a"][1].dtype


def test_load_yields_what_was_saved_in_order_with_its_spec_and_cardinality(tmp_path):
    ds = _elements()
    ds.save(str(tmp_path / "s"))
    loaded = Dataset.load(str(tmp_path / "s"))
    assert loaded.cardinality() == 23
    assert loaded.element_spec == ds.element_spec
    _same(loaded.as_numpy(), ds.as_numpy())


def test_save_and_load_over_an_fsspec_url():
    ds = Dataset.from_tensor_slices(np.arange(12, dtype=np.int16).reshape(6, 2))
    ds.save("memory://saved/one")
    got = Dataset.load("memory://saved/one").as_numpy()
    assert [g.tolist() for g in got] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]]
    assert got[0].dtype == np.int16


def test_namedtuples_come_back_with_their_fields(tmp_path):
    ds = Dataset.from_tensors(Point(np.int64(1), np.int64(2))).repeat(3)
    ds.save(str(tmp_path / "p"))
    (first, *_) = Dataset.load(str(tmp_path / "p")).as_numpy()
    assert first._fields == ("y", "x") and (int(first.y), int(first.x)) == (1, 2)


def test_shard_func_decides_shards_and_reader_func_the_order(tmp_path):
    Dataset.range(10).save(str(tmp_path / "t"), shard_func=lambda x: x % 3)
    meta = json.loads((tmp_path / "t" / "dataset_spec.json").read_text())
    assert meta["shards"] == [4, 3, 3]
    assert sorted(int(x) for x in Dataset.load(str(tmp_path / "t"))) == list(range(10))
    flat = Dataset.load(str(tmp_path / "t"), reader_func=lambda shards: shards.flat_map(lambda d: d))
    assert [int(x) for x in flat] == [0, 3, 6, 9, 1, 4, 7, 2, 5, 8]


def test_a_loaded_dataset_resumes_exactly(tmp_path):
    Dataset.range(17).save(str(tmp_path / "r"))
    ds = Dataset.load(str(tmp_path / "r"))
    for k in (0, 1, 5, 16, 17):
        it = ds.make_iterator()
        head = [int(next(it)) for _ in range(k)]
        rest = [int(x) for x in ds.make_iterator(state=it.get_state())]
        assert head + rest == list(range(17))


def test_load_refuses_what_is_not_a_finished_save(tmp_path):
    with pytest.raises(NotFoundError):
        Dataset.load(str(tmp_path / "nothing"))
    Dataset.range(3).save(str(tmp_path / "s"))
    (tmp_path / "s" / "dataset_spec.json").write_text('{"format": "other"}')
    with pytest.raises(DataLossError):
        Dataset.load(str(tmp_path / "s"))


def test_load_checks_a_given_element_spec(tmp_path):
    Dataset.range(3).save(str(tmp_path / "s"))
    with pytest.raises(InvalidArgumentError):
        Dataset.load(str(tmp_path / "s"), element_spec=Dataset.from_tensors(np.float32(1)).element_spec)
    assert Dataset.load(str(tmp_path / "s"), element_spec=Dataset.range(1).element_spec).cardinality() == 3


def test_a_failed_save_publishes_nothing_and_a_new_save_replaces_an_old_one(tmp_path):
    path = str(tmp_path / "s")
    Dataset.range(5).save(path)
    with pytest.raises(ZeroDivisionError):
        Dataset.range(5).map(lambda x: 1 // int(x - 3)).save(path)
    with pytest.raises(NotFoundError):
        Dataset.load(path)
    Dataset.range(4).save(path)
    assert [int(x) for x in Dataset.load(path)] == [0, 1, 2, 3]


def test_save_refuses_options_it_does_not_implement(tmp_path):
    with pytest.raises(InvalidArgumentError):
        Dataset.range(3).save(str(tmp_path / "s"), compression="GZIP")
    with pytest.raises(InvalidArgumentError):
        Dataset.range(3).save(str(tmp_path / "s"), checkpoint_args={})


# ------------------------------------------------------------------------------------------- snapshot
def _counting(n, calls):
    def f(x):
        calls.append(int(x))
        return x * 2
    return Dataset.range(n).map(f)


def test_the_second_pass_of_a_snapshot_reads_instead_of_running_the_input(tmp_path):
    calls = []
    ds = _counting(10, calls).snapshot(str(tmp_path))
    assert [int(x) for x in ds] == list(range(0, 20, 2))
    ran = len(calls)
    assert [int(x) for x in ds] == list(range(0, 20, 2))
    assert len(calls) == ran  # read from the snapshot
    again = _counting(10, calls).snapshot(str(tmp_path))  # built again, same graph: same snapshot
    assert [int(x) for x in again] == list(range(0, 20, 2)) and len(calls) == ran


def test_a_partial_pass_writes_no_snapshot(tmp_path):
    calls = []
    ds = _counting(10, calls).snapshot(str(tmp_path))
    assert [int(x) for x in ds.take(3)] == [0, 2, 4]
    before = len(calls)
    assert [int(x) for x in ds] == list(range(0, 20, 2))
    assert len(calls) > before  # the input ran again


def test_a_changed_pipeline_does_not_read_another_pipelines_snapshot(tmp_path):
    list(Dataset.range(5).snapshot(str(tmp_path)))
    assert [int(x) for x in Dataset.range(7).snapshot(str(tmp_path))] == list(range(7))
    assert len(os.listdir(tmp_path)) == 2


@pytest.mark.parametrize("written", [False, True])
def test_a_snapshot_resumes_exactly_while_writing_and_while_reading(tmp_path, written):
    ds = Dataset.range(12).snapshot(str(tmp_path))
    if written:
        list(ds)
    it = ds.make_iterator()
    head = [int(next(it)) for _ in range(5)]
    rest = [int(x) for x in ds.make_iterator(state=it.get_state())]
    assert head + rest == list(range(12))


# ------------------------------------------------------------------------------------------- file cache
def test_a_file_cache_keeps_dict_values_under_their_keys(tmp_path):
    ds = _elements(5).cache(str(tmp_path / "c"))
    want = _elements(5).as_numpy()
    _same(ds.as_numpy(), want)  # the recording pass
    _same(ds.as_numpy(), want)  # the replay, from the files


def test_a_snapshot_takes_shard_func_and_reader_func(tmp_path):
    ds = Dataset.range(10).snapshot(str(tmp_path), shard_func=lambda x: x % 2,
                                    reader_func=lambda shards: shards.flat_map(lambda d: d))
    assert [int(x) for x in ds] == list(range(10))  # the writing pass: the input's order
    assert [int(x) for x in ds] == [0, 2, 4, 6, 8, 1, 3, 5, 7, 9]  # read back shard by shard
    (snapshot_dir,) = os.listdir(tmp_path)
    assert json.loads((tmp_path / snapshot_dir / "dataset_spec.json").read_text())["shards"] == [5, 5]
