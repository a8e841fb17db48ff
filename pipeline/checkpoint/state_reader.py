"""Reading the header tree of a state file (``format.deserialize``) back into Python values.

A state file is input from outside: a valid CRC says only that the bytes are the ones written, not that a
jaxfeed wrote them. Every field is checked before it is used -- its type, its range, the nesting depth --
so that a crafted or damaged file raises ``DataLossError`` (or ``InvalidArgumentError`` for a value tag
this jaxfeed does not know), never a ``KeyError``, ``TypeError``, ``RecursionError`` or an allocation the
file's size does not pay for. Nothing is imported or pickled: reading a state runs no code.
"""

from __future__ import annotations

import collections
import keyword
import sys

import numpy as np

from .. import structure
from ..errors import DataLossError, InvalidArgumentError, OpError, UnknownError
from ..engine.blocks import Failure

OP = "checkpoint.deserialize"
TAG = "$t"
# Deepest nesting of values a state may hold (the writer refuses deeper ones at save). Real pipelines stay
# far below it; the bound keeps the recursive reader and ``json`` clear of Python's recursion limit.
MAX_DEPTH = 200
_MAX_NDIM = 64  # numpy's limit
_ARRAY_KINDS = "biufcmMSUV"
_JSON_SCALARS = (type(None), bool, int, float, str)


def corrupt(what: str) -> DataLossError:
    return DataLossError(f"Iterator state is corrupted: {what}.", OP)


def _int(v, what: str, low: int = 0, high: int | None = None) -> int:
    if type(v) is not int or v < low or (high is not None and v > high):
        bound = f" in [{low}, {high}]" if high is not None else f" >= {low}"
        raise corrupt(f"{what} is {v!r:.60}, expected an integer{bound}")
    return v


def _typed(v, t, what: str):
    if type(v) is not t:
        raise corrupt(f"{what} is a {type(v).__name__}, expected a {t.__name__}")
    return v


def _field(v: dict, key: str, t, what: str):
    if key not in v:
        raise corrupt(f"{what} has no {key!r} entry")
    return _typed(v[key], t, f"{what}'s {key!r}")


def blob_index(index, blob_len: int) -> list:
    """The header's ``blobs`` table, each entry ``[offset, length]`` inside the blob section."""
    _typed(index, list, "the blob table")
    for i, entry in enumerate(index):
        if type(entry) is not list or len(entry) != 2:
            raise corrupt(f"blob table entry {i} is {entry!r:.60}, expected [offset, length]")
        off = _int(entry[0], f"blob {i}'s offset")
        n = _int(entry[1], f"blob {i}'s length")
        if off + n > blob_len:
            raise DataLossError(f"Iterator state blob {i} ({n} bytes at {off}) lies outside the file.", OP)
    return index


class Reader:
    def __init__(self, blobs: memoryview, index: list, file_size: int):
        self.blobs = blobs
        self.index = index
        # Lists built from a count alone (stacked rows whose leaves hold no bytes) may not be longer than
        # this: memory stays proportional to the file's size.
        self.max_rows = 1024 + 64 * file_size

    def blob(self, i) -> bytes:
        return bytes(self._view(i))

    def _view(self, i) -> memoryview:
        if type(i) is not int or not 0 <= i < len(self.index):
            raise DataLossError(f"Iterator state refers to blob {i!r:.60}, which the file does not hold.", OP)
        off, n = self.index[i]
        return self.blobs[off:off + n]

    def decode(self, v, depth: int = 0):
        t = type(v)
        if t is list:
            if all(type(x) in _JSON_SCALARS for x in v):
                return v
            if depth >= MAX_DEPTH:
                raise corrupt(f"values are nested deeper than {MAX_DEPTH} levels")
            return [self.decode(x, depth + 1) for x in v]
        if t is not dict:
            return v
        if depth >= MAX_DEPTH:
            raise corrupt(f"values are nested deeper than {MAX_DEPTH} levels")
        if TAG not in v:
            return {k: self.decode(x, depth + 1) for k, x in v.items()}
        tag = v[TAG]
        decode = _DECODERS.get(tag) if type(tag) is str else None
        if decode is None:
            if type(tag) is str:
                raise InvalidArgumentError(f"Iterator state holds an unknown value tag {tag!r:.60}; it was "
                                           "written by a newer jaxfeed.", OP)
            raise corrupt(f"a value tag is {tag!r:.60}, expected a string")
        return decode(self, v, depth + 1)

    # ------------------------------------------------------------------ tagged values
    def _dict(self, v, depth):
        out = {}
        for item in _field(v, "items", list, "a dict"):
            if type(item) is not list or len(item) != 2:
                raise corrupt(f"a dict item is {item!r:.60}, expected [key, value]")
            key = self.decode(item[0], depth)
            if type(key) is list:
                key = tuple(key)
            try:
                hash(key)
            except TypeError:
                raise corrupt(f"a dict key is {key!r:.60}, which cannot be a key") from None
            out[key] = self.decode(item[1], depth)
        return out

    def _tuple(self, v, depth):
        return tuple(self.decode(x, depth) for x in _field(v, "v", list, "a tuple"))

    def _namedtuple(self, v, depth):
        module = _field(v, "module", str, "a namedtuple")
        name = _field(v, "name", str, "a namedtuple")
        fields = _field(v, "fields", list, "a namedtuple")
        values = _field(v, "v", list, "a namedtuple")
        if len(fields) != len(values) or not all(type(f) is str and f.isidentifier() and not keyword.iskeyword(f)
                                                 and not f.startswith("_") for f in fields) \
                or len(set(fields)) != len(fields):
            raise corrupt(f"namedtuple {name:.60} has fields {fields!r:.80} for {len(values)} values")
        cls = namedtuple_class(module, name, fields)
        return cls(*[self.decode(x, depth) for x in values])

    def _array(self, v, depth=0):
        data = self._view(v.get("b"))
        dtype, shape = array_layout(v)
        expected = dtype.itemsize
        for d in shape:
            expected *= d
        if len(data) != expected:
            raise DataLossError(f"Iterator state array of shape {shape} and dtype {dtype} has {len(data)} bytes, "
                                f"expected {expected}.", OP)
        return np.frombuffer(data, dtype=dtype).reshape(shape).copy()

    def _scalar(self, v, depth):
        if v.get("shape") != []:
            raise corrupt(f"a numpy scalar has shape {v.get('shape')!r:.60}")
        return self._array(v)[()]

    def _objarray(self, v, depth):
        shape = _shape(v.get("shape"))
        items = _field(v, "v", list, "an object array")
        size = 1
        for d in shape:
            size *= d
        if size != len(items):
            raise corrupt(f"an object array of shape {shape} holds {len(items)} values")
        out = np.empty(len(items), dtype=object)
        out[:] = [self.decode(x, depth) for x in items]
        return out.reshape(shape)

    def _bytes(self, v, depth):
        return self.blob(v.get("b"))

    def _stacked(self, v, depth):
        n = _int(v.get("n"), "a stacked list's length", 0, self.max_rows)
        leaves = _field(v, "leaves", list, "a stacked list")
        scalar = _field(v, "scalar", list, "a stacked list")
        if len(scalar) != len(leaves) or not all(type(s) is bool for s in scalar):
            raise corrupt("a stacked list's scalar flags do not match its leaves")
        template = self.decode(v.get("template"), depth)
        columns = []
        for leaf in leaves:
            if type(leaf) is not dict or leaf.get(TAG) != "array":
                raise corrupt(f"a stacked list's leaf is {leaf!r:.60}, expected an array")
            col = self._array(leaf)
            if col.ndim < 1 or col.shape[0] != n:
                raise corrupt(f"a stacked list of {n} rows has a leaf of shape {col.shape}")
            columns.append(col)
        try:
            n_leaves = len(structure.flatten(template))
        except (TypeError, ValueError) as e:  # e.g. dict keys that cannot be ordered
            raise corrupt(f"a stacked list's template is not a structure ({e})") from None
        if n_leaves != len(columns):
            raise corrupt(f"a stacked list's template has {n_leaves} leaves for {len(columns)} arrays")
        # states written before jaxfeed followed tf.nest have no "order" and list dict values in insertion order
        pack = structure.pack_as if v.get("order") == "sorted" else structure.pack_as_inserted
        out = []
        for i in range(n):
            # rows of a private stacked array: views, not copies
            out.append(pack(template, [col[i] if sc else col[i, ...] for col, sc in zip(columns, scalar)]))
        return out

    def _byteslist(self, v, depth):
        data = self.blob(v.get("b"))
        lengths = _field(v, "lengths", list, "a list of byte strings")
        if not all(type(n) is int and n >= 0 for n in lengths) or sum(lengths) != len(data):
            raise DataLossError("Iterator state list of byte strings does not match its lengths.", OP)
        out, start = [], 0
        for n in lengths:
            out.append(data[start:start + n])
            start += n
        return out

    def _failure(self, v, depth):
        for key in ("module", "name", "message"):
            _field(v, key, str, "a saved error")
        notes = v.get("notes", [])
        if type(notes) is not list or not all(type(x) is str for x in notes):
            raise corrupt(f"a saved error's notes are {notes!r:.60}")
        return Failure(rebuild_error(v))

    def _dataset(self, v, depth):
        kind = _field(v, "kind", str, "a dataset element")
        data = self.decode(v.get("data"), depth)
        try:
            return rebuild_dataset(kind, data)
        except OpError:
            raise
        except (TypeError, ValueError, IndexError, KeyError) as e:
            raise corrupt(f"a saved {kind:.40} dataset cannot be rebuilt ({type(e).__name__}: {e})") from None


_DECODERS = {"dict": Reader._dict, "tuple": Reader._tuple, "namedtuple": Reader._namedtuple,
             "array": Reader._array, "scalar": Reader._scalar, "objarray": Reader._objarray,
             "bytes": Reader._bytes, "stacked": Reader._stacked, "byteslist": Reader._byteslist,
             "failure": Reader._failure, "dataset": Reader._dataset}


def _shape(shape) -> tuple:
    if type(shape) is not list or len(shape) > _MAX_NDIM:
        raise corrupt(f"an array shape is {shape!r:.60}")
    return tuple(_int(d, "an array dimension", 0, 2 ** 62) for d in shape)


def array_layout(v: dict) -> tuple:
    """(dtype, shape) of a saved array: only the plain dtypes the writer writes (never ``object``)."""
    name = v.get("dtype")
    if type(name) is not str or len(name) > 32:
        raise corrupt(f"an array dtype is {name!r:.60}")
    try:
        dtype = np.dtype(name)
    except (TypeError, ValueError, SyntaxError):
        raise corrupt(f"an array dtype is {name!r:.60}, which numpy does not know") from None
    if dtype.kind not in _ARRAY_KINDS or dtype.fields is not None or dtype.subdtype is not None \
            or dtype.itemsize == 0:
        raise corrupt(f"an array has dtype {dtype}, which a state never holds")
    return dtype, _shape(v.get("shape"))


def rebuild_dataset(kind: str, data):
    from ..nodes.dataset_class import wrap
    from ..nodes.tensor_slices import Tensors, TensorSlices

    if kind == "TensorSlices":
        return wrap(TensorSlices(data))
    if kind == "Tensors":
        return wrap(Tensors(data))
    if kind == "Elements":
        from ..nodes.elements import Elements

        if type(data) is not list:
            raise corrupt("a saved Elements dataset does not hold a list")
        return wrap(Elements(data))
    raise InvalidArgumentError(f"Iterator state holds a dataset of unknown kind {kind!r:.60}.", OP)


def namedtuple_class(module: str, name: str, fields):
    """The saved namedtuple class if its module is already imported (nothing is imported: reading a state
    runs no code; attributes are read from ``vars``, so no module ``__getattr__`` or property runs), else a
    plain ``collections.namedtuple`` with the same name and fields."""
    obj = sys.modules.get(module)
    for part in name.split("."):
        try:
            obj = vars(obj).get(part) if obj is not None else None
        except TypeError:  # no __dict__
            obj = None
    if isinstance(obj, type) and issubclass(obj, tuple) and tuple(getattr(obj, "_fields", ())) == tuple(fields):
        return obj
    safe = "".join(c if c.isalnum() or c == "_" else "_" for c in name.split(".")[-1])
    if not safe.isidentifier() or keyword.iskeyword(safe):
        safe = "State"
    return collections.namedtuple(safe, fields)


def rebuild_error(v) -> BaseException:
    """The saved failure as an exception of the same class when that class is a jaxfeed error or a Python
    built-in; any other class becomes ``UnknownError`` carrying the original type name and message."""
    from .. import errors as jerrors
    import builtins

    module, name, message = v.get("module"), v.get("name"), v.get("message", "")
    cls = None
    if module == jerrors.__name__ or module == "jaxfeed.pipeline.errors":
        cls = vars(jerrors).get(name)
    elif module == "builtins":
        cls = vars(builtins).get(name)
    elif isinstance(module, str) and module.startswith("jaxfeed.") and module in sys.modules:
        # a jaxfeed error defined beside its use (nodes/signature.py's SignatureMismatch): an OpError class of
        # a jaxfeed module already loaded -- reading a state imports nothing
        found = vars(sys.modules[module]).get(name)
        cls = found if isinstance(found, type) and issubclass(found, OpError) else None
    exc = None
    if isinstance(cls, type) and issubclass(cls, Exception):
        try:
            exc = cls(message)
        except Exception:  # noqa: BLE001 - a constructor with other arguments
            exc = None
    if exc is None:
        exc = UnknownError(f"{module}.{name}: {message}", "restored state")
    for note in v.get("notes", ()):
        jerrors.add_note(exc, note)
    return exc
