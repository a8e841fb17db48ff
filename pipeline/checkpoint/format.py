"""The state file format: a versioned, self-describing, pickle-free encoding of an iterator state.

File layout (all integers little-endian)::

    b"JXFSTATE" | format version u32 | header length u64 | blob length u64 | header | blobs | crc32c u32

The header is UTF-8 JSON: ``{"meta": {...}, "tree": <value>, "blobs": [[offset, length], ...]}``. The
tree holds Python values (None, bool, int, float, str, lists, str-keyed dicts) as JSON; everything else is
a tagged object ``{"$t": tag, ...}``: tuples, namedtuples (stored as a tuple plus their module, name and
fields), other dicts, numpy arrays and scalars (dtype, shape, a blob), bytes (a blob), lists of elements
with one structure (stacked per leaf: a shuffle buffer of 10,000 elements is a few arrays, not 10,000
objects), in-memory datasets held as elements (windows, groups: by their data) and ``blocks.Failure``
entries (the error's type name and text). The digest is the CRC32C (4 bytes) of everything before it.
Nothing is pickled: reading a state never runs code.

Errors: a file that is not a state, or of an unknown format version -> ``InvalidArgumentError``; a
truncated, corrupted or malformed one (every header field is validated, see ``state_reader``) ->
``DataLossError``.
"""

from __future__ import annotations

import json
import operator
import struct

import numpy as np

from .. import structure
from ..engine.blocks import Failure
from ..errors import DataLossError, InvalidArgumentError
from ..nodes.elements import Elements
from ..nodes.tensor_slices import Tensors, TensorSlices
from .state_reader import MAX_DEPTH, Reader, blob_index

MAGIC = b"JXFSTATE"
FORMAT_VERSION = 1
_PREFIX = struct.Struct("<8sIQQ")
_DIGEST = 4
_TAG = "$t"
_STACK_MIN = 8  # lists of at least this many same-structure elements are stored stacked per leaf


# =============================================================================================== encoding
def _path(p) -> str:
    """A lazily built path (nested ``(parent, key)`` pairs) as text, for error messages only."""
    keys = []
    while isinstance(p, tuple):
        p, key = p
        keys.append(key)
    return str(p) + "".join(reversed(keys))


_dtype_of = operator.attrgetter("dtype")


class _Writer:
    def __init__(self):
        self.blobs: list = []
        self.index: list[list[int]] = []
        self.size = 0

    def blob(self, data) -> int:
        if isinstance(data, np.ndarray):
            data = memoryview(np.ascontiguousarray(data)).cast("B") if data.size else b""
        n = len(data)
        self.index.append([self.size, n])
        self.blobs.append(data)
        self.size += n
        return len(self.index) - 1

    def encode(self, v, path, depth=0):
        """``depth`` counts nesting exactly as the reader does (``state_reader.MAX_DEPTH`` bounds both)."""
        t = type(v)
        if v is None or t is bool or t is str or t is int or t is float:
            return v
        if t is list:
            if all(type(x) in _JSON_SCALARS for x in v):
                return list(v)
            self._check_depth(depth, path)
            if len(v) >= _STACK_MIN and all(type(x) is bytes for x in v):  # a buffer of records or lines
                return {_TAG: "byteslist", "lengths": list(map(len, v)), "b": self.blob(b"".join(v))}
            stacked = self._stacked(v, path, depth)
            if stacked is not None:
                return stacked
            return [self.encode(x, (path, f"[{i}]"), depth + 1) for i, x in enumerate(v)]
        if t is dict:
            self._check_depth(depth, path)
            if all(type(k) is str for k in v) and _TAG not in v:
                return {k: self.encode(x, (path, f"[{k!r}]"), depth + 1) for k, x in v.items()}
            return {_TAG: "dict", "items": [[self.encode(k, (path, ".key"), depth + 1),
                                             self.encode(x, (path, f"[{k!r}]"), depth + 1)] for k, x in v.items()]}
        if t is tuple:
            self._check_depth(depth, path)
            return {_TAG: "tuple", "v": [self.encode(x, (path, f"[{i}]"), depth + 1) for i, x in enumerate(v)]}
        if isinstance(v, np.ndarray):
            if v.dtype == object:
                self._check_depth(depth, path)
            return self._array(v, path, depth + 1)
        if structure.is_namedtuple(v):
            self._check_depth(depth, path)
            return {_TAG: "namedtuple", "module": t.__module__, "name": t.__qualname__, "fields": list(t._fields),
                    "v": [self.encode(x, (path, f".{f}"), depth + 1) for f, x in zip(t._fields, v)]}
        if isinstance(v, np.generic):
            out = self._array(np.asarray(v), path)
            out[_TAG] = "scalar"
            return out
        if t is bytes or t is bytearray:
            return {_TAG: "bytes", "b": self.blob(v)}
        if isinstance(v, (bool, int, float, str)):  # subclasses (IntEnum, ...) as their plain value
            return self.encode((bool if isinstance(v, bool) else int if isinstance(v, int)
                                else float if isinstance(v, float) else str)(v), path, depth)
        if t is Failure:
            e = v.error
            return {_TAG: "failure", "module": type(e).__module__, "name": type(e).__qualname__,
                    "message": str(e), "notes": list(getattr(e, "__notes__", None) or [])}
        if hasattr(v, "_node"):
            self._check_depth(depth, path)
            return self._dataset(v, path, depth + 1)
        raise InvalidArgumentError(f"Cannot serialise iterator state: {_path(path)} holds a {t.__module__}."
                                   f"{t.__qualname__}, which is not a state value (Python scalars, lists, "
                                   "tuples, dicts, numpy values, bytes).", "checkpoint.serialize")

    @staticmethod
    def _check_depth(depth, path):
        if depth >= MAX_DEPTH:
            raise InvalidArgumentError(f"Cannot serialise iterator state: {_path(path)} is nested deeper than "
                                       f"{MAX_DEPTH} levels.", "checkpoint.serialize")

    def _dataset(self, ds, path, depth) -> dict:
        """A dataset held as an element (a window, a group): only in-memory ones, stored by their data."""
        node = ds._node
        # the "kind" tags are the file format's names (``state_reader.rebuild_dataset``), not node kinds
        if isinstance(node, (TensorSlices, Tensors)) and not node.inputs:
            tag = "TensorSlices" if isinstance(node, TensorSlices) else "Tensors"
            return {_TAG: "dataset", "kind": tag, "data": self.encode(node.data, (path, ".data"), depth)}
        if isinstance(node, Elements) and not node.inputs:
            return {_TAG: "dataset", "kind": "Elements",
                    "data": self.encode(list(node.elements), (path, ".data"), depth)}
        raise InvalidArgumentError(f"Cannot serialise iterator state: {_path(path)} holds a Dataset built by "
                                   f"{node.label()}; only in-memory datasets (windows, groups) can be saved "
                                   "as elements.", "checkpoint.serialize")

    def _array(self, a: np.ndarray, path, depth=0) -> dict:
        if a.dtype == object:
            return {_TAG: "objarray", "shape": list(a.shape),
                    "v": [self.encode(x, (path, f".flat[{i}]"), depth)
                          for i, x in enumerate(a.reshape(-1).tolist())]}
        if a.dtype.fields is not None or a.dtype.kind not in "biufcmMSUV":
            raise InvalidArgumentError(f"Cannot serialise iterator state: {_path(path)} is an array of dtype "
                                       f"{a.dtype}.", "checkpoint.serialize")
        return {_TAG: "array", "dtype": a.dtype.str, "shape": list(a.shape), "b": self.blob(a)}

    def _stacked(self, items: list, path, depth):
        """A list of elements that share one structure (a buffer of elements), stored as one stacked array
        per leaf: a few blobs instead of one JSON object per element."""
        if len(items) < _STACK_MIN:
            return None
        first = items[0]
        ft = type(first)
        if ft is tuple or ft is dict or structure.is_namedtuple(first):
            if len(set(map(type, items))) != 1:
                return None
            if ft is not dict and not any(isinstance(v, (tuple, dict)) for v in first):
                if len(set(map(len, items))) != 1:  # flat tuples: leaves are the items themselves
                    return None
                columns = list(zip(*items))
            else:
                sketch = _sketch(first)
                if any(_sketch(x) != sketch for x in items):
                    return None
                columns = list(zip(*map(structure.flatten, items)))
        elif isinstance(first, (np.ndarray, np.generic)):
            columns = [items]
        else:
            return None
        leaves, scalar = [], []
        for col in columns:
            types = set(map(type, col))
            if len(types) != 1:
                return None
            t = types.pop()
            if not issubclass(t, (np.ndarray, np.generic)):
                return None
            dtypes = set(map(_dtype_of, col))
            if len(dtypes) != 1:
                return None
            dt = dtypes.pop()
            if dt == object or dt.fields is not None:
                return None
            try:
                stacked = np.stack(col)
            except ValueError:  # shapes differ
                return None
            leaves.append(stacked)
            scalar.append(t is not np.ndarray)
        template = self.encode(structure.pack_as(first, [None] * len(leaves)), (path, "[0]"), depth + 1)
        # "order": the leaves follow structure.flatten (dict values by sorted key); states written before
        # jaxfeed followed tf.nest lack it and list dict values in insertion order (state_reader reads both)
        return {_TAG: "stacked", "n": len(items), "template": template, "scalar": scalar, "order": "sorted",
                "leaves": [self._array(a, path) for a in leaves]}


_JSON_SCALARS = (type(None), bool, int, float, str)


def _sketch(x):
    """Structure identity including namedtuple types and dict keys (cheap for plain leaves)."""
    if isinstance(x, tuple):
        return (type(x), tuple(_sketch(v) for v in x))
    if isinstance(x, dict):
        return (dict, tuple((k, _sketch(v)) for k, v in x.items()))
    return None


# =============================================================================================== bytes
def _checksum(body) -> bytes:
    """CRC32C of the body (hardware-accelerated: ~GB/s; it detects corruption, it does not authenticate)."""
    try:
        import google_crc32c
    except ImportError:  # pragma: no cover - a declared dependency; zlib's CRC32 would be a new format
        raise ImportError("jaxfeed checkpoints need google-crc32c") from None
    if not isinstance(body, bytes):
        body = bytes(body)
    return struct.pack("<I", google_crc32c.value(body))


def serialize(state) -> bytes:
    """The iterator state (as ``DatasetIterator.get_state`` returns it) as bytes."""
    w = _Writer()
    try:
        tree = w.encode(state, "state")
    except RecursionError:  # a caller deep in its own stack; MAX_DEPTH keeps ordinary saves clear of it
        raise InvalidArgumentError(f"Cannot serialise iterator state: it is nested too deeply (at most "
                                   f"{MAX_DEPTH} levels).", "checkpoint.serialize") from None
    meta = {"format": FORMAT_VERSION, "writer": "jaxfeed"}
    if isinstance(state, dict):
        meta.update({k: state[k] for k in ("version", "fingerprint") if k in state})
    header = json.dumps({"meta": meta, "tree": tree, "blobs": w.index}, separators=(",", ":")).encode()
    body = b"".join([_PREFIX.pack(MAGIC, FORMAT_VERSION, len(header), w.size), header] + w.blobs)
    return body + _checksum(body)


def deserialize(data) -> dict:
    """The state ``serialize`` wrote. Raises ``InvalidArgumentError`` for a file that is not an iterator
    state or has another format version, ``DataLossError`` for a truncated or corrupted one."""
    data = memoryview(bytes(data) if not isinstance(data, (bytes, bytearray, memoryview)) else data)
    op = "checkpoint.deserialize"
    if len(data) < len(MAGIC) or bytes(data[:len(MAGIC)]) != MAGIC:
        raise InvalidArgumentError("This is not a jaxfeed iterator state (bad magic bytes"
                                   f"{'; empty data' if not len(data) else ''}).", op)
    if len(data) < _PREFIX.size:
        raise DataLossError(f"Iterator state is truncated: {len(data)} bytes, shorter than its header.", op)
    _, version, header_len, blob_len = _PREFIX.unpack_from(data)
    if version != FORMAT_VERSION:
        raise InvalidArgumentError(f"Iterator state has file format version {version}; this jaxfeed reads "
                                   f"version {FORMAT_VERSION}.", op)
    total = _PREFIX.size + header_len + blob_len + _DIGEST
    if len(data) != total:
        kind = "truncated" if len(data) < total else "longer than it says"
        raise DataLossError(f"Iterator state is {kind}: {len(data)} bytes, expected {total}.", op)
    body, digest = data[:total - _DIGEST], bytes(data[total - _DIGEST:])
    if _checksum(body) != digest:
        raise DataLossError("Iterator state is corrupted: its checksum does not match its contents.", op)
    start = _PREFIX.size
    try:
        header = json.loads(bytes(data[start:start + header_len]))
    except RecursionError:
        raise DataLossError("Iterator state header is nested too deeply to be a state.", op) from None
    except ValueError as e:  # also bad UTF-8 and integers too long to parse
        raise DataLossError(f"Iterator state header is not valid JSON: {e}", op) from None
    if type(header) is not dict or type(header.get("meta")) is not dict or "tree" not in header:
        raise DataLossError("Iterator state header is not a state header (a JSON object with 'meta', 'tree' "
                            "and 'blobs').", op)
    blobs = data[start + header_len:start + header_len + blob_len]
    reader = Reader(blobs, blob_index(header.get("blobs"), blob_len), len(data))
    try:
        return reader.decode(header["tree"])
    except RecursionError:  # the depth bound keeps clear of this; a caller deep in its own stack may not
        raise DataLossError("Iterator state is nested too deeply to read here.", op) from None
