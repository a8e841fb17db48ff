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
