"""The conformance cases: pipelines written once, built by both tf.data and jaxfeed.

Each case is a function ``build(t, np)``: ``t`` is an adapter namespace (``record_goldens.TFAdapter`` over
tf.data, ``jaxfeed_adapter.JaxfeedAdapter`` over jaxfeed) and ``np`` is numpy. A case returns a dataset;
the recorder (with TensorFlow) and the test (without it) both run the same body, so a golden says what
tf.data gives for exactly the code the test runs on jaxfeed.

The adapter offers:
- ``t.Dataset``, ``t.TFRecordDataset``, ``t.TextLineDataset``, ``t.FixedLengthRecordDataset``,
  ``t.CsvDataset``, ``t.AUTOTUNE``, ``t.INFINITE``, ``t.UNKNOWN``;
- ``t.spec(shape, dtype)`` a TensorSpec, ``t.dtype(name)`` a dtype ("int64", "string", ...);
- ``t.ops``: the few array operations user functions need (``fill``, ``zeros``, ``cast``, ``shape0``,
  ``size``, ``size_bytes``, ``arange``, ``reduce_sum``, ``stack``, ``py_raise``), TensorFlow ops on one
  side and numpy on the other, so function bodies stay neutral;
- ``t.files``: paths of the small input files ``make_files`` wrote (same bytes on both sides);
- ``t.experimental``: ``tf.data.experimental`` / ``jaxfeed.data.experimental``; ``t.scratch()``: a new empty
  directory (for ``save`` and file caches).

Only numpy and the standard library are imported here: the recorder runs with a Python that has
TensorFlow but not jaxfeed, the test with jaxfeed but not TensorFlow.

Case options (keyword arguments of ``@case``):
- ``limit``: record at most this many elements (infinite datasets);
- ``compare``: "exact" (default) or "multiset" (order is not part of the contract: shuffles, sampling);
- ``checkpoint``: a list of step counts: for each, iterate that many elements, save the iterator,
  restore it into a freshly built dataset and record what comes next.
"""

from __future__ import annotations

import collections
import gzip
import os
import struct
import zlib

Point = collections.namedtuple("Point", ["x", "y"])
Pair = collections.namedtuple("Pair", ["first", "second"])


class Case:
    __slots__ = ("name", "group", "build", "limit", "compare", "checkpoint")

    def __init__(self, name, group, build, limit=50, compare="exact", checkpoint=()):
        self.name, self.group, self.build = name, group, build
        self.limit, self.compare, self.checkpoint = limit, compare, tuple(checkpoint)


CASES: list[Case] = []


def case(group, name=None, **options):
    def register(fn):
        c = Case(name or fn.__name__, group, fn, **options)
        if any(other.name == c.name for other in CASES):
            raise ValueError(f"duplicate case name {c.name}")
        CASES.append(c)
        return fn

    return register


def add(group, name, build, **options):
    case(group, name, **options)(build)


# ===================================================================================================== files
_CRC_TABLE = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC_TABLE.append(_c)


def _crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC_TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord_bytes(records) -> bytes:
    """TFRecord framing in plain Python (docs/tf-behaviour.md#tfrecord), so both sides read the same bytes."""
    out = bytearray()
    for r in records:
        length = struct.pack("<Q", len(r))
        out += length + struct.pack("<I", _masked(_crc32c(length))) + r + struct.pack("<I", _masked(_crc32c(r)))
    return bytes(out)


def make_files(directory: str) -> dict:
    """Write the input files the file cases read; returns name -> path."""
    os.makedirs(directory, exist_ok=True)
    files = {}

    def put(name, data: bytes):
        path = os.path.join(directory, name)
        with open(path, "wb") as f:
            f.write(data)
        files[name] = path

    rec = [b"r%d" % i * (i + 1) for i in range(5)]
    put("a.tfrecord", tfrecord_bytes(rec))
    put("b.tfrecord", tfrecord_bytes([b"b0", b"", b"b2"]))
    put("c.tfrecord", tfrecord_bytes([b"c0"]))
    put("d.tfrecord", tfrecord_bytes([b"d0", b"d1"]))
    put("empty.tfrecord", b"")
    put("a.tfrecord.gz", gzip.compress(tfrecord_bytes(rec), mtime=0))
    put("a.tfrecord.zz", zlib.compress(tfrecord_bytes(rec)))
    good = tfrecord_bytes([b"ok0", b"ok1", b"bad2", b"ok3"])
    # flip a payload byte of the third record: a payload CRC mismatch after two good records
    third = 2 * (12 + 3 + 4) + 12
    put("badcrc.tfrecord", good[:third] + b"X" + good[third + 1:])
    put("truncated.tfrecord", good[:-6])  # cut inside the last record's payload/CRC
    put("cut_header.tfrecord", good + b"\x05\x00\x00")  # cut inside a 12-byte header: clean EOF
    put("garbage.tfrecord", b"this is not a tfrecord file at all, no")
    put("lines.txt", b"a\nbb\n\nccc")
    put("crlf.txt", b"x\r\ny\r\nq\rr\n")
    put("trailing.txt", b"p\n\n")
    put("empty.txt", b"")
    put("lines.txt.gz", gzip.compress(b"g0\ng1\ng2\n", mtime=0))
    put("lines2.txt", b"second0\nsecond1\n")
    put("fixed.bin", bytes(range(24)))
    put("fixed.bin.gz", gzip.compress(bytes(range(18)), mtime=0))
    put("fixed_hf.bin", b"HH" + bytes(range(12)) + b"F")
    put("plain.csv", b"1,2.5,abc\n3,4.5,de\n-7,0.25,\n")
    put("header.csv", b"i,f,s\n10,1.5,x\n20,2.5,y\n")
    put("missing.csv", b"1,,z\n,2.0,\n")
    put("quoted.csv", b'1,"a,b"\n2,"c""d"\n')
    put("tabs.csv", b"1\tq\n2\tr\n")
    put("badint.csv", b"1\nx\n3\n")
    put("na.csv", b"1,NA\nNA,2.5\n")
    put("plainquotes.csv", b'a,"b\nc",d\n')
    put("plain.csv.gz", gzip.compress(b"1,2.5,abc\n3,4.5,de\n", mtime=0))
    put("unicode.txt", "żółw\n日本\n".encode())
    put("lines.txt.zz", zlib.compress(b"z0\nz1\n"))
    put("sizes.tfrecord", tfrecord_bytes([b"", b"x" * 70000, b"", b"yz"]))
    return files


# ====================================================================================== sources and dtypes
@case("sources")
def range_stop(t, np):
    return t.Dataset.range(5)


@case("sources")
def range_start_stop(t, np):
    return t.Dataset.range(2, 6)


@case("sources")
def range_negative_step(t, np):
    return t.Dataset.range(10, 0, -3)


@case("sources")
def range_empty(t, np):
    return t.Dataset.range(5, 2)


@case("sources")
def range_step_beyond(t, np):
    return t.Dataset.range(0, 3, 7)


@case("sources")
def range_output_type_int32(t, np):
    return t.Dataset.range(4, output_type=t.dtype("int32"))


@case("sources")
def range_output_type_float32(t, np):
    return t.Dataset.range(3, output_type=t.dtype("float32"))


@case("sources")
def range_negative_values(t, np):
    return t.Dataset.range(-3, 2)


@case("sources")
def range_large_int64(t, np):
    return t.Dataset.range(2**40, 2**40 + 3)


@case("errors")
def range_no_args(t, np):
    return t.Dataset.range()


@case("errors")
def range_float_arg(t, np):
    return t.Dataset.range(2.5)


@case("errors")
def range_step_zero(t, np):
    return t.Dataset.range(0, 5, 0)


@case("sources")
def from_tensors_int(t, np):
    return t.Dataset.from_tensors(7)


@case("sources")
def from_tensors_float(t, np):
    return t.Dataset.from_tensors(1.5)


@case("sources")
def from_tensors_bool(t, np):
    return t.Dataset.from_tensors(True)


@case("sources")
def from_tensors_str(t, np):
    return t.Dataset.from_tensors("hello")


@case("sources")
def from_tensors_bytes(t, np):
    return t.Dataset.from_tensors(b"\x00\xffraw")


@case("sources")
def from_tensors_big_int(t, np):
    return t.Dataset.from_tensors(2**40)


@case("sources")
def from_tensors_int32_max(t, np):
    return t.Dataset.from_tensors(2**31 - 1)


@case("sources")
def from_tensors_int32_min_minus_one(t, np):
    return t.Dataset.from_tensors(-(2**31) - 1)


@case("sources")
def from_tensors_mixed_list(t, np):
    return t.Dataset.from_tensors([1, 2.5])


@case("sources")
def from_tensors_nested_list(t, np):
    return t.Dataset.from_tensors([[1, 2], [3, 4]])


@case("sources")
def from_tensors_list_with_big_int(t, np):
    return t.Dataset.from_tensors([1, 2**33])


@case("sources")
def from_tensors_list_of_np_int64(t, np):
    return t.Dataset.from_tensors([np.int64(1), np.int64(2)])


@case("sources")
def from_tensors_list_of_np_float64(t, np):
    return t.Dataset.from_tensors([np.float64(0.5), np.float64(1.5)])


@case("sources")
def from_tensors_np_float64(t, np):
    return t.Dataset.from_tensors(np.float64(0.1))


@case("sources")
def from_tensors_np_uint8(t, np):
    return t.Dataset.from_tensors(np.arange(4, dtype=np.uint8))


@case("sources")
def from_tensors_np_int16(t, np):
    return t.Dataset.from_tensors(np.array([-1, 2], dtype=np.int16))


@case("sources")
def from_tensors_np_float16(t, np):
    return t.Dataset.from_tensors(np.array([0.5, 2.0], dtype=np.float16))


@case("sources")
def from_tensors_np_bool_array(t, np):
    return t.Dataset.from_tensors(np.array([True, False]))


@case("sources")
def from_tensors_empty_array(t, np):
    return t.Dataset.from_tensors(np.zeros((0, 3), dtype=np.float32))


@case("sources")
def from_tensors_str_list(t, np):
    return t.Dataset.from_tensors(["a", "bc"])


@case("sources")
def from_tensors_np_unicode_array(t, np):
    return t.Dataset.from_tensors(np.array(["x", "yz"]))


@case("errors")
def from_tensors_none(t, np):
    return t.Dataset.from_tensors(None)


@case("errors")
def from_tensors_ragged_list(t, np):
    return t.Dataset.from_tensors([[1, 2], [3]])


@case("errors")
def from_tensors_str_and_int_list(t, np):
    return t.Dataset.from_tensors([1, "a"])


@case("sources")
def slices_int_list(t, np):
    return t.Dataset.from_tensor_slices([1, 2, 3])


@case("sources")
def slices_float_list(t, np):
    return t.Dataset.from_tensor_slices([1.0, 2.5])


@case("sources")
def slices_2d_list(t, np):
    return t.Dataset.from_tensor_slices([[1, 2], [3, 4], [5, 6]])


@case("sources")
def slices_np_int64(t, np):
    return t.Dataset.from_tensor_slices(np.arange(4))


@case("sources")
def slices_np_float64_2d(t, np):
    return t.Dataset.from_tensor_slices(np.arange(6, dtype=np.float64).reshape(3, 2))


@case("sources")
def slices_str_list(t, np):
    return t.Dataset.from_tensor_slices(["a", "bb", ""])


@case("sources")
def slices_bytes_list(t, np):
    return t.Dataset.from_tensor_slices([b"x", b"\x00y"])


@case("sources")
def slices_object_str_array(t, np):
    return t.Dataset.from_tensor_slices(np.array(["a", "b"], dtype=object))


@case("sources")
def slices_object_str_array_mapped(t, np):
    return t.Dataset.from_tensor_slices(np.array(["a", "b"], dtype=object)).map(lambda s: s)


@case("sources")
def slices_unicode_array(t, np):
    return t.Dataset.from_tensor_slices(np.array(["uv", "w"]))


@case("sources")
def slices_bytes_array(t, np):
    return t.Dataset.from_tensor_slices(np.array([b"p", b"qq"]))


@case("sources")
def slices_2d_str(t, np):
    return t.Dataset.from_tensor_slices([["a", "b"], ["c", "d"]])


@case("sources")
def slices_empty(t, np):
    return t.Dataset.from_tensor_slices(np.zeros((0, 2), dtype=np.int32))


@case("sources")
def slices_bool(t, np):
    return t.Dataset.from_tensor_slices([True, False, True])


@case("sources")
def slices_big_int_list(t, np):
    return t.Dataset.from_tensor_slices([1, 2**35])


@case("sources")
def slices_tuple(t, np):
    return t.Dataset.from_tensor_slices(([1, 2], ["a", "b"]))


@case("errors")
def slices_scalar(t, np):
    return t.Dataset.from_tensor_slices(5)


@case("errors")
def slices_none(t, np):
    return t.Dataset.from_tensor_slices(None)


@case("errors")
def slices_leading_dims_differ(t, np):
    return t.Dataset.from_tensor_slices(([1, 2, 3], [1, 2]))


@case("errors")
def slices_ragged(t, np):
    return t.Dataset.from_tensor_slices([[1, 2], [3]])


# ============================================================================================ structures
@case("structures")
def dict_unsorted_keys(t, np):
    return t.Dataset.from_tensors({"b": 1, "a": 2.5, "c": "s"})


@case("structures")
def dict_slices_unsorted(t, np):
    return t.Dataset.from_tensor_slices({"z": [1, 2], "a": [3.0, 4.0]})


@case("structures")
def dict_concat_other_order_batch(t, np):
    a = t.Dataset.from_tensors({"b": 1, "a": 2})
    b = t.Dataset.from_tensors({"a": 20, "b": 10})
    return a.concatenate(b).batch(2)


@case("structures")
def dict_concat_other_order(t, np):
    a = t.Dataset.from_tensors({"b": 1, "a": 2})
    b = t.Dataset.from_tensors({"a": 20, "b": 10})
    return a.concatenate(b)


@case("structures")
def dict_concat_other_order_dtypes(t, np):
    a = t.Dataset.from_tensors({"y": 1, "x": "s"})
    b = t.Dataset.from_tensors({"x": "t", "y": 2})
    return a.concatenate(b).batch(2)


@case("structures")
def dict_zip_of_dicts(t, np):
    a = t.Dataset.from_tensor_slices({"q": [1, 2], "p": [3, 4]})
    return t.Dataset.zip({"second": a, "first": t.Dataset.range(2)})


@case("structures")
def dict_interleave_other_order(t, np):
    def inner(x):
        return t.Dataset.from_tensors({"b": x, "a": x + 100}).concatenate(
            t.Dataset.from_tensors({"a": x + 200, "b": x + 1}))

    return t.Dataset.range(2).interleave(inner, cycle_length=2, block_length=1)


@case("structures")
def dict_choose_other_order(t, np):
    a = t.Dataset.from_tensors({"b": np.int64(1), "a": np.int64(2)})
    b = t.Dataset.from_tensors({"a": np.int64(20), "b": np.int64(10)})
    choice = t.Dataset.from_tensor_slices(np.array([0, 1], dtype=np.int64))
    return t.Dataset.choose_from_datasets([a, b], choice)


@case("structures")
def dict_padded_batch_other_order(t, np):
    a = t.Dataset.from_tensors({"b": [1], "a": [1, 2]})
    b = t.Dataset.from_tensors({"a": [3], "b": [4, 5, 6]})
    return a.concatenate(b).padded_batch(2)


@case("structures")
def dict_padded_batch_shapes_by_key(t, np):
    ds = t.Dataset.from_tensors({"b": [1, 2], "a": [3]})
    return ds.padded_batch(1, padded_shapes={"a": [4], "b": [3]}, padding_values={"a": -1, "b": -2})


@case("structures")
def dict_unbatch(t, np):
    return t.Dataset.from_tensors({"y": [[1, 2], [3, 4]], "x": ["a", "b"]}).unbatch()


@case("structures")
def dict_batch_unbatch_roundtrip(t, np):
    return t.Dataset.from_tensor_slices({"b": [1, 2, 3], "a": [4, 5, 6]}).batch(2).unbatch()


@case("structures")
def dict_map_returns_new_order(t, np):
    return t.Dataset.from_tensors({"b": 1, "a": 2}).map(lambda d: {"a": d["b"], "z": d["a"]})


@case("structures")
def dict_nested_in_tuple(t, np):
    return t.Dataset.from_tensors(({"k2": 1, "k1": 2}, 3)).batch(1)


@case("structures")
def dict_int_keys(t, np):
    return t.Dataset.from_tensors({2: "two", 1: "one"})


@case("structures")
def namedtuple_from_tensors(t, np):
    return t.Dataset.from_tensors(Point(1, 2.0))


@case("structures")
def namedtuple_slices_batch(t, np):
    return t.Dataset.from_tensor_slices(Point([1, 2, 3], [4, 5, 6])).batch(2)


@case("structures")
def namedtuple_map_args(t, np):
    return t.Dataset.from_tensors(Point(1, 2)).map(lambda x, y: Pair(y, x))


@case("structures")
def namedtuple_in_dict(t, np):
    return t.Dataset.from_tensors({"p": Point(1, 2), "a": 0})


@case("structures")
def namedtuple_zip(t, np):
    return t.Dataset.zip(Pair(t.Dataset.range(2), t.Dataset.range(3)))


@case("structures")
def namedtuple_unbatch(t, np):
    return t.Dataset.from_tensors(Point([1, 2], ["a", "b"])).unbatch()


@case("structures")
def tuple_map_spreads_args(t, np):
    return t.Dataset.from_tensors((1, 2)).map(lambda a, b: a - b)


@case("structures")
def tuple_nested_passed_whole(t, np):
    return t.Dataset.from_tensors((1, (2, 3))).map(lambda a, bc: bc[1] + a)


@case("structures")
def dict_passed_as_one_arg(t, np):
    return t.Dataset.from_tensors({"b": 1, "a": 2}).map(lambda d: d["a"] * 10 + d["b"])


@case("structures")
def map_returns_top_level_list(t, np):
    return t.Dataset.range(3).map(lambda x: [x, x * 2])


@case("structures")
def map_returns_inner_list_in_dict(t, np):
    return t.Dataset.range(3).map(lambda x: {"a": [x, x]})


@case("structures")
def map_returns_list_in_tuple(t, np):
    return t.Dataset.range(2).map(lambda x: (x, [x, x + 1]))


@case("structures")
def map_returns_nested_top_list(t, np):
    return t.Dataset.range(2).map(lambda x: [[x, x], [x, x]])


@case("structures")
def map_returns_python_int(t, np):
    return t.Dataset.range(3).map(lambda x: 1)


@case("structures")
def map_returns_python_float(t, np):
    return t.Dataset.range(2).map(lambda x: 0.5)


@case("structures")
def map_returns_str(t, np):
    return t.Dataset.range(2).map(lambda x: "const")


@case("structures")
def map_returns_tuple_of_one(t, np):
    return t.Dataset.range(2).map(lambda x: (x,))


@case("structures")
def map_returns_namedtuple_batched(t, np):
    return t.Dataset.range(4).map(lambda x: Point(x, x * 2)).batch(3)


@case("structures")
def map_list_result_batched(t, np):
    return t.Dataset.range(4).map(lambda x: {"v": [x, x + 1]}).batch(2)


@case("structures")
def scan_list_state_fibonacci(t, np):
    def step(state, _):
        return [state[1], state[0] + state[1]], state[0]

    return t.Dataset.range(6).scan([0, 1], step)


@case("structures")
def scan_list_state_np_int64(t, np):
    def step(state, _):
        return [state[1], state[0] + state[1]], state[0]

    # tf.data converts a list of numpy int64 scalars to an int32 tensor (QUIRK)
    return t.Dataset.range(4).scan([np.int64(0), np.int64(1)], step)


@case("structures")
def top_level_list_in_slices_is_tensor(t, np):
    return t.Dataset.from_tensor_slices([[1.5, 2.5]])


@case("structures")
def zip_single_not_wrapped(t, np):
    return t.Dataset.zip(t.Dataset.range(2))


@case("structures")
def zip_one_tuple(t, np):
    return t.Dataset.zip((t.Dataset.range(2),))


@case("structures")
def zip_nested(t, np):
    return t.Dataset.zip((t.Dataset.range(2), (t.Dataset.range(3), t.Dataset.range(4))))


@case("structures")
def zip_datasets_kwarg(t, np):
    return t.Dataset.zip(datasets=(t.Dataset.range(2), t.Dataset.range(5, 9)))


@case("structures")
def zip_shortest(t, np):
    return t.Dataset.zip((t.Dataset.range(5), t.Dataset.from_tensor_slices(["a", "b"])))


@case("errors")
def zip_list_refused(t, np):
    return t.Dataset.zip([t.Dataset.range(2), t.Dataset.range(2)])


@case("errors")
def zip_non_dataset(t, np):
    return t.Dataset.zip((t.Dataset.range(2), 5))


# ============================================================================================== batching
@case("batch")
def batch_partial(t, np):
    return t.Dataset.range(7).batch(3)


@case("batch")
def batch_drop(t, np):
    return t.Dataset.range(7).batch(3, drop_remainder=True)


@case("batch")
def batch_larger_than_data(t, np):
    return t.Dataset.range(2).batch(5)


@case("batch")
def batch_larger_than_data_drop(t, np):
    return t.Dataset.range(2).batch(5, drop_remainder=True)


@case("batch")
def batch_empty_input(t, np):
    return t.Dataset.range(0).batch(2)


@case("batch")
def batch_strings(t, np):
    return t.Dataset.from_tensor_slices(["a", "b", "c"]).batch(2)


@case("batch")
def batch_tuple(t, np):
    return t.Dataset.zip((t.Dataset.range(3), t.Dataset.from_tensor_slices([1.0, 2.0, 3.0]))).batch(2)


@case("batch")
def batch_of_batches(t, np):
    return t.Dataset.range(8).batch(2).batch(2)


@case("batch")
def batch_parallel(t, np):
    return t.Dataset.range(10).batch(3, num_parallel_calls=2)


@case("batch")
def batch_exact_multiple(t, np):
    return t.Dataset.range(6).batch(3)


@case("batch")
def batch_infinite(t, np):
    return t.Dataset.range(3).repeat().batch(2)


@case("errors")
def batch_size_zero(t, np):
    return t.Dataset.range(3).batch(0)


@case("errors")
def batch_size_negative(t, np):
    return t.Dataset.range(3).batch(-2)


@case("errors")
def batch_size_float(t, np):
    return t.Dataset.range(3).batch(2.0)


@case("errors")
def batch_size_none(t, np):
    return t.Dataset.range(3).batch(None)


@case("errors")
def batch_shapes_differ(t, np):
    return t.Dataset.range(1, 4).map(lambda x: t.ops.fill([x], x)).batch(2)


@case("padded_batch")
def padded_batch_default(t, np):
    return t.Dataset.range(1, 5).map(lambda x: t.ops.fill([x], x)).padded_batch(2)


@case("padded_batch")
def padded_batch_fixed_shape(t, np):
    return t.Dataset.range(1, 4).map(lambda x: t.ops.fill([x], x)).padded_batch(2, padded_shapes=[5])


@case("padded_batch")
def padded_batch_int_shape(t, np):
    return t.Dataset.range(1, 4).map(lambda x: t.ops.fill([x], x)).padded_batch(2, padded_shapes=5)


@case("padded_batch")
def padded_batch_none_shape(t, np):
    return t.Dataset.range(1, 4).map(lambda x: t.ops.fill([x], x)).padded_batch(3, padded_shapes=[None])


@case("padded_batch")
def padded_batch_padding_value(t, np):
    return t.Dataset.range(1, 4).map(lambda x: t.ops.fill([x], x)).padded_batch(
        2, padded_shapes=[4], padding_values=np.int64(-1))


@case("padded_batch")
def padded_batch_strings(t, np):
    return t.Dataset.from_tensor_slices([["a", "b"], ["c", "d"]]).map(lambda s: s).padded_batch(
        2, padded_shapes=[3])


@case("padded_batch")
def padded_batch_string_padding(t, np):
    return t.Dataset.from_tensor_slices([["a"], ["b"]]).padded_batch(2, padded_shapes=[2], padding_values="-")


@case("padded_batch")
def padded_batch_2d(t, np):
    return t.Dataset.range(1, 4).map(lambda x: t.ops.fill([x, 2], x)).padded_batch(3)


@case("padded_batch")
def padded_batch_2d_partial_shapes(t, np):
    return t.Dataset.range(1, 4).map(lambda x: t.ops.fill([x, 2], x)).padded_batch(2, padded_shapes=[None, 3])


@case("padded_batch")
def padded_batch_tuple(t, np):
    ds = t.Dataset.range(1, 4).map(lambda x: (t.ops.fill([x], x), x))
    return ds.padded_batch(2, padded_shapes=([None], []), padding_values=(np.int64(9), np.int64(0)))


@case("padded_batch")
def padded_batch_scalars(t, np):
    return t.Dataset.range(5).padded_batch(2)


@case("padded_batch")
def padded_batch_drop(t, np):
    return t.Dataset.range(1, 6).map(lambda x: t.ops.fill([x], x)).padded_batch(2, drop_remainder=True)


@case("padded_batch")
def padded_batch_bool(t, np):
    return t.Dataset.range(1, 3).map(lambda x: t.ops.fill([x], True)).padded_batch(2)


@case("padded_batch")
def padded_batch_float(t, np):
    return t.Dataset.range(1, 3).map(lambda x: t.ops.fill([x], 0.5)).padded_batch(2)


@case("errors")
def padded_batch_too_small(t, np):
    return t.Dataset.range(1, 5).map(lambda x: t.ops.fill([x], x)).padded_batch(2, padded_shapes=[2])


@case("errors")
def padded_batch_rank_mismatch(t, np):
    return t.Dataset.range(1, 4).map(lambda x: t.ops.fill([x], x)).padded_batch(2, padded_shapes=[2, 2])


@case("errors")
def padded_batch_padding_dtype_mismatch(t, np):
    return t.Dataset.range(1, 4).map(lambda x: t.ops.fill([x], x)).padded_batch(
        2, padding_values=np.float32(1.0))


@case("errors")
def padded_batch_nonscalar_padding(t, np):
    return t.Dataset.range(1, 4).map(lambda x: t.ops.fill([x], x)).padded_batch(
        2, padding_values=np.array([1, 2], dtype=np.int64))


@case("errors")
def padded_batch_size_zero(t, np):
    return t.Dataset.range(3).padded_batch(0)


@case("unbatch")
def unbatch_simple(t, np):
    return t.Dataset.range(7).batch(3).unbatch()


@case("unbatch")
def unbatch_with_empty_batches(t, np):
    return t.Dataset.from_tensor_slices(np.zeros((3, 0), dtype=np.int64)).unbatch()


@case("unbatch")
def unbatch_tuple(t, np):
    return t.Dataset.from_tensors(([1, 2], [[1.0], [2.0]])).unbatch()


@case("unbatch")
def unbatch_strings(t, np):
    return t.Dataset.from_tensors(["x", "y"]).unbatch()


@case("unbatch")
def unbatch_2d(t, np):
    return t.Dataset.from_tensors(np.arange(6).reshape(3, 2)).unbatch()


@case("errors")
def unbatch_scalars(t, np):
    return t.Dataset.range(3).unbatch()


@case("errors")
def unbatch_leading_dims_differ(t, np):
    return t.Dataset.from_tensors(([1, 2], [1, 2, 3])).unbatch()


@case("rebatch")
def rebatch_crosses_boundaries(t, np):
    return t.Dataset.range(10).batch(2).rebatch(5)


@case("rebatch")
def rebatch_list_sizes(t, np):
    return t.Dataset.range(10).batch(4).rebatch([2, 1, 1])


@case("rebatch")
def rebatch_drop(t, np):
    return t.Dataset.range(10).batch(4).rebatch(3, drop_remainder=True)


@case("rebatch")
def rebatch_smaller(t, np):
    return t.Dataset.range(5).batch(5).rebatch(2)


@case("errors")
def rebatch_unbatched(t, np):
    return t.Dataset.range(4).rebatch(2)


# ========================================================================================= take/skip/repeat
for _n in (0, 2, 10, -1, -5):
    add("take_skip", f"take_{_n}".replace("-", "neg"), lambda t, np, n=_n: t.Dataset.range(5).take(n))
    add("take_skip", f"skip_{_n}".replace("-", "neg"), lambda t, np, n=_n: t.Dataset.range(5).skip(n))


@case("take_skip")
def take_infinite(t, np):
    return t.Dataset.range(3).repeat().take(7)


@case("take_skip")
def skip_infinite_cardinality(t, np):
    return t.Dataset.range(3).repeat().skip(4)


@case("take_skip")
def skip_then_take(t, np):
    return t.Dataset.range(10).skip(3).take(4)


@case("errors")
def take_float(t, np):
    return t.Dataset.range(3).take(1.5)


@case("errors")
def take_none(t, np):
    return t.Dataset.range(3).take(None)


@case("errors")
def skip_none(t, np):
    return t.Dataset.range(3).skip(None)


@case("errors")
def skip_str(t, np):
    return t.Dataset.range(3).skip("1")


@case("repeat")
def repeat_twice(t, np):
    return t.Dataset.range(3).repeat(2)


@case("repeat")
def repeat_zero(t, np):
    return t.Dataset.range(3).repeat(0)


@case("repeat")
def repeat_forever(t, np):
    return t.Dataset.range(3).repeat()


@case("repeat")
def repeat_negative(t, np):
    return t.Dataset.range(2).repeat(-1)


@case("repeat")
def repeat_empty_forever(t, np):
    return t.Dataset.range(0).repeat()


@case("repeat")
def repeat_then_batch(t, np):
    return t.Dataset.range(3).repeat(2).batch(4)


@case("repeat")
def batch_then_repeat(t, np):
    return t.Dataset.range(3).batch(2).repeat(2)


@case("repeat")
def repeat_take_cardinality(t, np):
    return t.Dataset.range(3).repeat().take(5)


# ================================================================================================ shard
for _n, _i in ((2, 0), (2, 1), (3, 2), (20, 5), (20, 15), (1, 0)):
    add("shard", f"shard_{_n}_{_i}", lambda t, np, n=_n, i=_i: t.Dataset.range(10).shard(n, i))


@case("shard")
def shard_then_batch(t, np):
    return t.Dataset.range(10).shard(2, 0).batch(2)


@case("shard")
def batch_then_shard(t, np):
    return t.Dataset.range(10).batch(2).shard(2, 0)


@case("errors")
def shard_index_out_of_range(t, np):
    return t.Dataset.range(10).shard(2, 2)


@case("errors")
def shard_negative_index(t, np):
    return t.Dataset.range(10).shard(2, -2)


@case("errors")
def shard_zero_shards(t, np):
    return t.Dataset.range(10).shard(0, 0)


@case("errors")
def shard_none(t, np):
    return t.Dataset.range(10).shard(None, 0)


# ======================================================================================= enumerate/concat
@case("enumerate")
def enumerate_default(t, np):
    return t.Dataset.from_tensor_slices(["a", "b"]).enumerate()


@case("enumerate")
def enumerate_start(t, np):
    return t.Dataset.range(3).enumerate(start=5)


@case("enumerate")
def enumerate_negative_start(t, np):
    return t.Dataset.range(3).enumerate(start=-2)


@case("enumerate")
def enumerate_dict(t, np):
    return t.Dataset.from_tensors({"b": 1, "a": 2}).enumerate()


@case("concatenate")
def concatenate_simple(t, np):
    return t.Dataset.range(3).concatenate(t.Dataset.range(10, 12))


@case("concatenate")
def concatenate_shapes_relax(t, np):
    a = t.Dataset.from_tensors(np.zeros(2, dtype=np.int64))
    b = t.Dataset.from_tensors(np.ones(3, dtype=np.int64))
    return a.concatenate(b)


@case("concatenate")
def concatenate_infinite_cardinality(t, np):
    return t.Dataset.range(2).repeat().concatenate(t.Dataset.range(2))


@case("concatenate")
def concatenate_empty(t, np):
    return t.Dataset.range(0).concatenate(t.Dataset.range(2))


@case("errors")
def concatenate_int32_int64(t, np):
    return t.Dataset.from_tensor_slices([1, 2]).concatenate(t.Dataset.range(2))


@case("errors")
def concatenate_structure_mismatch(t, np):
    return t.Dataset.range(2).concatenate(t.Dataset.zip((t.Dataset.range(2), t.Dataset.range(2))))


@case("errors")
def concatenate_dict_keys_differ(t, np):
    return t.Dataset.from_tensors({"a": 1}).concatenate(t.Dataset.from_tensors({"b": 1}))


@case("errors")
def concatenate_rank_differs(t, np):
    a = t.Dataset.from_tensors(np.zeros(2, dtype=np.int64))
    return a.concatenate(t.Dataset.range(2))


# ============================================================================================ map, filter
@case("map")
def map_arith(t, np):
    return t.Dataset.range(5).map(lambda x: x * 2 + 1)


@case("map")
def map_parallel(t, np):
    return t.Dataset.range(20).map(lambda x: x * x, num_parallel_calls=4)


@case("map")
def map_autotune(t, np):
    return t.Dataset.range(20).map(lambda x: x - 1, num_parallel_calls=t.AUTOTUNE)


@case("map", compare="multiset")
def map_nondeterministic(t, np):
    return t.Dataset.range(20).map(lambda x: x + 1, num_parallel_calls=3, deterministic=False)


@case("map")
def map_cast(t, np):
    return t.Dataset.range(3).map(lambda x: t.ops.cast(x, "float32") / 2)


@case("map")
def map_fill_spec(t, np):
    return t.Dataset.range(1, 4).map(lambda x: t.ops.fill([x], x))


@case("map")
def map_zeros_growing(t, np):
    return t.Dataset.range(1, 4).map(lambda x: t.ops.zeros(x, "float32"))


@case("map")
def map_fixed_shape(t, np):
    return t.Dataset.range(3).map(lambda x: t.ops.fill([2, 3], x))


@case("map")
def map_to_tuple(t, np):
    return t.Dataset.range(3).map(lambda x: (x, t.ops.cast(x, "float64")))


@case("map")
def map_cardinality_kept(t, np):
    return t.Dataset.range(4).repeat(3).map(lambda x: x)


@case("map")
def map_after_batch(t, np):
    return t.Dataset.range(5).batch(2).map(lambda b: t.ops.reduce_sum(b))


@case("map")
def map_shape0(t, np):
    return t.Dataset.range(1, 4).map(lambda x: t.ops.fill([x], x)).map(lambda v: t.ops.shape0(v))


@case("map")
def map_int32_plus_int32(t, np):
    return t.Dataset.from_tensor_slices([1, 2]).map(lambda x: x + 1)


@case("map")
def map_strings_identity_batch(t, np):
    return t.Dataset.from_tensor_slices(["a", "b", "c"]).map(lambda s: s).batch(2)


@case("map")
def map_then_filter_then_map(t, np):
    return t.Dataset.range(10).map(lambda x: x * 3).filter(lambda x: x % 2 == 0).map(lambda x: x // 2)


@case("errors")
def map_one_param_over_tuple(t, np):
    return t.Dataset.from_tensors((1, 2)).map(lambda x: x)


@case("errors")
def map_num_parallel_calls_zero(t, np):
    return t.Dataset.range(3).map(lambda x: x, num_parallel_calls=0)


@case("errors")
def map_num_parallel_calls_negative(t, np):
    return t.Dataset.range(3).map(lambda x: x, num_parallel_calls=-5)


@case("errors")
def map_returns_none(t, np):
    return t.Dataset.range(3).map(lambda x: None)


@case("errors")
def map_user_error(t, np):
    return t.Dataset.range(4).map(lambda x: t.ops.py_raise(x, 2))


@case("filter")
def filter_even(t, np):
    return t.Dataset.range(10).filter(lambda x: x % 2 == 0)


@case("filter")
def filter_none_kept(t, np):
    return t.Dataset.range(5).filter(lambda x: x > 10)


@case("filter")
def filter_tuple_args(t, np):
    return t.Dataset.zip((t.Dataset.range(5), t.Dataset.range(5, 10))).filter(lambda a, b: a + b > 8)


@case("filter")
def filter_dict(t, np):
    return t.Dataset.from_tensor_slices({"b": [1, 2, 3], "a": [3, 2, 1]}).filter(lambda d: d["a"] > d["b"])


@case("filter")
def filter_python_true(t, np):
    return t.Dataset.range(3).filter(lambda x: True)


@case("filter")
def filter_infinite_cardinality(t, np):
    return t.Dataset.range(4).repeat().filter(lambda x: x < 2)


@case("errors")
def filter_numeric_predicate(t, np):
    return t.Dataset.range(3).filter(lambda x: x)


@case("errors")
def filter_vector_predicate(t, np):
    return t.Dataset.range(3).filter(lambda x: t.ops.fill([2], True))


# ===================================================================================== flat_map/interleave
@case("flat_map")
def flat_map_repeat(t, np):
    return t.Dataset.range(1, 4).flat_map(lambda x: t.Dataset.from_tensors(x).repeat(x))


@case("flat_map")
def flat_map_empty_inner(t, np):
    return t.Dataset.range(4).flat_map(lambda x: t.Dataset.range(x % 2))


@case("flat_map")
def flat_map_tuple_args(t, np):
    return t.Dataset.from_tensors((1, 2)).flat_map(lambda a, b: t.Dataset.from_tensor_slices(t.ops.stack([a, b])))


@case("flat_map")
def flat_map_slices(t, np):
    return t.Dataset.range(3).flat_map(lambda x: t.Dataset.from_tensor_slices(t.ops.fill([2], x)))


@case("errors")
def flat_map_not_dataset(t, np):
    return t.Dataset.range(3).flat_map(lambda x: x)


def _repeat_self(t):
    return lambda x: t.Dataset.from_tensors(x).repeat(x)


for _c, _b in ((2, 1), (2, 2), (3, 2), (1, 1), (4, 3), (3, 1)):
    add("interleave", f"interleave_c{_c}_b{_b}",
        lambda t, np, c=_c, b=_b: t.Dataset.range(1, 6).interleave(_repeat_self(t), cycle_length=c, block_length=b))

for _c, _b in ((2, 1), (3, 2)):
    add("interleave", f"interleave_parallel_c{_c}_b{_b}",
        lambda t, np, c=_c, b=_b: t.Dataset.range(1, 6).interleave(
            _repeat_self(t), cycle_length=c, block_length=b, num_parallel_calls=c))


@case("interleave")
def interleave_empty_inner(t, np):
    return t.Dataset.range(6).interleave(lambda x: t.Dataset.range(x % 3), cycle_length=2)


@case("interleave")
def interleave_cycle_larger_than_input(t, np):
    return t.Dataset.range(2).interleave(lambda x: t.Dataset.range(3), cycle_length=5, block_length=2)


@case("interleave")
def interleave_tuple_elements(t, np):
    return t.Dataset.range(2).interleave(
        lambda x: t.Dataset.zip((t.Dataset.from_tensors(x).repeat(2), t.Dataset.range(2))), cycle_length=2)


@case("interleave", compare="multiset")
def interleave_nondeterministic(t, np):
    return t.Dataset.range(1, 5).interleave(_repeat_self(t), cycle_length=2, num_parallel_calls=2,
                                           deterministic=False)


@case("errors")
def interleave_cycle_zero(t, np):
    return t.Dataset.range(3).interleave(lambda x: t.Dataset.range(x), cycle_length=0)


@case("errors")
def interleave_block_zero(t, np):
    return t.Dataset.range(3).interleave(lambda x: t.Dataset.range(x), cycle_length=2, block_length=0)


@case("errors")
def interleave_npc_over_cycle(t, np):
    return t.Dataset.range(3).interleave(lambda x: t.Dataset.range(x), cycle_length=2, num_parallel_calls=3)


@case("errors")
def interleave_not_dataset(t, np):
    return t.Dataset.range(3).interleave(lambda x: x, cycle_length=2)


# ============================================================================================== window
for _args in ((3, None, 1, False), (3, 1, 1, False), (3, 2, 2, False), (2, 3, 1, False), (3, 1, 1, True),
              (4, 4, 1, True), (1, 1, 3, False)):
    _size, _shift, _stride, _drop = _args
    add("window", f"window_{_size}_{_shift}_{_stride}_{'drop' if _drop else 'keep'}",
        lambda t, np, a=_args: t.Dataset.range(7 if a[1] == 1 else 10).window(
            a[0], shift=a[1], stride=a[2], drop_remainder=a[3]).flat_map(lambda w: w.batch(a[0])))


@case("window")
def window_raw_elements(t, np):
    return t.Dataset.range(5).window(2)


@case("window")
def window_tuple_of_datasets(t, np):
    ds = t.Dataset.zip((t.Dataset.range(4), t.Dataset.from_tensor_slices(["a", "b", "c", "d"])))
    return ds.window(3, shift=2)


@case("window")
def window_dict_of_datasets(t, np):
    return t.Dataset.from_tensor_slices({"b": [1, 2, 3], "a": [4, 5, 6]}).window(2).flat_map(
        lambda d: t.Dataset.zip({"b": d["b"].batch(2), "a": d["a"].batch(2)}))


@case("errors")
def window_size_zero(t, np):
    return t.Dataset.range(5).window(0)


@case("errors")
def window_shift_zero(t, np):
    return t.Dataset.range(5).window(2, shift=0)


@case("errors")
def window_stride_negative(t, np):
    return t.Dataset.range(5).window(2, stride=-1)


# ===================================================================================== group_by_window etc.
@case("group_by_window")
def group_by_window_parity(t, np):
    return t.Dataset.range(10).group_by_window(lambda x: x % 2, lambda k, w: w.batch(3), window_size=3)


@case("group_by_window")
def group_by_window_key_in_result(t, np):
    return t.Dataset.range(7).group_by_window(
        lambda x: x % 3, lambda k, w: w.batch(10).map(lambda b: (k, b)), window_size=2)


@case("group_by_window")
def group_by_window_size_func(t, np):
    return t.Dataset.range(12).group_by_window(lambda x: x % 2, lambda k, w: w.batch(5),
                                               window_size_func=lambda k: k + 2)


@case("errors")
def group_by_window_both_sizes(t, np):
    return t.Dataset.range(4).group_by_window(lambda x: x % 2, lambda k, w: w.batch(2), window_size=2,
                                              window_size_func=lambda k: np.int64(2))


@case("errors")
def group_by_window_no_size(t, np):
    return t.Dataset.range(4).group_by_window(lambda x: x % 2, lambda k, w: w.batch(2))


def _sequences(t):
    lengths = [1, 3, 2, 5, 4, 1, 6, 2]
    return t.Dataset.from_tensor_slices(lengths).map(lambda n: t.ops.fill([n], n))


@case("bucket")
def bucket_basic(t, np):
    return _sequences(t).bucket_by_sequence_length(lambda x: t.ops.shape0(x), [3, 5], [2, 2, 2])


@case("bucket")
def bucket_pad_to_boundary(t, np):
    return _sequences(t).bucket_by_sequence_length(lambda x: t.ops.shape0(x), [3, 7], [2, 2, 2],
                                                   pad_to_bucket_boundary=True)


@case("bucket")
def bucket_drop_remainder(t, np):
    return _sequences(t).bucket_by_sequence_length(lambda x: t.ops.shape0(x), [4], [2, 3], drop_remainder=True)


@case("bucket")
def bucket_padding_value(t, np):
    return _sequences(t).bucket_by_sequence_length(lambda x: t.ops.shape0(x), [4], [3, 3],
                                                   padding_values=np.int32(-1))


@case("bucket")
def bucket_fixed_widths(t, np):
    ds = t.Dataset.from_tensor_slices(np.arange(12, dtype=np.int64).reshape(6, 2))
    return ds.bucket_by_sequence_length(lambda x: t.ops.shape0(x), [3], [4, 4])


@case("errors")
def bucket_sizes_mismatch(t, np):
    return _sequences(t).bucket_by_sequence_length(lambda x: t.ops.shape0(x), [3, 5], [2, 2])


# ===================================================================================== scan/unique/take_while
@case("scan")
def scan_running_sum(t, np):
    return t.Dataset.range(5).scan(np.int64(0), lambda s, x: (s + x, s + x))


@case("scan")
def scan_emits_tuple(t, np):
    return t.Dataset.range(4).scan(np.int64(10), lambda s, x: (s - 1, (s, x)))


@case("scan")
def scan_dict_state(t, np):
    return t.Dataset.range(3).scan({"b": np.int64(0), "a": np.int64(1)},
                                   lambda s, x: ({"b": s["b"] + x, "a": s["a"] * 2}, s["a"] + s["b"]))


@case("scan")
def scan_growing_state_spec(t, np):
    return t.Dataset.range(3).scan(np.zeros([1], np.int64), lambda s, x: (s, s))


@case("errors")
def scan_state_dtype_change(t, np):
    return t.Dataset.range(3).scan(np.int64(0), lambda s, x: (t.ops.cast(s, "float32"), x))


@case("unique")
def unique_ints(t, np):
    return t.Dataset.from_tensor_slices(np.array([3, 1, 3, 2, 1, 4], dtype=np.int64)).unique()


@case("unique")
def unique_strings(t, np):
    return t.Dataset.from_tensor_slices(["b", "a", "b", "c", "a"]).unique()


@case("unique")
def unique_int32(t, np):
    return t.Dataset.from_tensor_slices([5, 5, 6]).unique()


@case("errors")
def unique_float(t, np):
    return t.Dataset.from_tensor_slices([1.0, 1.0]).unique()


@case("errors")
def unique_tuple(t, np):
    return t.Dataset.zip((t.Dataset.range(2), t.Dataset.range(2))).unique()


@case("take_while")
def take_while_basic(t, np):
    return t.Dataset.range(10).take_while(lambda x: x < 4)


@case("take_while")
def take_while_never(t, np):
    return t.Dataset.range(10).take_while(lambda x: x > 4)


@case("take_while")
def take_while_infinite(t, np):
    return t.Dataset.range(3).repeat().take_while(lambda x: x < 2)


@case("take_while")
def take_while_tuple(t, np):
    return t.Dataset.zip((t.Dataset.range(5), t.Dataset.range(5))).take_while(lambda a, b: a + b < 5)


@case("errors")
def take_while_numeric_predicate(t, np):
    return t.Dataset.range(3).take_while(lambda x: x)


# ========================================================================================= sample/choose
@case("choose")
def choose_fixed(t, np):
    a, b = t.Dataset.range(0, 5), t.Dataset.range(100, 105)
    choice = t.Dataset.from_tensor_slices(np.array([0, 1, 1, 0, 1], dtype=np.int64))
    return t.Dataset.choose_from_datasets([a, b], choice)


@case("choose")
def choose_stop_on_empty(t, np):
    a, b = t.Dataset.range(1), t.Dataset.range(100, 105)
    choice = t.Dataset.from_tensor_slices(np.array([0, 0, 1, 1], dtype=np.int64))
    return t.Dataset.choose_from_datasets([a, b], choice)


@case("choose")
def choose_no_stop_on_empty(t, np):
    a, b = t.Dataset.range(1), t.Dataset.range(100, 105)
    choice = t.Dataset.from_tensor_slices(np.array([0, 0, 1, 1], dtype=np.int64))
    return t.Dataset.choose_from_datasets([a, b], choice, stop_on_empty_dataset=False)


@case("choose")
def choose_strings(t, np):
    a, b = t.Dataset.from_tensor_slices(["a", "b"]), t.Dataset.from_tensor_slices(["x", "y"])
    choice = t.Dataset.from_tensor_slices(np.array([1, 0, 1], dtype=np.int64))
    return t.Dataset.choose_from_datasets([a, b], choice)


@case("errors")
def choose_int32_choice(t, np):
    choice = t.Dataset.from_tensor_slices(np.array([0], dtype=np.int32))
    return t.Dataset.choose_from_datasets([t.Dataset.range(2)], choice)


@case("errors")
def choose_out_of_range_index(t, np):
    choice = t.Dataset.from_tensor_slices(np.array([0, 5], dtype=np.int64))
    return t.Dataset.choose_from_datasets([t.Dataset.range(3), t.Dataset.range(3)], choice)


@case("errors")
def choose_incompatible_datasets(t, np):
    choice = t.Dataset.from_tensor_slices(np.array([0, 1], dtype=np.int64))
    return t.Dataset.choose_from_datasets([t.Dataset.range(3), t.Dataset.from_tensor_slices(["a"])], choice)


@case("sample")
def sample_weight_one(t, np):
    return t.Dataset.sample_from_datasets([t.Dataset.range(3), t.Dataset.range(10, 13)], weights=[1.0, 0.0],
                                          seed=1)


@case("sample", compare="multiset")
def sample_multiset(t, np):
    return t.Dataset.sample_from_datasets([t.Dataset.range(4), t.Dataset.range(10, 14)], weights=[0.5, 0.5],
                                          seed=3)


@case("sample")
def sample_stop_on_empty_cardinality(t, np):
    return t.Dataset.sample_from_datasets([t.Dataset.range(0), t.Dataset.range(5)], weights=[0.0, 1.0],
                                          seed=1, stop_on_empty_dataset=True)


@case("shuffle", compare="multiset")
def shuffle_permutation(t, np):
    return t.Dataset.range(20).shuffle(5, seed=7)


@case("shuffle", compare="multiset")
def shuffle_repeat(t, np):
    return t.Dataset.range(6).shuffle(6, seed=1).repeat(2)


@case("shuffle")
def shuffle_buffer_one(t, np):
    return t.Dataset.range(6).shuffle(1, seed=3)


@case("errors")
def shuffle_buffer_zero(t, np):
    return t.Dataset.range(3).shuffle(0)


@case("errors")
def shuffle_buffer_none(t, np):
    return t.Dataset.range(3).shuffle(None)


@case("prefetch")
def prefetch_keeps(t, np):
    return t.Dataset.range(5).prefetch(2)


@case("prefetch")
def prefetch_zero(t, np):
    return t.Dataset.range(3).prefetch(0)


@case("prefetch")
def prefetch_autotune(t, np):
    return t.Dataset.range(3).prefetch(t.AUTOTUNE)


@case("errors")
def prefetch_below_autotune(t, np):
    return t.Dataset.range(3).prefetch(-2)


@case("errors")
def prefetch_none(t, np):
    return t.Dataset.range(3).prefetch(None)


@case("cache")
def cache_in_memory(t, np):
    return t.Dataset.range(4).map(lambda x: x * 3).cache()


@case("cache")
def cache_take_repeat(t, np):
    return t.Dataset.range(5).cache().take(2).repeat(2)


# ========================================================================================= from_generator
def _gen_ints():
    yield from range(4)


@case("generator")
def generator_signature(t, np):
    return t.Dataset.from_generator(_gen_ints, output_signature=t.spec((), "int64"))


@case("generator")
def generator_output_types(t, np):
    return t.Dataset.from_generator(_gen_ints, output_types=t.dtype("int32"))


@case("generator")
def generator_output_types_shapes(t, np):
    return t.Dataset.from_generator(lambda: iter([np.zeros(2), np.ones(2)]), output_types=t.dtype("float64"),
                                    output_shapes=(2,))


@case("generator")
def generator_tuple(t, np):
    def gen():
        for i in range(3):
            yield i, "s%d" % i

    return t.Dataset.from_generator(gen, output_signature=(t.spec((), "int64"), t.spec((), "string")))


@case("generator")
def generator_dict(t, np):
    def gen():
        for i in range(2):
            yield {"b": i, "a": [i, i]}

    return t.Dataset.from_generator(gen, output_signature={"b": t.spec((), "int32"), "a": t.spec((None,), "int64")})


@case("generator")
def generator_args(t, np):
    def gen(n, word):
        for i in range(n):
            yield word * (i + 1)

    return t.Dataset.from_generator(gen, args=(3, "ab"), output_signature=t.spec((), "string"))


@case("generator")
def generator_variable_length(t, np):
    def gen():
        for n in (1, 3, 2):
            yield np.arange(n)

    return t.Dataset.from_generator(gen, output_signature=t.spec((None,), "int64")).padded_batch(3)


@case("generator")
def generator_repeat(t, np):
    return t.Dataset.from_generator(_gen_ints, output_signature=t.spec((), "int64")).repeat(2)


@case("errors")
def generator_not_callable(t, np):
    return t.Dataset.from_generator(5, output_signature=t.spec((), "int64"))


@case("errors")
def generator_no_types(t, np):
    return t.Dataset.from_generator(_gen_ints)


@case("errors")
def generator_wrong_structure(t, np):
    return t.Dataset.from_generator(lambda: iter([(1, 2)]), output_signature=t.spec((), "int64"))


@case("errors")
def generator_wrong_shape(t, np):
    return t.Dataset.from_generator(lambda: iter([np.zeros(2)]), output_signature=t.spec((3,), "float64"))


@case("errors")
def generator_raises(t, np):
    def gen():
        yield 1
        yield 2
        raise ValueError("boom!")

    return t.Dataset.from_generator(gen, output_signature=t.spec((), "int64"))


@case("errors")
def generator_list_for_tuple(t, np):
    return t.Dataset.from_generator(lambda: iter([[1, 2]]),
                                    output_signature=(t.spec((), "int64"), t.spec((), "int64")))


# ================================================================================================ counter
@case("counter", limit=5)
def counter_default(t, np):
    return t.Dataset.counter()


@case("counter", limit=5)
def counter_start_step(t, np):
    return t.Dataset.counter(10, 3)


@case("counter", limit=5)
def counter_negative_step(t, np):
    return t.Dataset.counter(0, -1)


@case("counter", limit=5)
def counter_int32(t, np):
    return t.Dataset.counter(2, dtype=t.dtype("int32"))


@case("counter")
def counter_take(t, np):
    return t.Dataset.counter(5).take(3)


# ================================================================================================ misc
@case("misc", limit=8)
def repeat_infinite_enumerate(t, np):
    return t.Dataset.range(2).repeat().enumerate()


@case("misc")
def zip_infinite_with_finite(t, np):
    return t.Dataset.zip((t.Dataset.range(3).repeat(), t.Dataset.range(4)))


@case("misc")
def zip_unknown_cardinality(t, np):
    return t.Dataset.zip((t.Dataset.range(3).filter(lambda x: True), t.Dataset.range(4)))


@case("misc")
def batch_unknown_cardinality(t, np):
    return t.Dataset.range(5).filter(lambda x: x > 0).batch(2)


@case("misc")
def take_unknown_cardinality(t, np):
    return t.Dataset.range(5).filter(lambda x: x > 0).take(2)


@case("misc")
def repeat_unknown_cardinality(t, np):
    return t.Dataset.range(3).filter(lambda x: x > 0).repeat(2)


@case("misc")
def shard_infinite_cardinality(t, np):
    return t.Dataset.range(4).repeat().shard(2, 1).take(3)


@case("misc")
def apply_identity(t, np):
    return t.Dataset.range(3).apply(lambda ds: ds.map(lambda x: x + 7))


@case("errors")
def apply_non_dataset(t, np):
    return t.Dataset.range(3).apply(lambda ds: 5)


@case("misc")
def unbatch_then_batch_strings(t, np):
    return t.Dataset.from_tensors([["a", "b"], ["c", "d"]]).unbatch().unbatch().batch(3)


@case("misc")
def nested_flat_map_interleave(t, np):
    return t.Dataset.range(3).flat_map(
        lambda x: t.Dataset.range(x).interleave(lambda y: t.Dataset.from_tensors(y).repeat(2), cycle_length=2))


@case("misc")
def enumerate_batch_drop_spec(t, np):
    return t.Dataset.range(5).enumerate().batch(2, drop_remainder=True)


@case("misc")
def padded_batch_of_strings_2d(t, np):
    return t.Dataset.from_tensor_slices([["a"], ["b"]]).map(lambda s: t.ops.stack([s[0], s[0]])).padded_batch(
        2, padded_shapes=[3])


# ================================================================================================= files
@case("files")
def tfrecord_one_file(t, np):
    return t.TFRecordDataset(t.files["a.tfrecord"])


@case("files")
def tfrecord_list(t, np):
    return t.TFRecordDataset([t.files["a.tfrecord"], t.files["b.tfrecord"]])


@case("files")
def tfrecord_empty_file(t, np):
    return t.TFRecordDataset([t.files["empty.tfrecord"], t.files["c.tfrecord"]])


@case("files")
def tfrecord_gzip(t, np):
    return t.TFRecordDataset(t.files["a.tfrecord.gz"], compression_type="GZIP")


@case("files")
def tfrecord_zlib(t, np):
    return t.TFRecordDataset(t.files["a.tfrecord.zz"], compression_type="ZLIB")


@case("files")
def tfrecord_parallel_reads(t, np):
    names = [t.files[n] for n in ("a.tfrecord", "c.tfrecord", "b.tfrecord", "d.tfrecord")]
    return t.TFRecordDataset(names, num_parallel_reads=2)


@case("files")
def tfrecord_from_dataset_of_names(t, np):
    return t.TFRecordDataset(t.Dataset.from_tensor_slices([t.files["c.tfrecord"], t.files["d.tfrecord"]]))


@case("files")
def tfrecord_interleave_files(t, np):
    names = t.Dataset.from_tensor_slices([t.files["a.tfrecord"], t.files["b.tfrecord"]])
    return names.interleave(lambda f: t.TFRecordDataset(f), cycle_length=2, block_length=2)


@case("files")
def tfrecord_batch(t, np):
    return t.TFRecordDataset(t.files["a.tfrecord"]).batch(2)


@case("files")
def tfrecord_cut_header_is_eof(t, np):
    return t.TFRecordDataset(t.files["cut_header.tfrecord"])


@case("errors")
def tfrecord_bad_payload_crc(t, np):
    return t.TFRecordDataset(t.files["badcrc.tfrecord"])


@case("errors")
def tfrecord_truncated(t, np):
    return t.TFRecordDataset(t.files["truncated.tfrecord"])


@case("errors")
def tfrecord_garbage(t, np):
    return t.TFRecordDataset(t.files["garbage.tfrecord"])


@case("errors")
def tfrecord_missing_file_after_good(t, np):
    return t.TFRecordDataset([t.files["c.tfrecord"], t.files["c.tfrecord"] + ".missing"])


@case("errors")
def tfrecord_plain_read_as_gzip(t, np):
    return t.TFRecordDataset(t.files["a.tfrecord"], compression_type="GZIP")


@case("errors")
def tfrecord_gzip_read_as_plain(t, np):
    return t.TFRecordDataset(t.files["a.tfrecord.gz"])


@case("errors")
def tfrecord_non_string_filenames(t, np):
    return t.TFRecordDataset(t.Dataset.range(2))


@case("files")
def text_lines(t, np):
    return t.TextLineDataset(t.files["lines.txt"])


@case("files")
def text_crlf(t, np):
    return t.TextLineDataset(t.files["crlf.txt"])


@case("files")
def text_trailing_blank(t, np):
    return t.TextLineDataset(t.files["trailing.txt"])


@case("files")
def text_empty(t, np):
    return t.TextLineDataset(t.files["empty.txt"])


@case("files")
def text_gzip(t, np):
    return t.TextLineDataset(t.files["lines.txt.gz"], compression_type="GZIP")


@case("files")
def text_two_files_parallel(t, np):
    return t.TextLineDataset([t.files["lines.txt"], t.files["lines2.txt"]], num_parallel_reads=2)


@case("files")
def text_batch(t, np):
    return t.TextLineDataset([t.files["lines.txt"], t.files["lines2.txt"]]).batch(4)


@case("errors")
def text_missing_file(t, np):
    return t.TextLineDataset([t.files["lines2.txt"], t.files["lines2.txt"] + ".nope"])


@case("files")
def fixed_length_records(t, np):
    return t.FixedLengthRecordDataset(t.files["fixed.bin"], record_bytes=8)


@case("files")
def fixed_length_header_footer(t, np):
    return t.FixedLengthRecordDataset(t.files["fixed_hf.bin"], record_bytes=4, header_bytes=2, footer_bytes=1)


@case("files")
def fixed_length_partial_tail(t, np):
    return t.FixedLengthRecordDataset(t.files["fixed.bin"], record_bytes=10)


@case("files")
def csv_typed_defaults(t, np):
    return t.CsvDataset(t.files["plain.csv"], [0, 0.0, ""])


@case("files")
def csv_dtype_defaults(t, np):
    return t.CsvDataset(t.files["plain.csv"], [t.dtype("int64"), t.dtype("float64"), t.dtype("string")])


@case("files")
def csv_header(t, np):
    return t.CsvDataset(t.files["header.csv"], [0, 0.0, ""], header=True)


@case("files")
def csv_missing_with_defaults(t, np):
    return t.CsvDataset(t.files["missing.csv"], [-1, 9.5, "dflt"])


@case("files")
def csv_int64_default(t, np):
    return t.CsvDataset(t.files["missing.csv"], [np.array([7], dtype=np.int64), [9.5], ["d"]])


@case("files")
def csv_big_python_int_default(t, np):
    return t.CsvDataset(t.files["missing.csv"], [2**40, 9.5, "d"])


@case("files")
def csv_numpy_scalar_default(t, np):
    # tf.data takes a numpy scalar default for a dtype (the field becomes required): a QUIRK
    return t.CsvDataset(t.files["missing.csv"], [np.int32(-1), np.float32(9.5), "dflt"])


@case("files")
def csv_quoted(t, np):
    return t.CsvDataset(t.files["quoted.csv"], [t.dtype("int64"), ""])


@case("files")
def csv_tab_delim(t, np):
    return t.CsvDataset(t.files["tabs.csv"], [0, ""], field_delim="\t")


@case("files")
def csv_select_cols(t, np):
    return t.CsvDataset(t.files["plain.csv"], [0, ""], select_cols=[0, 2])


@case("files")
def csv_batch(t, np):
    return t.CsvDataset(t.files["plain.csv"], [0, 0.0, ""]).batch(2)


@case("errors")
def csv_missing_required(t, np):
    return t.CsvDataset(t.files["missing.csv"], [t.dtype("int32"), t.dtype("float32"), ""])


@case("errors")
def csv_bad_int(t, np):
    return t.CsvDataset(t.files["badint.csv"], [0])


# ============================================================================================ checkpoints
@case("checkpoint", checkpoint=[0, 2, 5, 7])
def ckpt_range(t, np):
    return t.Dataset.range(7)


@case("checkpoint", checkpoint=[1, 2, 3])
def ckpt_batch(t, np):
    return t.Dataset.range(10).batch(3)


@case("checkpoint", checkpoint=[1, 4, 8])
def ckpt_map_parallel(t, np):
    return t.Dataset.range(12).map(lambda x: x * 2, num_parallel_calls=3).prefetch(2)


@case("checkpoint", checkpoint=[2, 5, 7])
def ckpt_interleave(t, np):
    return t.Dataset.range(1, 5).interleave(_repeat_self(t), cycle_length=2, block_length=2)


@case("checkpoint", checkpoint=[2, 4, 7])
def ckpt_repeat(t, np):
    return t.Dataset.range(3).repeat(3)


@case("checkpoint", checkpoint=[1, 3])
def ckpt_filter_take(t, np):
    return t.Dataset.range(20).filter(lambda x: x % 3 == 0).take(5)


@case("checkpoint", checkpoint=[2, 5])
def ckpt_tfrecord(t, np):
    return t.TFRecordDataset([t.files["a.tfrecord"], t.files["b.tfrecord"]])


@case("checkpoint", checkpoint=[1, 3])
def ckpt_text(t, np):
    return t.TextLineDataset([t.files["lines.txt"], t.files["lines2.txt"]])


@case("checkpoint", checkpoint=[3, 6], compare="multiset")
def ckpt_shuffle_seeded(t, np):
    # the rest after a restore must be the rest of the same permutation (checked as a multiset of the rest)
    return t.Dataset.range(10).shuffle(4, seed=5)


@case("checkpoint", checkpoint=[1, 2])
def ckpt_cache(t, np):
    return t.Dataset.range(4).cache().repeat(2)


@case("checkpoint", checkpoint=[2, 3])
def ckpt_window(t, np):
    return t.Dataset.range(8).window(3, shift=2).flat_map(lambda w: w.batch(3))


@case("checkpoint", checkpoint=[1, 3])
def ckpt_zip_dict(t, np):
    return t.Dataset.zip({"b": t.Dataset.range(5), "a": t.Dataset.from_tensor_slices(["p", "q", "r", "s"])})


@case("checkpoint", checkpoint=[2, 4])
def ckpt_scan(t, np):
    return t.Dataset.range(6).scan(np.int64(0), lambda s, x: (s + x, s))


@case("checkpoint", checkpoint=[1, 3])
def ckpt_padded_batch(t, np):
    return t.Dataset.range(1, 8).map(lambda x: t.ops.fill([x], x)).padded_batch(2)


@case("checkpoint", checkpoint=[3])
def ckpt_exhausted(t, np):
    return t.Dataset.range(3)


@case("checkpoint", checkpoint=[2, 5])
def ckpt_group_by_window(t, np):
    return t.Dataset.range(10).group_by_window(lambda x: x % 2, lambda k, w: w.batch(2), window_size=2)


@case("checkpoint", checkpoint=[2, 3])
def ckpt_unbatch_rebatch(t, np):
    return t.Dataset.range(10).batch(4).rebatch(3)


@case("checkpoint", checkpoint=[1])
def ckpt_generator_refused(t, np):
    # a generator is external state: tf.data refuses to save it (docs/tf-behaviour.md#checkpoints)
    return t.Dataset.from_generator(_gen_ints, output_signature=t.spec((), "int64"))


# ===================================================== validation on inputs whose spec needs no user function
@case("errors")
def padded_batch_rank_mismatch_static(t, np):
    return t.Dataset.from_tensors(np.array([1, 2], dtype=np.int64)).padded_batch(2, padded_shapes=[2, 2])


@case("errors")
def padded_batch_padding_dtype_mismatch_static(t, np):
    return t.Dataset.from_tensors(np.array([1, 2], dtype=np.int64)).padded_batch(2, padding_values=np.float32(1))


@case("errors")
def padded_batch_smaller_static_shape(t, np):
    return t.Dataset.from_tensors(np.array([1, 2, 3], dtype=np.int64)).padded_batch(2, padded_shapes=[2])


@case("padded_batch")
def padded_batch_int_shape_static(t, np):
    return t.Dataset.from_tensors(np.array([1, 2], dtype=np.int64)).padded_batch(2, padded_shapes=4)


@case("padded_batch")
def padded_batch_python_int_padding_int64(t, np):
    # docs/tf-behaviour.md#padded-batch: tf.data refuses a Python int padding value for an int64 component
    return t.Dataset.from_tensors(np.array([1, 2], dtype=np.int64)).padded_batch(
        2, padded_shapes=[3], padding_values=-1)


@case("structures")
def dict_sample_other_order(t, np):
    a = t.Dataset.from_tensors({"b": np.int64(1), "a": np.int64(2)})
    b = t.Dataset.from_tensors({"a": np.int64(20), "b": np.int64(10)})
    return t.Dataset.sample_from_datasets([a, b], weights=[0.0, 1.0], seed=1)


@case("structures")
def dict_zip_keys_order(t, np):
    return t.Dataset.zip({"z": t.Dataset.range(2), "a": t.Dataset.range(10, 12), "m": t.Dataset.range(3)})


@case("structures")
def dict_nested_dicts_batch(t, np):
    a = t.Dataset.from_tensors({"o": {"y": 1, "x": 2}, "i": 3})
    b = t.Dataset.from_tensors({"i": 30, "o": {"x": 20, "y": 10}})
    return a.concatenate(b).batch(2)


@case("structures")
def map_returns_set_refused(t, np):
    return t.Dataset.range(2).map(lambda x: {x})


@case("misc")
def len_of_infinite(t, np):
    ds = t.Dataset.range(2).repeat()
    return t.Dataset.from_tensors(len(ds))


@case("misc")
def len_of_unknown(t, np):
    ds = t.Dataset.range(2).filter(lambda x: True)
    return t.Dataset.from_tensors(len(ds))


@case("misc")
def reduce_sum(t, np):
    return t.Dataset.from_tensors(t.Dataset.range(5).reduce(np.int64(0), lambda s, x: s + x))


@case("misc")
def get_single_element_two(t, np):
    return t.Dataset.from_tensors(t.Dataset.range(2).get_single_element())


@case("misc")
def get_single_element_tuple(t, np):
    return t.Dataset.from_tensors(t.Dataset.from_tensors((1, "a")).get_single_element())


@case("misc")
def enumerate_len_infinite(t, np):
    return t.Dataset.from_tensors(len(t.Dataset.range(2).repeat().enumerate()))


@case("misc")
def counter_cardinality_len(t, np):
    return t.Dataset.from_tensors(len(t.Dataset.counter()))


@case("files")
def text_compression_unknown(t, np):
    return t.TextLineDataset(t.files["lines.txt"], compression_type="BZ2")


@case("files")
def tfrecord_parallel_reads_one(t, np):
    names = [t.files[n] for n in ("a.tfrecord", "c.tfrecord")]
    return t.TFRecordDataset(names, num_parallel_reads=1)


@case("files")
def tfrecord_nested_list_of_names(t, np):
    return t.TFRecordDataset([[t.files["c.tfrecord"]], [t.files["d.tfrecord"]]])


@case("files")
def fixed_length_gzip(t, np):
    return t.FixedLengthRecordDataset(t.files["fixed.bin.gz"], record_bytes=6, compression_type="GZIP")


@case("misc")
def window_spec_drop(t, np):
    return t.Dataset.range(6).window(2, drop_remainder=True).flat_map(lambda w: w.batch(2, drop_remainder=True))


@case("misc")
def rebatch_spec_static(t, np):
    return t.Dataset.range(8).batch(4, drop_remainder=True).rebatch(2)


@case("misc")
def interleave_dict_elements_batch(t, np):
    return t.Dataset.range(3).interleave(lambda x: t.Dataset.from_tensors({"v": x, "d": x * 2}),
                                        cycle_length=2).batch(3)


@case("generator")
def generator_str_args_bytes(t, np):
    def gen(s):
        yield s

    return t.Dataset.from_generator(gen, args=("text",), output_signature=t.spec((), "string"))


@case("generator")
def generator_yields_str(t, np):
    return t.Dataset.from_generator(lambda: iter(["a", "b"]), output_signature=t.spec((), "string")).batch(2)


@case("generator")
def generator_unknown_rank_padded(t, np):
    def gen():
        yield np.arange(2)

    return t.Dataset.from_generator(gen, output_types=t.dtype("int64")).padded_batch(1, padded_shapes=[3])


@case("generator", checkpoint=[2])
def generator_signature_ckpt_dict(t, np):
    def gen():
        for i in range(4):
            yield {"b": i, "a": "s"}

    return t.Dataset.from_generator(gen, output_signature={"b": t.spec((), "int64"), "a": t.spec((), "string")})


# ================================================= cases behind documented deliberate differences (deliberate.py)
@case("interleave")
def interleave_c4_b1(t, np):
    return t.Dataset.range(1, 8).interleave(_repeat_self(t), cycle_length=4, block_length=1)


@case("interleave")
def interleave_cycle_none(t, np):
    # tf.data: cycle = the machine's CPU count; jaxfeed: 4 everywhere (same order as interleave_c4_b1)
    return t.Dataset.range(1, 8).interleave(_repeat_self(t), block_length=1)


@case("files")
def tfrecord_parallel_reads_4(t, np):
    names = [t.files[n] for n in ("a.tfrecord", "c.tfrecord", "b.tfrecord", "d.tfrecord", "a.tfrecord")]
    return t.TFRecordDataset(names, num_parallel_reads=4)


@case("files")
def tfrecord_parallel_reads_autotune(t, np):
    # tf.data: cycle ceil(CPUs / 3); jaxfeed: 4 everywhere (same order as tfrecord_parallel_reads_4)
    names = [t.files[n] for n in ("a.tfrecord", "c.tfrecord", "b.tfrecord", "d.tfrecord", "a.tfrecord")]
    return t.TFRecordDataset(names, num_parallel_reads=t.AUTOTUNE)


@case("rebatch", limit=5)
def rebatch_zero(t, np):
    return t.Dataset.range(4).batch(2).rebatch(0)


@case("rebatch")
def rebatch_zero_two(t, np):
    return t.Dataset.range(6).batch(2).rebatch([0, 2])


@case("group_by_window")
def group_by_window_int32_key(t, np):
    return t.Dataset.range(6).group_by_window(lambda x: t.ops.cast(x % 2, "int32"), lambda k, w: w.batch(3),
                                              window_size=3)


@case("generator")
def generator_lossy_float_to_int(t, np):
    return t.Dataset.from_generator(lambda: iter([1.0, 1.5]), output_signature=t.spec((), "int32"))


@case("generator")
def generator_int_overflow(t, np):
    return t.Dataset.from_generator(lambda: iter([2**40]), output_signature=t.spec((), "int32"))


# ======================================================================== dataset-valued elements (map)
@case("map")
def map_returns_dataset_flat_map(t, np):
    return t.Dataset.range(1, 4).map(lambda x: t.Dataset.range(x)).flat_map(lambda d: d)


@case("map")
def map_returns_dataset_interleave(t, np):
    return t.Dataset.range(1, 4).map(lambda x: t.Dataset.range(x)).interleave(lambda d: d, cycle_length=2)


@case("files")
def map_tfrecord_dataset_flat_map(t, np):
    names = t.Dataset.from_tensor_slices([t.files["c.tfrecord"], t.files["d.tfrecord"]])
    return names.map(lambda f: t.TFRecordDataset(f)).flat_map(lambda d: d)


@case("map")
def map_returns_dataset_raw(t, np):
    return t.Dataset.range(1, 3).map(lambda x: t.Dataset.range(x))


# ============================================================================ more resume points
@case("checkpoint", checkpoint=[1, 4, 9])
def ckpt_interleave_parallel(t, np):
    return t.Dataset.range(1, 6).interleave(_repeat_self(t), cycle_length=3, block_length=2,
                                           num_parallel_calls=3)


@case("checkpoint", checkpoint=[1, 2])
def ckpt_map_batch(t, np):
    return t.Dataset.range(11).map(lambda x: x * 10, num_parallel_calls=2).batch(4)


@case("checkpoint", checkpoint=[2, 3, 4])
def ckpt_concatenate_boundary(t, np):
    return t.Dataset.range(3).concatenate(t.Dataset.range(100, 103))


@case("checkpoint", checkpoint=[1, 3])
def ckpt_skip_take_shard(t, np):
    return t.Dataset.range(30).skip(3).shard(3, 1).take(6)


@case("checkpoint", checkpoint=[2, 3])
def ckpt_unique(t, np):
    return t.Dataset.from_tensor_slices(np.array([1, 1, 2, 3, 2, 4, 5, 1], dtype=np.int64)).unique()


@case("checkpoint", checkpoint=[2])
def ckpt_take_while(t, np):
    return t.Dataset.range(10).take_while(lambda x: x < 6)


@case("checkpoint", checkpoint=[1, 3])
def ckpt_strings(t, np):
    return t.Dataset.from_tensor_slices(["a", "bb", "", "ddd", "e"])


@case("checkpoint", checkpoint=[2, 4])
def ckpt_tfrecord_gzip(t, np):
    return t.TFRecordDataset(t.files["a.tfrecord.gz"], compression_type="GZIP")


@case("checkpoint", checkpoint=[1, 2])
def ckpt_csv(t, np):
    return t.CsvDataset(t.files["plain.csv"], [0, 0.0, ""])


@case("checkpoint", checkpoint=[3, 5])
def ckpt_tfrecord_parallel_reads(t, np):
    names = [t.files[n] for n in ("a.tfrecord", "c.tfrecord", "b.tfrecord", "d.tfrecord")]
    return t.TFRecordDataset(names, num_parallel_reads=2)


@case("checkpoint", checkpoint=[2, 4])
def ckpt_choose(t, np):
    a, b = t.Dataset.range(0, 5), t.Dataset.range(100, 105)
    choice = t.Dataset.from_tensor_slices(np.array([0, 1, 1, 0, 1, 0, 0], dtype=np.int64))
    return t.Dataset.choose_from_datasets([a, b], choice)


@case("checkpoint", checkpoint=[2, 4])
def ckpt_enumerate_filter(t, np):
    return t.Dataset.range(10).filter(lambda x: x % 2 == 1).enumerate(start=100)


@case("checkpoint", checkpoint=[1, 2])
def ckpt_bucket(t, np):
    return _sequences(t).bucket_by_sequence_length(lambda x: t.ops.shape0(x), [3, 5], [2, 2, 2])


@case("checkpoint", checkpoint=[2, 4])
def ckpt_flat_map(t, np):
    return t.Dataset.range(1, 4).flat_map(lambda x: t.Dataset.from_tensors(x).repeat(x))


@case("checkpoint", checkpoint=[3])
def ckpt_repeat_forever(t, np):
    return t.Dataset.range(3).repeat().take(8)


@case("checkpoint", checkpoint=[2, 5], limit=12)
def ckpt_counter(t, np):
    return t.Dataset.counter(5, 2).take(10)


@case("checkpoint", checkpoint=[1, 2])
def ckpt_unbatch(t, np):
    return t.Dataset.range(7).batch(3).unbatch()


# ============================================================================ more transformations
@case("batch")
def batch_parallel_drop(t, np):
    return t.Dataset.range(10).batch(4, drop_remainder=True, num_parallel_calls=2)


@case("batch")
def batch_dict_strings(t, np):
    return t.Dataset.from_tensor_slices({"s": ["a", "b", "c"], "n": [1, 2, 3]}).batch(2)


@case("batch")
def batch_nested_structures(t, np):
    ds = t.Dataset.from_tensors(({"k": np.arange(2)}, Point(np.float32(1.0), "p"))).repeat(3)
    return ds.batch(2)


@case("padded_batch")
def padded_batch_dict_partial_shapes(t, np):
    ds = t.Dataset.range(1, 4).map(lambda x: {"v": t.ops.fill([x], x), "s": x})
    return ds.padded_batch(2, padded_shapes={"v": [None], "s": []})


@case("padded_batch")
def padded_batch_empty_input(t, np):
    return t.Dataset.range(0).map(lambda x: t.ops.fill([x], x)).padded_batch(2)


@case("padded_batch")
def padded_batch_zero_length_elements(t, np):
    return t.Dataset.range(3).map(lambda x: t.ops.fill([x * 0], x)).padded_batch(3)


@case("window")
def window_strings_batch(t, np):
    return t.Dataset.from_tensor_slices(["a", "b", "c", "d", "e"]).window(2, shift=1, drop_remainder=True).flat_map(
        lambda w: w.batch(2))


@case("window")
def window_infinite_take(t, np):
    return t.Dataset.range(3).repeat().window(2).take(3).flat_map(lambda w: w.batch(2))


@case("window")
def window_cardinality(t, np):
    return t.Dataset.range(10).window(3, shift=2, drop_remainder=True)


@case("shard")
def shard_interleaved_files(t, np):
    names = t.Dataset.from_tensor_slices([t.files["a.tfrecord"], t.files["b.tfrecord"], t.files["d.tfrecord"]])
    return names.shard(2, 0).interleave(lambda f: t.TFRecordDataset(f), cycle_length=2)


@case("shard")
def shard_strings(t, np):
    return t.Dataset.from_tensor_slices(["a", "b", "c", "d", "e"]).shard(2, 1)


@case("zip")
def zip_infinite_cardinality(t, np):
    return t.Dataset.zip((t.Dataset.range(2).repeat(), t.Dataset.range(3).repeat())).take(4)


@case("zip")
def zip_dict_strings_batch(t, np):
    return t.Dataset.zip({"y": t.Dataset.from_tensor_slices(["p", "q", "r"]), "x": t.Dataset.range(3)}).batch(2)


@case("zip")
def zip_empty(t, np):
    return t.Dataset.zip((t.Dataset.range(0), t.Dataset.range(3)))


@case("concatenate")
def concatenate_dict_strings(t, np):
    a = t.Dataset.from_tensors({"s": "x", "n": 1})
    b = t.Dataset.from_tensors({"n": 2, "s": "yy"})
    return a.concatenate(b).batch(2)


@case("concatenate")
def concatenate_namedtuples(t, np):
    return t.Dataset.from_tensors(Point(1, 2)).concatenate(t.Dataset.from_tensors(Point(3, 4)))


@case("errors")
def concatenate_namedtuple_vs_tuple(t, np):
    return t.Dataset.from_tensors(Point(1, 2)).concatenate(t.Dataset.from_tensors((3, 4)))


@case("choose")
def choose_infinite_inputs(t, np):
    a, b = t.Dataset.range(3).repeat(), t.Dataset.range(10, 12).repeat()
    choice = t.Dataset.from_tensor_slices(np.array([1, 1, 0, 1, 0], dtype=np.int64))
    return t.Dataset.choose_from_datasets([a, b], choice)


@case("scan")
def scan_strings_state(t, np):
    return t.Dataset.from_tensor_slices(["a", "b", "c"]).scan(np.int64(0), lambda s, x: (s + 1, (s, x)))


@case("filter")
def filter_strings(t, np):
    return t.Dataset.from_tensor_slices(["a", "bb", "a"]).filter(lambda s: s == "a")


@case("take_skip")
def take_strings_spec(t, np):
    return t.Dataset.from_tensor_slices([["a", "b"], ["c", "d"]]).take(1)


@case("sources")
def slices_dict_of_2d(t, np):
    return t.Dataset.from_tensor_slices({"img": np.zeros((2, 2, 3), dtype=np.uint8), "label": [0, 1]})


@case("sources")
def slices_namedtuple_strings(t, np):
    return t.Dataset.from_tensor_slices(Point(["a", "b"], [1.5, 2.5]))


@case("sources")
def from_tensors_empty_tuple_component(t, np):
    return t.Dataset.from_tensors((np.zeros((0,), dtype=np.int64), "s"))


@case("sources")
def range_int32_negative_step(t, np):
    return t.Dataset.range(5, -5, -4, output_type=t.dtype("int32"))


@case("unique")
def unique_after_batch_unbatch(t, np):
    return t.Dataset.from_tensor_slices([3, 3, 4]).batch(2).unbatch().unique()


@case("errors")
def unique_2d(t, np):
    return t.Dataset.from_tensors(np.zeros((2, 2), dtype=np.int64)).unique()


@case("errors")
def reduce_state_dtype_change(t, np):
    return t.Dataset.from_tensors(t.Dataset.range(3).reduce(np.int64(0), lambda s, x: t.ops.cast(s, "float32")))


@case("errors")
def get_single_element_empty(t, np):
    return t.Dataset.from_tensors(t.Dataset.range(0).get_single_element())


# ============================================================================ conversions and structures
@case("errors")
def from_tensors_int_beyond_int64(t, np):
    return t.Dataset.from_tensors(2**64)


@case("errors")
def slices_list_beyond_int64(t, np):
    return t.Dataset.from_tensor_slices([1, -(2**63) - 1])


@case("sources")
def slices_list_of_tuples_is_tensor(t, np):
    return t.Dataset.from_tensor_slices([(1, 2), (3, 4)])


@case("sources")
def from_tensors_tuple_with_list(t, np):
    return t.Dataset.from_tensors(([1, 2], 3))


@case("sources")
def from_tensors_list_of_np_float32(t, np):
    return t.Dataset.from_tensors([np.float32(0.5), np.float32(1.5)])


@case("sources")
def from_tensors_list_of_np_bool(t, np):
    return t.Dataset.from_tensors([np.bool_(True), np.bool_(False)])


@case("sources")
def from_tensors_list_of_bools(t, np):
    return t.Dataset.from_tensors([True, False])


@case("sources")
def from_tensors_int64_min(t, np):
    return t.Dataset.from_tensors(-(2**63))


@case("sources")
def from_tensors_unicode_str(t, np):
    return t.Dataset.from_tensors("żółw")


@case("sources")
def slices_unicode_strs(t, np):
    return t.Dataset.from_tensor_slices(["é", "日本"]).batch(2)


@case("structures")
def dict_tuple_values(t, np):
    return t.Dataset.from_tensor_slices({"b": ([1, 2], [3, 4]), "a": [5, 6]}).batch(2)


@case("structures")
def scan_namedtuple_state(t, np):
    return t.Dataset.range(3).scan(Point(np.int64(0), np.int64(1)), lambda s, x: (Point(s.x + x, s.y * 2), s.y))


@case("structures")
def padded_batch_namedtuple(t, np):
    ds = t.Dataset.range(1, 3).map(lambda x: Point(t.ops.fill([x], x), x))
    return ds.padded_batch(2)


@case("structures")
def map_returns_tuple_with_dataset(t, np):
    return t.Dataset.range(1, 3).map(lambda x: (x, t.Dataset.range(x))).flat_map(lambda x, d: d.map(lambda y: y + x))


@case("errors")
def batch_of_datasets(t, np):
    return t.Dataset.range(1, 3).map(lambda x: t.Dataset.range(x)).batch(2)


# ============================================================================ more transformation edges
@case("bucket")
def bucket_no_padding(t, np):
    return t.Dataset.range(6).bucket_by_sequence_length(lambda x: t.ops.cast(x % 3, "int32"), [1, 2], [2, 2, 2],
                                                        no_padding=True)


@case("bucket")
def bucket_padded_shapes(t, np):
    return _sequences(t).bucket_by_sequence_length(lambda x: t.ops.shape0(x), [4], [2, 2], padded_shapes=[7])


@case("bucket")
def bucket_dict_elements(t, np):
    ds = _sequences(t).map(lambda v: {"v": v, "n": t.ops.shape0(v)})
    return ds.bucket_by_sequence_length(lambda d: d["n"], [3], [2, 2])


@case("group_by_window")
def group_by_window_dict_reduce(t, np):
    ds = t.Dataset.range(8).map(lambda x: {"x": x, "sq": x * x})
    return ds.group_by_window(lambda d: d["x"] % 2, lambda k, w: w.batch(2), window_size=2)


@case("interleave")
def interleave_block_longer_than_inner(t, np):
    return t.Dataset.range(1, 4).interleave(_repeat_self(t), cycle_length=2, block_length=5)


@case("take_while")
def take_while_dict(t, np):
    return t.Dataset.from_tensor_slices({"b": [1, 2, 3], "a": [0, 0, 9]}).take_while(lambda d: d["a"] < 5)


@case("generator")
def generator_partial_shape_batch(t, np):
    def gen():
        for n in (2, 2, 2):
            yield np.zeros((n, 3), np.float32)

    return t.Dataset.from_generator(gen, output_signature=t.spec((None, 3), "float32")).batch(2)


@case("generator")
def generator_scalar_python_float(t, np):
    return t.Dataset.from_generator(lambda: iter([0.5, 1.0]), output_signature=t.spec((), "float32"))


@case("files")
def text_unicode_lines(t, np):
    return t.TextLineDataset(t.files["unicode.txt"])


@case("files")
def text_zlib(t, np):
    return t.TextLineDataset(t.files["lines.txt.zz"], compression_type="ZLIB")


@case("files")
def tfrecord_empty_and_big_records(t, np):
    return t.TFRecordDataset(t.files["sizes.tfrecord"]).map(lambda r: t.ops.size_bytes(r))


@case("files")
def tfrecord_compression_empty_string(t, np):
    return t.TFRecordDataset(t.files["c.tfrecord"], compression_type="")


@case("files")
def csv_exclude_cols(t, np):
    return t.CsvDataset(t.files["plain.csv"], [0, ""], exclude_cols=[1])


@case("files")
def csv_na_value(t, np):
    return t.CsvDataset(t.files["na.csv"], [-1, 0.5], na_value="NA")


@case("files")
def csv_header_select(t, np):
    return t.CsvDataset(t.files["header.csv"], [0.0, ""], header=True, select_cols=[1, 2])


@case("files")
def csv_no_quote_delim(t, np):
    return t.CsvDataset(t.files["plainquotes.csv"], ["", ""], use_quote_delim=False)


@case("files")
def csv_gzip(t, np):
    return t.CsvDataset(t.files["plain.csv.gz"], [0, 0.0, ""], compression_type="GZIP")


@case("errors")
def csv_too_few_columns(t, np):
    return t.CsvDataset(t.files["plain.csv"], [0, 0.0])


@case("errors")
def csv_missing_file(t, np):
    return t.CsvDataset(t.files["plain.csv"] + ".absent", [0])


@case("checkpoint", checkpoint=[1, 2])
def ckpt_fixed_length(t, np):
    return t.FixedLengthRecordDataset(t.files["fixed.bin"], record_bytes=4)


@case("checkpoint", checkpoint=[2])
def ckpt_scan_namedtuple(t, np):
    return t.Dataset.range(5).scan(Point(np.int64(0), np.int64(1)), lambda s, x: (Point(s.x + x, s.y), s.x))


# ============================================================================ ignore_errors, assertions
@case("ignore_errors")
def ignore_errors_bad_crc(t, np):
    return t.TFRecordDataset(t.files["badcrc.tfrecord"]).ignore_errors()


@case("ignore_errors")
def ignore_errors_truncated(t, np):
    return t.TFRecordDataset([t.files["truncated.tfrecord"], t.files["c.tfrecord"]]).ignore_errors()


@case("ignore_errors")
def ignore_errors_map_error(t, np):
    return t.Dataset.range(5).map(lambda x: t.ops.py_raise(x, 2)).ignore_errors()


@case("ignore_errors")
def ignore_errors_batch_shapes(t, np):
    return t.Dataset.range(1, 6).map(lambda x: t.ops.fill([x // 2], x)).batch(2).ignore_errors()


@case("ignore_errors")
def ignore_errors_generator(t, np):
    def gen():
        yield 1
        yield 2
        raise ValueError("boom!")

    return t.Dataset.from_generator(gen, output_signature=t.spec((), "int64")).ignore_errors()


@case("ignore_errors")
def ignore_errors_padded_batch_too_small(t, np):
    ds = t.Dataset.range(1, 6).map(lambda x: t.ops.fill([x], x))
    return ds.padded_batch(1, padded_shapes=[3]).ignore_errors()


@case("ignore_errors")
def ignore_errors_csv_bad_rows(t, np):
    return t.CsvDataset(t.files["badint.csv"], [0]).ignore_errors()


@case("misc")
def assert_cardinality_ok(t, np):
    return t.Dataset.range(3).filter(lambda x: True).apply(t.experimental.assert_cardinality(3))


@case("errors")
def assert_cardinality_too_few(t, np):
    return t.Dataset.range(3).filter(lambda x: True).apply(t.experimental.assert_cardinality(5))


@case("errors")
def assert_cardinality_too_many(t, np):
    return t.Dataset.range(3).filter(lambda x: True).apply(t.experimental.assert_cardinality(2))


# ============================================================================ saved and cached datasets
@case("save_cache")
def save_load_dict(t, np):
    path = t.scratch()
    # one key per dict: tf.data's load gives several keys in an order that changes between runs
    t.Dataset.from_tensor_slices({"b": ([1, 2], {"a": ["x", "y"]})}).save(path)
    return t.Dataset.load(path)


@case("save_cache")
def save_load_batched_tuple(t, np):
    path = t.scratch()
    t.Dataset.zip((t.Dataset.range(5), t.Dataset.range(5).map(lambda x: t.ops.cast(x, "float32")))).batch(2).save(path)
    return t.Dataset.load(path)


@case("save_cache")
def cache_file_read_back(t, np):
    prefix = t.scratch() + "/cache"
    first = t.Dataset.range(4).map(lambda x: x * 2).cache(prefix)
    for _ in first:
        pass
    return t.Dataset.range(4).map(lambda x: x * 2).cache(prefix)


@case("save_cache")
def cache_file_dict(t, np):
    prefix = t.scratch() + "/cache"
    first = t.Dataset.from_tensor_slices({"z": [1, 2], "a": ["p", "q"]}).cache(prefix)
    for _ in first:
        pass
    return t.Dataset.from_tensor_slices({"z": [1, 2], "a": ["p", "q"]}).cache(prefix)


@case("save_cache")
def cache_file_is_used(t, np):
    # the second dataset's input differs; reading the finished cache gives the first one's elements
    prefix = t.scratch() + "/cache"
    for _ in t.Dataset.range(3).cache(prefix):
        pass
    return t.Dataset.range(100, 103).cache(prefix)
