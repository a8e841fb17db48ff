"""``from_generator``'s check and conversion of yielded values to the declared signature.

Two ways, built once per iterator from the signature:

- ``converter``: one value at a time (a closure per structure level, one cast check per leaf). It is the
  definition: what it returns, and every error it raises, is what the user gets.
- ``block_converter``: a whole block of values at once, structure level by structure level: one type check
  per block and level (``operator.countOf`` over the values' types, in C), then each leaf's column converted
  in one numpy call (Python ints to int32 in one ``np.array``, str to bytes in one ``map``) and the
  elements rebuilt in one comprehension. It returns exactly what ``converter`` would return for each value,
  or None when a block is not of the common shapes it knows (mixed types, arrays to cast, a value that
  does not fit): then the block goes value by value through ``converter``, which also raises the error in
  its place. So the fast way never decides what is accepted; it only skips the per-value walk when every
  value of the block is plainly fine.

Per value, the block way costs a few C-level passes and the rebuild of the element (a new tuple or dict, as
``converter`` makes: the yielded object is never handed out, so a generator reusing one dict stays safe).
"""

from __future__ import annotations

import operator

import numpy as np

from .. import c_extensions, structure
from ..engine.blocks import snapshot_py
from ..errors import InvalidArgumentError


class Mismatch(Exception):
    """A yielded value whose structure is not the signature's (reported with the whole element)."""


# ------------------------------------------------------------------------------------------ value by value
def converter(spec, label: str):
    """``value -> element`` for one signature level; raises Mismatch or InvalidArgumentError."""
    if isinstance(spec, tuple):
        parts = [converter(s, label) for s in spec]
        make = type(spec)._make if structure.is_namedtuple(spec) else tuple

        def convert_tuple(value):
            if not isinstance(value, tuple) or len(value) != len(parts):
                raise Mismatch
            return make([c(v) for c, v in zip(parts, value)])

        return convert_tuple
    if isinstance(spec, dict):
        parts = {k: converter(s, label) for k, s in spec.items()}

        def convert_dict(value):
            if not isinstance(value, dict) or value.keys() != parts.keys():
                raise Mismatch
            return {k: c(value[k]) for k, c in parts.items()}

        return convert_dict
    return _leaf_converter(spec, label)


def _scalar_type(spec):
    """The numpy scalar type a scalar numeric leaf's values become (None for strings and shaped leaves)."""
    return spec.dtype.type if spec.shape in ((), None) and spec.dtype != structure.STRING else None


def _leaf_converter(spec, label):
    dtype, shape = spec.dtype, spec.shape
    scalar_type = _scalar_type(spec)

    def check_shape(arr):
        if shape is not None and not structure.shape_compatible(shape, np.shape(arr)):
            raise InvalidArgumentError(f"{label}: `generator` yielded an element of shape {np.shape(arr)} where "
                                       f"an element of shape {shape} was expected.", label)
        return arr

    int_scalar = scalar_type is not None and dtype.kind in "iu"

    def convert(value):
        if type(value) is scalar_type:  # the common case: already right
            return value
        if int_scalar and type(value) is int:  # a Python int: numpy refuses what does not fit
            try:
                return scalar_type(value)
            except OverflowError:
                raise InvalidArgumentError(f"{label}: `generator` yielded a value that {dtype} cannot hold "
                                           f"without loss: {value!r:.60}", label) from None
        if isinstance(value, dict):
            raise Mismatch
        if dtype == structure.STRING:
            if isinstance(value, str):
                value = value.encode()
            if isinstance(value, bytes):
                return check_shape(value if type(value) is bytes else bytes(value))  # np.bytes_ too
            arr = np.asarray(value)
            if arr.dtype.kind not in "SUO":
                raise InvalidArgumentError(f"{label}: `generator` yielded {arr.dtype} data where strings were "
                                           "expected.", label)
            return check_shape(structure.to_array(arr))  # str items (U or object arrays) become bytes
        arr = np.asarray(value)
        if arr.dtype != dtype:
            arr = cast(arr, dtype, value, label)
        check_shape(arr)
        return arr[()] if arr.ndim == 0 else arr

    return convert


def cast(arr, dtype, value, label):
    """``arr`` as ``dtype``, refusing any cast that changes a value (tf.data casts silently). Every check is
    element-wise, so a whole column passes exactly when each of its values would."""
    src = arr.dtype
    if src.kind not in "biuf" or dtype.kind not in "biufc" or (dtype.kind == "b" and src.kind != "b"):
        raise InvalidArgumentError(f"{label}: `generator` yielded {src} data where {dtype} was expected: "
                                   f"{value!r:.60}", label)
    if src.kind == "f" and dtype.kind == "f" and arr.size:
        # the common narrowing (Python floats to float32): when no magnitude exceeds the target's largest,
        # nothing can overflow -- the check below would pass -- and the cast needs no errstate (a few us)
        if np.abs(arr).max() <= np.finfo(dtype).max:
            return arr.astype(dtype)
    with np.errstate(all="ignore"):
        out = arr.astype(dtype)
        if dtype.kind in "iu":
            exact = bool(np.all(np.isfinite(arr))) and np.array_equal(out, arr)
        elif dtype.kind == "f":
            exact = not np.any(np.isinf(out) & ~np.isinf(arr))  # rounding is fine, overflow is not
        else:
            exact = True
    if not exact:
        raise InvalidArgumentError(f"{label}: `generator` yielded a value that {dtype} cannot hold without loss: "
                                   f"{value!r:.60}", label)
    return out


# ------------------------------------------------------------------------------------------ a block at once
def block_converter(spec, label: str):
    """``values -> elements`` for a whole block (a list), equal to ``[converter(spec)(v) for v in values]``
    whenever it returns a list; None when the block needs the value-by-value way. It may raise anything for
    a block it cannot take (the caller then goes value by value); it never has side effects.

    Every block and column function here takes ``homogeneous=True`` from a caller that has found all the
    values of one type (the C passes of ``_dict_column_list`` and ``_tuple_columns``): its own check of
    that is then skipped, nothing else."""
    if isinstance(spec, tuple):
        return _tuple_block(spec, label)
    if isinstance(spec, dict):
        return _dict_block(spec, label)
    if spec.dtype == structure.STRING:
        return _string_block if spec.shape in ((), None) else _never
    if _scalar_type(spec) is not None:
        return _number_block(spec, label)
    return _array_block(spec)


def _never(values, homogeneous=False):
    return None


def _all_of_type(values, t) -> bool:
    return operator.countOf(map(type, values), t) == len(values)


def _tuple_block(spec, label):
    columns_of = _tuple_columns(spec, [block_converter(s, label) for s in spec])
    named, own = structure.is_namedtuple(spec), type(spec)

    def convert_tuples(values, homogeneous=False):
        columns = columns_of(values) if len(spec) else None
        if columns is None:
            return None
        rows = zip(*columns)
        return list(map(own._make, rows)) if named else list(rows)

    return convert_tuples


def _dict_block(spec, label):
    keys = tuple(spec)
    if not keys:
        return _never
    columns_of = _dict_column_list(keys, [block_converter(spec[k], label) for k in keys])
    rebuild = _dict_maker(keys)

    def convert_dicts(values, homogeneous=False):
        columns = columns_of(values)
        return None if columns is None else rebuild(columns)

    return convert_dicts


def _dict_maker(keys):
    """``columns -> [dict]`` in the signature's key order (as ``converter`` builds them). For string keys
    (the common case; their repr is exact) one generated comprehension of dict displays: ~30% faster than
    ``dict(zip(keys, row))`` per row."""
    if all(type(k) is str for k in keys):
        names = [f"v{i}" for i in range(len(keys))]
        source = (f"lambda columns: [{{{', '.join(f'{k!r}: {v}' for k, v in zip(keys, names))}}} "
                  f"for {', '.join(names)}, in zip(*columns)]")
        return eval(source, {"__builtins__": {"zip": zip}})  # noqa: S307 - built from reprs of str keys only
    return lambda columns: [dict(zip(keys, row)) for row in zip(*columns)]


def _string_block(values, homogeneous=False):
    """Scalar strings: bytes as they are, str encoded (UTF-8, as ``str.encode``)."""
    t = type(values[0])
    if not homogeneous and not _all_of_type(values, t):
        return None
    if t is bytes:
        return values
    if t is str:
        return list(map(str.encode, values))
    return None


_PY_NUMBERS = (int, float, bool)


def _number_block(spec, label):
    dtype = spec.dtype
    scalar_type = dtype.type
    int_scalar = dtype.kind in "iu"

    def convert_numbers(values, as_array=False, homogeneous=False):
        """The values as numpy scalars (a list), or with ``as_array`` as one array (``column_converter``);
        ``homogeneous``: the caller found every value of one type (``dict_columns``)."""
        t = type(values[0])
        if not homogeneous and not _all_of_type(values, t):
            return None
        if t is scalar_type:
            return np.array(values, dtype=dtype) if as_array else values
        if int_scalar and t is int:  # numpy raises OverflowError for any value the dtype cannot hold
            arr = np.array(values, dtype=dtype)
            return arr if as_array else list(arr)
        if t is float:  # Python floats are C doubles: float64 exactly, without numpy's type discovery
            arr = np.fromiter(values, np.float64, len(values))
            if dtype != arr.dtype:
                arr = cast(arr, dtype, values[0], label)
            return arr if as_array else list(arr)
        if t in _PY_NUMBERS or (issubclass(t, np.generic) and np.dtype(t).kind in "biuf"):
            arr = np.array(values)
            # one value alone would become an array of this dtype (Python ints beyond int64 would not)
            if arr.shape != (len(values),) or arr.dtype != np.asarray(values[0]).dtype:
                return None
            if arr.dtype != dtype:
                arr = cast(arr, dtype, values[0], label)
            return arr if as_array else list(arr)
        return None

    return convert_numbers


def _array_block(spec):
    dtype, shape = spec.dtype, spec.shape

    def convert_arrays(values, homogeneous=False):
        if type(values[0]) is not np.ndarray or not (homogeneous or _all_of_type(values, np.ndarray)):
            return None
        for v in values:
            if v.dtype != dtype:
                return None
        for s in {v.shape for v in values}:
            if not s or not structure.shape_compatible(shape, s):  # a 0-d array becomes a scalar
                return None
        return values

    return convert_arrays


# ------------------------------------------------------------------------------------------ a block as columns
def column_converter(spec, label: str):
    """``values -> stacked block`` for a whole block: the structure of the signature with one array per leaf
    (the block's rows), exactly what stacking ``[converter(spec)(v) for v in values]`` gives -- the same
    arrays, dtypes and structure (each dict in the signature's key order, as ``converter`` builds them) --
    whenever it returns one; None when the block needs the value-by-value way. Like ``block_converter`` it
    may raise anything for a block it cannot take, and it takes only what ``block_converter`` takes: it is
    that converter stopping before the rows are rebuilt.

    None (no converter) for a signature with a leaf that is not a scalar: arrays of a shape stay elements."""
    if isinstance(spec, tuple):
        parts = [column_converter(s, label) for s in spec]
        if not parts or any(p is None for p in parts):
            return None
        return _tuple_columns(spec, parts)
    if isinstance(spec, dict):
        parts = [column_converter(spec[k], label) for k in spec]
        if not parts or any(p is None for p in parts):
            return None
        return _dict_columns(spec, parts)
    if spec.shape != ():  # a shaped leaf (or one of unknown shape: a yielded array) is not a column of scalars
        return None
    if spec.dtype == structure.STRING:
        return _string_column
    convert = _number_block(spec, label)
    return lambda values, homogeneous=False: convert(values, as_array=True, homogeneous=homogeneous)


def dict_puller(spec, label: str, as_elements: bool = False):
    """For a signature that is a flat dict of scalar leaves, where the C pass is built: ``pull(iterator, n)
    -> (taken, count, stop, extra, rows)``, up to ``n`` values taken apart as they come (a generator that
    reuses its dict changes nothing already taken; ``_values_c.pull_dict_columns``). ``taken``: the stacked
    block (as ``column_converter`` makes it) or, ``as_elements``, the list of elements (as
    ``block_converter`` makes them); None when the column or block way does not take the rows, which
    ``rows`` then holds rebuilt as dicts for the value way. ``stop``/``extra`` as the C pass says. None for
    any other signature."""
    pull = _c_pull_dict_columns
    if pull is None or not isinstance(spec, dict) or not spec:
        return None
    if any(isinstance(s, (dict, tuple)) or s.shape != () for s in spec.values()):
        return None
    keys = tuple(spec)
    parts = [(block_converter if as_elements else column_converter)(spec[k], label) for k in keys]
    rebuild = _dict_maker(keys)

    def pull_dicts(iterator, n):
        columns, count, one_type, stop, extra = pull(iterator, n, keys)
        taken = None
        if count and one_type:
            try:
                converted = [part(column, homogeneous=True) for part, column in zip(parts, columns)]
            except Exception:  # noqa: BLE001 - not a block this way takes: the value way decides
                converted = [None]
            if all(c is not None for c in converted):
                taken = rebuild(converted) if as_elements else dict(zip(keys, converted))
        return taken, count, stop, extra, (rebuild(columns) if count and taken is None else [])

    return pull_dicts


def _tuple_columns(spec, parts):
    n = len(parts)
    named = structure.is_namedtuple(spec)
    own = type(spec)

    fast = _c_tuple_columns

    def tuple_columns(values, homogeneous=False):
        t = type(values[0])
        if not (t is tuple or (named and t is own)):
            return None
        if fast is not None:  # the C pass: every row of type t and length n, each position of one type
            split = fast(values, n)
            if split is None:
                return None
            columns = split
            for j, (part, column) in enumerate(zip(parts, split)):
                columns[j] = converted = part(column, homogeneous=True)
                if converted is None:
                    return None
            return own._make(columns) if named else tuple(columns)
        if not (homogeneous or _all_of_type(values, t)) or operator.countOf(map(len, values), n) != len(values):
            return None
        columns = []
        for part, column in zip(parts, zip(*values)):
            converted = part(column)
            if converted is None:
                return None
            columns.append(converted)
        return own._make(columns) if named else tuple(columns)

    return tuple_columns


def _dict_columns(spec, parts):
    keys = tuple(spec)
    columns_of = _dict_column_list(keys, parts)

    def dict_columns(values, homogeneous=False):  # (the plain-dict check is columns_of's in any case)
        columns = columns_of(values)
        return None if columns is None else dict(zip(keys, columns))

    return dict_columns


def _dict_column_list(keys, parts):
    """``values -> [column per key]`` (None: not plain dicts of exactly these keys, or a column it does not
    take). Each value's items are read by the signature's keys: a dict of exactly ``len(keys)`` keys that has
    every one of them has the signature's key set, the per-value check (``KeyError``: a key is missing)."""
    n = len(keys)
    fast = _c_dict_columns
    if fast is not None:  # the C pass: the same checks, each column's values of one type, in one walk
        def column_list_c(values):
            columns = fast(values, keys)
            if columns is None:
                return None
            for j, (part, column) in enumerate(zip(parts, columns)):
                columns[j] = converted = part(column, homogeneous=True)
                if converted is None:
                    return None
            return columns

        return column_list_c
    # one key's values at a time (a C-level map per key): ~15% cheaper than ``zip(*map(itemgetter(*keys),
    # values))``, which builds a tuple per value only to take it apart again
    getters = [operator.itemgetter(k) for k in keys]

    def column_list(values):
        if not _all_of_type(values, dict) or operator.countOf(map(len, values), n) != len(values):
            return None  # dict subclasses (and anything else) go value by value, as the check allows them
        columns = []
        for part, getter in zip(parts, getters):
            converted = part([*map(getter, values)])
            if converted is None:
                return None
            columns.append(converted)
        return columns

    return column_list


def _string_column(values, homogeneous=False):
    """Scalar strings as one object array of bytes (what stacking bytes elements gives): the values of one
    type, bytes as they are or str encoded (UTF-8, as ``_string_block``), encoded straight into the array."""
    t = type(values[0])
    if (t is not bytes and t is not str) or not (homogeneous or _all_of_type(values, t)):
        return None
    return np.fromiter(values if t is bytes else map(str.encode, values), dtype=object, count=len(values))


def _snapshot_py(value):
    """``value`` as it is now (the Python way of ``_values_c.snapshot``, which copies less: see
    ``pipeline/_values_c.c``): ``engine.blocks.snapshot_py``, every array copied."""
    return snapshot_py(value)


def _load_values_c():
    """The optional C passes (``pipeline/_values_c.c``): snapshots of yielded values, and the column passes
    of ``_dict_column_list`` and ``_tuple_columns``; None: not built (no compiler at install time) or
    disabled with ``JAXFEED_NO_C_EXT=1`` (read at import; tests flip ``snapshot``, ``_c_dict_columns``,
    ``_c_tuple_columns`` and ``_c_pull_dict_columns``, read when an iterator or converter is built)."""
    c = c_extensions.load("jaxfeed.pipeline._values_c")
    return None if c is None else (c.dict_columns, c.snapshot, c.tuple_columns, c.pull_dict_columns)


_values_c = _load_values_c()
_c_dict_columns, snapshot, _c_tuple_columns, _c_pull_dict_columns = (
    _values_c if _values_c is not None else (None, _snapshot_py, None, None))
