"""Damaged TFRecord files: data-loss errors naming file and offset, never a hang or a wrong record."""

import pytest

from jaxfeed.formats import TFRecordDataset, TFRecordWriter
from jaxfeed.formats import tfrecord
from jaxfeed.pipeline import errors

RECORDS = [b"alpha", b"", b"gamma-gamma", b"d" * 40]


def write(path, records=RECORDS):
    path.write_bytes(tfrecord.frame_many(records))
    return str(path)


def read_all(path, **kw):
    """Records until the end or the first error (returned too)."""
    it = iter(TFRecordDataset(path, **kw))
    out = []
    while True:
        try:
            out.append(next(it))
        except StopIteration:
            return out, None
        except errors.DataLossError as e:
            return out, e


def offsets(records=RECORDS):
    starts, pos = [], 0
    for r in records:
        starts.append(pos)
        pos += len(r) + 16
    return starts, pos


def test_bad_payload_crc_raises_corrupted_record_after_the_good_ones(tmp_path):
    raw = bytearray(tfrecord.frame_many(RECORDS))
    starts, _ = offsets()
    raw[starts[2] + 12] ^= 0xFF  # a payload byte of record 2
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(bytes(raw))
    got, error = read_all(str(path))
    assert got == RECORDS[:2]
    assert f"corrupted record at {starts[2]}" in str(error) and str(path) in str(error)
    assert error.filename == str(path) and error.offset == starts[2]


def test_bad_length_crc_asks_whether_this_is_a_tfrecord_file(tmp_path):
    raw = bytearray(tfrecord.frame_many(RECORDS))
    starts, _ = offsets()
    raw[starts[1] + 9] ^= 0x01
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(bytes(raw))
    got, error = read_all(str(path))
    assert got == RECORDS[:1]
    assert f"corrupted record at {starts[1]} (Is this even a TFRecord file?)" in str(error)


def test_garbage_file_is_not_a_tfrecord(tmp_path):
    path = tmp_path / "garbage"
    path.write_bytes(b"this is plainly not a tfrecord file at all" * 10)
    got, error = read_all(str(path))
    assert got == [] and "Is this even a TFRecord file?" in str(error) and error.offset == 0


def test_gzip_file_read_as_plain_is_data_loss(data_dir):
    got, error = read_all(str(data_dir / "examples-0.tfrecord.gz"))
    assert got == [] and isinstance(error, errors.DataLossError)


def test_plain_file_read_as_gzip_is_data_loss(data_dir):
    got, error = read_all(str(data_dir / "examples-0.tfrecord"), compression_type="GZIP")
    assert got == [] and str(data_dir / "examples-0.tfrecord") in str(error)


def test_truncated_gzip_is_data_loss(data_dir, tmp_path):
    path = tmp_path / "cut.gz"
    path.write_bytes((data_dir / "examples-0.tfrecord.gz").read_bytes()[:-40])
    got, error = read_all(str(path), compression_type="GZIP")
    assert isinstance(error, errors.DataLossError) and len(got) < 32


def test_truncation_at_every_byte_is_a_clean_end_or_data_loss(tmp_path):
    raw = tfrecord.frame_many(RECORDS)
    starts, end = offsets()
    for cut in range(len(raw) + 1):
        path = tmp_path / f"cut{cut}"
        path.write_bytes(raw[:cut])
        for buffer_size in (None, 1):
            got, error = read_all(str(path), buffer_size=buffer_size)
            complete = sum(1 for s, r in zip(starts, RECORDS) if s + len(r) + 16 <= cut)
            assert got == RECORDS[:complete], cut
            if complete < len(RECORDS):
                start = starts[complete]
                if cut - start < 12:  # inside the header: tf.data's clean end of file
                    assert error is None, cut
                else:
                    assert error is not None and f"truncated record at {start}" in str(error), cut
                    assert error.filename == str(path) and error.offset == start
            else:
                assert error is None


def test_after_data_loss_the_reader_goes_on_with_the_next_file(tmp_path):
    bad = tmp_path / "bad"
    bad.write_bytes(b"garbage garbage garbage")
    good = write(tmp_path / "good")
    it = iter(TFRecordDataset([str(bad), good]))
    with pytest.raises(errors.DataLossError):
        next(it)
    assert list(it) == RECORDS


def test_ignore_errors_skips_a_record_with_a_bad_payload_crc_and_reads_on(tmp_path):
    first = write(tmp_path / "a")
    raw = bytearray(tfrecord.frame_many(RECORDS))
    raw[offsets()[0][2] + 12] ^= 0xFF  # record 2's payload
    (tmp_path / "b").write_bytes(bytes(raw))
    third = write(tmp_path / "c", [b"last"])
    ds = TFRecordDataset([first, str(tmp_path / "b"), third]).ignore_errors()
    it = iter(ds)
    assert list(it) == RECORDS + RECORDS[:2] + RECORDS[3:] + [b"last"]
    assert [(s.get("filename"), s.get("offset")) for s in it.skipped] == [(str(tmp_path / "b"), offsets()[0][2])]


def test_ignore_errors_skips_the_rest_of_a_file_whose_framing_is_lost(tmp_path):
    raw = bytearray(tfrecord.frame_many(RECORDS))
    raw[offsets()[0][1] + 2] ^= 0xFF  # record 1's length
    (tmp_path / "b").write_bytes(bytes(raw))
    last = write(tmp_path / "c", [b"last"])
    assert list(TFRecordDataset([str(tmp_path / "b"), last]).ignore_errors()) == RECORDS[:1] + [b"last"]


def test_resume_around_a_corrupted_record(tmp_path):
    from jaxfeed.pipeline.testing import assert_resumes_everywhere

    raw = bytearray(tfrecord.frame_many(RECORDS))
    raw[offsets()[0][2] + 12] ^= 0xFF
    (tmp_path / "b").write_bytes(bytes(raw))
    names = [str(tmp_path / "b"), write(tmp_path / "c", [b"last"])]
    assert_resumes_everywhere(lambda: TFRecordDataset(names).ignore_errors())


def test_missing_file_raises_not_found_after_the_earlier_files(tmp_path):
    good = write(tmp_path / "good")
    missing = str(tmp_path / "nope.tfrecord")
    it = iter(TFRecordDataset([good, missing, good]))
    assert [next(it) for _ in RECORDS] == RECORDS
    with pytest.raises(errors.NotFoundError, match="nope.tfrecord"):
        next(it)
    assert list(it) == RECORDS


def test_missing_file_is_a_python_file_not_found_error(tmp_path):
    with pytest.raises(FileNotFoundError):
        list(TFRecordDataset(str(tmp_path / "missing")))


def test_writer_refuses_writes_after_close(tmp_path):
    w = TFRecordWriter(str(tmp_path / "w"))
    w.close()
    with pytest.raises(errors.FailedPreconditionError):
        w.write(b"x")


def test_corruption_inside_a_run_of_same_size_records_is_found_at_its_record(tmp_path):
    records = [b"r" * 10] * 20 + [b"odd", b"sizes!"] + [bytes([i]) * 7 for i in range(30)]
    raw = bytearray(tfrecord.frame_many(records))
    starts, _ = offsets(records)
    raw[starts[35] + 14] ^= 0x40  # a payload byte of record 35, inside the run of 7-byte records
    path = tmp_path / "runs.tfrecord"
    path.write_bytes(bytes(raw))
    got, error = read_all(str(path))
    assert got == records[:35] and error.offset == starts[35]
    raw = bytearray(tfrecord.frame_many(records))
    raw[starts[12] + 3] ^= 0x01  # the length field of record 12, inside the run of 10-byte records
    path.write_bytes(bytes(raw))
    got, error = read_all(str(path))
    assert got == records[:12] and "Is this even a TFRecord" in str(error) and error.offset == starts[12]


def test_damaged_gzip_stream_ends_that_file_and_ignore_errors_goes_on(data_dir, tmp_path):
    raw = bytearray((data_dir / "examples-0.tfrecord.gz").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (tmp_path / "bad.gz").write_bytes(bytes(raw))
    good = str(data_dir / "examples-1.tfrecord.gz")
    records = list(TFRecordDataset([str(tmp_path / "bad.gz"), good], "GZIP").ignore_errors())
    assert records[-32:] == list(TFRecordDataset(good, "GZIP"))
