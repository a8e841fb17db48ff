"""The file format of ``cache(filename)``: ``<prefix>.data-00000-of-00001`` and ``<prefix>.index``.

No pickle: a cache file never runs code when read. Little-endian throughout.

Data file: one record per element, back to back. A record is ``u32 leaf count`` then per leaf (the
element's leaves in ``structure.flatten`` order) a ``u8`` kind and its payload:

- 0 array / 3 numpy scalar: ``u8 len`` + numpy ``dtype.str``, ``u8 ndim``, ``ndim x u64`` shape, raw C-order bytes;
- 1 ``bytes``: ``u64 len`` + the bytes;
- 2 object array of bytes: ``u8 ndim``, ``ndim x u64`` shape, then per item ``u64 len`` + bytes.

Index file: ``b"JFCACHE2"``, ``u64`` header length, a UTF-8 JSON header (``num_elements`` and the element
nest: ``null`` for a leaf, ``{"tuple": [...]}``, ``{"namedtuple": name, "fields": [...], "items": [...]}``,
``{"dict": [[key, nest], ...]}``), then ``num_elements + 1`` ``u64`` record offsets (the last is the data
size). The index is written last, after the data file is complete: its presence marks a finished cache.
While a writer runs, ``<prefix>_0.lockfile`` exists and the data goes to ``<prefix>_0.data.tmp``.
"""

from __future__ import annotations

import collections
import json
import math
import struct

import numpy as np

from .. import structure
from ..errors import AlreadyExistsError, DataLossError, NotFoundError
from ..filesystem import url_to_fs

# Version 2: leaves in ``structure.flatten`` order (tf.nest's, dict leaves by sorted key). Version 1 files
# listed dict leaves in insertion order; they are refused, not misread.
MAGIC = b"JFCACHE2"
_U8, _U32, _U64 = struct.Struct("<B"), struct.Struct("<I"), struct.Struct("<Q")
ARRAY, BYTES, STRINGS, SCALAR = 0, 1, 2, 3
WRITE_BUFFER = 1 << 20


def paths(prefix: str) -> dict[str, str]:
    return {"data": f"{prefix}.data-00000-of-00001", "index": f"{prefix}.index",
            "lock": f"{prefix}_0.lockfile", "tmp": f"{prefix}_0.data.tmp"}


# ---------------------------------------------------------------------------------------------- records
def encode(element) -> bytes:
    leaves = structure.flatten(element) if structure.is_nested(element) else (element,)
    parts = [_U32.pack(len(leaves))]
    for leaf in leaves:
        if isinstance(leaf, bytes):
            parts += [_U8.pack(BYTES), _U64.pack(len(leaf)), leaf]
        elif isinstance(leaf, np.ndarray) and leaf.dtype == object:
            parts += [_U8.pack(STRINGS), _shape(leaf.shape)]
            for item in leaf.reshape(-1).tolist():
                item = item.encode() if isinstance(item, str) else bytes(item)
                parts += [_U64.pack(len(item)), item]
        else:
            if not isinstance(leaf, (np.ndarray, np.generic)):
                leaf = np.asarray(leaf)
            kind = SCALAR if isinstance(leaf, np.generic) else ARRAY
            key = (kind, leaf.dtype, leaf.shape)
            head = _headers.get(key)
            if head is None:
                if len(_headers) > 4096:  # many distinct shapes (variable lengths): keep the memo small
                    _headers.clear()
                dt = leaf.dtype.str.encode()
                head = _headers[key] = _U8.pack(kind) + _U8.pack(len(dt)) + dt + _shape(leaf.shape)
            parts += [head, leaf.tobytes()]  # tobytes is C order whatever the strides
    return b"".join(parts)


_headers: dict = {}  # (kind, dtype, shape) -> the leaf's header bytes


def _shape(shape) -> bytes:
    return _U8.pack(len(shape)) + b"".join(_U64.pack(d) for d in shape)


def decode(buf, offset: int, nest):  # nest: the reader's template (``_template``)
    """The element whose record starts at ``offset`` of ``buf`` (a bytearray; arrays are views into it)."""
    (count,), offset = _U32.unpack_from(buf, offset), offset + 4
    leaves = []
    for _ in range(count):
        kind = buf[offset]
        offset += 1
        if kind == ARRAY or kind == SCALAR:
            n = buf[offset]
            dtype = _dtype(bytes(buf[offset + 1:offset + 1 + n]))
            shape, offset = _read_shape(buf, offset + 1 + n)
            count_items = math.prod(shape)
            arr = np.frombuffer(buf, dtype=dtype, count=count_items, offset=offset).reshape(shape)
            offset += count_items * dtype.itemsize
            leaves.append(arr[()] if kind == SCALAR else arr)
        elif kind == BYTES:
            (n,) = _U64.unpack_from(buf, offset)
            leaves.append(bytes(buf[offset + 8:offset + 8 + n]))
            offset += 8 + n
        elif kind == STRINGS:
            shape, offset = _read_shape(buf, offset)
            items = []
            for _ in range(math.prod(shape)):
                (n,) = _U64.unpack_from(buf, offset)
                items.append(bytes(buf[offset + 8:offset + 8 + n]))
                offset += 8 + n
            arr = np.empty(len(items), dtype=object)
            arr[:] = items
            leaves.append(arr.reshape(shape))
        else:
            raise DataLossError(f"cache file: unknown leaf kind {kind} at byte {offset - 1}", "Cache")
    if nest is None:
        return leaves[0]
    return _pack(nest, iter(leaves))


_dtypes: dict = {}
_shape_structs = [struct.Struct(f"<{i}Q") for i in range(33)]


def _dtype(code: bytes):
    dtype = _dtypes.get(code)
    if dtype is None:
        dtype = _dtypes[code] = np.dtype(code.decode())
    return dtype


def _read_shape(buf, offset):
    ndim = buf[offset]
    return _shape_structs[ndim].unpack_from(buf, offset + 1), offset + 1 + 8 * ndim


class _Layout:
    __slots__ = ("size", "header_cols", "leaves")

    def __init__(self, size, header_cols, leaves):
        self.size, self.header_cols, self.leaves = size, header_cols, leaves


def _uniform_layout(buf):
    """The layout of the first record in ``buf`` if every leaf is a fixed-size numeric array (or numpy
    scalar); 0-d arrays and strings are left to ``decode`` (a row of a block cannot be a 0-d array)."""
    (count,) = _U32.unpack_from(buf, 0)
    offset, header, leaves = 4, [range(0, 4)], []
    for _ in range(count):
        kind = buf[offset]
        if kind not in (ARRAY, SCALAR):
            return None
        n = buf[offset + 1]
        dtype = _dtype(bytes(buf[offset + 2:offset + 2 + n]))
        shape, data = _read_shape(buf, offset + 2 + n)
        if (kind == ARRAY and not shape) or (kind == SCALAR and shape) or dtype.hasobject:
            return None
        header.append(range(offset, data))
        leaves.append((dtype, shape, data))
        offset = data + math.prod(shape) * dtype.itemsize
    cols = np.fromiter((i for r in header for i in r), dtype=np.intp)
    return _Layout(offset, cols, leaves)


def _c_strides(shape, itemsize):
    strides, step = [], itemsize
    for d in reversed(shape):
        strides.append(step)
        step *= d
    return tuple(reversed(strides))


# ------------------------------------------------------------------------------------------------- nest
def describe_nest(element):
    if isinstance(element, tuple):
        items = [describe_nest(x) for x in element]
        if structure.is_namedtuple(element):
            return {"namedtuple": type(element).__name__, "fields": list(element._fields), "items": items}
        return {"tuple": items}
    if isinstance(element, dict):
        return {"dict": [[k, describe_nest(v)] for k, v in element.items()]}
    return None


_namedtuples: dict = {}


def _template(nest):
    """The element nest with ``None`` leaves, for ``structure.pack_as`` (which owns the leaf order)."""
    if nest is None:
        return None
    if "tuple" in nest:
        return tuple(_template(x) for x in nest["tuple"])
    if "dict" in nest:
        return {k: _template(v) for k, v in nest["dict"]}
    # namedtuples come back as a namedtuple class of the same name and fields (the user's class is not
    # recorded: reading a cache must not import or run code)
    key = (nest["namedtuple"], tuple(nest["fields"]))
    cls = _namedtuples.setdefault(key, collections.namedtuple(*key))
    return cls(*(_template(x) for x in nest["items"]))


def _pack(template, leaves):
    """An element from its leaves; ``template`` is ``_template(nest)``, built once per reader."""
    if template is None:
        return next(leaves)
    return structure.pack_as(template, list(leaves))


# ------------------------------------------------------------------------------------------ read/write
class CacheWriter:
    """Takes the lockfile, appends records to the temporary data file, publishes on ``finish``."""

    def __init__(self, prefix: str, label: str):
        self.fs, path = url_to_fs(prefix)
        self.paths = paths(path)
        self.label = label
        parent = self.fs._parent(path)
        if parent and not self.fs.isdir(parent):
            raise NotFoundError(f"{label}: Failed to create the cache lockfile {self.paths['lock']!r}: the directory "
                                f"{parent!r} does not exist.", "Cache")
        try:
            with self.fs.open(self.paths["lock"], "xb") as f:
                f.write(b"jaxfeed cache writer\n")
        except FileExistsError:
            raise AlreadyExistsError(
                f"{label}: There appears to be a concurrent caching iterator running - cache lockfile already exists "
                f"('{self.paths['lock']}'). If you are sure no other running computation is using this cache "
                "prefix, delete the lockfile and restart.", "Cache") from None
        self._file = self.fs.open(self.paths["tmp"], "wb")
        self._pending: list[bytes] = []
        self._pending_size = 0
        self.offsets = [0]
        self.nest = None

    def write(self, elements: list) -> None:
        if self.nest is None and elements:
            self.nest = describe_nest(elements[0])
        end = self.offsets[-1]
        for e in elements:
            record = encode(e)
            self._pending.append(record)
            end += len(record)
            self.offsets.append(end)
            self._pending_size += len(record)
        if self._pending_size >= WRITE_BUFFER:
            self._flush()

    def _flush(self):
        self._file.write(b"".join(self._pending))
        self._pending, self._pending_size = [], 0

    def finish(self) -> None:
        self._flush()
        self._file.close()
        self.fs.mv(self.paths["tmp"], self.paths["data"])
        header = json.dumps({"num_elements": len(self.offsets) - 1, "structure": self.nest}).encode()
        index = MAGIC + _U64.pack(len(header)) + header + np.asarray(self.offsets, dtype="<u8").tobytes()
        with self.fs.open(self.paths["tmp"], "wb") as f:
            f.write(index)
        self.fs.mv(self.paths["tmp"], self.paths["index"])
        self.fs.rm(self.paths["lock"])

    def abort(self) -> None:
        """Remove everything this writer made (a partial pass leaves no cache files)."""
        self._file.close()
        for p in (self.paths["tmp"], self.paths["lock"]):
            if self.fs.exists(p):
                self.fs.rm(p)


def finished(prefix: str) -> bool:
    fs, path = url_to_fs(prefix)
    return fs.exists(paths(path)["index"])


class CacheReader:
    """Reads a finished cache from element ``pos`` on, in blocks of whole records."""

    def __init__(self, prefix: str, label: str, pos: int = 0):
        self.fs, path = url_to_fs(prefix)
        self.paths = paths(path)
        self.label = label
        try:
            with self.fs.open(self.paths["index"], "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            raise NotFoundError(f"{label}: the cache index {self.paths['index']!r} is gone.", "Cache") from None
        if raw[:8] != MAGIC:
            older = raw[:7] == MAGIC[:7]
            raise DataLossError(f"{label}: {self.paths['index']!r} is " + (
                "a cache written by an older jaxfeed (another leaf order); delete it to record it again"
                if older else "not a jaxfeed cache index (byte 0)") + ".", "Cache")
        (n,) = _U64.unpack_from(raw, 8)
        header = json.loads(raw[16:16 + n])
        self.nest = header["structure"]
        self.template = _template(self.nest)
        self.length = header["num_elements"]
        self.offsets = np.frombuffer(raw, dtype="<u8", count=self.length + 1, offset=16 + n)
        self.pos = pos
        self._file = None

    def read(self, n: int) -> list:
        start, stop = self.pos, min(self.pos + n, self.length)
        if start >= stop:
            return []
        if self._file is None:
            try:
                self._file = self.fs.open(self.paths["data"], "rb")
            except FileNotFoundError:
                raise NotFoundError(f"{self.label}: the cache data file {self.paths['data']!r} is gone.",
                                    "Cache") from None
        base = int(self.offsets[start])
        self._file.seek(base)
        size = int(self.offsets[stop]) - base
        buf = bytearray(self._file.read(size))
        if len(buf) != size:
            raise DataLossError(f"{self.label}: cache data file {self.paths['data']!r} is truncated: expected "
                                f"{size} bytes at offset {base}, got {len(buf)}.", "Cache")
        self.pos = stop
        rows = self._decode_uniform(buf, stop - start)
        if rows is not None:
            return rows
        return [decode(buf, int(o) - base, self.template) for o in self.offsets[start:stop]]

    def _decode_uniform(self, buf, n: int):
        """All ``n`` records at once when they share one layout (same dtypes and shapes, no strings): each
        component becomes one strided view over the block, and the elements are its rows. None otherwise."""
        layout = _uniform_layout(buf)
        if layout is None or len(buf) != n * layout.size:
            return None
        block = np.frombuffer(buf, dtype=np.uint8).reshape(n, layout.size)
        if not (block[:, layout.header_cols] == block[0, layout.header_cols]).all():
            return None
        leaves = [np.ndarray((n,) + shape, dtype=dtype, buffer=buf, offset=offset,
                             strides=(layout.size,) + _c_strides(shape, dtype.itemsize))
                  for dtype, shape, offset in layout.leaves]
        if self.nest is None:
            return list(leaves[0])
        return [_pack(self.template, iter([leaf[i] for leaf in leaves])) for i in range(n)]

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
