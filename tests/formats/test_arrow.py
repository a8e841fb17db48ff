"""Parquet / Arrow IPC / Feather datasets: projection, rows vs batches, random access, row-group shards."""

import numpy as np
import pyarrow as pa
import pyarrow.feather as feather
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

from jaxfeed.formats import ArrowDataset, ParquetDataset
from jaxfeed.formats import arrow
from jaxfeed.formats.arrow import CACHE_UNITS, OPEN_FILES
from jaxfeed.pipeline import Dataset
from jaxfeed.pipeline.testing import assert_resumes_everywhere

N = 23


def table(offset=0):
    ids = np.arange(offset, offset + N)
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids], "x": ids.astype(np.float32) / 2})


@pytest.fixture()
def parquet_files(tmp_path):
    names = []
    for k in range(2):
        path = tmp_path / f"p{k}.parquet"
        pq.write_table(table(k * N), str(path), row_group_size=5)
        names.append(str(path))
    return names


def test_parquet_rows_with_projection(parquet_files):
    ds = ParquetDataset(parquet_files, columns=["id", "name"])
    rows = list(ds)
    assert len(ds) == 2 * N and len(rows) == 2 * N
    assert rows[7] == {"id": 7, "name": b"n7"} and set(rows[0]) == {"id", "name"}
    assert ds.element_spec["name"].dtype == object


def test_parquet_batch_gathers_slices_of_row_groups(parquet_files):
    batches = list(ParquetDataset(parquet_files).batch(8))
    assert np.concatenate([b["id"] for b in batches]).tolist() == list(range(2 * N))
    assert batches[1]["name"].dtype == object and batches[1]["x"].dtype == np.float32


def test_parquet_gather_of_scattered_indices(parquet_files):
    node = ParquetDataset(parquet_files)._node
    got = node.gather(np.array([40, 3, 22, 23, 3]))
    assert got["id"].tolist() == [40, 3, 22, 23, 3] and got["name"][0] == b"n40"


def test_parquet_record_batch_mode(parquet_files):
    batches = list(ParquetDataset(parquet_files, batch_size=4))
    assert all(len(b["id"]) <= 4 for b in batches)
    assert np.concatenate([b["id"] for b in batches]).tolist() == list(range(2 * N))


def test_parquet_units_and_shards_by_row_group(parquet_files):
    ds = ParquetDataset(parquet_files)
    units = ds.units()
    assert len(units) == 10 and units[0] == (parquet_files[0], 0, 5)
    shards = [[r["id"] for r in ds.shard_units(3, i)] for i in range(3)]
    assert sorted(sum(shards, [])) == list(range(2 * N))
    assert shards[0][:5] == [0, 1, 2, 3, 4] and shards[1][:5] == [5, 6, 7, 8, 9]


def test_parquet_resumes_everywhere_through_shuffle_and_batch(parquet_files):
    assert_resumes_everywhere(lambda: ParquetDataset(parquet_files).shuffle(7, seed=3).batch(5))


def test_parquet_streams_when_files_come_from_a_dataset(parquet_files):
    names = Dataset.from_tensor_slices(parquet_files).map(lambda f: f)
    rows = list(ParquetDataset(names))
    assert [r["id"] for r in rows] == list(range(2 * N))
    assert_resumes_everywhere(lambda: ParquetDataset(names, columns=["id"]))


@pytest.mark.parametrize("writer", ["feather", "ipc_file", "ipc_stream"])
def test_arrow_formats_read_rows(tmp_path, writer):
    path = str(tmp_path / "t.arrow")
    t = table()
    if writer == "feather":
        feather.write_feather(t, path, chunksize=6)
    elif writer == "ipc_file":
        with ipc.new_file(path, t.schema) as w:
            w.write_table(t, max_chunksize=6)
    else:
        with ipc.new_stream(path, t.schema) as w:
            w.write_table(t, max_chunksize=6)
    ds = ArrowDataset(path, columns=["id", "name"])
    assert [r["id"] for r in ds] == list(range(N)) and len(ds.units()) == 4
    assert list(ds)[3]["name"] == b"n3"
    assert_resumes_everywhere(lambda: ArrowDataset(path).batch(7))


def test_element_spec_of_a_run_time_file_list_comes_from_its_first_file(parquet_files):
    names = Dataset.from_tensor_slices(parquet_files).map(lambda f: f)
    spec = ParquetDataset(names, columns=["id", "name"]).element_spec
    assert set(spec) == {"id", "name"} and spec["id"].dtype == np.int64


def test_many_files_do_not_stay_open(tmp_path):
    names = []
    for k in range(20):
        names.append(str(tmp_path / f"s{k}.parquet"))
        pq.write_table(pa.table({"v": [k]}), names[-1])
    ds = ParquetDataset(names)
    assert [r["v"] for r in ds] == list(range(20))
    assert len(ds._node._open) <= OPEN_FILES


def test_a_cached_unit_keeps_its_strings_in_arrow_until_a_batch_takes_them(parquet_files):
    node = ParquetDataset(parquet_files)._node
    batch = node.gather(np.arange(2, 4))
    cached = node.unit_columns(0)
    assert isinstance(cached["name"], pa.Array) and isinstance(cached["id"], np.ndarray)
    assert batch["name"].dtype == object and batch["name"].tolist() == [b"n2", b"n3"]


def test_gathers_of_strings_with_nulls_match_the_whole_table(tmp_path):
    values = [None if i % 3 == 0 else f"s{i}" for i in range(12)]
    path = str(tmp_path / "nulls.parquet")
    pq.write_table(pa.table({"s": pa.array(values, type=pa.large_string()), "b": [v and v.encode() for v in values]}),
                   path, row_group_size=5)
    node = ParquetDataset(path)._node
    expected = [None if v is None else v.encode() for v in values]
    contiguous = node.gather(np.arange(3, 12))  # spans three row groups
    scattered = node.gather(np.array([11, 0, 4, 5, 4]))
    assert contiguous["s"].tolist() == expected[3:] and contiguous["b"].tolist() == expected[3:]
    assert scattered["s"].tolist() == [expected[i] for i in [11, 0, 4, 5, 4]]
    assert scattered["b"].dtype == object


def test_no_more_than_cache_units_row_groups_stay_decoded(parquet_files):
    node = ParquetDataset(parquet_files)._node
    for _ in Dataset(node).batch(3):
        assert len(node._cache) <= CACHE_UNITS


def test_garbage_parquet_file_is_data_loss_naming_it(tmp_path):
    from jaxfeed.pipeline import errors

    path = tmp_path / "bad.parquet"
    path.write_bytes(b"not parquet at all" * 10)
    with pytest.raises(errors.DataLossError, match="bad.parquet"):
        list(ParquetDataset(str(path)))


def test_a_shard_put_on_the_file_names_reads_only_those_files(parquet_files):
    node = ParquetDataset(parquet_files)._node
    sharded = node.with_inputs([Dataset.from_tensor_slices(parquet_files).shard(2, 1)._node])
    assert [r["id"] for r in Dataset(sharded)] == list(range(N, 2 * N))


def test_parallel_batch_gathers_the_same_rows(parquet_files):
    plain = list(ParquetDataset(parquet_files).batch(4))
    parallel = list(ParquetDataset(parquet_files).batch(4, num_parallel_calls=4))
    assert [b["id"].tolist() for b in parallel] == [b["id"].tolist() for b in plain]


def test_node_pickles_without_its_open_files(parquet_files):
    import pickle

    node = ParquetDataset(parquet_files)._node
    node.gather(np.arange(3))
    copy = pickle.loads(pickle.dumps(node))
    assert copy.gather(np.arange(3))["id"].tolist() == [0, 1, 2]


def test_a_streaming_reader_hands_on_at_most_stream_rows_rows_per_block(parquet_files, monkeypatch):
    monkeypatch.setattr(arrow, "STREAM_ROWS", 2)
    node = ParquetDataset(parquet_files)._node
    source = arrow._UnitSource(node, parquet_files[0], None)
    blocks = []
    while True:
        items, offsets, _ = source.read_block()
        if not items:
            break
        blocks.append(offsets)
    assert blocks[:4] == [[(0, 0), (0, 1)], [(0, 2), (0, 3)], [(0, 4)], [(1, 0), (1, 1)]]
    assert sum(map(len, blocks)) == N


def test_streamed_rows_in_small_blocks_resume_everywhere(parquet_files, monkeypatch):
    monkeypatch.setattr(arrow, "STREAM_ROWS", 2)
    names = Dataset.from_tensor_slices(parquet_files).map(lambda f: f)
    assert [r["name"] for r in ParquetDataset(names)] == [f"n{i}".encode() for i in range(2 * N)]
    assert_resumes_everywhere(lambda: ParquetDataset(names, columns=["id", "name"]))


def test_streamed_record_batches_keep_their_row_group_boundaries_in_small_blocks(parquet_files, monkeypatch):
    monkeypatch.setattr(arrow, "STREAM_ROWS", 4)
    batches = [b["id"].tolist() for b in ParquetDataset(parquet_files[:1], batch_size=3)]
    assert batches[:4] == [[0, 1, 2], [3, 4], [5, 6, 7], [8, 9]]
    assert_resumes_everywhere(lambda: ParquetDataset(parquet_files, batch_size=3))
