"""The optional C walker (``formats/_tfrecord_c.c``) against the pure Python path: the same records, offsets
and errors (type, offset, message), block by block, on the fixtures, random records and damaged files.

Skipped where the extension is not built. The Python path is selected by setting
``tfrecord._split_records`` to None (what ``JAXFEED_NO_C_EXT=1`` does at import)."""

import os
import struct
import subprocess
import sys

import google_crc32c
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxfeed.formats import TFRecordDataset, crc, fs, tfrecord
from jaxfeed.pipeline import errors

_c = pytest.importorskip("jaxfeed.formats._tfrecord_c", reason="the C extension is not built")

C_PATH = _c.split_records
RECORDS = [b"alpha", b"", b"gamma-gamma", b"d" * 40]


def blocks(path, split, block_size=tfrecord.BLOCK_SIZE, verify=True, monkeypatch=None):
    """Every ``read_block()`` result of a whole file, going on after an error where the reader can (as
    ``ignore_errors`` does), flattened: ``(payload, offset)`` per record and ``(error, offset,
    can_continue)`` per error. Where blocks split is not compared: the C path reads into a reused buffer
    and needs no bridge blocks, so its blocks may hold more records than the Python path's."""
    monkeypatch.setattr(tfrecord, "_split_records", split)
    reader = tfrecord.RecordReader(fs.open_stream(path), path, verify=verify, block_size=block_size)
    out = []
    try:
        for _ in range(1_000_000):
            payloads, offsets, error = reader.read_block()
            err = None if error is None else (type(error), str(error), error.offset, error.filename)
            out.extend(zip(list(payloads), [int(o) for o in offsets]))
            if error is not None:
                out.append((err, reader.offset, reader.can_continue))
            if error is not None and not reader.can_continue:
                return out
            if error is None and not payloads:
                return out
        raise AssertionError("the reader did not finish")
    finally:
        reader.close()


def payloads(out):
    return [x[0] for x in out if len(x) == 2]


def errors_in(out):
    return [x[0] for x in out if len(x) == 3]


def assert_same(path, monkeypatch, **kw):
    python = blocks(path, None, monkeypatch=monkeypatch, **kw)
    native = blocks(path, C_PATH, monkeypatch=monkeypatch, **kw)
    assert native == python
    return native


def test_the_reader_uses_the_extension_by_default():
    assert tfrecord._split_records is C_PATH or os.environ.get("JAXFEED_NO_C_EXT", "") not in ("", "0")


def test_the_environment_variable_forces_the_python_path():
    code = "from jaxfeed.formats import tfrecord; print(tfrecord._split_records is None)"
    env = dict(os.environ, JAXFEED_NO_C_EXT="1")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True"


@given(st.binary(max_size=3000))
@settings(max_examples=200, deadline=None)
def test_crc32c_equals_google_crc32c_in_hardware_and_table(data):
    assert _c.crc32c(data) == google_crc32c.value(data)
    assert _c._crc32c_table(data) == google_crc32c.value(data)


def test_split_records_directly():
    raw = tfrecord.frame_many(RECORDS)
    payloads, starts, end, error = C_PATH(raw, 0, True)
    assert payloads == RECORDS and error is None and end == len(raw)
    assert struct.unpack(f"{len(RECORDS)}q", starts) == (0, 21, 37, 64)
    # from an offset, and an incomplete record at the end
    payloads, starts, end, error = C_PATH(raw[:-1], 21, True)
    assert payloads == RECORDS[1:3] and end == 64 and error is None
    assert C_PATH(b"", 0, True) == ([], b"", 0, None)
    assert C_PATH(bytearray(raw), 0, False)[0] == RECORDS  # any buffer
    with pytest.raises(ValueError):
        C_PATH(raw, len(raw) + 1, True)
    bad = bytearray(raw)
    bad[37 + 12] ^= 1
    assert C_PATH(bytes(bad), 0, True) == (RECORDS[:2], struct.pack("2q", 0, 21), 37, "payload")
    assert C_PATH(bytes(bad), 0, False)[0] == RECORDS[:2] + [bytes(bad[49:60])] + RECORDS[3:]
    bad = bytearray(raw)
    bad[21 + 9] ^= 1
    assert C_PATH(bytes(bad), 0, True)[1:] == (struct.pack("q", 0), 21, "length")


@pytest.mark.parametrize("name", ["examples-0.tfrecord", "examples-1.tfrecord", "raw-sizes.tfrecord",
                                  "sequences.tfrecord"])
@pytest.mark.parametrize("block_size", [1, 100, 4096, tfrecord.BLOCK_SIZE])
def test_fixtures_give_the_same_blocks(data_dir, name, block_size, monkeypatch):
    out = assert_same(str(data_dir / name), monkeypatch, block_size=block_size)
    assert payloads(out) and not errors_in(out)


def test_fixtures_through_the_dataset(data_dir, monkeypatch):
    names = [str(data_dir / n) for n in ("examples-0.tfrecord", "examples-1.tfrecord.gz")]
    monkeypatch.setattr(tfrecord, "_split_records", None)
    python = list(TFRecordDataset(names[:1]).as_numpy_iterator())
    python_gz = list(TFRecordDataset(names[1:], compression_type="GZIP").as_numpy_iterator())
    monkeypatch.setattr(tfrecord, "_split_records", C_PATH)
    assert list(TFRecordDataset(names[:1]).as_numpy_iterator()) == python
    assert list(TFRecordDataset(names[1:], compression_type="GZIP").as_numpy_iterator()) == python_gz


record_sizes = st.one_of(st.integers(0, 5000), st.sampled_from([0, 1, 7, 1024, 1024, 1024]))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow])
@given(st.lists(record_sizes, max_size=40), st.integers(1, 12000), st.booleans(), st.data())
def test_random_records_and_damage(tmp_path, monkeypatch, sizes, block_size, verify, data):
    seed = data.draw(st.integers(0, 2**32 - 1))
    rnd = __import__("random").Random(seed)
    records = [rnd.randbytes(n) for n in sizes]
    raw = bytearray(tfrecord.frame_many(records))
    # without CRC checks a damaged length is believed: the record it frames is truncated, read in steps no
    # larger than the file (test_tfrecord_huge_length.py), never a MemoryError
    kinds = ["none", "flip", "flip", "cut", "garbage", "length"]
    action = data.draw(st.sampled_from(kinds))
    if action == "flip" and raw:
        raw[data.draw(st.integers(0, len(raw) - 1))] ^= 1 << data.draw(st.integers(0, 7))
    elif action == "cut" and raw:
        raw = raw[:data.draw(st.integers(0, len(raw) - 1))]
    elif action == "garbage":
        raw += data.draw(st.binary(min_size=1, max_size=64))
    elif action == "length" and raw:  # a wrong length with a matching CRC: records misframed
        starts = [0]
        for r in records[:-1]:
            starts.append(starts[-1] + len(r) + 16)
        at = data.draw(st.sampled_from(starts))
        header = struct.pack("<Q", data.draw(st.integers(0, 20000)))
        raw[at:at + 12] = header + struct.pack("<I", crc.masked_crc32c(header))
    path = str(tmp_path / f"r-{seed}.tfrecord")
    with open(path, "wb") as f:
        f.write(raw)
    out = assert_same(path, monkeypatch, block_size=block_size, verify=verify)
    if action == "none":
        assert payloads(out) == records


def test_bad_payload_crc_then_the_next_record(tmp_path, monkeypatch):
    raw = bytearray(tfrecord.frame_many(RECORDS * 3))
    raw[37 + 12] ^= 0xFF  # record 2's payload
    raw[len(raw) - 3] ^= 0x10  # the last record's CRC
    path = str(tmp_path / "bad.tfrecord")
    open(path, "wb").write(bytes(raw))
    out = assert_same(path, monkeypatch)
    errs = errors_in(out)
    assert [e[2] for e in errs] == [37, len(raw) - 56]
    assert all(e[0] is errors.DataLossError and "corrupted record at" in e[1] and "Is this" not in e[1]
               for e in errs)
    assert payloads(out) == (RECORDS * 3)[:2] + (RECORDS * 3)[3:-1]


def test_bad_length_crc_ends_the_file(tmp_path, monkeypatch):
    raw = bytearray(tfrecord.frame_many(RECORDS))
    raw[21 + 9] ^= 0x01
    path = str(tmp_path / "bad.tfrecord")
    open(path, "wb").write(bytes(raw))
    out = assert_same(path, monkeypatch)
    assert out[-1][0][1].endswith("corrupted record at 21 (Is this even a TFRecord file?)")
    assert not out[-1][2]
    assert out[-1][1] == 21  # reader.offset: after "alpha", handed out in the same block as the error


@pytest.mark.parametrize("garbage", [b"\x00" * 7, b"\xff" * 12, b"not a tfrecord file at all" * 3,
                                     bytes(range(256)) * 4])
def test_garbage(tmp_path, monkeypatch, garbage):
    for i, raw in enumerate([garbage, tfrecord.frame_many(RECORDS) + garbage]):
        path = str(tmp_path / f"g{i}.tfrecord")
        open(path, "wb").write(raw)
        for block_size in (1, 7, 50, tfrecord.BLOCK_SIZE):
            assert_same(path, monkeypatch, block_size=block_size)


def test_truncation_at_every_byte(tmp_path, monkeypatch):
    raw = tfrecord.frame_many(RECORDS + [b"x" * 300])
    for cut in range(len(raw) + 1):
        path = str(tmp_path / f"cut-{cut}.tfrecord")
        open(path, "wb").write(raw[:cut])
        for block_size in (1, 13, tfrecord.BLOCK_SIZE):
            out = assert_same(path, monkeypatch, block_size=block_size)
            got = payloads(out)
            assert got == (RECORDS + [b"x" * 300])[:len(got)]


@pytest.mark.parametrize("size", [191, 192, 193, 767, 768, 769, 24575, 24576, 24577, 24576 + 769, 100_003])
def test_large_and_boundary_sizes(tmp_path, monkeypatch, size):
    """Sizes at the edges of the interleaved CRC spans (3 x 64, 3 x 256, 3 x 8192 bytes), CRC and copy."""
    data = os.urandom(size)
    assert _c.crc32c(data) == google_crc32c.value(data) == _c._crc32c_table(data)
    records = [data, data[1:], b"", data[:-3]]
    path = str(tmp_path / "big.tfrecord")
    open(path, "wb").write(tfrecord.frame_many(records))
    out = assert_same(path, monkeypatch, block_size=4096)
    assert payloads(out) == records
    raw = bytearray(tfrecord.frame_many(records))
    raw[12 + size // 2] ^= 4
    open(path, "wb").write(bytes(raw))
    out = assert_same(path, monkeypatch)
    assert errors_in(out)[0][2] == 0 and out[0][0][2] == 0 and payloads(out) == records[1:]


class Trickle:
    """A stream whose ``readinto`` fills at most ``step`` bytes a call (pipes, sockets, some fsspec files)."""

    def __init__(self, data, step):
        self._data, self._pos, self._step = data, 0, step

    def readinto(self, view):
        n = min(len(view), self._step, len(self._data) - self._pos)
        view[:n] = self._data[self._pos:self._pos + n]
        self._pos += n
        return n

    def read(self, n=-1):
        n = len(self._data) - self._pos if n < 0 else min(n, self._step)
        out = self._data[self._pos:self._pos + n]
        self._pos += len(out)
        return out

    def close(self):
        pass


@pytest.mark.parametrize("step", [1, 5, 17, 1000])
def test_short_reads_into_the_reused_buffer(monkeypatch, step):
    records = RECORDS + [b"y" * 3000, b"z"]
    raw = tfrecord.frame_many(records)
    monkeypatch.setattr(tfrecord, "_split_records", C_PATH)
    reader = tfrecord.RecordReader(Trickle(raw, step), "trickle", block_size=64)
    assert reader._reuse
    got, offsets = [], []
    while True:
        items, offs, error = reader.read_block()
        assert error is None
        if not items:
            break
        got += items
        offsets += [int(o) for o in offs]
    assert got == records
    assert offsets == [0, 21, 37, 64, 120, 3136]
    reader = tfrecord.RecordReader(Trickle(raw[:-3], step), "trickle", block_size=64)  # truncated
    while True:
        items, _, error = reader.read_block()
        if error is not None:
            assert isinstance(error, errors.DataLossError) and "trickle" in str(error)
            break
        assert items, "a truncated stream must end in an error"


def test_a_bad_length_after_records_of_the_same_read_leaves_the_offset_after_them(tmp_path, monkeypatch):
    # found by test_random_records_and_damage: the bad-length branch (of both paths) did not move the offset
    # past the records handed out in the same block, so a state saved there would repeat them
    records = [b"", b"", b"", b"a", b"b", b"c" * 90, b"d" * 27, b""]
    raw = bytearray(tfrecord.frame_many(records))
    last = len(raw) - 16
    raw[last + 8] ^= 1  # the last record's length CRC
    path = str(tmp_path / "bad-length.tfrecord")
    with open(path, "wb") as f:
        f.write(raw)
    out = assert_same(path, monkeypatch, block_size=30)
    assert payloads(out) == records[:-1]
    assert out[-1][1:] == (last, False)  # reader.offset is the bad header's; the file is done


def test_a_closed_readers_buffer_is_reused_and_never_leaks_its_records(tmp_path, monkeypatch):
    """The next reader takes a closed reader's read buffer, still holding the old file's bytes: its records
    are its own file's, whether the old reader finished or stopped mid-file, and few buffers are kept."""
    monkeypatch.setattr(tfrecord, "_spare_buffers", [])
    monkeypatch.setattr(tfrecord, "_split_records", C_PATH)
    files = []
    for i in range(6):
        path = str(tmp_path / f"f{i}.tfrecord")
        with open(path, "wb") as f:  # files of different lengths and record sizes: stale bytes would show
            f.write(b"".join(tfrecord.frame(bytes([i]) * (100 + 37 * i + j % 50)) for j in range(3000 + 500 * i)))
        files.append(path)

    def read(path, stop=None):
        reader = tfrecord.RecordReader(fs.open_stream(path), path)
        got = []
        try:
            while stop is None or len(got) < stop:
                block, _, error = reader.read_block()
                assert error is None
                if not block:
                    break
                got.extend(block)
        finally:
            reader.close()
        return got

    expected = [[bytes([i]) * (100 + 37 * i + j % 50) for j in range(3000 + 500 * i)] for i in range(6)]
    assert read(files[5], stop=10) == expected[5][:len(read(files[5], stop=10))]  # stopped mid-file
    assert tfrecord._spare_buffers  # it handed its buffer on
    for i in range(6):
        assert read(files[i]) == expected[i]
    readers = [tfrecord.RecordReader(fs.open_stream(p), p) for p in files]  # more open at once than spares
    for r in readers:
        assert r.read_block()[0]
    for r in readers:
        r.close()
    assert len(tfrecord._spare_buffers) == tfrecord.SPARE_BUFFERS
    ds = TFRecordDataset(files, num_parallel_reads=3)  # readers on threads, taking and handing back buffers
    assert sorted(bytes(x) for x in ds) == sorted(sum(expected, []))


def _write_records(path, records):
    with open(path, "wb") as f:
        f.write(b"".join(tfrecord.frame(r) for r in records))
    return str(path)


def _read_all(path):
    reader = tfrecord.RecordReader(fs.open_stream(path), path)
    got = []
    try:
        while True:
            block, _, error = reader.read_block()
            assert error is None
            if not block:
                return got
            got.extend(block)
    finally:
        reader.close()


def test_payload_objects_the_consumer_dropped_are_reused_with_their_new_contents_and_hash(tmp_path, monkeypatch):
    """A record's bytes object that only the walker's ring still holds is rewritten for a later record of the
    same size: the later record reads and hashes as its own bytes, never as the old ones."""
    monkeypatch.setattr(tfrecord, "_split_records", C_PATH)
    first = [bytes([1]) * 1000 + j.to_bytes(4, "little") for j in range(2000)]
    second = [bytes([2]) * 1000 + j.to_bytes(4, "little") for j in range(2000)]
    a, b = _write_records(tmp_path / "a.tfrecord", first), _write_records(tmp_path / "b.tfrecord", second)
    _c.recycling(True)
    got = _read_all(a)
    assert got == first
    old_ids = {id(r) for r in got}
    for r in got:
        hash(r)  # cache each hash: a reused object must not keep it
    del got
    before = _c.recycling()["reused"]
    got = _read_all(b)
    assert _c.recycling()["reused"] - before > 1000
    assert got == second
    assert any(id(r) in old_ids for r in got)
    assert all(type(r) is bytes and hash(r) == hash(bytes(bytearray(r))) for r in got)
    assert len({id(r) for r in got}) == len(got)  # one object per record, however many reused


def test_records_still_referenced_anywhere_are_never_rewritten(tmp_path, monkeypatch):
    """Records the consumer keeps -- in a list, through a memoryview or a numpy view of their bytes -- keep
    their contents however many records are read after them."""
    np = pytest.importorskip("numpy")
    monkeypatch.setattr(tfrecord, "_split_records", C_PATH)
    first = [bytes([7]) * 512 + j.to_bytes(4, "little") for j in range(3000)]
    a = _write_records(tmp_path / "a.tfrecord", first)
    b = _write_records(tmp_path / "b.tfrecord", [bytes([9]) * 516] * 20000)
    _c.recycling(True)
    got = _read_all(a)
    kept = got[::3]
    views = [memoryview(r) for r in got[1::3]]
    arrays = [np.frombuffer(r, dtype=np.uint8) for r in got[2::3]]
    del got
    for _ in range(3):
        assert len(_read_all(b)) == 20000
    assert kept == first[::3]
    assert [bytes(v) for v in views] == first[1::3]
    assert [a.tobytes() for a in arrays] == first[2::3]


def test_the_ring_is_bounded_and_lets_go_on_request(tmp_path, monkeypatch):
    monkeypatch.setattr(tfrecord, "_split_records", C_PATH)
    sizes = [1 + (j * 7919) % 3000 for j in range(20000)]  # varying sizes: few reuses, the ring fills
    path = _write_records(tmp_path / "v.tfrecord", [bytes([j % 256]) * n for j, n in enumerate(sizes)])
    _c.recycling(True)
    kept = _read_all(path)
    state = _c.recycling()
    assert 0 < state["held"] <= 4096 and 0 < state["held_bytes"] <= 4 << 20
    assert [len(r) for r in kept] == sizes and all(r == bytes([j % 256]) * len(r) for j, r in enumerate(kept))
    _c.recycling(True)
    assert _c.recycling()["held"] == 0 and _c.recycling()["held_bytes"] == 0
    big = _write_records(tmp_path / "big.tfrecord", [b"x" * (1 << 17)] * 4)
    assert _read_all(big) == [b"x" * (1 << 17)] * 4
    assert _c.recycling()["held"] == 0  # records over 64 KiB are left to malloc
