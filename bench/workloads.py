"""The work each pipeline does, shared by jaxfeed, the hand-written baselines and the peers.

Only the standard library and numpy here (``google_crc32c`` when present): the peer modules import this
file from another interpreter that has just numpy and its own framework installed.

Sizes come in three scales: ``full`` (the reference suite), ``quick`` (a smoke run of a minute or two)
and ``tiny`` (the unit test).
"""

from __future__ import annotations

import os
import struct
import zlib

import numpy as np

# ---------------------------------------------------------------------------------------------- sizes
SIZES = {
    "full": dict(p1_n=2_000_000, p2_rows=1_000_000, p2_cols=32, p3_files=16, p3_records=8_192,
                 p3_bytes=1024, p4_images=20_000, p4_side=64, p5_lines=200_000, p6_files=16,
                 p6_rows=32_768),
    "quick": dict(p1_n=400_000, p2_rows=200_000, p2_cols=32, p3_files=8, p3_records=2_048,
                  p3_bytes=1024, p4_images=4_000, p4_side=64, p5_lines=40_000, p6_files=8,
                  p6_rows=8_192),
    "tiny": dict(p1_n=20_000, p2_rows=20_000, p2_cols=32, p3_files=4, p3_records=256, p3_bytes=1024,
                 p4_images=256, p4_side=64, p5_lines=2_000, p6_files=2, p6_rows=1_024),
}

P1_BATCH = 1024
P2_BUFFER = 10_000
P2_BATCH = 256
P3_CYCLE = 4
P3_BATCH = 256
P4_BATCH = 128
P5_BATCH = 256
P5_LENGTH = 32
P5_VOCAB = 50_000
P6_BATCH = 256
P6_CYCLE = 4  # files read at a time by P6 as ported (interleave of from_generator sources)
SEED = 42


def epoch_elements(key, sizes) -> int:
    """Elements in one epoch of pipeline ``key`` (to project the rate of a run cut short)."""
    return {"P1": sizes["p1_n"], "P2": sizes["p2_rows"], "P3": sizes["p3_files"] * sizes["p3_records"],
            "P4": sizes["p4_images"], "P5": sizes["p5_lines"], "P6": sizes["p6_files"] * sizes["p6_rows"],
            "P7": sizes["p2_rows"]}[key]


# ---------------------------------------------------------------------------------------------- P1
def add_one(x):
    """P1's map: the smallest possible per-element function."""
    return x + 1


# ---------------------------------------------------------------------------------------------- P3
def parse_record(record):
    """P3's map: the record's bytes as uint8, and their sum."""
    a = np.frombuffer(record, dtype=np.uint8)
    return a, a.sum(dtype=np.int64)


def parse_records(records):
    """P3's map applied to a whole batch of equal-length records at once (the vectorised variant)."""
    a = np.frombuffer(b"".join(records), dtype=np.uint8).reshape(len(records), -1)
    return a, a.sum(axis=1, dtype=np.int64)


def parse_record_or_batch(record):
    """P3's map declared ``vectorized=True``: one record (bytes) as ``parse_record``, or a batch of
    equal-length records (a 1-D array of bytes objects) in one ``frombuffer`` + ``sum(axis=1)``."""
    if isinstance(record, (bytes, bytearray, memoryview)):
        return parse_record(record)
    return parse_records(record)


try:
    import google_crc32c

    def _crc32c(data) -> int:
        return google_crc32c.value(data)

    HAVE_CRC32C = True
except ImportError:  # a peer interpreter without it: framing is still checked, CRCs are not
    _crc32c = None
    HAVE_CRC32C = False


def masked_crc(data) -> int:
    c = _crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def frame_record(payload: bytes) -> bytes:
    """One TFRecord: length, masked CRC of the length, payload, masked CRC of the payload."""
    header = struct.pack("<Q", len(payload))
    return header + struct.pack("<I", masked_crc(header)) + payload + struct.pack("<I", masked_crc(payload))


def read_tfrecords(path, check_crc=True, block=1 << 20):
    """Yield a TFRecord file's payloads (bytes), checking both CRCs: the hand-written reader.

    Reads ``block`` bytes at a time (a record may straddle blocks), so the first record comes after one
    small read, not after reading the whole file.
    """
    check_crc = check_crc and HAVE_CRC32C
    unpack_q, unpack_i = struct.Struct("<Q").unpack_from, struct.Struct("<I").unpack_from
    offset = 0  # file offset of data[0], for messages
    with open(path, "rb") as f:
        data = b""
        pos = 0
        while True:
            chunk = f.read(block)
            data = data[pos:] + chunk if pos < len(data) else chunk
            offset += pos
            pos, end = 0, len(data)
            while end - pos >= 12:
                (length,) = unpack_q(data, pos)
                if check_crc and unpack_i(data, pos + 8)[0] != masked_crc(data[pos:pos + 8]):
                    raise ValueError(f"{path}: corrupt length CRC at offset {offset + pos}")
                start = pos + 12
                if end < start + length + 4:
                    break
                payload = data[start:start + length]
                if check_crc and unpack_i(data, start + length)[0] != masked_crc(payload):
                    raise ValueError(f"{path}: corrupt record CRC at offset {offset + pos}")
                yield payload
                pos = start + length + 4
            if not chunk:
                if pos < end:
                    raise ValueError(f"{path}: truncated record at offset {offset + pos}")
                return


def interleave_round_robin(iterables, cycle_length):
    """tf.data's interleave order with block_length=1: cycle over ``cycle_length`` open inputs."""
    pending = iter(iterables)
    active = []
    for _ in range(cycle_length):
        nxt = next(pending, None)
        if nxt is None:
            break
        active.append(iter(nxt))
    while active:
        i = 0
        while i < len(active):
            try:
                yield next(active[i])
                i += 1
            except StopIteration:
                nxt = next(pending, None)
                if nxt is None:
                    del active[i]
                else:
                    active[i] = iter(nxt)


# ---------------------------------------------------------------------------------------------- P4
_MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255.0
_INV_STD = 1.0 / (np.array([0.229, 0.224, 0.225], np.float32) * 255.0)


def augment(image, flip):
    """P4's map: a horizontal flip when ``flip``, then per-channel float32 normalisation."""
    if flip:
        image = image[:, ::-1]
    return (image.astype(np.float32) - _MEAN) * _INV_STD


def augment_with_rng(image, rng):
    """P4's map with a per-element generator (jaxfeed's ``with_rng=True``)."""
    return augment(image, rng.random() < 0.5)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def flips_keyed(index, seed: int = SEED) -> np.ndarray:
    """Flip decisions keyed on (seed, element position), for one index or an array of them at once:
    the low bit of splitmix64(seed * golden + index). Same answer per element however it is batched."""
    z = np.atleast_1d(np.asarray(index)).astype(np.uint64)
    with np.errstate(over="ignore"):
        z = z + np.uint64(seed) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z = z ^ (z >> np.uint64(31))
    out = (z & np.uint64(1)).astype(bool)
    return out if np.ndim(index) else out[0]


def augment_keyed(index, image):
    """P4's map declared ``vectorized=True`` (after ``enumerate``): one (index, image) or a batch of them.
    The flip is keyed on the element's position (``flips_keyed``), as tf.data's stateless flip is; a batch
    is flipped and normalised with a few whole-batch numpy operations."""
    if np.ndim(index) == 0:
        return augment(image, bool(flips_keyed(index)))
    flips = flips_keyed(index)
    out = np.empty(image.shape, np.float32)
    np.copyto(out, image)
    out[flips] = image[flips, :, ::-1]
    out -= _MEAN
    out *= _INV_STD
    return out


def flip_for(index: int, seed: int = SEED) -> bool:
    """A flip decision keyed on (seed, element index): what peers without per-element RNGs use."""
    return (zlib.crc32(struct.pack("<qq", seed, index)) & 1) == 1


def augment_at(index, image):
    """P4's map as ported from tf.data (``enumerate() -> map(fn)``): the flip keyed on the element's index
    with ``flip_for``, as the DataLoader peer's ``__getitem__`` does, then ``augment``."""
    return augment(image, flip_for(int(index)))


# ---------------------------------------------------------------------------------------------- P5
def tokenize(line):
    """P5's map, pure Python per line: lower-case, split, hash each token to an id, pad to 32."""
    if isinstance(line, bytes):
        line = line.decode("utf-8")
    ids = [zlib.crc32(t.encode("utf-8")) % P5_VOCAB for t in line.lower().split()[:P5_LENGTH]]
    out = np.zeros(P5_LENGTH, np.int32)
    out[:len(ids)] = ids
    return out


def read_lines(path):
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


# ---------------------------------------------------------------------------------------------- P6
def parquet_rows(path):
    """P6's generator as ported from tf.data (``from_generator`` per file): one dict per row, each row group
    read with pyarrow and turned into Python values (what the DataLoader peer's ``IterableDataset`` yields)."""
    import pyarrow.parquet as pq

    if isinstance(path, bytes):  # a file name from a dataset of strings
        path = path.decode()
    pf = pq.ParquetFile(path)
    for g in range(pf.num_row_groups):
        yield from pf.read_row_group(g).to_pylist()


# ---------------------------------------------------------------------------------------------- data
def data_paths(datadir):
    """Where ``jaxfeed.bench.data`` put each data set (peers find the files from this)."""
    d = os.fspath(datadir)
    return {
        "p2": os.path.join(d, "p2_rows.npy"),
        "p3": sorted(os.path.join(d, "tfrecord", f) for f in os.listdir(os.path.join(d, "tfrecord")))
        if os.path.isdir(os.path.join(d, "tfrecord")) else [],
        "p4": os.path.join(d, "p4_images.npy"),
        "p5": os.path.join(d, "p5_lines.txt"),
        "p6": sorted(os.path.join(d, "parquet", f) for f in os.listdir(os.path.join(d, "parquet")))
        if os.path.isdir(os.path.join(d, "parquet")) else [],
        "meta": os.path.join(d, "meta.json"),
    }


def rows_of(batch) -> int:
    """Rows in a batch of any framework: the leading dimension of its first leaf."""
    while True:
        if isinstance(batch, dict):
            batch = next(iter(batch.values()))
        elif isinstance(batch, (tuple, list)) and batch and not isinstance(batch[0], (int, float)):
            batch = batch[0]
        else:
            break
    shape = getattr(batch, "shape", None)
    if shape is not None and len(shape) > 0:
        return int(shape[0])
    return len(batch)
