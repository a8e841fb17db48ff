"""list_files (docs/tf-behaviour.md#list-files)."""

import os

import fsspec
import numpy as np
import pytest

from jaxfeed.pipeline import Dataset, TensorSpec, errors


# -------------------------------------------------------------------------------------------- list_files
@pytest.fixture
def files(tmp_path):
    for name in ["b.txt", "a.txt", "c.dat"]:
        (tmp_path / name).write_text(name)
    return tmp_path


def test_list_files_returns_sorted_full_paths(files):
    out = list(Dataset.list_files(str(files / "*.txt"), shuffle=False))
    assert out == [os.fsencode(files / "a.txt"), os.fsencode(files / "b.txt")]
    assert Dataset.list_files(str(files / "*.txt")).element_spec == TensorSpec((), np.object_)


def test_list_files_pools_patterns_and_keeps_duplicates(files):
    out = list(Dataset.list_files([str(files / "*.txt"), str(files / "a*")], shuffle=False))
    assert [os.path.basename(p) for p in out] == [b"a.txt", b"a.txt", b"b.txt"]


def test_list_files_no_match_raises_at_construction(files):
    with pytest.raises(errors.InvalidArgumentError, match="No files matched pattern: .*nothing"):
        Dataset.list_files(str(files / "nothing*"))


def test_list_files_shuffles_by_default_and_reproduces_with_seed(files):
    ds = Dataset.list_files(str(files / "*"), seed=4)
    epochs = [list(ds) for _ in range(6)]
    assert all(sorted(e) == sorted(epochs[0]) for e in epochs)
    assert len({tuple(e) for e in epochs}) > 1  # reshuffled each epoch [1.5]
    again = Dataset.list_files(str(files / "*"), seed=4)
    assert [list(again) for _ in range(6)] == epochs


def test_list_files_is_random_access_with_known_cardinality(files):
    ds = Dataset.list_files(str(files / "*"), shuffle=False)
    assert ds.cardinality() == 3 and ds._node.random_access()
    assert ds._node.files() == sorted(str(files / n) for n in ["a.txt", "b.txt", "c.dat"])


def test_list_files_keeps_file_and_memory_protocols(files):
    assert list(Dataset.list_files(f"file://{files}/*.dat", shuffle=False)) == [f"file://{files}/c.dat".encode()]
    memory = fsspec.filesystem("memory")
    memory.pipe("/jaxfeed-list-files/r1.rec", b"1")
    memory.pipe("/jaxfeed-list-files/r0.rec", b"0")
    out = list(Dataset.list_files("memory://jaxfeed-list-files/*.rec", shuffle=False))
    assert out == [b"memory:///jaxfeed-list-files/r0.rec", b"memory:///jaxfeed-list-files/r1.rec"]
    with fsspec.open(out[0].decode(), "rb") as f:
        assert f.read() == b"0"


def test_list_files_feeds_interleave(files):
    ds = Dataset.list_files(str(files / "*.txt"), shuffle=False).interleave(
        lambda f: Dataset.from_tensors(f).map(lambda p: os.path.basename(p)), cycle_length=2, num_parallel_calls=2)
    assert list(ds) == [b"a.txt", b"b.txt"]
