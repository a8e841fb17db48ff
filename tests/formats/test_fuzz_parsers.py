"""Fuzzing the parsers of untrusted bytes: the TFRecord framing (C and Python paths) and Example /
SequenceExample parsing. Inputs are mutations of the TensorFlow-written fixtures (tests/data) and of
generated records, and plain random bytes. The errors each parser may raise are listed in docs/formats.md;
anything else -- another exception, a hang, a crash, records that differ between the two TFRecord paths
-- fails.

Each property runs twice: a smoke run in the default suite (a few seconds, derandomized, so the default
suite does not change from run to run) and a long, random run behind ``-m slow``.
"""

import gzip
import io
import pathlib
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxfeed.formats import (FixedLenFeature, FixedLenSequenceFeature, VarLenFeature, VarLenValue, crc,
                             make_example, make_sequence_example, parse_example, parse_sequence_example,
                             parse_single_example, tfrecord)
from jaxfeed.pipeline import errors

DATA = pathlib.Path(__file__).resolve().parents[1] / "data"
SMOKE = settings(max_examples=60, deadline=None, derandomize=True, database=None,
                 suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LONG = settings(max_examples=5_000, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
C_PATH = tfrecord._split_records  # None where the extension is not built


def _fixture_records(name: str, limit: int = 16) -> list:
    reader = tfrecord.RecordReader(open(DATA / name, "rb", buffering=0), name)
    out = []
    try:
        while len(out) < limit:
            payloads, _, error = reader.read_block()
            assert error is None
            if not payloads:
                break
            out.extend(payloads)
    finally:
        reader.close()
    return out[:limit]


EXAMPLES = _fixture_records("examples-0.tfrecord")
SEQUENCES = _fixture_records("sequences.tfrecord")
RAW = [r for r in _fixture_records("raw-sizes.tfrecord") if len(r) <= 256]


# ---------------------------------------------------------------------------------------------- mutations
def _valid_header(length: int) -> bytes:
    field = struct.pack("<Q", length)
    return field + struct.pack("<I", crc.masked_crc32c(field))


@st.composite
def mutated(draw, seeds: list, framed: bool):
    """Bytes: a seed (framed records, or one record), a few mutations of it, or random bytes."""
    if draw(st.integers(0, 9)) == 0:
        return draw(st.binary(max_size=400))
    if framed:
        records = draw(st.lists(st.one_of(st.sampled_from(seeds), st.binary(max_size=64)), max_size=8))
        data = bytearray(tfrecord.frame_many(records))
    else:
        data = bytearray(draw(st.sampled_from(seeds)))
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(["flip", "byte", "cut", "insert", "delete", "length", "huge"]))
        at = draw(st.integers(0, len(data)))
        if op == "flip" and at < len(data):
            data[at] ^= 1 << draw(st.integers(0, 7))
        elif op == "byte" and at < len(data):
            data[at] = draw(st.integers(0, 255))
        elif op == "cut":
            del data[at:]
        elif op == "insert":
            data[at:at] = draw(st.binary(min_size=1, max_size=16))
        elif op == "delete":
            del data[at:at + draw(st.integers(1, 16))]
        elif framed and op in ("length", "huge"):  # a length field with a valid CRC (e.g. lost bytes)
            length = draw(st.integers(0, 600)) if op == "length" else draw(st.sampled_from(
                [2**31, 2**32 + 5, 2**40, 2**63 - 1, 2**63, 2**64 - 1]))
            data[at:at + 12] = _valid_header(length)
    return bytes(data)


# ---------------------------------------------------------------------------------------------- TFRecord
class _Stream(io.BytesIO):
    """An in-memory file that may or may not say how many bytes are left (a local or remote file does, a
    decompressed stream does not): both ways of bounding reads are exercised."""

    def __init__(self, data: bytes, size_known: bool):
        super().__init__(data)
        self._size_known = size_known

    def remaining(self):
        return len(self.getbuffer()) - self.tell() if self._size_known else None


def _walk(data: bytes, split, verify: bool, block_size: int, size_known: bool, compressed: bool):
    """The whole file as the reader delivers it, going on after an error where it can (ignore_errors):
    ``("record", payload, offset)`` and ``("error", class, offset)`` events. Only DataLossError may be
    raised (returned as an event); anything else propagates and fails the test."""
    saved = tfrecord._split_records
    tfrecord._split_records = split
    try:
        if compressed:
            from jaxfeed.formats import fs
            stream = fs.InflatingReader(io.BytesIO(gzip.compress(data)), fs.COMPRESSIONS["GZIP"], "fuzz", "GZIP")
        else:
            stream = _Stream(data, size_known)
        reader = tfrecord.RecordReader(stream, "fuzz.tfrecord", verify=verify, block_size=block_size)
    finally:
        tfrecord._split_records = saved
    events = []
    try:
        for _ in range(100_000):
            tfrecord._split_records = split
            try:
                payloads, offsets, error = reader.read_block()
            finally:
                tfrecord._split_records = saved
            events += [("record", p, int(o)) for p, o in zip(payloads, offsets)]
            if error is not None:
                assert isinstance(error, errors.DataLossError), error
                assert error.filename == "fuzz.tfrecord"
                events.append(("error", type(error), int(error.offset)))
                if not reader.can_continue:
                    return events
            elif not payloads:
                return events
        raise AssertionError("the reader did not finish")
    finally:
        reader.close()


def _check_framing(data: bytes, verify: bool, block_size: int, size_known: bool, compressed: bool):
    python = _walk(data, None, verify, block_size, size_known, compressed)
    if C_PATH is not None:
        assert _walk(data, C_PATH, verify, block_size, size_known, compressed) == python
    records = [e for e in python if e[0] == "record"]
    offsets = [e[2] for e in records]
    assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
    for _, payload, offset in records:  # every record delivered is really there, framed at its offset
        assert data[offset + 12:offset + 12 + len(payload)] == payload
        assert struct.unpack_from("<Q", data, offset)[0] == len(payload)
    return python


framing_args = dict(data=mutated(EXAMPLES + RAW, framed=True), verify=st.booleans(),
                    block_size=st.sampled_from([1, 13, 64, 1000, 1 << 16]), size_known=st.booleans(),
                    compressed=st.sampled_from([False, False, False, True]))


@SMOKE
@given(**framing_args)
def test_tfrecord_framing_smoke(data, verify, block_size, size_known, compressed):
    _check_framing(data, verify, block_size, size_known, compressed)


@pytest.mark.slow
@LONG
@given(**framing_args)
def test_tfrecord_framing_long(data, verify, block_size, size_known, compressed):
    _check_framing(data, verify, block_size, size_known, compressed)


def test_an_undamaged_file_reads_back_whole():
    """The oracle the fuzzing leans on: no mutation, every record at its offset, no error."""
    data = tfrecord.frame_many(EXAMPLES + RAW)
    for block_size in (1, 64, 1 << 16):
        events = _check_framing(data, True, block_size, True, False)
        assert [e[1] for e in events] == EXAMPLES + RAW


# ---------------------------------------------------------------------------------------------- Example
EXAMPLE_SPEC = {
    "id": FixedLenFeature([], "int64", default_value=-1),
    "label": FixedLenFeature([], "int64", default_value=0),
    "score": FixedLenFeature([], "float32", default_value=0.0),
    "embedding": FixedLenFeature([4], "float32", default_value=[0.0] * 4),
    "tokens": VarLenFeature("int64"),
    "text": VarLenFeature("string"),
    "rows": FixedLenSequenceFeature([2], "int64", allow_missing=True),
}
STRICT_SPEC = {"id": FixedLenFeature([], "int64"), "text": FixedLenFeature([], "string")}
CONTEXT_SPEC = {"length": FixedLenFeature([], "int64", default_value=0)}
SEQUENCE_SPEC = {"frames": FixedLenSequenceFeature([3], "float32", allow_missing=True),
                 "words": VarLenFeature("string")}


@st.composite
def generated_examples(draw):
    """Examples whose features may have the wrong kind, count or name for the specs (TypeError-free
    building: values are lists of one kind)."""
    names = ["id", "label", "score", "embedding", "tokens", "text", "rows", "other"]
    values = st.one_of(st.lists(st.integers(-2**63, 2**63 - 1), max_size=5),
                       st.lists(st.floats(width=32), min_size=1, max_size=5),
                       st.lists(st.binary(max_size=8), min_size=1, max_size=5))
    return make_example(draw(st.dictionaries(st.sampled_from(names), values, max_size=6))).SerializeToString()


def _check_result(result: dict, spec: dict, n: int):
    for name, feature in spec.items():
        value = result[name]
        if isinstance(feature, FixedLenFeature):
            assert value.shape == (n,) + feature.shape and value.dtype == feature.dtype
        elif isinstance(feature, VarLenFeature):
            assert isinstance(value, VarLenValue) and len(value.row_splits) == n + 1
            assert value.values.dtype == feature.dtype and value.row_splits[-1] == len(value.values)
        else:
            assert value.shape[0] == n and value.shape[2:] == feature.shape


def _check_examples(records: list):
    for spec in (EXAMPLE_SPEC, STRICT_SPEC):
        try:
            result = parse_example(records, spec)
        except errors.InvalidArgumentError as e:
            assert "parse_example" in str(e)
        else:
            _check_result(result, spec, len(records))
    try:
        single = parse_single_example(records[0], EXAMPLE_SPEC)
    except errors.InvalidArgumentError:
        pass
    else:
        assert single["embedding"].shape == (4,)


def _check_sequences(records: list):
    try:
        context, sequences, lengths = parse_sequence_example(records, CONTEXT_SPEC, SEQUENCE_SPEC)
    except errors.InvalidArgumentError as e:
        assert "parse_sequence_example" in str(e)
        return
    assert context["length"].shape == (len(records),)
    assert sequences["frames"].shape[0] == len(records) and sequences["frames"].shape[2:] == (3,)
    assert lengths["words"].shape == (len(records),)
    assert sequences["words"].row_splits[-1] == len(sequences["words"].values)


example_records = st.lists(st.one_of(mutated(EXAMPLES, framed=False), generated_examples(),
                                     mutated(SEQUENCES, framed=False)), min_size=1, max_size=4)
sequence_records = st.lists(st.one_of(mutated(SEQUENCES, framed=False), mutated(EXAMPLES, framed=False)),
                            min_size=1, max_size=4)


@SMOKE
@given(example_records)
def test_example_parsing_smoke(records):
    _check_examples(records)


@pytest.mark.slow
@LONG
@given(example_records)
def test_example_parsing_long(records):
    _check_examples(records)


@SMOKE
@given(sequence_records)
def test_sequence_example_parsing_smoke(records):
    _check_sequences(records)


@pytest.mark.slow
@LONG
@given(sequence_records)
def test_sequence_example_parsing_long(records):
    _check_sequences(records)


def test_the_unmutated_fixtures_parse():
    _check_examples(EXAMPLES)
    result = parse_example(EXAMPLES, EXAMPLE_SPEC)
    assert result["id"].tolist() == list(range(len(EXAMPLES)))
    context, _, _ = parse_sequence_example(SEQUENCES, CONTEXT_SPEC, SEQUENCE_SPEC)
    assert len(context["length"]) == len(SEQUENCES)
    assert make_sequence_example({}, {}).SerializeToString() == b""
    assert np.array_equal(parse_example([b""], {"x": VarLenFeature("int64")})["x"].row_splits, [0, 0])
