"""``ArrayRecordDataset`` over files written by the real ``array_record`` library (skipped without it)."""

import numpy as np
import pytest

pytest.importorskip("array_record.python.array_record_module")

from array_record.python.array_record_module import ArrayRecordWriter as LibraryWriter  # noqa: E402

from jaxfeed.formats.array_record import ArrayRecordDataset, ArrayRecordWriter  # noqa: E402
from jaxfeed.pipeline import Dataset  # noqa: E402
from jaxfeed.pipeline.errors import NotFoundError, UnimplementedError  # noqa: E402


@pytest.fixture
def files(tmp_path):
    names = []
    for f, count in enumerate([5, 0, 7]):
        path = str(tmp_path / f"part-{f}.array_record")
        writer = LibraryWriter(path, "group_size:1")
        for i in range(count):
            writer.write(b"f%d-r%d" % (f, i))
        writer.close()
        names.append(path)
    return names


def _want(files):
    return [b"f0-r%d" % i for i in range(5)] + [b"f2-r%d" % i for i in range(7)]


def test_records_come_file_after_file_with_a_known_length(files):
    ds = ArrayRecordDataset(files)
    assert ds.cardinality() == 12 and len(ds) == 12
    assert ds.as_numpy() == _want(files)
    assert ds.element_spec == Dataset.from_tensors(b"").element_spec


def test_shuffle_shard_and_batch_work_on_indices(files):
    want = _want(files)
    shuffled = [bytes(x) for x in ArrayRecordDataset(files).shuffle(12, seed=1)]
    assert sorted(shuffled) == sorted(want) and shuffled != want
    assert [bytes(x) for x in ArrayRecordDataset(files).shard(3, 1)] == want[1::3]
    batches = ArrayRecordDataset(files).skip(2).batch(4).as_numpy()
    assert [b.tolist() for b in batches] == [want[2:6], want[6:10], want[10:12]]


def test_a_run_time_file_list_streams_the_files(files):
    names = Dataset.from_tensor_slices(np.array(files, dtype=object)).filter(lambda f: True)
    ds = ArrayRecordDataset(names)
    assert ds.as_numpy() == _want(files)
    it = ds.make_iterator()
    head = [next(it) for _ in range(6)]
    assert head + list(ds.make_iterator(state=it.get_state())) == _want(files)


def test_random_access_resumes_exactly(files):
    ds = ArrayRecordDataset(files).shuffle(12, seed=3, reshuffle_each_iteration=False).batch(5)
    want = [b.tolist() for b in ds]
    it = ds.make_iterator()
    first = next(it).tolist()
    assert [first] + [b.tolist() for b in ds.make_iterator(state=it.get_state())] == want


def test_our_writer_writes_what_the_library_reads(tmp_path):
    path = str(tmp_path / "w.array_record")
    with ArrayRecordWriter(path) as w:
        for i in range(4):
            w.write(b"x%d" % i)
    assert ArrayRecordDataset(path).as_numpy() == [b"x0", b"x1", b"x2", b"x3"]


def test_missing_and_remote_files_are_clear_errors(tmp_path):
    with pytest.raises(NotFoundError):
        ArrayRecordDataset(str(tmp_path / "nope.array_record")).as_numpy()
    with pytest.raises(UnimplementedError):
        ArrayRecordDataset("memory://x.array_record").as_numpy()
