"""tf.data semantics of cache (docs/tf-behaviour.md#cache): in memory and in files (local and memory://)."""

import collections
import logging
import os
import uuid

import fsspec
import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, errors
from jaxfeed.pipeline.testing import assert_elements_equal, assert_resumes_everywhere

from node_test_helpers import values


class Counted:
    """A map function that counts its calls (the upstream work a cache must save)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        return x * 10


@pytest.fixture
def prefix(tmp_path):
    return str(tmp_path / "cache")


@pytest.fixture
def memory_prefix():
    path = f"memory://jaxfeed-test-{uuid.uuid4().hex}/cache"
    fs, root = fsspec.core.url_to_fs(path)
    fs.mkdir(fs._parent(root))
    yield path
    fs.rm(fs._parent(root), recursive=True)


# ---------------------------------------------------------------------------------------------- memory
def test_memory_cache_replays_later_passes_without_upstream():  # 3.13
    fn = Counted()
    ds = Dataset.range(5).map(fn).cache()
    assert values(ds) == values(ds) == [0, 10, 20, 30, 40]
    assert fn.calls == 5


def test_memory_cache_serves_later_epochs_of_repeat():
    fn = Counted()
    assert values(Dataset.range(4).map(fn).cache().repeat(3)) == [0, 10, 20, 30] * 3
    assert fn.calls == 4


def test_memory_cache_is_per_dataset_object():
    fn = Counted()
    values(Dataset.range(3).map(fn).cache())
    values(Dataset.range(3).map(fn).cache())
    assert fn.calls == 6


def test_memory_cache_partial_pass_is_discarded_with_a_warning(caplog):  # 3.13
    fn = Counted()
    ds = Dataset.range(5).map(fn).cache()
    with caplog.at_level(logging.WARNING, logger="jaxfeed"):
        assert values(ds.take(2)) == [0, 10]
    assert "dataset.take(k).cache()" in caplog.text
    assert values(ds) == [0, 10, 20, 30, 40] and fn.calls == 7  # recomputed in full
    assert values(ds) == [0, 10, 20, 30, 40] and fn.calls == 7  # and now cached


def test_cache_take_repeat_recomputes_each_partial_epoch():  # 3.13, verified
    assert values(Dataset.range(5).cache().take(2).repeat(2)) == [0, 1, 0, 1]


def test_cache_keeps_cardinality():
    assert Dataset.range(7).cache().cardinality() == 7
    assert Dataset.range(7).cache("/nonexistent/x").cardinality() == 7


def test_memory_cache_resumes_mid_first_pass():
    assert_resumes_everywhere(lambda: Dataset.range(6).map(lambda x: x * 2).cache())


def test_memory_cache_resumes_while_replaying():
    assert_resumes_everywhere(lambda: Dataset.range(4).map(lambda x: x * 2).cache().repeat(3))


def test_memory_cache_restored_replay_needs_no_upstream():
    fn = Counted()
    make = lambda: Dataset.range(4).map(fn).cache().repeat(2)  # noqa: E731
    it = iter(make())
    head = [next(it) for _ in range(6)]  # into the replayed epoch
    state = it.get_state()
    it.close()
    calls = fn.calls
    tail = list(make().make_iterator(state=state))
    assert fn.calls == calls and values(head + tail) == [0, 10, 20, 30] * 2


# ------------------------------------------------------------------------------------------------ file
def test_file_cache_is_written_at_the_end_of_a_complete_pass(prefix):  # 3.13
    ds = Dataset.range(5).cache(prefix)
    it = iter(ds)
    next(it)
    assert os.path.exists(prefix + "_0.lockfile")
    assert not os.path.exists(prefix + ".index")
    assert values(it) == [1, 2, 3, 4]
    assert sorted(os.listdir(os.path.dirname(prefix))) == ["cache.data-00000-of-00001", "cache.index"]


def test_file_cache_is_read_by_a_new_dataset_without_recomputing(prefix):
    fn = Counted()
    assert values(Dataset.range(5).map(fn).cache(prefix)) == [0, 10, 20, 30, 40]
    assert values(Dataset.range(5).map(fn).cache(prefix)) == [0, 10, 20, 30, 40]
    assert fn.calls == 5


def test_file_cache_partial_pass_leaves_no_files(prefix, caplog):
    with caplog.at_level(logging.WARNING, logger="jaxfeed"):
        assert values(Dataset.range(5).cache(prefix).take(2)) == [0, 1]
    assert os.listdir(os.path.dirname(prefix)) == []
    assert "partially cached contents" in caplog.text


def test_file_cache_concurrent_writer_is_already_exists(prefix):  # 3.13
    ds = Dataset.range(5).cache(prefix)
    first = iter(ds)
    next(first)
    with pytest.raises(errors.AlreadyExistsError, match="concurrent caching iterator running - cache lockfile already"):
        next(iter(Dataset.range(5).cache(prefix)))
    assert values(first) == [1, 2, 3, 4]
    assert values(Dataset.range(5).cache(prefix)) == [0, 1, 2, 3, 4]


def test_file_cache_missing_directory_is_not_found(tmp_path):
    with pytest.raises(errors.NotFoundError):
        list(Dataset.range(3).cache(str(tmp_path / "missing" / "cache")))


def test_file_cache_round_trips_structures_dtypes_and_strings(memory_prefix):
    Point = collections.namedtuple("Point", "x y")
    data = {"s": np.array([b"a", b"", b"ccc"], dtype=object), "f": np.arange(6, dtype=np.float16).reshape(3, 2),
            "p": Point(np.array([True, False, True]), np.zeros((3, 0), np.int32)), "u": np.arange(3, dtype=np.uint64)}
    ds = Dataset.from_tensor_slices(data).map(lambda e: (e, b"tag", np.asarray(e["f"][0])))
    expected = list(ds)
    first = list(ds.cache(memory_prefix))
    replayed = list(Dataset.from_tensor_slices(data).map(lambda e: 1 / 0).cache(memory_prefix))  # never runs
    assert_elements_equal(first, expected)
    assert_elements_equal(replayed, expected)
    assert type(replayed[0][0]["p"]).__name__ == "Point" and replayed[0][0]["p"].y.shape == (0,)


def test_file_cache_on_memory_filesystem(memory_prefix):
    assert values(Dataset.range(4).cache(memory_prefix)) == [0, 1, 2, 3]
    fs, path = fsspec.core.url_to_fs(memory_prefix)
    assert fs.exists(path + ".index") and not fs.exists(path + "_0.lockfile")


def test_file_cache_of_an_empty_dataset(prefix):
    assert values(Dataset.range(0).cache(prefix)) == []
    assert values(Dataset.range(0).map(lambda x: 1 / 0).cache(prefix)) == []


def test_file_cache_resumes_while_reading(prefix):
    values(Dataset.range(7).cache(prefix))  # finish the cache
    assert_resumes_everywhere(lambda: Dataset.range(7).map(lambda x: 1 / 0).cache(prefix).repeat(2))


def test_file_cache_resumes_while_writing_and_a_later_pass_writes_it(prefix):
    # documented: a restored writer finishes its pass without writing; the next complete pass writes
    make = lambda: Dataset.range(6).map(lambda x: x + 1).cache(prefix)  # noqa: E731
    for k in range(1, 7):  # (k = 0 saves before the first use decides anything: a plain fresh start)
        it = iter(make())
        head = [next(it) for _ in range(k)]
        state = it.get_state()
        it.close()
        assert os.listdir(os.path.dirname(prefix)) == []
        assert values(head + list(make().make_iterator(state=state))) == [1, 2, 3, 4, 5, 6]
        assert not os.path.exists(prefix + ".index") and not os.path.exists(prefix + "_0.lockfile")
    assert values(make()) == [1, 2, 3, 4, 5, 6]
    assert values(Dataset.range(6).map(lambda x: 1 / 0).cache(prefix)) == [1, 2, 3, 4, 5, 6]


@pytest.mark.parametrize("make", [
    lambda: Dataset.from_tensor_slices({"a": np.arange(12.0).reshape(6, 2), "b": (np.arange(6), np.ones((6, 2, 2), bool))}),
    lambda: Dataset.range(1, 7).map(lambda k: (np.arange(k), np.float32(k))),  # shapes vary: record by record
    lambda: Dataset.range(6).map(lambda k: np.asarray(k)),  # 0-d arrays stay 0-d arrays
], ids=["uniform-block", "variable-shapes", "zero-d"])
def test_file_cache_replays_exactly_what_was_recorded(make, prefix):
    expected = list(make())
    assert_elements_equal(list(make().cache(prefix)), expected)
    replayed = list(make().cache(prefix))
    assert_elements_equal(replayed, expected)
    assert [type(x) for x in replayed] == [type(x) for x in expected]


@pytest.mark.parametrize("in_files", [False, True], ids=["memory", "file"])
def test_cache_pass_with_an_input_error_is_not_recorded(in_files, prefix, caplog):
    fn = Counted()

    def flaky(x):
        if x == 2 and fn.calls < 5:
            raise ValueError("flaky element")
        return fn(x)

    ds = Dataset.range(4).map(flaky).cache(prefix if in_files else "")
    it = iter(ds)
    assert values([next(it), next(it)]) == [0, 10]
    with caplog.at_level(logging.WARNING, logger="jaxfeed"), pytest.raises(ValueError, match="flaky"):
        next(it)
    assert values(it) == [30]  # the pass goes on, unrecorded
    assert "will not be cached" in caplog.text
    assert not os.path.exists(prefix + ".index") and not os.path.exists(prefix + "_0.lockfile")
    assert values(ds) == [0, 10, 20, 30]  # a clean pass records
    assert values(ds) == [0, 10, 20, 30] and fn.calls == 7
