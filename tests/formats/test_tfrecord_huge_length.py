"""A TFRecord header whose length CRC is valid but whose length is huge -- a file of 8-byte ids or timestamps
that lost a 12-byte span is exactly that -- is a truncated record (DataLossError at the header's offset),
on both the C and the Python path, with and without compression, and the reader never allocates the
claimed length (peak memory stays small, whatever the length says)."""

import gzip
import struct
import tracemalloc

import pytest

from jaxfeed.formats import TFRecordDataset, crc, tfrecord
from jaxfeed.pipeline import errors

GOOD = [b"x" * 100] * 20
HUGE_LENGTHS = [1_800_000_000, 2**40, 2**64 - 1000]  # fits in memory? no; > ssize_t; near 2**64
PEAK_LIMIT = 32 << 20  # generous: the reader's own buffers are ~0.6 MiB


def valid_header(length: int) -> bytes:
    field = struct.pack("<Q", length)
    return field + struct.pack("<I", crc.masked_crc32c(field))


@pytest.fixture(params=["c", "python"])
def path_kind(request, monkeypatch):
    if request.param == "c":
        if tfrecord._split_records is None:
            pytest.skip("the C extension is not built")
    else:
        monkeypatch.setattr(tfrecord, "_split_records", None)
    return request.param


@pytest.mark.parametrize("length", HUGE_LENGTHS)
@pytest.mark.parametrize("compression", ["", "GZIP"])
def test_a_huge_length_with_a_valid_crc_is_a_truncated_record(tmp_path, path_kind, length, compression):
    data = tfrecord.frame_many(GOOD) + valid_header(length) + b"y" * 100
    bad_offset = len(tfrecord.frame_many(GOOD))
    path = tmp_path / "ids.tfrecord"
    path.write_bytes(gzip.compress(data) if compression else data)
    got = []
    tracemalloc.start()
    try:
        with pytest.raises(errors.DataLossError, match=f"truncated record at {bad_offset}") as info:
            for record in TFRecordDataset(str(path), compression_type=compression):
                got.append(record)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == GOOD
    assert info.value.offset == bad_offset and info.value.filename == str(path)
    assert peak < PEAK_LIMIT, f"peak {peak} bytes for a {len(data)}-byte file"


def test_an_unchecked_huge_length_is_bounded_too(tmp_path, path_kind):
    """verify_crc=False cannot tell a damaged length: it must still not allocate it."""
    path = tmp_path / "r.tfrecord"
    path.write_bytes(tfrecord.frame_many(GOOD) + struct.pack("<QI", 2**62, 0) + b"z" * 50)
    tracemalloc.start()
    try:
        with pytest.raises(errors.DataLossError, match="truncated record"):
            list(TFRecordDataset(str(path), verify_crc=False))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < PEAK_LIMIT


def test_a_large_genuine_record_is_still_read(tmp_path, path_kind):
    """Bounding by the file size must not refuse a record the file does hold (one larger than a block)."""
    records = [b"a" * 10, bytes(range(256)) * 12_000, b"b"]
    for compression in ["", "GZIP"]:
        path = tmp_path / f"big{compression}.tfrecord"
        data = tfrecord.frame_many(records)
        path.write_bytes(gzip.compress(data) if compression else data)
        assert list(TFRecordDataset(str(path), compression_type=compression)) == records


def test_a_large_record_from_a_pipe_is_read(tmp_path, path_kind):
    """A pipe's st_size is 0: it must not bound reads (only a regular file's size does)."""
    import os
    import threading

    records = [b"p" * 10, bytes(range(256)) * 4_000, b"q"]
    fifo = tmp_path / "records.fifo"
    os.mkfifo(fifo)
    data = tfrecord.frame_many(records)

    def write():
        with open(fifo, "wb") as f:
            f.write(data)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        assert list(TFRecordDataset(str(fifo))) == records
    finally:
        writer.join(10)
