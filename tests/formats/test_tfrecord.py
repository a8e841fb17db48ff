"""TFRecordDataset / TFRecordWriter against files written by TensorFlow 2.21 (tests/data)."""

import gzip
import hashlib
import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jaxfeed.formats import TFRecordDataset, TFRecordOptions, TFRecordWriter
from jaxfeed.formats import crc, tfrecord
from jaxfeed.pipeline import Dataset, errors
from jaxfeed.pipeline.testing import assert_resumes_everywhere

EXT = {"": "", "GZIP": ".gz", "ZLIB": ".zz"}


def sha(b):
    return hashlib.sha256(b).hexdigest()


def pair(data_dir, compression):
    return [str(data_dir / f"examples-{i}.tfrecord{EXT[compression]}") for i in range(2)]


@pytest.mark.parametrize("compression", ["", "GZIP", "ZLIB"])
def test_fixture_records_match_manifest_hashes(data_dir, manifest, compression):
    records = list(TFRecordDataset(pair(data_dir, compression), compression_type=compression))
    files = manifest["files"]
    expected = files[f"examples-0.tfrecord{EXT[compression]}"]["record_sha256"] + \
        files[f"examples-1.tfrecord{EXT[compression]}"]["record_sha256"]
    assert [sha(r) for r in records] == expected
    assert all(type(r) is bytes for r in records)


def test_filenames_as_str_list_and_dataset_give_the_same_records(data_dir):
    one = str(data_dir / "examples-0.tfrecord")
    by_str = list(TFRecordDataset(one))
    by_list = list(TFRecordDataset([one]))
    by_dataset = list(TFRecordDataset(Dataset.from_tensor_slices([one])))
    assert by_str == by_list == by_dataset and len(by_str) == 32


def test_interleave_of_file_names_reads_every_file(data_dir):
    names = Dataset.from_tensor_slices(pair(data_dir, ""))
    records = list(names.interleave(TFRecordDataset, cycle_length=2, block_length=1))
    direct = list(TFRecordDataset(pair(data_dir, "")))
    assert records[0::2] == direct[:32] and records[1::2] == direct[32:]


def test_num_parallel_reads_takes_one_record_from_each_file_in_turn(data_dir):
    direct = list(TFRecordDataset(pair(data_dir, "")))
    parallel = list(TFRecordDataset(pair(data_dir, ""), num_parallel_reads=2))
    assert parallel[0::2] == direct[:32] and parallel[1::2] == direct[32:]


def test_raw_sizes_fixture_reads_every_size(data_dir, manifest):
    records = list(TFRecordDataset(str(data_dir / "raw-sizes.tfrecord"), buffer_size=1 << 16))
    entry = manifest["files"]["raw-sizes.tfrecord"]
    assert [len(r) for r in records] == entry["record_sizes"]
    assert [sha(r) for r in records] == entry["record_sha256"]


@pytest.mark.parametrize("name", ["examples-0.tfrecord", "examples-1.tfrecord", "raw-sizes.tfrecord",
                                  "sequences.tfrecord"])
def test_writer_output_is_byte_identical_to_tensorflow(data_dir, manifest, tmp_path, name):
    records = list(TFRecordDataset(str(data_dir / name)))
    out = tmp_path / name
    with TFRecordWriter(str(out)) as w:
        for r in records:
            w.write(r)
    assert sha(out.read_bytes()) == manifest["files"][name]["sha256"]


@pytest.mark.parametrize("compression,decompress", [("GZIP", gzip.decompress), ("ZLIB", zlib.decompress)])
def test_compressed_writer_decompresses_to_tensorflows_stream(data_dir, tmp_path, compression, decompress):
    records = list(TFRecordDataset(str(data_dir / "examples-0.tfrecord")))
    out = tmp_path / "out"
    with TFRecordWriter(str(out), TFRecordOptions(compression_type=compression)) as w:
        w.write_many(records)
    assert decompress(out.read_bytes()) == (data_dir / "examples-0.tfrecord").read_bytes()
    assert decompress((data_dir / f"examples-0.tfrecord{EXT[compression]}").read_bytes()) == \
        (data_dir / "examples-0.tfrecord").read_bytes()
    assert list(TFRecordDataset(str(out), compression)) == records


def test_python_gzip_files_read_back(tmp_path):
    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(tfrecord.frame_many([b"a", b"bc"])))
    assert list(TFRecordDataset(str(path), "GZIP")) == [b"a", b"bc"]


@pytest.mark.parametrize("compression", ["", "GZIP"])
def test_resumes_at_every_position(data_dir, compression):
    names = pair(data_dir, compression)
    assert_resumes_everywhere(lambda: TFRecordDataset(names, compression, buffer_size=700))


@settings(max_examples=30, deadline=None)
@given(st.lists(st.binary(max_size=300), max_size=40), st.sampled_from(["", "GZIP", "ZLIB"]),
       st.integers(1, 2000))
def test_random_records_round_trip(tmp_path_factory, records, compression, buffer_size):
    path = str(tmp_path_factory.mktemp("rt") / "f")
    with TFRecordWriter(path, compression) as w:
        for r in records:
            w.write(r)
    assert list(TFRecordDataset(path, compression, buffer_size=buffer_size)) == records


def test_frame_many_equals_framing_one_by_one():
    records = [b"", b"x" * 1000, bytes(range(256))]
    assert tfrecord.frame_many(records) == b"".join(map(tfrecord.frame, records))


def test_vectorised_length_crc_equals_google_crc32c():
    rows = np.random.default_rng(0).integers(0, 256, (64, 8), dtype=np.uint8)
    assert crc.masked_crc32c_rows(rows).tolist() == [crc.masked_crc32c(r.tobytes()) for r in rows]


def test_unknown_compression_type_raises_value_error(data_dir):
    with pytest.raises(ValueError, match="BZ2"):
        TFRecordDataset(str(data_dir / "examples-0.tfrecord"), compression_type="BZ2")


def test_non_string_filenames_raise_type_error():
    with pytest.raises(TypeError, match="string"):
        TFRecordDataset([1, 2])
    with pytest.raises(TypeError, match="string"):
        TFRecordDataset(Dataset.range(3))


def test_reader_node_lists_its_files(data_dir):
    names = pair(data_dir, "")
    node = TFRecordDataset(names)._node
    assert node.reads_files and node.files() == names


def test_list_files_then_interleave_reads_every_file(data_dir):
    pattern = str(data_dir / "examples-*.tfrecord")
    files = Dataset.list_files(pattern, shuffle=False)
    records = list(files.interleave(TFRecordDataset, cycle_length=1))
    assert records == list(TFRecordDataset(pair(data_dir, "")))


def test_num_parallel_reads_autotune_uses_a_fixed_portable_cycle(tmp_path):
    from jaxfeed.formats.reader import AUTOTUNE_CYCLE_LENGTH
    from jaxfeed.pipeline import AUTOTUNE

    names = []
    for i in range(AUTOTUNE_CYCLE_LENGTH + 1):
        names.append(str(tmp_path / f"f{i}"))
        (tmp_path / f"f{i}").write_bytes(tfrecord.frame_many([f"{i}-{k}".encode() for k in range(2)]))
    got = list(TFRecordDataset(names, num_parallel_reads=AUTOTUNE))
    cycle = AUTOTUNE_CYCLE_LENGTH
    assert got[:cycle] == [f"{i}-0".encode() for i in range(cycle)]
    assert sorted(got) == sorted(f"{i}-{k}".encode() for i in range(cycle + 1) for k in range(2))


def test_parallel_reads_resume_everywhere(data_dir):
    names = pair(data_dir, "")
    assert_resumes_everywhere(lambda: TFRecordDataset(names, num_parallel_reads=2).take(20))


def test_num_parallel_reads_must_be_positive(data_dir):
    with pytest.raises(errors.InvalidArgumentError):
        TFRecordDataset(pair(data_dir, ""), num_parallel_reads=0)


def test_a_shard_put_on_the_file_names_reads_only_those_files(data_dir):
    names = pair(data_dir, "")
    node = TFRecordDataset(names)._node
    sharded = node.with_inputs([Dataset.from_tensor_slices(names).shard(2, 1)._node])
    assert list(Dataset(sharded)) == list(TFRecordDataset(names[1]))


def test_unchecked_damaged_length_is_a_truncated_record_not_a_huge_allocation(tmp_path):
    """verify_crc=False believes the length field; a damaged one (here ~2**62) must end in DataLossError
    naming the file, not in MemoryError/OverflowError."""
    import struct

    from jaxfeed.formats import TFRecordDataset, TFRecordWriter
    from jaxfeed.pipeline import errors

    path = str(tmp_path / "bad.tfrecord")
    with TFRecordWriter(path) as w:
        w.write(b"a" * 10)
        w.write(b"b" * 10)
    data = bytearray(open(path, "rb").read())
    second = 8 + 4 + 10 + 4
    data[second:second + 8] = struct.pack("<Q", 2**62)
    open(path, "wb").write(bytes(data))
    it = iter(TFRecordDataset(path, verify_crc=False))
    assert next(it) == b"a" * 10
    with pytest.raises(errors.DataLossError, match="bad.tfrecord"):
        next(it)
