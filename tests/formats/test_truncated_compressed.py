"""A damaged GZIP/ZLIB stream hands out every record / line entirely before the damage, then raises
``DataLossError`` naming the file and the uncompressed offset where the good bytes end (docs/formats.md).

The records each case expects are what TensorFlow 2.21 gave for the same bytes (the tests do not import
it). Where TF reads a stream cut short as if it simply ended -- no error when only the trailer is missing or
the cut falls between records, and a cut line delivered as a whole one -- jaxfeed is stricter: the same
complete records, then the error (a cut file may have lost anything after the cut).
"""

import gzip
import zlib

import pytest

from jaxfeed.data import FixedLengthRecordDataset
from jaxfeed.formats import TextLineDataset, TFRecordDataset, tfrecord
from jaxfeed.pipeline import errors

RECORDS = [b"r0", b"r1" * 10, b"r2" * 100]  # framed: 18 + 36 + 216 = 270 bytes
PLAIN = tfrecord.frame_many(RECORDS)
TEXT = b"".join(b"line%03d\n" % i for i in range(150))  # 1200 bytes
FIXED = bytes(range(256)) + bytes(144)  # 100 records of 4 bytes
WBITS = {"GZIP": 31, "ZLIB": 15}


def compress(data: bytes, compression: str) -> bytes:
    return gzip.compress(data) if compression == "GZIP" else zlib.compress(data)


def sync_cut(data: bytes, at: int, compression: str) -> bytes:
    """A stream that stops (no final block, no trailer) right after the first ``at`` bytes of ``data``, as
    left by a writer that flushed and died: it decodes to exactly ``data[:at]``."""
    c = zlib.compressobj(6, zlib.DEFLATED, WBITS[compression])
    return c.compress(data[:at]) + c.flush(zlib.Z_SYNC_FLUSH)


def read_all(dataset):
    """Elements (as bytes) until the end or the first error (returned too)."""
    out, it = [], iter(dataset)
    while True:
        try:
            out.append(bytes(next(it)))
        except StopIteration:
            return out, None
        except errors.DataLossError as e:
            return out, e


def tfrecords(path, compression, **kw):
    return TFRecordDataset(path, compression, **kw)


def lines(path, compression, **kw):
    return TextLineDataset(path, compression, **kw)


def fixed(path, compression, **kw):
    return FixedLengthRecordDataset(path, 4, compression_type=compression, **kw)


def check_truncated(error, path, offset):
    assert isinstance(error, errors.DataLossError)
    assert error.filename == path and error.offset == offset
    assert path in str(error) and "truncated data in " in str(error)
    assert f"uncompressed byte offset {offset}" in str(error)


# -------------------------------------------------------------------- only the trailer is missing
# TF: every record, no error. jaxfeed: every record, then the error at the end of the data.
TRAILER_CUTS = [("GZIP", 8), ("GZIP", 4), ("GZIP", 1), ("ZLIB", 4), ("ZLIB", 1)]


@pytest.mark.parametrize("compression,cut", TRAILER_CUTS)
@pytest.mark.parametrize("buffer_size", [None, 1, 100])
def test_tfrecord_missing_trailer_gives_every_record_then_the_error(tmp_path, compression, cut, buffer_size):
    path = tmp_path / "cut.tfrecord"
    path.write_bytes(compress(PLAIN, compression)[:-cut])
    got, error = read_all(tfrecords(str(path), compression, buffer_size=buffer_size))
    assert got == [b"r0", b"r1" * 10, b"r2" * 100]  # TF: all 3
    check_truncated(error, str(path), 270)


@pytest.mark.parametrize("compression,cut", TRAILER_CUTS)
def test_text_missing_trailer_gives_every_line_then_the_error(tmp_path, compression, cut):
    path = tmp_path / "cut.txt"
    path.write_bytes(compress(TEXT, compression)[:-cut])
    got, error = read_all(lines(str(path), compression))
    assert len(got) == 150 and got[0] == b"line000" and got[-1] == b"line149"  # TF: 150 lines
    assert got == TEXT.split(b"\n")[:-1]
    check_truncated(error, str(path), 1200)


@pytest.mark.parametrize("compression,cut", TRAILER_CUTS)
def test_fixed_length_missing_trailer_gives_every_record_then_the_error(tmp_path, compression, cut):
    path = tmp_path / "cut.bin"
    path.write_bytes(compress(FIXED, compression)[:-cut])
    got, error = read_all(fixed(str(path), compression))
    assert len(got) == 100 and got[0] == b"\x00\x01\x02\x03" and got[-1] == b"\x00\x00\x00\x00"  # TF: 100
    check_truncated(error, str(path), 400)


# -------------------------------------------------------------------- cut inside the data
@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
@pytest.mark.parametrize("at,want", [
    (28, [b"r0"]),  # inside r1's header -- TF: [r0], no error
    (18, [b"r0"]),  # between records -- TF: [r0], no error
    (40, [b"r0"]),  # inside r1's payload -- TF: [r0], then "truncated record"
])
def test_tfrecord_cut_in_the_data(tmp_path, compression, at, want):
    path = tmp_path / "cut.tfrecord"
    path.write_bytes(sync_cut(PLAIN, at, compression))
    for buffer_size in (None, 1):
        got, error = read_all(tfrecords(str(path), compression, buffer_size=buffer_size))
        assert got == want
        check_truncated(error, str(path), at)


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_tfrecord_cut_in_half(tmp_path, compression):
    path = tmp_path / "half.tfrecord"
    full = compress(PLAIN, compression)
    path.write_bytes(full[:len(full) // 2])
    got, error = read_all(tfrecords(str(path), compression))
    assert got == [b"r0"]  # TF: [r0], then "truncated record at 18"
    good = len(zlib.decompressobj(WBITS[compression]).decompress(full[:len(full) // 2]))
    check_truncated(error, str(path), good)


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
@pytest.mark.parametrize("buffer_size", [None, 1, 3])
def test_text_cut_in_a_line_keeps_the_whole_lines_only(tmp_path, compression, buffer_size):
    path = tmp_path / "cut.txt"
    path.write_bytes(sync_cut(TEXT, 18, compression))
    got, error = read_all(lines(str(path), compression, buffer_size=buffer_size))
    # TF: [line000, line001, li] and no error -- a cut line passed off as a whole one
    assert got == [b"line000", b"line001"]
    check_truncated(error, str(path), 18)
    path.write_bytes(sync_cut(TEXT, 16, compression))
    got, error = read_all(lines(str(path), compression, buffer_size=buffer_size))
    assert got == [b"line000", b"line001"]  # TF: the same, no error
    check_truncated(error, str(path), 16)


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_fixed_length_cut_in_a_record(tmp_path, compression):
    path = tmp_path / "cut.bin"
    path.write_bytes(sync_cut(FIXED, 10, compression))
    got, error = read_all(fixed(str(path), compression))
    assert got == [b"\x00\x01\x02\x03", b"\x04\x05\x06\x07"]  # TF: the same, then DataLossError (body length)
    check_truncated(error, str(path), 10)


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
@pytest.mark.parametrize("kind", ["tfrecord", "text"])
def test_every_cut_delivers_what_is_whole_before_it(tmp_path, compression, kind):
    """Cut the compressed stream at every byte: the elements wholly inside the decodable prefix come out,
    then the error at the prefix's length (an empty file is an empty stream: no error, as in TF)."""
    data = PLAIN if kind == "tfrecord" else TEXT
    full = compress(data, compression)
    ends = []  # where each element's bytes end
    if kind == "tfrecord":
        at = 0
        for r in RECORDS:
            at += len(r) + 16
            ends.append(at)
        elements = RECORDS
    else:
        elements = TEXT.split(b"\n")[:-1]
        ends = [8 * (i + 1) for i in range(len(elements))]
    path = tmp_path / "cut"
    for cut in range(len(full)):
        raw = full[:cut]
        path.write_bytes(raw)
        prefix = zlib.decompressobj(WBITS[compression]).decompress(raw)
        assert data.startswith(prefix)
        want = [e for e, end in zip(elements, ends) if end <= len(prefix)]
        for buffer_size in (None, 1):
            make = tfrecords if kind == "tfrecord" else lines
            got, error = read_all(make(str(path), compression, buffer_size=buffer_size))
            assert got == want, (cut, buffer_size)
            if cut == 0:
                assert error is None
            else:
                check_truncated(error, str(path), len(prefix))


def test_ignore_errors_goes_on_with_the_next_file_after_the_records(tmp_path):
    cut = tmp_path / "cut.tfrecord.gz"
    cut.write_bytes(gzip.compress(PLAIN)[:-8])
    good = tmp_path / "good.tfrecord.gz"
    good.write_bytes(gzip.compress(tfrecord.frame_many([b"next"])))
    got = [bytes(r) for r in TFRecordDataset([str(cut), str(good)], "GZIP").ignore_errors()]
    assert got == RECORDS + [b"next"]


# -------------------------------------------------------------------- several members, corruption, empty
def test_multi_member_gzip(tmp_path):
    a = b"".join(b"a%03d\n" % i for i in range(100))
    b = b"".join(b"b%03d\n" % i for i in range(100))
    path = tmp_path / "m.gz"
    path.write_bytes(gzip.compress(a) + gzip.compress(b))
    assert [bytes(x) for x in TextLineDataset(str(path), "GZIP")] == (a + b).split(b"\n")[:-1]  # TF: 200
    path.write_bytes(gzip.compress(a) + gzip.compress(b)[:-8])
    got, error = read_all(TextLineDataset(str(path), "GZIP"))
    assert got == (a + b).split(b"\n")[:-1]  # TF: the 200 lines, no error
    check_truncated(error, str(path), 1000)
    path.write_bytes(gzip.compress(a) + sync_cut(b, 7, "GZIP"))
    got, error = read_all(TextLineDataset(str(path), "GZIP"))
    assert got == a.split(b"\n")[:-1] + [b"b000"]  # TF: the same and b"b0", no error
    check_truncated(error, str(path), 507)
    path.write_bytes(gzip.compress(a) + gzip.compress(b)[:3])
    got, error = read_all(TextLineDataset(str(path), "GZIP"))
    assert got == a.split(b"\n")[:-1]  # TF: the 100 lines, no error
    check_truncated(error, str(path), 500)


@pytest.mark.parametrize("tail", [b"garbage", b"\0" * 8])
def test_garbage_after_a_member_comes_after_its_records(tmp_path, tail):
    a = b"".join(b"a%03d\n" % i for i in range(100))
    path = tmp_path / "g.gz"
    path.write_bytes(gzip.compress(a) + tail)
    got, error = read_all(TextLineDataset(str(path), "GZIP"))
    assert got == a.split(b"\n")[:-1]  # TF: the 100 lines, then DataLossError "incorrect header check"
    assert error.offset == 500 and "corrupted data" in str(error) and "incorrect header check" in str(error)


@pytest.mark.parametrize("compression,pos", [("GZIP", -6), ("GZIP", -2), ("GZIP", 20), ("GZIP", "mid"),
                                             ("ZLIB", -1), ("ZLIB", "mid")])
def test_corrupted_stream_is_data_loss(tmp_path, compression, pos):
    a = b"".join(b"a%03d\n" % i for i in range(100))
    raw = bytearray(compress(a, compression))
    raw[len(raw) // 2 if pos == "mid" else pos] ^= 0xFF
    path = tmp_path / "bad"
    path.write_bytes(bytes(raw))
    got, error = read_all(TextLineDataset(str(path), compression))
    assert got == []  # TF: nothing, then DataLossError (a failed check or a bad block)
    assert error.filename == str(path) and error.offset == 0 and "corrupted data" in str(error)


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_empty_file_and_empty_stream(tmp_path, compression):
    path = tmp_path / "e"
    path.write_bytes(b"")
    assert read_all(TextLineDataset(str(path), compression)) == ([], None)  # TF: nothing, no error
    assert read_all(TFRecordDataset(str(path), compression)) == ([], None)
    path.write_bytes(compress(b"", compression))
    assert read_all(TextLineDataset(str(path), compression)) == ([], None)  # TF: nothing, no error
    path.write_bytes(compress(b"", compression)[:-1])
    got, error = read_all(TextLineDataset(str(path), compression))  # TF: nothing, no error
    assert got == []
    check_truncated(error, str(path), 0)


@pytest.mark.parametrize("compression,error", [("", errors.InvalidArgumentError), ("GZIP", errors.DataLossError),
                                               ("ZLIB", errors.DataLossError)])
def test_a_fixed_length_body_of_no_whole_number_of_records_is_tf_s_error(tmp_path, compression, error):
    """TF 2.21: a 24-byte body of 10-byte records is InvalidArgumentError before any record where the file's
    size tells it, DataLossError after the 2 whole records where a compressed stream's end does (jaxfeed
    raised InvalidArgumentError for both; found by the formats fuzzer)."""
    path = tmp_path / "f.bin"
    path.write_bytes(compress(bytes(range(24)), compression))
    got = []
    with pytest.raises(errors.OpError) as raised:
        for record in FixedLengthRecordDataset(str(path), 10, compression_type=compression):
            got.append(bytes(record))
    assert len(got) == (0 if not compression else 2) and type(raised.value) is error, raised.value
    raised = raised.value
    assert "not an exact multiple of the record length (10 bytes)" in str(raised)


@pytest.mark.parametrize("compression", ["GZIP", "ZLIB"])
def test_a_compressed_fixed_length_file_shorter_than_its_header_is_an_error_not_an_empty_file(tmp_path, compression):
    """Found by the formats fuzzer: the stream's skip to the header's end stopped short, and the body was taken
    as empty (no record, no error); an uncompressed file of the same bytes was "body length -1". TF raises too
    (an InternalError of its own)."""
    path = tmp_path / "short.bin"
    path.write_bytes(compress(b"x", compression))
    with pytest.raises(errors.DataLossError, match="body length -1 bytes"):
        list(FixedLengthRecordDataset(str(path), 6, header_bytes=2, compression_type=compression))
    path.write_bytes(compress(b"xy", compression))  # the header and an empty body: no record, no error
    assert list(FixedLengthRecordDataset(str(path), 6, header_bytes=2, compression_type=compression)) == []
