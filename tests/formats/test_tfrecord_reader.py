"""The block reader against a plain one-record-at-a-time reference, for any block size and damage.

Small blocks make records straddle reads, which exercises the bridge buffers and the vectorised runs."""

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from jaxfeed.formats import crc, fs, tfrecord
from jaxfeed.pipeline import errors


def reference(data: bytes):
    """TensorFlow's reading, one record at a time: (records, (kind, offset) of the first damage or None)."""
    out, pos = [], 0
    while True:
        if len(data) - pos < 12:
            return out, None
        (length,) = struct.unpack_from("<Q", data, pos)
        if crc.masked_crc32c(data[pos:pos + 8]) != struct.unpack_from("<I", data, pos + 8)[0]:
            return out, ("corrupted", pos)
        if len(data) - pos < length + 16:
            return out, ("truncated", pos)
        payload = data[pos + 12:pos + 12 + length]
        if crc.masked_crc32c(payload) != struct.unpack_from("<I", data, pos + 12 + length)[0]:
            return out, ("corrupted", pos)
        out.append(payload)
        pos += length + 16


def read(path: str, block_size: int):
    reader = tfrecord.RecordReader(fs.open_stream(path), path, block_size=block_size)
    out, offsets = [], []
    while True:
        payloads, where, error = reader.read_block()
        out += payloads
        offsets += [int(o) for o in where]
        if error is None and payloads:  # where a restored reader would start: right after the last record
            assert reader.offset == offsets[-1] + len(out[-1]) + 16
        if error is not None:
            kind = "truncated" if "truncated" in str(error) else "corrupted"
            assert isinstance(error, errors.DataLossError) and error.filename == path
            return out, offsets, (kind, error.offset)
        if not payloads:
            return out, offsets, None


sizes = st.one_of(st.integers(0, 40), st.sampled_from([7, 7, 7, 100]))
record_lists = st.lists(sizes, max_size=60).map(lambda ns: [bytes([i % 251]) * n for i, n in enumerate(ns)])


@settings(max_examples=150, deadline=None)
@given(record_lists, st.integers(1, 300), st.data())
def test_block_reader_equals_the_reference_under_any_damage(tmp_path_factory, records, block_size, data):
    raw = bytearray(tfrecord.frame_many(records))
    action = data.draw(st.sampled_from(["none", "flip", "cut"]))
    if action == "flip" and raw:
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    elif action == "cut":
        del raw[data.draw(st.integers(0, len(raw))):]
    path = str(tmp_path_factory.mktemp("r") / "f")
    with open(path, "wb") as f:
        f.write(bytes(raw))
    got, offsets, damage = read(path, block_size)
    want, want_damage = reference(bytes(raw))
    if want_damage is not None and want_damage[0] == "corrupted" and damage is not None:
        # a payload CRC error lets the reader go on: compare up to the first damage only
        got = got[:len(want)]
    assert got == want
    assert damage == want_damage or (damage is not None and want_damage is not None and damage[1] == want_damage[1])
    starts, pos = [], 0
    for r in want:
        starts.append(pos)
        pos += len(r) + 16
    assert offsets[:len(want)] == starts
