"""ParquetDataset's gather of consecutive rows (the common batch) takes slices of the cached row groups
without per-row index work: every run -- within a row group, across several, across files, over an empty
row group -- gives what the whole table gives, and index arrays that only look like runs are not taken as runs."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jaxfeed.formats import ParquetDataset


@pytest.fixture()
def node(tmp_path):
    names = []
    for k, sizes in enumerate([(5, 5, 3), (0, 4, 5)]):  # row groups of each file; an empty one in the second
        path = str(tmp_path / f"p{k}.parquet")
        start = 0 if k == 0 else 13
        schema = pa.schema([("id", pa.int64()), ("name", pa.string())])
        with pq.ParquetWriter(path, schema) as w:
            for size in sizes:
                ids = np.arange(start, start + size)
                w.write_table(pa.table({"id": ids, "name": [f"n{i}" for i in ids]}, schema=schema),
                              row_group_size=max(size, 1))
                start += size
        names.append(path)
    return ParquetDataset(names)._node


def test_every_run_of_rows_is_the_whole_tables_rows(node):
    total = node.length()
    assert total == 22
    for lo in range(total):
        for hi in range(lo + 1, total + 1):
            got = node.gather(np.arange(lo, hi))
            assert got["id"].tolist() == list(range(lo, hi)), (lo, hi)
            assert got["name"].tolist() == [f"n{i}".encode() for i in range(lo, hi)]
            assert got["id"].dtype == np.int64 and got["name"].dtype == object


def test_indices_with_a_runs_span_but_another_order_are_gathered_row_by_row(node):
    for indices in ([3, 2, 4, 5], [0, 2, 1, 3], [7, 8, 8, 10][:3] + [9]):
        got = node.gather(np.array(indices))
        assert got["id"].tolist() == indices


def test_a_batch_from_a_run_is_a_copy_not_a_view_of_the_cached_row_group(node):
    first = node.gather(np.arange(0, 4))
    first["id"][:] = -1
    assert node.gather(np.arange(0, 4))["id"].tolist() == [0, 1, 2, 3]


def test_consecutive_runs_within_a_row_group_look_the_row_group_up_once(node, monkeypatch):
    from jaxfeed.formats import arrow

    looked_up = []
    real = arrow.ArrowReader.unit_columns
    monkeypatch.setattr(arrow.ArrowReader, "unit_columns", lambda self, k: looked_up.append(k) or real(self, k))
    for lo in range(0, 4, 2):  # rows 0:2 and 2:4 of the first row group (rows 0..4)
        assert node.gather(np.arange(lo, lo + 2))["id"].tolist() == [lo, lo + 1]
    assert looked_up == [0]


def test_a_run_in_a_row_group_the_cache_dropped_is_read_again(node):
    from jaxfeed.formats.arrow import CACHE_UNITS

    first = node.gather(np.arange(0, 2))  # row group 0 becomes the recent one
    for k in range(1, CACHE_UNITS + 1):  # later row groups push it out of the cache
        node.gather(np.arange(5 * k, 5 * k + 2))
    assert node._recent is None or node._recent[3] != 0
    again = node.gather(np.arange(2, 4))
    assert again["id"].tolist() == [2, 3] and first["id"].tolist() == [0, 1]
    assert again["name"].tolist() == [b"n2", b"n3"]


def test_reading_the_index_leaves_the_first_files_open_for_the_first_reads(tmp_path, monkeypatch):
    from jaxfeed.formats import arrow

    names = []
    for k in range(4):
        path = str(tmp_path / f"f{k}.parquet")
        pq.write_table(pa.table({"id": np.arange(3 * k, 3 * k + 3)}), path)
        names.append(path)
    opened = []
    real = arrow._File.__init__

    def counting(self, url, *args, **kwargs):
        opened.append(url)
        real(self, url, *args, **kwargs)

    monkeypatch.setattr(arrow._File, "__init__", counting)
    node = ParquetDataset(names)._node
    assert node.gather(np.arange(0, 12))["id"].tolist() == list(range(12))
    assert [opened.count(n) for n in names[:arrow.OPEN_FILES]] == [1] * arrow.OPEN_FILES
    assert len(node._open) <= arrow.OPEN_FILES


def test_runs_gathered_on_many_threads_at_once_are_each_the_tables_rows(node):
    from concurrent.futures import ThreadPoolExecutor

    total = node.length()
    runs = [(lo, hi) for lo in range(total) for hi in range(lo + 1, min(total, lo + 6) + 1)] * 4
    np.random.default_rng(0).shuffle(runs)

    def gather(run):
        lo, hi = run
        got = node.gather(np.arange(lo, hi))
        return got["id"].tolist() == list(range(lo, hi)) and \
            got["name"].tolist() == [f"n{i}".encode() for i in range(lo, hi)]

    with ThreadPoolExecutor(4) as pool:
        assert all(pool.map(gather, runs))


def _files(node):
    return node.files()


@pytest.mark.parametrize("size, drop", [(3, False), (4, True), (22, False)])
def test_a_batch_of_the_plain_stream_slices_spans_without_an_index_array(node, monkeypatch, size, drop):
    from jaxfeed.formats import arrow

    def no_index_arrays(self, indices):
        raise AssertionError("gather was given an index array")

    monkeypatch.setattr(arrow.ArrowReader, "gather", no_index_arrays)
    batches = list(ParquetDataset(_files(node)).batch(size, drop_remainder=drop))
    ids = list(range(22))
    expected = [ids[i:i + size] for i in range(0, 22, size) if not drop or i + size <= 22]
    assert [b["id"].tolist() for b in batches] == expected
    assert [b["name"].tolist() for b in batches] == [[f"n{i}".encode() for i in e] for e in expected]
    assert all(b["id"].dtype == np.int64 and b["name"].dtype == object for b in batches)


def test_batches_of_the_plain_stream_resume_everywhere(node):
    from jaxfeed.pipeline.testing import assert_resumes_everywhere

    assert_resumes_everywhere(lambda: ParquetDataset(_files(node)).batch(4))
