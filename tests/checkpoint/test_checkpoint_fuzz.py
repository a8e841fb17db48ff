"""Fuzzing the checkpoint reader: whatever bytes a state file holds, reading it gives the state or one of
the documented errors (``InvalidArgumentError``, ``DataLossError``), and restoring a state that reads also
gives elements or a documented error (``FailedPreconditionError`` for another pipeline) -- never a
``KeyError``, ``TypeError``, ``IndexError``, ``RecursionError`` or a hang.

The mutations keep the file's framing valid (lengths and CRC32C recomputed), so they reach the parser's
validation of the header and the blobs; random bytes and bit flips test the framing itself. The default
run is a smoke run of a few seconds; ``-m slow`` runs the long one.
"""

import collections
import json
import struct

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jaxfeed.pipeline import Dataset, checkpoint, errors
from jaxfeed.pipeline.checkpoint.format import _checksum
from jaxfeed.pipeline.engine.blocks import Failure

READ_ERRORS = (errors.InvalidArgumentError, errors.DataLossError)
RESTORE_ERRORS = READ_ERRORS + (errors.FailedPreconditionError,)
TAGS = ["dict", "tuple", "namedtuple", "array", "scalar", "objarray", "bytes", "stacked", "byteslist",
        "failure", "dataset", "unknown"]
Point = collections.namedtuple("Point", "x y")


# ------------------------------------------------------------------------------------------ corpus
def _pipelines():
    """(name, build) pairs whose states together use every value tag of the format."""
    return {
        "map_batch": lambda: Dataset.range(40).map(lambda x: x * 2).batch(3),
        "shuffle_elements": lambda: Dataset.range(30).map(lambda x: {"a": x, "b": (x, b"%d" % x)})
        .shuffle(16, seed=3),
        "window": lambda: Dataset.range(20).window(4, shift=2),
        "prefetch_strings": lambda: Dataset.from_tensor_slices(np.array([b"a", b"bcd", b"", b"xy"] * 5,
                                                                        dtype=object)).prefetch(4),
        "interleave": lambda: Dataset.range(4).interleave(lambda i: Dataset.range(i * 10, i * 10 + 5),
                                                         cycle_length=2, block_length=1),
    }


PIPELINES = _pipelines()


def _state_of(name, steps=3):
    it = iter(PIPELINES[name]())
    for _ in range(steps):
        next(it)
    return checkpoint.serialize(it.get_state())


def _value_states():
    values = [
        {1: "int key", (2, 3): "tuple key"}, Point(np.int32(1), b"y"), [Point(i, b"p") for i in range(10)],
        np.array([[b"a", b"b"]], dtype=object), np.float32(0.5), [b"line %d" % i for i in range(9)],
        [Failure(errors.DataLossError("bad record at offset 12", "x")), Failure(KeyError("k"))],
        [(np.int64(i), np.zeros(2)) for i in range(9)], [(), (), (), (), (), (), (), (), ()],
    ]
    return [checkpoint.serialize({"v": v}) for v in values]


CORPUS = {**{name: _state_of(name) for name in PIPELINES}, **{f"value{i}": s for i, s in enumerate(_value_states())}}
CORPUS_NAMES = sorted(CORPUS)


# ------------------------------------------------------------------------------------------ framing
_PREFIX = struct.Struct("<8sIQQ")


def split(data: bytes):
    """(header JSON object, blob bytes) of a valid state file."""
    _, _, header_len, blob_len = _PREFIX.unpack_from(data)
    start = _PREFIX.size
    return json.loads(data[start:start + header_len]), data[start + header_len:start + header_len + blob_len]


def frame(header: bytes, blobs: bytes) -> bytes:
    """A state file around ``header`` and ``blobs`` with correct lengths and CRC32C."""
    body = _PREFIX.pack(checkpoint.MAGIC, checkpoint.FORMAT_VERSION, len(header), len(blobs)) + header + blobs
    return body + _checksum(body)


def read_or_refuse(data: bytes):
    """The decoded state, or None when the reader refused it with a documented error."""
    try:
        return checkpoint.deserialize(data)
    except READ_ERRORS:
        return None


def restore_or_refuse(name: str, state) -> None:
    """Restoring a state that read, into the pipeline it came from: an iterator or a documented error.
    (Only the restore: elements held in a state -- buffers of a shuffle, a window, a prefetch -- come back
    as data, and a crafted element of the wrong type surfaces where it is used.)"""
    if name not in PIPELINES or state is None:
        return
    try:
        PIPELINES[name]().make_iterator(state=state).close()
    except RESTORE_ERRORS:
        pass


# ------------------------------------------------------------------------------------------ strategies
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.integers(-3, 64),
                         st.floats(allow_nan=False), st.text(max_size=12), st.sampled_from(TAGS))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.dictionaries(st.one_of(st.sampled_from(["$t", "v", "b", "n", "shape", "dtype", "items", "lengths",
                                                   "leaves", "scalar", "template", "fields", "module",
                                                   "name", "kind", "data", "message", "notes"]),
                                  st.text(max_size=6)), inner, max_size=6),
        st.fixed_dictionaries({"$t": st.sampled_from(TAGS)},
                              optional={"v": inner, "b": st.integers(-2, 40), "n": st.integers(-2, 2**40),
                                        "shape": st.lists(st.integers(-1, 2**40), max_size=3),
                                        "dtype": st.sampled_from(["<i8", "|b1", "O", "<U0", "S0", "V3", "<f4",
                                                                  "(2,)i4", "[('a','<i4')]", "M8[ns]", "zz"]),
                                        "items": inner, "lengths": inner, "leaves": inner, "scalar": inner,
                                        "template": inner, "fields": inner, "module": inner, "name": inner,
                                        "kind": st.sampled_from(["TensorSlices", "Tensors", "Elements", "X"]),
                                        "data": inner}),
    ),
    max_leaves=12,
)


def _children(node):
    if isinstance(node, list):
        return list(range(len(node)))
    if isinstance(node, dict):
        return list(node)
    return []


@st.composite
def mutated_header(draw, header):
    """``header`` with one subtree replaced, deleted, wrapped in extra nesting or retyped."""
    header = json.loads(json.dumps(header))  # a private copy
    root = {"h": header}
    parent, key = root, "h"
    while True:  # walk down to a random node
        node = parent[key]
        kids = _children(node)
        if not kids or (parent is not root and draw(st.integers(0, 5)) == 0):
            break
        parent, key = node, draw(st.sampled_from(kids))
    action = draw(st.sampled_from(["replace", "delete", "deepen", "retype", "number"]))
    if action == "replace":
        parent[key] = draw(json_values)
    elif action == "delete" and isinstance(parent, dict) and parent is not root:
        del parent[key]
    elif action == "deepen":  # nested by text in _dumps (json.dumps itself cannot write 5,000 levels)
        parent[key] = {_DEEP: [draw(st.sampled_from([1, 50, 199, 200, 300, 5000])),
                               draw(st.sampled_from(["list", "tuple", "dict"])), parent[key]]}
    elif action == "retype":
        value = parent[key]
        parent[key] = [value] if not isinstance(value, list) else (value[0] if value else {})
    else:
        parent[key] = draw(st.sampled_from([-1, 0, 1, 2**31, 2**63, 2**64 + 1, -2**63, 10**30, 0.5, True]))
    return root["h"]


_DEEP = "\x00deep"
_WRAP = {"list": ("[", "]"), "tuple": ('{"$t":"tuple","v":[', "]}"), "dict": ('{"k":', "}")}


def _dumps(header) -> bytes:
    """JSON text of ``header``, with each ``{_DEEP: [levels, kind, value]}`` written as ``value`` inside
    ``levels`` nested lists, tuples or dicts."""
    def encode(v):
        if isinstance(v, dict) and list(v) == [_DEEP]:
            levels, kind, inner = v[_DEEP]
            opening, closing = _WRAP[kind]
            return opening * levels + encode(inner) + closing * levels
        if isinstance(v, dict):
            return "{" + ",".join(json.dumps(k) + ":" + encode(x) for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + ",".join(encode(x) for x in v) + "]"
        return json.dumps(v)

    return encode(header).encode()


# ------------------------------------------------------------------------------------------ properties
def _header_mutations(data):
    name = data.draw(st.sampled_from(CORPUS_NAMES))
    header, blobs = split(CORPUS[name])
    mutated = _dumps(data.draw(mutated_header(header)))
    state = read_or_refuse(frame(mutated, blobs))
    restore_or_refuse(name, state)


def _byte_mutations(data):
    name = data.draw(st.sampled_from(CORPUS_NAMES))
    raw = bytearray(CORPUS[name])
    _, _, header_len, blob_len = _PREFIX.unpack_from(raw)
    header = bytearray(raw[_PREFIX.size:_PREFIX.size + header_len])
    blobs = bytearray(raw[_PREFIX.size + header_len:_PREFIX.size + header_len + blob_len])
    for _ in range(data.draw(st.integers(1, 4))):
        target = header if (not blobs or data.draw(st.booleans())) else blobs
        if not target:
            break
        i = data.draw(st.integers(0, len(target) - 1))
        op = data.draw(st.sampled_from(["set", "insert", "delete"]))
        if op == "set":
            target[i] = data.draw(st.integers(0, 255))
        elif op == "insert":
            target[i:i] = data.draw(st.binary(min_size=1, max_size=8))
        else:
            del target[i:i + data.draw(st.integers(1, 8))]
    state = read_or_refuse(frame(bytes(header), bytes(blobs)))
    restore_or_refuse(name, state)


def _framing_mutations(data):
    raw = bytearray(CORPUS[data.draw(st.sampled_from(CORPUS_NAMES))])
    choice = data.draw(st.sampled_from(["flip", "truncate", "random", "prefix", "lengths"]))
    if choice == "flip":
        i = data.draw(st.integers(0, len(raw) - 1))
        raw[i] ^= 1 << data.draw(st.integers(0, 7))
    elif choice == "truncate":
        del raw[data.draw(st.integers(0, len(raw) - 1)):]
    elif choice == "random":
        raw = bytearray(data.draw(st.binary(max_size=200)))
    elif choice == "prefix":
        raw = bytearray(checkpoint.MAGIC + data.draw(st.binary(max_size=200)))
    else:  # lengths that disagree with the file, with a CRC that matches
        header, blobs = split(bytes(raw))
        h = json.dumps(header).encode()
        body = _PREFIX.pack(checkpoint.MAGIC, checkpoint.FORMAT_VERSION, data.draw(st.integers(0, 2**64 - 1)),
                            data.draw(st.integers(0, 2**64 - 1))) + h + blobs
        raw = bytearray(body + _checksum(body))
    read_or_refuse(bytes(raw))


FAST = settings(max_examples=120, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
LONG = settings(max_examples=20000, deadline=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@FAST
@given(st.data())
def test_mutated_headers_with_valid_crc_read_or_raise_documented_errors(data):
    _header_mutations(data)


@FAST
@given(st.data())
def test_mutated_header_and_blob_bytes_with_valid_crc_read_or_raise_documented_errors(data):
    _byte_mutations(data)


@FAST
@given(st.data())
def test_damaged_framing_and_random_bytes_raise_documented_errors(data):
    _framing_mutations(data)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # 20,000 examples take minutes on a busy 2-core machine
@LONG
@given(st.data())
def test_long_fuzz_of_headers(data):
    _header_mutations(data)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # 20,000 examples take minutes on a busy 2-core machine
@LONG
@given(st.data())
def test_long_fuzz_of_bytes(data):
    _byte_mutations(data)


@pytest.mark.slow
@pytest.mark.timeout(3600)  # 20,000 examples take minutes on a busy 2-core machine
@LONG
@given(st.data())
def test_long_fuzz_of_framing(data):
    _framing_mutations(data)


def test_corpus_states_read_back():
    """The fuzz starts from valid files: each reads back and restores."""
    for name in CORPUS_NAMES:
        state = checkpoint.deserialize(CORPUS[name])
        if name in PIPELINES:
            list(PIPELINES[name]().make_iterator(state=state))


# ------------------------------------------------------------------------------------------ regressions
def crafted(tree, blobs=b"", index=None, header=None) -> bytes:
    """A state file with a valid CRC around a hand-written header."""
    if header is None:
        header = {"meta": {"format": 1}, "tree": tree, "blobs": [] if index is None else index}
    return frame(header.encode() if isinstance(header, str) else json.dumps(header).encode(), blobs)


CRAFTED = {  # in parentheses: what it raised before the reader validated its fields
    "header is a list (AttributeError)": crafted(None, header=[1, 2]),
    "header without a tree": crafted(None, header={"meta": {}, "blobs": []}),
    "dict without items (KeyError)": crafted({"$t": "dict"}),
    "dict item of one entry (ValueError)": crafted({"$t": "dict", "items": [[1]]}),
    "dict key that is a list of lists (TypeError)": crafted({"$t": "dict", "items": [[[[1]], 2]]}),
    "tuple of a number (TypeError)": crafted({"$t": "tuple", "v": 5}),
    "tag that is a list": crafted({"$t": [1]}),
    "blob entry of one number (ValueError)": crafted({"$t": "bytes", "b": 0}, b"abc", [[0]]),
    "blob table of strings (TypeError)": crafted({"$t": "bytes", "b": 0}, b"abc", "xy"),
    "blob index that is a string": crafted({"$t": "bytes", "b": "0"}, b"abc", [[0, 3]]),
    "array shape with a string (TypeError)": crafted({"$t": "array", "dtype": "<i8", "shape": ["2"], "b": 0},
                                                     bytes(16), [[0, 16]]),
    "array of object dtype (ValueError)": crafted({"$t": "array", "dtype": "|O", "shape": [2], "b": 0},
                                                  bytes(16), [[0, 16]]),
    "array dtype numpy cannot parse (TypeError)": crafted({"$t": "array", "dtype": "zz", "shape": [], "b": 0},
                                                          bytes(8), [[0, 8]]),
    "scalar of shape [2] (came back as an array)": crafted({"$t": "scalar", "dtype": "<i8", "shape": [2], "b": 0},
                                                           bytes(16), [[0, 16]]),
    "objarray of the wrong size (ValueError)": crafted({"$t": "objarray", "shape": [3], "v": [1, 2]}),
    "namedtuple with a bad field name (ValueError)": crafted({"$t": "namedtuple", "module": "m", "name": "P",
                                                              "fields": ["1x"], "v": [1]}),
    "namedtuple with too few values (TypeError)": crafted({"$t": "namedtuple", "module": "m", "name": "P",
                                                           "fields": ["x", "y"], "v": [1]}),
    "namedtuple without fields (KeyError)": crafted({"$t": "namedtuple", "module": "m", "name": "P", "v": []}),
    "byteslist lengths of strings (TypeError)": crafted({"$t": "byteslist", "lengths": ["a"], "b": 0}, b"a",
                                                        [[0, 1]]),
    "stacked with more rows than its leaves (IndexError)": crafted(
        {"$t": "stacked", "n": 5, "template": None, "scalar": [True],
         "leaves": [{"$t": "array", "dtype": "<i8", "shape": [2], "b": 0}]}, bytes(16), [[0, 16]]),
    "stacked with no leaves and 10**12 rows (memory)": crafted(
        {"$t": "stacked", "n": 10 ** 12, "template": [], "scalar": [], "leaves": []}),
    "failure with notes that are numbers (TypeError)": crafted({"$t": "failure", "module": "builtins",
                                                                "name": "KeyError", "message": "m", "notes": [1]}),
    "dataset of a scalar (ValueError)": crafted({"$t": "dataset", "kind": "TensorSlices", "data": 3}),
    "lists nested 100,000 deep (RecursionError in json)": crafted(None, header='{"meta":{},"blobs":[],"tree":'
                                                                  + "[" * 100_000 + "]" * 100_000 + "}"),
    "tuples nested 900 deep (RecursionError in the reader)": crafted(
        None, header='{"meta":{},"blobs":[],"tree":' + '{"$t":"tuple","v":[' * 900 + "]}" * 900 + "}"),
    "integer of 5,000 digits": crafted(None, header='{"meta":{},"blobs":[],"tree":' + "9" * 5000 + "}"),
}


@pytest.mark.parametrize("name", list(CRAFTED))
def test_crafted_header_with_valid_crc_raises_a_documented_error(name):
    with pytest.raises(READ_ERRORS):
        checkpoint.deserialize(CRAFTED[name])


def test_restored_state_with_an_iteration_that_is_not_a_number_is_invalid_argument():
    it = iter(Dataset.range(5))
    next(it)
    state = it.get_state()
    state["iteration"] = [1]  # before: TypeError from int()
    with pytest.raises(errors.InvalidArgumentError, match="iteration"):
        Dataset.range(5).make_iterator(state=checkpoint.serialize(state))


def test_deepest_state_the_writer_accepts_reads_back():
    from jaxfeed.pipeline.checkpoint.state_reader import MAX_DEPTH

    value = ()
    for _ in range(MAX_DEPTH - 1):
        value = (value,)
    assert checkpoint.deserialize(checkpoint.serialize(value)) == value
    with pytest.raises(errors.InvalidArgumentError, match="nested deeper"):
        checkpoint.serialize(((value,),))


@pytest.mark.parametrize("pipeline, path, value", [
    (lambda: Dataset.range(10), ["pos"], -2 ** 70),  # before: OverflowError at the next element
    (lambda: Dataset.range(10), ["pos"], 10 ** 9),
    (lambda: Dataset.range(10).shuffle(4, seed=1), ["draw_from", "has_uint32"], 2 ** 63),  # OverflowError
    (lambda: Dataset.range(10).shuffle(4, seed=1), ["draw_from", "inc"], -1),
    (lambda: Dataset.range(10).prefetch(2), ["capacity"], -1),  # before: the iterator hung
], ids=["range pos negative", "range pos past the end", "rng has_uint32", "rng inc negative", "prefetch capacity"])
def test_restored_counter_out_of_its_range_is_invalid_argument_naming_the_node(pipeline, path, value):
    it = iter(pipeline())
    next(it)
    state = it.get_state()
    entry = state["root"]
    for key in path[:-1]:
        entry = entry[key]
    entry[path[-1]] = value
    with pytest.raises(errors.InvalidArgumentError):
        it2 = pipeline().make_iterator(state=checkpoint.serialize(state))
        for _ in range(3):
            next(it2, None)
