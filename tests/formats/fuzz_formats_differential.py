"""Differential fuzzing of jaxfeed.formats against real TensorFlow.

    .venv/bin/python tests/formats/fuzz_formats_differential.py --tf-python /path/to/tf/python --seed 1 --count 2000

Seeded random cases -- tf.train.Example / SequenceExample wire bytes with random feature specs (batched and
single), CSV text through CsvDataset, text files through TextLineDataset, FixedLengthRecordDataset files,
TFRecord files written by TF and by jaxfeed (and damaged ones) -- are run by TensorFlow in a subprocess
(``fuzz_formats_tf_worker.py`` under ``--tf-python``; this process never imports tensorflow) and by jaxfeed
here, in batches (one TF subprocess per batch). Results (values with dtypes and shapes, float bit patterns,
sparse indices/values/dense_shape, elements delivered before an error, error vs no error and its class) are
compared, and every difference is printed, grouped by kind, with the smallest case of each group as a repro.

Example records are encoded by hand (a tiny protobuf writer below) rather than through a proto library, so
the fuzzer can produce what ordinary builders never do: packed and unpacked lists mixed, duplicate map keys,
a Feature with two kinds, unknown fields, non-canonical varints, non-UTF-8 keys, truncations. Both sides get
exactly the same bytes.

Not collected by pytest (no ``test_`` prefix). ``--only example,csv`` restricts the kinds; ``--verbose``
prints every mismatch; ``--dump FILE`` writes all mismatching cases as JSON.
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import math
import os
import random
import struct
import subprocess
import sys
import tempfile
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))  # the repository root: jaxfeed, formats, pipeline

import numpy as np  # noqa: E402

from fuzz_formats_common import dec, enc, norm_array, norm_error, norm_sparse  # noqa: E402

KINDS = ("example", "seqex", "csv", "text", "fixedlen", "tfrecord")
MAX_ELEMS = 5000


# ============================================================================ protobuf wire writer
def varint(n: int, pad: int = 0) -> bytes:
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n or pad:
            out.append(b | 0x80)
        else:
            out.append(b)
            break
        if not n and pad:
            # non-canonical: continuation bytes of zeros, total at most 10 bytes
            extra = min(pad, 10 - len(out) - 1)
            out.extend(b"\x80" * max(extra - 1, 0))
            out.append(0)
            break
    return bytes(out)


def key(field: int, wt: int) -> bytes:
    return varint(field << 3 | wt)


def ld(field: int, payload: bytes) -> bytes:
    return key(field, 2) + varint(len(payload)) + payload


def unknown_field(rng: random.Random) -> bytes:
    f = rng.choice([4, 5, 7, 15, 100, 2047])
    wt = rng.choice([0, 1, 2, 5])
    if wt == 0:
        return key(f, 0) + varint(rng.randrange(1 << 20))
    if wt == 1:
        return key(f, 1) + rng.randbytes(8)
    if wt == 5:
        return key(f, 5) + rng.randbytes(4)
    return ld(f, rng.randbytes(rng.randrange(4)))


KIND_FIELD = {"bytes_list": 1, "float_list": 2, "int64_list": 3}
DTYPE_KIND = {"string": "bytes_list", "float32": "float_list", "int64": "int64_list"}

SPECIAL_INTS = [0, 1, -1, 2 ** 63 - 1, -2 ** 63, 2 ** 62, -(2 ** 31), 2 ** 31, 2 ** 32, 127, 128, -128]
SPECIAL_FLOAT_BITS = [0x00000000, 0x80000000, 0x3FC00000, 0x7FC00000, 0xFFC00000, 0x7FA00001, 0x7FC00123,
                      0x7F800000, 0xFF800000, 0x00000001, 0x807FFFFF, 0x7F7FFFFF, 0x3DCCCCCD]
SPECIAL_BYTES = [b"", b"abc", b"\xff\xfe", b"a\x00", b"\x00", b"\x00\x00", "é".encode(), b" x ", b"\x80"]


def gen_int(rng):
    r = rng.random()
    if r < 0.4:
        return rng.choice(SPECIAL_INTS)
    if r < 0.8:
        return rng.randint(-1000, 1000)
    return rng.randint(-2 ** 63, 2 ** 63 - 1)


def gen_float_bits(rng):
    r = rng.random()
    if r < 0.4:
        return rng.choice(SPECIAL_FLOAT_BITS)
    if r < 0.8:
        return struct.unpack("<I", struct.pack("<f", rng.choice([0.5, -2.25, 1e-3, 3.0, 1e30, -7.0])))[0]
    return rng.getrandbits(32)


def gen_bytes(rng):
    if rng.random() < 0.6:
        return rng.choice(SPECIAL_BYTES)
    return rng.randbytes(rng.randrange(6))


def gen_values(rng, kind, n):
    if kind == "int64_list":
        return [gen_int(rng) for _ in range(n)]
    if kind == "float_list":
        return [gen_float_bits(rng) for _ in range(n)]
    return [gen_bytes(rng) for _ in range(n)]


def encode_list(rng, kind, values, notes=None) -> bytes:
    notes = set() if notes is None else notes
    """A BytesList / FloatList / Int64List message; numeric lists in random packed/unpacked chunks."""
    out = bytearray()
    if kind == "bytes_list":
        for v in values:
            out += ld(1, v)
    else:
        i = 0
        style = rng.random()
        while i < len(values):
            j = len(values) if style < 0.6 else rng.randint(i + 1, len(values))
            chunk = values[i:j]
            packed = (style < 0.4) or (style >= 0.6 and rng.random() < 0.5)
            if not packed:
                notes.add("unpacked-list")
            if style >= 0.6 and j < len(values) or i > 0:
                notes.add("list-in-several-runs")
            if kind == "int64_list":
                pad = 3 if rng.random() < 0.05 else 0
                if pad:
                    notes.add("noncanonical-varint")
                if packed:
                    out += ld(1, b"".join(varint(v, pad) for v in chunk))
                else:
                    for v in chunk:
                        out += key(1, 0) + varint(v, pad)
            else:
                if packed:
                    out += ld(1, b"".join(struct.pack("<I", v) for v in chunk))
                else:
                    for v in chunk:
                        out += key(1, 5) + struct.pack("<I", v)
            i = j
        if not values and rng.random() < 0.2:
            out += ld(1, b"")  # an empty packed run
            notes.add("empty-packed-run")
    if rng.random() < 0.05:
        notes.add("unknown-field-in-list")
        out += unknown_field(rng)
    return bytes(out)


def encode_feature(rng, kind, values, notes) -> bytes:
    if kind is None:  # a Feature with no list at all
        notes.add("feature-without-kind")
        if rng.random() < 0.3:
            notes.add("unknown-field-in-feature")
            return unknown_field(rng)
        return b""
    r = rng.random()
    if r < 0.05 and len(values) >= 2:  # the same list field twice: protobuf merges (concatenates)
        notes.add("list-field-twice")
        k = rng.randint(1, len(values) - 1)
        return ld(KIND_FIELD[kind], encode_list(rng, kind, values[:k], notes)) + \
            ld(KIND_FIELD[kind], encode_list(rng, kind, values[k:], notes))
    out = ld(KIND_FIELD[kind], encode_list(rng, kind, values, notes))
    if r > 0.95:  # another kind first: a oneof keeps the last one set
        notes.add("two-kinds-in-feature")
        other = rng.choice([k for k in KIND_FIELD if k != kind])
        out = ld(KIND_FIELD[other], encode_list(rng, other, gen_values(rng, other, rng.randrange(3)), notes)) + out
    if rng.random() < 0.03:
        notes.add("unknown-field-in-feature")
        out += unknown_field(rng)
    return out


def encode_entry(rng, name: bytes, feature: bytes, notes) -> bytes:
    r = rng.random()
    if r < 0.05:
        notes.add("map-entry-value-before-key")
        body = ld(2, feature) + ld(1, name)
    else:
        body = ld(1, name) + ld(2, feature)
    if rng.random() < 0.03:
        notes.add("unknown-field-in-map-entry")
        body += unknown_field(rng)
    return ld(1, body)


def encode_features(rng, entries, notes) -> bytes:
    """entries: [(name bytes, feature bytes)] in wire order (duplicates allowed)."""
    return b"".join(encode_entry(rng, n, f, notes) for n, f in entries)


# ============================================================================ Example cases
NAMES = ["a", "b", "c", "d"]


def gen_default(rng, dtype, size, scalar_ok):
    def one():
        if dtype == "int64":
            return gen_int(rng)
        if dtype == "float32":
            return rng.choice([0.0, -1.5, 2.0, float("nan"), float("inf"), 1e-3])
        return rng.choice([b"", b"dflt", b"\xff", b"z\x00"])
    if scalar_ok:
        return one()
    return [one() for _ in range(size)]


def gen_spec(rng, dtype, context_only=False, sequence_only=False):
    r = rng.random()
    if sequence_only:
        r = 0.5 + r * 0.5 if rng.random() < 0.6 else 0.45 + r * 0.3
    if context_only:
        r = r * 0.75
    if r < 0.45:
        shape = rng.choice([[], [], [], [1], [2], [3], [0], [2, 2], [1, 2]])
        size = math.prod(shape)
        d = rng.random()
        if d < 0.5:
            default = None
        elif d < 0.85:
            default = gen_default(rng, dtype, size, scalar_ok=(shape == []))
        elif d < 0.95:
            default = gen_default(rng, dtype, 1, scalar_ok=True)  # a scalar default for any shape
        else:
            default = gen_default(rng, dtype, size + 1, scalar_ok=False)  # wrong size
        return ["fixed", shape, dtype, default]
    if r < 0.75:
        return ["varlen", dtype]
    shape = rng.choice([[], [], [1], [2], [3]])
    default = None if rng.random() < 0.7 else gen_default(rng, dtype, 1, scalar_ok=True)
    return ["fixedseq", shape, dtype, rng.random() < 0.85, default]


def value_count(rng, spec):
    if spec[0] == "fixed":
        size = math.prod(spec[1])
        return size if rng.random() < 0.75 else rng.randrange(5)
    if spec[0] == "varlen":
        return rng.randrange(5)
    size = max(math.prod(spec[1]), 1)
    return size * rng.randrange(4) if rng.random() < 0.8 else rng.randrange(6)


def gen_feature_for(rng, spec, notes):
    """(kind or None, values) for one record's feature under ``spec`` (biased to be valid)."""
    kind = DTYPE_KIND[spec[2] if spec[0] != "varlen" else spec[1]]
    r = rng.random()
    if r < 0.07:
        notes.add("wrong-kind")
        kind = rng.choice([k for k in KIND_FIELD if k != kind])
        return kind, gen_values(rng, kind, rng.randrange(3))
    if r < 0.1:
        return None, []
    n = value_count(rng, spec)
    if n == 0:
        notes.add("empty-list")
    return kind, gen_values(rng, kind, n)


def gen_name(rng, name: str, notes) -> bytes:
    if rng.random() < 0.01:
        notes.add("non-utf8-key")
        return name.encode() + b"\xff"
    return name.encode()


def gen_features_block(rng, specs, notes, missing_p=0.12):
    entries = []
    for name, spec in specs:
        if rng.random() < missing_p:
            notes.add("missing")
            continue
        kind, values = gen_feature_for(rng, spec, notes)
        entries.append((gen_name(rng, name, notes), encode_feature(rng, kind, values, notes)))
        if rng.random() < 0.05:
            notes.add("duplicate-key")
            kind2, values2 = gen_feature_for(rng, spec, notes)
            dup = (name.encode(), encode_feature(rng, kind2, values2, notes))
            if rng.random() < 0.5:
                entries.append(dup)
            else:
                entries.insert(len(entries) - 1, dup)
    if rng.random() < 0.2:
        kind = rng.choice(list(KIND_FIELD))
        entries.append((rng.choice([b"zz", b"", b"a b"]), encode_feature(rng, kind, gen_values(rng, kind, 2), notes)))
    rng.shuffle(entries) if rng.random() < 0.3 else None
    return entries


def damage(rng, rec: bytes, notes) -> bytes:
    r = rng.random()
    if r < 0.4 and rec:
        notes.add("truncated-record")
        return rec[:rng.randrange(len(rec))]
    if r < 0.7:
        notes.add("garbage-record")
        return rng.randbytes(rng.randrange(1, 12))
    notes.add("overlong-varint")
    return rec + key(15, 0) + b"\xff" * 10 + b"\x01"


def gen_example_record(rng, specs, notes) -> bytes:
    body = encode_features(rng, gen_features_block(rng, specs, notes), notes)
    r = rng.random()
    if r < 0.05 and body:
        notes.add("features-split-in-two")
        # two Features messages: protobuf merges them (map entries of both)
        cut = 0
        pos = 0
        while pos < len(body):  # cut at an entry boundary
            n, p = 0, pos + 1
            shift = 0
            while True:
                b = body[p]
                n |= (b & 0x7F) << shift
                p += 1
                shift += 7
                if not b & 0x80:
                    break
            nxt = p + n
            if rng.random() < 0.5:
                cut = nxt
            pos = nxt
        rec = ld(1, body[:cut]) + ld(1, body[cut:])
    else:
        rec = ld(1, body) if (body or rng.random() < 0.7) else b""
    if rng.random() < 0.05:
        notes.add("unknown-field-in-example")
        rec = unknown_field(rng) + rec if rng.random() < 0.5 else rec + unknown_field(rng)
    if rng.random() < 0.02:
        rec = damage(rng, rec, notes)
    return rec


def gen_example_case(rng):
    n = rng.randint(1, 3)
    names = rng.sample(NAMES, n)
    specs = [[nm, gen_spec(rng, rng.choice(["int64", "float32", "string"]))] for nm in names]
    mode = "single" if rng.random() < 0.3 else "batch"
    notes = set()
    nrec = 1 if mode == "single" else rng.choice([0, 1, 1, 2, 2, 3, 4])
    records = [gen_example_record(rng, specs, notes) for _ in range(nrec)]
    return {"kind": "example", "mode": mode, "features": specs, "records": records, "notes": sorted(notes)}


def gen_seqex_case(rng):
    notes = set()
    ctx = [[nm, gen_spec(rng, rng.choice(["int64", "float32", "string"]), context_only=True)]
           for nm in rng.sample(NAMES, rng.randint(0, 2))]
    seq = [[nm, gen_spec(rng, rng.choice(["int64", "float32", "string"]), sequence_only=True)]
           for nm in rng.sample(["s", "t", "u"], rng.randint(0, 2))]
    seq = [[nm, s] for nm, s in seq if s[0] in ("varlen", "fixedseq")]
    if not ctx and not seq:
        seq = [["s", ["varlen", rng.choice(["int64", "float32", "string"])]]]
    mode = "single" if rng.random() < 0.3 else "batch"
    nrec = 1 if mode == "single" else rng.choice([0, 1, 2, 3])
    records = []
    for _ in range(nrec):
        rec = b""
        if ctx or rng.random() < 0.5:
            rec += ld(1, encode_features(rng, gen_features_block(rng, ctx, notes), notes))
        lists = []
        for name, spec in seq:
            if rng.random() < 0.12:
                notes.add("missing-feature-list")
                continue
            steps = rng.choice([0, 1, 1, 2, 3])
            if steps == 0:
                notes.add("zero-steps")
            fl = b""
            for _ in range(steps):
                kind, values = gen_feature_for(rng, spec, notes)
                fl += ld(1, encode_feature(rng, kind, values, notes))
            lists.append((name.encode(), fl))
        if lists or rng.random() < 0.5:
            rec += ld(2, b"".join(ld(1, ld(1, n) + ld(2, fl)) for n, fl in lists))
        if rng.random() < 0.02:
            rec = damage(rng, rec, notes)
        records.append(rec)
    return {"kind": "seqex", "mode": mode, "context": ctx, "sequence": seq, "records": records,
            "notes": sorted(notes)}


# ---------------------------------------------------------------- jaxfeed side of Example cases
def jf_spec(s):
    from jaxfeed.formats import FixedLenFeature, FixedLenSequenceFeature, VarLenFeature
    if s[0] == "fixed":
        return FixedLenFeature(s[1], s[2], default_value=s[3])
    if s[0] == "varlen":
        return VarLenFeature(s[1])
    return FixedLenSequenceFeature(s[1], s[2], allow_missing=s[3], default_value=s[4])


def jf_norm(v):
    from jaxfeed.formats import VarLenValue
    if isinstance(v, VarLenValue):
        return norm_sparse(*v.to_sparse())
    return norm_array(v)


def jf_example(c):
    from jaxfeed.formats import parse_example, parse_single_example
    specs = {name: jf_spec(s) for name, s in c["features"]}
    if c["mode"] == "batch":
        out = parse_example(list(c["records"]), specs)
        return {"ok": {k: jf_norm(v) for k, v in out.items()}}
    out = parse_single_example(c["records"][0], specs)
    res = {}
    for name, s in c["features"]:
        v = out[name]
        if s[0] == "varlen":  # jaxfeed gives the plain values (documented); TF a 1-D SparseTensor
            if not isinstance(v, np.ndarray) or v.ndim != 1:
                res[name] = {"unexpected": repr(type(v))}
                continue
            res[name] = norm_sparse(np.arange(len(v), dtype=np.int64)[:, None], v,
                                    np.array([len(v)], dtype=np.int64))
        else:
            res[name] = norm_array(v)
    return {"ok": res}


def _steps_to_sparse(values, row_splits, counts):
    """jaxfeed's VarLen sequence value (rows = steps of all records in order) -> TF's 3-D sparse triple."""
    lengths = np.diff(row_splits)
    idx = []
    step = 0
    for i, cnt in enumerate(counts):
        for j in range(int(cnt)):
            for k in range(int(lengths[step])):
                idx.append((i, j, k))
            step += 1
    max_steps = int(max(counts)) if len(counts) else 0
    max_len = int(lengths.max()) if len(lengths) else 0
    return (np.array(idx, dtype=np.int64).reshape(-1, 3), values,
            np.array([len(counts), max_steps, max_len], dtype=np.int64))


def jf_seqex(c):
    from jaxfeed.formats import VarLenValue, parse_sequence_example, parse_single_sequence_example
    ctx = {name: jf_spec(s) for name, s in c["context"]}
    seq = {name: jf_spec(s) for name, s in c["sequence"]}
    if c["mode"] == "batch":
        a, b, lens = parse_sequence_example(list(c["records"]), ctx, seq)
        sequence = {}
        for k, v in b.items():
            if isinstance(v, VarLenValue):
                sequence[k] = norm_sparse(*_steps_to_sparse(v.values, v.row_splits, lens[k]))
            else:
                sequence[k] = norm_array(v)
        return {"ok": {"context": {k: jf_norm(v) for k, v in a.items()}, "sequence": sequence,
                       "lengths": {k: norm_array(v) for k, v in lens.items()}}}
    a, b = parse_single_sequence_example(c["records"][0], ctx, seq)
    context = {}
    for name, s in c["context"]:
        v = a[name]
        if s[0] == "varlen":
            context[name] = norm_sparse(np.arange(len(v), dtype=np.int64)[:, None], v,
                                        np.array([len(v)], dtype=np.int64))
        else:
            context[name] = norm_array(v)
    sequence = {}
    for k, v in b.items():
        if isinstance(v, VarLenValue):
            lengths = np.diff(v.row_splits)
            idx = [(j, i) for j, n in enumerate(lengths) for i in range(int(n))]
            sequence[k] = norm_sparse(np.array(idx, dtype=np.int64).reshape(-1, 2), v.values,
                                      np.array([len(lengths), int(lengths.max()) if len(lengths) else 0],
                                               dtype=np.int64))
        else:
            sequence[k] = norm_array(v)
    return {"ok": {"context": context, "sequence": sequence}}


# ============================================================================ CSV cases
INT_FIELDS = [b"0", b"1", b"-1", b"42", b"+1", b" 1", b"1 ", b"0x10", b"1e5", b"1.0", b"", b"2147483647",
              b"2147483648", b"-2147483648", b"-2147483649", b"9223372036854775807", b"9223372036854775808",
              b"-9223372036854775809", b"1_0", "١٢".encode(), "１２".encode(), b"007", b"-0", b"abc", b'"12"',
              b'" 12"', b"\t3", b"--1", b"+-1", b"0b1", b"12abc"]
FLOAT_FIELDS = [b"1.5", b"-0", b"1e5", b"1E-3", b".5", b"5.", b"nan", b"NaN", b"-nan", b"inf", b"-inf",
                b"Infinity", b"infinity", b"INF", b"1e40", b"-1e40", b"1e-50", b"0x1p3", b"0x10", b"1_0.5",
                b" 2.5", b"2.5 ", b"+3", b"", b"1.5f", b'"1.5"', b"3.4028235e38", b"3.4028236e38", b"1e309",
                b"0.1", b"16777217", b"1.00000005960464477539062500001", b"1d5", "１".encode(), b"nan(123)",
                b"e5", b"-", b"."]
STR_FIELDS = [b"abc", b"", b" a ", b'"q,uoted"', b'"esc""aped"', b'a"b', b'"x"y', b'"multi\nline"', b"\xff\xfe",
              "é".encode(), b"a\rb", b'""', b'"a', b"tab\tx", b"NA", b"?"]


def csv_field(rng, dtype, na, notes):
    if rng.random() < 0.08:
        return na
    if rng.random() < 0.04:
        f = rng.choice(STR_FIELDS)
    elif dtype in ("int32", "int64"):
        if rng.random() < 0.4:
            return str(rng.randint(-100, 100)).encode()
        f = rng.choice(INT_FIELDS)
    elif dtype in ("float32", "float64"):
        if rng.random() < 0.4:
            return repr(rng.uniform(-100, 100)).encode()
        f = rng.choice(FLOAT_FIELDS)
    else:
        f = rng.choice(STR_FIELDS)
    notes.add(repr(f)[1:])
    return f


def gen_csv_case(rng, tmp, idx):
    ncols = rng.randint(1, 4)
    types = [rng.choice(["int32", "int64", "float32", "float64", "string"]) for _ in range(ncols)]
    defaults = []
    for t in types:
        if rng.random() < 0.4:
            defaults.append({"t": t})
            continue
        if t in ("int32", "int64"):
            v = rng.choice([0, -1, 7, 2 ** 31 - 1]) if t == "int32" else rng.choice([0, -1, 2 ** 40, 2 ** 63 - 1])
        elif t.startswith("float"):
            v = rng.choice([0.0, 1.5, -2.0, 0.1])
        else:
            v = rng.choice(["", "d", "dé"])
        defaults.append({"t": t, "v": v, "list": rng.random() < 0.2})
    delim = rng.choice([",", ",", ",", "\t", "|", ";", " "])
    quote = rng.random() < 0.8
    na = rng.choice(["", "", "", "NA", "?", "-"])
    header = rng.random() < 0.2
    select = None
    width = ncols
    if rng.random() < 0.2:
        width = ncols + rng.randint(0, 2)
        select = sorted(rng.sample(range(width), ncols))
    eol = rng.choice([b"\n", b"\n", b"\r\n"])
    lines = []
    if header:
        lines.append(delim.encode().join(b"h%d" % i for i in range(width)))
    notes = set()
    for _ in range(rng.randint(0, 5)):
        w = width
        if rng.random() < 0.05:
            w = max(1, width + rng.choice([-1, 1]))
            notes.add("wrong-width")
        fields = []
        for j in range(w):
            col = select.index(j) if select and j in select else (j if not select and j < ncols else None)
            fields.append(csv_field(rng, types[col] if col is not None else "string", na.encode(), notes))
        lines.append(delim.encode().join(fields))
        if rng.random() < 0.05:
            lines.append(b"")
            notes.add("empty-line")
    text = eol.join(lines)
    if lines and rng.random() < 0.7:
        text += eol
    compression = rng.choice(["", "", "", "", "GZIP", "ZLIB"])
    path = os.path.join(tmp, f"c{idx}.csv")
    with open(path, "wb") as f:
        f.write(compress(text, compression))
    case = {"kind": "csv", "paths": [path], "text": text, "defaults": defaults, "header": header,
            "field_delim": delim, "use_quote_delim": quote, "na_value": na, "compression": compression,
            "notes": sorted(notes)}
    if select is not None:
        case["select_cols"] = select
    if rng.random() < 0.2:
        case["buffer_size"] = rng.choice([1, 3, 16, 1 << 20])
    return case


def compress(data: bytes, compression: str) -> bytes:
    if compression == "GZIP":
        return gzip.compress(data)
    if compression == "ZLIB":
        return zlib.compress(data)
    return data


def jf_csv_default(d):
    if "v" not in d:
        return {"int32": np.int32, "int64": np.int64, "float32": np.float32, "float64": np.float64,
                "string": str}[d["t"]]
    v = d["v"]
    if d["t"] == "int64":
        v = np.int64(v)
    elif d["t"] == "float64":
        v = np.float64(v)
    return [v] if d.get("list") else v


def jf_iterate(make):
    elems = []
    try:
        it = iter(make())
        while len(elems) < MAX_ELEMS:
            try:
                e = next(it)
            except StopIteration:
                break
            elems.append([norm_array(x) for x in e] if isinstance(e, tuple) else norm_array(e))
        return {"elems": elems, "end": None}
    except Exception as e:  # noqa: BLE001
        return {"elems": elems, "end": norm_error(e)}


def jf_csv(c):
    from jaxfeed.formats import CsvDataset
    return jf_iterate(lambda: CsvDataset(c["paths"], [jf_csv_default(d) for d in c["defaults"]],
                                         compression_type=c["compression"] or None,
                                         buffer_size=c.get("buffer_size"), header=c["header"],
                                         field_delim=c["field_delim"], use_quote_delim=c["use_quote_delim"],
                                         na_value=c["na_value"], select_cols=c.get("select_cols")))


# ============================================================================ text / fixed-length
TEXT_TOKENS = [b"a", b"bc", b"\r", b"\r\n", b"\n", b"\n\n", b"\xff", b"\x00", b" ", b"\n\r", b"line"]


def gen_text_case(rng, tmp, idx):
    paths, texts = [], []
    compression = rng.choice(["", "", "GZIP", "ZLIB"])
    for k in range(rng.choice([1, 1, 1, 2, 3])):
        text = b"".join(rng.choice(TEXT_TOKENS) for _ in range(rng.randrange(12)))
        if rng.random() < 0.05:
            text = b"x" * rng.randint(100, 3000) + b"\n" + text
        path = os.path.join(tmp, f"t{idx}_{k}.txt")
        with open(path, "wb") as f:
            f.write(compress(text, compression))
        paths.append(path)
        texts.append(text)
    case = {"kind": "text", "paths": paths, "texts": texts, "compression": compression}
    if rng.random() < 0.4:
        case["buffer_size"] = rng.choice([1, 2, 5, 64])
    if len(paths) > 1 and rng.random() < 0.5:
        case["num_parallel_reads"] = rng.randint(1, 3)
    return case


def jf_text(c):
    from jaxfeed.formats import TextLineDataset
    return jf_iterate(lambda: TextLineDataset(c["paths"], compression_type=c["compression"] or None,
                                              buffer_size=c.get("buffer_size"),
                                              num_parallel_reads=c.get("num_parallel_reads")))


def gen_fixedlen_case(rng, tmp, idx):
    rb = rng.randint(1, 6)
    hb = rng.choice([0, 0, 1, 2, 5])
    fb = rng.choice([0, 0, 1, 3, 4])
    compression = rng.choice(["", "", "", "GZIP", "ZLIB"])
    paths, notes = [], set()
    for k in range(rng.choice([1, 1, 2])):
        n = rng.randrange(6)
        body = rng.randbytes(n * rb)
        r = rng.random()
        if r < 0.25 and rb > 1:
            body += rng.randbytes(rng.randint(1, rb - 1))
            notes.add("truncated-last-record")
        data = rng.randbytes(hb) + body + rng.randbytes(fb)
        if r > 0.93:
            data = data[:rng.randrange(max(hb + fb, 1))]
            notes.add("shorter-than-header-footer")
        path = os.path.join(tmp, f"f{idx}_{k}.bin")
        with open(path, "wb") as f:
            f.write(compress(data, compression))
        paths.append(path)
    case = {"kind": "fixedlen", "paths": paths, "record_bytes": rb, "header_bytes": hb, "footer_bytes": fb,
            "compression": compression, "notes": sorted(notes)}
    if rng.random() < 0.4:
        case["buffer_size"] = rng.choice([1, 2, 7, 64])
    return case


def jf_fixedlen(c):
    from jaxfeed.data import FixedLengthRecordDataset
    return jf_iterate(lambda: FixedLengthRecordDataset(c["paths"], c["record_bytes"], header_bytes=c["header_bytes"],
                                                       footer_bytes=c["footer_bytes"],
                                                       buffer_size=c.get("buffer_size"),
                                                       compression_type=c["compression"] or None))


# ============================================================================ TFRecord
def gen_tfrecord_case(rng, tmp, idx):
    from jaxfeed.formats import TFRecordOptions, TFRecordWriter
    compression = rng.choice(["", "", "GZIP", "ZLIB"])
    records = [rng.randbytes(rng.choice([0, 1, 5, 30, 200, 3000])) for _ in range(rng.randrange(7))]
    tf_path = os.path.join(tmp, f"r{idx}_tf.tfrecord")
    jf_path = os.path.join(tmp, f"r{idx}_jf.tfrecord")
    with TFRecordWriter(jf_path, TFRecordOptions(compression)) as w:
        for r in records:
            w.write(r)
    # a damaged copy: built from jaxfeed's uncompressed framing (checked byte-equal to TF's below)
    with TFRecordWriter(jf_path + ".plain") as w:
        for r in records:
            w.write(r)
    plain = open(jf_path + ".plain", "rb").read()
    notes = set()
    m = rng.random()
    if m < 0.35 and plain:
        cut = rng.randrange(len(plain))
        plain = plain[:cut]
        notes.add("truncated-framing")
    elif m < 0.65 and plain:
        pos = rng.randrange(len(plain))
        plain = plain[:pos] + bytes([plain[pos] ^ (1 << rng.randrange(8))]) + plain[pos + 1:]
        notes.add("bit-flip")
    elif m < 0.75:
        plain += rng.randbytes(rng.randint(1, 20))
        notes.add("trailing-garbage")
    raw = compress(plain, compression)
    if compression and rng.random() < 0.3 and raw:
        raw = raw[:rng.randrange(len(raw))]
        notes.add("truncated-compressed-stream")
    raw_path = os.path.join(tmp, f"r{idx}_raw.tfrecord")
    with open(raw_path, "wb") as f:
        f.write(raw)
    reads = {"tf_file": [tf_path], "jf_file": [jf_path], "raw": [raw_path]}
    case = {"kind": "tfrecord", "records": records, "compression": compression, "tf_write_path": tf_path,
            "jf_write_path": jf_path, "reads": reads, "notes": sorted(notes)}
    if rng.random() < 0.3:
        reads["raw2"] = [jf_path, raw_path]
        case["num_parallel_reads"] = rng.choice([None, 1, 2])
    if rng.random() < 0.3:
        case["buffer_size"] = rng.choice([1, 100, 10000])
    return case


def jf_tfrecord(c):
    from jaxfeed.formats import TFRecordDataset
    out = {}
    for k, paths in c["reads"].items():
        if k == "jf_file":
            continue  # TF reads jaxfeed's file; jaxfeed reads TF's
        out[k] = jf_iterate(lambda: TFRecordDataset(paths, compression_type=c["compression"] or None,
                                                    buffer_size=c.get("buffer_size"),
                                                    num_parallel_reads=c.get("num_parallel_reads")))
    return out


# ============================================================================ comparison
def diff(a, b, path="") -> list:
    """Differences between two normalised results (TF's ``a``, jaxfeed's ``b``)."""
    if isinstance(a, dict) and isinstance(b, dict):
        if "dtype" in a and "v" in a and "dtype" in b and "v" in b:
            out = []
            if a["dtype"] != b["dtype"]:
                out.append(f"{path}: dtype TF {a['dtype']} vs jaxfeed {b['dtype']}")
            if a["shape"] != b["shape"]:
                out.append(f"{path}: shape TF {a['shape']} vs jaxfeed {b['shape']}")
            if a["v"] != b["v"] and not out:
                if a["dtype"] in ("float32", "float64") and len(a["v"]) == len(b["v"]):
                    fa = _floats(a)
                    fb = _floats(b)
                    bad = [i for i in range(len(fa)) if a["v"][i] != b["v"][i]]
                    if all(math.isnan(fa[i]) and math.isnan(fb[i]) for i in bad):
                        return [f"{path}: NaN bit patterns differ TF {[hex(a['v'][i]) for i in bad][:4]} vs "
                                f"jaxfeed {[hex(b['v'][i]) for i in bad][:4]}"]
                    return [f"{path}: values TF {fa[:8]} vs jaxfeed {fb[:8]}"]
                out.append(f"{path}: values TF {_show(a)} vs jaxfeed {_show(b)}")
            return out
        out = []
        for k in sorted(set(a) | set(b)):
            if k in ("mro", "msg"):
                continue
            if k not in a:
                out.append(f"{path}/{k}: only jaxfeed has it")
            elif k not in b:
                out.append(f"{path}/{k}: only TF has it")
            else:
                out += diff(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: length TF {len(a)} vs jaxfeed {len(b)}"]
        out = []
        for i, (x, y) in enumerate(zip(a, b)):
            out += diff(x, y, f"{path}[{i}]")
        return out
    return [] if a == b else [f"{path}: TF {a!r} vs jaxfeed {b!r}"]


def _floats(n):
    code = "<I" if n["dtype"] == "float32" else "<Q"
    fmt = "<f" if n["dtype"] == "float32" else "<d"
    return [struct.unpack(fmt, struct.pack(code, v))[0] for v in n["v"]]


def _show(n):
    v = n["v"]
    if n["dtype"] == "string":
        v = [bytes.fromhex(x) if not x.startswith("!") else x for x in v]
    return f"{n['dtype']}{n['shape']} {v[:8]}"


# wire forms TF's own serializer never writes (proto3 packs numeric lists, one kind per Feature, unique keys,
# key before value, no unknown fields) and damaged records: TF's fast parser and protobuf disagree on some
NONCANONICAL = {"two-kinds-in-feature", "list-field-twice", "map-entry-value-before-key", "unknown-field-in-feature",
                "unknown-field-in-map-entry", "unknown-field-in-example", "unknown-field-in-list", "duplicate-key",
                "features-split-in-two", "non-utf8-key", "truncated-record", "garbage-record", "overlong-varint",
                "unpacked-list", "list-in-several-runs", "noncanonical-varint", "empty-packed-run"}


def _same_error(t, j):
    # TF's eager error text holding non-UTF-8 bytes (a key) fails to decode: it is still TF's parse error
    return t["error"] in j["mro"] or t["error"] == j["error"] or t["error"] == "UnicodeDecodeError"


def classify_outcome(tf, jf):
    """(category, details) for a parse case: tf/jf are {"ok": ...} or {"raised": ...}."""
    if "raised" in tf and "raised" in jf:
        t, j = tf["raised"], jf["raised"]
        if _same_error(t, j):
            return None, []
        return "error-class", [f"TF {t['error']}: {t['msg'][:200]} | jaxfeed {j['error']}: {j['msg'][:200]}"]
    if "raised" in tf:
        return "missing-error", [f"TF {tf['raised']['error']}: {tf['raised']['msg'][:300]}",
                                 f"jaxfeed returned {json.dumps(jf['ok'])[:300]}"]
    if "raised" in jf:
        return "spurious-error", [f"jaxfeed {jf['raised']['error']}: {jf['raised']['msg'][:300]}",
                                  f"TF returned {json.dumps(tf['ok'])[:300]}"]
    d = diff(tf["ok"], jf["ok"])
    if d:
        cat = "nan-payload" if all("NaN bit patterns" in x for x in d) else "value-mismatch"
        return cat, d
    return None, []


def classify_stream(tf, jf):
    """For dataset reads: {"elems", "end"} on each side."""
    d = diff(tf["elems"], jf["elems"], "elems")
    te, je = tf["end"], jf["end"]
    if d:
        n = min(len(tf["elems"]), len(jf["elems"]))
        head = diff(tf["elems"][:n], jf["elems"][:n], "elems")
        if not head:
            if len(tf["elems"]) > len(jf["elems"]):
                cat = "fewer-elements"
            else:
                cat = "extra-elements"
        else:
            cat = "value-mismatch"
        return cat, d[:6] + [f"end TF {te and (te['error'] + ': ' + te['msg'][:200])} | "
                             f"jaxfeed {je and (je['error'] + ': ' + je['msg'][:200])}"]
    if te is None and je is None:
        return None, []
    if te is None:
        return "spurious-error", [f"jaxfeed {je['error']}: {je['msg'][:300]}"]
    if je is None:
        return "missing-error", [f"TF {te['error']}: {te['msg'][:300]}"]
    if te["error"] in je["mro"]:
        return None, []
    return "error-class", [f"TF {te['error']}: {te['msg'][:200]} | jaxfeed {je['error']}: {je['msg'][:200]}"]


def run_jaxfeed(c):
    kind = c["kind"]
    try:
        if kind == "example":
            return jf_example(c)
        if kind == "seqex":
            return jf_seqex(c)
    except Exception as e:  # noqa: BLE001
        return {"raised": norm_error(e)}
    try:
        return {"csv": jf_csv, "text": jf_text, "fixedlen": jf_fixedlen, "tfrecord": jf_tfrecord}[kind](c)
    except Exception as e:  # noqa: BLE001
        return {"raised": norm_error(e)}


def compare(c, tf, jf) -> list:
    """[(category, details)] for one case."""
    kind = c["kind"]
    if kind in ("example", "seqex"):
        if kind == "seqex" and "ok" in tf and "ok" in jf and "lengths" in jf["ok"]:
            # jaxfeed also reports step counts of VarLen feature lists (TF only of FixedLenSequence ones)
            jf["ok"]["lengths"] = {k: v for k, v in jf["ok"]["lengths"].items() if k in tf["ok"].get("lengths", {})}
        cat, d = classify_outcome(tf, jf)
        if cat and set(c.get("notes", ())) & NONCANONICAL:
            cat = "noncanonical-wire:" + cat
        return [(cat, d)] if cat else []
    if "raised" in tf or "raised" in jf:
        if "raised" in tf and "raised" in jf:
            return []
        return [("construction-error", [json.dumps(tf.get("raised")), json.dumps(jf.get("raised"))])]
    if kind == "tfrecord":
        out = []
        for k in jf:
            cat, d = classify_stream(tf[k], jf[k])
            if cat:
                out.append((f"{k}:{cat}", d))
        # TF reads jaxfeed's file back to exactly the records
        want = [norm_array(r) for r in c["records"]]
        cat, d = classify_stream({"elems": want, "end": None}, tf["jf_file"])
        if cat:
            out.append(("tf-reads-jaxfeed-file:" + cat, d))
        if not c["compression"]:
            a = open(c["tf_write_path"], "rb").read()
            b = open(c["jf_write_path"], "rb").read()
            if a != b:
                out.append(("writer-bytes-differ", [f"TF {len(a)} bytes vs jaxfeed {len(b)} bytes"]))
        else:
            a = _decompress(open(c["tf_write_path"], "rb").read(), c["compression"])
            b = _decompress(open(c["jf_write_path"], "rb").read(), c["compression"])
            if a != b:
                out.append(("writer-stream-differs", [f"TF {len(a)} bytes vs jaxfeed {len(b)} bytes"]))
        return out
    cat, d = classify_stream(tf, jf)
    return [(cat, d)] if cat else []


def _decompress(data, compression):
    return gzip.decompress(data) if compression == "GZIP" else zlib.decompress(data)


# ============================================================================ driver
def gen_case(rng, kind, tmp, idx):
    if kind == "example":
        return gen_example_case(rng)
    if kind == "seqex":
        return gen_seqex_case(rng)
    if kind == "csv":
        return gen_csv_case(rng, tmp, idx)
    if kind == "text":
        return gen_text_case(rng, tmp, idx)
    if kind == "fixedlen":
        return gen_fixedlen_case(rng, tmp, idx)
    return gen_tfrecord_case(rng, tmp, idx)


WEIGHTS = {"example": 40, "seqex": 12, "csv": 25, "text": 8, "fixedlen": 8, "tfrecord": 7}


def repro(c) -> str:
    """A short, copy-pasteable description of a case."""
    c = {k: v for k, v in c.items() if k not in ("tf_write_path", "jf_write_path")}
    return json.dumps(enc(c), default=repr)[:1500]


def signature(cat, details) -> str:
    """A short key that separates root causes inside a category: the first detail line with numbers,
    quoted names and paths blanked out."""
    import re
    if not details:
        return ""
    d = details[0]
    if "spurious" in cat and len(details) > 0:
        d = details[0]
    d = re.sub(r"\[[^\]]*\]", "[]", d)
    d = re.sub(r"'[^']*'", "'X'", d)
    d = re.sub(r'"[^"]*"', '"X"', d)
    d = re.sub(r"/tmp/\S+", "PATH", d)
    d = re.sub(r"-?\d+(\.\d+)?", "N", d)
    d = re.sub(r"values TF .*", "values", d)
    return d[:110]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tf-python", required=True)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=400, help="cases per TF subprocess")
    ap.add_argument("--only", default="", help="comma-separated kinds: " + ",".join(KINDS))
    ap.add_argument("--verbose", action="store_true")
    ap.add_argument("--dump", default="")
    ap.add_argument("--show", type=int, default=2, help="repros printed per group")
    args = ap.parse_args(argv)

    kinds = [k for k in (args.only.split(",") if args.only else KINDS) if k]
    weights = [WEIGHTS[k] for k in kinds]
    rng = random.Random(args.seed)
    groups = collections.defaultdict(list)
    per_kind = collections.Counter()
    done = 0
    t0 = time.time()
    with tempfile.TemporaryDirectory(prefix="jaxfeed-fuzz-") as tmp:
        while done < args.count:
            n = min(args.batch, args.count - done)
            bdir = os.path.join(tmp, f"b{done}")
            os.makedirs(bdir)
            cases = []
            for i in range(n):
                kind = rng.choices(kinds, weights)[0]
                c = gen_case(rng, kind, bdir, i)
                c["id"] = f"seed{args.seed}#{done + i}"
                cases.append(c)
            cfile, rfile = os.path.join(bdir, "cases.json"), os.path.join(bdir, "results.json")
            with open(cfile, "w") as f:
                json.dump(enc(cases), f)
            tf_results = []
            while len(tf_results) < len(cases):
                proc = subprocess.run([args.tf_python, os.path.join(HERE, "fuzz_formats_tf_worker.py"), cfile, rfile,
                                       str(len(tf_results))], capture_output=True, text=True, timeout=1800,
                                      env=dict(os.environ, TMPDIR=tmp))  # (TF's autograph files: removed with it)
                with open(rfile) as f:
                    tf_results = [json.loads(line) for line in f if line.strip()]
                if proc.returncode != 0:
                    if len(tf_results) >= len(cases):
                        break
                    crashed = cases[len(tf_results)]
                    tail = [x for x in proc.stderr.splitlines() if x.strip()][-1:]
                    print(f"TF worker died (rc {proc.returncode}: {tail}) on {crashed['id']}", file=sys.stderr)
                    groups[(crashed["kind"], "tensorflow-crashed", str(tail))].append((crashed, tail))
                    with open(rfile, "a") as f:
                        f.write(json.dumps({"crashed": True}) + "\n")
                    tf_results.append({"crashed": True})
            for c, tfr in zip(cases, tf_results):
                per_kind[c["kind"]] += 1
                if tfr.get("crashed"):
                    continue
                jfr = run_jaxfeed(c)
                for cat, details in compare(c, tfr, jfr):
                    groups[(c["kind"], cat, signature(cat, details))].append((c, details))
                    if args.verbose:
                        print(f"[{c['kind']}:{cat}] {c['id']} {details}\n  {repro(c)}")
            done += n
            print(f"... {done}/{args.count} cases, {time.time() - t0:.0f}s, "
                  f"{sum(len(v) for v in groups.values())} mismatches", file=sys.stderr)

        print(f"\n{done} cases (seed {args.seed}): " + ", ".join(f"{k} {v}" for k, v in sorted(per_kind.items())))
        if not groups:
            print("no differences found")
        for (kind, cat, sig), items in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1], -len(kv[1]))):
            print(f"\n=== {kind} / {cat}: {len(items)} cases  [{sig}]")
            notes = collections.Counter(n for c, _ in items for n in c.get("notes", []))
            if notes:
                print("    notes: " + ", ".join(f"{k}({v})" for k, v in notes.most_common(8)))
            for c, details in sorted(items, key=lambda it: len(repro(it[0])))[:args.show]:
                print(f"  - {c['id']}")
                for d in details[:6]:
                    print(f"      {d}")
                print(f"      case: {repro(c)}")
        if args.dump:
            with open(args.dump, "w") as f:
                json.dump([{"case": enc({k: v for k, v in c.items()}), "category": f"{kind}/{cat}",
                            "details": d} for (kind, cat, _), items in groups.items() for c, d in items], f)
    return 1 if groups else 0


if __name__ == "__main__":
    sys.exit(main())
