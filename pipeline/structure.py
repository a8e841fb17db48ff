"""Nested element structures and their specs.

An element is a nest of tuples (namedtuples stay namedtuples), dicts (key order as the user gave it) and
leaves. Leaves are numpy arrays or numpy scalars; strings are ``bytes`` (object arrays of bytes when
batched), as ``tf.data``'s ``as_numpy_iterator`` returns them.

Value conversion follows TensorFlow so ported pipelines keep their dtypes (a documented choice, see
README "Differences from tf.data"): Python ``int`` becomes int32 when it fits (else int64), ``float``
becomes float32, ``bool`` bool, ``str``/``bytes`` bytes; numpy values keep their dtype. A Python list in
*input data* is one array, not a structure; a list *returned by a user function* becomes a tuple.
"""

from __future__ import annotations

import numbers
import operator
from typing import Any, Callable, Iterable, Sequence

import numpy as np

STRING = np.dtype(object)  # dtype of string leaves: Python ``bytes`` in object arrays
_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1


# ----------------------------------------------------------------------------------------------- specs
class TensorSpec:
    """Static description of a leaf: ``shape`` (``None`` entries are unknown dims; ``shape=None`` is an
    unknown rank) and a numpy ``dtype`` (``STRING`` for bytes)."""

    __slots__ = ("shape", "dtype", "name")

    def __init__(self, shape, dtype, name: str | None = None):
        self.shape = None if shape is None else tuple(None if d is None else int(d) for d in shape)
        self.dtype = np.dtype(dtype)
        self.name = name

    @property
    def rank(self):
        return None if self.shape is None else len(self.shape)

    def is_compatible_with(self, value) -> bool:
        arr = value if isinstance(value, (np.ndarray, np.generic)) else np.asarray(value)
        if not dtypes_compatible(self.dtype, arr.dtype):
            return False
        return shape_compatible(self.shape, arr.shape)

    def most_specific_compatible(self, other: "TensorSpec") -> "TensorSpec":
        if self.shape is None or other.shape is None or len(self.shape) != len(other.shape):
            shape = None
        else:
            shape = tuple(a if a == b else None for a, b in zip(self.shape, other.shape))
        return TensorSpec(shape, self.dtype)

    def with_leading(self, dim) -> "TensorSpec":
        """The spec of a batch of such leaves (``dim`` is the batch size, or ``None``)."""
        return TensorSpec(None if self.shape is None else (dim,) + self.shape, self.dtype)

    def unbatched(self) -> "TensorSpec":
        return TensorSpec(None if self.shape is None else self.shape[1:], self.dtype)

    def __eq__(self, other):
        return isinstance(other, TensorSpec) and self.shape == other.shape and self.dtype == other.dtype

    def __hash__(self):
        return hash((self.shape, self.dtype))

    def __repr__(self):
        shape = "<unknown>" if self.shape is None else self.shape
        return f"TensorSpec(shape={shape}, dtype={dtype_name(self.dtype)})"


class DatasetSpec:
    """Spec of a leaf that is itself a Dataset (the windows of ``window``)."""

    __slots__ = ("element_spec",)

    def __init__(self, element_spec):
        self.element_spec = element_spec

    def __eq__(self, other):
        return isinstance(other, DatasetSpec) and other.element_spec == self.element_spec

    def __hash__(self):
        return hash(repr(self))

    def __repr__(self):
        return f"DatasetSpec({self.element_spec!r})"


def dtype_name(dtype) -> str:
    return "string" if np.dtype(dtype) == STRING else np.dtype(dtype).name


def dtypes_compatible(a, b) -> bool:
    a, b = np.dtype(a), np.dtype(b)
    if a == b:
        return True
    # bytes may arrive as fixed-width numpy strings; they are strings all the same
    return a == STRING and b.kind in "SUO"


def shape_compatible(spec_shape, shape) -> bool:
    if spec_shape is None:
        return True
    if len(spec_shape) != len(shape):
        return False
    return all(s is None or s == d for s, d in zip(spec_shape, shape))


# ------------------------------------------------------------------------------------------------- nest
def is_namedtuple(x) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


def is_nested(x) -> bool:
    return isinstance(x, (tuple, dict))


def flatten(structure) -> list:
    """Leaves in a fixed order: tuple positions, then dict insertion order."""
    out: list = []
    _flatten_into(structure, out)
    return out


def _flatten_into(s, out):
    if isinstance(s, tuple):
        for x in s:
            _flatten_into(x, out)
    elif isinstance(s, dict):
        for x in s.values():
            _flatten_into(x, out)
    else:
        out.append(s)


def pack_as(structure, leaves: Sequence):
    """Rebuild ``structure``'s nest with ``leaves`` (as produced by ``flatten``)."""
    it = iter(leaves)
    result = _pack(structure, it)
    return result


def _pack(s, it):
    if isinstance(s, tuple):
        items = [_pack(x, it) for x in s]
        return type(s)(*items) if is_namedtuple(s) else tuple(items)
    if isinstance(s, dict):
        return {k: _pack(v, it) for k, v in s.items()}
    return next(it)


def map_structure(fn: Callable, structure, *others):
    """Apply ``fn`` leaf by leaf over one or more structures of the same nest."""
    if others:
        for o in others:
            assert_same_structure(structure, o)
        leaves = [flatten(s) for s in (structure,) + others]
        return pack_as(structure, [fn(*xs) for xs in zip(*leaves)])
    return pack_as(structure, [fn(x) for x in flatten(structure)])


def same_structure(a, b) -> bool:
    if isinstance(a, tuple):
        return (isinstance(b, tuple) and len(a) == len(b) and is_namedtuple(a) == is_namedtuple(b)
                and all(same_structure(x, y) for x, y in zip(a, b)))
    if isinstance(a, dict):
        return isinstance(b, dict) and set(a) == set(b) and all(same_structure(a[k], b[k]) for k in a)
    return not is_nested(b)


def assert_same_structure(a, b, what: str = "structures"):
    if not same_structure(a, b):
        raise TypeError(f"The two {what} don't have the same nested structure: {describe(a)} vs {describe(b)}")


def describe(structure) -> str:
    """A short nest sketch for messages: ``(., {'a': .})``."""
    if isinstance(structure, tuple):
        inner = ", ".join(describe(x) for x in structure)
        return f"{type(structure).__name__}({inner})" if is_namedtuple(structure) else f"({inner})"
    if isinstance(structure, dict):
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in structure.items()) + "}"
    return "."


# ------------------------------------------------------------------------------------------ conversion
def to_array(value, what: str = "value") -> np.ndarray | np.generic:
    """Convert one leaf the way TensorFlow converts Python values (see the module docstring)."""
    if isinstance(value, (np.ndarray, np.generic)):
        if value.dtype.kind in "SU":
            return _strings_to_object(value)
        return value
    if isinstance(value, bool):
        return np.bool_(value)
    if isinstance(value, numbers.Integral):
        v = int(value)
        return np.int32(v) if _INT32_MIN <= v <= _INT32_MAX else np.int64(v)
    if isinstance(value, numbers.Real):
        return np.float32(value)
    if isinstance(value, (bytes, str)):
        return value.encode() if isinstance(value, str) else value
    if isinstance(value, (list,)) or (hasattr(value, "__array__") and not isinstance(value, (tuple, dict))):
        return _list_to_array(value, what)
    if value is None:
        raise ValueError(f"Cannot convert None {what} to an array.")
    raise TypeError(f"Cannot convert {what} of type {type(value).__name__} to an array: {value!r:.80}")


def _strings_to_object(arr):
    out = np.empty(arr.shape, dtype=object)
    flat = arr.reshape(-1)
    out.reshape(-1)[:] = [s.encode() if isinstance(s, str) else bytes(s) for s in flat.tolist()]
    return out if arr.ndim else out[()]


def _list_to_array(value, what):
    if not isinstance(value, list):
        arr = np.asarray(value)
        return _strings_to_object(arr) if arr.dtype.kind in "SU" else arr
    types = set(map(type, value))
    if types == {str} or types == {bytes}:  # a flat list of strings (text lines, file names): in C loops
        out = np.empty(len(value), dtype=object)
        out[:] = list(map(str.encode, value)) if str in types else value
        return out
    leaves = list(_iter_list_leaves(value))
    kinds = {_leaf_kind(x) for x in leaves}
    if "str" in kinds and len(kinds) > 1:
        raise ValueError(f"Can't convert {what}: a Python list mixes strings and numbers.")
    if "str" in kinds:
        dtype = STRING
    elif "float" in kinds:
        dtype = np.float32
    elif "int" in kinds:
        ints = [int(x) for x in leaves if _leaf_kind(x) == "int"]
        fits = all(_INT32_MIN <= v <= _INT32_MAX for v in ints)
        dtype = np.int32 if fits else np.int64
    elif "bool" in kinds:
        dtype = np.bool_
    elif "numpy" in kinds:
        dtype = None
    else:
        dtype = np.float32  # an empty list, as TF makes it
    try:
        if dtype is STRING:
            arr = np.array(value, dtype=object)
            if arr.dtype != object or any(isinstance(x, list) for x in arr.reshape(-1)):
                raise ValueError
            flat = arr.reshape(-1)
            flat[:] = [s.encode() if isinstance(s, str) else s for s in flat]
            return arr
        return np.array(value, dtype=dtype)
    except ValueError:
        raise ValueError(f"Can't convert non-rectangular Python sequence to an array ({what}).") from None


def _iter_list_leaves(value):
    for x in value:
        if isinstance(x, list):
            yield from _iter_list_leaves(x)
        else:
            yield x


def _leaf_kind(x):
    if isinstance(x, bool) or isinstance(x, np.bool_):
        return "bool"
    if isinstance(x, (str, bytes)):
        return "str"
    if isinstance(x, (np.ndarray, np.generic)):
        return "numpy"
    if isinstance(x, numbers.Integral):
        return "int"
    if isinstance(x, numbers.Real):
        return "float"
    return "other"


_FAST_LEAF_TYPES = (np.ndarray, np.generic, bytes)


def normalize(value, what: str = "element"):
    """Convert a structure a user produced into an element: lists become tuples (TF's rule for function
    results), leaves become numpy values."""
    if isinstance(value, _FAST_LEAF_TYPES):
        return value
    if isinstance(value, tuple):
        items = [normalize(x, what) for x in value]
        return type(value)(*items) if is_namedtuple(value) else tuple(items)
    if isinstance(value, list):
        return tuple(normalize(x, what) for x in value)
    if isinstance(value, dict):
        return {k: normalize(v, what) for k, v in value.items()}
    if value is None:
        raise InvalidArgumentErrorLazy(f"{what} is None; a function must return a value (not None).")
    return to_array(value, what)


def normalize_data(value, what: str = "input data"):
    """Convert *input data* (from_tensors/from_tensor_slices): a Python list is one array, not a nest."""
    if isinstance(value, tuple):
        items = [normalize_data(x, what) for x in value]
        return type(value)(*items) if is_namedtuple(value) else tuple(items)
    if isinstance(value, dict):
        return {k: normalize_data(v, what) for k, v in value.items()}
    if value is None:
        raise ValueError(f"Cannot convert None {what} to an array.")
    if _is_dataset(value):
        return value
    arr = to_array(value, what)
    return arr


def _is_dataset(value):
    return type(value).__name__ == "Dataset" or hasattr(value, "_node")


def InvalidArgumentErrorLazy(message):  # noqa: N802 - a constructor, deferred to avoid an import cycle
    from .errors import InvalidArgumentError

    return InvalidArgumentError(message)


def spec_of(value) -> Any:
    """The spec structure of one element."""
    return map_structure(_leaf_spec, value)


def _leaf_spec(leaf):
    if _is_dataset(leaf):
        return DatasetSpec(leaf.element_spec)
    arr = leaf if isinstance(leaf, (np.ndarray, np.generic)) else to_array(leaf)
    if isinstance(arr, bytes):
        return TensorSpec((), STRING)
    return TensorSpec(arr.shape, arr.dtype)


def leaf_specs(spec) -> list:
    return flatten(spec)


def stack(elements: Sequence, spec=None, what: str = "batch"):
    """Stack elements (same nest) on a new leading dimension, leaf by leaf, into fresh arrays."""
    first = elements[0]
    if not is_nested(first):
        return _stack_leaf(elements, 0, what)
    for i, e in enumerate(elements):
        if not same_structure(first, e):
            from .errors import InvalidArgumentError

            raise InvalidArgumentError(f"Cannot add element {i} to the {what}: its structure {describe(e)} "
                                       f"differs from the first element's {describe(first)}.")
    columns = zip(*(flatten(e) for e in elements))
    return pack_as(first, [_stack_leaf(col, i, what) for i, col in enumerate(columns)])


def _stack_leaf(values, leaf_index, what):
    v0 = values[0]
    if type(v0) is bytes and operator.countOf(map(type, values), bytes) == len(values):
        # scalar strings (records, lines): fromiter skips the shape discovery that ``out[:] = values`` runs
        # over the list (~25% of a batch of 1 KiB records)
        return np.fromiter(values, dtype=object, count=len(values))
    if isinstance(v0, bytes) or (isinstance(v0, np.ndarray) and v0.dtype == object):
        out = np.empty((len(values),) + np.shape(v0), dtype=object)
        shape0 = np.shape(v0)
        for i, v in enumerate(values):
            if np.shape(v) != shape0:  # assigning would broadcast (1,) into (3,) silently
                break
            out[i] = v
        else:
            return out
    try:
        if isinstance(v0, bytes) or (isinstance(v0, np.ndarray) and v0.dtype == object):
            raise ValueError("shapes differ")
        return np.stack(values) if isinstance(v0, np.ndarray) else np.array(values)
    except ValueError:
        shapes = [np.shape(v) for v in values]
        bad = next(i for i, s in enumerate(shapes) if s != shapes[0])
        from .errors import InvalidArgumentError

        raise InvalidArgumentError(
            f"Cannot add tensor to the {what}: number of elements does not match. Shapes are: "
            f"[tensor]: {list(shapes[bad])}, [batch]: {list(shapes[0])} (element {bad} of the batch, "
            f"leaf {leaf_index})") from None


def unstack_rows(batched, n: int) -> list:
    """Split a batched structure into its ``n`` rows (views, not copies)."""
    if not is_nested(batched):
        return list(batched[:n]) if isinstance(batched, np.ndarray) else [batched[i] for i in range(n)]
    leaves = flatten(batched)
    return [pack_as(batched, [leaf[i] for leaf in leaves]) for i in range(n)]


def batched_len(batched) -> int:
    leaves = flatten(batched)
    return len(leaves[0]) if leaves else 0


def iter_structure_paths(structure, prefix: str = "") -> Iterable[tuple[str, Any]]:
    """(path, leaf) pairs, paths like ``[0]['image']``, for messages and fingerprints."""
    if isinstance(structure, tuple):
        for i, x in enumerate(structure):
            yield from iter_structure_paths(x, f"{prefix}[{i}]")
    elif isinstance(structure, dict):
        for k, x in structure.items():
            yield from iter_structure_paths(x, f"{prefix}[{k!r}]")
    else:
        yield prefix or "<element>", structure
